"""Code-rollout units: prose sentences plus one unit per non-blank program line, lossless, mapped to Qwen tokens."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from helpers import needs_qwen_tokenizer

from hf_meds_cliff.cliff import code_unit_texts, split_code_units, split_sentences


def assert_covers(text, spans):
    assert "".join(text[s:e] for s, e in spans) == text
    if text:
        assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (_, end), (start, _) in pairwise(spans):
        assert end == start
    assert all(s < e for s, e in spans)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # prose, a program with a blank line inside, prose after: fences and blank lines join the unit before
        (
            "Read n. Print twice.\n```python\nn = int(input())\n\nprint(2 * n)\n```\nThat is all.",
            [
                "Read n. ",
                "Print twice.\n```python\n",
                "n = int(input())\n\n",
                "print(2 * n)\n```\n",
                "That is all.",
            ],
        ),
        # a rollout that is only a program: the opening fence joins the first line
        ("```\na = 1\nb = a + 1\n```", ["```\na = 1\n", "b = a + 1\n```"]),
        # dots, braces and dollars inside code never split a line; indentation stays with its line
        (
            "Code:\n```py\nfor i in range(3):\n    x = {'a': 1.5}. $y\n```",
            ["Code:\n```py\n", "for i in range(3):\n", "    x = {'a': 1.5}. $y\n```"],
        ),
        # truncated inside the program: code up to the end
        ("Plan.\n```python\nx = 1\ny =", ["Plan.\n```python\n", "x = 1\n", "y ="]),
        # two blocks; whitespace-only prose between them and the second opening fence join the unit before
        ("```\na\n```\n\n```\nb\n```\n", ["```\na\n```\n\n```\n", "b\n```\n"]),
        # tilde fences, a longer closing fence, a shorter backtick run inside is code
        ("~~~\nx\n```\ny\n~~~~\nok", ["~~~\nx\n", "```\n", "y\n~~~~\n", "ok"]),
        # an inline ``` with backticks in its info string is not a fence
        ("Use ```a``` here.\nNext line", ["Use ```a``` here.\n", "Next line"]),
        # no code at all: exactly the sentence split
        ("x = 1. So y = 2.", ["x = 1. ", "So y = 2."]),
        # only fences and blank lines: one unit
        ("```\n\n```", ["```\n\n```"]),
    ],
)
def test_split_code_units_rules(text, expected):
    spans = split_code_units(text)
    assert_covers(text, spans)
    assert [text[s:e] for s, e in spans] == expected
    assert code_unit_texts(text) == expected


def test_prose_without_fences_is_split_as_sentences():
    text = "First we read the input. Then we sort it!\nFinally print."
    assert split_code_units(text) == split_sentences(text)


def test_empty_and_bad_input():
    assert split_code_units("") == []
    assert split_code_units("  \n") == [(0, 3)]
    with pytest.raises(TypeError, match="expects a str"):
        split_code_units(b"bytes")


def test_random_code_rollouts_are_always_covered():
    alphabet = [
        "```",
        "```python",
        "~~~",
        "\n",
        "\n\n",
        "x = 1",
        "    ",
        "a. ",
        "$",
        "{",
        "}",
        "print(x)",
        " ",
    ]
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        spans = split_code_units(text)
        assert_covers(text, spans)
        if text.strip():
            assert all(text[s:e].strip() for s, e in spans)


def _code_rollout(rng: random.Random) -> str:
    """A realistic code rollout: reasoning prose, a fenced Python program, sometimes a closing remark."""
    intro = rng.choice(
        [
            "We read the array and count pairs whose sum is even.",
            "Let's think. The answer is the prefix sum modulo 10^9+7, e.g. for n = 3 it is 6.",
            "Approach: binary search on the answer.\n\nComplexity is O(n log n).",
            "",
        ]
    )
    body = [
        "import sys",
        "",
        "def solve():",
        "    data = sys.stdin.read().split()",
        "    n = int(data[0])",
        "    values = list(map(int, data[1 : n + 1]))",
        "    total = 0",
        "    for i, v in enumerate(values):",
        rng.choice(
            ["        total += v * (i + 1)", "        total = (total + v) % 1_000_000_007", "\ttotal -= v"]
        ),
        "",
        "",
        '    print(f"{total}")  # the answer. done',
        "",
        "solve()",
    ]
    fence = rng.choice(["```python", "```", "```py"])
    outro = rng.choice(["", "\nThis runs in linear time.", "\n\nThe program prints the sum.\n"])
    return f"{intro}\n{fence}\n" + "\n".join(body) + "\n```" + outro


@needs_qwen_tokenizer
def test_unit_boundaries_map_exactly_to_qwen_tokens():
    """On Qwen's real tokenizer every unit start maps to the token that begins (or straddles into) it."""
    from hf_meds_cliff.cliff import first_mistake_token_positions
    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    rng = random.Random(7)
    checked = 0
    for _ in range(30):
        text = _code_rollout(rng)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        spans = split_code_units(text)
        assert_covers(text, spans)
        units = list(range(len(spans)))
        positions = first_mistake_token_positions(
            tokenizer, [ids] * len(units), [text] * len(units), units, split_code_units
        )
        for unit, position in zip(units, positions):
            boundary = spans[unit][0]
            prefix = tokenizer.decode(ids[:position])
            # the correct prefix never reaches into the mistaken unit ...
            assert len(prefix) <= boundary and text.startswith(prefix)
            # ... and it is maximal: one more token would cross the boundary
            if unit > 0:
                assert len(tokenizer.decode(ids[: position + 1])) > boundary
            checked += 1
        # every program line is a unit of its own
        starts = {start for start, _ in spans}
        for line in ("def solve():\n", "    total = 0\n", "solve()\n"):
            assert text.index(line) in starts
        # the slow path (decode-based) agrees with the offsets path
        slow = [
            position
            for position in first_mistake_token_positions(
                _SlowTokenizer(tokenizer), [ids] * len(units), [text] * len(units), units, split_code_units
            )
        ]
        assert slow == positions
    assert checked > 30 * 5


class _SlowTokenizer:
    """Qwen's tokenizer without offsets, to exercise the decode-based fallback."""

    is_fast = False

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def decode(self, ids, **kwargs):
        return self._tokenizer.decode(ids, **kwargs)
