"""The teacher protocol: solve a problem, judge a numbered rollout against a verified reference.

A teacher never raises out of :meth:`Teacher.judge`: every failure comes back as a
:class:`Judgment` whose ``status`` names it, so that one bad answer or a flaky endpoint cannot stop
a long training run. What the trainer does with each status:

==================== ============================================================ =======================
status               meaning                                                      trainer outcome
==================== ============================================================ =======================
``ok``               a verdict and/or a first-mistake id were read                 p(a) = ``first_mistake``
                     (``first_mistake=None`` = the teacher found no mistake)       (None on a verifier-
                                                                                   wrong rollout: p(a)=0,
                                                                                   counted as disagreement)
``empty``            the teacher answered nothing, or the rollout had no sentence  p(a) = 0 for the rollout
``parse_error``      no JSON object / no readable field in the answer              p(a) = 0 for the rollout
``missing_field``    a JSON object without a first-mistake field                   p(a) = 0 for the rollout
``invalid_field``    first-mistake value not an integer id (e.g. ``"two"``)        p(a) = 0 for the rollout
``out_of_range``     id outside ``[0, number of sentences)`` (and not -1)          p(a) = 0 for the rollout
``error``            an unexpected exception inside the teacher (logged)           p(a) = 0 for the rollout
``timeout``          the endpoint timed out after all retries                      group falls back to GRPO
``http_error``       HTTP 4xx/5xx after all retries                               group falls back to GRPO
``connection_error`` the endpoint could not be reached after all retries           group falls back to GRPO
``bad_response``     HTTP 200 whose body is not an OpenAI chat completion         group falls back to GRPO
==================== ============================================================ =======================

The last four are *endpoint failures* (:func:`is_endpoint_failure`): nothing is known about the
rollout, so the trainer treats the whole group as plain GRPO for the step and the run continues.

:meth:`Teacher.solve` reports a failed call the same way, as a :class:`SolveFailure` with one of these
statuses: an endpoint failure there also makes the group fall back as an endpoint failure
(``groups_fallback_endpoint``), whichever call failed; ``None`` means the teacher has no solution
(the group falls back as unverified, ``groups_fallback_unverified``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "ENDPOINT_FAILURES",
    "JUDGMENT_STATUSES",
    "Judgment",
    "SolveFailure",
    "Teacher",
    "is_endpoint_failure",
]

ENDPOINT_FAILURES = frozenset({"timeout", "http_error", "connection_error", "bad_response"})
"""Statuses meaning the teacher endpoint failed (the group falls back to GRPO)."""

JUDGMENT_STATUSES = frozenset(
    {"ok", "empty", "parse_error", "missing_field", "invalid_field", "out_of_range", "error"}
    | ENDPOINT_FAILURES
)
"""Every status a :class:`Judgment` may carry (see the module docstring for the outcome of each)."""


@dataclass
class Judgment:
    """A teacher's judgment of one (incorrect) rollout.

    Attributes:
        first_mistake: sentence index of the first mistake; ``None`` = no mistake found, or unknown
            when ``status != "ok"``.
        verdict_correct: the teacher's verdict on the rollout's final answer; ``None`` if not given.
        status: ``"ok"`` or a failure kind (see the module docstring).
        raw: the teacher's raw answer (or the error message), for logs and debugging.
    """

    first_mistake: int | None
    verdict_correct: bool | None
    status: str
    raw: str = ""

    def __post_init__(self) -> None:
        if self.status not in JUDGMENT_STATUSES:
            raise ValueError(
                f"Unknown judgment status {self.status!r}; use one of {sorted(JUDGMENT_STATUSES)}."
            )

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class SolveFailure:
    """What :meth:`Teacher.solve` returns instead of a solution when the call failed.

    Attributes:
        status: a failure kind of :data:`JUDGMENT_STATUSES` (``"connection_error"``, ``"timeout"``, ``"error"``,
            ...); an endpoint failure (:func:`is_endpoint_failure`) makes the group fall back as
            ``fallback_endpoint``, any other as ``fallback_unverified``.
        message: what went wrong, for logs.

    It is falsy, like the ``None`` of a teacher that has no solution.

    >>> bool(SolveFailure("timeout"))
    False
    """

    status: str
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in JUDGMENT_STATUSES - {"ok"}:
            raise ValueError(
                f"Unknown solve failure status {self.status!r}; use one of {sorted(JUDGMENT_STATUSES - {'ok'})}."
            )

    def __bool__(self) -> bool:
        return False


def is_endpoint_failure(result: Judgment | SolveFailure) -> bool:
    """True when the teacher endpoint failed (timeout, HTTP error, unreachable, garbled response).

    >>> is_endpoint_failure(Judgment(None, None, "timeout"))
    True
    >>> is_endpoint_failure(Judgment(None, None, "parse_error"))
    False
    >>> is_endpoint_failure(SolveFailure("connection_error"))
    True
    """
    return result.status in ENDPOINT_FAILURES


@runtime_checkable
class Teacher(Protocol):
    """What the Cliff trainer needs from a teacher.

    Implementations are safe to call concurrently from one event loop (they bound their own
    concurrency) and keep a ``counters`` mapping (calls, retries, failures by kind) for metrics.
    """

    name: str

    async def solve(self, problem: str) -> str | SolveFailure | None:
        """A reference solution ending in ``\\boxed{...}`` (code: a program in a fenced block); never raises.

        ``None`` when the teacher has no solution; a :class:`SolveFailure` naming why the call failed (a teacher
        returning ``None`` for every failure works too, but its endpoint failures then count as unverified).
        """
        ...

    async def judge(self, problem: str, reference: str, sentences: Sequence[str]) -> Judgment:
        """Judge a rollout given as its sentences (numbered ``[0]``, ``[1]``, ...); never raises.

        Code rollouts: ``sentences`` are the units of :func:`~hf_meds_cliff.cliff.split_code_units` and the
        reference is a program that passed the row's tests. A teacher whose ``judge`` also takes a keyword
        argument ``execution: str | None`` receives what running the student's program showed (the first
        failing test's input, expected and actual output, or the error kind); the protocol passes it only to
        teachers that take it, so a teacher without it works unchanged.
        """
        ...

    async def aclose(self) -> None:
        """Release connections/threads; the teacher may not be used afterwards."""
        ...
