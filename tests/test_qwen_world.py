"""The Qwen-tokenizer world: its problems, and the exactness of the compact warm-up model."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import needs_qwen_tokenizer

from hf_meds_cliff.rewards import extract_boxed_answer
from hf_meds_cliff.toy.qwen_world import (
    FAMILIES,
    CompactVocabulary,
    QwenWorldSettings,
    build_compact_model,
    compact_loss,
    expand_compact_model,
    is_test_question,
    math_world_problems,
)


def test_problems_are_reproducible_split_and_boxed():
    train = math_world_problems("train", 300, seed=0)
    assert train == math_world_problems("train", 300, seed=0)
    test = math_world_problems("test", 40, seed=0)
    assert not {p.question for p in train} & {p.question for p in test}
    assert all(is_test_question(p.question) for p in test) and not any(
        is_test_question(p.question) for p in train
    )
    assert {p.family for p in train} == set(FAMILIES)
    for problem in train:
        assert extract_boxed_answer(problem.solution) == problem.answer
    answers = " ".join(p.answer for p in train)
    for piece in ("\\frac{", "\\sqrt{", "\\pi", "\\text{", "(", "-"):
        assert piece in answers
    with pytest.raises(ValueError, match="split='dev'"):
        math_world_problems("dev", 1)


def test_settings_are_validated():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        QwenWorldSettings(batch_size=0)
    with pytest.raises(ValueError, match="target_greedy_accuracy"):
        QwenWorldSettings(target_greedy_accuracy=2.0)


@needs_qwen_tokenizer
def test_compact_model_is_exactly_the_full_vocabulary_model():
    from hf_meds_cliff.toy.model import ToyModelConfig
    from hf_meds_cliff.toy.qwen_world import _encode_corpus, load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    encoded = _encode_corpus(tokenizer, math_world_problems("train", 8, seed=0))
    vocabulary = CompactVocabulary(
        [t for ids, _ in encoded for t in ids] + [tokenizer.pad_token_id], len(tokenizer)
    )
    config = ToyModelConfig(num_hidden_layers=2, max_position_embeddings=512)
    compact = build_compact_model(vocabulary, 0, config, tokenizer)
    with torch.no_grad():  # make the corpus rows non-trivial, as after training
        compact.get_input_embeddings().weight[: vocabulary.unused_id] *= 50.0
    full = expand_compact_model(compact, vocabulary, tokenizer, config)
    assert full.get_input_embeddings().weight.shape[0] == len(tokenizer) > 150_000

    real_ids, prompt_length = encoded[0]
    compact_ids = torch.tensor([vocabulary.to_compact(real_ids)])
    with torch.no_grad():
        full_logits = full(input_ids=torch.tensor([real_ids])).logits[0]
        compact_logits = compact(input_ids=compact_ids).logits[0]
    corpus = torch.tensor(vocabulary.corpus_ids)
    torch.testing.assert_close(full_logits[:, corpus], compact_logits[:, : vocabulary.unused_id])
    unused = torch.ones(len(tokenizer), dtype=torch.bool)
    unused[corpus] = False
    assert torch.all(full_logits[:, unused] == 0.0)

    # The warm-up loss on the compact model is the full model's cross-entropy over the whole vocabulary.
    labels = torch.full_like(compact_ids, -100)
    labels[0, prompt_length:] = compact_ids[0, prompt_length:]
    batch = {"input_ids": compact_ids, "attention_mask": torch.ones_like(compact_ids), "labels": labels}
    with torch.no_grad():
        loss = compact_loss(compact, batch, vocabulary)
    targets = torch.tensor(real_ids[prompt_length:])
    expected = torch.nn.functional.cross_entropy(full_logits[prompt_length - 1 : -1], targets)
    torch.testing.assert_close(loss, expected)
    assert vocabulary.log_unused == pytest.approx(math.log(int(unused.sum())))
