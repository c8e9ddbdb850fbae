"""The ``hf-meds-cliff`` command: entry point, help of each command, the accelerate hand-off, shared code."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from helpers import ROOT, load_script

from hf_meds_cliff import cli
from hf_meds_cliff.script_utils import toy_recipe_path


def test_console_script_in_pyproject_resolves_to_a_callable():
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module_name, _, attribute = scripts["hf-meds-cliff"].partition(":")
    entry_point = getattr(importlib.import_module(module_name), attribute)
    assert callable(entry_point) and entry_point is cli.main


def test_no_command_prints_the_commands(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    for command in ("meds", "cliff", "grpo", "eval", "report", "preflight"):
        assert command in out


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("meds", "--meds_alpha"),
        ("cliff", "--teacher_base_url"),
        ("grpo", "--dynamic_sampling"),
        ("eval", "--num_samples"),
        ("report", "--max_prompts"),
        ("preflight", "--mixed_fraction"),
    ],
)
def test_every_command_has_help(command, option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: hf-meds-cliff {command}" in out and option in out


def test_module_runs_as_a_program():
    result = subprocess.run(
        [sys.executable, "-m", "hf_meds_cliff.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0 and "{meds,cliff,grpo,eval,compare,report,preflight,judge-eval}" in result.stdout


def test_unknown_flags_go_to_accelerate_launch():
    launch, script = cli.split_training_arguments(
        "meds", ["--max_steps", "6", "--num_processes", "2", "--output_dir", "D"]
    )
    assert (launch, script) == (["--num_processes", "2"], ["--max_steps", "6", "--output_dir", "D"])
    launch, script = cli.split_training_arguments(
        "cliff",
        ["--config", str(toy_recipe_path("cliff")), "--teacher_model", "m", "--accelerate_config", "zero3"],
    )
    assert launch[0] == "--config_file" and launch[1].endswith("zero3.yaml") and len(launch) == 2
    assert script == ["--config", str(toy_recipe_path("cliff")), "--teacher_model", "m"]


def test_unknown_config_keys_are_named(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(toy_recipe_path("grpo").read_text() + "\nmeds_alphaa: 0.1\n")
    with pytest.raises(ValueError, match=r"Unknown keys in the --config file: .*meds_alphaa"):
        cli.split_training_arguments("grpo", ["--config", str(recipe)])


def test_training_commands_launch_the_package_module(monkeypatch):
    import accelerate.commands.launch as launch_module

    launched = []
    monkeypatch.setattr(launch_module, "launch_command", launched.append)
    assert cli.main(["grpo", "--max_steps", "3", "--num_processes", "1"]) == 0
    (arguments,) = launched
    assert arguments.module and arguments.training_script == "hf_meds_cliff.scripts.train_grpo"
    assert arguments.training_script_args == ["--max_steps", "3"] and arguments.num_processes == 1

    def failing(_):
        raise subprocess.CalledProcessError(3, ["python"])

    monkeypatch.setattr(launch_module, "launch_command", failing)
    assert cli.main(["meds"]) == 3


def test_scripts_are_thin_wrappers_of_the_package():
    from hf_meds_cliff.scripts import eval_passk, train_cliff, train_grpo, train_meds

    for name, module in [
        ("train_meds", train_meds),
        ("train_cliff", train_cliff),
        ("train_grpo", train_grpo),
        ("eval_passk", eval_passk),
    ]:
        script = load_script(name)
        assert script.main is module.main and script.parse_args is module.parse_args, name
    assert load_script("train_cliff").apply_teacher_arguments is train_cliff.apply_teacher_arguments


def test_model_cards_of_cli_runs_show_the_cli_command():
    from hf_meds_cliff.model_card import reproduce_command
    from hf_meds_cliff.scripts import train_meds

    assert (
        reproduce_command([train_meds.__file__, "--output_dir", "a b"])
        == "hf-meds-cliff meds --output_dir 'a b'"
    )
    assert reproduce_command(["scripts/train_meds.py", "--max_steps", "2"]) == (
        "python scripts/train_meds.py --max_steps 2"
    )
