"""Test formats of code datasets, parsed into one :class:`CodeTests` shape.

Accepted in a ``tests`` column, as objects or JSON strings:

- LiveCodeBench / DeepCoder ``lcbv5``: a list of ``{"input", "output", "testtype": "stdin"|"functional"}``
  (functional inputs are one JSON value per line; the function name comes from ``fn_name``, the row's
  ``metadata["func_name"]`` or the test's own ``metadata``).
- PrimeIntellect (DeepCoder ``primeintellect``): a list of ``{"type": "stdin_stdout"|"function_call",
  "input", "output", "fn_name"?}``.
- TACO / APPS: ``{"inputs": [...], "outputs": [...], "fn_name"?}`` (with ``fn_name``: each input is the
  list of arguments).
- CodeContests: ``{"public_tests", "private_tests", "generated_tests"}``, each ``{"input": [...],
  "output": [...]}``; all three are used, in that order.
- HumanEval: ``{"test", "entry_point"}`` (one case: the ``check`` function called on the entry point).
- MBPP: ``{"test_list", "test_setup_code"?}`` (one case per assert statement).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

TestKind = Literal["stdin", "functional", "assert"]
TEST_KINDS: tuple[str, ...] = ("stdin", "functional", "assert")


@dataclasses.dataclass
class TestCase:
    """One test: ``input`` is stdin text (``stdin``), the list of arguments (``functional``) or the
    assert code (``assert``); ``output`` is the expected stdout text, the expected return value, or
    ``None`` for assert tests (the asserts themselves are the expectation)."""

    __test__ = False  # not a pytest class

    input: Any
    output: Any


@dataclasses.dataclass
class CodeTests:
    """The tests of one problem, whatever format they came in.

    ``kind`` decides how a case runs: ``stdin`` feeds ``input`` to the program's standard input and
    compares its standard output; ``functional`` calls ``fn_name`` (a top-level function, or a method
    of a ``Solution`` class as in LeetCode-style problems) with the arguments; ``assert`` runs the
    program, then ``setup_code``, then the case's code, which must run to its end.
    ``entry_point`` is HumanEval's function name (its ``check(candidate)`` is called on it).
    ``semantics`` says whose grader functional results follow (see
    :func:`~hf_meds_cliff.code.comparison.functional_result_matches`): ``"livecodebench"`` (LiveCodeBench and
    DeepCoder's ``testtype`` lists) or ``"taco"`` (TACO/APPS ``inputs``/``outputs``, PrimeIntellect's
    ``function_call``).
    """

    __test__ = False

    kind: TestKind
    cases: list[TestCase]
    fn_name: str | None = None
    setup_code: str | None = None
    entry_point: str | None = None
    semantics: Literal["livecodebench", "taco"] = "livecodebench"

    def __post_init__(self):
        if self.kind not in TEST_KINDS:
            raise ValueError(f"CodeTests kind={self.kind!r} is not one of {TEST_KINDS}.")
        if self.semantics not in ("livecodebench", "taco"):
            raise ValueError(
                f"CodeTests semantics={self.semantics!r} must be 'livecodebench' or 'taco' (whose grader "
                "functional results follow)."
            )
        if self.kind == "functional" and not self.fn_name:
            raise ValueError("CodeTests of kind 'functional' need fn_name (the function the tests call).")


def _where(row: int | None, field: str) -> str:
    return f"tests{'' if row is None else f' of row {row}'}, field {field!r}"


def _text(value: Any, row: int | None, field: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(line, str) for line in value):
        return "\n".join(value)  # some APPS/TACO rows hold stdin as a list of lines
    raise ValueError(
        f"{_where(row, field)} must be text (stdin/stdout), got {type(value).__name__}: {value!r:.200}"
    )


def _json_value(value: Any, row: int | None, field: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"{_where(row, field)} is not valid JSON ({error}): {value!r:.200}") from None


def _functional_arguments(value: Any, row: int | None, field: str) -> list:
    """LiveCodeBench writes the arguments as one JSON value per line."""
    if isinstance(value, str):
        lines = [line for line in value.split("\n") if line.strip()]
        return [_json_value(line, row, field) for line in lines]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ValueError(f"{_where(row, field)} must be the list of arguments, got {type(value).__name__}")


def _metadata_fn_name(metadata: Any, row: int | None) -> str | None:
    metadata = _json_value(metadata, row, "metadata") if metadata is not None else None
    if isinstance(metadata, Mapping):
        name = metadata.get("func_name") or metadata.get("fn_name")
        return name if isinstance(name, str) and name else None
    return None


def _require_fn_name(fn_name: str | None, row: int | None, field: str) -> str:
    if not fn_name:
        raise ValueError(
            f"{_where(row, field)} has functional tests but no function name: pass fn_name=... (or give the "
            "row a metadata column with 'func_name')."
        )
    return fn_name


def _parse_test_list(raw: list, fn_name: str | None, row: int | None) -> CodeTests:
    cases: list[TestCase] = []
    kinds: set[str] = set()
    semantics = "livecodebench"
    for position, test in enumerate(raw):
        field = f"[{position}]"
        if not isinstance(test, Mapping):
            raise ValueError(f"{_where(row, field)} must be an object with input/output, got {test!r:.200}")  # noqa: TRY004
        for key in ("input", "output"):
            if key not in test:
                raise ValueError(f"{_where(row, field + '.' + key)} is missing")
        testtype = test.get("testtype", test.get("type", "stdin"))
        if testtype in ("stdin", "stdin_stdout"):
            kinds.add("stdin")
            cases.append(
                TestCase(
                    _text(test["input"], row, field + ".input"), _text(test["output"], row, field + ".output")
                )
            )
        elif testtype in ("functional", "function_call"):
            kinds.add("functional")
            if testtype == "function_call":  # PrimeIntellect, graded by DeepCoder as TACO tests
                semantics = "taco"
            fn_name = fn_name or test.get("fn_name") or _metadata_fn_name(test.get("metadata"), row)
            arguments = _functional_arguments(test["input"], row, field + ".input")
            expected = test["output"]
            if testtype == "functional" or isinstance(expected, str):
                expected = _json_value(expected, row, field + ".output")
            cases.append(TestCase(arguments, expected))
        else:
            raise ValueError(
                f"{_where(row, field + '.testtype')} is {testtype!r}; expected 'stdin', 'functional', "
                "'stdin_stdout' or 'function_call'."
            )
    if len(kinds) > 1:
        raise ValueError(f"{_where(row, 'testtype')} mixes stdin and functional tests in one problem.")
    if kinds == {"functional"}:
        return CodeTests(
            "functional", cases, fn_name=_require_fn_name(fn_name, row, "fn_name"), semantics=semantics
        )
    return CodeTests("stdin", cases)


def _parse_inputs_outputs(raw: Mapping, fn_name: str | None, row: int | None) -> CodeTests:
    inputs, outputs = raw["inputs"], raw["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError(f"{_where(row, 'inputs/outputs')} must be two lists, got {type(inputs).__name__}")  # noqa: TRY004
    if len(inputs) != len(outputs):
        raise ValueError(
            f"{_where(row, 'inputs/outputs')} have different lengths ({len(inputs)} vs {len(outputs)})"
        )
    fn_name = fn_name or raw.get("fn_name") or None
    if fn_name:
        cases = [
            TestCase(
                _functional_arguments(value, row, f"inputs[{i}]"), _json_value(expected, row, f"outputs[{i}]")
            )
            for i, (value, expected) in enumerate(zip(inputs, outputs))
        ]
        return CodeTests("functional", cases, fn_name=fn_name, semantics="taco")
    cases = [
        TestCase(_text(value, row, f"inputs[{i}]"), _text(expected, row, f"outputs[{i}]"))
        for i, (value, expected) in enumerate(zip(inputs, outputs))
    ]
    return CodeTests("stdin", cases)


_CODE_CONTESTS_SPLITS = ("public_tests", "private_tests", "generated_tests")


def _parse_code_contests(raw: Mapping, row: int | None) -> CodeTests:
    cases: list[TestCase] = []
    for split in _CODE_CONTESTS_SPLITS:
        part = raw.get(split)
        if part is None:
            continue
        part = _json_value(part, row, split)
        if not isinstance(part, Mapping) or "input" not in part or "output" not in part:
            raise ValueError(
                f"{_where(row, split)} must be {{'input': [...], 'output': [...]}}, got {part!r:.200}"
            )
        if len(part["input"]) != len(part["output"]):
            raise ValueError(
                f"{_where(row, split)} has {len(part['input'])} inputs but {len(part['output'])} outputs"
            )
        for i, (value, expected) in enumerate(zip(part["input"], part["output"])):
            cases.append(
                TestCase(
                    _text(value, row, f"{split}.input[{i}]"), _text(expected, row, f"{split}.output[{i}]")
                )
            )
    return CodeTests("stdin", cases)


def _parse_human_eval(raw: Mapping, row: int | None) -> CodeTests:
    test, entry_point = raw["test"], raw["entry_point"]
    if not isinstance(test, str) or not test.strip():
        raise ValueError(f"{_where(row, 'test')} must be the test code (a `check(candidate)` function)")
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise ValueError(f"{_where(row, 'entry_point')} must be a function name, got {entry_point!r}")
    return CodeTests("assert", [TestCase(f"{test}\ncheck({entry_point})\n", None)], entry_point=entry_point)


def _parse_mbpp(raw: Mapping, row: int | None) -> CodeTests:
    test_list = _json_value(raw["test_list"], row, "test_list")
    if not isinstance(test_list, list) or not all(isinstance(test, str) for test in test_list):
        raise ValueError(
            f"{_where(row, 'test_list')} must be a list of assert statements, got {test_list!r:.200}"
        )
    setup_code = raw.get("test_setup_code") or None
    if setup_code is not None and not isinstance(setup_code, str):
        raise ValueError(
            f"{_where(row, 'test_setup_code')} must be code text, got {type(setup_code).__name__}"
        )
    return CodeTests("assert", [TestCase(test, None) for test in test_list], setup_code=setup_code)


def parse_tests(raw: Any, *, fn_name: str | None = None, row: int | None = None) -> CodeTests:
    """Parse a ``tests`` column value (any supported format, object or JSON string) into :class:`CodeTests`.

    Args:
        raw: the column value.
        fn_name: the function name of functional tests when the tests do not carry it (e.g. from the row's
            ``metadata``).
        row: the row index, named in error messages.

    Raises:
        ValueError: malformed tests, naming the row and the field. An empty test list is malformed too:
            callers that allow rows without tests check for emptiness first (see :func:`has_tests`).

    >>> parse_tests('[{"input": "1 2\\\\n", "output": "3\\\\n", "testtype": "stdin"}]').cases
    [TestCase(input='1 2\\n', output='3\\n')]
    >>> parse_tests({"inputs": [[1, 2]], "outputs": [3], "fn_name": "add"}).kind
    'functional'
    """
    if isinstance(raw, CodeTests):
        return raw
    if fn_name is not None and (not isinstance(fn_name, str) or not fn_name.isidentifier()):
        raise ValueError(f"fn_name={fn_name!r} must be a Python identifier (the function the tests call)")
    value = _json_value(raw, row, "tests")
    if isinstance(value, list):
        parsed = _parse_test_list(value, fn_name, row)
    elif isinstance(value, Mapping):
        if "inputs" in value and "outputs" in value:
            parsed = _parse_inputs_outputs(value, fn_name, row)
        elif any(split in value for split in _CODE_CONTESTS_SPLITS):
            parsed = _parse_code_contests(value, row)
        elif "test" in value and "entry_point" in value:
            parsed = _parse_human_eval(value, row)
        elif "test_list" in value:
            parsed = _parse_mbpp(value, row)
        else:
            raise ValueError(
                f"{_where(row, 'tests')} is an object with keys {sorted(value)[:10]}, which matches no supported "
                "format: expected inputs/outputs (TACO/APPS), public_tests/private_tests/generated_tests "
                "(CodeContests), test/entry_point (HumanEval) or test_list (MBPP)."
            )
    else:
        raise ValueError(  # noqa: TRY004 - malformed data is a ValueError throughout this module
            f"{_where(row, 'tests')} must be a list or an object (or their JSON text), got {type(value).__name__}"
        )
    if not parsed.cases:
        raise ValueError(f"{_where(row, 'tests')} holds no test cases")
    return parsed


def has_tests(raw: Any) -> bool:
    """False for a missing or empty ``tests`` value (``None``, ``""``, ``[]``, ``{}``, ``"[]"``), which a
    reward scores ``None``; anything else is parsed (and may then be malformed)."""
    if raw is None:
        return False
    if isinstance(raw, CodeTests):
        return bool(raw.cases)
    if isinstance(raw, str):
        stripped = raw.strip()
        return stripped not in ("", "[]", "{}", "null")
    if isinstance(raw, (Sequence, Mapping)):
        return len(raw) > 0
    return True
