"""Shared test setup: offline environment defaults, one torch thread and the toy-world fixtures.

``toy_policy_path`` is the warmed-up toy policy from the on-disk cache (``$HF_MEDS_CLIFF_CACHE/toy/<key>``,
default ``~/.cache/hf_meds_cliff``): built once on first use (~7 minutes measured on a busy 2-core
machine), then reused by every later session. It emits ``\\boxed{}`` answers, some right and some wrong, so groups of
8 samples per prompt are often mixed.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("NUMBA_CACHE_DIR", str(Path.home() / ".cache" / "hf_meds_cliff" / "numba"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

# The toy models are tiny: a second thread costs more in synchronisation than it gains, and on a shared
# 2-core machine it made forwards up to 30x slower (measured). The warm-up uses one thread too.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy_tokenizer():
    """The toy character-level tokenizer (left padding, pad and eos set)."""
    from hf_meds_cliff.toy import build_toy_tokenizer

    return build_toy_tokenizer()


@pytest.fixture(scope="session")
def toy_policy_path() -> Path:
    """Folder of the cached warmed-up toy policy (model, tokenizer, ``warmup_metrics.json``)."""
    from hf_meds_cliff.toy import warmup_toy_model

    return warmup_toy_model()
