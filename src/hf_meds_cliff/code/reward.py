"""``CodeTestsReward``: a TRL reward function that runs each completion's program against its row's tests."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from ..text import completion_text
from .extraction import extract_program
from .formats import has_tests, parse_tests
from .runner import TEST_STATUSES, TestRunResult, arun_tests_batch, run_tests_batch
from .sandbox import SandboxLimits

REWARD_MODES: tuple[str, ...] = ("binary", "fraction")


def _row_fn_name(position: int, fn_name: Sequence[Any] | None, metadata: Sequence[Any] | None) -> str | None:
    if fn_name is not None and fn_name[position]:
        return str(fn_name[position])
    if metadata is not None:
        value = metadata[position]
        if isinstance(value, str) and value.strip():
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ValueError(f"metadata of row {position} is not valid JSON: {value!r:.200}") from None
        if isinstance(value, Mapping):
            name = value.get("func_name") or value.get("fn_name")
            return str(name) if name else None
    return None


class CodeTestsReward:
    """1.0 when the program of a completion passes every test of its row, else 0.0 (``mode="binary"``,
    the Cliff paper's rule), or the share of tests passed (``mode="fraction"``, for GRPO baselines; point
    the trainers' 0/1 correctness check at a binary reward).

    The program is the last fenced Python (or untagged) code block of the completion; a completion
    without one scores 0.0. A row whose ``tests`` are missing or empty scores ``None`` (TRL: "cannot
    grade"); malformed tests raise ``ValueError`` naming the row and field. Functional tests take their
    function name from an ``fn_name`` column or a ``metadata`` column (``func_name``). Every program runs
    in its own sandbox (:func:`~hf_meds_cliff.code.run_tests`), concurrently across cores.

    Per call it logs, through TRL's ``log_metric`` hook: ``code/passed_frac``, ``code/no_program_frac``,
    ``code/not_isolated_frac`` (programs that ran without namespace isolation), ``code/comparison_errors``
    (tests whose output raised while it was decoded or compared: each is a ``wrong_answer``),
    ``code/cleanup_failures`` (entries of test folders and memory groups that could not be removed: counted, never
    raised), ``code/memory_fallback_frac`` (programs whose ``memory_mb`` ran under the conservative fallback, not a
    memory group per test), and per verdict of the
    first failing test ``code/<status>_frac``; through ``log_extra`` each completion's ``code_status``.
    :attr:`last_results` keeps the call's :class:`TestRunResult` list (``None`` for ungraded rows),
    :attr:`counts` the cumulative counts.

    Args:
        mode: ``"binary"`` or ``"fraction"``.
        limits: the :class:`SandboxLimits` of every run.
        max_tests: run only the ``max_tests`` tests with the longest inputs (DeepCoder keeps 15).
        stop_at_first_failure: ``None``: stop in binary mode (the rest cannot change the score), run every
            test in fraction mode.
        max_workers: concurrent sandboxes (default: one per usable core).
        tests_column: the dataset column holding the tests.
        livecodebench_imports: give stdin and functional programs the imports LiveCodeBench's grader gives
            them (see :func:`~hf_meds_cliff.code.run_tests`).

    >>> reward = CodeTestsReward(limits=SandboxLimits(timeout_s=5))
    >>> tests = '[{"input": "2 3\\\\n", "output": "5\\\\n", "testtype": "stdin"}]'
    >>> reward(["```python\\na, b = map(int, input().split())\\nprint(a + b)\\n```", "```python\\nprint(6)\\n```",
    ...         "no code", "```python\\nprint(1)\\n```"], tests=[tests, tests, tests, None])
    [1.0, 0.0, 0.0, None]
    """

    def __init__(
        self,
        mode: Literal["binary", "fraction"] = "binary",
        limits: SandboxLimits | None = None,
        max_tests: int | None = None,
        *,
        stop_at_first_failure: bool | None = None,
        max_workers: int | None = None,
        tests_column: str = "tests",
        livecodebench_imports: bool = True,
    ):
        if mode not in REWARD_MODES:
            raise ValueError(f"mode={mode!r} must be one of {REWARD_MODES}.")
        if limits is not None and not isinstance(limits, SandboxLimits):
            raise TypeError(f"limits must be a SandboxLimits, got {type(limits).__name__}")
        if max_tests is not None and (
            not isinstance(max_tests, int) or isinstance(max_tests, bool) or max_tests < 1
        ):
            raise ValueError(f"max_tests={max_tests!r} must be a positive integer, or None for every test.")
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(
                f"max_workers={max_workers!r} must be a positive integer, or None for one per core."
            )
        if not isinstance(tests_column, str) or not tests_column:
            raise ValueError(f"tests_column={tests_column!r} must name a dataset column, e.g. 'tests'.")
        self.mode = mode
        self.limits = limits if limits is not None else SandboxLimits()
        self.max_tests = max_tests
        self.stop_at_first_failure = (
            (mode == "binary") if stop_at_first_failure is None else bool(stop_at_first_failure)
        )
        self.max_workers = max_workers
        self.tests_column = tests_column
        self.livecodebench_imports = bool(livecodebench_imports)
        self.counts: collections.Counter[str] = collections.Counter()
        self.last_results: list[TestRunResult | None] = []
        self.__name__ = "code_tests"  # TRL names the reward column (and `rewards/<name>/mean`) after it

    def __call__(
        self,
        completions: Sequence[Any],
        tests: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        jobs, positions = self._jobs(completions, tests, kwargs)
        runs = run_tests_batch(jobs, max_workers=self.max_workers, **self._run_settings())
        return self._scores(len(completions), positions, runs, log_metric, log_extra)

    def _run_settings(self) -> dict[str, Any]:
        return {
            "limits": self.limits,
            "stop_at_first_failure": self.stop_at_first_failure,
            "max_tests": self.max_tests,
            "livecodebench_imports": self.livecodebench_imports,
        }

    def _jobs(self, completions: Sequence[Any], tests: Sequence[Any] | None, kwargs: dict[str, Any]):
        """The (program, parsed tests) of every gradable row, and those rows' positions."""
        column = tests if self.tests_column == "tests" else kwargs.get(self.tests_column)
        if column is None:
            raise ValueError(
                f"CodeTestsReward needs the dataset column {self.tests_column!r}, but the call has only "
                f"{sorted(kwargs)}. Add that column or pass CodeTestsReward(tests_column=...)."
            )
        if len(column) != len(completions):
            raise ValueError(
                f"Got {len(column)} test rows for {len(completions)} completions; they must align."
            )
        fn_names, metadata = kwargs.get("fn_name"), kwargs.get("metadata")
        jobs, positions = [], []
        for position, (completion, raw_tests) in enumerate(zip(completions, column)):
            if not has_tests(raw_tests):
                continue
            parsed = parse_tests(raw_tests, fn_name=_row_fn_name(position, fn_names, metadata), row=position)
            jobs.append((extract_program(completion_text(completion)), parsed))
            positions.append(position)
        return jobs, positions

    def _scores(
        self,
        num_rows: int,
        positions: list[int],
        runs: list[TestRunResult],
        log_metric: Callable[[str, float], None] | None,
        log_extra: Callable[[str, list], None] | None,
    ) -> list[float | None]:
        results: list[TestRunResult | None] = [None] * num_rows
        for position, run in zip(positions, runs):
            results[position] = run
        self.last_results = results
        statuses = [None if run is None else _run_status(run) for run in results]
        self.counts.update(status for status in statuses if status is not None)
        graded = [run for run in results if run is not None]
        if log_metric is not None and graded:
            ran = [run for run in graded if run.program_found]
            log_metric("code/passed_frac", sum(run.passed for run in graded) / len(graded))
            log_metric("code/no_program_frac", sum(not run.program_found for run in graded) / len(graded))
            log_metric(
                "code/not_isolated_frac", sum(not run.isolated for run in ran) / len(ran) if ran else 0.0
            )
            # outputs that raised while being decoded or compared (each such test is a wrong_answer)
            log_metric("code/comparison_errors", float(sum(run.comparison_errors for run in graded)))
            # entries of test folders and memory groups the sandboxes could not remove (counted, never raised)
            log_metric("code/cleanup_failures", float(sum(run.cleanup_failures for run in graded)))
            # programs whose memory_mb was enforced by the conservative fallback instead of a memory group
            log_metric(
                "code/memory_fallback_frac",
                sum(not str(run.memory_bound).startswith("cgroup") for run in ran) / len(ran) if ran else 0.0,
            )
            for status in TEST_STATUSES[1:]:
                log_metric(f"code/{status}_frac", statuses.count(status) / len(graded))
        if log_extra is not None:
            log_extra("code_status", statuses)
        if self.mode == "binary":
            return [None if run is None else (1.0 if run.passed else 0.0) for run in results]
        return [None if run is None else (run.fraction if run.program_found else 0.0) for run in results]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(mode={self.mode!r}, limits={self.limits!r}, max_tests={self.max_tests}, "
            f"stop_at_first_failure={self.stop_at_first_failure}, max_workers={self.max_workers})"
        )


class AsyncCodeTestsReward(CodeTestsReward):
    """:class:`CodeTestsReward` as a coroutine: TRL (1.16) awaits async reward functions on its event
    loop, concurrently with the other async reward functions of the step, instead of blocking on it. Same
    arguments, scores and metrics.

    >>> import asyncio
    >>> reward = AsyncCodeTestsReward(limits=SandboxLimits(timeout_s=5))
    >>> asyncio.run(reward(["```python\\nprint(5)\\n```"], tests=['[{"input": "", "output": "5"}]']))
    [1.0]
    """

    async def __call__(  # type: ignore[override]
        self,
        completions: Sequence[Any],
        tests: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        jobs, positions = self._jobs(completions, tests, kwargs)
        runs = await arun_tests_batch(jobs, max_workers=self.max_workers, **self._run_settings())
        return self._scores(len(completions), positions, runs, log_metric, log_extra)


def is_code_reward(reward: Any) -> bool:
    """Whether ``reward`` is the code-test reward (:class:`CodeTestsReward` or its async form): how MEDS and Cliff
    tell a code run from a math run.

    >>> is_code_reward(CodeTestsReward()), is_code_reward(len)
    (True, False)
    """
    return isinstance(reward, CodeTestsReward)


def _run_status(run: TestRunResult) -> str:
    """One word per program: ``passed``, ``no_program``, or the status of its first failing test."""
    if not run.program_found:
        return "no_program"
    if run.passed:
        return "passed"
    return run.first_failure.status if run.first_failure is not None else "sandbox_error"
