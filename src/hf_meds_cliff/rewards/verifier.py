"""The project's single correctness function: last ``\\boxed{}`` checked against the ground truth.

:func:`check_answer` (one completion) and :func:`check_answers` (a batch) serve the training
rewards, Cliff's reference filter and the pass@k evaluation alike.

Why a worker pool: math-verify bounds its sympy work with ``signal.alarm``, which only works on the
main thread of the main interpreter (TRL may call reward functions from an event-loop thread), and a
pathological answer (``9^{9^{9^{9}}}``) can keep sympy busy in C code where no signal is handled.
So the verification runs with math-verify's own timeouts disabled in separate worker processes, and
a worker that misses its per-answer deadline is killed and replaced: the answer scores as
``"timeout"`` (not correct), the caller never hangs, and the other answers of the batch go on.

Two fast paths skip the workers entirely: two plain integers are compared as integers (every toy
answer and most AIME/GSM8K answers), and identical normalised strings are equal.

Degraded mode: where no worker process can be started (or restarted), each answer is
verified in a daemon thread joined with the timeout; a thread that runs over is abandoned (it keeps
its CPU until sympy returns) and the answer scores ``"timeout"``. ``MathVerifyPool.fallbacks`` counts
these.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..data import completion_text
from .extraction import canonical_integer, extract_boxed_answer, normalize_answer

logger = logging.getLogger(__name__)

STATUSES = ("correct", "wrong", "no_boxed", "timeout", "error")
"""Every :attr:`AnswerCheck.status` value."""

DEFAULT_TIMEOUT_SECONDS = 5.0
"""Per-answer wall-clock bound on math-verify (parsing both sides and comparing)."""

_WORKER_START_TIMEOUT_SECONDS = 120.0  # importing sympy in a fresh process on a loaded 2-core machine
_READY = "ready"


@dataclass(frozen=True)
class AnswerCheck:
    """Outcome of checking one completion.

    Attributes:
        correct: whether the extracted answer equals the ground truth.
        extracted: the content of the last ``\\boxed{}``, or ``None`` when there is none.
        status: one of :data:`STATUSES`; ``correct`` is True only for ``"correct"``.
    """

    correct: bool
    extracted: str | None
    status: str


def _strip_dollars(answer: str) -> str:
    return answer.strip().strip("$").strip()


def math_verify_equal(ground_truth: str, prediction: str) -> bool:
    """math-verify's verdict on two bare answers, in this thread and **without a time bound**.

    Both sides are wrapped in ``\\boxed{}`` so math-verify parses exactly the answer (no anchor
    heuristics). Call it through :class:`MathVerifyPool` unless the input is trusted.

    >>> math_verify_equal("\\\\frac{1}{2}", "0.5"), math_verify_equal("3", "4")
    (True, False)
    """
    from math_verify import parse, verify

    gold = parse("\\boxed{" + _strip_dollars(ground_truth) + "}", parsing_timeout=None)
    pred = parse("\\boxed{" + _strip_dollars(prediction) + "}", parsing_timeout=None)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def _verification_status(ground_truth: str, prediction: str) -> str:
    try:
        return "correct" if math_verify_equal(ground_truth, prediction) else "wrong"
    except Exception:  # sympy raises a zoo of types on odd input; an unverifiable answer is not correct
        logger.debug("math-verify failed on %r vs %r", ground_truth, prediction, exc_info=True)
        return "error"


def serve_verification_requests(requests: IO[bytes], replies: IO[bytes]) -> None:
    """Worker loop: one JSON ``[ground_truth, prediction]`` per line in, one status per line out.

    Runs in the worker processes (``python -m hf_meds_cliff.rewards._verify_worker``); the first line it
    writes is ``ready``, once math-verify is imported, so that deadlines cover only the work.
    """
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" warning is expected
    import math_verify  # noqa: F401

    replies.write(_READY.encode() + b"\n")
    replies.flush()
    for line in iter(requests.readline, b""):
        ground_truth, prediction = json.loads(line)
        replies.write(_verification_status(ground_truth, prediction).encode() + b"\n")
        replies.flush()


def _read_line(stream: IO[bytes], timeout: float) -> str | None:
    """One line from a worker, or ``None`` if none arrived within ``timeout`` (or the worker died)."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        return None
    line = stream.readline()
    return line.decode().strip() if line else None


class _Worker:
    """A ``python -m hf_meds_cliff.rewards._verify_worker`` child process with line-based pipes.

    A plain subprocess rather than ``multiprocessing``: spawn/forkserver re-import the caller's
    ``__main__`` (which re-runs unguarded training scripts and fails for stdin/notebook mains), and
    fork is unsafe next to torch's threads.
    """

    def __init__(self):
        package_root = str(Path(__file__).resolve().parents[2])  # so the child imports this very package
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [package_root, environment.get("PYTHONPATH")])
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hf_meds_cliff.rewards._verify_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=environment,
        )

    def wait_ready(self, timeout: float) -> bool:
        return _read_line(self.process.stdout, timeout) == _READY

    def send(self, ground_truth: str, prediction: str) -> None:
        payload = memoryview(json.dumps([ground_truth, prediction]).encode() + b"\n")
        while payload:  # a raw pipe write may be partial for long answers
            written = self.process.stdin.write(payload)
            payload = payload[written:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class MathVerifyPool:
    """Worker processes that run math-verify with a hard per-answer deadline.

    Thread-safe (calls are serialised) and lazy: workers start on the first non-trivial answer,
    only as many as there are answers in flight, and are reused. Workers that time out or crash are
    killed and replaced. ``restarts``, ``timeouts`` and ``fallbacks`` count degraded events.

    Args:
        num_workers: the most answers verified in parallel.
    """

    def __init__(self, num_workers: int = 2):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers={num_workers!r} must be a positive integer.")
        self.num_workers = num_workers
        self.restarts = 0
        self.timeouts = 0
        self.fallbacks = 0
        self._workers: list[_Worker | None] = [None] * num_workers
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()
        self._processes_unavailable = False

    def __getstate__(self):  # a pool is per process: a pickled copy starts without workers
        return {"num_workers": self.num_workers}

    def __setstate__(self, state):
        self.__init__(**state)

    def _start(self, slots: Sequence[int]) -> None:
        started = []
        for slot in slots:
            if self._workers[slot] is None:
                self._workers[slot] = _Worker()
                started.append(slot)
        for slot in started:
            if not self._workers[slot].wait_ready(_WORKER_START_TIMEOUT_SECONDS):
                self._workers[slot].kill()
                self._workers[slot] = None
                raise RuntimeError(
                    f"a math-verify worker did not start within {_WORKER_START_TIMEOUT_SECONDS:.0f} s"
                )

    def _replace(self, slot: int) -> None:
        worker = self._workers[slot]
        if worker is not None:
            worker.kill()
        self._workers[slot] = None
        self.restarts += 1

    def verify(self, pairs: Sequence[tuple[str, str]], timeout: float = DEFAULT_TIMEOUT_SECONDS) -> list[str]:
        """Status (``correct``/``wrong``/``timeout``/``error``) of each ``(ground_truth, prediction)``.

        ``timeout`` bounds each answer's verification from the moment a worker receives it.
        """
        if not timeout > 0:
            raise ValueError(f"timeout={timeout!r} must be a positive number of seconds.")
        if not pairs:
            return []
        with self._lock:
            if os.getpid() != self._owner_pid:  # a forked copy: the parent's workers are not ours
                self._workers = [None] * self.num_workers
                self._owner_pid = os.getpid()
            if not self._processes_unavailable:
                try:
                    self._start(range(min(self.num_workers, len(pairs))))
                except (OSError, RuntimeError) as error:
                    logger.warning(
                        "math-verify workers unavailable (%s); verifying in threads instead.", error
                    )
                    self._processes_unavailable = True
            if self._processes_unavailable:
                return [self._verify_in_thread(pair, timeout) for pair in pairs]
            return self._verify_in_workers(pairs, timeout)

    def _verify_in_thread(self, pair: tuple[str, str], timeout: float) -> str:
        self.fallbacks += 1
        result: dict[str, str] = {}
        thread = threading.Thread(
            target=lambda: result.setdefault("status", _verification_status(*pair)),
            daemon=True,
            name="hf-meds-cliff-math-verify",
        )
        thread.start()
        thread.join(timeout)
        if "status" not in result:
            self.timeouts += 1
            return "timeout"
        return result["status"]

    def _verify_in_workers(self, pairs: Sequence[tuple[str, str]], timeout: float) -> list[str]:
        results: list[str | None] = [None] * len(pairs)
        pending = collections.deque(range(len(pairs)))
        idle = collections.deque(range(min(self.num_workers, len(pairs))))
        busy: dict[int, tuple[int, float]] = {}  # slot -> (pair index, deadline)
        while pending or busy:
            while pending and idle:
                slot = idle.popleft()
                if self._workers[slot] is None:
                    try:
                        self._start([slot])
                    except (OSError, RuntimeError) as error:
                        logger.warning(
                            "Could not restart a math-verify worker (%s); verifying in threads.", error
                        )
                        self._processes_unavailable = True
                        while pending:
                            index = pending.popleft()
                            results[index] = self._verify_in_thread(pairs[index], timeout)
                        continue
                index = pending.popleft()
                try:
                    self._workers[slot].send(*pairs[index])
                except OSError:  # the worker died between answers: replace it and retry this answer
                    self._replace(slot)
                    pending.appendleft(index)
                    idle.append(slot)
                    continue
                busy[slot] = (index, time.monotonic() + timeout)
            if not busy:
                continue
            streams = {self._workers[slot].process.stdout: slot for slot in busy}
            next_deadline = min(deadline for _, deadline in busy.values())
            ready, _, _ = select.select(list(streams), [], [], max(0.0, next_deadline - time.monotonic()))
            for stream in ready:
                slot = streams[stream]
                index, _ = busy.pop(slot)
                line = stream.readline()
                status = line.decode().strip()
                if status in STATUSES:
                    results[index] = status
                else:  # crashed mid-answer (e.g. out of memory): not verifiable
                    results[index] = "error"
                    self._replace(slot)
                idle.append(slot)
            now = time.monotonic()
            for slot, (index, deadline) in list(busy.items()):
                if now >= deadline:
                    del busy[slot]
                    results[index] = "timeout"
                    self.timeouts += 1
                    self._replace(slot)
                    idle.append(slot)
        return [status or "error" for status in results]

    def close(self) -> None:
        """Stop the workers (they hold no state, so they are simply killed)."""
        with self._lock:
            for slot, worker in enumerate(self._workers):
                if worker is not None:
                    worker.kill()
                    self._workers[slot] = None


_default_pool: MathVerifyPool | None = None
_default_pool_lock = threading.Lock()


def default_pool() -> MathVerifyPool:
    """The process-wide pool (``HF_MEDS_CLIFF_VERIFY_WORKERS`` workers, default min(4, CPUs))."""
    global _default_pool
    with _default_pool_lock:
        if _default_pool is None:
            workers = int(os.environ.get("HF_MEDS_CLIFF_VERIFY_WORKERS", min(4, os.cpu_count() or 1)))
            _default_pool = MathVerifyPool(num_workers=max(1, workers))
            atexit.register(_default_pool.close)
        return _default_pool


def _ground_truth_text(ground_truth: Any) -> str:
    if ground_truth is None or isinstance(ground_truth, bool):
        raise ValueError(
            f"ground_truth={ground_truth!r} is not an answer; pass the reference answer as a string."
        )
    if isinstance(ground_truth, (int, float)):
        return str(ground_truth)
    if not isinstance(ground_truth, str):
        raise TypeError(
            f"ground_truth must be a string (or number), got {type(ground_truth).__name__}: {ground_truth!r:.80}"
        )
    return ground_truth


def check_answers(
    completions: Sequence[Any],
    ground_truths: Sequence[Any],
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    pool: MathVerifyPool | None = None,
) -> list[AnswerCheck]:
    """:func:`check_answer` for a batch, verifying the non-trivial answers in parallel.

    Args:
        completions: completion strings or TRL conversational completions (lists of messages).
        ground_truths: one reference answer per completion (bare, e.g. ``"\\frac{1}{2}"``).
        timeout: per-answer bound in seconds on math-verify.
        pool: the worker pool (default: :func:`default_pool`).

    >>> [c.status for c in check_answers(["\\\\boxed{12}", "\\\\boxed{13}", "12"], ["12", "12", "12"])]
    ['correct', 'wrong', 'no_boxed']
    """
    if len(completions) != len(ground_truths):
        raise ValueError(
            f"Got {len(completions)} completions but {len(ground_truths)} ground truths; pass one answer per completion."
        )
    checks: list[AnswerCheck | None] = [None] * len(completions)
    slow: list[tuple[int, str, str]] = []
    for index, (completion, ground_truth) in enumerate(zip(completions, ground_truths)):
        gold = _ground_truth_text(ground_truth)
        extracted = extract_boxed_answer(completion_text(completion))
        if extracted is None:
            checks[index] = AnswerCheck(correct=False, extracted=None, status="no_boxed")
            continue
        gold_integer, predicted_integer = canonical_integer(gold), canonical_integer(extracted)
        if gold_integer is not None and predicted_integer is not None:
            equal = gold_integer == predicted_integer
            checks[index] = AnswerCheck(
                correct=equal, extracted=extracted, status="correct" if equal else "wrong"
            )
        elif normalize_answer(gold) == normalize_answer(extracted):
            checks[index] = AnswerCheck(correct=True, extracted=extracted, status="correct")
        else:
            slow.append((index, gold, extracted))
    if slow:
        statuses = (pool or default_pool()).verify([(gold, pred) for _, gold, pred in slow], timeout=timeout)
        for (index, _, extracted), status in zip(slow, statuses):
            checks[index] = AnswerCheck(correct=status == "correct", extracted=extracted, status=status)
    return checks  # type: ignore[return-value]


def check_answer(
    completion: Any, ground_truth: Any, *, timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> AnswerCheck:
    """Whether the last ``\\boxed{}`` of ``completion`` equals ``ground_truth`` (math-verify).

    Safe on any thread and bounded in time (see the module docstring); never raises on a bad
    completion, only on a missing/ill-typed ground truth.

    >>> check_answer("7 + 5 = 12. The answer is \\\\boxed{12}.", "12")
    AnswerCheck(correct=True, extracted='12', status='correct')
    >>> check_answer("The answer is \\\\boxed{\\\\dfrac{1}{2}}", "0.5").correct
    True
    >>> check_answer("I give up.", "12").status
    'no_boxed'
    """
    return check_answers([completion], [ground_truth], timeout=timeout)[0]
