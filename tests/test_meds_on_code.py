"""MEDS on code stops with a clear message instead of training with no features (its anchor is ``\\boxed{``)."""

from __future__ import annotations

import pytest
from helpers import needs_qwen_tokenizer

from hf_meds_cliff import MEDSConfig, MEDSGRPOTrainer

CPU = {"bf16": False, "use_cpu": True, "report_to": []}
PROGRAM = "Double it.\n```python\nn = int(input())\nprint(2 * n)\n```"


def _dataset():
    from datasets import Dataset

    tests = '[{"input": "3\\n", "output": "6\\n", "testtype": "stdin"}]'
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"Print 2n ({i})."}] for i in range(4)],
            "tests": [tests] * 4,
        }
    )


def test_meds_refuses_the_code_reward_at_start_up(tmp_path):
    from hf_meds_cliff.code import CodeTestsReward

    args = MEDSConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, **CPU)
    with pytest.raises(
        ValueError, match=r"MEDS cannot shape code rollouts \(the correctness reward is a CodeTest"
    ):
        MEDSGRPOTrainer(model="unused", reward_funcs=[CodeTestsReward()], args=args, train_dataset=_dataset())


@needs_qwen_tokenizer
def test_meds_stops_on_the_first_batch_of_code_rows_without_answer_tokens(tmp_path):
    from hf_meds_cliff.toy.model import ToyModelConfig, seeded_qwen3
    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    model = seeded_qwen3(
        ToyModelConfig(max_position_embeddings=512),
        0,
        len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
    )

    def programs(prompts, trainer):
        ids = tokenizer(PROGRAM, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        prompt_ids = [
            list(tokenizer.apply_chat_template(p, add_generation_prompt=True)["input_ids"]) for p in prompts
        ]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": [ids] * len(prompts),
            "logprobs": [[0.0] * len(ids)] * len(prompts),
        }

    def half_right(completions, **kwargs):  # a user's own 0/1 code reward: MEDS cannot tell it is about code
        return [float(i % 2) for i in range(len(completions))]

    args = MEDSConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_completion_length=32,
        max_steps=1, activation_checkpointing=False, **CPU,
    )  # fmt: skip
    trainer = MEDSGRPOTrainer(
        model=model, reward_funcs=[half_right], args=args, train_dataset=_dataset(), processing_class=tokenizer,
        rollout_func=programs,
    )  # fmt: skip
    with pytest.raises(
        ValueError, match="none of the first batch's 4 rollouts has an answer token.*train with Cliff"
    ):
        trainer.train()
