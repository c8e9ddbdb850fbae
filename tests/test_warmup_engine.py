"""The three toy worlds' warm-ups run on one engine (``hf_meds_cliff.toy.warmup_engine``) and kept their results.

The pinned values were computed on the code before the engine existed (three pipelines, each with its own settings
fields, loop and metrics file), at commit 9c5de77:

- the cache keys of the policies the suite, the studies and the scripts use, so every cached policy is found again
  (and its files are the same files);
- a 4-step warm-up of each world: its losses, the sum of squares of its saved weights, its parameter count and the
  keys of its ``warmup_metrics.json`` (on the machine that pinned them the new code wrote byte-identical
  ``model.safetensors`` files; losses and weights are compared to 1e-5 so another CPU's float rounding passes).
"""

from __future__ import annotations

import json

import pytest

from hf_meds_cliff.toy import ToyModelConfig
from hf_meds_cliff.toy.code_world import CodeWarmupSettings, warmup_code_world
from hf_meds_cliff.toy.qwen_world import QwenWorldSettings, warmup_qwen_world
from hf_meds_cliff.toy.warmup import VLLM_TOY_MODEL, VLLM_TOY_WARMUP, WarmupSettings, warmup_toy_model
from hf_meds_cliff.toy.warmup_engine import WarmupSchedule


def test_the_cache_keys_are_the_ones_before_the_engine():
    assert WarmupSettings().cache_key() == "449da3e03fe6f7df"
    assert WarmupSettings(trap_rate=0.3).cache_key() == "871911a74e18395d"
    assert WarmupSettings(model=VLLM_TOY_MODEL, **VLLM_TOY_WARMUP).cache_key() == "d22b793a48c85735"
    assert WarmupSettings(model=ToyModelConfig(num_hidden_layers=2), seed=1).cache_key() == "3b751c028e911326"
    assert CodeWarmupSettings().cache_key() == "78f6f205ced02cd7"
    assert CodeWarmupSettings(seed=1).cache_key() == "2c02ec197be310e8"
    assert QwenWorldSettings().cache_key() == "5800f1ec80d71b78"
    assert QwenWorldSettings(seed=1).cache_key() == "d322fddf90144d38"


def test_each_world_changes_only_the_defaults_it_names():
    assert CodeWarmupSettings().max_steps == 2000 and WarmupSettings().max_steps == 1500
    assert QwenWorldSettings().target_greedy_accuracy == 0.25 and not hasattr(
        QwenWorldSettings(), "temperature"
    )
    fields = CodeWarmupSettings.__dataclass_fields__
    assert list(fields)[: len(WarmupSchedule.__dataclass_fields__)] == list(
        WarmupSchedule.__dataclass_fields__
    )
    assert "35 %%" in fields["eval_every_steps"].metadata["help"]  # its own help
    assert fields["batch_size"].metadata == WarmupSchedule.__dataclass_fields__["batch_size"].metadata
    with pytest.raises(ValueError, match="num_train_problems must be >= 1"):
        QwenWorldSettings(num_train_problems=0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        CodeWarmupSettings(temperature=0.0)
    with pytest.raises(TypeError, match="'max_step' is not a field of WarmupSchedule"):

        class Misspelt(WarmupSchedule, defaults={"max_step": 3}):
            pass


TINY = {
    "max_steps": 4,
    "eval_start_step": 2,
    "eval_every_steps": 2,
    "num_validation_problems": 4,
    "num_test_problems": 1,  # the evaluation does not feed back into training: small to keep the test short
    "num_samples": 1,
    "max_new_tokens": 16,
}
METRIC_KEYS = [
    "cache_key", "code_version", "final_eval_seconds", "final_loss", "num_parameters", "settings", "steps",
    "stop_reason", "stop_rule_eval_seconds", "test_split", "torch_threads", "train_seconds", "validation_history",
    "versions",
]  # fmt: skip
PINNED = {  # world: (build, extra settings, losses at steps 2 and 4, sum of squared weights, parameters, extra keys)
    "toy": (warmup_toy_model, {"trap_rate": 0.3}, (4.685972213745117, 4.484561443328857), 805.6206111866757,
            253312, []),
    "code": (warmup_code_world, {}, (4.74808931350708, 4.507589340209961), 805.9552975036189, 254144, []),
    "qwen": (warmup_qwen_world, {"num_train_problems": 64}, (11.920835494995117, 11.805879592895508),
             806.257550194546, 9953280, ["corpus_tokens", "system_prompt"]),
}  # fmt: skip


@pytest.mark.parametrize("world", sorted(PINNED))
def test_a_short_warm_up_of_each_world_is_made_by_the_same_rule_as_before_the_engine(tmp_path, world):
    from safetensors.torch import load_file

    build, extra, losses, squares, parameters, extra_keys = PINNED[world]
    folder = build(tmp_path / world, **TINY, **extra)
    metrics = json.loads((folder / "warmup_metrics.json").read_text())
    assert sorted(metrics) == sorted(METRIC_KEYS + extra_keys)
    assert (metrics["steps"], metrics["stop_reason"]) == (4, "max_steps")
    assert [h["step"] for h in metrics["validation_history"]] == [2, 4]
    assert [h["loss"] for h in metrics["validation_history"]] == pytest.approx(losses, rel=1e-5)
    assert metrics["final_loss"] == pytest.approx(losses[1], rel=1e-5)
    assert metrics["num_parameters"] == parameters
    weights = load_file(folder / "model.safetensors")
    assert float(sum((w.double() ** 2).sum() for w in weights.values())) == pytest.approx(squares, rel=1e-5)
