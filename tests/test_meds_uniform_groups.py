"""MEDS on groups whose correctness has no variance, in the trainer: by default, as in the reference,
an all-wrong group gets no advantage from the penalty and does not enter the memory; with
``meds_shape_uniform_groups=True`` (the earlier behaviour) it is memorised and shaped.

Learning signal by construction: the correctness reward makes the first group of every batch all wrong and every
other group mixed (:class:`FirstGroupAllWrong`), whatever this machine's warm-up solves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import MixedGroupsReward

from hf_meds_cliff.meds.config import MEDSConfig
from hf_meds_cliff.meds.diagnostics import trl_advantages

NUM_GENERATIONS = 4


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def exact_answer_reward(completions, answer, **kwargs):
    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.toy.warmup import boxed_integer

    return [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]


class FirstGroupAllWrong:
    """0/1 correctness: the first group of each batch all wrong, every other group mixed (``MixedGroupsReward``)."""

    __name__ = "exact_answer_reward"

    def __init__(self, num_generations: int):
        self.mixed = MixedGroupsReward(exact_answer_reward, num_generations)
        self.num_generations = num_generations

    def __call__(self, prompts, completions, **kwargs):
        values = self.mixed(prompts=prompts, completions=completions, **kwargs)
        values[: self.num_generations] = [0.0] * self.num_generations
        return values


def _train(policy_path, tmp_path, **meds_options):
    """Three MEDS steps on 2 toy prompts (2 groups of 4 per step); per step: rewards, penalties, sizes, advantages."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset

    args = MEDSConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=3,
        learning_rate=1e-4,
        per_device_train_batch_size=2 * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=72,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        dataloader_num_workers=0,
        **meds_options,
    )
    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    tokenizer.padding_side = "left"
    trainer = MEDSGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(policy_path),
        reward_funcs=[FirstGroupAllWrong(NUM_GENERATIONS)],
        args=args,
        train_dataset=make_toy_dataset("train", 2, seed=0),
        processing_class=tokenizer,
    )
    steps = []
    generate_and_score = trainer._generate_and_score_completions

    def record(inputs):
        output = generate_and_score(inputs)
        steps.append(
            {
                "columns": trainer._last_gathered_rewards.double().cpu().numpy().copy(),
                "penalties": trainer.meds_last_penalties.copy(),
                "sizes": trainer.meds_last_cluster_sizes.copy(),
                "advantages": output["advantages"].double().cpu().numpy().copy(),
                "memory_rows": trainer.meds_memory.num_rows,
            }
        )
        return output

    trainer._generate_and_score_completions = record
    trainer.train()
    assert len(steps) == 3
    return trainer, steps


def _expected_penalties(sizes, is_correct, alpha, beta):
    """The "wrong" target's penalty of each row from its cluster size (-1: not assigned, no penalty)."""
    return np.where(
        (sizes >= 0) & ~is_correct, -np.minimum(alpha * np.log(np.maximum(sizes, 0) + 1.0), beta), 0.0
    )


@pytest.mark.slow
def test_all_wrong_groups_get_no_advantage_from_the_penalty_by_default(toy_policy_path, tmp_path):
    trainer, steps = _train(toy_policy_path, tmp_path)
    uniform, mixed = slice(0, NUM_GENERATIONS), slice(NUM_GENERATIONS, None)
    memorised = 0
    for step in steps:
        columns, penalties, sizes = step["columns"], step["penalties"], step["sizes"]
        is_correct = columns[:, 0] >= 1.0
        assert not is_correct[uniform].any() and 0 < is_correct[mixed].sum() < NUM_GENERATIONS
        # The all-wrong group: neither penalised nor memorised, and its advantages are exactly GRPO's zeros.
        assert penalties[uniform].tolist() == [0.0] * NUM_GENERATIONS
        assert sizes[uniform].tolist() == [-1] * NUM_GENERATIONS
        assert step["advantages"][uniform].tolist() == [0.0] * NUM_GENERATIONS
        # The mixed group is shaped by its cluster sizes, and TRL's advantages follow from the columns.
        np.testing.assert_allclose(penalties, _expected_penalties(sizes, is_correct, 0.1, 0.2), rtol=1e-6)
        np.testing.assert_allclose(
            step["advantages"], trl_advantages(columns, [1.0, 1.0], np.arange(8) // 4), atol=1e-5
        )
        memorised += int((sizes[mixed] >= 0).sum())
        assert step["memory_rows"] == memorised  # only the mixed groups' featured rows
    assert memorised > 0, "no featured rollout in the mixed groups"
    assert (steps[-1]["penalties"][mixed] < 0).any() or (steps[-2]["penalties"][mixed] < 0).any()
    logs = [r for r in trainer.state.log_history if "meds/frac_groups_uniform" in r]
    assert [r["meds/frac_groups_uniform"] for r in logs] == [0.5] * 3
    assert sum(r["meds/num_not_memorised"] for r in logs) > 0  # the all-wrong groups' featured rows


@pytest.mark.slow
def test_shape_uniform_groups_option_keeps_the_earlier_behaviour(toy_policy_path, tmp_path):
    trainer, steps = _train(toy_policy_path, tmp_path, meds_shape_uniform_groups=True)
    uniform = slice(0, NUM_GENERATIONS)
    featured = 0
    for step in steps:
        columns, penalties, sizes = step["columns"], step["penalties"], step["sizes"]
        is_correct = columns[:, 0] >= 1.0
        np.testing.assert_allclose(penalties, _expected_penalties(sizes, is_correct, 0.1, 0.2), rtol=1e-6)
        np.testing.assert_allclose(
            step["advantages"], trl_advantages(columns, [1.0, 1.0], np.arange(8) // 4), atol=1e-5
        )
        featured += int((sizes >= 0).sum())
        assert step["memory_rows"] == featured  # every featured row, all-wrong groups included
    # From the second step on, the prompt's wrong rows are in memory: the all-wrong group is penalised, and where
    # its penalties differ its wrong answers get non-zero advantages (positive for the least penalised ones).
    later_uniform_penalties = np.concatenate([step["penalties"][uniform] for step in steps[1:]])
    assert (later_uniform_penalties < 0).any()
    for step in steps:
        if np.ptp(step["penalties"][uniform]) > 1e-6:  # a wrong answer of an all-wrong group is pushed up
            assert step["advantages"][uniform].max() > 0.1
