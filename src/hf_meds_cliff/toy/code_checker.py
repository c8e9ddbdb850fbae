"""Exact first-wrong-line checker for code-world programs, by a pure step-by-step evaluation.

Model output is never executed here: :func:`trace_program` parses the program with :mod:`ast` and evaluates its
top-level statements itself, one by one, over a closed vocabulary -- integer and string literals, names,
``+ - * // %``, unary ``-``/``+``, ``input()``, ``int(...)``, ``str.split()``/``strip()``, ``map(int, ...)``,
``list(...)``, ``print(...)``, assignments (tuple unpacking too), ``+=``/``-=``/``*=`` and ``pass``. Anything
else (imports, loops, functions, attribute access beyond ``split``/``strip``, ...) makes the program *undecidable*
from that statement on; the teacher then reports no location instead of guessing. Integers are capped at
:data:`MAX_ABS_VALUE` and programs at :data:`MAX_STATEMENTS` statements, so evaluation is bounded. Within the
vocabulary the evaluation follows Python's semantics (the same values, the same error kinds at the same statement);
``tests/test_code_world.py`` checks that its pass/fail verdicts equal the sandbox's (:mod:`hf_meds_cliff.code`) on
right and mutated programs, and the code world's warm-up found them equal on all 800 sampled test-split programs.

The first wrong line of a program for a problem (:func:`first_wrong_line`), over the problem's test inputs:

* a statement that raises (a misread input format, an undefined name, ...) or a syntax error is wrong at its line;
* the first assignment of an input name (``a``, ``b``) must hold that input on every test (``b, a = ...`` is a
  misread); every other integer assignment must hold, on every test, one of the chain's values ``v1..vn`` or an
  input (non-integer values such as ``line = input()`` are neutral);
* the first ``print`` must print exactly the answer ``vn`` on every test; any later ``print`` is wrong;
* a program that ends without printing is wrong at its last line (the one that should have gone on).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from .code_task import CodeProblem, parse_code_question

MAX_ABS_VALUE = 10**18
"""Largest integer magnitude the evaluation computes (beyond: undecidable, so ``x = x * x`` loops stay cheap)."""

MAX_STATEMENTS = 64
"""Most top-level statements evaluated (beyond: undecidable)."""


class UndecidableProgram(ValueError):
    """The checker cannot decide where the program goes wrong (a construct outside its vocabulary)."""

    def __init__(self, line: int, reason: str):
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


class _Unsupported(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _ProgramError(Exception):
    """A Python error the program would raise (its kind is the Python exception name)."""

    def __init__(self, kind: str, message: str = ""):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass
class StatementTrace:
    """One evaluated top-level statement: its first line (1-based), what it assigned and printed."""

    line: int
    assigned: list[tuple[str, Any]] = field(default_factory=list)
    printed: str | None = None


@dataclass
class ProgramTrace:
    """What evaluating a program on one stdin did.

    Attributes:
        statements: the statements that completed, in order.
        output: everything printed.
        error_line / error: the line and kind of the Python error that stopped it (``SyntaxError`` included).
        unsupported_line / unsupported: the line and reason where evaluation left the vocabulary.
    """

    statements: list[StatementTrace]
    output: str
    error_line: int | None = None
    error: str | None = None
    unsupported_line: int | None = None
    unsupported: str | None = None


def _parse_prefix(program: str) -> tuple[list[ast.stmt], int | None]:
    """The statements of ``program`` (up to a syntax error) and the syntax error's line (None if none)."""
    try:
        return ast.parse(program).body, None
    except SyntaxError as error:
        error_line = error.lineno or 1
    except ValueError:  # a null byte in the source
        error_line = 1
    lines = program.splitlines(keepends=True)
    for keep in range(min(error_line - 1, len(lines)), -1, -1):
        try:
            return ast.parse("".join(lines[:keep])).body, error_line
        except SyntaxError:
            continue
    return [], error_line


class _Evaluator:
    def __init__(self, stdin: str):
        self.stdin_lines = stdin.split("\n")
        if self.stdin_lines and self.stdin_lines[-1] == "":
            self.stdin_lines.pop()  # a final newline ends the last line, it does not start one
        self.stdin_position = 0
        self.env: dict[str, Any] = {}
        self.output: list[str] = []

    def statement(self, node: ast.stmt, trace: StatementTrace) -> None:
        if isinstance(node, ast.Assign):
            if len(node.targets) != 1:
                raise _Unsupported("chained assignment")
            value = self.expression(node.value)
            self.assign(node.targets[0], value, trace)
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                raise _Unsupported("augmented assignment to a non-name")
            current = self.name(node.target.id)
            value = self.binary(node.op, current, self.expression(node.value))
            self.assign(node.target, value, trace)
        elif isinstance(node, ast.Expr):
            self.expression(node.value, trace)
        elif isinstance(node, ast.Pass):
            return
        else:
            raise _Unsupported(f"{type(node).__name__} statement")

    def assign(self, target: ast.expr, value: Any, trace: StatementTrace) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            trace.assigned.append((target.id, value))
            return
        if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(t, ast.Name) for t in target.elts):
            if not isinstance(value, list):
                raise _ProgramError("TypeError", f"cannot unpack non-iterable {type(value).__name__} object")
            if len(value) != len(target.elts):
                raise _ProgramError(
                    "ValueError", f"expected {len(target.elts)} values to unpack, got {len(value)}"
                )
            for element, item in zip(target.elts, value):
                self.env[element.id] = item
                trace.assigned.append((element.id, item))
            return
        raise _Unsupported(f"assignment to {type(target).__name__}")

    def name(self, identifier: str) -> Any:
        if identifier not in self.env:
            raise _ProgramError("NameError", f"name {identifier!r} is not defined")
        return self.env[identifier]

    def expression(self, node: ast.expr, trace: StatementTrace | None = None) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) in (int, str):
            return self.check_int(node.value)
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.BinOp):
            return self.binary(node.op, self.expression(node.left), self.expression(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self.expression(node.operand)
            if type(operand) is not int:
                raise _ProgramError(
                    "TypeError", f"bad operand type for unary operator: {type(operand).__name__}"
                )
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.Call):
            return self.call(node, trace)
        raise _Unsupported(f"{type(node).__name__} expression")

    def check_int(self, value: Any) -> Any:
        if type(value) is int and abs(value) > MAX_ABS_VALUE:
            raise _Unsupported(f"an integer beyond {MAX_ABS_VALUE:.0e}")
        return value

    def binary(self, op: ast.operator, left: Any, right: Any) -> Any:
        if type(left) is not int or type(right) is not int:
            if isinstance(op, ast.Add) and type(left) is str and type(right) is str:
                return left + right
            raise _ProgramError(
                "TypeError", f"unsupported operand types: {type(left).__name__} and {type(right).__name__}"
            )
        if isinstance(op, ast.Add):
            return self.check_int(left + right)
        if isinstance(op, ast.Sub):
            return self.check_int(left - right)
        if isinstance(op, ast.Mult):
            return self.check_int(left * right)
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            if right == 0:
                raise _ProgramError("ZeroDivisionError", "integer division or modulo by zero")
            return left // right if isinstance(op, ast.FloorDiv) else left % right
        raise _Unsupported(f"operator {type(op).__name__}")

    def call(self, node: ast.Call, trace: StatementTrace | None) -> Any:
        if node.keywords:
            raise _Unsupported("keyword arguments")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise _Unsupported("starred arguments")
        function = node.func
        if isinstance(function, ast.Attribute):
            receiver = self.expression(function.value)
            if function.attr in ("split", "strip") and not node.args:
                if type(receiver) is not str:
                    raise _ProgramError(
                        "AttributeError", f"{type(receiver).__name__!r} object has no {function.attr!r}"
                    )
                return receiver.split() if function.attr == "split" else receiver.strip()
            raise _Unsupported(f"method {function.attr!r}")
        if not isinstance(function, ast.Name) or function.id in self.env:
            raise _Unsupported("a call of something other than a builtin")
        name = function.id
        if name == "map":
            if len(node.args) != 2 or not (isinstance(node.args[0], ast.Name) and node.args[0].id == "int"):
                raise _Unsupported("map other than map(int, ...)")
            return [self.to_int(item) for item in self.iterable(self.expression(node.args[1]))]
        arguments = [self.expression(a) for a in node.args]
        if name == "input" and len(arguments) <= 1:
            if self.stdin_position >= len(self.stdin_lines):
                raise _ProgramError("EOFError", "EOF when reading a line")
            self.stdin_position += 1
            return self.stdin_lines[self.stdin_position - 1]
        if name == "int" and len(arguments) == 1:
            return self.to_int(arguments[0])
        if name == "list" and len(arguments) == 1:
            return list(self.iterable(arguments[0]))
        if name == "print":
            text = " ".join(str(a) for a in arguments) + "\n"
            self.output.append(text)
            if trace is not None:
                trace.printed = (trace.printed or "") + text
            return None
        raise _Unsupported(f"call of {name}() with {len(arguments)} argument(s)")

    def iterable(self, value: Any) -> list:
        if isinstance(value, list):
            return value
        if type(value) is str:
            return list(value)
        raise _ProgramError("TypeError", f"{type(value).__name__!r} object is not iterable")

    def to_int(self, value: Any) -> int:
        if type(value) is int:
            return value
        if type(value) is str:
            text = value.strip()
            if len(text) > 40:
                raise _Unsupported("a very long integer literal")
            try:
                return self.check_int(int(text))
            except ValueError:
                raise _ProgramError("ValueError", f"invalid literal for int(): {value!r:.40}") from None
        raise _ProgramError(
            "TypeError", f"int() argument must be a string or a number, not {type(value).__name__!r}"
        )


def trace_program(program: str, stdin: str) -> ProgramTrace:
    """Evaluate ``program`` on ``stdin`` statement by statement, without executing it (see the module docstring).

    >>> trace = trace_program("a, b = map(int, input().split())\\nx = a - b\\nprint(x)\\n", "7 3\\n")
    >>> trace.output, [s.assigned for s in trace.statements][:2]
    ('4\\n', [[('a', 7), ('b', 3)], [('x', 4)]])
    >>> trace_program("a = int(input())\\nprint(a +)\\n", "1\\n").error_line
    2
    """
    statements, syntax_error_line = _parse_prefix(program)
    evaluator = _Evaluator(stdin)
    traces: list[StatementTrace] = []
    result = ProgramTrace(traces, "")
    for index, node in enumerate(statements):
        if index >= MAX_STATEMENTS:
            result.unsupported_line, result.unsupported = (
                node.lineno,
                f"more than {MAX_STATEMENTS} statements",
            )
            break
        trace = StatementTrace(node.lineno)
        try:
            evaluator.statement(node, trace)
        except _Unsupported as unsupported:
            result.unsupported_line, result.unsupported = node.lineno, unsupported.reason
            break
        except _ProgramError as error:
            result.error_line, result.error = node.lineno, error.kind
            break
        except RecursionError:  # an expression nested deeper than the evaluator recurses
            result.unsupported_line, result.unsupported = node.lineno, "an expression nested too deeply"
            break
        traces.append(trace)
    else:
        if syntax_error_line is not None:
            result.error_line, result.error = syntax_error_line, "SyntaxError"
    result.output = "".join(evaluator.output)
    return result


@dataclass(frozen=True)
class LineVerdict:
    """Where a program first goes wrong: ``line`` (1-based; 0 for an empty program) or None when it is right, and
    why."""

    line: int | None
    reason: str


def first_wrong_line(problem: str | CodeProblem, program: str) -> LineVerdict:
    """The first wrong line of ``program`` for ``problem`` (rules in the module docstring).

    Raises:
        UndecidableProgram: the program leaves the checker's vocabulary before any wrong line.

    >>> q = "Read an integer a from standard input and print (a + 5) * 3."
    >>> first_wrong_line(q, "a = int(input())\\nx = a + 5\\nx = x * 3\\nprint(x)\\n")
    LineVerdict(line=None, reason='right')
    >>> first_wrong_line(q, "a = int(input())\\nx = a + 5\\nx = x * 4\\nprint(x)\\n").line
    3
    """
    problem = problem if isinstance(problem, CodeProblem) else parse_code_question(problem)
    traces = [trace_program(program, stdin) for stdin, _ in problem.tests]
    inputs = [problem.input_values(stdin) for stdin, _ in problem.tests]
    input_vectors = {name: tuple(values[name] for values in inputs) for name in problem.inputs}
    chains = [problem.chain_values(values) for values in inputs]
    allowed = {tuple(chain[step] for chain in chains) for step in range(len(problem.operations))}
    allowed |= set(input_vectors.values())
    expected_output = [expected.split() for _, expected in problem.tests]
    assigned_inputs: set[str] = set()
    printed = False
    last_line = 0
    for index in range(max(len(t.statements) for t in traces) + 1):
        completed = [t.statements[index] if index < len(t.statements) else None for t in traces]
        if any(statement is None for statement in completed):
            stopped = [t for t, statement in zip(traces, completed) if statement is None]
            for trace in stopped:  # an error or the vocabulary's end at this statement, or the program's end
                if trace.error_line is not None:
                    return LineVerdict(trace.error_line, trace.error or "error")
            for trace in stopped:
                if trace.unsupported_line is not None:
                    raise UndecidableProgram(trace.unsupported_line, trace.unsupported or "unsupported")
            break
        line = completed[0].line
        last_line = line
        for position, (name, _) in enumerate(completed[0].assigned):
            vector = tuple(statement.assigned[position][1] for statement in completed)
            if not all(type(value) is int for value in vector):
                continue  # strings and lists (a raw input line, its split) are neutral
            if name in input_vectors and name not in assigned_inputs:
                assigned_inputs.add(name)
                if vector != input_vectors[name]:
                    return LineVerdict(line, f"input {name} misread")
            elif vector not in allowed:
                return LineVerdict(line, f"{name} is off the chain")
        if completed[0].printed is not None:
            if printed:
                return LineVerdict(line, "a second print")
            printed = True
            if [statement.printed.split() for statement in completed] != expected_output:
                return LineVerdict(line, "wrong output")
    if not printed:
        lines = [number for number, text in enumerate(program.splitlines(), 1) if text.strip()]
        if not lines:
            return LineVerdict(0, "empty program")
        return LineVerdict(max(last_line, lines[-1]), "no output")
    return LineVerdict(None, "right")


def locate_program(completion: str) -> tuple[int, str] | None:
    """``(offset, program)`` of the program the code reward runs (:func:`hf_meds_cliff.code.extract_program`: the
    last closed ``python`` or untagged fenced block), or None when there is none.

    >>> locate_program("Idea.\\n```python\\nprint(1)\\n```")
    (16, 'print(1)\\n')
    >>> locate_program("```python\\nprint(1)\\n") is None  # never closed: no program
    True
    """
    from ..code import extract_program
    from ..sentences import _code_blocks

    program = extract_program(completion)
    if program is None:
        return None
    for _, body_start, body_end, _ in reversed(_code_blocks(completion)):
        if completion[body_start:body_end] == program:
            return body_start, program
    return completion.rfind(program), program  # the two fence readers disagree on an odd fence: best effort


def first_mistake_unit(
    problem: str | CodeProblem, completion: str, unit_spans: list[tuple[int, int]]
) -> int | None:
    """Unit index of the first mistake of a code-world completion, or None when it is right.

    ``unit_spans`` are the completion's units (:func:`hf_meds_cliff.cliff.split_code_units`: prose sentences, then
    one unit per non-blank program line). The program is the one the code reward runs (:func:`locate_program`); its
    first wrong line (:func:`first_wrong_line`) is mapped to the unit holding that line's first character. A
    completion without a program (no closed ``python`` block) is wrong at its last unit (the one that should have
    gone on).

    Raises:
        UndecidableProgram: see :func:`first_wrong_line`.
        ValueError: ``unit_spans`` is empty.

    >>> from hf_meds_cliff.cliff import split_code_units
    >>> q = "Read an integer a from standard input and print a * 2 - 1."
    >>> text = "Read a, then apply 2 operations.\\n```python\\na = int(input())\\nx = a * 2\\nx = x - 2\\nprint(x)\\n```"
    >>> first_mistake_unit(q, text, split_code_units(text))
    3
    """
    if not unit_spans:
        raise ValueError("The completion has no units; an empty rollout has no first mistake to locate.")
    problem = problem if isinstance(problem, CodeProblem) else parse_code_question(problem)
    located = locate_program(completion)
    if located is None:
        return len(unit_spans) - 1
    body_start, program = located
    verdict = first_wrong_line(problem, program)
    if verdict.line is None:
        return None
    if verdict.line == 0:  # an empty program: the mistake is where it should have started
        return _unit_at(unit_spans, max(body_start - 1, 0))
    line_starts = [0]
    for text in program.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(text))
    line_index = min(verdict.line, len(line_starts) - 1) - 1
    line_text = program[line_starts[line_index] :].split("\n", 1)[0]
    return _unit_at(
        unit_spans, body_start + line_starts[line_index] + (len(line_text) - len(line_text.lstrip()))
    )


def _unit_at(unit_spans: list[tuple[int, int]], offset: int) -> int:
    for unit, (start, end) in enumerate(unit_spans):
        if start <= offset < end:
            return unit
    return len(unit_spans) - 1
