"""MEDS: memory-enhanced dynamic reward shaping (spec: ``shared/spec/meds.md``).

Modules: ``memory`` (per-prompt error memory, k-NN assignment, HDBSCAN refits), ``memory_shard`` (the memory
split by key over the processes of a distributed run), ``answer_memory`` (the
answer-oracle ablation's memory), ``shaping``
(reward shaping and the top-1 eigen-ratio diagnostic), ``features`` (hook-captured layer logits),
``config`` and ``trainer`` (``MEDSConfig``, ``MEDSGRPOTrainer``).

Re-exports only, loaded on first attribute access: importing this package imports neither
``trl`` nor ``fast_hdbscan`` (whose numba import takes seconds); ``fast_hdbscan`` is imported
inside the first HDBSCAN fit.

>>> from hf_meds_cliff.meds import ErrorMemory, shape_rewards, top1_eigen_ratio
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY_ATTRIBUTES = {
    "AnswerMemory": "hf_meds_cliff.meds.answer_memory",
    "ErrorMemory": "hf_meds_cliff.meds.memory",
    "ShardedErrorMemory": "hf_meds_cliff.meds.memory_shard",
    "hdbscan_labels": "hf_meds_cliff.meds.memory",
    "shape_rewards": "hf_meds_cliff.meds.shaping",
    "penalties": "hf_meds_cliff.meds.shaping",
    "top1_eigen_ratio": "hf_meds_cliff.meds.shaping",
    "PENALTY_TARGETS": "hf_meds_cliff.meds.shaping",
    "MEDSConfig": "hf_meds_cliff.meds.config",
    "MEDSGRPOTrainer": "hf_meds_cliff.meds.trainer",
}

__all__ = [
    "PENALTY_TARGETS",
    "AnswerMemory",
    "ErrorMemory",
    "MEDSConfig",
    "MEDSGRPOTrainer",
    "ShardedErrorMemory",
    "hdbscan_labels",
    "penalties",
    "shape_rewards",
    "top1_eigen_ratio",
]

if TYPE_CHECKING:  # pragma: no cover
    from .answer_memory import AnswerMemory
    from .config import MEDSConfig
    from .memory import ErrorMemory, hdbscan_labels
    from .memory_shard import ShardedErrorMemory
    from .shaping import PENALTY_TARGETS, penalties, shape_rewards, top1_eigen_ratio
    from .trainer import MEDSGRPOTrainer


def __getattr__(name: str) -> Any:
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_meds_cliff.meds' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
