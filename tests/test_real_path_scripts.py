"""The scripts on the real-model path: a Qwen-tokenizer model folder, local files in the real dataset schemas.

``--model_name_or_path`` is the folder of the Qwen-tokenizer world (a tiny Qwen3 over Qwen's full vocabulary,
warmed up on MATH-style problems, cached; :mod:`hf_meds_cliff.toy.qwen_world`), loaded exactly like a Hub
checkpoint. The data files use the schemas of the real datasets:

* DAPO-Math-17k as verl stores it (parquet): ``data_source``, ``prompt`` (chat list), ``ability``,
  ``reward_model.ground_truth``, ``extra_info``;
* MATH (``problem``, ``solution``, ``level``, ``type``) with ``--answer_from_solution``;
* AIME-style (``id``, ``problem``, ``answer``).

Each run is a couple of optimizer steps on CPU.
"""

from __future__ import annotations

import json

import pytest
from helpers import load_script, mix_script_rewards, needs_qwen_tokenizer

pytestmark = [
    pytest.mark.slow,
    needs_qwen_tokenizer,
]

DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


@pytest.fixture(scope="module")
def qwen_world_path():
    from hf_meds_cliff.toy.qwen_world import warmup_qwen_world

    return warmup_qwen_world()


def _problems(family: str | None, count: int, stream: str):
    from hf_meds_cliff.toy.qwen_world import math_world_problems

    pool = math_world_problems("test", 400, seed=0, stream=stream)
    chosen = [p for p in pool if family is None or p.family == family]
    assert len(chosen) >= count
    return chosen[:count]


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    import datasets

    folder = tmp_path_factory.mktemp("real_schemas")
    dapo = [
        {
            "data_source": "math_dapo",
            "prompt": [{"content": DAPO_INSTRUCTION.format(problem=p.question), "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": p.answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": f"dapo-{i}"},
        }
        for i, p in enumerate(_problems(None, 8, "dapo"))
    ]
    datasets.Dataset.from_list(dapo).to_parquet(folder / "dapo-math-17k.parquet")
    # MEDS' memory is per prompt: two prompts that recur every step, from the family the policy gets wrong most.
    math_rows = [
        {"problem": p.question, "solution": p.solution, "level": "Level 3", "type": "Prealgebra"}
        for p in _problems("arithmetic", 2, "math")
    ]
    (folder / "math.jsonl").write_text("".join(json.dumps(r) + "\n" for r in math_rows))
    # Cliff judges groups with right and wrong answers: midpoints, which the policy solves about a third of the time.
    aime_rows = [
        {"id": f"2026-I-{i + 1}", "problem": p.question, "answer": p.answer, "solution": p.solution}
        for i, p in enumerate(_problems("midpoint", 8, "aime"))
    ]
    (folder / "aime.jsonl").write_text("".join(json.dumps(r) + "\n" for r in aime_rows))
    # Half random families, half parity (solved ~90 % of the time, with \text{} answers), so the evaluation checks
    # that correct samples are recognised without depending on the sampler's luck on the hard families.
    benchmark = [
        {"problem": p.question, "solution": p.solution, "unique_id": f"test/{i}.json"}
        for i, p in enumerate(_problems(None, 3, "benchmark") + _problems("parity", 3, "benchmark-parity"))
    ]
    (folder / "math500-like.jsonl").write_text("".join(json.dumps(r) + "\n" for r in benchmark))
    return folder


def _common(model_path, output_dir, steps=2):
    return [
        "--model_name_or_path", str(model_path),
        "--output_dir", str(output_dir),
        "--use_cpu", "true",
        "--bf16", "false",
        "--seed", "0",
        "--max_steps", str(steps),
        "--learning_rate", "1e-4",
        "--per_device_train_batch_size", "8",
        "--num_generations", "4",
        "--max_completion_length", "64",
        "--temperature", "1.0",
        "--beta", "0.0",
        "--logging_steps", "1",
        "--report_to", "none",
        "--save_strategy", "no",
        "--dataloader_num_workers", "0",
    ]  # fmt: skip


def _logged(output_dir) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]


def test_train_grpo_on_dapo_math_as_verl_stores_it(qwen_world_path, data_files, tmp_path):
    from hf_meds_cliff.dapo import DAPOConfig
    from hf_meds_cliff.script_utils import parse_script_args

    script = load_script("train_grpo")
    argv = [
        *_common(qwen_world_path, tmp_path),
        "--dataset_name", str(data_files / "dapo-math-17k.parquet"),
        "--prompt_template", "keep",
        "--answer_column", "reward_model",
    ]  # fmt: skip
    trainer = script.main(*parse_script_args(DAPOConfig, "grpo", argv=argv))
    first = trainer.train_dataset[0]
    assert first["prompt"][0]["content"].startswith("Solve the following math problem step by step.")
    assert first["answer"] == _problems(None, 1, "dapo")[0].answer  # reward_model.ground_truth
    logs = [r for r in _logged(tmp_path) if "loss" in r]
    assert len(logs) == 2 and all("rewards/math_answer/mean" in r for r in logs)
    assert len(trainer.processing_class) > 150_000  # the real Qwen vocabulary


def test_train_meds_on_math_finds_features_and_penalises(qwen_world_path, data_files, tmp_path, monkeypatch):
    from hf_meds_cliff.meds.config import MEDSConfig
    from hf_meds_cliff.script_utils import parse_script_args

    mix_script_rewards(
        monkeypatch
    )  # a wrong rollout per prompt every step, whatever this machine's warm-up solves

    script = load_script("train_meds")
    argv = [
        *_common(qwen_world_path, tmp_path),
        "--dataset_name", str(data_files / "math.jsonl"),
        "--answer_column", "solution",
        "--answer_from_solution", "true",
    ]  # fmt: skip
    script_args, training_args, model_args = parse_script_args(MEDSConfig, "meds", argv=argv)
    assert training_args.meds_answer_token == "auto"  # the reference rule, with the decoded fallback
    trainer = script.main(script_args, training_args, model_args)
    assert trainer.train_dataset[0]["answer"] == _problems("arithmetic", 1, "math")[0].answer
    logs = [r for r in _logged(tmp_path) if "meds/frac_with_feature" in r]
    assert len(logs) == 2
    assert all(r["meds/frac_with_feature"] > 0.5 for r in logs)  # boxed answers, reference answer token found
    assert logs[0]["meds/frac_penalized"] == 0.0  # empty memory
    # The same two prompts again: their wrong answers are penalised by the clusters of step 1.
    assert logs[1]["meds/frac_penalized"] > 0.0
    assert logs[1]["rewards/meds_penalty/mean"] < 0.0
    assert trainer.meds_memory.num_rows > 0 and (tmp_path / "meds_memory").is_dir()


@pytest.mark.integration
def test_train_cliff_on_aime_style_data_with_a_local_teacher(
    qwen_world_path, data_files, tmp_path, monkeypatch
):
    mix_script_rewards(monkeypatch)  # every group mixed: judged wherever the teacher's reference verifies
    script = load_script("train_cliff")
    argv = [
        *_common(qwen_world_path, tmp_path),
        "--per_device_train_batch_size", "16",
        "--dataset_name", str(data_files / "aime.jsonl"),
        "--answer_column", "answer",
        "--cliff_teacher", "transformers",
        "--cliff_teacher_model", str(qwen_world_path),
        "--cliff_teacher_max_tokens", "96",
    ]  # fmt: skip
    script.main(*script.parse_args(argv))
    logs = [r for r in _logged(tmp_path) if "cliff/judge_calls" in r]
    assert len(logs) == 2
    totals = {key: sum(r.get(f"cliff/{key}", 0.0) for r in logs) for key in ("solve_calls", "judge_calls")}
    # The teacher solved the problems (reference filter) and judged the wrong rollouts of verified mixed groups.
    assert totals["solve_calls"] > 0 and totals["judge_calls"] > 0, logs
    assert sum(r["cliff/groups_cliff"] for r in logs) > 0
    # A 10 M-parameter teacher cannot write the JSON judgment: each call is counted as a failure (p(a) = 0).
    judged = sum(r.get("cliff/judge_failures/parse_error", 0.0) for r in logs)
    assert 0 < judged <= totals["judge_calls"]


def test_eval_passk_on_a_local_benchmark_with_answer_from_solution(qwen_world_path, data_files, tmp_path):
    from transformers import HfArgumentParser

    from hf_meds_cliff.evaluation import EvalArguments
    from hf_meds_cliff.rewards import extract_boxed_answer

    script = load_script("eval_passk")
    benchmark = data_files / "math500-like.jsonl"
    argv = [
        "--model_name_or_path", str(qwen_world_path),
        "--benchmarks", str(benchmark),
        "--answer_column", "solution",
        "--answer_from_solution", "true",
        "--id_column", "unique_id",
        "--num_samples", "4",
        "--max_new_tokens", "80",
        "--backend", "transformers",
        "--verify_workers", "1",
        "--output_dir", str(tmp_path),
    ]  # fmt: skip
    (args,) = HfArgumentParser(EvalArguments).parse_args_into_dataclasses(args=argv)
    summary = script.main(args)
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    solutions = {json.loads(line)["unique_id"]: json.loads(line)["solution"] for line in benchmark.open()}
    assert len(samples) == 6 * 4
    for sample in samples:  # the ground truth is the boxed answer, not the whole worked solution
        assert sample["answer"] == extract_boxed_answer(solutions[sample["problem_id"]])
    block = summary["benchmarks"]["math500-like"]
    assert set(block["pass@k"]) >= {"1", "4"}
    assert sum(s["correct"] for s in samples) > 0, "the warmed-up policy solves some of its own problems"
