"""MEDS' answer token on real Qwen tokenizations: equal to the reference implementation's rule.

The reference is ``find_brace_positions_in_responses`` in the authors' ``recipe/MEDS/extract_layer_logits.py``:
position = the token holding the ``{`` of the last ``\\boxed{`` (exact token-sequence match of
``tokenizer.encode("\\\\boxed{")`` searched from the end; else the last token containing "boxed" with a token
containing "{" within 10 tokens), target = the next token. ``_reference_positions`` below re-implements it
independently (different loops, same rule) so the library's version is checked against it.
"""

from __future__ import annotations

import random

import pytest
from helpers import needs_qwen_tokenizer

from hf_meds_cliff.meds.features import (
    ANSWER_MARKER,
    AnswerLocation,
    locate_answer_token,
    locate_answer_tokens,
    reference_brace_index,
)

pytestmark = needs_qwen_tokenizer


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    return load_qwen_tokenizer()


def _reference_positions(ids: list[int], tokenizer) -> int | None:
    """The reference rule, written independently of the library."""
    pattern = tuple(tokenizer(ANSWER_MARKER, add_special_tokens=False)["input_ids"])
    starts = [j for j in range(len(ids)) if tuple(ids[j : j + len(pattern)]) == pattern]
    if pattern and starts:
        return max(starts) + len(pattern) - 1
    strings = [tokenizer.convert_ids_to_tokens(i) for i in ids]
    boxed_positions = [i for i, s in enumerate(strings) if "boxed" in s.lower()]
    for boxed in reversed(boxed_positions):
        braces = [m for m in range(boxed, min(boxed + 10, len(ids))) if "{" in strings[m]]
        if braces:
            return braces[0]
    return None


def _answer(rng: random.Random) -> str:
    kind = rng.choice(["int", "neg", "frac", "dfrac", "sqrt", "text", "pi", "tuple", "var", "expr", "big"])
    a, b = rng.randint(1, 99), rng.randint(2, 99)
    return {
        "int": str(a),
        "neg": f"-{a}",
        "frac": f"\\frac{{{a}}}{{{b}}}",
        "dfrac": f"-\\dfrac{{{a}}}{{{b}}}",
        "sqrt": f"{a}\\sqrt{{{b}}}" if rng.random() < 0.5 else f"\\sqrt{{{b}}}",
        "text": f"\\text{{{rng.choice(['even', 'odd', 'Yes', 'no solution', 'B'])}}}",
        "pi": f"{a}\\pi" if rng.random() < 0.5 else f"\\frac{{{a}\\pi}}{{{b}}}",
        "tuple": f"({rng.randint(-9, 9)}, {rng.randint(-9, 9)})",
        "var": rng.choice(["x", "y^2", "n+1", "2x-3", "a_n"]),
        "expr": f"{a} + {b}i" if rng.random() < 0.5 else f"[{a}, {b})",
        "big": f"{a}{b}{rng.randint(100, 999)}",
    }[kind]


def _completion(rng: random.Random) -> str:
    """A realistic solution ending: prose, display math, one or more boxes, odd spacing."""
    intro = rng.choice(
        [
            "We simplify step by step.",
            "First, note that the sum telescopes.",
            "Let $x$ be the unknown. Then $2x = 10$.",
            "By the quadratic formula, the roots are real.",
            "",
        ]
    )
    boxes = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        answer = _answer(rng)
        box = rng.choice(
            [
                f"\\boxed{{{answer}}}",
                f"$\\boxed{{{answer}}}$",
                f"$$\\boxed{{{answer}}}$$",
                f" \\boxed{{ {answer} }}",
                f"\\[\\boxed{{{answer}}}\\]",
                f"\\boxed{{{answer}}}.",
            ]
        )
        boxes.append(box)
    lead = rng.choice(["The answer is ", "Therefore, the final answer is: ", "So we get\n", "Hence ", ""])
    tail = rng.choice(["", ".", " I hope it is correct.", "\n", "<|im_end|>"])
    return f"{intro} {lead}{' or '.join(boxes)}{tail}".strip()


def _corpus(count: int = 160) -> list[str]:
    rng = random.Random(2026)
    return [_completion(rng) for _ in range(count)]


def test_positions_equal_the_reference_rule_on_qwen_tokenizations(qwen_tokenizer):
    texts = _corpus()
    assert len(texts) >= 100
    merged = fallback = 0
    for text in texts:
        ids = qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
        expected = _reference_positions(ids, qwen_tokenizer)
        assert reference_brace_index(ids, qwen_tokenizer) == expected, text
        location = locate_answer_token(ids, qwen_tokenizer)
        assert expected is not None, text  # every generated completion has a non-empty box
        assert location == AnswerLocation(expected, expected + 1, ids[expected + 1]), text
        assert location.rule == "reference", text  # "auto" (the default) never needs the fallback on Qwen
        brace_token = qwen_tokenizer.convert_ids_to_tokens(ids[expected])
        merged += brace_token != "{"
        fallback += tuple(ids[expected - 2 : expected + 1]) != tuple(
            qwen_tokenizer(ANSWER_MARKER, add_special_tokens=False)["input_ids"]
        )
    # The corpus exercises both branches of the rule: Qwen merges "{" with "\\", "-", "(", letters ...
    assert merged >= len(texts) // 5, merged
    assert fallback >= len(texts) // 3, fallback
    assert fallback < len(texts), "the exact token-sequence match must occur too"


def test_batch_helper_and_the_merged_brace_target(qwen_tokenizer):
    ids = qwen_tokenizer("So $\\boxed{\\frac{1}{2}}$.", add_special_tokens=False)["input_ids"]
    tokens = qwen_tokenizer.convert_ids_to_tokens(ids)
    reference = locate_answer_token(ids, qwen_tokenizer)
    assert tokens[reference.query_index] == "{\\" and tokens[reference.target_index] == "frac"
    decoded = locate_answer_token(ids, qwen_tokenizer, rule="decoded")
    assert tokens[decoded.target_index] == "{\\" and decoded.query_index == decoded.target_index - 1
    assert locate_answer_tokens([ids, ids], qwen_tokenizer) == [reference, reference]
    assert locate_answer_tokens([ids], qwen_tokenizer, rule="decoded") == [decoded]


def test_the_exact_sequence_match_wins_over_a_later_merged_box(qwen_tokenizer):
    # The reference searches the exact "\\", "boxed", "{" sequence first, even when a later box is merged.
    text = "\\boxed{12} or maybe $\\boxed{-3}$"
    ids = qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = qwen_tokenizer.convert_ids_to_tokens(ids)
    location = locate_answer_token(ids, qwen_tokenizer)
    assert tokens[location.query_index] == "{" and tokens[location.target_index] == "1"
    assert location.query_index == _reference_positions(ids, qwen_tokenizer)


@pytest.mark.parametrize(
    "text",
    ["The answer is \\boxed{}.", "So \\boxed{ }", "The answer is \\boxed{", "$\\boxed{<|im_end|>"],
)
def test_no_feature_for_an_empty_box_or_a_brace_followed_only_by_eos(qwen_tokenizer, text):
    ids = qwen_tokenizer(text, add_special_tokens=False)["input_ids"]
    # The reference still has a brace position here (and would read "}" or padding as the target) ...
    assert _reference_positions(ids, qwen_tokenizer) is not None
    # ... we give no feature, with either rule.
    assert locate_answer_token(ids, qwen_tokenizer) is None
    assert locate_answer_token(ids, qwen_tokenizer, rule="decoded") is None


def test_no_box_and_bad_rule(qwen_tokenizer):
    ids = qwen_tokenizer("The answer is 12.", add_special_tokens=False)["input_ids"]
    assert locate_answer_token(ids, qwen_tokenizer) is None
    assert locate_answer_token([], qwen_tokenizer) is None
    with pytest.raises(ValueError, match="rule='nearest' is not one of"):
        locate_answer_token(ids, qwen_tokenizer, rule="nearest")
