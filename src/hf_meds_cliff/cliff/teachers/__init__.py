"""Cliff teachers: an OpenAI-compatible HTTP endpoint, a local ``transformers`` model, and the
toy world's exact rule-based checker. Re-exports only, loaded lazily (``httpx``/``transformers``
are imported only when the corresponding teacher is used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import ENDPOINT_FAILURES, JUDGMENT_STATUSES, Judgment, SolveFailure, Teacher, is_endpoint_failure

_LAZY_ATTRIBUTES = {
    "NoisyTeacher": "hf_meds_cliff.cliff.teachers.noisy",
    "OpenAICompatibleTeacher": "hf_meds_cliff.cliff.teachers.openai_compatible",
    "TransformersTeacher": "hf_meds_cliff.cliff.teachers.local",
    "RuleBasedToyTeacher": "hf_meds_cliff.cliff.teachers.rule_based",
    "RuleBasedCodeTeacher": "hf_meds_cliff.cliff.teachers.rule_based_code",
    "build_teacher": "hf_meds_cliff.cliff.teachers.factory",
}

__all__ = [
    "ENDPOINT_FAILURES",
    "JUDGMENT_STATUSES",
    "Judgment",
    "NoisyTeacher",
    "OpenAICompatibleTeacher",
    "RuleBasedCodeTeacher",
    "RuleBasedToyTeacher",
    "SolveFailure",
    "Teacher",
    "TransformersTeacher",
    "build_teacher",
    "is_endpoint_failure",
]

if TYPE_CHECKING:  # pragma: no cover
    from .factory import build_teacher
    from .local import TransformersTeacher
    from .noisy import NoisyTeacher
    from .openai_compatible import OpenAICompatibleTeacher
    from .rule_based import RuleBasedToyTeacher
    from .rule_based_code import RuleBasedCodeTeacher


def __getattr__(name: str) -> Any:
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_meds_cliff.cliff.teachers' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
