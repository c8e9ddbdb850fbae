"""CliffConfig validation and CliffGRPOTrainer end to end (scripted rollouts, real toy generation, 2 processes)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from helpers import ROOT, free_port, load_module, write_half_solved_toy_data

from hf_meds_cliff import CliffConfig, CliffGRPOTrainer
from hf_meds_cliff.script_utils import toy_recipe_path

CPU = {"bf16": False, "use_cpu": True, "report_to": []}


def load_driver():
    return load_module(ROOT / "tests" / "multiproc" / "cliff_driver.py", "cliff_driver")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cliff_lam": 1.5}, r"cliff_lam=1.5 is outside \[0, 1\]"),
        ({"cliff_teacher": "gpt"}, "cliff_teacher='gpt' is not a known teacher kind"),
        ({"cliff_teacher": "http", "cliff_teacher_model": "m"}, "needs both cliff_teacher_base_url"),
        ({"cliff_teacher": "transformers"}, "needs cliff_teacher_model"),
        ({"cliff_self_consistency": 0}, "cliff_self_consistency=0 must be a positive integer"),
        ({"cliff_self_consistency_reducer": "mean"}, "cliff_self_consistency_reducer='mean' is unknown"),
        ({"cliff_teacher_timeout": 0}, "cliff_teacher_timeout=0 must be > 0"),
        ({"cliff_correctness_reward_index": -1}, "must index a reward function"),
    ],
)
def test_config_rejects_bad_values_naming_the_fix(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        CliffConfig(output_dir=str(tmp_path), **CPU, **overrides)


def test_config_fields_have_help():
    from dataclasses import fields

    cliff_fields = [f for f in fields(CliffConfig) if f.name.startswith("cliff_")]
    assert len(cliff_fields) >= 15
    assert all(f.metadata.get("help") for f in cliff_fields)


def test_trainer_rejects_plain_grpo_config_and_bad_reward_index(tmp_path):
    from trl import GRPOConfig

    driver = load_driver()
    with pytest.raises(TypeError, match="needs args of type CliffConfig"):
        CliffGRPOTrainer(model="unused", args=GRPOConfig(output_dir=str(tmp_path), **CPU))
    with pytest.raises(ValueError, match="cliff_correctness_reward_index=3 but only 1 reward"):
        driver.build_trainer(str(tmp_path), 4, cliff_correctness_reward_index=3)
    with pytest.raises(ValueError, match="cliff_answer_column='truth' is not a column"):
        driver.build_trainer(str(tmp_path), 4, cliff_answer_column="truth")


@pytest.mark.slow
def test_scripted_run_splits_prefix_from_suffix_and_checkpoints_caches(tmp_path):
    """Deterministic rollouts: exact token advantages, metrics, parameter change, cache save + resume."""
    driver = load_driver()
    scripted = {
        "num_prompts": 3,
        "shuffle_dataset": False,
    }  # the same 3 prompts, in the same order, every step
    trainer = driver.build_trainer(
        str(tmp_path), 12, steps=2, save_strategy="steps", save_steps=1, **scripted
    )
    initial = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    loss_rows = []  # the rows of the advantages TRL's loss receives
    compute_loss = trainer._compute_loss

    def recording_loss(model, inputs):
        loss_rows.extend(tuple(row.tolist()) for row in inputs["advantages"])
        return compute_loss(model, inputs)

    trainer._compute_loss = recording_loss
    trainer.train()

    # Hand table of the (B, T) token advantages, the same in both steps (same prompts and rollouts; step 2 from the
    # caches). 3 groups x 4 rows (see the driver): members 0 and 3 correct, member 1 wrong from sentence 1, member 2
    # wrong from sentence 0; group 2 all correct. The toy tokenizer gives one token per character of these texts,
    # plus eos. TRL's advantage of [1, 0, 0, 1]: a = 0.5 / (std + 1e-4) with the Bessel std sqrt(1/3); A_cor = a,
    # A_inc = -a, λ = 0, so u = a on correct rows, 0 on a prefix and -a on a suffix, minus b = the group's token mean.
    # Group 0 "3 - 13 = -10. -10 * 2 = -20. ...": rows 0 and 3 have 35 + 1 tokens, row 1 a 14-token prefix
    # "3 - 13 = -10. " then 22, row 2 ("3 - 13 = -9. ...") 33 + 1: sum 72a - 22a - 34a = 16a over 142, b = 8a/71.
    # Group 1 "10 * 4 = 40. 40 * 3 = 120. ...": every row 49 + 1 tokens, row 5's prefix "10 * 4 = 40. " 13 tokens:
    # sum 100a - 37a - 50a = 13a over 200 tokens, b = 13a/200.
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    b0, b1 = 8 * a / 71, 13 * a / 200

    def row(*runs: tuple[int, float]) -> list[float]:
        values = [value for count, value in runs for _ in range(count)]
        return values + [0.0] * (50 - len(values))  # padded to the longest completion of the batch, 50 tokens

    expected = torch.tensor(
        [
            row((36, a - b0)), row((14, -b0), (22, -a - b0)), row((34, -a - b0)), row((36, a - b0)),
            row((50, a - b1)), row((13, -b1), (37, -a - b1)), row((50, -a - b1)), row((50, a - b1)),
            *[row() for _ in range(4)],
        ]
    )  # fmt: skip
    assert len(trainer.recorded) == 2
    for advantages in trainer.recorded:
        torch.testing.assert_close(advantages, expected, rtol=1e-5, atol=1e-6)
    # TRL's loss received exactly these (B, T) rows (in its own order), the split rows 1 and 5 included.
    assert sorted(loss_rows) == sorted(tuple(row.tolist()) for step in trainer.recorded for row in step)

    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert [record["cliff/groups_cliff"] for record in logs] == [2.0, 2.0]
    assert [record["cliff/solve_calls"] for record in logs] == [2.0, 0.0]  # references cached after step 1
    assert [record["cliff/judgment_cache_hits"] for record in logs] == [0.0, 4.0]
    assert logs[0]["cliff/agreement"] == 1.0 and 0 < logs[0]["cliff/prefix_fraction"] < 1
    changed = [k for k, v in trainer.model.state_dict().items() if not torch.equal(v, initial[k])]
    assert changed, "no parameter changed after two Cliff steps"

    state_path = tmp_path / "checkpoint-1" / "cliff_state.json"
    state = json.loads(state_path.read_text())
    assert len(state["references"]) == 2 and len(state["judgments"]) == 4

    # Resume from step 1: the caches come back, so the resumed step calls the teacher zero times.
    resumed = driver.build_trainer(str(tmp_path), 12, steps=2, save_strategy="no", **scripted)
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    resumed_logs = [record for record in resumed.state.log_history if "cliff/solve_calls" in record]
    assert resumed_logs[-1]["cliff/solve_calls"] == 0.0 and resumed_logs[-1]["cliff/judge_calls"] == 0.0
    assert resumed_logs[-1]["cliff/judgment_cache_hits"] == 4.0


def _non_toy_trainer(tmp_path, iterable: bool, **config):
    from datasets import Dataset

    from hf_meds_cliff.toy import build_toy_model, build_toy_tokenizer

    dataset = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"Solve x^2 = {n * n} for x > 0."}] for n in range(1, 9)],
            "answer": [str(n) for n in range(1, 9)],
        }
    )
    tokenizer = build_toy_tokenizer()

    def fixed_rollouts(prompts, trainer):  # no generation needed: the check runs before any teacher call
        ids = tokenizer.encode("x = 2. The answer is \\boxed{2}.", add_special_tokens=False)
        prompt_ids = [
            list(tokenizer.apply_chat_template(p, add_generation_prompt=True)["input_ids"]) for p in prompts
        ]
        return {"prompt_ids": prompt_ids, "completion_ids": [ids + [tokenizer.eos_token_id]] * len(prompts),
                "logprobs": [[0.0] * (len(ids) + 1)] * len(prompts)}  # fmt: skip

    def correct(completions, answer, **kwargs):
        return [float(f"boxed{{{a}}}" in c[-1]["content"]) for c, a in zip(completions, answer)]

    args = CliffConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_completion_length=32,
        max_steps=1, logging_steps=1, save_strategy="no", activation_checkpointing=False, **CPU, **config,
    )  # fmt: skip
    return CliffGRPOTrainer(
        model=build_toy_model(tokenizer, seed=0), reward_funcs=[correct], args=args,
        train_dataset=dataset.to_iterable_dataset() if iterable else dataset, processing_class=tokenizer,
        rollout_func=fixed_rollouts,
    )  # fmt: skip


def test_rule_teacher_on_a_non_toy_dataset_fails_at_init_naming_the_teacher_options(tmp_path):
    """The default teacher reads toy questions only: a run on other data must not silently become plain GRPO."""
    with pytest.raises(
        ValueError, match=r"reads only toy questions .*Solve x\^2 = 1.*--cliff_teacher http"
    ) as error:
        _non_toy_trainer(tmp_path, iterable=False)
    assert "--cliff_teacher transformers" in str(error.value) and "teacher=" in str(error.value)


def test_rule_teacher_on_an_iterable_non_toy_dataset_fails_on_the_first_batch(tmp_path):
    trainer = _non_toy_trainer(tmp_path, iterable=True)  # rows cannot be peeked at init
    with pytest.raises(ValueError, match="reads only toy questions"):
        trainer.train()


class RecordingArithmeticTeacher:
    """The driver's exact teacher, recording the completions it was asked to judge."""

    def __init__(self, driver):
        self.inner = driver.ArithmeticTeacher()
        self.name = "recording"
        self.judged: list[str] = []

    async def solve(self, problem):
        return await self.inner.solve(problem)

    async def judge(self, problem, reference, sentences):
        self.judged.append("".join(sentences))
        return await self.inner.judge(problem, reference, sentences)

    async def aclose(self):
        pass


def test_ungraded_rows_are_not_judged_and_keep_trl_advantages(tmp_path, caplog):
    """A correctness reward returning None ("cannot grade this row"): the row is never sent to the teacher, gets
    TRL's sequence-level advantage (0: no reward function graded it) on every token, stays out of its group's
    baseline, and TRL's warning about it is kept."""
    from hf_meds_cliff.cliff.protocol import problem_text

    driver = load_driver()

    def grades_all_but_wrong_from_the_start(prompts, completions, answer, **kwargs):
        rewards = driver.exact_answer_reward(completions, answer)
        problems = [driver.parse_question(problem_text(prompt)) for prompt in prompts]
        texts = [completion[-1]["content"] for completion in completions]  # chat completions
        return [
            None if text == driver.wrong_from(problem, 0) else reward
            for text, problem, reward in zip(texts, problems, rewards)
        ]

    teacher = RecordingArithmeticTeacher(driver)
    trainer = driver.build_trainer(
        str(tmp_path), 12, steps=1, num_prompts=3, shuffle_dataset=False, teacher=teacher,
        reward_funcs=[grades_all_but_wrong_from_the_start],
    )  # fmt: skip
    with caplog.at_level("WARNING", logger="trl.trainer.grpo_trainer"):
        trainer.train()
    assert "All reward functions returned None" in caplog.text

    # Groups 0 and 1: [correct, wrong from sentence 1, ungraded, correct]; group 2 all correct (see the driver).
    advantages = trainer.recorded[0]
    ungraded = [2, 6]
    assert torch.count_nonzero(advantages[ungraded]) == 0
    problems = [driver.parse_question(problem_text(row["prompt"])) for row in trainer.train_dataset]
    assert sorted(teacher.judged) == sorted(driver.wrong_from(problem, 1) for problem in problems[:2])
    for group in (0, 1):
        graded = [4 * group, 4 * group + 1, 4 * group + 3]
        assert advantages[graded].sum().item() == pytest.approx(0.0, abs=1e-4)  # b over the graded rows only
        values = advantages[4 * group + 1][advantages[4 * group + 1] != 0]
        assert values[-1].item() < values[0].item()  # prefix / suffix split of the graded wrong row
    log = next(r for r in trainer.state.log_history if "cliff/ungraded" in r)
    assert (log["cliff/ungraded"], log["cliff/groups_cliff"], log["cliff/judge_calls"]) == (2.0, 2.0, 2.0)


class ToyTeacherResponder:
    """Loopback OpenAI-compatible endpoint that solves and judges toy problems exactly (or fails on judging)."""

    def __init__(self, driver, judge_status: int = 200):
        self.driver = driver
        self.judge_status = judge_status

    def __call__(self, body, index):
        from hf_meds_cliff.testing import Reply

        messages = body["messages"]
        if messages[0]["role"] != "system":  # a solve request: the problem is the first line
            question = messages[0]["content"].splitlines()[0]
            return Reply(content=self.driver.parse_question(question).solution)
        if self.judge_status != 200:
            return Reply(status=self.judge_status, content="overloaded")
        user = messages[-1]["content"]
        question = user.split("## Problem\n")[1].split("\n")[0]
        numbered = user.split("numbered from 0)\n")[1].split("\n\n")[0].splitlines()
        sentences = [line.split("] ", 1)[1] for line in numbered]
        mistake = self.driver.first_wrong_sentence(question, sentences)
        verdict = json.dumps(
            {"final_answer_correct": mistake is None, "first_mistake": -1 if mistake is None else mistake}
        )
        return Reply(content=f"I recomputed every step.\n{verdict}")


@pytest.mark.slow
def test_http_teacher_gives_the_same_advantages_and_a_dead_judge_falls_back(tmp_path):
    """The trainer with an OpenAI-compatible teacher on loopback matches the in-process teacher; HTTP 500s on
    every judge call make those groups plain GRPO and the run goes on."""
    from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher
    from hf_meds_cliff.testing import LoopbackChatServer

    driver = load_driver()
    reference = driver.build_trainer(str(tmp_path / "reference"), 12, steps=1)
    reference.train()
    reference.close_teacher()

    results = {}
    for status in (200, 500):
        with LoopbackChatServer(ToyTeacherResponder(driver, judge_status=status)) as server:
            teacher = OpenAICompatibleTeacher(
                server.base_url, "loopback", max_retries=1, backoff_base=0.01, timeout=10
            )
            trainer = driver.build_trainer(str(tmp_path / str(status)), 12, steps=1, teacher=teacher)
            trainer.train()
            trainer.close_teacher()
        results[status] = trainer

    torch.testing.assert_close(results[200].recorded[0], reference.recorded[0], rtol=0, atol=0)
    log = next(r for r in results[200].state.log_history if "cliff/judge_calls" in r)
    assert (log["cliff/groups_cliff"], log["cliff/judge_calls"], log["cliff/teacher/requests"]) == (
        2.0,
        4.0,
        6.0,
    )

    failed = next(r for r in results[500].state.log_history if "cliff/judge_calls" in r)
    assert failed["cliff/groups_fallback_endpoint"] == 2.0 and failed["cliff/groups_cliff"] == 0.0
    assert failed["cliff/judge_failures/http_error"] == 4.0
    assert failed["cliff/teacher/retries"] == 4.0
    assert any("loss" in r for r in results[500].state.log_history)
    # Fallen-back groups keep TRL's sequence-level advantage on every token.
    advantages = results[500].recorded[0]
    mask = advantages != 0
    for row in range(8):
        values = advantages[row][mask[row]]
        assert torch.allclose(values, values[0].expand_as(values))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_process_run_equals_one_process_run(tmp_path):
    """Groups split across 2 CPU processes give the same token advantages and parameters as 1 process."""
    driver = load_driver()
    single = driver.run(str(tmp_path / "single"), per_device_batch=12, steps=2)
    output = tmp_path / "two.pt"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
        str(ROOT / "tests" / "multiproc" / "cliff_driver.py"), "--output", str(output), "--per_device_batch", "6",
    ]  # fmt: skip
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    double = torch.load(output, weights_only=False)

    assert double["num_processes"] == 2
    assert len(single["advantages"]) == len(double["advantages"]) == 2
    for one, two in zip(single["advantages"], double["advantages"]):
        torch.testing.assert_close(one, two, rtol=0, atol=1e-6)
        assert torch.count_nonzero(one) > 0
    for name, value in single["parameters"].items():
        torch.testing.assert_close(value, double["parameters"][name], rtol=1e-4, atol=1e-6)

    def counted(record):  # every cliff/ metric but the measured times (wall time, teacher time and its share)
        return {
            k: v for k, v in record.items() if k.startswith("cliff/") and not ("wall" in k or "time" in k)
        }

    cliff_single = [counted(r) for r in single["log_history"]]
    cliff_double = [counted(r) for r in double["log_history"]]
    assert any(
        "cliff/teacher_requests" in r for r in cliff_single
    )  # the teacher's counts agree, not only its verdicts
    assert cliff_single == cliff_double


def load_script():
    return load_module(ROOT / "scripts" / "train_cliff.py", "train_cliff")


def test_script_defaults_to_the_toy_world_and_folds_teacher_shorthands():
    script = load_script()
    script_args, training_args, model_args, _ = script.parse_args([])
    assert isinstance(training_args, CliffConfig) and training_args.cliff_teacher == "rule"
    assert script_args.dataset_name == "toy" and model_args.model_name_or_path == "toy"
    assert training_args.use_cpu and not training_args.bf16
    parsed = script.parse_args(["--teacher_base_url", "http://127.0.0.1:8001/v1", "--teacher_model", "m"])
    config = script.apply_teacher_arguments(parsed[1], parsed[3])
    assert (config.cliff_teacher, config.cliff_teacher_base_url, config.cliff_teacher_model) == (
        "http", "http://127.0.0.1:8001/v1", "m",
    )  # fmt: skip
    parsed = script.parse_args(["--teacher_model", "m"])
    with pytest.raises(ValueError, match="go together"):
        script.apply_teacher_arguments(parsed[1], parsed[3])


@pytest.mark.slow
def test_toy_world_end_to_end_with_the_rule_based_teacher(tmp_path, toy_policy_path, monkeypatch):
    """scripts/train_cliff.py on the warmed-up toy policy: real generation, verifier and rule-based teacher."""
    from transformers import AutoModelForCausalLM

    captured = []
    original = CliffGRPOTrainer._generate_and_score_completions

    def capturing(self, inputs):
        output = original(self, inputs)
        captured.append((output["advantages"].clone(), self.cliff_last_outcome))
        return output

    monkeypatch.setattr(CliffGRPOTrainer, "_generate_and_score_completions", capturing)
    # Toy problems this policy is measured to solve about half of the time, as a ready-prompt data file: mixed groups
    # with wrong rollouts to judge, whatever this machine's warm-up solves.
    data = write_half_solved_toy_data(toy_policy_path, 8, tmp_path / "half_solved.jsonl")
    script = load_script()
    out = tmp_path / "out"
    trainer = script.main(
        *script.parse_args(
            [
                "--config", str(toy_recipe_path("cliff")),
                "--model_name_or_path", str(toy_policy_path),
                *data,
                "--output_dir", str(out),
                "--max_steps", "2",
                "--per_device_train_batch_size", "32",
                "--learning_rate", "1e-3",
                "--activation_checkpointing", "false",
            ]
        )
    )  # fmt: skip

    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert len(logs) == 2
    for key in ("cliff/judge_calls", "cliff/groups_skipped", "cliff/agreement", "cliff/judge_wall_time"):
        assert key in logs[0]
    assert sum(record["cliff/groups_cliff"] for record in logs) > 0
    # Every wrong rollout whose first mistake is after sentence 0 got a prefix advantage unlike its suffix's.
    split_rows = 0
    for advantages, outcome in captured:
        assert advantages.dim() == 2
        for row, mistake in enumerate(outcome.first_mistake):
            if mistake is not None and mistake > 0:
                values = advantages[row][advantages[row] != 0]
                assert values[0].item() != pytest.approx(values[-1].item())
                split_rows += 1
    assert split_rows > 0, "no wrong rollout with a located mistake after its first sentence"
    initial = AutoModelForCausalLM.from_pretrained(toy_policy_path).state_dict()
    assert any(
        not torch.equal(v.cpu(), initial[k]) for k, v in trainer.model.state_dict().items() if k in initial
    )
    assert (out / "model.safetensors").is_file()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("cliff/judge_calls" in record for record in metrics)


@pytest.mark.slow
def test_grpo_with_teacher_gives_every_token_of_a_rollout_one_advantage(tmp_path):
    """cliff_split_credit=False (the paper's "GRPO with Teacher"): same teacher and baseline, no prefix/suffix split."""
    driver = load_driver()
    split = driver.build_trainer(str(tmp_path / "split"), 12, steps=1, num_prompts=3, shuffle_dataset=False)
    split.train()
    whole = driver.build_trainer(
        str(tmp_path / "whole"), 12, steps=1, num_prompts=3, shuffle_dataset=False, cliff_split_credit=False
    )
    whole.train()
    split_advantages, whole_advantages = split.recorded[0], whole.recorded[0]
    for row in (
        1,
        5,
    ):  # wrong from sentence 1 (see the driver): split into two values with Cliff, one without
        assert len(set(split_advantages[row][split_advantages[row] != 0].tolist())) == 2
        assert len(set(whole_advantages[row][whole_advantages[row] != 0].tolist())) == 1
    for group in (0, 1):  # the group baseline still makes each group's token advantages sum to zero
        assert whole_advantages[4 * group : 4 * group + 4].sum().item() == pytest.approx(0.0, abs=1e-4)
    logs = [r for r in whole.state.log_history if "cliff/groups_cliff" in r]
    assert (
        logs[0]["cliff/groups_cliff"] == 2.0 and 0 < logs[0]["cliff/prefix_fraction"] < 1
    )  # teacher still judged


@pytest.mark.slow
def test_grpo_with_teacher_as_the_paper_has_one_sequence_advantage_per_rollout(tmp_path):
    """cliff_split_credit=False, cliff_recentre=False: no split and no b, so each rollout carries its own
    GRPO advantage on every token; the rows of a group (not its tokens) sum to zero, as in GRPO."""
    driver = load_driver()
    trainer = driver.build_trainer(
        str(tmp_path / "paper"), 12, steps=1, num_prompts=3, shuffle_dataset=False,
        cliff_split_credit=False, cliff_recentre=False,
    )  # fmt: skip
    trainer.train()
    advantages = trainer.recorded[0]
    per_row = []
    for row in advantages:
        values = set(row[row != 0].tolist())
        assert len(values) <= 1  # one advantage per rollout
        per_row.append(values.pop() if values else 0.0)
    for group in (0, 1):  # the driver's two mixed groups
        rows = per_row[4 * group : 4 * group + 4]
        assert sum(rows) == pytest.approx(0.0, abs=1e-4) and len(set(rows)) == 2
