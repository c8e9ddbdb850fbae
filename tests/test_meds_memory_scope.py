"""Which rollouts enter MEDS' memory under DAPO's dynamic sampling (reference parity, ``meds_memory_scope``).

The reference (``meds_ray_trainer.py``) filters the groups and trims the batch *before* ``cluster_and_log``,
so only the rows that are trained on are memorised; all-right and all-wrong groups never enter the memory.
"""

from __future__ import annotations

import pytest
import torch
from helpers import UniformThenMixedRounds

from hf_meds_cliff.dapo import DynamicSamplingMixin, groups_with_signal
from hf_meds_cliff.meds.config import MEDSConfig
from hf_meds_cliff.meds.features import locate_answer_tokens


class _Survivors(DynamicSamplingMixin):
    """Just enough of a trainer to call the mixin's survivor rule."""

    def __init__(self, needed, num_generations=2):
        self.args = MEDSConfig(output_dir="unused", use_cpu=True, bf16=False, dynamic_sampling=True)
        self.num_generations = num_generations
        self._dynamic_sampling_rows_needed = needed


def test_survivors_are_the_filtered_groups_up_to_the_trim():
    rewards = torch.tensor([[1.0], [0.0], [1.0], [1.0], [0.0], [1.0], [1.0], [0.0]])  # groups of 2
    # Groups 0, 2 and 3 have variance; group 1 (all right) is dropped.
    assert groups_with_signal(rewards[:, 0], 2).tolist() == [True, True, False, False, True, True, True, True]
    assert _Survivors(needed=8).dynamic_sampling_survivors(rewards).tolist() == [
        True,
        True,
        False,
        False,
        True,
        True,
        True,
        True,
    ]
    # The batch needs 4 more rows: the trim keeps the first two kept groups, in generation order.
    assert _Survivors(needed=4).dynamic_sampling_survivors(rewards).tolist() == [
        True,
        True,
        False,
        False,
        True,
        True,
        False,
        False,
    ]
    assert _Survivors(needed=None).dynamic_sampling_survivors(rewards) is None  # outside a round


def test_dynamic_sampling_filters_on_accuracy_not_on_the_shaped_reward():
    """The reference filters on ``acc`` (filter_groups_metric=acc): an all-wrong group whose MEDS penalties differ
    (so its shaped reward varies) is still dropped; a mixed group is kept whatever its penalties."""
    # columns: correctness, meds_penalty; groups of 2
    rewards = torch.tensor([[0.0, 0.0], [0.0, -0.2], [1.0, 0.0], [0.0, -0.1], [1.0, 0.0], [1.0, 0.0]])
    assert _Survivors(needed=6).dynamic_sampling_survivors(rewards).tolist() == [
        False, False, True, True, False, False,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="MEDS filters groups on accuracy"):
        MEDSConfig(
            output_dir="x", use_cpu=True, bf16=False, dynamic_sampling=True, dynamic_sampling_reward_index=1
        )
    # without dynamic sampling the index is unused
    MEDSConfig(output_dir="x", use_cpu=True, bf16=False, dynamic_sampling_reward_index=1)


def test_memory_scope_is_validated():
    with pytest.raises(ValueError, match="meds_memory_scope='kept' is not one of"):
        MEDSConfig(output_dir="x", use_cpu=True, bf16=False, meds_memory_scope="kept")


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["filtered", "all"])
def test_memory_holds_exactly_the_rows_dynamic_sampling_keeps(toy_policy_path, tmp_path, scope):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset
    from hf_meds_cliff.toy.warmup import boxed_integer

    def exact_answer_reward(completions, answer, **kwargs):
        return [float(boxed_integer(completion_text(c)) == int(a)) for c, a in zip(completions, answer)]

    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    args = MEDSConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=2,
        learning_rate=1e-4,
        per_device_train_batch_size=8,  # 2 prompts x 4 completions
        num_generations=4,
        max_completion_length=72,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        dataloader_num_workers=0,
        dynamic_sampling=True,
        dynamic_sampling_max_rounds=20,
        meds_memory_scope=scope,
    )
    # Each step: a first round of uniform groups (all dropped, their rows generated but not trained on), then a
    # round of mixed ones (all kept), whatever this machine's warm-up solves.
    reward = UniformThenMixedRounds(exact_answer_reward, args.num_generations)
    trainer = MEDSGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(toy_policy_path),
        reward_funcs=[reward],
        args=args,
        train_dataset=make_toy_dataset("train", 16, seed=0),
        processing_class=tokenizer,
    )
    generated_featured, trained_featured = [], []
    original_generate = trainer._generate
    original_score = MEDSGRPOTrainer._generate_and_score_completions

    def count_generated(prompts):
        outputs = original_generate(prompts)
        generated_featured.append(sum(loc is not None for loc in trainer._meds_locations))
        return outputs

    def count_trained(self, inputs):
        batch = original_score(self, inputs)
        completions = [
            ids[mask.bool()].tolist() for ids, mask in zip(batch["completion_ids"], batch["completion_mask"])
        ]
        trained_featured.append(sum(loc is not None for loc in locate_answer_tokens(completions, tokenizer)))
        return batch

    trainer._generate = count_generated
    MEDSGRPOTrainer._generate_and_score_completions = count_trained
    try:
        trainer.train()
    finally:
        MEDSGRPOTrainer._generate_and_score_completions = original_score

    logs = [r for r in trainer.state.log_history if "dynamic_sampling/rounds" in r]
    assert [(r["dynamic_sampling/rounds"], r["dynamic_sampling/groups_dropped"]) for r in logs] == [
        (2.0, 2.0)
    ] * 2
    assert len(generated_featured) == len(reward.rounds) == 4
    if scope == "filtered":
        # Exactly the featured rows of the trained batches: nothing from dropped or trimmed groups.
        assert trainer.meds_memory.num_rows == sum(trained_featured)
        assert sum(r["meds/num_not_memorised"] for r in logs) > 0
    else:
        assert trainer.meds_memory.num_rows == sum(generated_featured) > sum(trained_featured)
        assert all(r["meds/num_not_memorised"] == 0 for r in logs)
