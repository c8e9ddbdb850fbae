"""Cliff's sentence and code-unit splitting in linear time: the same spans as the implementation
before (kept in ``tests/_sentences_quadratic.py``) on random and adversarial texts small enough for it.
Its cost on 50 KB adversarial texts is measured in ``benchmarks/bench_code_hostile_cost.py``, not timed here."""

import random

import _sentences_quadratic as before
import pytest

from hf_meds_cliff.cliff import split_code_units, split_sentences  # re-exported wherever the module lives

PIECES = [
    "$",
    "$$",
    "\\",
    "\\[",
    "\\]",
    "\\(",
    "\\)",
    "\\{",
    "\\}",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ".",
    "!",
    "?",
    "\n",
    "\n\n",
    " ",
    "  ",
    "\t",
    "a",
    "x",
    "1",
    "12",
    "ii",
    "iv",
    "e.g",
    "Fig",
    "```",
    "~~~",
    "````",
    '"',
    "*",
    "\u201d",
    "\\boxed{",
    "\\frac{1}{2}",
    "$5",
    "3.5",
    "a. ",
    "1. ",
    "    ",
    "python\n",
    "\r",
]


def random_text(rng, size):
    return "".join(rng.choice(PIECES) for _ in range(size))


@pytest.mark.parametrize("seed", range(24))
def test_same_spans_as_before_on_random_texts(seed):
    rng = random.Random(1000 + seed)
    for _ in range(300):
        text = random_text(rng, rng.randint(0, 60))
        assert split_sentences(text) == before.split_sentences(text), repr(text)
        assert split_code_units(text) == before.split_code_units(text), repr(text)


ADVERSARIAL = [
    "\\[" * 200,
    "\\(" * 100 + "\\)" + "\\(" * 100,
    "$x " * 200,
    "$x $" * 100,
    "$$a" * 100 + "$$",
    "a. " * 300,
    "ii. " * 200,
    "e.g. " * 200,
    "   1. x\n" * 50,
    "\n" * 20 + "1. a. b.",
    "      " + "a. " * 50,
    "{" * 200 + "}" * 200,
    "\\{" * 100 + "\\}" * 100,
    "{" * 100 + "\\}" + "}" * 50 + ". done. ",
    "\\boxed{" * 100 + "1}. Next. ",
    "```\n" + "a. " * 100 + "\n```\n" + "b. " * 100,
    "x" * 50 + ". " + " " * 50 + "1. y",
    "a.\n\n\n   ii. b. c.\n iv.x. v. ",
    "$x\n\n$ y. $z$ w. $ 5$. $a$5. ",
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_same_spans_as_before_on_adversarial_texts(text):
    assert split_sentences(text) == before.split_sentences(text)
    assert split_code_units(text) == before.split_code_units(text)
