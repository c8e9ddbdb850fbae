"""``hf-meds-cliff preflight``: a recipe and its dataset in, per method whether it can act, no model loaded."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT

from hf_meds_cliff.cli import main


@pytest.fixture(autouse=True)
def no_model_loading(monkeypatch):
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("preflight loaded a model")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def _json(capsys, *argv):
    assert main(["preflight", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_toy_recipe_meds_can_act(capsys):
    report = _json(capsys, "meds")
    # the toy recipe: 64 prompts, 8 a step, 40 steps, dynamic sampling -> 5 memorised visits a prompt
    assert report["pool_size"] == 64 and report["prompts_per_generation"] == 8 and report["generations"] == 40
    assert report["meds"]["estimate"]["visits_per_prompt"] == 5.0 and report["meds"]["can_act"] is True
    assert "cliff" not in report


def test_many_prompts_few_steps_meds_cannot_act(capsys):
    report = _json(capsys, "meds", "--toy_train_size", "2000", "--max_steps", "10")
    # the toy train split may repeat a question: the pool is its distinct problem ids
    assert 1900 < report["pool_size"] <= 2000
    assert report["meds"]["estimate"]["visits_per_prompt"] == pytest.approx(80 / report["pool_size"])
    assert report["meds"]["can_act"] is False
    assert "for more steps" in report["meds"]["why"]


def test_text_output_names_the_numbers(capsys):
    assert main(["preflight", "meds", "--toy_train_size", "512", "--max_steps", "60", "--num_generations", "8",
                 "--per_device_train_batch_size", "16"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "MEDS: can barely act" in out and "memorised visits per prompt   0.23" in out
    assert "0.23 memorised visits per prompt over 60 steps (511 prompts)" in out  # one repeated question


def test_cliff_sequence_level_and_teacher_load(capsys):
    token = _json(capsys, "cliff")
    assert token["cliff"]["can_act"] is True
    # toy Cliff recipe: 8 prompts a generation x 8 rollouts; assumed half of the groups mixed, half right in them
    assert token["cliff"]["per_generation_batch"]["judge_calls"] == pytest.approx(8 * 0.5 * 8 * 0.5)
    assert token["cliff"]["per_optimizer_step"]["judge_calls"] == pytest.approx(16.0)
    sequence = _json(capsys, "cliff", "--importance_sampling_level", "sequence", "--loss_type", "grpo")
    assert sequence["cliff"]["can_act"] is False
    assert "importance_sampling_level='sequence'" in sequence["cliff"]["why"]
    teacher = _json(capsys, "cliff", "--cliff_outcome", "teacher", "--mixed_fraction", "1.0")
    assert teacher["cliff"]["per_generation_batch"]["judge_calls"] == pytest.approx(8 * 8)  # every rollout judged


def test_paper_recipe_batch_arithmetic_on_eight_processes(tmp_path, capsys):
    rows = [{"prompt": f"What is {i} + {i}?", "solution": str(2 * i)} for i in range(300)]
    data = tmp_path / "dapo.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = _json(
        capsys, "meds", "--config", str(ROOT / "recipes" / "meds_qwen3_1.7b.yaml"), "--dataset_name", str(data),
        "--num_processes", "8",
    )  # fmt: skip
    # 4 per device x 8 processes x 256 steps per generation = 8192 completions = 512 prompts; 300 steps of 8
    # micro-batches = 2400 micro-batches, one generation every 256 -> 10 generation batches
    assert report["prompts_per_generation"] == 512 and report["generations"] == 10
    assert report["steps_per_generation_batch"] == 32
    assert report["meds"]["estimate"]["visits_per_prompt"] == pytest.approx(5120 / 300)


def test_bad_input_is_one_line(capsys):
    assert main(["preflight", "meds", "--num_processes", "0"]) != 0
    assert "--num_processes 0 must be >= 1" in capsys.readouterr().err
