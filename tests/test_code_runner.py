"""run_tests on real programs through every test format: the grading semantics (docs/code_sandbox.md)."""

import asyncio
import json
import textwrap

import pytest

from hf_meds_cliff.code import (
    TEST_STATUSES,
    CodeTestsReward,
    SandboxLimits,
    arun_tests_batch,
    run_tests,
    run_tests_batch,
)

pytestmark = pytest.mark.timeout(180)
LIMITS = SandboxLimits(timeout_s=3, memory_mb=256, max_output_bytes=1 << 20)

ADD_STDIN = "a, b = map(int, input().split())\nprint(a + b)\n"
STDIN_TESTS = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}, {"input": "5 5\n", "output": "10\n"}]
HUMAN_EVAL = {
    "test": "def check(candidate):\n    assert candidate(2) == 4\n    assert abs(candidate(0.5) - 0.25) < 1e-9\n",
    "entry_point": "square",
}
MBPP = {"test_list": ["assert inc(1) == 2", "assert inc(SHIFT) == 11"], "test_setup_code": "SHIFT = 10"}


def statuses(result):
    return [case.status for case in result.results]


def test_stdin_program_passes_and_fails_per_test():
    result = run_tests(ADD_STDIN, STDIN_TESTS, limits=LIMITS)
    assert (
        result.passed and result.num_passed == 2 and result.fraction == 1.0 and result.first_failure is None
    )
    assert result.results[0].actual == "3\n" and result.program_found
    wrong = run_tests("print(3)\n", STDIN_TESTS, limits=LIMITS, stop_at_first_failure=False)
    assert statuses(wrong) == ["passed", "wrong_answer"] and wrong.fraction == 0.5 and not wrong.passed
    assert wrong.first_failure.index == 1 and wrong.first_failure.expected == "10\n"


def test_stdout_compared_per_line_and_as_decimals():
    tests = [{"input": "", "output": "0.5 2\nYES\n"}]
    assert run_tests('print("  0.50  2.0 ")\nprint("YES")\n\n', tests, limits=LIMITS).passed
    assert not run_tests('print("0.5 2")\nprint("yes")\n', tests, limits=LIMITS).passed


def test_nonzero_exit_fails_even_when_the_output_matched():
    for program in ("print(3)\nimport sys\nsys.exit(1)\n", "print(3)\nraise ValueError('late')\n"):
        result = run_tests(program, [{"input": "", "output": "3"}], limits=LIMITS)
        assert statuses(result) == ["runtime_error"], program
    assert run_tests(
        "print(3)\nimport sys\nsys.exit(0)\n", [{"input": "", "output": "3"}], limits=LIMITS
    ).passed


def test_stop_at_first_failure_and_max_tests():
    tests = [{"input": str(i) * (i + 1), "output": "x"} for i in range(5)]
    stopped = run_tests("print('y')\n", tests, limits=LIMITS)
    assert len(stopped.results) == 1 and stopped.num_tests == 5 and stopped.num_passed == 0
    everything = run_tests("print('y')\n", tests, limits=LIMITS, stop_at_first_failure=False)
    assert len(everything.results) == 5
    capped = run_tests("print('x')\n", tests, limits=LIMITS, max_tests=2)
    assert capped.passed and capped.num_tests == 2 and [case.index for case in capped.results] == [3, 4]


def test_functional_livecodebench_solution_class_and_top_level_tuple():
    tests = [{"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"}]
    program = "class Solution:\n    def shift(self, xs, k):\n        return tuple(x + k for x in xs)\n"
    result = run_tests(program, tests, fn_name="shift", limits=LIMITS)
    # the tuple arrives as a tuple (shown as such) and, at the top, counts as a list (LiveCodeBench's rule)
    assert result.passed and result.results[0].actual == "(4, 5)"


def test_livecodebench_imports_for_stdin_and_functional_programs_only():
    tests = [{"input": "[3, 1, 2]", "output": "[1, 2, 3]", "testtype": "functional"}]
    # LeetCode-style: `List` and `heapq` without importing them, as LiveCodeBench's grader allows
    program = "class Solution:\n    def srt(self, xs: List[int]) -> List[int]:\n        heapify(xs)\n"
    program += "        return [heappop(xs) for _ in range(len(xs))]\n"
    assert run_tests(program, tests, fn_name="srt", limits=LIMITS).passed
    bare = run_tests(program, tests, fn_name="srt", limits=LIMITS, livecodebench_imports=False)
    assert statuses(bare) == ["runtime_error"] and "NameError" in bare.first_failure.error
    assert run_tests("print(gcd(12, 18), sqrt(16))", [{"input": "", "output": "6 4.0"}], limits=LIMITS).passed
    # a function name the imports bind (math.gcd) is no free pass: the program must define it
    gcd_tests = {"inputs": [[12, 18]], "outputs": [6], "fn_name": "gcd"}
    assert statuses(run_tests("print('nothing here')\n", gcd_tests, limits=LIMITS)) == ["runtime_error"]
    assert run_tests(
        "def gcd(a, b):\n    return a if b == 0 else gcd(b, a % b)\n", gcd_tests, limits=LIMITS
    ).passed
    human_eval = {"test": "def check(candidate):\n    assert candidate() == 6\n", "entry_point": "g"}
    assert not run_tests("def g():\n    return gcd(12, 18)\n", human_eval, limits=LIMITS).passed


def test_functional_taco_call_based_accepts_wrapped_outputs():
    tests = {"inputs": [[2, 3], [0, 0]], "outputs": [[5], 0], "fn_name": "add"}
    assert run_tests("def add(a, b):\n    return a + b\n", tests, limits=LIMITS).passed
    wrong = run_tests("def add(a, b):\n    return a - b\n", tests, limits=LIMITS)
    assert statuses(wrong) == ["wrong_answer"]


def test_functional_results_cannot_decide_their_own_equality():
    tests = {"inputs": [[1]], "outputs": [[7]], "fn_name": "f"}
    always_equal = (
        "class Any:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Any()\n"
    )
    result = run_tests(always_equal, tests, limits=LIMITS)
    assert statuses(result) == ["runtime_error"] and "cannot be sent" in result.first_failure.error
    sneaky_list = (
        "class L(list):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return L([1])\n"
    )
    assert statuses(run_tests(sneaky_list, tests, limits=LIMITS)) == ["wrong_answer"]  # compared as [1]
    exits = "import sys\ndef f(x):\n    sys.exit(0)\n"
    assert statuses(run_tests(exits, tests, limits=LIMITS)) == ["runtime_error"]
    missing = run_tests("def g(x):\n    return 7\n", tests, limits=LIMITS)
    assert statuses(missing) == ["runtime_error"] and "no function 'f'" in missing.first_failure.error


def test_human_eval_and_mbpp_asserts():
    assert run_tests("def square(x):\n    return x * x\n", HUMAN_EVAL, limits=LIMITS).passed
    wrong = run_tests("def square(x):\n    return x + x\n", HUMAN_EVAL, limits=LIMITS)
    # a failed assert of the test code is a wrong answer; an exception of the program a runtime error
    assert statuses(wrong) == ["wrong_answer"] and "AssertionError" in wrong.first_failure.error
    raises = run_tests("def square(x):\n    raise AssertionError('mine')\n", HUMAN_EVAL, limits=LIMITS)
    assert statuses(raises) == ["runtime_error"] and "mine" in raises.first_failure.error
    assert run_tests("def inc(x):\n    return x + 1\n", MBPP, limits=LIMITS).passed
    half = run_tests(
        "def inc(x):\n    return 2 if x == 1 else 0\n", MBPP, limits=LIMITS, stop_at_first_failure=False
    )
    assert statuses(half) == ["passed", "wrong_answer"] and half.fraction == 0.5


@pytest.mark.parametrize(
    "trick",
    [
        "import sys\ndef square(x):\n    sys.exit(0)\n",
        "import os\ndef square(x):\n    os._exit(0)\n",
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef square(x):\n    return -1\n",
        "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\ndef square(x):\n    return -1\n",
        "raise SystemExit(0)\n",
        "import os\nos._exit(0)\n",
        (
            "class Yes:\n    def __eq__(self, other):\n        return True\n    __lt__ = __eq__\n"
            "    def __sub__(self, other):\n        return self\n    __abs__ = lambda self: 0\n"
            "def square(x):\n    return Yes()\n"
        ),
        "class I(int):\n    def __eq__(self, other):\n        return True\ndef square(x):\n    return I(0)\n",
        "import builtins\nbuiltins.abs = lambda x: 0\ndef square(x):\n    return 4 if x == 2 else 99\n",
        # forge the harness's confirmation on every descriptor without knowing the nonce
        (
            "import os\nfor fd in range(3, 1024):\n    try:\n        os.write(fd, (37).to_bytes(4, 'big') + b'N' + b'0' * 32)\n"
            "    except OSError:\n        pass\nos._exit(0)\n"
        ),
        # look for the nonce in the harness's frames (the test process is a copy of its parent) and send
        # every 32-byte candidate back on every descriptor
        (
            "import os, sys\nfound, frame = set(), sys._getframe()\nwhile frame is not None:\n"
            "    found.update(v for v in frame.f_locals.values() if isinstance(v, bytes) and len(v) == 32)\n"
            "    frame = frame.f_back\nfor fd in range(3, 1024):\n    for value in found:\n        try:\n"
            "            os.write(fd, (33).to_bytes(4, 'big') + b'N' + value)\n        except OSError:\n"
            "            pass\nos._exit(0)\n"
        ),
    ],
)
def test_assert_tests_pass_only_when_every_statement_ran(trick):
    result = run_tests(trick, HUMAN_EVAL, limits=LIMITS)
    # the program ended early (runtime error) or its answers failed the asserts (wrong answer)
    assert not result.passed and result.results[0].status in ("runtime_error", "wrong_answer"), (
        result.results[0]
    )


def test_assert_tests_accept_standard_library_values_unless_patched():
    counts = {"test_list": ["assert count('abca') == {'a': 2, 'b': 1, 'c': 1}"]}
    counter = "from collections import Counter\ndef count(text):\n    return Counter(text)\n"
    assert run_tests(counter, counts, limits=LIMITS).passed
    patched = "import collections\ncollections.Counter.__eq__ = lambda self, other: True\n" + counter.replace(
        "text)\n", "'zzz')\n"
    )
    assert not run_tests(patched, counts, limits=LIMITS).passed


def test_compile_error_time_limit_memory_limit_and_output_limit():
    stdin = [{"input": "", "output": "1"}]
    assert statuses(run_tests("def f(:\n", stdin, limits=LIMITS)) == ["compile_error"]
    fast = SandboxLimits(timeout_s=1, memory_mb=256, max_output_bytes=1 << 16)
    assert statuses(run_tests("while True:\n    pass\n", stdin, limits=fast)) == ["time_limit"]
    assert statuses(run_tests("import time\ntime.sleep(60)\n", stdin, limits=fast)) == ["time_limit"]
    assert statuses(run_tests("x = bytearray(1 << 30)\n", stdin, limits=fast)) == ["memory_limit"]
    flood = run_tests("while True:\n    print('x' * 1000)\n", stdin, limits=fast)
    assert statuses(flood) == ["runtime_error"] and "output exceeded" in flood.first_failure.error


def test_each_test_process_draws_its_own_random_seed():
    program = "import random\nprint(random.getrandbits(64))\n"
    runs = run_tests_batch(
        [(program, [{"input": "", "output": ""}] * 2)] * 2, limits=LIMITS, stop_at_first_failure=False
    )
    draws = [case.actual for run in runs for case in run.results]
    assert len(draws) == 4 and len(set(draws)) == 4, draws


def test_no_program_fails_without_running():
    result = run_tests(None, STDIN_TESTS, limits=LIMITS)
    assert not result.passed and not result.program_found and result.results == [] and result.num_tests == 2


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="max_tests=0"):
        run_tests("print(1)", STDIN_TESTS, max_tests=0)
    with pytest.raises(TypeError, match="SandboxLimits"):
        run_tests("print(1)", STDIN_TESTS, limits={"timeout_s": 1})
    with pytest.raises(ValueError, match="timeout_s=0"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match="isolation='maybe'"):
        SandboxLimits(isolation="maybe")
    with pytest.raises(ValueError, match=r"jobs\[0\]"):
        run_tests_batch([("print(1)",)])


def test_batch_and_async_batch_keep_job_order():
    jobs = [
        (ADD_STDIN, STDIN_TESTS),
        ("print(3)\n", STDIN_TESTS),
        (None, STDIN_TESTS),
        ("def add(a, b): return a+b", {"inputs": [[1, 1]], "outputs": [2]}, "add"),
    ]
    expected = [True, False, False, True]
    assert [run.passed for run in run_tests_batch(jobs, limits=LIMITS, max_workers=2)] == expected
    assert [
        run.passed for run in asyncio.run(arun_tests_batch(jobs, limits=LIMITS, max_workers=2))
    ] == expected


def test_code_tests_reward_binary_fraction_and_ungraded_rows():
    tests = json.dumps(STDIN_TESTS)
    completions = [
        f"Sum them.\n```python\n{ADD_STDIN}```",
        [{"role": "assistant", "content": "```python\nprint(3)\n```"}],
        "I do not know.",
        "```python\nprint(1)\n```",
    ]
    metrics, extra = {}, {}
    reward = CodeTestsReward(limits=LIMITS)
    scores = reward(
        completions,
        tests=[tests, tests, tests, ""],
        log_metric=metrics.__setitem__,
        log_extra=extra.__setitem__,
    )
    assert scores == [1.0, 0.0, 0.0, None]
    assert extra["code_status"] == ["passed", "wrong_answer", "no_program", None]
    assert metrics["code/passed_frac"] == pytest.approx(1 / 3) and metrics[
        "code/no_program_frac"
    ] == pytest.approx(1 / 3)
    assert {f"code/{status}_frac" for status in TEST_STATUSES[1:]} <= set(metrics)
    assert "code/not_isolated_frac" in metrics
    fraction = CodeTestsReward(mode="fraction", limits=LIMITS)
    assert fraction(completions[:3], tests=[tests] * 3) == [1.0, 0.5, 0.0]
    assert reward.counts["passed"] == 1 and reward.last_results[3] is None


def test_code_tests_reward_reads_fn_name_from_metadata():
    tests = json.dumps([{"input": "3", "output": "9", "testtype": "functional"}])
    reward = CodeTestsReward(limits=LIMITS)
    completion = "```python\nclass Solution:\n    def sq(self, x):\n        return x * x\n```"
    assert reward([completion], tests=[tests], metadata=[json.dumps({"func_name": "sq"})]) == [1.0]
    assert reward([completion], tests=[tests], fn_name=["sq"]) == [1.0]
    with pytest.raises(ValueError, match="row 0, field 'fn_name'"):
        reward([completion], tests=[tests])


def test_code_tests_reward_rejects_bad_settings_and_malformed_rows():
    with pytest.raises(ValueError, match="mode='partial'"):
        CodeTestsReward(mode="partial")
    with pytest.raises(ValueError, match="needs the dataset column 'tests'"):
        CodeTestsReward()(["x"])
    with pytest.raises(ValueError, match="row 1, field"):
        CodeTestsReward(limits=LIMITS)(["a", "b"], tests=[json.dumps(STDIN_TESTS), '[{"input": "1"}]'])


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_both_start_methods_give_the_same_verdicts(isolation):
    jobs = [
        (ADD_STDIN, STDIN_TESTS),
        ("print(3)\n", STDIN_TESTS),
        ("def square(x):\n    return x * x\n", HUMAN_EVAL),
    ]
    verdicts = {}
    for start_method in ("fork_server", "exec"):
        limits = SandboxLimits(**{**LIMITS.__dict__, "isolation": isolation, "start_method": start_method})
        runs = run_tests_batch(jobs, limits=limits, stop_at_first_failure=False)
        verdicts[start_method] = [[case.status for case in run.results] for run in runs]
    assert (
        verdicts["fork_server"]
        == verdicts["exec"]
        == [["passed"] * 2, ["passed", "wrong_answer"], ["passed"]]
    )


def test_async_reward_matches_the_sync_one_and_rewards_pickle():
    import pickle

    from hf_meds_cliff.code import AsyncCodeTestsReward

    tests = json.dumps(STDIN_TESTS)
    completions = [f"```python\n{ADD_STDIN}```", "```python\nprint(3)\n```", "none"]
    sync = CodeTestsReward(limits=LIMITS)
    asynchronous = AsyncCodeTestsReward(limits=LIMITS)
    expected = [1.0, 0.0, 0.0]
    assert sync(completions, tests=[tests] * 3) == expected
    assert asyncio.run(asynchronous(completions, tests=[tests] * 3)) == expected
    assert asynchronous.counts == sync.counts
    restored = pickle.loads(pickle.dumps(sync))
    assert restored(completions, tests=[tests] * 3) == expected and restored.__name__ == "code_tests"


def test_assert_values_keep_their_types_across_the_process_boundary():
    """Arguments and results cross as tagged data: tuples, sets, int keys, Fraction, Decimal, complex, bytes stay
    apart, and a list argument the program sorts in place is sorted for the test too."""
    program = textwrap.dedent(
        """
        from fractions import Fraction
        from decimal import Decimal
        def kinds(x):
            return [(1, 2), {3}, frozenset({4}), {5: "five"}, Fraction(1, 3), Decimal("0.10"), 1j, b"b", 10**30]
        def sort_in_place(xs):
            xs.sort()
        def echo(*args, **kwargs):
            return args, kwargs
        """
    )
    tests = {
        "test_list": [
            (
                "assert kinds(0) == [(1, 2), {3}, frozenset({4}), {5: 'five'}, Fraction(1, 3), Decimal('0.10'), "
                "1j, b'b', 10**30]"
            ),
            "assert type(kinds(0)[0]) is tuple and kinds(0)[0] != [1, 2] and {5: 'five'} != {'5': 'five'}",
            "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]",
            "assert echo((1,), k={2: (3,)}) == (((1,),), {'k': {2: (3,)}})",
        ],
        "test_setup_code": "from fractions import Fraction\nfrom decimal import Decimal",
    }
    result = run_tests(program, tests, limits=LIMITS, stop_at_first_failure=False)
    assert result.passed, result.results


def test_taco_functional_tests_keep_the_taco_rules():
    """TACO/APPS (and PrimeIntellect) keep their grader's rules: ``x`` matches ``[x]``, tuples match lists."""
    taco = {"inputs": [[1], [2]], "outputs": [[7], [[1, 2]]], "fn_name": "f"}
    program = "def f(x):\n    return 7 if x == 1 else (1, 2)\n"
    assert run_tests(program, taco, limits=LIMITS).passed
