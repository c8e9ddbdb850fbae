"""Multi-step integer arithmetic: the offline toy task.

A problem is a left-to-right chain ``a0 op1 b1 op2 b2 ...`` written with brackets only where the usual
precedence would evaluate it differently, e.g. "Compute (7 + 5) * 3 - 4.". Its worked solution has one
operation per sentence and ends with the answer in ``\\boxed{}``:
"7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}."

Train/test split: every question belongs to exactly one split, decided by a seeded hash of its text
(:func:`question_split`). The test split is a fixed list drawn with the seed; the train split is an endless
seeded stream that skips every test-bucket question, so no test question is ever trained on, whatever the
number of test rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

OPERATORS = ("+", "-", "*")
ANSWER_PREFIX = "The answer is "

_PRECEDENCE = {"+": 1, "-": 1, "*": 2}


@dataclass(frozen=True)
class ToyTaskConfig:
    """Difficulty knobs of the toy task.

    Every step picks an operator uniformly from ``operators``; ``+``/``-`` take an operand from
    ``[min_operand, max_operand]``, ``*`` a multiplier from ``[min_multiplier, max_multiplier]``. The first
    operand is drawn from ``[min_operand, max_operand]``. Intermediate results may be negative.
    """

    min_steps: int = field(default=2, metadata={"help": "Fewest operations per problem."})
    max_steps: int = field(default=3, metadata={"help": "Most operations per problem (uniform in between)."})
    min_operand: int = field(default=1, metadata={"help": "Smallest first operand and +/- operand."})
    max_operand: int = field(default=20, metadata={"help": "Largest first operand and +/- operand."})
    min_multiplier: int = field(default=2, metadata={"help": "Smallest multiplier of a '*' step."})
    max_multiplier: int = field(default=5, metadata={"help": "Largest multiplier of a '*' step."})
    operators: tuple[str, ...] = field(
        default=OPERATORS, metadata={"help": "Operators to draw from, a subset of ('+', '-', '*')."}
    )
    test_fraction: float = field(
        default=0.1,
        metadata={"help": "Share of the question space reserved for the test split (by a seeded hash)."},
    )

    def __post_init__(self) -> None:
        if not 1 <= self.min_steps <= self.max_steps:
            raise ValueError(
                f"Need 1 <= min_steps <= max_steps, got min_steps={self.min_steps}, max_steps={self.max_steps}."
            )
        if not 0 <= self.min_operand <= self.max_operand:
            raise ValueError(
                f"Need 0 <= min_operand <= max_operand, got {self.min_operand} and {self.max_operand}; "
                "operands are non-negative (results may still go negative)."
            )
        if not 0 <= self.min_multiplier <= self.max_multiplier:
            raise ValueError(
                f"Need 0 <= min_multiplier <= max_multiplier, got {self.min_multiplier} and {self.max_multiplier}."
            )
        operators = tuple(self.operators)
        if not operators or any(op not in OPERATORS for op in operators):
            raise ValueError(f"operators must be a non-empty subset of {OPERATORS}, got {self.operators!r}.")
        object.__setattr__(self, "operators", operators)
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}.")

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (used in cache keys and metrics files)."""
        values = dataclasses.asdict(self)
        values["operators"] = list(self.operators)
        return values


@dataclass(frozen=True)
class ToyStep:
    """One operation of the chain: ``left op right = result``."""

    left: int
    op: str
    right: int
    result: int

    @property
    def sentence(self) -> str:
        return f"{self.left} {self.op} {self.right} = {self.result}."


@dataclass(frozen=True)
class ToyProblem:
    """A toy problem: its question, worked solution, integer answer and the chain it encodes."""

    question: str
    solution: str
    answer: int
    first_operand: int
    operations: tuple[tuple[str, int], ...]

    @property
    def steps(self) -> tuple[ToyStep, ...]:
        return _steps(self.first_operand, self.operations)

    @classmethod
    def from_operations(cls, first_operand: int, operations: tuple[tuple[str, int], ...]) -> ToyProblem:
        """Build a problem from ``a0`` and ``((op1, b1), (op2, b2), ...)``.

        >>> p = ToyProblem.from_operations(7, (("+", 5), ("*", 3), ("-", 4)))
        >>> p.question
        'Compute (7 + 5) * 3 - 4.'
        >>> p.solution
        '7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\\\boxed{32}.'
        >>> p.answer
        32
        """
        operations = tuple((str(op), int(right)) for op, right in operations)
        if not operations:
            raise ValueError("A toy problem needs at least one operation.")
        for op, _ in operations:
            if op not in OPERATORS:
                raise ValueError(f"Unknown operator {op!r}; use one of {OPERATORS}.")
        steps = _steps(int(first_operand), operations)
        answer = steps[-1].result
        solution = " ".join([s.sentence for s in steps] + [answer_sentence(answer)])
        question = f"Compute {format_chain(int(first_operand), operations)}."
        return cls(question, solution, answer, int(first_operand), operations)


def answer_sentence(answer: int) -> str:
    """The final sentence of a solution: ``The answer is \\boxed{answer}.``"""
    return f"{ANSWER_PREFIX}\\boxed{{{answer}}}."


def apply_operation(left: int, op: str, right: int) -> int:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    raise ValueError(f"Unknown operator {op!r}; use one of {OPERATORS}.")


def _steps(first_operand: int, operations: tuple[tuple[str, int], ...]) -> tuple[ToyStep, ...]:
    steps = []
    value = first_operand
    for op, right in operations:
        result = apply_operation(value, op, right)
        steps.append(ToyStep(value, op, right, result))
        value = result
    return tuple(steps)


def format_chain(first_operand: int | str, operations: tuple[tuple[str, int | str], ...]) -> str:
    """Write a left-to-right chain with brackets only where precedence would differ.

    Operands are integers or variable names (the code world's symbolic inputs, e.g. ``a``).

    >>> format_chain(7, (("*", 3), ("+", 5)))
    '7 * 3 + 5'
    >>> format_chain(7, (("+", 5), ("-", 2), ("*", 3), ("*", 2)))
    '(7 + 5 - 2) * 3 * 2'
    >>> format_chain(7, (("-", 5), ("*", 3), ("+", 1), ("*", 2)))
    '((7 - 5) * 3 + 1) * 2'
    >>> format_chain("a", (("+", "b"), ("*", 3)))
    '(a + b) * 3'
    """
    text = _format_int(first_operand)
    top_precedence = 3  # a bare number binds tighter than any operator
    for op, right in operations:
        if _PRECEDENCE[op] > top_precedence:
            text = f"({text})"
        text = f"{text} {op} {_format_int(right)}"
        top_precedence = _PRECEDENCE[op]
    return text


def _format_int(value: int | str) -> str:
    return str(value) if isinstance(value, str) or value >= 0 else f"({value})"


def generate_problem(rng: random.Random | Any, config: ToyTaskConfig | None = None) -> ToyProblem:
    """Draw one problem. ``rng`` is a ``random.Random`` or a ``numpy.random.Generator``.

    >>> p = generate_problem(random.Random(0))
    >>> p == parse_question(p.question)
    True
    """
    config = config or ToyTaskConfig()
    randint = _randint_function(rng)
    num_steps = randint(config.min_steps, config.max_steps)
    first_operand = randint(config.min_operand, config.max_operand)
    operations = []
    for _ in range(num_steps):
        op = config.operators[randint(0, len(config.operators) - 1)]
        if op == "*":
            right = randint(config.min_multiplier, config.max_multiplier)
        else:
            right = randint(config.min_operand, config.max_operand)
        operations.append((op, right))
    return ToyProblem.from_operations(first_operand, tuple(operations))


def _randint_function(rng: Any):
    """Inclusive ``randint(low, high)`` for either kind of generator."""
    if isinstance(rng, random.Random):
        return rng.randint
    if type(rng).__module__.startswith("numpy.random") and hasattr(rng, "integers"):  # numpy Generator
        return lambda low, high: int(rng.integers(low, high + 1))
    raise TypeError(
        f"rng must be a random.Random or numpy.random.Generator, got {type(rng).__name__}; "
        "e.g. generate_problem(random.Random(0))."
    )


# ---------------------------------------------------------------------------------------------------
# Parsing a question back into its chain (the rule-based teacher only sees the prompt text).

_QUESTION_PATTERN = re.compile(r"Compute\s+(?P<expr>[-+*()\d\s]+)")
_TOKEN_PATTERN = re.compile(r"\s*(\d+|[A-Za-z_]\w*|[-+*()])")


def parse_question(question: str) -> ToyProblem:
    """Recover the chain, solution and answer from a question such as "Compute (7 + 5) * 3 - 4.".

    The expression may be followed by other text (e.g. an instruction) after its full stop. It must be a
    left-to-right chain: every right operand is an integer literal (standard precedence applies, so
    "2 + 3 * 4" is *not* a chain and is rejected).

    >>> parse_question("Compute (7 + 5) * 3 - 4.").answer
    32
    >>> parse_question("Compute 2 + 3 * 4.")
    Traceback (most recent call last):
    ...
    ValueError: ...not a left-to-right chain...
    """
    if not isinstance(question, str):
        raise TypeError(f"question must be a str, got {type(question).__name__}: {question!r:.80}")
    match = _QUESTION_PATTERN.search(question)
    if match is None:
        raise ValueError(
            f"Cannot parse a toy question from {question!r:.120}; expected text like 'Compute (7 + 5) * 3 - 4.'"
        )
    expression = match.group("expr").strip()
    tree = _ExpressionParser(expression, question).parse()
    first_operand, operations = _chain_from_tree(tree, question)
    if not operations:
        raise ValueError(f"Question {question!r:.120} has no operation; expected e.g. 'Compute 3 + 4.'")
    return ToyProblem.from_operations(first_operand, tuple(operations))


class _ExpressionParser:
    """Recursive-descent parser for + - * with brackets and unary minus on literals."""

    def __init__(self, expression: str, question: str):
        self.question = question
        self.tokens: list[str] = []
        position = 0
        while position < len(expression):
            token_match = _TOKEN_PATTERN.match(expression, position)
            if token_match is None:
                if expression[position:].strip() == "":
                    break
                self._fail(f"unexpected character {expression[position]!r}")
            self.tokens.append(token_match.group(1))
            position = token_match.end()
        self.index = 0

    def _fail(self, reason: str):
        raise ValueError(
            f"Cannot parse the expression of {self.question!r:.120}: {reason}. "
            "Expected integers joined by +, -, * with optional brackets."
        )

    def _peek(self) -> str | None:
        return self.tokens[self.index] if self.index < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            self._fail("it ends too early")
        self.index += 1
        return token

    def parse(self):
        tree = self._sum()
        if self._peek() is not None:
            self._fail(f"unexpected {self._peek()!r}")
        return tree

    def _sum(self):
        tree = self._product()
        while self._peek() in ("+", "-"):
            op = self._take()
            tree = (op, tree, self._product())
        return tree

    def _product(self):
        tree = self._atom()
        while self._peek() == "*":
            op = self._take()
            tree = (op, tree, self._atom())
        return tree

    def _atom(self):
        token = self._take()
        if token == "(":
            tree = self._sum()
            if self._take() != ")":
                self._fail("unbalanced brackets")
            return tree
        if token == "-":
            atom = self._atom()
            if isinstance(atom, int):
                return -atom
            self._fail("unary minus is only supported on a number")
        if token.isdigit():
            return int(token)
        if (
            token.isidentifier()
        ):  # a symbolic input of the code world (toy questions never reach here with one)
            return token
        self._fail(f"unexpected {token!r}")


def _chain_from_tree(tree, question: str) -> tuple[int | str, list[tuple[str, int | str]]]:
    """The left-to-right chain ``(first operand, [(op, operand), ...])`` of a parse tree; operands are integer
    literals or (code world) variable names."""
    operations: list[tuple[str, int | str]] = []
    while isinstance(tree, tuple):
        op, left, right = tree
        if isinstance(right, tuple):
            raise ValueError(  # noqa: TRY004 - a malformed question (a str), not a wrong argument type
                f"Question {question!r:.120} is not a left-to-right chain (a right operand is itself an "
                "expression); toy questions apply one integer per step, e.g. 'Compute (2 + 3) * 4.'"
            )
        operations.append((op, right))
        tree = left
    return tree, operations[::-1]


# ---------------------------------------------------------------------------------------------------
# Splits and datasets.

Split = Literal["train", "test"]


def question_split(question: str, seed: int = 0, test_fraction: float = 0.1) -> Split:
    """The split a question belongs to: a seeded hash of its text, so the two splits never overlap.

    >>> question_split("Compute 1 + 2.") in ("train", "test")
    True
    """
    digest = hashlib.blake2b(f"{seed}\x00{question}".encode(), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") / 2**64
    return "test" if bucket < test_fraction else "train"


def problem_id(question: str) -> str:
    """Stable identifier of a question (the same text always gets the same id).

    >>> problem_id("Compute 1 + 2.") == problem_id("Compute 1 + 2.")
    True
    """
    return "toy-" + hashlib.blake2b(question.encode("utf-8"), digest_size=6).hexdigest()


def iter_problems(
    split: Split,
    seed: int = 0,
    config: ToyTaskConfig | None = None,
    *,
    unique: bool | None = None,
    exclude: frozenset[str] | set[str] = frozenset(),
    stream_name: str = "",
) -> Iterator[ToyProblem]:
    """Endless seeded stream of problems of one split.

    Args:
        split: "train" or "test"; the stream only yields questions of that split (see
            :func:`question_split`).
        seed: the seed of both the partition and the stream.
        config: task difficulty; the default :class:`ToyTaskConfig` when None.
        unique: skip questions already yielded (default: True for "test", False for "train").
        exclude: questions never to yield (e.g. a validation set).
        stream_name: names an independent stream of the same split (e.g. a validation draw); the split
            partition does not depend on it.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}.")
    config = config or ToyTaskConfig()
    yield from _split_stream(
        random.Random(f"hf_meds_cliff.toy:{split}:{seed}:{stream_name}"),
        lambda rng: generate_problem(rng, config),
        lambda question: question_split(question, seed, config.test_fraction) == split,
        unique=(split == "test") if unique is None else unique,
        exclude=exclude,
        exhausted=f"Could not draw a new {split} problem in 10000 tries: the question space of {config} is "
        "too small for the rows requested; widen the operand ranges or steps, or ask for fewer rows.",
    )


def _split_stream(
    rng: random.Random,
    draw: Callable[[random.Random], Any],
    in_split: Callable[[str], bool],
    *,
    unique: bool,
    exclude: frozenset[str] | set[str],
    exhausted: str,
) -> Iterator[Any]:
    """The problems ``draw(rng)`` whose ``question`` is ``in_split``, not in ``exclude`` and (``unique``) not yielded
    before; ``ValueError(exhausted)`` after 10,000 misses in a row (the toy and code worlds' streams)."""
    seen: set[str] = set()
    misses = 0
    while True:
        problem = draw(rng)
        question = problem.question
        if not in_split(question) or question in exclude or (unique and question in seen):
            misses += 1
            if misses > 10_000:
                raise ValueError(exhausted)
            continue
        misses = 0
        if unique:
            seen.add(question)
        yield problem


def toy_rows(problems: list[ToyProblem]) -> dict[str, list]:
    """Column dict (``prompt``, ``answer``, ``problem_id``, ``solution``) for a list of problems."""
    return {
        "prompt": [[{"role": "user", "content": p.question}] for p in problems],
        "answer": [str(p.answer) for p in problems],
        "problem_id": [problem_id(p.question) for p in problems],
        "solution": [p.solution for p in problems],
    }


def make_toy_dataset(
    split: Split = "train", num_rows: int = 1000, seed: int = 0, config: ToyTaskConfig | None = None
):
    """A ``datasets.Dataset`` of toy problems in the layout of the real math datasets.

    Columns: ``prompt`` (chat list ``[{"role": "user", "content": question}]``), ``answer`` (str),
    ``problem_id`` (str, stable hash of the question) and ``solution`` (the worked solution).
    The test split has distinct questions; the train split may repeat one (it is a seeded random draw) but
    never contains a question of the test split of the same seed.

    >>> ds = make_toy_dataset("test", 3)
    >>> ds.column_names
    ['prompt', 'answer', 'problem_id', 'solution']
    """
    if not isinstance(num_rows, int) or isinstance(num_rows, bool) or num_rows < 0:
        raise ValueError(f"num_rows must be a non-negative int, got {num_rows!r}.")
    import datasets  # deferred: importing datasets costs ~1 s

    stream = iter_problems(split, seed, config)
    problems = [next(stream) for _ in range(num_rows)]
    return datasets.Dataset.from_dict(toy_rows(problems))
