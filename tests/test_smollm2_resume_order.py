"""The recomputation of the prompts each resumed training of the mechanism study drew
(studies/smollm2_resume_order.py), against the prompts a real resumed training generated for."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from datasets import Dataset
from trl import GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "studies"))
import smollm2_resume_order as order  # noqa: E402

from hf_meds_cliff.dapo import DYNAMIC_SAMPLING_STATE_NAME, DAPOConfig, DAPOTrainer  # noqa: E402

SHAPE = {"seed": 3, "num_generations": 4, "per_device_train_batch_size": 8, "generation_batch_size": 8}


def test_resume_steps_keep_only_the_final_training():
    segments = [{"resumed_from": None}, {"resumed_from": "checkpoint-10"}, {"resumed_from": None},
                {"resumed_from": "checkpoint-20"}, {"resumed_from": "checkpoint-30"}]  # fmt: skip
    assert order.resume_steps(segments) == [20, 30]
    assert order.resume_steps([{"resumed_from": None}]) == []
    with pytest.raises(ValueError, match="'final'"):
        order.resume_steps([{"resumed_from": "final"}])


def test_the_main_order_restarts_at_a_resume_and_skips_by_position():
    # 8 prompts at 2 a step: an epoch is 4 steps; resumed from step 5 (epoch 1, one step in)
    straight = order.main_sampler_prompts(SHAPE, 8, 8, [])
    resumed = order.main_sampler_prompts(SHAPE, 8, 8, [5])
    assert [straight[s] for s in range(1, 6)] == [resumed[s] for s in range(1, 6)]
    # steps 6-8 took the first epoch's batches 1-3 (a new sampler's first draw), where epoch 1's were due
    assert [resumed[s] for s in (6, 7, 8)] == [straight[s] for s in (2, 3, 4)]
    assert sorted(sum((straight[s] for s in range(1, 5)), [])) == list(range(8))  # an epoch visits each once


def test_extra_rounds_draw_once_more_after_each_steps_last_round():
    config = {**SHAPE, "dynamic_sampling": True}
    rounds = {1: 2, 2: 1, 3: 3}
    extra = order.extra_round_prompts(config, 8, 3, [], rounds)
    draws = order._ExtraRounds(3, 8, 4)
    expected = [draws.draw(8) for _ in range(6)]  # 2 + 1 + 3 draws
    assert extra == {1: [expected[0]], 2: [], 3: [expected[3], expected[4]]}
    assert order.extra_round_prompts({**SHAPE, "dynamic_sampling": False}, 8, 3, [], rounds) == {1: [], 2: [], 3: []}


class _PromptNumberReward:
    """Even prompt numbers get mixed groups, odd ones uniform: the rounds a step needs depend on its prompts only,
    never on what the policy samples. Records each round's prompt numbers and the step it belongs to."""

    __name__ = "prompt_number_reward"

    def __init__(self):
        self.rounds: list[tuple[int, list[int]]] = []

    def __call__(self, prompts, completions, trainer_state, **kwargs):
        numbers = [int(p[-1]["content"].split()[1]) for p in prompts[::4]]
        self.rounds.append((trainer_state.global_step + 1, numbers))
        return [float(int(p[-1]["content"].split()[1]) % 2 == 0 and i % 2) for i, p in enumerate(prompts)]


class _StudyCodeTrainer(DAPOTrainer):
    """The study's code: TRL's own sampler (restarting at a resume)."""

    def _get_train_sampler(self, *args, **kwargs):
        return GRPOTrainer._get_train_sampler(self, *args, **kwargs)


@pytest.fixture(scope="module")
def tiny_policy(untrained_tiny_policy):
    return untrained_tiny_policy


def _train(tiny_policy, output_dir, resume_from=None):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    tokenizer.padding_side = "left"
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Compute {i} + 1."}] for i in range(8)]})
    reward = _PromptNumberReward()
    args = DAPOConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, seed=SHAPE["seed"], max_steps=8,
        per_device_train_batch_size=8, num_generations=4, max_completion_length=4, logging_steps=1,
        report_to="none", save_strategy="steps", save_steps=5, dynamic_sampling=True,
    )  # fmt: skip
    trainer = _StudyCodeTrainer(
        model=str(tiny_policy), reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train(resume_from_checkpoint=resume_from)
    rounds = {int(h["step"]): int(h["dynamic_sampling/rounds"]) for h in trainer.state.log_history if "loss" in h}
    recorded: dict[int, list[list[int]]] = {}
    for step, numbers in reward.rounds:
        recorded.setdefault(step, []).append(numbers)
    return recorded, rounds, trainer.args.to_dict()


@pytest.mark.slow
def test_the_recomputation_gives_the_prompts_a_real_resumed_training_generated_for(tiny_policy, tmp_path):
    straight, straight_rounds, config = _train(tiny_policy, tmp_path / "a")
    assert sum(straight_rounds.values()) > 8  # some steps needed extra rounds
    # The study's checkpoints had no dynamic-sampling order: resume from a copy without it.
    shutil.copytree(tmp_path / "a" / "checkpoint-5", tmp_path / "b" / "checkpoint-5")
    (tmp_path / "b" / "checkpoint-5" / DYNAMIC_SAMPLING_STATE_NAME).unlink()
    later, later_rounds, _ = _train(tiny_policy, tmp_path / "b", str(tmp_path / "b" / "checkpoint-5"))

    assert order.round_prompts(config, 8, 8, [], straight_rounds) == straight
    trained = {**{s: straight[s] for s in range(1, 6)}, **later}  # steps 1-5 before the stop, 6-8 after
    rounds = {**{s: straight_rounds[s] for s in range(1, 6)}, **{s: later_rounds[s] for s in (6, 7, 8)}}
    assert later_rounds == rounds  # the resumed history carries steps 1-5 from the checkpoint
    assert order.round_prompts(config, 8, 8, [5], rounds) == trained
    assert trained[6] != straight[6]  # the resume changed the prompts (else this test could not tell)

    record = {"config": config, "pool": {"problem_ids": list(range(8))},
              "history": [{"step": s, "loss": 0.0, "dynamic_sampling/rounds": r} for s, r in rounds.items()],
              "training_segments": [{"resumed_from": None}, {"resumed_from": "checkpoint-5"}]}  # fmt: skip
    compared = order.compare(record)
    assert compared["first_step_with_other_prompts"] == 6 and compared["steps_with_other_prompts"] >= 1
    assert sum(compared["visits_trained"]) == sum(len(r) for step in trained.values() for r in step)
    lines = order.report_lines({"files": {"dapo_ds-seed3": compared}})
    assert any(line.startswith("| `dapo_ds-seed3` | `checkpoint-5` |") for line in lines)


def test_the_committed_recomputation_is_what_the_committed_files_give():
    import json

    import smollm2_mechanism

    committed = json.loads((smollm2_mechanism.RESULTS / order.OUTPUT_NAME).read_text())
    runs, _ = smollm2_mechanism.load_results(smollm2_mechanism.RESULTS)
    assert json.loads(json.dumps(order.recompute(runs)["files"])) == committed["files"]
