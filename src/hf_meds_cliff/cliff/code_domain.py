"""Cliff on code: which domain a run is in, the code ground truth, the reference filter and the test report.

The paper's second domain: the student writes a program, the correctness reward is 1 only when it passes every
test (:class:`hf_meds_cliff.code.CodeTestsReward`, ``mode="binary"``). What changes against math:

- **Units**: a rollout is numbered by :func:`~hf_meds_cliff.cliff.split_code_units` (prose sentences, one unit per
  non-blank program line) instead of :func:`~hf_meds_cliff.cliff.split_sentences`.
- **Ground truth**: the row's tests (and the function name of functional tests), carried through the protocol as
  one JSON string (:func:`code_ground_truth`) so the step's rows stay plain, gatherable and loggable data.
- **Reference filter**: the teacher's program counts as a verified reference only when it passes the row's tests in
  the sandbox (:meth:`CodeTestRunner.verify`).
- **Judge input**: the teacher also sees what running the student's program showed: the first failing test's
  input, expected and actual output, or the error kind (:meth:`CodeTestRunner.describe_failure`). The tests are
  hidden from the student, never from the judge.

Programs only ever run through :func:`hf_meds_cliff.code.run_tests` (the sandbox and its threat model live there).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..code.reward import is_code_reward  # its home is the code room; re-exported here

logger = logging.getLogger(__name__)

__all__ = [
    "CLIFF_DOMAINS",
    "CodeTestRunner",
    "code_ground_truth",
    "describe_test_run",
    "function_name_of_row",
    "is_code_reward",
    "resolve_cliff_domain",
    "tests_column_of",
]

CLIFF_DOMAINS = ("auto", "math", "code")
"""Values of ``CliffConfig.cliff_domain``: ``auto`` reads the domain from the correctness reward."""

_STATUS_WORDS = {
    "wrong_answer": "wrong answer",
    "time_limit": "time limit exceeded (the program is too slow or never ends: check the algorithm's complexity "
    "and its loops)",
    "memory_limit": "memory limit exceeded",
    "runtime_error": "runtime error",
    "compile_error": "the program does not compile (syntax error)",
    "sandbox_error": "the sandbox failed to run the program (this says nothing about the program)",
}


def resolve_cliff_domain(
    configured: str, correctness_reward: Any, columns: Sequence[str] | None, tests_column: str = "tests"
) -> str:
    """The domain of a Cliff run: ``"math"`` or ``"code"``.

    ``configured`` is ``CliffConfig.cliff_domain``. ``"auto"`` gives ``"code"`` when the correctness reward is a
    :class:`~hf_meds_cliff.code.CodeTestsReward` and ``"math"`` otherwise. A code run needs the tests: a dataset
    whose columns are known and lack ``tests_column`` is an error naming the column and the fix.

    >>> resolve_cliff_domain("auto", lambda completions, **kwargs: [1.0], ["prompt", "answer"])
    'math'
    >>> resolve_cliff_domain("code", None, ["prompt"], "tests")
    Traceback (most recent call last):
    ...
    ValueError: Cliff on code (cliff_domain='code') needs the tests of each row, but the training dataset has no ...
    """
    if configured not in CLIFF_DOMAINS:
        raise ValueError(f"cliff_domain={configured!r} is unknown; use one of {list(CLIFF_DOMAINS)}.")
    domain = configured
    if domain == "auto":
        domain = "code" if is_code_reward(correctness_reward) else "math"
    if domain == "code" and columns is not None and tests_column not in columns:
        raise ValueError(
            f"Cliff on code (cliff_domain={configured!r}) needs the tests of each row, but the training dataset has "
            f"no {tests_column!r} column (columns: {list(columns)}). Point --cliff_tests_column at the column with "
            "the tests (DeepCoder: 'tests'), or use --cliff_domain math for a math dataset."
        )
    return domain


def tests_column_of(correctness_reward: Any, configured: str = "tests") -> str:
    """The dataset column Cliff reads the tests from: the one the code reward grades with.

    ``configured`` is ``CliffConfig.cliff_tests_column``; left at its default ``"tests"`` it follows a
    :class:`~hf_meds_cliff.code.CodeTestsReward` built with another ``tests_column``. Naming a different column than
    the reward's is an error (the reference would be verified on other tests than the student's).
    """
    if not is_code_reward(correctness_reward) or correctness_reward.tests_column == configured:
        return configured
    if configured == "tests":
        return correctness_reward.tests_column
    raise ValueError(
        f"cliff_tests_column={configured!r} but the correctness reward grades the tests of column "
        f"{correctness_reward.tests_column!r}; Cliff must verify references and show failing tests from the same "
        f"column: set --cliff_tests_column {correctness_reward.tests_column}."
    )


def function_name_of_row(row: Mapping[str, Any]) -> str | None:
    """The function name of functional tests: a ``fn_name`` column, else DeepCoder's ``metadata["func_name"]``
    (the metadata may be a JSON string); ``None`` for stdin problems.

    >>> function_name_of_row({"fn_name": "solve"}), function_name_of_row({"metadata": '{"func_name": "f"}'})
    ('solve', 'f')
    >>> function_name_of_row({"metadata": {}}) is None
    True
    """
    name = row.get("fn_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    metadata = row.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            return None
    if isinstance(metadata, Mapping):
        name = metadata.get("func_name") or metadata.get("fn_name")
        if isinstance(name, str) and name.strip():
            return name.strip()
    return None


def code_ground_truth(row: Mapping[str, Any], tests_column: str = "tests") -> str | None:
    """The code ground truth of a dataset row: ``{"tests": <the tests as given>, "fn_name": ...}`` as JSON.

    ``None`` when the row has no tests (such a group cannot verify a reference and falls back to GRPO, counted).
    The tests keep their raw form (a JSON string or a list/dict); :func:`hf_meds_cliff.code.parse_tests` reads it.

    >>> code_ground_truth({"tests": '[{"input": "1\\\\n", "output": "2\\\\n", "testtype": "stdin"}]'})
    '{"tests": "[{\\\\"input\\\\": \\\\"1\\\\\\\\n\\\\", ...", "fn_name": null}'
    >>> code_ground_truth({"tests": ""}) is None
    True
    """
    tests = row.get(tests_column)
    if tests is None or (isinstance(tests, (str, Sequence, Mapping)) and len(tests) == 0):
        return None
    try:
        return json.dumps({"tests": tests, "fn_name": function_name_of_row(row)}, ensure_ascii=False)
    except TypeError as error:
        raise TypeError(
            f"The {tests_column!r} value of a row is not JSON data ({type(tests).__name__}: {error}); give the tests "
            "as a JSON string or as lists/dicts of str, numbers and bools."
        ) from error


def _cut(text: Any, max_chars: int) -> str:
    """``text`` without its final line break (it would show as a blank line in the fence), cut to ``max_chars``."""
    text = "" if text is None else str(text)
    text = text.removesuffix("\n")
    return (
        text
        if len(text) <= max_chars
        else text[:max_chars] + f"... [{len(text) - max_chars} more characters]"
    )


def describe_test_run(result: Any, max_chars: int = 1500) -> str:
    """What the judge reads about the student's program: the first failing test, or why nothing ran.

    ``result`` is a :class:`hf_meds_cliff.code.TestRunResult` (``None``: no program was found). Inputs and outputs
    are cut to ``max_chars``.
    """
    if result is None or not result.program_found:
        return "No program: the answer has no fenced code block, so no test could run."
    failure = result.first_failure
    if failure is None:
        return f"The program passed all {result.num_tests} tests that were run."
    status = _STATUS_WORDS.get(failure.status, failure.status)
    parts = [
        f"The program failed test {failure.index + 1} of {result.num_tests}: {status}.",
        f"Input:\n```\n{_cut(failure.input, max_chars)}\n```",
        f"Expected output:\n```\n{_cut(failure.expected, max_chars)}\n```",
    ]
    if failure.actual is not None and failure.status in ("wrong_answer", "runtime_error", "time_limit"):
        parts.append(f"Actual output:\n```\n{_cut(failure.actual, max_chars)}\n```")
    if failure.error:
        parts.append(f"Error:\n```\n{_cut(failure.error, max_chars)}\n```")
    return "\n".join(parts)


class CodeTestRunner:
    """Runs programs on a row's tests for the Cliff protocol (reference filter and judge input).

    Args:
        limits: :class:`hf_meds_cliff.code.SandboxLimits` (defaults to the sandbox's own).
        max_tests: run at most this many tests per program (None = all).
        max_chars: cut of each input/output shown to the judge.

    Both methods are synchronous and may take seconds; the protocol runs them in worker threads.
    """

    def __init__(self, limits: Any = None, max_tests: int | None = None, max_chars: int = 1500):
        if max_tests is not None and (not isinstance(max_tests, int) or max_tests < 1):
            raise ValueError(f"max_tests={max_tests!r} must be None (all tests) or an int >= 1.")
        self.limits = limits
        self.max_tests = max_tests
        self.max_chars = max_chars

    @classmethod
    def from_reward(cls, reward: Any) -> CodeTestRunner:
        """A runner with the same sandbox limits and test cap as a :class:`~hf_meds_cliff.code.CodeTestsReward`."""
        return cls(limits=getattr(reward, "limits", None), max_tests=getattr(reward, "max_tests", None))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(limits={self.limits!r}, max_tests={self.max_tests!r})"

    def run(self, completion: str, ground_truth: str) -> Any:
        """:func:`hf_meds_cliff.code.run_tests` of the last fenced program of ``completion`` on the tests of
        ``ground_truth`` (a :func:`code_ground_truth` string), stopping at the first failure; ``None`` when
        ``completion`` holds no program (nothing runs)."""
        from hf_meds_cliff.code import extract_program, run_tests

        program = extract_program(completion)
        if program is None:
            return None
        truth = json.loads(ground_truth)
        return run_tests(
            program,
            truth["tests"],
            fn_name=truth.get("fn_name"),
            limits=self.limits,
            stop_at_first_failure=True,
            max_tests=self.max_tests,
        )

    def verify(self, solution: str, ground_truth: str) -> bool:
        """The reference filter: True when the teacher's program passes every test of the row."""
        result = self.run(solution, ground_truth)
        return result is not None and bool(result.passed)

    def describe_failure(self, completion: str, ground_truth: str | None) -> str | None:
        """:func:`describe_test_run` of the student's program (None without a ground truth)."""
        if ground_truth is None:
            return None
        return describe_test_run(self.run(completion, ground_truth), self.max_chars)
