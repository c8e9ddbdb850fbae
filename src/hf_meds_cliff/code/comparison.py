"""How a test's actual output is compared with the expected one (in the caller, never in the sandbox)."""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any


def _decimal_tokens(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def stdout_matches(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdout rule: strip both texts, split into lines, strip each line; every line pair
    must be equal as text, or as the same number of whitespace-separated tokens that are equal
    ``Decimal`` numbers (``"1.50"`` equals ``"1.5"``; ``"1e2"`` equals ``"100"``).

    >>> stdout_matches("3\\n  4 \\n\\n", "3\\n4")
    True
    >>> stdout_matches("0.50 2", "0.5 2.0"), stdout_matches("0.5", "0.50001"), stdout_matches("a", "b")
    (True, False, False)
    """
    actual_lines = actual.strip().split("\n")
    expected_lines = expected.strip().split("\n")
    if len(actual_lines) != len(expected_lines):
        return False
    for actual_line, expected_line in zip(actual_lines, expected_lines):
        actual_line, expected_line = actual_line.strip(), expected_line.strip()
        if actual_line == expected_line:
            continue
        actual_numbers, expected_numbers = _decimal_tokens(actual_line), _decimal_tokens(expected_line)
        if actual_numbers is None or expected_numbers is None or actual_numbers != expected_numbers:
            return False
    return True


def json_round_trip(value: Any) -> Any:
    """``value`` as the JSON text the sandbox would send would decode (tuples become lists)."""
    return json.loads(json.dumps(value))


def functional_result_matches(actual_json: str, expected: Any) -> bool:
    """A function's result, serialised to JSON inside the sandbox, against the expected value after the
    same JSON round trip. Besides equality, a non-empty expected list also matches its first element
    (TACO/APPS store a return value ``x`` as ``[x]``, and their grader accepts both).

    >>> functional_result_matches("[1, 2]", (1, 2)), functional_result_matches("5", [5]), functional_result_matches("5", 6)
    (True, True, False)
    """
    try:
        actual = json.loads(actual_json)
    except (json.JSONDecodeError, TypeError):
        return False
    expected = json_round_trip(expected)
    if actual == expected:
        return True
    return isinstance(expected, list) and len(expected) == 1 and actual == expected[0]
