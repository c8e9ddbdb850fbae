"""Cliff on code through the real-data path: ``train_cliff.py``'s parser and trainer builder on a DeepCoder-format
file, the policy on Qwen's tokenizer, the teacher behind ``transformers serve`` on loopback.

The served teacher is the hand-built one-token model of ``test_cliff_served_teacher.py``; here its one answer holds
both a program and a JSON verdict: as a ``solve`` reply its last fenced block is the reference program (it doubles
the input, so it passes the tests of the "print 2 * n" problem and fails those of "print 3 * n": the reference
filter runs it in the sandbox and must accept one and refuse the other), as a ``judge`` reply its JSON object puts
the first mistake at unit 2. Generation is scripted (a correct program, a wrong one, a correct one and a truncated
one per group), so every group is mixed by construction; the correctness reward is the real ``code_tests`` reward
the script builds for code data.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers import load_script, needs_qwen_tokenizer
from test_cliff_served_teacher import serve, write_verdict_teacher

from hf_meds_cliff.cliff import split_code_units
from hf_meds_cliff.cliff.protocol import problem_text

pytestmark = [needs_qwen_tokenizer, pytest.mark.slow, pytest.mark.integration]

NUM_GENERATIONS = 4
TEACHER_ANSWER = (
    '```python\nn = int(input())\nprint(2 * n)\n```\n{"final_answer_correct": false, "first_mistake": 2}'
)


def correct_rollout(k: int) -> str:
    return f"Multiply the input by {k}.\n```python\nn = int(input())\nprint({k} * n)\n```"


def wrong_rollout(k: int) -> str:
    return f"Read n, then scale it.\n```python\nn = int(input())\nresult = n + {k}\nprint(result)\n```"


def deepcoder_rows() -> list[dict]:
    """Two problems in DeepCoder's primeintellect schema (``tests`` and ``metadata`` as JSON text)."""
    rows = []
    for k in (2, 3):
        tests = [{"type": "stdin_stdout", "input": f"{n}\n", "output": f"{k * n}\n"} for n in (3, 10, -4)]
        rows.append(
            {
                "problem": f"Read an integer n from standard input and print {k} * n.",
                "tests": json.dumps(tests),
                "metadata": "{}",
            }
        )
    return rows


def rollout_func(prompts, trainer):
    tokenizer = trainer.processing_class
    prompt_ids, completion_ids = [], []
    for index, prompt in enumerate(prompts):
        k = int(re.search(r"print (\d+) \* n", problem_text(prompt)).group(1))
        member = index % NUM_GENERATIONS
        text = [correct_rollout(k), wrong_rollout(k), correct_rollout(k), f"Read n.\n```python\nprint({k} *"][
            member
        ]
        prompt_ids.append(
            list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"])
        )
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        completion_ids.append(
            ids + ([tokenizer.eos_token_id] if member != 3 else [])
        )  # the last is truncated
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[0.0] * len(i) for i in completion_ids],
    }


@pytest.fixture
def served_code_teacher(tmp_path):
    yield from serve(write_verdict_teacher(tmp_path / "code-teacher", TEACHER_ANSWER), tmp_path / "serve.log")


def test_cliff_trains_on_deepcoder_rows_with_a_served_teacher(served_code_teacher, tmp_path):
    from hf_meds_cliff.cliff.trainer import CliffGRPOTrainer
    from hf_meds_cliff.code import CodeTestsReward
    from hf_meds_cliff.script_utils import build_trainer
    from hf_meds_cliff.toy.model import ToyModelConfig, seeded_qwen3
    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    policy = tmp_path / "policy"
    seeded_qwen3(
        ToyModelConfig(max_position_embeddings=512),
        0,
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
    ).save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    data = tmp_path / "deepcoder.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in deepcoder_rows()))
    output_dir = tmp_path / "run"

    script = load_script("train_cliff")
    argv = [
        "--model_name_or_path", str(policy), "--output_dir", str(output_dir), "--dataset_name", str(data),
        "--reward_funcs", "code_tests", "--code_timeout", "10",
        "--use_cpu", "true", "--bf16", "false", "--seed", "0", "--max_steps", "2", "--learning_rate", "1e-3",
        "--beta", "0.0", "--per_device_train_batch_size", "8", "--num_generations", str(NUM_GENERATIONS),
        "--max_completion_length", "64", "--logging_steps", "1", "--report_to", "none", "--save_strategy", "no",
        "--dataloader_num_workers", "0", "--shuffle_dataset", "false",
        "--teacher_base_url", served_code_teacher.base_url, "--teacher_model", served_code_teacher.folder,
        "--cliff_teacher_temperature", "0", "--cliff_teacher_max_tokens", "8", "--cliff_teacher_timeout", "60",
        "--cliff_teacher_max_retries", "0",
    ]  # fmt: skip
    script_args, training_args, model_args, teacher_args = script.parse_args(argv)
    training_args = script.apply_teacher_arguments(training_args, teacher_args)
    trainer = build_trainer(
        CliffGRPOTrainer, script_args, training_args, model_args, rollout_func=rollout_func
    )
    assert isinstance(trainer.reward_funcs[0], CodeTestsReward) and trainer.cliff_domain == "code"
    assert trainer.teacher.domain == "code"  # the HTTP teacher sends the code solve and judge prompts
    trainer.train()
    trainer.close_teacher()

    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert len(logs) == 2 and all("loss" in record for record in logs)
    # Step 1: the "2 * n" group has a verified reference program and its wrong rollout is judged over HTTP; the
    # served program fails the "3 * n" tests, so that group falls back to GRPO (unverified). Truncated: p(a) = 0.
    first, second = logs
    assert (first["cliff/groups_cliff"], first["cliff/groups_fallback_unverified"]) == (1.0, 1.0)
    assert (first["cliff/solve_calls"], first["cliff/judge_calls"], first["cliff/teacher/requests"]) == (
        2.0,
        1.0,
        3.0,
    )
    assert first["cliff/executions"] == 1.0 and first["cliff/truncated"] == 2.0  # one per mixed group
    assert first["cliff/agreement"] == 1.0 and first["cliff/first_mistake_sentence"] == 2.0
    # Step 2 (same prompts): the verified reference and the judgment are cached; the refused one is asked again.
    assert (second["cliff/reference_cache_hits"], second["cliff/judgment_cache_hits"]) == (1.0, 1.0)
    assert (second["cliff/solve_calls"], second["cliff/judge_calls"]) == (1.0, 0.0)
    assert (
        trainer.cliff_judge.references == {key: TEACHER_ANSWER for key in trainer.cliff_judge.references}
        and len(trainer.cliff_judge.references) == 1
    )

    # The judged rollout's log line: code units, the served verdict, the failing test the judge saw.
    records = [json.loads(line) for line in (output_dir / "cliff_rollouts.jsonl").read_text().splitlines()]
    (judged,) = [r for r in records if r["step"] == 1 and r["source"] == "judged"]
    assert judged["domain"] == "code" and judged["completion"] == wrong_rollout(2)
    assert judged["sentences"] == [list(span) for span in split_code_units(wrong_rollout(2))]
    assert judged["teacher_raw"] == [TEACHER_ANSWER] and judged["first_mistake"] == 2
    assert "failed test 1 of 3: wrong answer" in judged["execution"]
    assert {r["source"] for r in records if r["step"] == 1} == {"judged", "truncated", "unverified"}

    # The wrong rollout's token advantages split where its line 2 ("result = n + 2") starts: the logged prefix
    # fraction is that token's index over the rollout's length (its tokens and EOS).
    text = wrong_rollout(2)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    start = split_code_units(text)[2][0]
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    boundary = next(index for index, (_, end) in enumerate(offsets) if end > start)
    assert "result" not in tokenizer.decode(ids[:boundary]) and tokenizer.decode(
        ids[boundary:]
    ).lstrip().startswith("result")
    assert judged["sample"] == 1
    assert first["cliff/prefix_fraction"] == pytest.approx(boundary / (len(ids) + 1))
