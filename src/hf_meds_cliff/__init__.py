"""MEDS and Cliff reward shaping for RLVR, as subclasses of TRL's ``GRPOTrainer``.

Importing the package is cheap: the trainers (which import ``trl``) and the clustering code
(which imports ``fast_hdbscan`` and compiles with numba) are loaded on first attribute access.

>>> import hf_meds_cliff
>>> hf_meds_cliff.__version__
'0.1.0'
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY_ATTRIBUTES = {
    "MEDSConfig": "hf_meds_cliff.meds.config",
    "MEDSGRPOTrainer": "hf_meds_cliff.meds.trainer",
    "CliffConfig": "hf_meds_cliff.cliff.config",
    "CliffGRPOTrainer": "hf_meds_cliff.cliff.trainer",
    "MathAnswerReward": "hf_meds_cliff.rewards",
    "OverlongPenaltyReward": "hf_meds_cliff.rewards",
    "pass_at_k": "hf_meds_cliff.evaluation",
    "ErrorCollapseCallback": "hf_meds_cliff.collapse",
}

__all__ = ["__version__", *_LAZY_ATTRIBUTES]

if TYPE_CHECKING:  # pragma: no cover
    from .cliff.config import CliffConfig
    from .cliff.trainer import CliffGRPOTrainer
    from .collapse import ErrorCollapseCallback
    from .evaluation import pass_at_k
    from .meds.config import MEDSConfig
    from .meds.trainer import MEDSGRPOTrainer
    from .rewards import MathAnswerReward, OverlongPenaltyReward


def __getattr__(name: str) -> Any:
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_meds_cliff' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
