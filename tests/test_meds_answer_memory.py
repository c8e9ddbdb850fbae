"""The answer-oracle ablation of MEDS (``meds_cluster_by="answer"``): ``AnswerMemory`` against hand-counted
cluster sizes, its checkpoint round trip, and the trainer using its sizes instead of the feature memory's."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers import MixedGroupsReward

from hf_meds_cliff.meds import AnswerMemory
from hf_meds_cliff.meds.config import MEDSConfig

WRONG, RIGHT = ("q", False), ("q", True)


def test_sizes_count_stored_rows_with_the_same_answer_before_the_call():
    memory = AnswerMemory()
    # Empty memory: size 0, even for rows of this call that share an answer (they are not counted).
    assert memory.assign_and_update([WRONG, WRONG, WRONG, RIGHT], ["7", "7", "9", "12"]).tolist() == [0, 0, 0, 0]
    # Stored now: WRONG -> {7: 2, 9: 1}, RIGHT -> {12: 1}.
    sizes = memory.assign_and_update(
        [WRONG, WRONG, WRONG, RIGHT, RIGHT, ("other", False)], ["7", "9", "12", "12", "7", "7"]
    )
    assert sizes.tolist() == [2, 1, 0, 1, 0, 0]  # keys are separate: "7" under RIGHT or another prompt is new
    assert sizes.dtype == np.int64
    # WRONG -> {7: 3, 9: 2, 12: 1}
    assert memory.assign_and_update([WRONG, WRONG, WRONG], ["7", "9", "7 "]).tolist() == [3, 2, 0]  # exact strings
    assert memory.stored_answers(WRONG) == ["7", "7", "9", "7", "9", "12", "7", "9", "7 "]
    stats = memory.last_step_stats()
    assert stats["mean_cluster_size"] == pytest.approx(5 / 3) and stats["max_cluster_size"] == 3.0
    assert stats["clusters_per_key"] == 4.0  # WRONG holds 7, 9, 12 and "7 "
    assert stats["memory_rows"] == memory.num_rows == 9 + 3 + 1


def test_rows_without_an_answer_get_size_zero_and_are_not_stored():
    memory = AnswerMemory()
    memory.assign_and_update([WRONG, WRONG], ["5", None])
    assert memory.assign_and_update([WRONG, WRONG], [None, "5"]).tolist() == [0, 1]
    assert memory.stored_answers(WRONG) == ["5", "5"]
    assert memory.last_step_stats()["rows_without_answer"] == 1.0


def test_eviction_keeps_the_newest_rows_of_a_key():
    memory = AnswerMemory(max_rows_per_key=3)
    memory.assign_and_update([WRONG] * 4, ["1", "1", "2", "3"])  # "1" (oldest) evicted: [1, 2, 3]
    assert memory.stored_answers(WRONG) == ["1", "2", "3"]
    assert memory.assign_and_update([WRONG, WRONG], ["1", "2"]).tolist() == [1, 1]
    assert memory.stored_answers(WRONG) == ["3", "1", "2"]


def test_save_and_load_restore_the_same_future_sizes(tmp_path):
    memory = AnswerMemory(max_rows_per_key=5)
    memory.assign_and_update([WRONG, WRONG, RIGHT, ("p", 3)], ["1", "1", "2", "x"])
    path = memory.save(tmp_path)
    assert path.name == "meds_answer_memory.json"
    restored = AnswerMemory.load(tmp_path)
    assert restored.config() == {"max_rows_per_key": 5}
    probe = ([WRONG, RIGHT, ("p", 3)], ["1", "2", "x"])
    assert restored.assign_and_update(*probe).tolist() == memory.assign_and_update(*probe).tolist() == [2, 1, 1]


def test_bad_input_and_bad_files(tmp_path):
    with pytest.raises(ValueError, match="max_rows_per_key must be an int >= 1"):
        AnswerMemory(max_rows_per_key=0)
    with pytest.raises(ValueError, match="2 keys and 1 answers"):
        AnswerMemory().assign_and_update([WRONG, WRONG], ["1"])
    with pytest.raises(TypeError, match="answers must be strings or None, got 7"):
        AnswerMemory().assign_and_update([WRONG], [7])
    with pytest.raises(FileNotFoundError, match="meds_answer_memory.json does not exist"):
        AnswerMemory.load(tmp_path)
    (tmp_path / "meds_answer_memory.json").write_text(json.dumps({"format_version": 1, "keys": [], "answers": [1]}))
    with pytest.raises(ValueError, match="not an answer memory"):
        AnswerMemory.load(tmp_path)


def _config(output_dir, **overrides) -> MEDSConfig:
    values = {
        "output_dir": str(output_dir), "use_cpu": True, "bf16": False, "seed": 0, "max_steps": 3,
        "learning_rate": 1e-3, "per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 72,
        "temperature": 1.0, "beta": 0.0, "logging_steps": 1, "report_to": "none", "save_strategy": "no",
        "dataloader_num_workers": 0,
    }  # fmt: skip
    return MEDSConfig(**{**values, **overrides})


def test_config_names_the_bad_cluster_by(tmp_path):
    assert _config(tmp_path).meds_cluster_by == "features"  # the paper's method by default
    with pytest.raises(ValueError, match="meds_cluster_by='answers'.*'features'.*'answer'"):
        _config(tmp_path, meds_cluster_by="answers")


@pytest.mark.slow
def test_trainer_clusters_by_the_exact_final_answer(toy_policy_path, tmp_path):
    """Every scored row's cluster size is the number of earlier rows of its (prompt, correctness) with the same final
    answer, counted here from the completions the reward saw; the penalties follow from those sizes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
    from hf_meds_cliff.rewards.extraction import extract_final_answer
    from hf_meds_cliff.toy import make_toy_dataset
    from hf_meds_cliff.toy.warmup import boxed_integer

    seen: list[tuple[list, list]] = []

    def exact_answer_reward(prompts, completions, answer, **kwargs):
        seen.append((list(prompts), [completion_text(c) for c in completions]))
        return [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    reward = MixedGroupsReward(exact_answer_reward, 4)
    trainer = MEDSGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(toy_policy_path),
        reward_funcs=[reward],
        args=_config(tmp_path, meds_cluster_by="answer"),
        train_dataset=make_toy_dataset("train", 2, seed=0),  # 2 prompts: both recur every step
        processing_class=tokenizer,
    )
    trainer.train()

    counts: dict[tuple, int] = {}
    expected_sizes: list[int] = []
    for call, (prompts, texts) in enumerate(seen):
        values = reward.values[call * len(texts) : (call + 1) * len(texts)]
        step_keys = [(str(p), v >= 1.0, extract_final_answer(t)) for p, v, t in zip(prompts, values, texts)]
        expected_sizes = [counts.get(key, 0) if key[2] is not None else 0 for key in step_keys]
        for key in step_keys:
            if key[2] is not None:
                counts[key] = counts.get(key, 0) + 1
    sizes = trainer.meds_last_cluster_sizes
    scored = sizes >= 0  # -1: no feature (no answer token)
    assert scored.any()
    np.testing.assert_array_equal(sizes[scored], np.array(expected_sizes)[scored])
    assert trainer.meds_answer_memory.num_rows == sum(counts.values())
    wrong = np.array([v < 1.0 for v in reward.values[-len(sizes) :]])
    expected_penalty = [-min(0.1 * math.log(1 + s), 0.2) if w and s >= 0 else 0.0 for s, w in zip(sizes, wrong)]
    np.testing.assert_allclose(trainer.meds_last_penalties, expected_penalty, atol=1e-6)
    logged = [record for record in trainer.state.log_history if "meds/answer_memory/clusters_per_key" in record]
    assert len(logged) == 3


@pytest.mark.slow
def test_answer_memory_is_checkpointed_and_restored(toy_policy_path, tmp_path):
    """A resumed answer-oracle run restores the answer memory from checkpoint-N/meds_memory and continues exactly as
    the uninterrupted run (same stored answers, cluster sizes and penalties at the resumed step)."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset
    from hf_meds_cliff.toy.warmup import boxed_integer

    def exact_answer_reward(completions, answer, **kwargs):
        return [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]

    torch.set_num_threads(1)

    def trainer(output_dir):
        tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
        tokenizer.padding_side = "left"
        # one epoch (3 steps x 2 prompts): TRL's sampler restarts on resume, so the run must not reach a reshuffle
        args = _config(output_dir, meds_cluster_by="answer", save_strategy="steps", save_steps=2)
        return MEDSGRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(toy_policy_path),
            reward_funcs=[MixedGroupsReward(exact_answer_reward, 4)],
            args=args,
            train_dataset=make_toy_dataset("train", 6, seed=0),
            processing_class=tokenizer,
        )

    uninterrupted = trainer(tmp_path / "a")
    uninterrupted.train()
    checkpoint = tmp_path / "a" / "checkpoint-2"
    assert (checkpoint / "meds_memory" / "meds_answer_memory.json").is_file()
    shutil.copytree(checkpoint, tmp_path / "b" / "checkpoint-2")
    resumed = trainer(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-2"))
    assert resumed.state.global_step == 3
    np.testing.assert_array_equal(resumed.meds_last_cluster_sizes, uninterrupted.meds_last_cluster_sizes)
    np.testing.assert_array_equal(resumed.meds_last_penalties, uninterrupted.meds_last_penalties)
    keys = list(uninterrupted.meds_answer_memory._answers)
    assert keys and list(resumed.meds_answer_memory._answers) == keys
    assert all(resumed.meds_answer_memory.stored_answers(k) == uninterrupted.meds_answer_memory.stored_answers(k) for k in keys)
