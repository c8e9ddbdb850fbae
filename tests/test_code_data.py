"""Code training data: DeepCoder-Preview-Dataset rows (primeintellect, taco, lcbv5 schemas; local jsonl/parquet written
here) become ``prompt`` + ``tests`` + ``fn_name`` columns through the scripts' data path, and the code reward grades
real programs against them."""

from __future__ import annotations

import json
import logging

import pytest
from code_rows import ADD_PROGRAM, MAX_PROGRAM, SUM_PROGRAM, SUM_WRONG, deepcoder_rows, fenced, write_jsonl
from helpers import load_script, needs_qwen_tokenizer

from hf_meds_cliff.code import CodeTestsReward
from hf_meds_cliff.data import LIVECODEBENCH_OVERLAP_WARNING, prepare_code_dataset
from hf_meds_cliff.script_utils import (
    RLScriptArguments,
    build_reward_funcs,
    dataset_domain,
    load_train_dataset,
)

CORRECT = {"primeintellect": [SUM_PROGRAM, ADD_PROGRAM], "taco": [SUM_PROGRAM, ADD_PROGRAM]}
CORRECT["lcbv5"] = [SUM_PROGRAM, MAX_PROGRAM]


def _script_args(path, config=None, **overrides):
    return RLScriptArguments(dataset_name=str(path), dataset_config=config, **overrides)


@pytest.mark.parametrize("config", ["primeintellect", "taco", "lcbv5"])
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_deepcoder_rows_load_into_prompt_tests_fn_name_and_grade(tmp_path, config, suffix):
    rows = deepcoder_rows(config)
    path = tmp_path / f"{config}.{suffix}"
    if suffix == "jsonl":
        write_jsonl(path, rows)
    else:
        import datasets

        datasets.Dataset.from_list(rows).to_parquet(str(path))
    dataset = load_train_dataset(_script_args(path, config))
    assert {"prompt", "tests", "fn_name"} <= set(dataset.column_names) and dataset_domain(dataset) == "code"
    stdin_row, function_row = dataset[0], dataset[1]
    assert stdin_row["fn_name"] is None and "standard input" in stdin_row["prompt"][-1]["content"]
    assert function_row["fn_name"] in ("add", "maxPlus")
    assert stdin_row["prompt"][-1]["content"].startswith(rows[0]["problem"])
    if config == "lcbv5":
        assert "def maxPlus(self" in function_row["prompt"][-1]["content"]  # the starter code
    reward = CodeTestsReward()
    completions = [fenced(program) for program in CORRECT[config]] + [fenced(SUM_WRONG), "no code"]
    scores = reward(
        completions,
        tests=[*dataset["tests"], dataset["tests"][0], dataset["tests"][0]],
        fn_name=[*dataset["fn_name"], None, None],
    )
    assert scores == [1.0, 1.0, 0.0, 0.0]


def test_tests_stored_as_objects_become_json_text(tmp_path):
    rows = deepcoder_rows("lcbv5")
    for row in rows:
        row["tests"] = json.loads(row["tests"])  # a local file written with objects instead of JSON text
    dataset = load_train_dataset(_script_args(write_jsonl(tmp_path / "objects.jsonl", rows)))
    assert [json.loads(t) for t in dataset["tests"]] == [row["tests"] for row in rows]
    scores = CodeTestsReward()(
        [fenced(SUM_PROGRAM), fenced(MAX_PROGRAM)], tests=dataset["tests"], fn_name=dataset["fn_name"]
    )
    assert scores == [1.0, 1.0]


def test_lcbv5_warns_that_it_overlaps_livecodebench_v6(tmp_path, caplog):
    path = write_jsonl(tmp_path / "lcbv5.jsonl", deepcoder_rows("lcbv5"))
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.data"):
        load_train_dataset(_script_args(path, "lcbv5"))
    assert LIVECODEBENCH_OVERLAP_WARNING in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.data"):
        load_train_dataset(_script_args(path))  # no config given: recognised by LiveCodeBench's test schema
    assert LIVECODEBENCH_OVERLAP_WARNING in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.data"):
        load_train_dataset(_script_args(write_jsonl(tmp_path / "taco.jsonl", deepcoder_rows("taco")), "taco"))
    assert LIVECODEBENCH_OVERLAP_WARNING not in caplog.text


def test_malformed_tests_stop_loading_naming_the_row(tmp_path):
    import datasets

    rows = deepcoder_rows("taco")
    rows[1]["tests"] = '{"inputs": [[1, 2]], "fn_name": "add"}'  # no outputs
    with pytest.raises(ValueError, match=r"[Rr]ow 1"):
        prepare_code_dataset(datasets.Dataset.from_list(rows))
    rows[1]["tests"] = "not json"
    with pytest.raises(ValueError, match=r"[Rr]ow 1"):
        prepare_code_dataset(datasets.Dataset.from_list(rows))
    rows[1]["tests"] = ""
    with pytest.raises(ValueError, match=r"Row 1, column 'tests': no tests"):
        prepare_code_dataset(datasets.Dataset.from_list(rows))


def test_missing_columns_name_the_flags(tmp_path):
    import datasets

    with pytest.raises(ValueError, match="--tests_column"):
        prepare_code_dataset(datasets.Dataset.from_list([{"problem": "x", "checks": "[]"}]))
    path = write_jsonl(tmp_path / "math.jsonl", [{"problem": "1+1?", "answer": "2"}])
    with pytest.raises(ValueError, match="--prompt_template code is for code datasets"):
        load_train_dataset(_script_args(path, prompt_template="code"))


def test_code_datasets_get_the_code_reward(tmp_path, caplog):
    from hf_meds_cliff.rewards import OverlongPenaltyReward

    class Training:
        max_completion_length = 64

    args = _script_args("unused", reward_funcs=["math_answer", "overlong"], overlong_buffer_length=16)
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.script_utils"):
        funcs = build_reward_funcs(args, Training(), domain="code")
    assert isinstance(funcs[0], CodeTestsReward) and isinstance(funcs[1], OverlongPenaltyReward)
    assert "replaced by `code_tests`" in caplog.text
    (explicit,) = build_reward_funcs(
        _script_args("unused", reward_funcs=["code_tests"], code_max_tests=15), None
    )
    assert isinstance(explicit, CodeTestsReward)


def test_math_datasets_are_unchanged(tmp_path):
    path = write_jsonl(tmp_path / "math.jsonl", [{"problem": "1+1?", "answer": "2"}])
    dataset = load_train_dataset(_script_args(path))
    assert dataset_domain(dataset) == "math" and dataset[0]["answer"] == "2"


@pytest.mark.slow
@needs_qwen_tokenizer
def test_train_grpo_script_on_deepcoder_rows_scores_with_the_code_reward(tmp_path):
    """The training script on a local DeepCoder file with a real checkpoint folder (the Qwen-tokenizer world): the
    data path builds the code prompts, `math_answer` becomes `code_tests`, and TRL hands the reward the `tests` and
    `fn_name` columns (two optimizer steps; the tiny math model writes no programs, so the rewards are 0)."""
    from hf_meds_cliff.dapo import DAPOConfig
    from hf_meds_cliff.script_utils import parse_script_args
    from hf_meds_cliff.toy.qwen_world import warmup_qwen_world

    path = write_jsonl(tmp_path / "taco.jsonl", deepcoder_rows("taco") * 2)
    script = load_script("train_grpo")
    argv = [
        "--model_name_or_path", str(warmup_qwen_world()),
        "--dataset_name", str(path),
        "--dataset_config", "taco",
        "--output_dir", str(tmp_path / "run"),
        "--use_cpu", "true", "--bf16", "false", "--seed", "0", "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--num_generations", "2", "--max_completion_length", "24",
        "--beta", "0.0", "--logging_steps", "1", "--report_to", "none", "--save_strategy", "no",
        "--dataloader_num_workers", "0",
    ]  # fmt: skip
    trainer = script.main(*parse_script_args(DAPOConfig, "grpo", argv=argv))
    assert set(trainer.train_dataset.column_names) >= {"prompt", "tests", "fn_name"}
    (reward,) = trainer.reward_funcs
    assert isinstance(reward, CodeTestsReward)
    logs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "loss" in r]
    assert len(steps) == 2 and all("rewards/code_tests/mean" in r for r in steps)
