"""The reward functions inside TRL's GRPOTrainer: names, log_metric/log_extra hooks, completion_ids."""

from __future__ import annotations

import pytest

from hf_meds_cliff.rewards import MathAnswerReward, OverlongPenaltyReward


@pytest.mark.slow
def test_rewards_through_grpo_trainer(tmp_path, toy_policy_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff.toy import make_toy_dataset

    tokenizer = AutoTokenizer.from_pretrained(toy_policy_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(toy_policy_path)
    math_reward = MathAnswerReward()
    # The ramp starts at 48 - 32 = 16 tokens: every toy solution (29-45 tokens) is on it, so the per-row check
    # below meets the linear part by construction, and any completion stopped early meets the flat part.
    overlong = OverlongPenaltyReward(max_completion_length=48, buffer_length=32, penalty_factor=0.5)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=48,
        max_steps=1,
        learning_rate=1e-5,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        log_completions=False,
        seed=0,
    )
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: one thread is much faster on a shared 2-core machine
    try:
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[math_reward, overlong],
            args=args,
            train_dataset=make_toy_dataset("train", 8, seed=0),
            processing_class=tokenizer,
        )
        assert trainer.reward_func_names == ["math_answer", "overlong"]
        completion_lengths = []  # tokens per completion, eos included, as TRL's completion_mask counts them
        generate_and_score = trainer._generate_and_score_completions

        def recording(inputs):
            output = generate_and_score(inputs)
            completion_lengths.extend(output["completion_mask"].sum(dim=1).tolist())
            return output

        trainer._generate_and_score_completions = recording
        trainer.train()
    finally:
        torch.set_num_threads(previous_threads)

    logged = next(entry for entry in trainer.state.log_history if "rewards/math_answer/mean" in entry)
    for key in (
        "math_answer/no_boxed_frac",
        "math_answer/timeout_frac",
        "math_answer/error_frac",
        "rewards/overlong/mean",
    ):
        assert key in logged, key
    assert 0.0 <= logged["rewards/math_answer/mean"] <= 1.0
    assert sum(math_reward.counts.values()) == 8  # one generation batch: 2 prompts x 4 completions
    statuses = list(trainer._logs["extra"]["answer_status"])
    assert len(statuses) == 8 and set(statuses) <= {"correct", "wrong", "no_boxed", "timeout", "error"}
    # DAPO's soft overlong punishment by hand, per completion: 0 up to 16 tokens, then -(length - 16) / 32 * 0.5.
    expected = [min(0.0, -(length - 16) / 32 * 0.5) for length in completion_lengths]
    assert len(expected) == 8 and any(penalty < 0 for penalty in expected), completion_lengths
    assert list(trainer._logs["rewards"]["overlong"]) == pytest.approx(expected, abs=1e-6)
    assert logged["rewards/overlong/mean"] == pytest.approx(sum(expected) / 8, abs=1e-6)
