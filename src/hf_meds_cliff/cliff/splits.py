"""Where Cliff's splits fall, and when they cannot act: pure functions for the trainer's metrics and warnings.

Cliff acts inside a wrong rollout only when its first mistake lies after its first token: the tokens before it then
get the correct prefix's advantage. A split at token 0 leaves no prefix, and the rollout is treated as GRPO treats
it (minus the group baseline ``b``). On answers of one sentence every first mistake is sentence 0, and so is every
rollout in which the teacher finds no mistake (a disagreement with the verifier, given ``p(a) = 0``) and every
truncated one (not judged, the paper's rule). :func:`split_record` classifies each wrong rollout of a Cliff group, :func:`split_window_warning` says when nearly all of a
recent window split at token 0 and why, and :func:`sequence_level_warning` when TRL's options reduce the split to its
mean over the sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CHARS_PER_TOKEN",
    "SPLIT_AT_TOKEN0_SHARE",
    "SPLIT_WINDOW_MIN_ROLLOUTS",
    "SPLIT_WINDOW_ROLLOUTS",
    "SplitRecord",
    "cliff_teacher_load",
    "sequence_level_warning",
    "split_record",
    "split_step_metrics",
    "split_window_warning",
]

SPLIT_WINDOW_ROLLOUTS = 64
"""The window: the most recent wrong rollouts of Cliff groups the split warning looks at."""

SPLIT_WINDOW_MIN_ROLLOUTS = 8
"""The warning needs at least this many wrong rollouts in the window."""

SPLIT_AT_TOKEN0_SHARE = 0.9
"""Nearly every: the share of the window split at token 0 from which the warning is shown."""

CAUSES = {
    "one_sentence": "a one-sentence answer (its first mistake can only be sentence 0)",
    "first_sentence": "the first mistake in the first of several sentences",
    "no_mistake_found": "the teacher found no mistake (a disagreement with the verifier, given p(a) = 0)",
    "no_answer": "no usable answer from the teacher (given p(a) = 0)",
    "truncated": "truncated at max_completion_length (split at token 0 without asking the teacher, the paper's rule)",
    "later_sentence": "a later sentence that starts at token 0",
    "after_token0": "split after token 0",
}
"""What a wrong rollout's split says, by :attr:`SplitRecord.cause`."""


@dataclass(frozen=True)
class SplitRecord:
    """One wrong rollout of a Cliff group (judged, cached or truncated): where its incorrect suffix starts and why there.

    Attributes:
        token: index of the suffix's first completion token (0 = no correct prefix).
        units: sentences (program lines, tool calls) the teacher saw.
        cause: a key of :data:`CAUSES`.
    """

    token: int
    units: int
    cause: str


def split_record(
    token: int, units: int, first_mistake: int, agreed: bool | None, truncated: bool = False
) -> SplitRecord:
    """Classify one wrong rollout of a Cliff group.

    Args:
        token: its suffix's first token.
        units: the number of units the teacher numbered.
        first_mistake: the sentence index ``p(a)`` used (0 when the teacher found none).
        agreed: the judge detail's ``agreed`` (True: a mistake located; False: none found; None: no usable answer).
        truncated: it hit ``max_completion_length`` and was not judged.

    >>> split_record(0, 1, 0, True).cause, split_record(0, 4, 0, True).cause, split_record(0, 4, 0, False).cause
    ('one_sentence', 'first_sentence', 'no_mistake_found')
    >>> split_record(17, 4, 2, True).cause
    'after_token0'
    """
    if token < 0 or units < 0 or first_mistake < 0:
        raise ValueError(f"token={token}, units={units} and first_mistake={first_mistake} must be >= 0.")
    if token > 0:
        cause = "after_token0"
    elif truncated:
        cause = "truncated"
    elif agreed is False:
        cause = "no_mistake_found"
    elif agreed is None:
        cause = "no_answer"
    elif first_mistake > 0:
        cause = "later_sentence"
    else:
        cause = "one_sentence" if units <= 1 else "first_sentence"
    return SplitRecord(token=int(token), units=int(units), cause=cause)


def split_step_metrics(records: Sequence[SplitRecord]) -> dict[str, float]:
    """``split_rollouts`` (wrong rollouts of Cliff groups), ``split_at_token0_fraction`` and ``split_token_mean`` of
    one step (NaN without such rollouts).

    >>> split_step_metrics([split_record(0, 1, 0, True), split_record(12, 3, 1, True)])
    {'split_rollouts': 2.0, 'split_at_token0_fraction': 0.5, 'split_token_mean': 6.0}
    """
    count = len(records)
    nan = float("nan")
    return {
        "split_rollouts": float(count),
        "split_at_token0_fraction": sum(r.token == 0 for r in records) / count if count else nan,
        "split_token_mean": sum(r.token for r in records) / count if count else nan,
    }


def split_window_warning(
    window: Sequence[SplitRecord],
    min_rollouts: int = SPLIT_WINDOW_MIN_ROLLOUTS,
    share: float = SPLIT_AT_TOKEN0_SHARE,
) -> str | None:
    """The warning when nearly every wrong rollout of ``window`` split at token 0, with the causes counted; ``None``
    otherwise.

    >>> print(split_window_warning([split_record(0, 1, 0, True)] * 9 + [split_record(0, 3, 0, False)]))
    ... # doctest: +ELLIPSIS
    Cliff split 10 of the last 10 wrong rollouts of its groups (100%) at token 0...
    >>> split_window_warning([split_record(0, 1, 0, True)] * 5 + [split_record(9, 3, 1, True)] * 5) is None
    True
    """
    if min_rollouts < 1 or not 0.0 < share <= 1.0:
        raise ValueError(f"min_rollouts={min_rollouts} must be >= 1 and share={share} in (0, 1].")
    count = len(window)
    at_zero = [r for r in window if r.token == 0]
    if count < min_rollouts or len(at_zero) < share * count:
        return None
    causes = Counter(r.cause for r in at_zero)
    listed = "; ".join(f"{CAUSES[cause]}: {number}" for cause, number in causes.most_common())
    mean_units = sum(r.units for r in window) / count
    advice = []
    if causes["one_sentence"] + causes["first_sentence"] >= causes["no_mistake_found"] + causes["no_answer"]:
        advice.append(
            f"the answers are short (on average {mean_units:.1f} sentences): train on problems whose solutions take "
            "several steps, a sentence each, or prompt for step-by-step reasoning"
        )
    if causes["truncated"]:
        advice.append("rollouts hit max_completion_length: raise it")
    if causes["no_mistake_found"] + causes["no_answer"]:
        advice.append(
            "the teacher finds no mistake in wrong rollouts it judges: check it with `hf-meds-cliff judge-eval`, or "
            "use a stronger teacher"
        )
    return (
        f"Cliff split {len(at_zero)} of the last {count} wrong rollouts of its groups ({len(at_zero) / count:.0%}) at "
        "token 0, so they have no correct prefix and Cliff treats them as GRPO does (their advantage minus the group "
        f"baseline b): the split acts on almost nothing. Why: {listed}. Likely causes: " + "; ".join(advice) + ". "
        "Logged per step as cliff/split_at_token0_fraction and cliff/split_token_mean; this warning is shown once."
    )


PER_TOKEN_UNDER_SEQUENCE_LEVEL = ("cispo", "vespo")
"""Loss types whose per-token term keeps a per-token advantage under ``importance_sampling_level="sequence"``: CISPO
multiplies each token's log-probability by its advantage (the ratio is a detached weight), VESPO computes its own
sequence weight from the per-token log-ratios and weights each token's log-probability."""


def sequence_level_warning(importance_sampling_level: str, loss_type: str) -> str | None:
    """The start-of-run warning when TRL's sequence-level importance sampling reduces Cliff's split to its mean.

    With ``importance_sampling_level="sequence"`` (GSPO; luspo's recommended setting) TRL's ratio is one number per
    rollout, and for the clipped losses (grpo, bnpo, dr_grpo, dapo, luspo) and sapo the policy log-probabilities
    reach the loss only through it: each token of a rollout gets the same gradient, set by the sum of the rollout's
    token advantages.

    >>> sequence_level_warning("token", "dapo") is None, sequence_level_warning("sequence", "cispo") is None
    (True, True)
    >>> print(sequence_level_warning("sequence", "dapo"))  # doctest: +ELLIPSIS
    Cliff with importance_sampling_level='sequence' and loss_type='dapo': ...
    """
    if importance_sampling_level != "sequence" or loss_type in PER_TOKEN_UNDER_SEQUENCE_LEVEL:
        return None
    return (
        f"Cliff with importance_sampling_level='sequence' and loss_type={loss_type!r}: TRL's importance ratio is one "
        "number per rollout, and the policy's log-probabilities reach this loss only through it, so every token of a "
        "rollout gets the same gradient, set by the sum of its token advantages. Cliff's correct prefix and wrong "
        "suffix then act only through that sum (and TRL's clipping, which tests each token's advantage sign). To keep the split per token use importance_sampling_level='token' (TRL's default), or a "
        "loss that keeps per-token terms under sequence-level ratios (loss_type='cispo' or 'vespo'); see "
        "docs/guide.md, 'Cliff and TRL's loss options'."
    )


CHARS_PER_TOKEN = 4.0
"""Characters per token for the pre-flight's token estimates when no tokenizer is loaded (English prose and math)."""


def cliff_teacher_load(
    prompts_per_generation: int,
    num_generations: int,
    *,
    mixed_fraction: float = 0.5,
    pass_rate: float = 0.5,
    self_consistency: int = 1,
    judge_every_rollout: bool = False,
    judge_prompt_tokens: float,
    max_completion_length: int,
    teacher_max_tokens: int,
) -> dict[str, float]:
    """What Cliff asks of its teacher per generation batch, before any model is loaded (upper bounds on tokens).

    Judge calls: one per wrong rollout of a mixed group (``prompts × mixed_fraction × G × (1 - pass_rate)``), every
    rollout of one with ``judge_every_rollout`` (the "GRPO with Teacher" ablation), times ``self_consistency``; a
    truncated rollout costs none (not counted here). Solve calls: at most one per mixed prompt (``prompts ×
    mixed_fraction``), fewer once the reference cache holds the prompt. Tokens per judge call: the judge prompt
    (instructions and problem, ``judge_prompt_tokens``) plus the rollout (at most ``max_completion_length``) and the
    reference (at most ``teacher_max_tokens``) in, at most ``teacher_max_tokens`` out.

    >>> load = cliff_teacher_load(512, 16, judge_prompt_tokens=600, max_completion_length=4096, teacher_max_tokens=2048)
    >>> load["judge_calls"], load["solve_calls_at_most"], load["judge_prompt_tokens_at_most"]
    (2048.0, 256.0, 13811712.0)
    """
    for name, value in (("prompts_per_generation", prompts_per_generation), ("num_generations", num_generations)):
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1.")
    if not 0.0 < mixed_fraction <= 1.0 or not 0.0 <= pass_rate < 1.0:
        raise ValueError(f"mixed_fraction={mixed_fraction} must be in (0, 1] and pass_rate={pass_rate} in [0, 1).")
    mixed = prompts_per_generation * mixed_fraction
    judged_share = 1.0 if judge_every_rollout else 1.0 - pass_rate
    judge_calls = mixed * num_generations * judged_share * max(1, self_consistency)
    per_call_in = judge_prompt_tokens + max_completion_length + teacher_max_tokens
    return {
        "judge_calls": judge_calls,
        "solve_calls_at_most": mixed,
        "judge_prompt_tokens_at_most": judge_calls * per_call_in,
        "judge_completion_tokens_at_most": judge_calls * teacher_max_tokens,
        "solve_prompt_tokens_at_most": mixed * judge_prompt_tokens,
        "solve_completion_tokens_at_most": mixed * teacher_max_tokens,
    }
