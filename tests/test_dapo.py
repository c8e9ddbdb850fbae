"""DAPO dynamic sampling: the pure group filter, padding/concatenation, and real trainer runs."""

import pytest
import torch
from datasets import Dataset
from helpers import MixedGroupsReward, UniformThenMixedRounds

from hf_meds_cliff.dapo import DAPOConfig, DAPOTrainer, concat_rows, groups_with_signal, pad_rows


def test_groups_with_signal_marks_whole_groups():
    values = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    assert groups_with_signal(values, 3).tolist() == [True] * 3 + [False] * 3 + [True] * 3
    # NaN rows are ignored; a group left with one scored row has no signal.
    assert groups_with_signal(torch.tensor([1.0, float("nan"), 0.0, float("nan")]), 2).tolist() == [False] * 4
    assert groups_with_signal(torch.tensor([1.0, float("nan"), 0.0]), 3).tolist() == [True] * 3
    with pytest.raises(ValueError, match="multiple of num_generations=4"):
        groups_with_signal(torch.zeros(6), 4)


def test_pad_and_concat_keep_prompt_left_and_completion_right():
    a = {
        "prompt_ids": torch.tensor([[5, 6]]),
        "completion_ids": torch.tensor([[7]]),
        "advantages": torch.tensor([1.0]),
    }
    b = {
        "prompt_ids": torch.tensor([[1, 2, 3]]),
        "completion_ids": torch.tensor([[8, 9]]),
        "advantages": torch.tensor([2.0]),
    }
    merged = concat_rows([a, b])
    assert merged["prompt_ids"].tolist() == [[0, 5, 6], [1, 2, 3]]
    assert merged["completion_ids"].tolist() == [[7, 0], [8, 9]]
    assert merged["advantages"].tolist() == [1.0, 2.0]
    assert pad_rows(torch.ones(1, 2), 2, left=True).shape == (1, 2)


def test_config_validation_names_the_value():
    with pytest.raises(ValueError, match="dynamic_sampling_max_rounds=0"):
        DAPOConfig(output_dir="x", dynamic_sampling_max_rounds=0, use_cpu=True, bf16=False)


@pytest.fixture(scope="module")
def tiny_policy(untrained_tiny_policy):
    return untrained_tiny_policy


TRAINER_SETTINGS = {
    "use_cpu": True,
    "bf16": False,
    "max_steps": 2,
    "per_device_train_batch_size": 8,
    "num_generations": 4,
    "max_completion_length": 8,
    "logging_steps": 1,
    "report_to": "none",
    "save_strategy": "no",
}


def make_trainer(tiny_policy, tmp_path, reward, **overrides):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    tokenizer.padding_side = "left"
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"Compute {i} + 1."}] for i in range(64)]}
    )
    settings = {"output_dir": str(tmp_path), **TRAINER_SETTINGS, "dynamic_sampling": True}
    args = DAPOConfig(**{**settings, **overrides})
    return DAPOTrainer(
        model=str(tiny_policy),
        reward_funcs=reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )


def parity_reward(completions, **kwargs):
    """Reward 1 for an even completion length: mixes within most groups of a random policy."""
    return [float(len(c[0]["content"]) % 2 == 0) for c in completions]


def constant_reward(completions, **kwargs):
    return [1.0] * len(completions)


@pytest.mark.slow
def test_dynamic_sampling_trains_on_groups_with_signal_only(tiny_policy, tmp_path):
    # Each step: a first round of uniform groups (all dropped), then a round of mixed ones (all kept).
    reward = UniformThenMixedRounds(parity_reward, 4, uniform_value=1.0)
    trainer = make_trainer(tiny_policy, tmp_path, reward)
    tokenizer = trainer.processing_class
    batches = []
    original = DAPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        output = original(self, inputs)
        batches.append(output)
        return output

    DAPOTrainer._generate_and_score_completions = spy
    try:
        trainer.train()
    finally:
        DAPOTrainer._generate_and_score_completions = original
    assert len(batches) == 2 and all(b["completion_ids"].shape[0] == 8 for b in batches)
    assert len(reward.rounds) == 4  # two rounds per step
    for step, batch in enumerate(batches):
        # The trained rows are the second round's groups, whole and in order (the first round's were dropped).
        prompts = [
            tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(batch["prompt_ids"], batch["prompt_mask"])
        ]
        kept_round = reward.rounds[2 * step + 1]
        kept_prompts = tokenizer.apply_chat_template(kept_round, tokenize=False, add_generation_prompt=True)
        assert prompts == kept_prompts
        assert all(len(set(prompts[g : g + 4])) == 1 for g in range(0, 8, 4))
        assert not set(prompts) & set(
            tokenizer.apply_chat_template(reward.rounds[2 * step], tokenize=False, add_generation_prompt=True)
        )
        # Every kept group has reward variance, hence non-zero advantages somewhere in each group of 4.
        grouped = batch["advantages"].view(-1, 4)
        assert (grouped.abs().sum(dim=1) > 0).all()
        assert batch["num_items_in_batch"] == batch["completion_mask"].sum()
    logged = [r for r in trainer.state.log_history if "dynamic_sampling/rounds" in r]
    assert [
        (
            r["dynamic_sampling/rounds"],
            r["dynamic_sampling/groups_dropped"],
            r["dynamic_sampling/kept_fraction"],
        )
        for r in logged
    ] == [(2.0, 2.0, 0.5)] * 2


@pytest.mark.slow
def test_dynamic_sampling_cap_raises_a_clear_error(tiny_policy, tmp_path):
    trainer = make_trainer(tiny_policy, tmp_path, constant_reward, dynamic_sampling_max_rounds=2)
    with pytest.raises(RuntimeError, match="after 2 generation rounds only 0 of the 8 rows"):
        trainer.train()


@pytest.mark.slow
def test_dynamic_sampling_off_is_plain_grpo(tiny_policy, tmp_path):
    """dynamic_sampling=False: the same update as TRL's GRPOTrainer on the same seed, config and rewards."""
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    trainer = make_trainer(
        tiny_policy,
        tmp_path / "dapo",
        MixedGroupsReward(parity_reward, 4),
        dynamic_sampling=False,
        max_steps=1,
    )
    initial = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert not any("dynamic_sampling/rounds" in r for r in trainer.state.log_history)

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    tokenizer.padding_side = "left"
    grpo = GRPOTrainer(
        model=str(tiny_policy),
        reward_funcs=MixedGroupsReward(parity_reward, 4),
        args=GRPOConfig(**{**TRAINER_SETTINGS, "output_dir": str(tmp_path / "grpo"), "max_steps": 1}),
        train_dataset=trainer.train_dataset,
        processing_class=tokenizer,
    )
    grpo.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), initial[n])]
    assert changed, "no parameter changed"
    for name, value in grpo.model.named_parameters():
        torch.testing.assert_close(trainer.model.get_parameter(name), value, rtol=0, atol=0)
    losses = [[r["loss"] for r in t.state.log_history if "loss" in r] for t in (trainer, grpo)]
    assert losses[0] == losses[1] and losses[0]


@pytest.mark.slow
def test_cliff_with_dynamic_sampling_judges_every_kept_group(toy_policy_path, tmp_path):
    """Cliff composes with dynamic sampling: each round is judged, then kept rows are merged as (B, T)."""
    from transformers import AutoTokenizer

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer
    from hf_meds_cliff.rewards import MathAnswerReward
    from hf_meds_cliff.toy import make_toy_dataset

    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    args = CliffConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        max_steps=1,
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=64,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        dynamic_sampling=True,
        dynamic_sampling_max_rounds=10,
        cliff_teacher="rule",
    )
    trainer = CliffGRPOTrainer(
        model=str(toy_policy_path),
        reward_funcs=[MathAnswerReward()],
        args=args,
        train_dataset=make_toy_dataset("train", 64, seed=0),
        processing_class=tokenizer,
    )
    outputs = []
    original = CliffGRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        outputs.append(original(self, inputs))
        return outputs[-1]

    rounds = []  # (rows, outcome) of every generation round Cliff judged
    process_step = trainer.cliff_judge.process_step

    def recording(rows, **kwargs):
        rounds.append((rows, process_step(rows, **kwargs)))
        return rounds[-1][1]

    trainer.cliff_judge.process_step = recording
    CliffGRPOTrainer._generate_and_score_completions = spy
    try:
        trainer.train()
    finally:
        CliffGRPOTrainer._generate_and_score_completions = original
    trainer.close_teacher()
    batch = outputs[0]
    advantages = batch["advantages"]
    assert advantages.shape == batch["completion_mask"].shape  # token-level after merging rounds
    assert (advantages * batch["completion_mask"]).abs().sum(dim=1).view(-1, 8).sum(dim=1).gt(0).all()
    logged = trainer.state.log_history[0]
    assert logged["dynamic_sampling/rounds"] == len(rounds) and "cliff/groups_cliff" in logged

    # Each round: every mixed group is judged ("cliff": the rule teacher's reference always verifies), every
    # uniform one skipped, and the judge is called once per wrong, untruncated rollout of the mixed groups.
    kept = []  # the groups dynamic sampling keeps: the first mixed ones in generation order
    judge_calls = []
    for rows, outcome in rounds:
        expected_calls = 0
        for group in sorted(set(rows.group_ids)):
            members = [i for i, g in enumerate(rows.group_ids) if g == group]
            verdicts = {rows.is_correct[i] for i in members}
            mode = {outcome.group_modes[i] for i in members}
            assert mode == ({"cliff"} if verdicts == {True, False} else {"skipped"}), (verdicts, mode)
            if verdicts == {True, False}:
                wrong = [i for i in members if rows.is_correct[i] is False and not rows.is_truncated[i]]
                expected_calls += len(wrong)
                kept.append([rows.completions[i] for i in members])
        assert outcome.counters["judge_calls"] + outcome.counters["judgment_cache_hits"] == expected_calls
        judge_calls.append(outcome.counters["judge_calls"])
    assert sum(judge_calls) > 0
    assert logged["cliff/judge_calls"] == pytest.approx(sum(judge_calls) / len(judge_calls))
    # The trained batch is made of exactly those kept groups, whole and in order.
    completions = tokenizer.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    assert completions == [text for group in kept[:2] for text in group]
    # The card TRL writes on save/push, with the method section and the pass@k model-index (offline).
    summary = {"benchmarks": {"toy": {"pass@k": {"1": 0.3, "8": 0.7}}}}
    (tmp_path / "summary.json").write_text(__import__("json").dumps(summary))
    trainer.create_model_card(model_name="toy-cliff")
    from huggingface_hub import ModelCard

    card = ModelCard.load(tmp_path / "README.md")
    assert {"cliff", "trl", "hf-meds-cliff"} <= set(card.data.tags)
    assert "## Cliff settings" in card.text and "| `cliff_lam` | `0.0` |" in card.text
    assert "| toy | 30.00 | 70.00 |" in card.text
    assert "model-index:" in (tmp_path / "README.md").read_text()
    assert [(r.metric_type, r.metric_value) for r in card.data.eval_results] == [
        ("pass@1", 0.3),
        ("pass@8", 0.7),
    ]
    assert "# Model Card for toy-cliff" in card.text and "None" not in card.text.split("## Cliff settings")[0]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_dynamic_sampling_with_two_processes_keeps_whole_groups(tmp_path):
    """Groups split across ranks: the redistributed batch is full on both ranks and made of whole groups."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from helpers import free_port

    port = free_port()
    driver = Path(__file__).parent / "multiproc" / "dapo_driver.py"
    out = tmp_path / "out.json"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        str(driver),
        str(out),
    ]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    ranks = sorted(json.loads(out.read_text()), key=lambda r: r["rank"])
    assert len(ranks) == 2 and len(ranks[0]["batches"]) == len(ranks[1]["batches"]) == 2
    for step in range(2):
        local = [r["batches"][step] for r in ranks]
        assert [b["rows"] for b in local] == [6, 6]
        # Global order: rank 0's rows then rank 1's: whole groups (each 4 consecutive rows share one prompt), and
        # every group has reward variance (non-zero advantages).
        prompts = [tuple(row) for row in local[0]["prompts"] + local[1]["prompts"]]
        groups = [prompts[g : g + 4] for g in range(0, 12, 4)]
        assert all(len(set(group)) == 1 for group in groups), groups
        advantages = torch.tensor(local[0]["advantages"] + local[1]["advantages"])
        assert (advantages.view(-1, 4).abs().sum(dim=1) > 0).all()
        # num_items_in_batch is the token count of the whole (redistributed) batch, the same on both ranks.
        assert (
            local[0]["num_items_in_batch"]
            == local[1]["num_items_in_batch"]
            == local[0]["mask_sum"] + local[1]["mask_sum"]
        )
    assert ranks[0]["rounds"] == ranks[1]["rounds"]


def test_a_local_base_model_never_appears_as_none_in_the_card(tiny_policy, tmp_path):
    """TRL's template writes "fine-tuned version of [None](https://huggingface.co/None)" for a base model given as
    a local folder; the card of the scripts' GRPO/DAPO trainer says it plainly, with the dataset TRL names."""
    trainer = make_trainer(tiny_policy, tmp_path, parity_reward)
    trainer.create_model_card(model_name="toy-grpo", dataset_name="openai/gsm8k")
    text = (tmp_path / "README.md").read_text()
    assert "None" not in text.split("## ")[0] and "huggingface.co/None" not in text
    assert "# Model Card for toy-grpo" in text
    assert "fine-tuned from a local base model folder (not a Hugging Face Hub model) on the [openai/gsm8k]" in text
