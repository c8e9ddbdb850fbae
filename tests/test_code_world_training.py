"""Cliff on the code world end to end: `train_cliff.py --domain code` (the CLI's `hf-meds-cliff cliff --domain code`)
with the code world's policy, data, sandboxed test reward and exact rule teacher."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import load_script

from hf_meds_cliff.cli import split_training_arguments
from hf_meds_cliff.cliff import CliffGRPOTrainer, code_unit_texts
from hf_meds_cliff.cliff.protocol import problem_text
from hf_meds_cliff.cliff.teachers import RuleBasedCodeTeacher
from hf_meds_cliff.script_utils import toy_recipe_path, with_toy_recipe
from hf_meds_cliff.toy.code_task import CodeProblem, parse_code_question

NUM_GENERATIONS = 8
_FLIPPED = {"+": "-", "-": "+", "*": "+"}


def wrong_at_step(problem: CodeProblem, step: int) -> str:
    """The worked completion with the operator of ``step`` flipped (its program line is the first wrong one)."""
    lines = problem.solution.split("\n")
    line_index = 3 + step  # prose, fence, read line, then one line per step
    op = problem.operations[step][0]
    lines[line_index] = lines[line_index].replace(f" {op} ", f" {_FLIPPED[op]} ", 1)
    return "\n".join(lines)


def scripted_completion(problem: CodeProblem, row: int) -> tuple[str, int | None]:
    """Row ``row`` of a step: (completion, the unit of its first mistake or None). Groups 0 and 1 of each step are
    mixed (3 right, 5 wrong at a step chosen by the row), group 2 is all right (zero variance, skipped)."""
    group, member = divmod(row, NUM_GENERATIONS)
    if group % 3 == 2 or member < 3:
        return problem.solution, None
    step = member % len(problem.operations)
    return wrong_at_step(problem, step), 2 + step  # units: prose (+ fence), read line, step lines


def test_the_code_recipe_is_picked_by_domain_code():
    assert with_toy_recipe(["--domain", "code"], "cliff")[:2] == [
        "--config",
        str(toy_recipe_path("cliff", "code")),
    ]
    assert with_toy_recipe(["--domain=code"], "cliff")[1] == str(toy_recipe_path("cliff", "code"))
    assert with_toy_recipe([], "cliff")[1] == str(toy_recipe_path("cliff"))
    assert with_toy_recipe(["--domain", "code"], "grpo")[1] == str(toy_recipe_path("grpo", "code"))
    assert load_script("train_grpo").parse_args(["--domain", "code"])[0].reward_funcs == ["code_tests"]
    with pytest.raises(ValueError, match="No packaged toy recipe for method='meds' with --domain code"):
        toy_recipe_path("meds", "code")
    with pytest.raises(ValueError, match="--domain 'lisp' is unknown"):
        toy_recipe_path("cliff", "lisp")
    script = load_script("train_cliff")
    script_args, training_args, model_args, _ = script.parse_args(["--domain", "code"])
    assert (script_args.domain, script_args.dataset_name, model_args.model_name_or_path) == (
        "code",
        "toy",
        "toy",
    )
    assert script_args.reward_funcs == ["code_tests"] and training_args.cliff_domain == "code"
    assert training_args.cliff_teacher == "rule"
    launch_args, script_argv = split_training_arguments("cliff", ["--domain", "code", "--num_processes", "1"])
    assert (launch_args, script_argv) == (["--num_processes", "1"], ["--domain", "code"])


@pytest.mark.slow
def test_domain_code_splits_token_advantages_at_the_first_wrong_program_line(tmp_path, monkeypatch):
    """`--domain code --max_steps 2` on scripted rollouts (so every step has known mixed groups): the sandboxed reward
    grades them, the rule teacher locates the wrong line, and each wrong rollout's advantages change exactly at the
    first token of that line."""
    from hf_meds_cliff.scripts import train_cliff

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func: scripted rollouts are the point here
    expected: dict[str, int | None] = {}

    def rollout_func(prompts, trainer):
        tokenizer = trainer.processing_class
        prompt_ids, completion_ids = [], []
        for row, prompt in enumerate(prompts):
            text, unit = scripted_completion(parse_code_question(problem_text(prompt)), row)
            expected[text] = unit
            prompt_ids.append(
                list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"])
            )
            completion_ids.append(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id])
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": [[0.0] * len(ids) for ids in completion_ids],
        }

    original_run_training = train_cliff.run_training
    monkeypatch.setattr(
        train_cliff,
        "run_training",
        lambda *args, **kwargs: original_run_training(*args, rollout_func=rollout_func, **kwargs),
    )
    captured = []
    original = CliffGRPOTrainer._generate_and_score_completions

    def capturing(self, inputs):
        output = original(self, inputs)
        texts = self.processing_class.batch_decode(output["completion_ids"], skip_special_tokens=True)
        captured.append((output["advantages"].clone(), output["completion_mask"].clone(), texts))
        return output

    monkeypatch.setattr(CliffGRPOTrainer, "_generate_and_score_completions", capturing)
    out = tmp_path / "out"
    trainer = train_cliff.main(
        *train_cliff.parse_args(
            [
                "--domain", "code",
                "--output_dir", str(out),
                "--max_steps", "2",
                "--per_device_train_batch_size", str(3 * NUM_GENERATIONS),
                "--shuffle_dataset", "false",
                "--learning_rate", "1e-3",
            ]
        )
    )  # fmt: skip
    assert isinstance(trainer.teacher, RuleBasedCodeTeacher)
    tokenizer = trainer.processing_class
    located = 0
    for advantages, mask, texts in captured:
        for row, text in enumerate(texts):
            unit = expected[text]
            length = int(mask[row].sum())
            values = advantages[row, :length]
            if unit is None:
                assert len(set(values.tolist())) == 1  # a right rollout: one advantage for all its tokens
                continue
            units = code_unit_texts(text)
            boundary = len(tokenizer.encode("".join(units[:unit]), add_special_tokens=False))
            assert units[unit].startswith("x = ") and len(set(values[:boundary].tolist())) == 1
            assert len(set(values[boundary:].tolist())) == 1
            assert values[boundary - 1].item() != pytest.approx(values[boundary].item())
            located += 1
    assert located == 2 * 2 * (NUM_GENERATIONS - 3)  # 2 steps x 2 mixed groups x 5 wrong rollouts
    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert [record["cliff/groups_cliff"] for record in logs] == [2.0, 2.0]
    assert [record["cliff/groups_skipped"] for record in logs] == [1.0, 1.0]
    assert all(record["cliff/agreement"] == 1.0 for record in logs)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("rewards/code_tests/mean" in record for record in metrics)
    from transformers import AutoModelForCausalLM

    from hf_meds_cliff.toy.code_world import warmup_code_world

    cached = AutoModelForCausalLM.from_pretrained(warmup_code_world()).state_dict()
    assert any(
        not torch.equal(v.cpu(), cached[k]) for k, v in trainer.model.state_dict().items() if k in cached
    )


@pytest.mark.slow
def test_domain_code_trains_on_the_warmed_up_policy_with_real_generation(tmp_path):
    """`--domain code --max_steps 2` as a user runs it: the code world's policy samples programs, the sandbox grades
    them, the rule teacher judges the mixed groups; the run writes its model and metrics."""
    script = load_script("train_cliff")
    out = tmp_path / "out"
    trainer = script.main(
        *script.parse_args(["--domain", "code", "--output_dir", str(out), "--max_steps", "2"])
    )
    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert len(logs) == 2
    for key in ("cliff/judge_calls", "cliff/groups_skipped", "rewards/code_tests/mean"):
        assert key in logs[0]
    assert (out / "model.safetensors").is_file() and (out / "metrics.jsonl").is_file()
