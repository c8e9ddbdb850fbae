"""``extract_program`` without regular-expression backtracking: the same blocks as the regular
expression it replaced, on random and adversarial completions small enough for that expression to finish.
Its cost on 50 KB adversarial completions is measured in ``benchmarks/bench_code_hostile_cost.py``, not timed
here."""

import random
import re

import pytest

from hf_meds_cliff.code import extract_program

# The earlier extractor (quadratic, or worse, in a fence line that cannot open a block).
_OLD_FENCE = re.compile(r"```[ \t]*(?P<language>[A-Za-z0-9_+#.-]*)[^\n`]*\n(?P<code>.*?)```", re.DOTALL)


def old_extract_program(completion):
    program = None
    for match in _OLD_FENCE.finditer(completion):
        if match.group("language").lower() in {"", "python", "python3", "py", "py3"}:
            program = match.group("code")
    return program


PIECES = [
    "`",
    "```",
    "````",
    "\n",
    " ",
    "\t",
    "python",
    "Py",
    "py3",
    "cpp",
    "x",
    "+",
    "#",
    ".",
    "-",
    "é",
    "\r",
    "print(1)",
    "```python\n",
    "```\n",
    "``` py\n",
    "```python3 extra\n",
    "`\n",
    "\n```",
]


def random_completion(rng, size):
    return "".join(rng.choice(PIECES) for _ in range(size))


@pytest.mark.parametrize("seed", range(20))
def test_same_program_as_the_regular_expression_on_random_completions(seed):
    rng = random.Random(seed)
    for _ in range(400):
        completion = random_completion(rng, rng.randint(0, 40))
        assert extract_program(completion) == old_extract_program(completion), repr(completion)


ADVERSARIAL = [
    "```" + " " * 300,
    "```" + " " * 300 + "`",
    "```" + "\t " * 150 + "python" + " " * 100 + "\n",
    "```" + "a" * 300 + "`\n```",
    "```python\n" * 60,
    "```x\n" * 60,
    "`" * 301,
    "```" + " " * 150 + "\n" + " " * 150,
    ("```python\n" + "x" * 10) * 30,
    "```\n" * 101,
    "````python\nprint(1)\n````",
    "``` python \nprint(1)\n```",
    "```py` \nprint(1)\n```\n```\nprint(2)\n```",
    "text ```python\nprint(1)``` and ```cpp\nint x;\n``` end",
    "```python\nprint(1)\n```" + "```" + " " * 200,
    "```python\r\nprint(1)\r\n```",
    "```PYTHON\nprint(1)\n```",
    "```python3.11\nprint(1)\n```",
]


@pytest.mark.parametrize("completion", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_same_program_as_the_regular_expression_on_adversarial_completions(completion):
    assert extract_program(completion) == old_extract_program(completion)


def test_large_adversarial_completions_are_handled():
    """50 KB shapes that took the regular expression seconds: the answers are still right (the time is the
    benchmark's business)."""
    assert extract_program("```" + " " * 50_000) is None
    assert extract_program("```" + " " * 50_000 + "\nprint(1)\n```") == "print(1)\n"
    assert extract_program("```python\n" * 5_000) == ""  # each second fence closes the block before it
    body = "x = 1\n" * 8_000
    assert extract_program("```" + "\t" * 20_000 + "`\n```python\n" + body + "```") == body
