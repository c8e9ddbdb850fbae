"""What the Cliff teacher costs during training: per-step ``cliff/teacher_*`` metrics and the run's total.

The paper does not report the teacher's cost; a user choosing between a 32B served teacher, a hosted API and the
free rule-based checker needs it. Per generation round the trainer logs (:func:`teacher_step_cost`):

- ``cliff/teacher_requests``: requests sent to the teacher (an HTTP teacher's own count, retries included; for a
  teacher that sends no requests, e.g. a local model or the rule-based checker, its solve and judge calls);
- ``cliff/teacher_prompt_tokens`` / ``cliff/teacher_completion_tokens``: the server's ``usage`` summed over those
  requests (0 when the teacher reports none);
- ``cliff/teacher_time_s``: wall time of the round's teacher protocol (solve, verify, judge; what the policy waits
  for);
- ``cliff/teacher_time_fraction``: ``teacher_time_s`` divided by the wall time of the training cycle it belongs to,
  from the end of the previous round's judging to the end of this one's (generation, scoring, judging and the
  optimizer steps on the previous batch); the first round, which has no previous one, is measured from the start
  of its generation.

The totals go into the model card (:func:`render_teacher_cost`) and are saved with checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["COST_KEYS", "render_teacher_cost", "teacher_step_cost"]

COST_KEYS = ("requests", "prompt_tokens", "completion_tokens", "teacher_time_s", "cycle_time_s", "rounds")
"""Keys of the running totals (``rounds``: generation rounds judged)."""


def teacher_step_cost(
    teacher_counts: Mapping[str, float],
    protocol_counts: Mapping[str, float],
    teacher_time_s: float,
    cycle_time_s: float,
    counts_requests: bool,
) -> dict[str, float]:
    """The ``teacher_*`` metrics of one generation round.

    Args:
        teacher_counts: what the teacher counted this round (``requests``, ``prompt_tokens``, ``completion_tokens``;
            summed over processes).
        protocol_counts: the protocol's counters of the round (``solve_calls``, ``judge_calls``).
        teacher_time_s: wall time of the round's teacher protocol.
        cycle_time_s: wall time of the training cycle (see the module docstring).
        counts_requests: whether the teacher counts requests itself (an HTTP teacher); otherwise its calls are
            the requests.

    >>> teacher_step_cost({"requests": 5, "prompt_tokens": 900, "completion_tokens": 120}, {"judge_calls": 4}, 1.5, 6.0, True)
    {'requests': 5.0, 'prompt_tokens': 900.0, 'completion_tokens': 120.0, 'time_s': 1.5, 'time_fraction': 0.25}
    >>> teacher_step_cost({}, {"solve_calls": 1, "judge_calls": 3}, 0.2, 0.0, False)["requests"]
    4.0
    """
    if counts_requests:
        requests = float(teacher_counts.get("requests", 0))
    else:
        requests = float(protocol_counts.get("solve_calls", 0) + protocol_counts.get("judge_calls", 0))
    return {
        "requests": requests,
        "prompt_tokens": float(teacher_counts.get("prompt_tokens", 0)),
        "completion_tokens": float(teacher_counts.get("completion_tokens", 0)),
        "time_s": float(teacher_time_s),
        "time_fraction": teacher_time_s / cycle_time_s if cycle_time_s > 0 else float("nan"),
    }


def render_teacher_cost(totals: Mapping[str, Any], teacher: str) -> str:
    """Markdown section of the model card with the teacher's measured cost over the run.

    >>> print(render_teacher_cost({"requests": 40, "prompt_tokens": 8000, "completion_tokens": 900,
    ...     "teacher_time_s": 12.0, "cycle_time_s": 48.0, "rounds": 10}, "m"))  # doctest: +NORMALIZE_WHITESPACE
    ### Teacher cost
    <BLANKLINE>
    Measured during this run (10 generation rounds judged; teacher: `m`):
    <BLANKLINE>
    | requests | prompt tokens | completion tokens | teacher time | share of training time |
    |---|---|---|---|---|
    | 40 | 8000 | 900 | 12.0 s | 25.0 % |
    """
    rounds = int(totals.get("rounds", 0))
    if rounds == 0:
        return "### Teacher cost\n\nNo generation round was judged in this run.\n"
    cycle = float(totals.get("cycle_time_s", 0.0))
    share = f"{100 * float(totals.get('teacher_time_s', 0.0)) / cycle:.1f} %" if cycle > 0 else "-"
    return (
        "### Teacher cost\n\n"
        f"Measured during this run ({rounds} generation rounds judged; teacher: `{teacher}`):\n\n"
        "| requests | prompt tokens | completion tokens | teacher time | share of training time |\n"
        "|---|---|---|---|---|\n"
        f"| {int(totals.get('requests', 0))} | {int(totals.get('prompt_tokens', 0))} | "
        f"{int(totals.get('completion_tokens', 0))} | {float(totals.get('teacher_time_s', 0.0)):.1f} s | {share} |\n"
    )
