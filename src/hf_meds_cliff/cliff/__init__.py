"""Cliff: process rewards from the first mistake a teacher finds in an incorrect rollout.

Re-exports only. Sentence and code-unit splitting are imported eagerly (pure Python, used by the toy world); the
tensor code, judging, teachers and trainer load on first attribute access, so importing this package
pulls in neither ``trl``, ``transformers`` nor ``httpx``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..sentences import code_unit_texts, sentence_texts, split_code_units, split_sentences

_LAZY_ATTRIBUTES = {
    "cliff_token_advantages": "hf_meds_cliff.cliff.advantages",
    "first_mistake_token_positions": "hf_meds_cliff.cliff.advantages",
    "sentence_to_token_index": "hf_meds_cliff.cliff.advantages",
    "zero_variance_groups": "hf_meds_cliff.cliff.advantages",
    "build_judge_messages": "hf_meds_cliff.cliff.judging",
    "build_solve_messages": "hf_meds_cliff.cliff.judging",
    "parse_judgment": "hf_meds_cliff.cliff.judging",
    "Judgment": "hf_meds_cliff.cliff.teachers.base",
    "SolveFailure": "hf_meds_cliff.cliff.teachers.base",
    "Teacher": "hf_meds_cliff.cliff.teachers.base",
    "is_endpoint_failure": "hf_meds_cliff.cliff.teachers.base",
    "build_teacher": "hf_meds_cliff.cliff.teachers",
    "CliffConfig": "hf_meds_cliff.cliff.config",
    "CliffGRPOTrainer": "hf_meds_cliff.cliff.trainer",
}

__all__ = [
    "CliffConfig",
    "CliffGRPOTrainer",
    "Judgment",
    "SolveFailure",
    "Teacher",
    "build_judge_messages",
    "build_solve_messages",
    "build_teacher",
    "cliff_token_advantages",
    "code_unit_texts",
    "first_mistake_token_positions",
    "is_endpoint_failure",
    "parse_judgment",
    "sentence_texts",
    "sentence_to_token_index",
    "split_code_units",
    "split_sentences",
    "zero_variance_groups",
]

if TYPE_CHECKING:  # pragma: no cover
    from .advantages import (
        cliff_token_advantages,
        first_mistake_token_positions,
        sentence_to_token_index,
        zero_variance_groups,
    )
    from .config import CliffConfig
    from .judging import build_judge_messages, build_solve_messages, parse_judgment
    from .teachers import build_teacher
    from .teachers.base import Judgment, SolveFailure, Teacher, is_endpoint_failure
    from .trainer import CliffGRPOTrainer


def __getattr__(name: str) -> Any:
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_meds_cliff.cliff' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
