"""A resumed training draws the prompts the uninterrupted one would, in a later epoch too: TRL's sampler order
(``ResumableRepeatSampler``) and dynamic sampling's extra rounds (``dynamic_sampling_state.json``)."""

import json
import logging
import shutil

import pytest
import torch
from datasets import Dataset
from trl.trainer.utils import RepeatSampler

from hf_meds_cliff.dapo import DYNAMIC_SAMPLING_STATE_NAME, DAPOConfig, DAPOTrainer
from hf_meds_cliff.sampling import ResumableRepeatSampler

SAMPLER = {"mini_repeat_count": 2, "batch_size": 3, "repeat_count": 2, "seed": 5}


def test_without_a_resume_the_order_is_trls_draw_for_draw():
    data = list(range(7))
    trl, ours = RepeatSampler(data, **SAMPLER), ResumableRepeatSampler(data, **SAMPLER)
    for epoch in range(4):
        ours.set_epoch(epoch)  # what transformers calls before every epoch
        ours.set_epoch(epoch)  # twice (transformers and accelerate both reach it): nothing more is drawn
        assert list(ours) == list(trl)
    assert ours.permutations_drawn == 4


def test_a_new_sampler_resumed_in_a_later_epoch_gives_that_epochs_order():
    data = list(range(7))
    uninterrupted = RepeatSampler(data, **SAMPLER)
    epochs = [list(uninterrupted) for _ in range(4)]
    assert epochs[2] != epochs[0]  # else the test could not tell the orders apart
    resumed = ResumableRepeatSampler(data, **SAMPLER)
    resumed.set_epoch(2)
    assert [list(resumed), list(resumed.__iter__())] == epochs[2:4]
    # TRL's own sampler, built anew for the resume, restarts at the first epoch's order
    assert list(RepeatSampler(data, **SAMPLER)) == epochs[0]


def test_an_unshuffled_sampler_is_unchanged():
    sampler = ResumableRepeatSampler(list(range(4)), mini_repeat_count=1, batch_size=2, shuffle=False)
    sampler.set_epoch(3)
    assert list(sampler) == [0, 1, 2, 3]


# -- real trainings ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_policy(untrained_tiny_policy):
    return untrained_tiny_policy


class RecordingReward:
    """Records each generation round's prompt numbers (one per group). In ``dynamic`` mode a round's groups are
    all uniform when the round is a step's first (odd calls: every group dropped) and all mixed on even calls, so
    every step takes exactly two rounds: one from TRL's sampler, one from dynamic sampling's own order."""

    __name__ = "recording_reward"

    def __init__(self, num_generations: int, dynamic: bool):
        self.num_generations, self.dynamic, self.rounds = num_generations, dynamic, []

    def __call__(self, prompts, completions, **kwargs):
        self.rounds.append([int(p[-1]["content"].split()[1]) for p in prompts[:: self.num_generations]])
        if self.dynamic and len(self.rounds) % 2:
            return [1.0] * len(completions)
        return [float(i % 2) for i in range(len(completions))]  # every group mixed


def _train(tiny_policy, output_dir, dynamic, resume_from=None, max_steps=6):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    tokenizer.padding_side = "left"
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Compute {i} + 1."}] for i in range(8)]})
    reward = RecordingReward(4, dynamic)
    args = DAPOConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, seed=3, max_steps=max_steps,
        per_device_train_batch_size=8, num_generations=4, max_completion_length=4, logging_steps=1,
        report_to="none", save_strategy="steps", save_steps=5, dynamic_sampling=dynamic,
    )  # fmt: skip  # 8 prompts at 2 a step: an epoch is 4 steps, checkpoint-5 lies in the second
    trainer = DAPOTrainer(
        model=str(tiny_policy), reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train(resume_from_checkpoint=resume_from)
    return reward.rounds, trainer


def _resume_copy(tmp_path, source, name):
    shutil.copytree(source / "checkpoint-5", tmp_path / name / "checkpoint-5")
    return tmp_path / name / "checkpoint-5"


@pytest.mark.slow
def test_a_run_resumed_in_its_second_epoch_trains_on_the_uninterrupted_runs_prompts(tiny_policy, tmp_path):
    uninterrupted, _ = _train(tiny_policy, tmp_path / "a", dynamic=False)
    assert len(uninterrupted) == 6  # one round a step
    checkpoint = _resume_copy(tmp_path, tmp_path / "a", "b")
    resumed, _ = _train(tiny_policy, tmp_path / "b", dynamic=False, resume_from=str(checkpoint))
    assert resumed == uninterrupted[5:]
    # TRL's order would have trained step 6 on the first epoch's second batch, which differs here
    assert uninterrupted[1] != uninterrupted[5]


@pytest.mark.slow
def test_dynamic_samplings_extra_prompts_continue_after_a_resume(tiny_policy, tmp_path, caplog):
    uninterrupted, _ = _train(tiny_policy, tmp_path / "a", dynamic=True)
    assert len(uninterrupted) == 12  # two rounds a step
    saved = json.loads((tmp_path / "a" / "checkpoint-5" / DYNAMIC_SAMPLING_STATE_NAME).read_text())
    # Each step draws two extra batches of 2 prompts (the round that fills the batch, then the next round's
    # prompts, drawn and left unused): 5 steps take 20 prompts from passes of 8, so the third pass stands at 4.
    assert saved == {"passes_started": 3, "cursor": 4}

    checkpoint = _resume_copy(tmp_path, tmp_path / "a", "b")
    resumed, _ = _train(tiny_policy, tmp_path / "b", dynamic=True, resume_from=str(checkpoint))
    assert resumed == uninterrupted[10:]
    assert uninterrupted[11] != uninterrupted[1]  # else a restarted order could not be told apart

    # A checkpoint written before the order was saved: one warning, and the extra rounds restart at the first pass.
    checkpoint = _resume_copy(tmp_path, tmp_path / "a", "c")
    (checkpoint / DYNAMIC_SAMPLING_STATE_NAME).unlink()
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff"):
        restarted, _ = _train(tiny_policy, tmp_path / "c", dynamic=True, resume_from=str(checkpoint))
    assert any("Dynamic sampling's prompt order not restored" in r.getMessage() for r in caplog.records)
    assert restarted[0] == uninterrupted[10]  # the main sampler's round is unaffected
    assert restarted[1] == uninterrupted[1]  # the extra round is the first pass's first


def test_a_damaged_dynamic_sampling_state_names_the_file_and_the_fix(tiny_policy, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Compute {i} + 1."}] for i in range(8)]})
    args = DAPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=8,
                      num_generations=4, report_to="none", dynamic_sampling=True)  # fmt: skip
    trainer = DAPOTrainer(model=str(tiny_policy), reward_funcs=RecordingReward(4, True), args=args,
                          train_dataset=dataset, processing_class=tokenizer)  # fmt: skip
    (tmp_path / DYNAMIC_SAMPLING_STATE_NAME).write_text(json.dumps({"passes_started": 1, "cursor": 99}))
    with pytest.raises(ValueError, match=r"dynamic_sampling_state.json holds .*'cursor': 99.*8 prompts"):
        trainer._load_optimizer_and_scheduler(str(tmp_path))
    assert trainer._dynamic_sampling_order is None and trainer._dynamic_sampling_cursor == 0
    (tmp_path / DYNAMIC_SAMPLING_STATE_NAME).write_text(json.dumps({"passes_started": 1, "cursor": 4}))
    trainer._load_optimizer_and_scheduler(str(tmp_path))
    assert torch.equal(trainer._dynamic_sampling_order, trainer._dynamic_sampling_permutation(0))
    assert trainer._dynamic_sampling_cursor == 4
