"""TRL reward functions: the verifiable math answer reward and DAPO's soft overlong penalty."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any

from .verifier import (
    DEFAULT_BATCH_TIMEOUT,
    DEFAULT_FLOAT_ROUNDING,
    DEFAULT_MAX_ANSWER_CHARS,
    DEFAULT_MAX_ANSWER_DEPTH,
    DEFAULT_TIMEOUT_SECONDS,
    STATUSES,
    ScaledBatchTimeout,
    _positive_int,
    _validate_batch_timeout,
    _validate_settings,
    check_answers,
)


class MathAnswerReward:
    """1.0 when the boxed final answer of a completion equals the ground truth, else 0.0.

    A picklable TRL reward function (``reward_funcs=[MathAnswerReward()]``) built on
    :func:`~hf_meds_cliff.rewards.check_answer`, the project's single correctness function. It
    reads the ground truth from the dataset column ``answer_column`` (TRL passes every dataset
    column as a keyword argument). Completions without a boxed answer, answers refused by the
    length/nesting cap, verification timeouts (per answer, or past the batch budget) and errors
    score 0.0 and are counted: cumulatively in :attr:`counts`, and per batch as the fractions
    ``math_answer/no_boxed_frac``, ``math_answer/refused_frac``, ``math_answer/timeout_frac`` and
    ``math_answer/error_frac`` through TRL's ``log_metric`` hook, plus the extracted answer and
    status of each completion in the completions table through ``log_extra`` (both hooks are passed
    by ``GRPOTrainer`` 1.16).

    Args:
        answer_column: the dataset column holding the reference answer.
        timeout_seconds: per-answer bound on math-verify.
        batch_timeout_seconds: bound on the math-verify work of one call (one generation batch on this
            process); the answers not verified by then score 0.0 as timeouts. By default it scales with the
            answers that actually go to math-verify: 120 s + 1 s per answer
            (:data:`~hf_meds_cliff.rewards.DEFAULT_BATCH_TIMEOUT`; answers settled by the exact shortcuts,
            refused, unboxed, repeated or remembered from an earlier call do not count). A number is a fixed
            budget in seconds (the explicit override), ``ScaledBatchTimeout(base_seconds,
            seconds_per_answer)`` another scale, ``None`` no bound.
        float_rounding: math-verify's ``float_rounding`` (decimal places floats are rounded to; its
            default 6).
        strict: math-verify's strict mode (its default True): variables matter and sets are not
            tuples; ``False`` matches variables by position.
        max_answer_chars: answers longer than this (or than the ground truth) are refused unparsed.
        max_answer_depth: answers nested deeper than this (or than the ground truth) are refused.

    >>> reward = MathAnswerReward()
    >>> reward(["... = 12. The answer is \\\\boxed{12}.", "\\\\boxed{11}", "no idea"], answer=["12", "12", "12"])
    [1.0, 0.0, 0.0]
    >>> reward.counts["no_boxed"], reward.counts["correct"], reward.__name__
    (1, 1, 'math_answer')
    >>> MathAnswerReward(answer_column="solution")(
    ...     [[{"role": "assistant", "content": "\\\\boxed{\\\\frac{1}{2}}"}]], solution=["0.5"])
    [1.0]
    """

    def __init__(
        self,
        answer_column: str = "answer",
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        *,
        batch_timeout_seconds: float | ScaledBatchTimeout | None = DEFAULT_BATCH_TIMEOUT,
        float_rounding: int = DEFAULT_FLOAT_ROUNDING,
        strict: bool = True,
        max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
        max_answer_depth: int = DEFAULT_MAX_ANSWER_DEPTH,
    ):
        if not isinstance(answer_column, str) or not answer_column:
            raise ValueError(f"answer_column={answer_column!r} must name a dataset column, e.g. 'answer'.")
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds={timeout_seconds!r} must be a positive number of seconds.")
        _validate_batch_timeout(batch_timeout_seconds, "batch_timeout_seconds")
        _validate_settings(float_rounding, strict)
        _positive_int("max_answer_chars", max_answer_chars)
        _positive_int("max_answer_depth", max_answer_depth)
        self.answer_column = answer_column
        self.timeout_seconds = float(timeout_seconds)
        self.batch_timeout_seconds = (
            float(batch_timeout_seconds)
            if isinstance(batch_timeout_seconds, (int, float))
            else batch_timeout_seconds
        )
        self.float_rounding = float_rounding
        self.strict = strict
        self.max_answer_chars = max_answer_chars
        self.max_answer_depth = max_answer_depth
        self.counts: collections.Counter[str] = collections.Counter({status: 0 for status in STATUSES})
        self.__name__ = "math_answer"  # TRL names the reward column (and `rewards/<name>/mean`) after it

    def __call__(
        self,
        completions: Sequence[Any],
        answer: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        if self.answer_column == "answer":
            ground_truths = answer
        else:
            ground_truths = kwargs.get(self.answer_column)
        if ground_truths is None:
            available = sorted(k for k in ({"answer": answer} if answer is not None else {}) | kwargs)
            raise ValueError(
                f"MathAnswerReward needs the dataset column {self.answer_column!r}, but the call only has "
                f"{available}. Add that column to the dataset or pass MathAnswerReward(answer_column=...)."
            )
        checks = check_answers(
            completions,
            ground_truths,
            timeout=self.timeout_seconds,
            batch_timeout=self.batch_timeout_seconds,
            float_rounding=self.float_rounding,
            strict=self.strict,
            max_answer_chars=self.max_answer_chars,
            max_answer_depth=self.max_answer_depth,
        )
        statuses = [check.status for check in checks]
        self.counts.update(statuses)
        if log_metric is not None and checks:
            for status in ("no_boxed", "refused", "timeout", "error"):
                log_metric(f"math_answer/{status}_frac", statuses.count(status) / len(checks))
        if log_extra is not None:
            log_extra("extracted_answer", [check.extracted for check in checks])
            log_extra("answer_status", statuses)
        return [1.0 if check.correct else 0.0 for check in checks]

    def __repr__(self) -> str:
        return (
            f"MathAnswerReward(answer_column={self.answer_column!r}, timeout_seconds={self.timeout_seconds}, "
            f"batch_timeout_seconds={self.batch_timeout_seconds}, float_rounding={self.float_rounding}, "
            f"strict={self.strict}, max_answer_chars={self.max_answer_chars}, "
            f"max_answer_depth={self.max_answer_depth})"
        )


class OverlongPenaltyReward:
    """DAPO's soft overlong punishment as an additive reward (Yu et al. 2025, eq. 13).

    With ``L = max_completion_length`` and buffer ``B``: 0 for lengths ``<= L - B``, then linear
    down to ``-penalty_factor`` at ``L``: ``min(0, -(len - (L - B)) / B * penalty_factor)``, the
    formula of the DAPO reference code. Lengths are counted in tokens from TRL's ``completion_ids``
    (which include the eos token when one was generated).

    Args:
        max_completion_length: the generation limit (``GRPOConfig.max_completion_length``).
        buffer_length: the length of the linear ramp, ``0 < buffer_length <= max_completion_length``.
        penalty_factor: the penalty at ``max_completion_length`` (``>= 0``).

    >>> reward = OverlongPenaltyReward(max_completion_length=10, buffer_length=4, penalty_factor=1.0)
    >>> reward([""] * 4, completion_ids=[[1] * 6, [1] * 7, [1] * 8, [1] * 10])
    [0.0, -0.25, -0.5, -1.0]
    """

    def __init__(self, max_completion_length: int, buffer_length: int, penalty_factor: float = 1.0):
        if not isinstance(max_completion_length, int) or max_completion_length < 1:
            raise ValueError(f"max_completion_length={max_completion_length!r} must be a positive integer.")
        if not isinstance(buffer_length, int) or not 0 < buffer_length <= max_completion_length:
            raise ValueError(
                f"buffer_length={buffer_length!r} must be an integer in (0, max_completion_length="
                f"{max_completion_length}]; DAPO uses 4096 of 20480 (the paper's MEDS recipe 512)."
            )
        if not penalty_factor >= 0:
            raise ValueError(f"penalty_factor={penalty_factor!r} must be >= 0 (DAPO uses 1.0).")
        self.max_completion_length = max_completion_length
        self.buffer_length = buffer_length
        self.penalty_factor = float(penalty_factor)
        self.__name__ = "overlong"

    def penalty(self, length: int) -> float:
        """The reward for a completion of ``length`` tokens (0 or negative)."""
        exceed = length - (self.max_completion_length - self.buffer_length)
        return min(0.0, -exceed / self.buffer_length * self.penalty_factor)

    def __call__(
        self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]] | None = None, **kwargs
    ):
        if completion_ids is None:
            raise ValueError(
                "OverlongPenaltyReward needs `completion_ids` (token ids per completion), which GRPOTrainer passes; "
                "when calling it yourself pass completion_ids=[[...], ...]."
            )
        if len(completion_ids) != len(completions):
            raise ValueError(f"Got {len(completion_ids)} completion_ids for {len(completions)} completions.")
        return [self.penalty(len(ids)) for ids in completion_ids]

    def __repr__(self) -> str:
        return (
            f"OverlongPenaltyReward(max_completion_length={self.max_completion_length}, "
            f"buffer_length={self.buffer_length}, penalty_factor={self.penalty_factor})"
        )
