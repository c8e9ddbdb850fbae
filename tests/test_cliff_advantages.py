"""Cliff token advantages against hand-computed tables, and the sentence -> token boundary mapping."""

from fractions import Fraction as F

import pytest
import torch

from hf_meds_cliff.cliff import (
    cliff_token_advantages,
    first_mistake_token_positions,
    sentence_to_token_index,
    split_sentences,
    zero_variance_groups,
)
from hf_meds_cliff.cliff.advantages import token_index_at_char

# One mixed group (label 0) of three rows, A_cor = 2, A_inc = -1, T = 4:
#   row 0 correct,   mask [1,1,0,0]
#   row 1 incorrect, mask [1,1,1,1], suffix starts at token 1
#   row 2 incorrect, mask [1,1,1,0], suffix starts at token 0 (plain GRPO-negative)
# Un-centred u (lam = 0):   [2,2,0,0] [0,-1,-1,-1] [-1,-1,-1,0]  -> sum -2 over 9 tokens, b = -2/9
# Un-centred u (lam = 0.5): [2,2,0,0] [1,-1,-1,-1] [-1,-1,-1,0]  -> sum -1, b = -1/9
# Un-centred u (lam = 1):   [2,2,0,0] [2,-1,-1,-1] [-1,-1,-1,0]  -> sum 0,  b = 0
GROUP_ADVANTAGES = [2.0, -1.0, -1.0]
GROUP_CORRECT = [True, False, False]
GROUP_SUFFIX = [0, 1, 0]
GROUP_MASK = [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]]
EXPECTED = {
    0.0: [
        [F(20, 9), F(20, 9), 0, 0],
        [F(2, 9), F(-7, 9), F(-7, 9), F(-7, 9)],
        [F(-7, 9), F(-7, 9), F(-7, 9), 0],
    ],
    0.5: [
        [F(19, 9), F(19, 9), 0, 0],
        [F(10, 9), F(-8, 9), F(-8, 9), F(-8, 9)],
        [F(-8, 9), F(-8, 9), F(-8, 9), 0],
    ],
    1.0: [[2, 2, 0, 0], [2, -1, -1, -1], [-1, -1, -1, 0]],
}


def table(rows):
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64)


@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_hand_computed_single_group(lam):
    out = cliff_token_advantages(
        torch.tensor(GROUP_ADVANTAGES, dtype=torch.float64),
        torch.tensor(GROUP_CORRECT),
        torch.tensor([0, 0, 0]),
        torch.tensor(GROUP_SUFFIX),
        torch.tensor(GROUP_MASK),
        lam=lam,
    )
    assert out.shape == (3, 4) and out.dtype == torch.float64
    torch.testing.assert_close(out, table(EXPECTED[lam]))
    assert abs(out.sum().item()) < 1e-12  # token advantages of a group sum to zero


def test_several_groups_interleaved_with_zero_variance_groups():
    # group 7 (rows 1, 4): correct [1,1,1,0] A=1; incorrect [1,1,1,1] A=-1 suffix at 2
    #   u = [1,1,1,0] [0,0,-1,-1] -> sum 1 over 7 tokens, b = 1/7
    # group 3 (rows 2, 5): all wrong -> 0;  group 9 (row 6, 7): all correct -> 0
    advantages = torch.tensor([2.0, 1.0, -0.5, -1.0, -1.0, -0.5, 0.7, 0.7, -1.0], dtype=torch.float64)
    is_correct = torch.tensor([True, True, False, False, False, False, True, True, False])
    group_ids = torch.tensor([0, 7, 3, 0, 7, 3, 9, 9, 0])
    suffix_start = torch.tensor([0, 0, 1, 1, 2, 0, 0, 0, 0])
    mask = torch.tensor(
        [
            GROUP_MASK[0],
            [1, 1, 1, 0],
            [1, 1, 1, 1],
            GROUP_MASK[1],
            [1, 1, 1, 1],
            [1, 1, 0, 0],
            [1, 0, 0, 0],
            [1, 1, 1, 1],
            GROUP_MASK[2],
        ]
    )
    out = cliff_token_advantages(advantages, is_correct, group_ids, suffix_start, mask, lam=0.0)
    expected_group0 = EXPECTED[0.0]
    expected = table(
        [
            expected_group0[0],
            [F(6, 7), F(6, 7), F(6, 7), 0],
            [0, 0, 0, 0],
            expected_group0[1],
            [F(-1, 7), F(-1, 7), F(-8, 7), F(-8, 7)],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            expected_group0[2],
        ]
    )
    torch.testing.assert_close(out, expected)


def test_masked_tokens_in_the_middle_are_zero_and_excluded_from_baseline():
    # correct row A=1 mask [1,0,1]; incorrect row A=-1 mask [1,1,0] suffix at 1
    # u = [1,_,1] [0,-1,_] -> sum 1 over 4 unmasked tokens, b = 1/4
    out = cliff_token_advantages(
        torch.tensor([1.0, -1.0]),
        torch.tensor([True, False]),
        torch.tensor([5, 5]),
        torch.tensor([0, 1]),
        torch.tensor([[True, False, True], [True, True, False]]),
    )
    torch.testing.assert_close(out, torch.tensor([[0.75, 0.0, 0.75], [-0.25, -1.25, 0.0]]))


def test_suffix_start_zero_everywhere_is_grpo_minus_token_mean():
    advantages = torch.tensor([0.5, 0.5, -1.5])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    for lam in (0.0, 1.0):
        out = cliff_token_advantages(
            advantages,
            torch.tensor([True, True, False]),
            torch.tensor([0, 0, 0]),
            torch.tensor([0, 0, 0]),
            mask,
            lam,
        )
        baseline = (0.5 * 3 + 0.5 * 1 - 1.5 * 2) / 6
        torch.testing.assert_close(out, (advantages[:, None] - baseline) * mask)


def test_suffix_beyond_length_makes_the_row_all_prefix():
    # incorrect row, suffix_start past its last token: lam * A_cor everywhere (lam = 1 -> same as correct)
    out = cliff_token_advantages(
        torch.tensor([1.0, -1.0]),
        torch.tensor([True, False]),
        torch.tensor([0, 0]),
        torch.tensor([0, 10]),
        torch.ones(2, 2),
        lam=1.0,
    )
    torch.testing.assert_close(out, torch.zeros(2, 2))


def test_zero_variance_groups():
    flags = zero_variance_groups(
        torch.tensor([True, False, False, False, True]), torch.tensor([1, 1, 2, 2, 3])
    )
    assert flags.tolist() == [False, False, True, True, True]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"suffix_start": torch.tensor([0, -1])}, ValueError, "suffix_start.*>= 0"),
        ({"advantages": torch.tensor([1.0, 2.0, 3.0])}, ValueError, "advantages.*shape"),
        ({"advantages": torch.tensor([1, 2])}, TypeError, "floating-point"),
        ({"completion_mask": torch.ones(2)}, ValueError, r"\(B, T\)"),
        ({"suffix_start": torch.tensor([0.0, 1.0])}, TypeError, "integer"),
        ({"group_ids": [0, 0]}, TypeError, "group_ids"),
        ({"lam": "0.5"}, TypeError, "lam"),
    ],
)
def test_bad_input(kwargs, error, match):
    arguments = {
        "advantages": torch.tensor([1.0, -1.0]),
        "is_correct": torch.tensor([True, False]),
        "group_ids": torch.tensor([0, 0]),
        "suffix_start": torch.tensor([0, 1]),
        "completion_mask": torch.ones(2, 3),
    }
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        cliff_token_advantages(**arguments)


# --- sentence -> token mapping -------------------------------------------------------------------


def test_sentence_to_token_index_straddling_token_goes_to_suffix():
    text = "a = 1. b = 2."
    spans = split_sentences(text)  # [(0, 7), (7, 13)]
    assert spans == [(0, 7), (7, 13)]
    # token 2 is " b" = chars 6..8: straddles the boundary at 7 -> first suffix token
    offsets = [(0, 3), (3, 6), (6, 8), (8, 13), (13, 13)]
    assert sentence_to_token_index(offsets, spans, 1) == 2
    # aligned boundary: token starting exactly at 7 is the first suffix token
    assert sentence_to_token_index([(0, 4), (4, 7), (7, 9), (9, 13)], spans, 1) == 2
    assert sentence_to_token_index(offsets, spans, 0) == 0
    # zero-width special tokens before the boundary are skipped; no token after it -> len(offsets)
    assert sentence_to_token_index([(0, 0), (0, 7), (7, 7)], spans, 1) == 3
    with pytest.raises(ValueError, match="out of range"):
        sentence_to_token_index(offsets, spans, 2)
    with pytest.raises(TypeError, match="sentence_index"):
        sentence_to_token_index(offsets, spans, 1.0)


@pytest.fixture(scope="module")
def bpe_tokenizer():
    """A byte-level BPE tokenizer trained here on toy-style text (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [
        "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}.",
        "3 - 8 = -5. -5 * 2 = -10. The answer is \\boxed{-10}.",
        "We have x = 3.5, so 2x = 7.\nThus $x^2 = 12.25$. The answer is \\boxed{7}.",
        "√2 × 3 ≈ 4.24. Hence the answer is \\boxed{4.24}.",
    ] * 20
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|eos|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|eos|>")


TEXTS = [
    "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}.",
    "We have x = 3.5, so 2x = 7.\nThus $x^2 = 12.25$. The answer is \\boxed{7}.",
    "√2 ≈ 1.41. ×3 gives 4.24. √ The answer is \\boxed{4.24}.",
]


@pytest.mark.parametrize("text", TEXTS)
def test_first_mistake_token_positions_on_real_bpe(bpe_tokenizer, text):
    ids = bpe_tokenizer(text, add_special_tokens=False)["input_ids"] + [bpe_tokenizer.eos_token_id]
    decoded = bpe_tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded == text
    spans = split_sentences(text)
    assert len(spans) >= 3
    for k in range(len(spans)):
        (position,) = first_mistake_token_positions(bpe_tokenizer, [ids], [text], [k])
        boundary = spans[k][0]
        # the prefix decodes to text strictly before the boundary; adding the first suffix token crosses it
        prefix = bpe_tokenizer.decode(ids[:position], skip_special_tokens=True)
        assert len(prefix) <= boundary and text.startswith(prefix)
        if k > 0:
            assert len(bpe_tokenizer.decode(ids[: position + 1], skip_special_tokens=True)) > boundary
        # the tokenizer-agnostic fallback agrees with the offset fast path
        assert token_index_at_char(bpe_tokenizer, ids, boundary, skip_special_tokens=True) == (
            position if k else 0
        )


def test_bpe_straddling_token_belongs_to_suffix(bpe_tokenizer):
    text = TEXTS[0]
    ids = bpe_tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = [bpe_tokenizer.decode([t]) for t in ids]
    # byte-level BPE attaches the space to the next word: " 12" straddles "12. | 12 * 3"
    (position,) = first_mistake_token_positions(bpe_tokenizer, [ids], [text], [1])
    assert tokens[position].startswith(" ") and tokens[position].strip().startswith("12")


def test_non_canonical_ids_use_decode_fallback(bpe_tokenizer):
    # one token per character: re-encoding does not give these ids back, so offsets are not used
    text = TEXTS[0]
    ids = [
        bpe_tokenizer.convert_tokens_to_ids(
            bpe_tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(c)[0][0]
        )
        for c in text
    ]
    assert bpe_tokenizer.decode(ids) == text
    spans = split_sentences(text)
    positions = first_mistake_token_positions(bpe_tokenizer, [ids] * 3, [text] * 3, [None, 0, 2])
    assert positions == [0, 0, spans[2][0]]  # one char per token: token index == char index


def test_first_mistake_positions_bad_input(bpe_tokenizer):
    with pytest.raises(ValueError, match="align"):
        first_mistake_token_positions(bpe_tokenizer, [[1]], ["a", "b"], [0])
    with pytest.raises(ValueError, match="out of range"):
        first_mistake_token_positions(bpe_tokenizer, [[1]], ["a. b."], [5])


def test_without_recentring_the_values_are_the_uncentred_ones():
    # the ablation with b = 0: the un-centred u of the module's group table, unchanged, for every lam
    uncentred = {
        0.0: [[2, 2, 0, 0], [0, -1, -1, -1], [-1, -1, -1, 0]],
        0.5: [[2, 2, 0, 0], [1, -1, -1, -1], [-1, -1, -1, 0]],
        1.0: [[2, 2, 0, 0], [2, -1, -1, -1], [-1, -1, -1, 0]],
    }
    for lam, expected in uncentred.items():
        out = cliff_token_advantages(
            torch.tensor(GROUP_ADVANTAGES, dtype=torch.float64),
            torch.tensor(GROUP_CORRECT),
            torch.tensor([0, 0, 0]),
            torch.tensor(GROUP_SUFFIX),
            torch.tensor(GROUP_MASK),
            lam=lam,
            recentre=False,
        )
        torch.testing.assert_close(out, table(expected))


def test_no_split_and_no_recentring_is_one_sequence_advantage_per_rollout():
    # The paper's "GRPO with Teacher" with a teacher that agrees with the verifier: GRPO's advantages on every token;
    # zero-variance groups (group 4, all wrong) stay 0 as in GRPO.
    advantages = torch.tensor([0.5, 0.5, -1.5, 0.0, 0.0])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    out = cliff_token_advantages(
        advantages,
        torch.tensor([True, True, False, False, False]),
        torch.tensor([0, 0, 0, 4, 4]),
        torch.tensor([0, 0, 0, 0, 0]),
        mask,
        recentre=False,
    )
    torch.testing.assert_close(out, advantages[:, None] * mask)


def test_recentre_must_be_a_bool():
    with pytest.raises(TypeError, match="`recentre` must be a bool, got str"):
        cliff_token_advantages(
            torch.tensor([1.0, -1.0]),
            torch.tensor([True, False]),
            torch.tensor([0, 0]),
            torch.tensor([0, 0]),
            torch.tensor([[1], [1]]),
            recentre="no",
        )
