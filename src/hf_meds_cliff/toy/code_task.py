"""The code world's task: the toy arithmetic chains rendered as short stdin programs.

A problem states a left-to-right chain over symbolic inputs, e.g.
"Read integers a and b from one line of standard input and print (a + 5) * 3 - b."; its worked completion
is one sentence of prose and a fenced program with one assignment per step::

    Read a and b, then apply 3 operations.
    ```python
    a, b = map(int, input().split())
    x = a + 5
    x = x * 3
    x = x - b
    print(x)
    ```

The first operand is always the input ``a``; with two inputs, ``b`` replaces the operand of one ``+``/``-`` step.
Each problem carries ``num_tests`` stdin tests whose inputs are drawn from a seeded hash of the question, so the
tests are a function of the question text (the rule teacher rebuilds them from the prompt alone) and a program
that prints a constant fails them. Splits are the toy world's: a seeded hash of the question text
(:func:`~hf_meds_cliff.toy.question_split`), the test split a fixed list, the train split an endless stream that
never yields a test question.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .task import (
    ToyTaskConfig,
    _chain_from_tree,
    _ExpressionParser,
    _split_stream,
    apply_operation,
    format_chain,
    generate_problem,
)
from .task import question_split as _question_split

INPUT_NAMES = ("a", "b")
"""Names of the symbolic inputs, in reading order."""

RESULT_VARIABLE = "x"
"""The variable the reference program assigns at every step."""


@dataclass(frozen=True)
class CodeWorldConfig:
    """Knobs of the code world's task (on top of the toy task's difficulty)."""

    task: ToyTaskConfig = field(
        default_factory=ToyTaskConfig,
        metadata={
            "help": "Chain difficulty (steps, operand and multiplier ranges); inputs use the operand range."
        },
    )
    two_input_fraction: float = field(
        default=0.5,
        metadata={"help": "Share of problems with a second input b (when the chain has a + or - step)."},
    )
    num_tests: int = field(
        default=3,
        metadata={"help": "Stdin tests per problem (distinct inputs), so a hard-coded answer fails."},
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.two_input_fraction <= 1.0:
            raise ValueError(f"two_input_fraction must be in [0, 1], got {self.two_input_fraction}.")
        if self.num_tests < 1:
            raise ValueError(
                f"num_tests must be >= 1, got {self.num_tests}; use 3 or more so constants fail."
            )
        width = self.task.max_operand - self.task.min_operand + 1
        if width < 2 and self.num_tests > 1:
            raise ValueError(
                f"The operand range [{self.task.min_operand}, {self.task.max_operand}] has fewer than 2 values: "
                f"cannot draw {self.num_tests} distinct test inputs; widen it."
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task.to_dict(),
            "two_input_fraction": self.two_input_fraction,
            "num_tests": self.num_tests,
        }


@dataclass(frozen=True)
class CodeProblem:
    """One code-world problem.

    Attributes:
        inputs: names of the inputs in reading order (``("a",)`` or ``("a", "b")``).
        operations: ``((op, operand), ...)``; an operand is an integer or an input name.
        tests: ``((stdin, expected stdout), ...)``.
    """

    inputs: tuple[str, ...]
    operations: tuple[tuple[str, int | str], ...]
    tests: tuple[tuple[str, str], ...]

    @property
    def question(self) -> str:
        return code_question(self.inputs, self.operations)

    @property
    def program(self) -> str:
        """The reference program: read the inputs, one assignment of ``x`` per step, print ``x``."""
        lines = [_read_line(self.inputs)]
        previous = self.inputs[0]
        for op, operand in self.operations:
            lines.append(f"{RESULT_VARIABLE} = {previous} {op} {operand}")
            previous = RESULT_VARIABLE
        lines.append(f"print({RESULT_VARIABLE})")
        return "\n".join(lines) + "\n"

    @property
    def solution(self) -> str:
        """The worked completion: one sentence of prose, then the program in a fenced ``python`` block."""
        names = " and ".join(self.inputs)
        return f"Read {names}, then apply {len(self.operations)} operations.\n```python\n{self.program}```"

    def input_values(self, stdin: str) -> dict[str, int]:
        """The inputs a test's stdin holds, by name."""
        return dict(zip(self.inputs, (int(token) for token in stdin.split())))

    def chain_values(self, values: dict[str, int]) -> list[int]:
        """The values after each step, ``[v1, ..., vn]``, for the given inputs (``vn`` is the answer)."""
        value = values[self.inputs[0]]
        results = []
        for op, operand in self.operations:
            value = apply_operation(value, op, values[operand] if isinstance(operand, str) else operand)
            results.append(value)
        return results

    def tests_column(self) -> str:
        """The ``tests`` cell of the dataset: JSON ``{"inputs": [...], "outputs": [...]}`` (stdin tests)."""
        return json.dumps(
            {"inputs": [stdin for stdin, _ in self.tests], "outputs": [out for _, out in self.tests]}
        )


def _read_line(inputs: tuple[str, ...]) -> str:
    if len(inputs) == 1:
        return f"{inputs[0]} = int(input())"
    return f"{', '.join(inputs)} = map(int, input().split())"


def code_question(inputs: tuple[str, ...], operations: tuple[tuple[str, int | str], ...]) -> str:
    """The prompt text of a problem.

    >>> code_question(("a", "b"), (("+", 5), ("*", 3), ("-", "b")))
    'Read integers a and b from one line of standard input and print (a + 5) * 3 - b.'
    >>> code_question(("a",), (("*", 2), ("+", 7)))
    'Read an integer a from standard input and print a * 2 + 7.'
    """
    expression = format_chain(inputs[0], operations)
    if len(inputs) == 1:
        return f"Read an integer {inputs[0]} from standard input and print {expression}."
    return f"Read integers {' and '.join(inputs)} from one line of standard input and print {expression}."


def make_tests(
    inputs: tuple[str, ...], operations: tuple[tuple[str, int | str], ...], config: CodeWorldConfig
) -> tuple[tuple[str, str], ...]:
    """``config.num_tests`` tests with distinct inputs drawn from a seeded hash of the question text; with two or
    more tests, not every expected output is the same, so a program printing a constant fails."""
    question = code_question(inputs, operations)
    rng = random.Random(hashlib.blake2b(question.encode(), digest_size=8).hexdigest())
    low, high = config.task.min_operand, config.task.max_operand
    probe = CodeProblem(inputs, operations, ())
    tests: list[tuple[str, str]] = []
    for _ in range(10_000):
        values = tuple(rng.randint(low, high) for _ in inputs)
        stdin = " ".join(map(str, values)) + "\n"
        expected = f"{probe.chain_values(dict(zip(inputs, values)))[-1]}\n"
        last = len(tests) == config.num_tests - 1
        if any(stdin == seen for seen, _ in tests) or (
            last and tests and all(out == expected for _, out in tests)
        ):
            continue  # a repeated input, or a last test that would leave every output equal
        tests.append((stdin, expected))
        if len(tests) == config.num_tests:
            return tuple(tests)
    raise ValueError(
        f"Could not draw {config.num_tests} distinct tests for {question!r} from operands in [{low}, {high}]; widen "
        "the operand range or ask for fewer tests."
    )


def generate_code_problem(rng: random.Random, config: CodeWorldConfig | None = None) -> CodeProblem:
    """Draw one problem: a toy chain whose first operand becomes ``a`` and, with two inputs, one ``+``/``-``
    operand becomes ``b``.

    >>> p = generate_code_problem(random.Random(0))
    >>> p == parse_code_question(p.question)
    True
    """
    config = config or CodeWorldConfig()
    chain = generate_problem(rng, config.task)
    operations = list(chain.operations)
    inputs: tuple[str, ...] = INPUT_NAMES[:1]
    additive = [index for index, (op, _) in enumerate(operations) if op in "+-"]
    if additive and rng.random() < config.two_input_fraction:
        index = additive[rng.randrange(len(additive))]
        operations[index] = (operations[index][0], INPUT_NAMES[1])
        inputs = INPUT_NAMES
    operations_tuple = tuple(operations)
    return CodeProblem(inputs, operations_tuple, make_tests(inputs, operations_tuple, config))


_CODE_QUESTION = re.compile(
    r"Read (?:an integer (?P<one>[A-Za-z_]\w*)|integers (?P<first>[A-Za-z_]\w*) and (?P<second>[A-Za-z_]\w*)) "
    r"from (?:one line of )?standard input and print (?P<expr>[-+*()\w\s]+?)\.(?:\s|$)"
)


def parse_code_question(question: str, config: CodeWorldConfig | None = None) -> CodeProblem:
    """Rebuild a problem (chain and tests) from its prompt text; other text may follow the question.

    >>> parse_code_question("Read an integer a from standard input and print (a - 3) * 2.").tests[0][1].strip() != ""
    True
    >>> parse_code_question("Compute 1 + 2.")
    Traceback (most recent call last):
    ...
    ValueError: ...not a code-world question...
    """
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}: {question!r:.80}")
    match = _CODE_QUESTION.search(question)
    if match is None:
        raise ValueError(
            f"{question!r:.120} is not a code-world question; expected text like 'Read integers a and b from one "
            "line of standard input and print (a + 5) * 3 - b.'"
        )
    inputs = (match.group("one"),) if match.group("one") else (match.group("first"), match.group("second"))
    if len(set(inputs)) != len(inputs):
        raise ValueError(f"Question {question!r:.120} names the input {inputs[0]!r} twice.")
    tree = _ExpressionParser(match.group("expr").strip(), question).parse()
    first, operations = _chain_from_tree(tree, question)
    if first != inputs[0] or not operations:
        raise ValueError(
            f"Question {question!r:.120}: the expression must start with the first input {inputs[0]!r} and apply "
            "at least one operation, e.g. '(a + 5) * 3'."
        )
    for op, operand in operations:
        if isinstance(operand, str) and (operand not in inputs or operand == inputs[0]):
            raise ValueError(
                f"Question {question!r:.120}: operand {operand!r} of a {op!r} step is not one of the later inputs "
                f"{inputs[1:]}."
            )
    operations_tuple = tuple(operations)
    return CodeProblem(
        inputs, operations_tuple, make_tests(inputs, operations_tuple, config or CodeWorldConfig())
    )


def iter_code_problems(
    split: str,
    seed: int = 0,
    config: CodeWorldConfig | None = None,
    *,
    unique: bool | None = None,
    exclude: frozenset[str] | set[str] = frozenset(),
    stream_name: str = "",
) -> Iterator[CodeProblem]:
    """Endless seeded stream of problems of one split (as :func:`hf_meds_cliff.toy.iter_problems`)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    config = config or CodeWorldConfig()
    yield from _split_stream(
        random.Random(f"hf_meds_cliff.code_world:{split}:{seed}:{stream_name}"),
        lambda rng: generate_code_problem(rng, config),
        lambda question: _question_split(question, seed, config.task.test_fraction) == split,
        unique=(split == "test") if unique is None else unique,
        exclude=exclude,
        exhausted=f"Could not draw a new {split} code problem in 10000 tries; widen the task or ask for fewer rows.",
    )


def code_problem_id(question: str) -> str:
    """Stable identifier of a code-world question."""
    return "code-" + hashlib.blake2b(question.encode("utf-8"), digest_size=6).hexdigest()


def code_rows(problems: list[CodeProblem]) -> dict[str, list]:
    """Column dict (``prompt``, ``tests``, ``problem_id``, ``solution``) for a list of problems."""
    return {
        "prompt": [[{"role": "user", "content": p.question}] for p in problems],
        "tests": [p.tests_column() for p in problems],
        "problem_id": [code_problem_id(p.question) for p in problems],
        "solution": [p.solution for p in problems],
    }


def make_code_dataset(
    split: str = "train", num_rows: int = 1000, seed: int = 0, config: CodeWorldConfig | None = None
):
    """A ``datasets.Dataset`` of code-world problems in the layout of real code datasets.

    Columns: ``prompt`` (chat list), ``tests`` (JSON string of stdin tests, read by
    :class:`hf_meds_cliff.code.CodeTestsReward`), ``problem_id`` and ``solution`` (the worked completion).

    >>> make_code_dataset("test", 2).column_names
    ['prompt', 'tests', 'problem_id', 'solution']
    """
    if not isinstance(num_rows, int) or isinstance(num_rows, bool) or num_rows < 0:
        raise ValueError(f"num_rows must be a non-negative int, got {num_rows!r}.")
    import datasets

    stream = iter_code_problems(split, seed, config)
    return datasets.Dataset.from_dict(code_rows([next(stream) for _ in range(num_rows)]))
