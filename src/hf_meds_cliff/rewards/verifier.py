"""The project's single correctness function: the boxed final answer checked against the ground truth.

:func:`check_answer` (one completion) and :func:`check_answers` (a batch) serve the training
rewards, Cliff's reference filter and the pass@k evaluation alike.

What decides: math-verify, on the final answer (the last ``\\boxed{}`` and the boxes math-verify
joins to it, see :mod:`hf_meds_cliff.rewards.extraction`) against the bare ground truth, each
wrapped in ``\\boxed{}``. Two shortcuts decide without math-verify, and only where they are exact:
two plain integers (sign and digits only: no separators, spaces or decimal point) are compared
digit for digit, and an answer written as the ground truth is correct (:func:`same_written_answer`:
identical up to ``\\dfrac``/``\\frac`` and ``\\left``/``\\right``, or two plain decimals of the same
value). Everything else,
``1,000``, ``32, 349``, ``2 3``, ``\\frac12``, goes to math-verify. A shortcut never says "correct"
where math-verify would say "wrong": a reward that pays wrong answers gets exploited.

Before math-verify, a deterministic cap: an answer longer than ``max_answer_chars`` (default 1000)
or nested deeper than ``max_answer_depth`` brackets (default 8; ``{``, ``(`` and ``[`` count), each
raised to the ground truth's own length/depth when that is larger, scores ``"refused"`` without
being parsed. math-verify's LaTeX parser is exponential in nesting (a 14-level ``\\frac`` takes
seconds, a 20-level one minutes), so without the cap such an answer is scored by whichever of
parser and timeout finishes first, which depends on the machine's load.

Why a worker pool: math-verify bounds its sympy work with ``signal.alarm``, which only works on the
main thread of the main interpreter (TRL may call reward functions from an event-loop thread), and a
pathological answer (``9^{9^{9^{9}}}``) can keep sympy busy in C code where no signal is handled.
So the verification runs with math-verify's own timeouts disabled in separate worker processes, and
a worker that misses its per-answer deadline is killed and replaced: the answer scores as
``"timeout"`` (not correct), the caller never hangs, and the other answers of the batch go on. An
optional per-batch budget (``batch_timeout``) bounds a whole call: answers not verified when it runs
out score ``"timeout"`` too (``MathVerifyPool.budget_timeouts`` counts them). The budget is a fixed number
of seconds or a :class:`ScaledBatchTimeout`, which grows with the number of answers that actually go to
math-verify in that call (after the exact shortcuts, the cap and the cache). Identical
``(ground truth, answer, settings)`` pairs are verified once per batch and remembered (a bounded
cache of definite verdicts; timeouts are not remembered).

Workers die with the process that started them: on Linux they ask the kernel for ``SIGKILL`` when
their parent goes (``PR_SET_PDEATHSIG``; they are started from one long-lived thread because the
kernel ties that signal to the starting *thread*), and everywhere a watchdog thread in the worker
exits when the parent pid changes. A trainer killed with ``SIGKILL``/``SIGTERM`` mid-check leaves no
worker behind.

Degraded mode: where no worker process can be started (or restarted), each answer is
verified in a daemon thread joined with the timeout; a thread that runs over is abandoned (it keeps
its CPU until sympy returns) and the answer scores ``"timeout"``. ``MathVerifyPool.fallbacks`` counts
these.
"""

from __future__ import annotations

import atexit
import collections
import decimal
import json
import logging
import os
import queue
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..text import completion_text
from .extraction import canonical_integer, extract_final_boxes, nesting_depth, strip_math_delimiters

logger = logging.getLogger(__name__)

STATUSES = ("correct", "wrong", "no_boxed", "refused", "timeout", "error")
"""Every :attr:`AnswerCheck.status` value."""

DEFAULT_TIMEOUT_SECONDS = 5.0
"""Per-answer wall-clock bound on math-verify (parsing both sides and comparing)."""

DEFAULT_FLOAT_ROUNDING = 6
"""math-verify's ``float_rounding``: decimal places floats are rounded to before comparing (its default)."""

DEFAULT_MAX_ANSWER_CHARS = 1000
"""Answers longer than this (or than the ground truth, if longer) score ``"refused"`` unparsed."""

DEFAULT_MAX_ANSWER_DEPTH = 8
"""Answers nested deeper than this (or than the ground truth, if deeper) score ``"refused"`` unparsed."""

_WORKER_START_TIMEOUT_SECONDS = 120.0  # importing sympy in a fresh process on a loaded 2-core machine
_READY = "ready"
_CACHE_SIZE = 16384
_CACHED_STATUSES = frozenset({"correct", "wrong", "error"})  # definite verdicts; never "timeout"


@dataclass(frozen=True)
class AnswerCheck:
    """Outcome of checking one completion.

    Attributes:
        correct: whether the extracted answer equals the ground truth.
        extracted: the final answer (boxes joined with ``,``), or ``None`` when there is none.
        status: one of :data:`STATUSES`; ``correct`` is True only for ``"correct"``.
    """

    correct: bool
    extracted: str | None
    status: str


def _validate_settings(float_rounding: Any, strict: Any) -> None:
    if isinstance(float_rounding, bool) or not isinstance(float_rounding, int) or float_rounding < 0:
        raise ValueError(
            f"float_rounding={float_rounding!r} must be a non-negative integer (decimal places; "
            f"math-verify's default is {DEFAULT_FLOAT_ROUNDING})."
        )
    if not isinstance(strict, bool):
        raise TypeError(f"strict={strict!r} must be True or False (math-verify's default is True).")


@dataclass(frozen=True)
class ScaledBatchTimeout:
    """A per-call budget that grows with the work: ``base_seconds + seconds_per_answer * n`` seconds, where
    ``n`` is the number of answers of the call that actually go to math-verify (not those settled by the
    integer or written-out shortcuts, refused by the cap, without a box, or answered by the cache or by an
    identical answer of the same call).

    The defaults (:data:`DEFAULT_BATCH_TIMEOUT`): 120 s, the old fixed budget, which also covers starting the
    workers (importing sympy in fresh processes on a loaded machine), plus 1 s per answer, about eight times
    the 0.12 s per answer that ``check_answers`` took with 2 workers on a loaded 2-core machine
    (``docs/answer_checking.md``). So a large per-rank batch of slow answers is not cut by a constant, while a
    batch of pathological answers still stops long before ``timeout x answers / workers``.

    >>> ScaledBatchTimeout(base_seconds=10, seconds_per_answer=0.5).seconds(4)
    12.0
    >>> DEFAULT_BATCH_TIMEOUT.seconds(0), DEFAULT_BATCH_TIMEOUT.seconds(512)
    (120.0, 632.0)
    """

    base_seconds: float = 120.0
    seconds_per_answer: float = 1.0

    def __post_init__(self):
        for name in ("base_seconds", "seconds_per_answer"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"ScaledBatchTimeout({name}={value!r}): must be a number of seconds >= 0.")
        if not self.base_seconds + self.seconds_per_answer > 0:
            raise ValueError(
                f"ScaledBatchTimeout(base_seconds={self.base_seconds!r}, seconds_per_answer="
                f"{self.seconds_per_answer!r}) allows no time at all; make one of them positive."
            )

    def seconds(self, num_answers: int) -> float:
        """The budget of a call that sends ``num_answers`` answers to math-verify."""
        return float(self.base_seconds + self.seconds_per_answer * num_answers)


DEFAULT_BATCH_TIMEOUT = ScaledBatchTimeout()
"""The default per-call budget of :class:`~hf_meds_cliff.rewards.MathAnswerReward`: 120 s + 1 s per answer
verified by math-verify."""


def _batch_timeout_seconds(
    batch_timeout: float | ScaledBatchTimeout | None, num_answers: int
) -> float | None:
    """The budget in seconds of a call sending ``num_answers`` answers to math-verify (``None``: no bound)."""
    if batch_timeout is None:
        return None
    if isinstance(batch_timeout, ScaledBatchTimeout):
        return batch_timeout.seconds(num_answers)
    return float(batch_timeout)


def _validate_batch_timeout(batch_timeout: Any, name: str = "batch_timeout") -> None:
    if batch_timeout is None or isinstance(batch_timeout, ScaledBatchTimeout):
        return
    if (
        isinstance(batch_timeout, bool)
        or not isinstance(batch_timeout, (int, float))
        or not batch_timeout > 0
    ):
        raise ValueError(
            f"{name}={batch_timeout!r} must be a positive number of seconds (a fixed budget), a "
            "ScaledBatchTimeout (a budget that grows with the answers verified) or None (no bound)."
        )


def math_verify_equal(
    ground_truth: str,
    prediction: str,
    *,
    float_rounding: int = DEFAULT_FLOAT_ROUNDING,
    strict: bool = True,
) -> bool:
    """math-verify's verdict on two bare answers, in this thread and **without a time bound**.

    Both sides are wrapped in ``\\boxed{}`` so math-verify parses exactly the answer (no anchor
    heuristics). Call it through :class:`MathVerifyPool` unless the input is trusted.

    Args:
        float_rounding: decimal places floats are rounded to before comparing (math-verify's
            ``float_rounding``).
        strict: math-verify's strict mode: variables matter (``f(x) != f(y)``) and sets are not
            tuples; ``False`` matches variables by position.

    >>> math_verify_equal("\\\\frac{1}{2}", "0.5"), math_verify_equal("3", "4")
    (True, False)
    >>> math_verify_equal("f(x)", "f(y)"), math_verify_equal("f(x)", "f(y)", strict=False)
    (False, True)
    """
    from math_verify import parse, verify

    gold = parse("\\boxed{" + strip_math_delimiters(ground_truth) + "}", parsing_timeout=None)
    pred = parse("\\boxed{" + strip_math_delimiters(prediction) + "}", parsing_timeout=None)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, float_rounding=float_rounding, strict=strict, timeout_seconds=None))


def _verification_status(
    ground_truth: str, prediction: str, float_rounding: int = DEFAULT_FLOAT_ROUNDING, strict: bool = True
) -> str:
    try:
        equal = math_verify_equal(ground_truth, prediction, float_rounding=float_rounding, strict=strict)
        return "correct" if equal else "wrong"
    except Exception:  # sympy raises a zoo of types on odd input; an unverifiable answer is not correct
        logger.debug("math-verify failed on %r vs %r", ground_truth, prediction, exc_info=True)
        return "error"


def serve_verification_requests(requests: IO[bytes], replies: IO[bytes]) -> None:
    """Worker loop: one JSON ``[ground_truth, prediction, float_rounding, strict]`` per line in, one
    status per line out.

    Runs in the worker processes (``python -m hf_meds_cliff.rewards._verify_worker``); the first line it
    writes is ``ready``, once math-verify is imported, so that deadlines cover only the work.
    """
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" warning is expected
    import math_verify  # noqa: F401

    replies.write(_READY.encode() + b"\n")
    replies.flush()
    for line in iter(requests.readline, b""):
        ground_truth, prediction, float_rounding, strict = json.loads(line)
        replies.write(_verification_status(ground_truth, prediction, float_rounding, strict).encode() + b"\n")
        replies.flush()


def _read_line(stream: IO[bytes], timeout: float) -> str | None:
    """One line from a worker, or ``None`` if none arrived within ``timeout`` (or the worker died)."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        return None
    line = stream.readline()
    return line.decode().strip() if line else None


class _Spawner:
    """Starts worker processes from one daemon thread that lives as long as this process.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that started a child ends, not the process: a worker
    started from a short-lived thread (a thread pool, TRL's event loop) would be killed under a live
    trainer. Starting every worker here ties their lives to the process instead.
    """

    def __init__(self):
        self.pid = os.getpid()
        self._requests: queue.Queue = queue.Queue()
        threading.Thread(target=self._serve, daemon=True, name="hf-meds-cliff-verify-spawner").start()

    def _serve(self) -> None:
        while True:
            arguments, reply = self._requests.get()
            try:
                reply.put((True, subprocess.Popen(**arguments)))
            except BaseException as error:  # noqa: BLE001 - handed to the caller, who raises it
                reply.put((False, error))

    def popen(self, **arguments) -> subprocess.Popen:
        reply: queue.Queue = queue.Queue(maxsize=1)
        self._requests.put((arguments, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def _spawn(**arguments) -> subprocess.Popen:
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner.pid != os.getpid():  # none yet, or a forked copy without the thread
            _spawner = _Spawner()
        spawner = _spawner
    return spawner.popen(**arguments)


class _Worker:
    """A ``python -m hf_meds_cliff.rewards._verify_worker`` child process with line-based pipes.

    A plain subprocess rather than ``multiprocessing``: spawn/forkserver re-import the caller's
    ``__main__`` (which re-runs unguarded training scripts and fails for stdin/notebook mains), and
    fork is unsafe next to torch's threads. It gets this process's pid to watch (see the module
    docstring: workers die with their parent).
    """

    def __init__(self):
        package_root = str(Path(__file__).resolve().parents[2])  # so the child imports this very package
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [package_root, environment.get("PYTHONPATH")])
        )
        self.process = _spawn(
            args=[sys.executable, "-m", "hf_meds_cliff.rewards._verify_worker", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=environment,
        )

    def wait_ready(self, timeout: float) -> bool:
        return _read_line(self.process.stdout, timeout) == _READY

    def send(self, request: tuple[str, str, int, bool]) -> None:
        payload = memoryview(json.dumps(list(request)).encode() + b"\n")
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


_Request = tuple  # (ground_truth, prediction, float_rounding, strict)


class MathVerifyPool:
    """Worker processes that run math-verify with a hard per-answer deadline.

    Thread-safe (calls are serialised) and lazy: workers start on the first non-trivial answer,
    only as many as there are answers in flight, and are reused. Workers that time out or crash are
    killed and replaced. ``restarts``, ``timeouts`` (``budget_timeouts`` of them because the batch
    budget ran out), ``fallbacks`` and ``cache_hits`` (answers settled by an identical one, in the
    same batch or remembered) count events.

    Args:
        num_workers: the most answers verified in parallel.
    """

    def __init__(self, num_workers: int = 2):
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers={num_workers!r} must be a positive integer.")
        self.num_workers = num_workers
        self.restarts = 0
        self.timeouts = 0
        self.budget_timeouts = 0
        self.fallbacks = 0
        self.cache_hits = 0
        self._workers: list[_Worker | None] = [None] * num_workers
        self._cache: collections.OrderedDict[_Request, str] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._owner_pid = os.getpid()
        self._processes_unavailable = False

    def __getstate__(self):  # a pool is per process: a pickled copy starts without workers
        return {"num_workers": self.num_workers}

    def __setstate__(self, state):
        self.__init__(**state)

    def worker_pids(self) -> list[int]:
        """Process ids of the running workers (for monitoring)."""
        return [w.process.pid for w in self._workers if w is not None and w.process.poll() is None]

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

    def verify(
        self,
        pairs: Sequence[tuple[str, str]],
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        *,
        float_rounding: int = DEFAULT_FLOAT_ROUNDING,
        strict: bool = True,
        batch_timeout: float | ScaledBatchTimeout | None = None,
    ) -> list[str]:
        """Status (``correct``/``wrong``/``timeout``/``error``) of each ``(ground_truth, prediction)``.

        ``timeout`` bounds each answer's verification from the moment a worker receives it;
        ``batch_timeout`` (optional) bounds the whole call, counted from its start: what is not verified by
        then is ``timeout``. A :class:`ScaledBatchTimeout` is sized by the answers that reach a worker (the
        distinct pairs not in the cache). ``float_rounding`` and ``strict`` are math-verify's settings.
        """
        if not timeout > 0:
            raise ValueError(f"timeout={timeout!r} must be a positive number of seconds.")
        _validate_batch_timeout(batch_timeout)
        _validate_settings(float_rounding, strict)
        if not pairs:
            return []
        started = time.monotonic()
        requests = [(str(gold), str(pred), float_rounding, strict) for gold, pred in pairs]
        with self._lock:
            statuses: dict[_Request, str] = {}
            for request in requests:
                if request in self._cache and request not in statuses:
                    self._cache.move_to_end(request)
                    statuses[request] = self._cache[request]
            unique = list(dict.fromkeys(request for request in requests if request not in statuses))
            self.cache_hits += len(requests) - len(unique)  # answers not sent to a worker
            if unique:
                budget = _batch_timeout_seconds(batch_timeout, len(unique))
                deadline = None if budget is None else started + budget
                for request, status in zip(unique, self._verify_unique(unique, timeout, deadline)):
                    statuses[request] = status
                    if status in _CACHED_STATUSES:
                        self._cache[request] = status
                        if len(self._cache) > _CACHE_SIZE:
                            self._cache.popitem(last=False)
            return [statuses[request] for request in requests]

    def _verify_unique(self, requests: list[_Request], timeout: float, deadline: float | None) -> list[str]:
        if os.getpid() != self._owner_pid:  # a forked copy: the parent's workers are not ours
            self._workers = [None] * self.num_workers
            self._owner_pid = os.getpid()
        if not self._processes_unavailable:
            try:
                self._start(range(min(self.num_workers, len(requests))))
            except (OSError, RuntimeError) as error:
                logger.warning("math-verify workers unavailable (%s); verifying in threads instead.", error)
                self._processes_unavailable = True
        if self._processes_unavailable:
            return [self._verify_in_thread(request, timeout, deadline) for request in requests]
        return self._verify_in_workers(requests, timeout, deadline)

    def _budget_exhausted(self, deadline: float | None) -> bool:
        return deadline is not None and time.monotonic() >= deadline

    def _count_timeout(self, budget: bool) -> str:
        self.timeouts += 1
        self.budget_timeouts += int(budget)
        return "timeout"

    def _verify_in_thread(self, request: _Request, timeout: float, deadline: float | None) -> str:
        if self._budget_exhausted(deadline):
            return self._count_timeout(budget=True)
        self.fallbacks += 1
        result: dict[str, str] = {}
        thread = threading.Thread(
            target=lambda: result.setdefault("status", _verification_status(*request)),
            daemon=True,
            name="hf-meds-cliff-math-verify",
        )
        thread.start()
        bound = timeout if deadline is None else min(timeout, max(0.0, deadline - time.monotonic()))
        thread.join(bound)
        if "status" not in result:
            return self._count_timeout(budget=bound < timeout)
        return result["status"]

    def _verify_in_workers(
        self, requests: list[_Request], timeout: float, deadline: float | None
    ) -> list[str]:
        results: list[str | None] = [None] * len(requests)
        pending = collections.deque(range(len(requests)))
        idle = collections.deque(range(min(self.num_workers, len(requests))))
        busy: dict[int, tuple[int, float]] = {}  # slot -> (request index, its own deadline)
        while pending or busy:
            if self._budget_exhausted(deadline):
                for slot, (index, _) in list(busy.items()):  # abandon the answers in flight
                    results[index] = self._count_timeout(budget=True)
                    self._replace(slot)
                busy.clear()
                while pending:
                    results[pending.popleft()] = self._count_timeout(budget=True)
                break
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
                            results[index] = self._verify_in_thread(requests[index], timeout, deadline)
                        continue
                index = pending.popleft()
                try:
                    self._workers[slot].send(requests[index])
                except OSError:  # the worker died between answers: replace it and retry this answer
                    self._replace(slot)
                    pending.appendleft(index)
                    idle.append(slot)
                    continue
                busy[slot] = (index, time.monotonic() + timeout)
            if not busy:
                continue
            streams = {self._workers[slot].process.stdout: slot for slot in busy}
            next_deadline = min(own_deadline for _, own_deadline in busy.values())
            if deadline is not None:
                next_deadline = min(next_deadline, deadline)
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
            for slot, (index, own_deadline) in list(busy.items()):
                if now >= own_deadline:
                    del busy[slot]
                    results[index] = self._count_timeout(budget=False)
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


_PLAIN_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
_DELIMITER_SIZING = re.compile(r"\\(?:left|right)(?=[()\[\]|]|\\[{}])")
_FRACTION_VARIANTS = re.compile(r"\\[dtc]frac(?![A-Za-z])")


def same_written_answer(prediction: str, ground_truth: str) -> bool:
    """Whether two bare answers are the same answer *as written*, so equal without asking math-verify.

    Exact only: the same string once ``\\dfrac``/``\\tfrac``/``\\cfrac`` are read as ``\\frac`` and
    ``\\left``/``\\right`` before a delimiter are dropped (typography), or two plain decimals with the
    same value (``12.50`` and ``12.5``). Spaces, separators and everything else stay significant: a
    ``False`` here means "ask math-verify", never "wrong".

    >>> same_written_answer("\\\\dfrac{1}{2}", "\\\\frac{1}{2}"), same_written_answer("12.50", "12.5")
    (True, True)
    >>> same_written_answer("\\\\left(1,2\\\\right)", "(1,2)"), same_written_answer("32, 349", "32,349")
    (True, False)
    """
    if prediction == ground_truth:
        return True
    if _PLAIN_DECIMAL.fullmatch(prediction) and _PLAIN_DECIMAL.fullmatch(ground_truth):
        return decimal.Decimal(prediction) == decimal.Decimal(ground_truth)

    def typeset(answer: str) -> str:
        return _DELIMITER_SIZING.sub("", _FRACTION_VARIANTS.sub("\\\\frac", answer))

    return typeset(prediction) == typeset(ground_truth)


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer.")


def answer_refused(
    prediction: str,
    ground_truth: str,
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
    max_answer_depth: int = DEFAULT_MAX_ANSWER_DEPTH,
) -> bool:
    """Whether an answer is too long or too deeply nested to hand to math-verify (see the module docstring).

    The limits are raised to the ground truth's own length and depth, so an answer shaped like the
    reference is never refused.

    >>> deep = "2"
    >>> for _ in range(400):
    ...     deep = "\\\\frac{1}{" + deep + "}"
    >>> answer_refused(deep, "\\\\frac{1}{2}"), answer_refused("\\\\frac{\\\\sqrt{3}}{2}", "1")
    (True, False)
    """
    gold = strip_math_delimiters(ground_truth)
    return len(prediction) > max(max_answer_chars, len(gold)) or nesting_depth(prediction) > max(
        max_answer_depth, nesting_depth(gold)
    )


def check_answers(
    completions: Sequence[Any],
    ground_truths: Sequence[Any],
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    pool: MathVerifyPool | None = None,
    float_rounding: int = DEFAULT_FLOAT_ROUNDING,
    strict: bool = True,
    batch_timeout: float | ScaledBatchTimeout | None = None,
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
    max_answer_depth: int = DEFAULT_MAX_ANSWER_DEPTH,
) -> list[AnswerCheck]:
    """:func:`check_answer` for a batch, verifying the non-trivial answers in parallel.

    Args:
        completions: completion strings or TRL conversational completions (lists of messages).
        ground_truths: one reference answer per completion (bare, e.g. ``"\\frac{1}{2}"``).
        timeout: per-answer bound in seconds on math-verify.
        pool: the worker pool (default: :func:`default_pool`).
        float_rounding: math-verify's ``float_rounding`` (decimal places; default 6, its own).
        strict: math-verify's strict mode (default True, its own): variables matter, sets are not tuples.
        batch_timeout: optional bound on the math-verify work of the whole batch, in seconds or as a
            :class:`ScaledBatchTimeout` (sized by the answers that go to math-verify); the answers not
            verified by then score ``"timeout"``.
        max_answer_chars: longer answers score ``"refused"`` (raised to the ground truth's length).
        max_answer_depth: more deeply nested answers score ``"refused"`` (raised to the ground truth's).

    >>> [c.status for c in check_answers(["\\\\boxed{12}", "\\\\boxed{13}", "12"], ["12", "12", "12"])]
    ['correct', 'wrong', 'no_boxed']
    """
    if len(completions) != len(ground_truths):
        raise ValueError(
            f"Got {len(completions)} completions but {len(ground_truths)} ground truths; pass one answer per completion."
        )
    _validate_settings(float_rounding, strict)
    _validate_batch_timeout(batch_timeout)
    _positive_int("max_answer_chars", max_answer_chars)
    _positive_int("max_answer_depth", max_answer_depth)
    checks: list[AnswerCheck | None] = [None] * len(completions)
    slow: list[tuple[int, str, str, str]] = []
    for index, (completion, ground_truth) in enumerate(zip(completions, ground_truths)):
        gold = strip_math_delimiters(_ground_truth_text(ground_truth))
        boxes = extract_final_boxes(completion_text(completion))
        if not boxes:
            checks[index] = AnswerCheck(correct=False, extracted=None, status="no_boxed")
            continue
        extracted = ",".join(boxes)
        prediction = strip_math_delimiters(extracted)
        gold_integer, predicted_integer = canonical_integer(gold), canonical_integer(prediction)
        if gold_integer is not None and predicted_integer is not None:  # exact: two plain integers
            equal = gold_integer == predicted_integer
            checks[index] = AnswerCheck(
                correct=equal, extracted=extracted, status="correct" if equal else "wrong"
            )
        elif same_written_answer(prediction, gold):  # exact: the ground truth written out
            checks[index] = AnswerCheck(correct=True, extracted=extracted, status="correct")
        elif answer_refused(prediction, gold, max_answer_chars, max_answer_depth):
            checks[index] = AnswerCheck(correct=False, extracted=extracted, status="refused")
        else:
            slow.append((index, gold, prediction, extracted))
    if slow:
        statuses = (pool or default_pool()).verify(
            [(gold, prediction) for _, gold, prediction, _ in slow],
            timeout=timeout,
            float_rounding=float_rounding,
            strict=strict,
            batch_timeout=batch_timeout,
        )
        for (index, _, _, extracted), status in zip(slow, statuses):
            checks[index] = AnswerCheck(correct=status == "correct", extracted=extracted, status=status)
    return checks  # type: ignore[return-value]


def check_answer(
    completion: Any,
    ground_truth: Any,
    *,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    float_rounding: int = DEFAULT_FLOAT_ROUNDING,
    strict: bool = True,
) -> AnswerCheck:
    """Whether the boxed final answer of ``completion`` equals ``ground_truth`` (math-verify).

    Safe on any thread and bounded in time (see the module docstring); never raises on a bad
    completion, only on a missing/ill-typed ground truth.

    >>> check_answer("7 + 5 = 12. The answer is \\\\boxed{12}.", "12")
    AnswerCheck(correct=True, extracted='12', status='correct')
    >>> check_answer("The answer is \\\\boxed{\\\\dfrac{1}{2}}", "0.5").correct
    True
    >>> check_answer("The answer is \\\\boxed{32, 349}", "32349").correct  # a pair, not a number
    False
    >>> check_answer("I give up.", "12").status
    'no_boxed'
    """
    return check_answers(
        [completion], [ground_truth], timeout=timeout, float_rounding=float_rounding, strict=strict
    )[0]
