"""Shared test setup: offline environment defaults, one torch thread and the toy-world fixtures.

``toy_policy_path`` is the warmed-up toy policy (:func:`hf_meds_cliff.toy.toy_policy`) from the on-disk cache
(``$HF_MEDS_CLIFF_CACHE/toy/<key>``, default ``~/.cache/hf_meds_cliff``): built once on first use (~7 minutes measured on a busy 2-core
machine), then reused by every later session. It emits ``\\boxed{}`` answers, some right and some wrong, so groups of
8 samples per prompt are often mixed.

Where the warm-up stops differs between machines (CPU kernels differ), so no test may rely on what this machine's
policy happens to get right: a test that needs learning signal builds it in (see ``tests/helpers.py``). To check
that, point the suite at another warmed-up toy policy with ``HF_MEDS_CLIFF_TOY_POLICY=/path/to/policy`` (a folder
written by ``python -m hf_meds_cliff.toy.warmup --output_dir ... --seed 1``, or with another
``--target_greedy_accuracy``; the scripts' ``toy`` model follows the variable too); the ``toy_policy`` marker
selects the tests that use it::

    HF_MEDS_CLIFF_TOY_POLICY=/tmp/toy-seed1 python -m pytest -q -m toy_policy
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
    """Folder of the warmed-up toy policy (model, tokenizer, ``warmup_metrics.json``): the cached default warm-up,
    or the folder named by ``$HF_MEDS_CLIFF_TOY_POLICY`` (which the scripts' ``toy`` model then names too)."""
    from hf_meds_cliff.toy import toy_policy

    return toy_policy()


@pytest.fixture(scope="session")
def untrained_tiny_policy(tmp_path_factory) -> Path:
    """Folder of an untrained toy policy (seed 0) and its tokenizer: for tests of the trainers' machinery whose
    rewards do not depend on what the policy samples."""
    from hf_meds_cliff.toy.model import build_toy_model
    from hf_meds_cliff.toy.tokenizer import build_toy_tokenizer

    path = tmp_path_factory.mktemp("untrained_tiny_policy")
    tokenizer = build_toy_tokenizer(path)
    build_toy_model(tokenizer, seed=0).save_pretrained(path)
    return path


TOY_POLICY_FIXTURES = {"toy_policy_path", "toy_model_path"}
"""Fixtures that hand a test the warmed-up toy policy (``toy_model_path`` of test_evaluation.py looks it up)."""


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "toy_policy: uses the warmed-up toy policy ($HF_MEDS_CLIFF_TOY_POLICY swaps in another one)",
    )


def pytest_collection_modifyitems(config, items) -> None:
    """Mark every test that uses the toy policy ``toy_policy`` (``-m toy_policy`` runs them against another one), and
    deselect the vLLM lane's tests (marker ``vllm``) unless the ``-m`` expression names ``vllm``: they start the real
    vLLM engine (tens of seconds and about 2.5 GB each) and need the lane's own environment (see docs/vllm_lane.md)."""
    for item in items:
        if TOY_POLICY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.toy_policy)
    if "vllm" in (config.getoption("markexpr") or ""):
        return
    lane = [item for item in items if item.get_closest_marker("vllm") is not None]
    if lane:
        config.hook.pytest_deselected(items=lane)
        items[:] = [item for item in items if item.get_closest_marker("vllm") is None]
