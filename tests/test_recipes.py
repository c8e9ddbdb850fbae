"""Every recipe parses with the parser of the script it names, so the recipes never rot (no training)."""

import re
from pathlib import Path

import pytest
import torch
import yaml

from hf_meds_cliff.script_utils import build_parser

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
ACCELERATE_CONFIGS = sorted((ROOT / "recipes" / "accelerate").glob("*.yaml"))


def config_class_for(script: str):
    if script == "train_meds":
        from hf_meds_cliff import MEDSConfig

        return MEDSConfig
    if script == "train_cliff":
        from hf_meds_cliff import CliffConfig

        return CliffConfig
    if script == "train_grpo":
        from hf_meds_cliff.dapo import DAPOConfig

        return DAPOConfig
    raise AssertionError(f"unknown script {script}")


def test_there_are_recipes_for_both_methods_and_the_baseline():
    names = {path.name for path in RECIPES}
    assert {"meds_qwen3_1.7b.yaml", "meds_qwen2.5_math_7b.yaml", "meds_qwen3_8b.yaml"} <= names
    assert {"cliff_qwen3_4b.yaml", "dapo_qwen3_1.7b.yaml"} <= names
    assert any("lora" in name for name in names)


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_parses_with_its_script(recipe):
    header = recipe.read_text()
    launch = re.search(
        r"accelerate launch --config_file (recipes/accelerate/\S+).*?scripts/(train_\w+)\.py"
        r"\s+--config recipes/(\S+)",
        header,
        re.S,
    )
    assert launch, f"{recipe.name} must document its `accelerate launch` command"
    accelerate_config, script, named_recipe = launch.groups()
    assert named_recipe == recipe.name, f"{recipe.name} documents the command of {named_recipe}"
    assert (ROOT / accelerate_config).is_file()
    parser = build_parser(config_class_for(script))
    # The recipes are for GPUs (bf16); TrainingArguments rejects bf16 on a CPU-only machine at parse time.
    overrides = [] if torch.cuda.is_available() else ["--bf16", "false"]
    script_args, training_args, model_args = parser.parse_args_and_config(
        args=["--config", str(recipe), *overrides]
    )
    values = yaml.safe_load(header)
    assert values["bf16"] is True
    assert model_args.model_name_or_path == values["model_name_or_path"]
    assert script_args.dataset_name == values["dataset_name"]
    assert training_args.learning_rate == values["learning_rate"]
    for key, value in values.items():
        if key.startswith(("meds_", "cliff_")):
            assert getattr(training_args, key) == value, key


def test_paper_hyperparameters_are_in_the_meds_recipes():
    for name, alpha, beta in [
        ("meds_qwen3_1.7b", 0.1, 0.2),
        ("meds_qwen2.5_math_7b", 0.1, 0.2),
        ("meds_qwen3_8b", 0.02, 0.04),
    ]:
        values = yaml.safe_load((ROOT / "recipes" / f"{name}.yaml").read_text())
        assert (values["meds_alpha"], values["meds_beta"]) == (alpha, beta)
        assert values["epsilon_high"] == 0.28 and values["loss_type"] == "dapo" and values["dynamic_sampling"]
        assert values["num_generations"] == 16
        assert values["meds_num_layers"] == 14  # run_meds.sh: use_last_n_layers=14 for every model
        completions_per_step = (
            values["per_device_train_batch_size"] * values["gradient_accumulation_steps"] * 8
        )
        assert completions_per_step == 16 * 16  # mini-batch of 16 prompts
        assert values["per_device_train_batch_size"] * values["steps_per_generation"] * 8 == 512 * 16
    cliff = yaml.safe_load((ROOT / "recipes" / "cliff_qwen3_4b.yaml").read_text())
    assert cliff["num_generations"] == 12 and cliff["cliff_lam"] == 0.0 and cliff["cliff_teacher"] == "http"


@pytest.mark.parametrize("config", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_config_is_valid(config):
    from accelerate.commands.config.config_args import ClusterConfig

    cluster = ClusterConfig.from_yaml_file(str(config))
    assert cluster.num_processes >= 1
