"""TRL fixes outside the matrix: None rewards under MEDS, config conversion, reward_weights message,
the first-batch 0/1 correctness check (both trainers), truncated completions under mask_truncated_completions."""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import warnings

import numpy as np
import pytest
import torch
from helpers import MixedGroupsReward
from trl import GRPOConfig

from hf_meds_cliff import CliffConfig, MEDSConfig
from hf_meds_cliff.correctness import check_binary_correctness, non_binary_correctness_values

BASE = {
    "use_cpu": True,
    "bf16": False,
    "seed": 0,
    "learning_rate": 1e-3,
    "per_device_train_batch_size": 8,
    "num_generations": 4,
    "max_completion_length": 72,
    "logging_steps": 1,
    "report_to": "none",
    "save_strategy": "no",
    "disable_tqdm": True,
}


def correct(completions, answer, **kwargs):
    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.toy.warmup import boxed_integer

    return [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]


def length_score(completions, **kwargs):
    """A graded reward (not a correctness verdict)."""
    from hf_meds_cliff.data import completion_text

    return [len(completion_text(c)) / 100 for c in completions]


def _meds_trainer(policy, output_dir, reward_funcs=(correct,), num_prompts=2, **overrides):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff import MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    return MEDSGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(policy),
        reward_funcs=list(reward_funcs),
        args=MEDSConfig(**{**BASE, "output_dir": str(output_dir), "max_steps": 2, **overrides}),
        train_dataset=make_toy_dataset("train", num_prompts, seed=0),
        processing_class=tokenizer,
    )


# ------------------------------------------------------------------------------------------------
# None rewards
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_meds_leaves_none_correctness_rows_unscored(toy_policy_path, tmp_path, caplog):
    """Group [r, None, None, r]: the None rows get a NaN penalty, no memory row, advantage 0 (as under GRPO),
    and TRL's "All reward functions returned None" warning stays. Before: penalty 0.0, advantage +0.865."""

    def partly_graded(completions, answer, **kwargs):
        scores = correct(completions, answer)
        return [None if i % 4 in (1, 2) else s for i, s in enumerate(scores)]

    # Rows 0 and 3 of each group made to differ: each prompt's memory gains a wrong graded row every step, so the
    # second step is penalised whatever this machine's warm-up solves.
    trainer = _meds_trainer(toy_policy_path, tmp_path, reward_funcs=(MixedGroupsReward(partly_graded, 4),))
    with caplog.at_level(logging.WARNING):
        trainer.train()
    ungraded = np.array([i % 4 in (1, 2) for i in range(8)])
    penalties = trainer.meds_last_penalties
    assert np.isnan(penalties[ungraded]).all()
    assert not np.isnan(penalties[~ungraded]).any()
    assert (penalties[~ungraded] < 0).any(), "the second step must meet the memory and penalise"
    assert (trainer.meds_last_cluster_sizes[ungraded] == -1).all()  # never assigned nor stored
    assert trainer.meds_memory.num_rows == 2 * int((~ungraded).sum())  # 2 steps, graded rows only
    advantages = np.array(trainer._logs["advantages"])
    np.testing.assert_array_equal(advantages[ungraded], 0.0)
    assert "All reward functions returned None" in caplog.text


def test_penalty_column_is_none_when_trl_calls_it():
    from hf_meds_cliff.meds.trainer import MEDSPenaltyReward

    assert MEDSPenaltyReward()(completions=["a", "b"]) == [None, None]


# ------------------------------------------------------------------------------------------------
# Config conversion and messages
# ------------------------------------------------------------------------------------------------


# Non-default values for GRPOConfig fields that the generic rule of `_other_values` cannot guess (strings
# without a list of choices, fields that default to None, containers). Each is valid for GRPOConfig on a CPU.
EXPLICIT_VALUES = {
    "per_device_train_batch_size": 4,
    "num_generations": 4,
    "generation_batch_size": 16,
    "lr_scheduler_kwargs": {"num_cycles": 2},
    "optim_args": "momentum=0.5",
    "optim_target_modules": ["attn"],
    "activation_checkpointing_kwargs": {"use_reentrant": False},
    "torch_compile_backend": "eager",
    "torch_compile_mode": "reduce-overhead",
    "liger_kernel_config": {"rope": True},
    "neftune_noise_alpha": 5.0,
    "torch_empty_cache_steps": 10,
    "include_num_input_tokens_seen": "non_padding",
    "run_name": "user-run",
    "project": "user-project",
    "trackio_space_id": "user/space",
    "trackio_bucket_id": "user/bucket",
    "trackio_static_space_id": "user/static",
    "eval_steps": 7,
    "eval_accumulation_steps": 3,
    "include_for_metrics": ["inputs"],
    "save_total_limit": 3,
    "hub_token": "not-a-token",
    "hub_private_repo": True,
    "hub_model_id": "user/model",
    "hub_revision": "dev",
    "metric_for_best_model": "reward",
    "greater_is_better": False,
    "data_seed": 7,
    "accelerator_config": {"split_batches": True},
    "label_names": ["answer"],
    "length_column_name": "num_tokens",
    "ddp_find_unused_parameters": True,
    "ddp_bucket_cap_mb": 25,
    "ddp_broadcast_buffers": False,
    "ddp_static_graph": True,
    "resume_from_checkpoint": "user-checkpoint",
    "model_init_kwargs": {"dtype": "float32"},
    "router_aux_loss_coef": 0.01,
    "num_generations_eval": 2,
    "pad_to_multiple_of": 8,
    "min_p": 0.05,
    "generation_kwargs": {"no_repeat_ngram_size": 3},
    "chat_template_kwargs": {"enable_thinking": False},
    "cache_implementation": "static",
    "vllm_mode": "server",
    "vllm_model_impl": "transformers",
    "vllm_structured_outputs_regex": r"\d+",
    "vllm_server_base_url": "http://127.0.0.1:8011",
    "vllm_server_host": "127.0.0.1",
    "vllm_max_model_length": 512,
    "delta": 2.0,
    "epsilon_high": 0.28,
    "importance_sampling_level": "sequence",
    "reward_weights": [1.0, 0.5],
    "multi_objective_aggregation": "normalize_then_sum",
    "scale_rewards": "batch",
    "loss_type": "dr_grpo",
    "max_tool_calling_iterations": 3,
    "vllm_importance_sampling_mode": "token_truncate",
    "vllm_importance_sampling_clip_min": 0.5,
    "off_policy_mask_threshold": 0.5,
    "num_completions_to_print": 2,
    "log_completions": True,
    "log_completions_hub_repo": "user/logs",
    "transformers_continuous_batching_config": {"max_batch_tokens": 256},
}
# GRPOConfig fields that may stay at their default in `_config_with_every_field_changed`, and why.
LEFT_AT_DEFAULT = {
    "output_dir": "set to tmp_path (differs from no default anyway)",
    "use_cpu": "the test runs on a CPU",
    "report_to": "no logging integration in tests",
    "bf16": "bf16=True needs an accelerator",
    "fp16_full_eval": "needs an accelerator",
    "tf32": "needs an Ampere GPU",
    "auto_find_batch_size": "needs accelerate's memory utilities on an accelerator",
    "load_best_model_at_end": "needs an evaluation strategy equal to the save strategy",
    "parallelism_config": "an accelerate ParallelismConfig needs a multi-device launch",
    "dataloader_pin_memory": "forced off without an accelerator",
    "dataloader_prefetch_factor": "needs dataloader workers",
    "ddp_backend": "another backend initialises torch.distributed when the config is built",
    "local_rank": "set by the launcher; another value initialises torch.distributed",
    "fsdp": "needs a distributed launch",
    "fsdp_config": "needs a distributed launch",
    "deepspeed": "needs the deepspeed package",
    "debug": "underflow_overflow debugging changes nothing GRPO reads",
    "steps_per_generation": "derived from generation_batch_size (checked below)",
    "gradient_checkpointing": "deprecated alias of activation_checkpointing",
    "gradient_checkpointing_kwargs": "deprecated alias of activation_checkpointing_kwargs",
    "vllm_importance_sampling_cap": "deprecated alias of vllm_importance_sampling_clip_max",
    "use_transformers_paged": "deprecated alias of use_transformers_continuous_batching",
}


def _other_values(field: dataclasses.Field, value) -> list:
    """Candidate values different from ``value``: the field's other choices, or for a bool, enum, int or float
    field a few others (else none)."""
    choices = field.metadata.get("choices")
    if choices:
        return [choice for choice in choices if choice != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, enum.Enum):
        return [member.value for member in type(value) if member != value]
    if isinstance(value, int):
        return [value + 1, value + 2]
    if isinstance(value, float):
        return [value / 2 if value else 0.25, value + 0.5]
    return []


def _config_with_every_field_changed(output_dir) -> tuple[GRPOConfig, set[str]]:
    """A valid GRPOConfig whose fields differ from their defaults wherever a valid other value exists: the
    explicit values above, then one field at a time the first candidate of ``_other_values`` that GRPOConfig
    accepts and keeps. Returns the config and the names of the fields changed."""
    values = {"output_dir": str(output_dir), "use_cpu": True, "bf16": False, "report_to": "none"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = GRPOConfig(**values)
        values.update(EXPLICIT_VALUES)
        GRPOConfig(**values)  # the explicit values are valid together
        for field in dataclasses.fields(GRPOConfig):
            if not field.init or field.name in values or field.name in LEFT_AT_DEFAULT:
                continue
            for candidate in _other_values(field, getattr(default, field.name)):
                try:
                    changed = GRPOConfig(**{**values, field.name: candidate})
                except (ValueError, TypeError, ImportError, RuntimeError):
                    continue
                if getattr(changed, field.name) != getattr(default, field.name):
                    values[field.name] = candidate
                    break
        config = GRPOConfig(**values)
    changed = {
        f.name
        for f in dataclasses.fields(GRPOConfig)
        if f.init and getattr(config, f.name) != getattr(default, f.name)
    }
    return config, changed


@pytest.mark.parametrize("config_class", [MEDSConfig, CliffConfig])
def test_from_grpo_config_keeps_every_field(config_class, tmp_path):
    grpo, changed = _config_with_every_field_changed(tmp_path)
    init_fields = {f.name for f in dataclasses.fields(GRPOConfig) if f.init}
    # Every field but the few with a reason to stay at its default holds a non-default value, so a field the
    # conversion dropped or reset would show up below.
    assert init_fields - changed - {"output_dir"} <= set(LEFT_AT_DEFAULT), (
        init_fields - changed - set(LEFT_AT_DEFAULT)
    )
    prefix = "meds_alpha" if config_class is MEDSConfig else "cliff_lam"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = config_class.from_grpo_config(grpo, **{prefix: 0.05})
    assert isinstance(converted, config_class) and getattr(converted, prefix) == 0.05
    different = {name: (getattr(grpo, name), getattr(converted, name)) for name in sorted(init_fields)}
    different = {name: pair for name, pair in different.items() if pair[0] != pair[1]}
    assert different == {}, (
        f"(GRPOConfig value, converted value) of the fields from_grpo_config changed: {different}"
    )

    small = GRPOConfig(
        output_dir=str(tmp_path), **{k: v for k, v in BASE.items() if k != "per_device_train_batch_size"},
        per_device_train_batch_size=4, generation_batch_size=16,
    )  # fmt: skip
    assert config_class.from_grpo_config(small).steps_per_generation == 4
    assert config_class.from_grpo_config(small, generation_batch_size=8).steps_per_generation == 2
    with pytest.raises(TypeError, match=r"\['not_a_field'\] are not fields"):
        config_class.from_grpo_config(small, not_a_field=1)
    with pytest.raises(TypeError, match="needs a trl.GRPOConfig"):
        config_class.from_grpo_config({"output_dir": "x"})


def test_trainers_suggest_from_grpo_config(toy_policy_path, tmp_path):
    from hf_meds_cliff import CliffGRPOTrainer, MEDSGRPOTrainer

    grpo = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    with pytest.raises(TypeError, match=r"MEDSConfig\.from_grpo_config"):
        MEDSGRPOTrainer(model=str(toy_policy_path), reward_funcs=[correct], args=grpo)
    with pytest.raises(TypeError, match=r"CliffConfig\.from_grpo_config"):
        CliffGRPOTrainer(model=str(toy_policy_path), reward_funcs=[correct], args=grpo)


def test_reward_weights_mismatch_counts_the_users_functions(toy_policy_path, tmp_path):
    with pytest.raises(
        ValueError, match=r"reward_weights has 1 value\(s\) \(\[1\.0\]\) but 2 reward function\(s\)"
    ):
        _meds_trainer(toy_policy_path, tmp_path, reward_funcs=(correct, length_score), reward_weights=[1.0])
    trainer = _meds_trainer(
        toy_policy_path, tmp_path, reward_funcs=(correct, length_score), reward_weights=[1.0, 0.5]
    )
    assert trainer.reward_weights.tolist() == [1.0, 0.5, 1.0]  # the penalty column has weight 1
    assert trainer.args.reward_weights == [1.0, 0.5]  # the user's config is left as it was


# ------------------------------------------------------------------------------------------------
# First-batch 0/1 correctness check
# ------------------------------------------------------------------------------------------------


def test_non_binary_correctness_values():
    assert non_binary_correctness_values([0.0, 1.0, 1.0, math.nan]) == []
    assert non_binary_correctness_values([0.0, 0.0]) == []
    assert non_binary_correctness_values([0.0, 0.5, 1.0]) == [0.0, 0.5, 1.0]
    assert non_binary_correctness_values([0.31, 0.42]) == [0.31, 0.42]  # two values, both "wrong"
    assert non_binary_correctness_values([-1.0, 5.0], threshold=5.0) == []
    with pytest.raises(ValueError, match="cliff_correctness_reward_index=1.*cliff_correctness_threshold=1"):
        check_binary_correctness(
            [0.2, 0.4, 0.9], method="Cliff", index_field="cliff_correctness_reward_index", index=1,
            threshold_field="cliff_correctness_threshold", threshold=1.0, reward_name="length_score",
        )  # fmt: skip


@pytest.mark.slow
def test_meds_stops_on_a_graded_correctness_reward(toy_policy_path, tmp_path):
    trainer = _meds_trainer(toy_policy_path, tmp_path, reward_funcs=(length_score,))
    with pytest.raises(ValueError, match=r"MEDS needs a 0/1 correctness reward.*'length_score'.*"
                       r"meds_correctness_reward_index=0.*meds_correctness_threshold=1"):  # fmt: skip
        trainer.train()


@pytest.mark.slow
def test_cliff_stops_on_a_graded_correctness_reward(toy_policy_path, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff import CliffGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset

    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    trainer = CliffGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(toy_policy_path),
        reward_funcs=[correct, length_score],
        args=CliffConfig(
            **{**BASE, "output_dir": str(tmp_path), "max_steps": 1}, cliff_correctness_reward_index=1
        ),
        train_dataset=make_toy_dataset("train", 2, seed=0),
        processing_class=tokenizer,
    )
    with pytest.raises(
        ValueError, match=r"Cliff needs a 0/1 correctness reward.*cliff_correctness_reward_index=1"
    ):
        trainer.train()


# ------------------------------------------------------------------------------------------------
# Truncated completions under mask_truncated_completions
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask_truncated", [True, False])
def test_truncated_boxed_completion_gets_no_feature_when_masked(toy_policy_path, tmp_path, mask_truncated):
    """A completion cut off after ``\\boxed{`` (no eos) is masked out of TRL's loss and forward: no feature."""
    trainer = _meds_trainer(toy_policy_path, tmp_path, mask_truncated_completions=mask_truncated)
    tokenizer = trainer.processing_class
    text = "7 + 5 = 12. 12 * 3 = 36. The answer is \\boxed{36}."
    finished = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    truncated = tokenizer(text[:-3], add_special_tokens=False)["input_ids"]  # "...\boxed{3", cut off
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Compute (7 + 5) * 3."}], add_generation_prompt=True, tokenize=True,
        return_dict=False,
    )  # fmt: skip
    prompt = list(prompt["input_ids"]) if isinstance(prompt, dict) else list(prompt)
    trainer._meds_prompt_ids = [prompt, prompt]
    trainer._meds_locations = None
    features, has_feature, _ = trainer._meds_local_features([finished, truncated])
    assert has_feature.tolist() == [True, not mask_truncated]
    assert torch.all(features[1] == 0) == mask_truncated
