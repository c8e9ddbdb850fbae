"""Toy tokenizer: exact round-trip, saved/loaded as a normal HF tokenizer, chat template."""

from __future__ import annotations

import string

import pytest
from transformers import AutoTokenizer

from hf_meds_cliff.toy import build_toy_tokenizer, make_toy_dataset

TEXTS = [
    "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}.",
    "Compute (7 + 5) * 3 - 4.",
    "  leading and  double  spaces, trailing  ",
    "lines\n\nand\ttabs\n",
    "username assistants systematic Computers",  # whole-word tokens inside other words
    "\\boxed{\\frac{1}{2}} and \\boxed{-7}",
    string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", ""),
]


@pytest.fixture(scope="module")
def saved_tokenizer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("toy_tokenizer")
    build_toy_tokenizer(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.padding_side = "left"
    return tokenizer


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_is_exact(toy_tokenizer, saved_tokenizer, text):
    for tokenizer in (toy_tokenizer, saved_tokenizer):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        assert tokenizer.batch_decode(
            [ids + [tokenizer.eos_token_id, tokenizer.pad_token_id]], skip_special_tokens=True
        ) == [text]


def test_round_trip_on_dataset_solutions(saved_tokenizer):
    solutions = list(make_toy_dataset("test", 50)["solution"])
    encoded = saved_tokenizer(solutions, add_special_tokens=False)["input_ids"]
    assert saved_tokenizer.batch_decode(encoded, skip_special_tokens=True) == solutions


def test_saved_tokenizer_matches_the_built_one(toy_tokenizer, saved_tokenizer):
    assert saved_tokenizer.get_vocab() == toy_tokenizer.get_vocab()
    assert saved_tokenizer.pad_token == "<|endoftext|>" and saved_tokenizer.eos_token == "<|im_end|>"
    assert saved_tokenizer.pad_token_id != saved_tokenizer.eos_token_id
    for word in ("Compute ", " The answer is ", "\\boxed{"):
        assert len(saved_tokenizer(word, add_special_tokens=False)["input_ids"]) == 1


def test_chat_template_with_generation_prompt(saved_tokenizer):
    messages = [{"role": "user", "content": "Compute 1 + 2."}]
    text = saved_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nCompute 1 + 2.<|im_end|>\n<|im_start|>assistant\n"
    without = saved_tokenizer.apply_chat_template(messages, tokenize=False)
    assert without == "<|im_start|>user\nCompute 1 + 2.<|im_end|>\n"
    ids = saved_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == saved_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert saved_tokenizer.decode(ids, skip_special_tokens=True) == "user\nCompute 1 + 2.\nassistant\n"


def test_left_padding_after_loading(saved_tokenizer):
    batch = saved_tokenizer(
        ["1 + 2", "10 + 20 = 30"], padding=True, return_tensors="pt", add_special_tokens=False
    )
    assert batch["input_ids"][0, 0].item() == saved_tokenizer.pad_token_id
    assert batch["attention_mask"][0].tolist()[-1] == 1 and batch["attention_mask"][0, 0].item() == 0


def test_unknown_characters_become_a_special_unk_token(toy_tokenizer):
    ids = toy_tokenizer("1 × 2", add_special_tokens=False)["input_ids"]
    assert toy_tokenizer.unk_token_id in ids
    assert toy_tokenizer.decode(ids, skip_special_tokens=True) == "1  2"
