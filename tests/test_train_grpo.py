"""The baseline script: argument handling, clear errors, and a real `trainer.train()` smoke run."""

import json

import pytest
import torch
from helpers import load_script, mix_script_rewards

from hf_meds_cliff.dapo import DAPOConfig as GRPOConfig
from hf_meds_cliff.script_utils import parse_script_args, resolve_model_path, toy_recipe_path


def test_no_arguments_means_the_toy_recipe(tmp_path):
    script_args, training_args, model_args = parse_script_args(GRPOConfig, "grpo", argv=[])
    assert model_args.model_name_or_path == "toy" and script_args.dataset_name == "toy"
    assert training_args.use_cpu and not training_args.bf16
    # Flags still override the recipe.
    _, training_args, _ = parse_script_args(GRPOConfig, "grpo", argv=["--max_steps", "3"])
    assert training_args.max_steps == 3
    assert toy_recipe_path("grpo").is_file()


def test_incompatible_options_are_rejected_with_the_fix():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--bf16 false"):
            parse_script_args(GRPOConfig, "grpo", argv=["--bf16", "true"])
        # A real model without a recipe gets TRL's bf16 default: the error says how to run on CPU.
        with pytest.raises(ValueError, match="--bf16 false --use_cpu true"):
            parse_script_args(GRPOConfig, "grpo", argv=["--model_name_or_path", "Qwen/Qwen3-1.7B"])
    with pytest.raises(ValueError, match="Unknown reward function 'acc'"):
        parse_script_args(GRPOConfig, "grpo", argv=["--reward_funcs", "acc"])
    with pytest.raises(ValueError, match="overlong_buffer_length 512 must be in"):
        parse_script_args(GRPOConfig, "grpo", argv=["--reward_funcs", "math_answer", "overlong"])


def test_missing_local_model_path_is_a_clear_error(tmp_path):
    script_args, _, model_args = parse_script_args(
        GRPOConfig,
        "grpo",
        argv=["--model_name_or_path", str(tmp_path / "nope"), "--bf16", "false", "--use_cpu", "true"],
    )
    with pytest.raises(ValueError, match="looks like a local path but does not exist"):
        resolve_model_path(script_args, model_args)


@pytest.mark.slow
def test_train_grpo_smoke_run_trains_and_writes_outputs(tmp_path, toy_policy_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    mix_script_rewards(monkeypatch)  # parameters change whatever this machine's warm-up solves

    script = load_script("train_grpo")
    args = parse_script_args(
        GRPOConfig,
        "grpo",
        argv=[
            "--config",
            str(toy_recipe_path("grpo")),
            "--model_name_or_path",
            str(toy_policy_path),
            "--output_dir",
            str(tmp_path / "out"),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "16",
            "--toy_train_size",
            "64",
            "--max_completion_length",
            "48",
        ],
    )
    trainer = script.main(*args)

    losses = [record["loss"] for record in trainer.state.log_history if "loss" in record]
    assert len(losses) == 2 and all(isinstance(loss, float) for loss in losses)
    initial = AutoModelForCausalLM.from_pretrained(toy_policy_path)
    changed = [
        name
        for name, param in trainer.model.named_parameters()
        if not torch.equal(param.detach().cpu(), initial.get_parameter(name).detach())
    ]
    assert changed, "no parameter changed after two GRPO steps"
    out = tmp_path / "out"
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("reward" in record for record in records)
