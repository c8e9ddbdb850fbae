"""Sentence segmentation: lossless spans and the splitting rules the teacher and toy checker rely on."""

import random
from itertools import pairwise

import pytest

from hf_meds_cliff.cliff import sentence_texts, split_sentences


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
        # toy format: the three obvious sentences
        (
            "7 + 5 = 12. 12 * 3 = 36. The answer is \\boxed{36}.",
            ["7 + 5 = 12. ", "12 * 3 = 36. ", "The answer is \\boxed{36}."],
        ),
        (
            "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}.",
            ["7 + 5 = 12. ", "12 * 3 = 36. ", "36 - 4 = 32. ", "The answer is \\boxed{32}."],
        ),
        ("3 - 8 = -5. The answer is \\boxed{-5}.", ["3 - 8 = -5. ", "The answer is \\boxed{-5}."]),
        # decimals and a decimal at a sentence end
        ("x = 3.5 and y = 0.25. So z = 12.5.", ["x = 3.5 and y = 0.25. ", "So z = 12.5."]),
        # LaTeX outside math: \frac{1}{2}. ends a sentence; braces content does not split
        ("Half is \\frac{1}{2}. Next we add.", ["Half is \\frac{1}{2}. ", "Next we add."]),
        ("So \\boxed{3. 5} holds. Done", ["So \\boxed{3. 5} holds. ", "Done"]),
        ("The set \\{1. 2\\} is finite. Ok", ["The set \\{1. 2\\} is finite. ", "Ok"]),
        # inline math
        ("We get $x = 1. y = 2.$ Then $y$. Next", ["We get $x = 1. y = 2.$ Then $y$. ", "Next"]),
        ("Use \\(a. b\\). Then c.", ["Use \\(a. b\\). ", "Then c."]),
        # display math, including line breaks inside it
        ("Thus\n$$\nx = 1. y\n$$\nSo done.", ["Thus\n", "$$\nx = 1. y\n$$\n", "So done."]),
        ("Hence \\[ a = 1.\n b = 2. \\] follows. Ok", ["Hence \\[ a = 1.\n b = 2. \\] follows. ", "Ok"]),
        # line breaks and paragraphs; blank lines belong to the sentence before
        ("First line\nSecond line\n\n\nThird", ["First line\n", "Second line\n\n\n", "Third"]),
        ("Ends here.\n\nNew paragraph.", ["Ends here.\n\n", "New paragraph."]),
        # leading whitespace joins the first sentence
        ("  \n\nHello. World", ["  \n\nHello. ", "World"]),
        # ! and ?, closing quotes/brackets/markdown emphasis stay with the sentence
        ("Wow! Really? Yes.", ["Wow! ", "Really? ", "Yes."]),
        ('He said "stop." Then (it ended.) Fine', ['He said "stop." ', "Then (it ended.) ", "Fine"]),
        ("**Step 1.** Add. Wait... then", ["**Step 1.** ", "Add. ", "Wait... ", "then"]),
        # abbreviations
        (
            "Use a trick, e.g. symmetry, i.e. swap. Then cf. Eq. 3 vs. Fig. 2 ok.",
            ["Use a trick, e.g. symmetry, i.e. swap. ", "Then cf. Eq. 3 vs. Fig. 2 ok."],
        ),
        # list markers at the start of a line
        (
            "Steps:\n1. Add 2.\n2. Multiply.\n- Check.",
            ["Steps:\n", "1. Add 2.\n", "2. Multiply.\n", "- Check."],
        ),
        ("a. first\nb. second\niv. fourth", ["a. first\n", "b. second\n", "iv. fourth"]),
        # a dot without following whitespace does not split
        ("Visit x.y.z now. Ok", ["Visit x.y.z now. ", "Ok"]),
        # trailing whitespace at the end belongs to the last sentence
        ("One. Two.  \n ", ["One. ", "Two.  \n "]),
        # unbalanced delimiters are literal: splitting still works
        ("It costs $5. And $6 more. End", ["It costs $5. ", "And $6 more. ", "End"]),
        ("a } b. c { d. e", ["a } b. ", "c { d. ", "e"]),
        ("Open \\[ never closed. Next", ["Open \\[ never closed. ", "Next"]),
        ("no terminator at all", ["no terminator at all"]),
    ],
)
def test_split_sentences_rules(text, expected):
    spans = split_sentences(text)
    assert_covers(text, spans)
    assert [text[s:e] for s, e in spans] == expected
    assert sentence_texts(text) == expected


def test_empty_and_whitespace_only():
    assert split_sentences("") == []
    assert split_sentences("   \n ") == [(0, 5)]


def test_non_string_rejected():
    with pytest.raises(TypeError, match="expects a str"):
        split_sentences(["a list"])


def test_random_texts_are_always_covered():
    # Property check: whatever the characters (unbalanced math, braces, escapes), spans cover the text.
    alphabet = list("ab1. !?\n$\\{}[]()e.g. ") + [
        "$$",
        "\\[",
        "\\]",
        "\\(",
        "\\)",
        "\\{",
        "\\}",
        "3.5",
        "\n\n",
    ]
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        spans = split_sentences(text)
        assert_covers(text, spans)
        # no span is whitespace-only unless the whole text is
        if text.strip():
            assert all(text[s:e].strip() for s, e in spans)


def test_cliff_package_imports_no_heavy_dependencies_and_exports_resolve():
    import subprocess
    import sys

    import hf_meds_cliff.cliff as cliff
    import hf_meds_cliff.cliff.teachers as teachers

    code = (
        "import sys, hf_meds_cliff.cliff, hf_meds_cliff.cliff.teachers\n"
        "heavy = [m for m in ('trl', 'httpx', 'transformers', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert set(cliff.__all__) == {
        "split_sentences",
        "sentence_texts",
        "split_code_units",
        "code_unit_texts",
        *cliff._LAZY_ATTRIBUTES,
    }
    for name in cliff.__all__:
        if name not in (
            "CliffConfig",
            "CliffGRPOTrainer",
        ):  # the trainer's modules (import trl) are tested there
            assert getattr(cliff, name) is not None
    assert all(getattr(teachers, name) is not None for name in teachers.__all__)
