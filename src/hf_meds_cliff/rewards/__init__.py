"""Verifiable rewards: the math answer check (the project's single correctness function) and DAPO's
soft overlong penalty, as picklable TRL reward functions.

>>> from hf_meds_cliff.rewards import check_answer
>>> check_answer("... The answer is \\\\boxed{32}.", "32").correct
True
"""

from .extraction import canonical_integer, extract_boxed_answer, normalize_answer
from .functions import MathAnswerReward, OverlongPenaltyReward
from .verifier import (
    DEFAULT_TIMEOUT_SECONDS,
    STATUSES,
    AnswerCheck,
    MathVerifyPool,
    check_answer,
    check_answers,
    default_pool,
    math_verify_equal,
)

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "STATUSES",
    "AnswerCheck",
    "MathAnswerReward",
    "MathVerifyPool",
    "OverlongPenaltyReward",
    "canonical_integer",
    "check_answer",
    "check_answers",
    "default_pool",
    "extract_boxed_answer",
    "math_verify_equal",
    "normalize_answer",
]
