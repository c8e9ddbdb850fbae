"""CodeTestsReward inside a real TRL GRPOTrainer step, on a tiny model whose vocabulary holds whole programs."""

from __future__ import annotations

import json
import math

import pytest

from hf_meds_cliff.code import CodeTestsReward, SandboxLimits

DOUBLE = "```python\nprint(int(input()) * 2)\n```"
PLUS_TWO = "```python\nprint(int(input()) + 2)\n```"  # right on input 2 only: a wrong program
EXITS = "```python\nimport sys\nsys.exit(3)\n```"
PROGRAMS = {DOUBLE: 1.0, PLUS_TWO: 0.0, EXITS: 0.0}
NOT_PROGRAMS = ["<pad>", "<eos>", "double", "the", "number", "prose"]
TESTS = json.dumps(
    [{"input": "2\n", "output": "4\n", "testtype": "stdin"}, {"input": "10\n", "output": "20\n"}]
)


def program_tokenizer():
    """A word-level tokenizer whose tokens include three whole fenced programs, so that even a random
    model writes real programs: the reward of each completion follows from its tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [*NOT_PROGRAMS, *PROGRAMS]
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>")


def expected_reward(completion: str) -> float:
    """The reward by the program token written."""
    written = [program for program in PROGRAMS if program in completion]
    assert len(written) == 1, completion  # one token, one program
    return PROGRAMS[written[0]]


@pytest.mark.slow
def test_code_reward_through_grpo_trainer(tmp_path):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Qwen3Config
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = program_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            tie_word_embeddings=False,
        )
    )
    with torch.no_grad():  # every position has the same hidden state, under which only programs are likely
        model.model.embed_tokens.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.fill_(-1.0)
        model.lm_head.weight[tokenizer.convert_tokens_to_ids(list(PROGRAMS))] = 1.0
    reward = CodeTestsReward(limits=SandboxLimits(timeout_s=5, memory_mb=256))
    dataset = Dataset.from_dict({"prompt": ["double the number", "the number"], "tests": [TESTS, ""]})
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=1,  # one token: one whole program
        generation_kwargs={
            "suppress_tokens": tokenizer.convert_tokens_to_ids(["double", "the", "number", "prose"])
        },
        max_steps=1,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=[reward], args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()

    completions = list(trainer._logs["completion"])
    rewards = list(trainer._logs["rewards"]["code_tests"])
    tests = [row["tests"] for row in dataset]
    prompts = list(trainer._logs["prompt"])
    assert len(completions) == len(rewards) == 8
    for prompt, completion, value in zip(prompts, completions, rewards):
        if tests[0 if prompt == "double the number" else 1]:
            assert value == expected_reward(completion), (completion, value)
        else:
            assert math.isnan(value)  # no tests: None, which TRL stores as NaN
    statuses = list(trainer._logs["extra"]["code_status"])
    assert statuses.count(None) == 4 and sum(status == "passed" for status in statuses) == rewards.count(1.0)
    logged = next(entry for entry in trainer.state.log_history if "rewards/code_tests/mean" in entry)
    for key in (
        "code/passed_frac",
        "code/no_program_frac",
        "code/not_isolated_frac",
        "code/cleanup_failures",
        "code/memory_fallback_frac",
        "code/runtime_error_frac",
    ):
        assert key in logged, key
