"""Verifiable rewards: the math answer check (the project's single correctness function) and DAPO's
soft overlong penalty, as picklable TRL reward functions.

>>> from hf_meds_cliff.rewards import check_answer
>>> check_answer("... The answer is \\\\boxed{32}.", "32").correct
True
"""

from .extraction import (
    canonical_integer,
    extract_boxed_answer,
    extract_final_answer,
    extract_final_boxes,
    nesting_depth,
    normalize_answer,
    strip_math_delimiters,
)
from .functions import MathAnswerReward, OverlongPenaltyReward
from .verifier import (
    DEFAULT_BATCH_TIMEOUT,
    DEFAULT_FLOAT_ROUNDING,
    DEFAULT_MAX_ANSWER_CHARS,
    DEFAULT_MAX_ANSWER_DEPTH,
    DEFAULT_TIMEOUT_SECONDS,
    STATUSES,
    AnswerCheck,
    MathVerifyPool,
    ScaledBatchTimeout,
    answer_refused,
    check_answer,
    check_answers,
    default_pool,
    math_verify_equal,
    same_written_answer,
)

__all__ = [
    "DEFAULT_BATCH_TIMEOUT",
    "DEFAULT_FLOAT_ROUNDING",
    "DEFAULT_MAX_ANSWER_CHARS",
    "DEFAULT_MAX_ANSWER_DEPTH",
    "DEFAULT_TIMEOUT_SECONDS",
    "STATUSES",
    "AnswerCheck",
    "MathAnswerReward",
    "MathVerifyPool",
    "OverlongPenaltyReward",
    "ScaledBatchTimeout",
    "answer_refused",
    "canonical_integer",
    "check_answer",
    "check_answers",
    "default_pool",
    "extract_boxed_answer",
    "extract_final_answer",
    "extract_final_boxes",
    "math_verify_equal",
    "nesting_depth",
    "normalize_answer",
    "same_written_answer",
    "strip_math_delimiters",
]
