"""How a test's actual output is compared with the expected one (in the caller, never in the sandbox).

The program's output is hostile input here too: every comparison is bounded (token counts are compared
before any token is converted; a functional result is decoded with the depth and size bounds of
:mod:`._wire`, which never executes code), and :func:`safe_compare` turns any exception into a mismatch.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from . import _wire

Semantics = Literal["livecodebench", "taco"]
SEMANTICS: tuple[str, ...] = ("livecodebench", "taco")


def _decimal_tokens(tokens: list[str]) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in tokens]
    except (InvalidOperation, ValueError):
        return None


def _lines_match(actual_line: str, expected_line: str) -> bool:
    if actual_line == expected_line:
        return True
    expected_tokens = expected_line.split()
    # At most one token more than expected is split off, so that a flood on one line costs no list of
    # millions of strings (nor of Decimals): the counts differ, and nothing is converted.
    actual_tokens = actual_line.split(None, len(expected_tokens))
    if len(actual_tokens) != len(expected_tokens):
        return False
    actual_numbers, expected_numbers = _decimal_tokens(actual_tokens), _decimal_tokens(expected_tokens)
    if actual_numbers is None or expected_numbers is None:
        return False
    return actual_numbers == expected_numbers  # raises InvalidOperation for a signalling NaN ('sNaN')


def stdout_matches(actual: str, expected: str) -> bool:
    """LiveCodeBench's stdout rule: strip both texts, split into lines, strip each line; every line pair
    must be equal as text, or as the same number of whitespace-separated tokens that are equal
    ``Decimal`` numbers (``"1.50"`` equals ``"1.5"``; ``"1e2"`` equals ``"100"``).

    >>> stdout_matches("3\\n  4 \\n\\n", "3\\n4")
    True
    >>> stdout_matches("0.50 2", "0.5 2.0"), stdout_matches("0.5", "0.50001"), stdout_matches("a", "b")
    (True, False, False)
    >>> stdout_matches("sNaN", "5")
    False
    """
    try:
        return stdout_matches_strict(actual, expected)
    except InvalidOperation:  # a signalling NaN refuses to be compared
        return False


def stdout_matches_strict(actual: str, expected: str) -> bool:
    """:func:`stdout_matches`, raising what the comparison raises (``InvalidOperation`` for ``sNaN``), so that
    the runner can count it."""
    actual_text, expected_text = actual.strip(), expected.strip()
    if actual_text.count("\n") != expected_text.count("\n"):
        return False
    actual_lines = actual_text.split("\n")
    expected_lines = expected_text.split("\n")
    return all(
        _lines_match(actual_line.strip(), expected_line.strip())
        for actual_line, expected_line in zip(actual_lines, expected_lines)
    )


def json_round_trip(value: Any) -> Any:
    """``value`` as JSON would carry it (tuples become lists, dict keys strings); values JSON cannot carry
    (``Fraction``, ``Decimal``, sets, ...) are kept as they are, so that they still compare by value.

    >>> json_round_trip({1: (2, 3)})
    {'1': [2, 3]}
    """
    kind = type(value)
    if kind in (list, tuple):
        return [json_round_trip(item) for item in value]
    if kind is dict:
        return {_json_key(key): json_round_trip(item) for key, item in value.items()}
    return value


def _json_key(key: Any) -> Any:
    if isinstance(key, (str, int, float, bool)) or key is None:
        # JSON's own key conversion: 1 -> "1", True -> "true"
        return next(iter(json.loads(json.dumps({key: 0}))))
    return key


def decode_result(text: str, max_bytes: int | None = None) -> Any:
    """A functional result as the sandbox sent it (:mod:`._wire`'s tagged encoding), bounded in size and
    depth. Raises ``ValueError`` (or ``RecursionError``/``TypeError``) for malformed or oversized text."""
    return _wire.decode(text, max_bytes)


def functional_result_matches(
    actual_text: str, expected: Any, semantics: Semantics = "livecodebench"
) -> bool:
    """A function's result, sent from the sandbox in a tagged encoding that keeps tuples, sets, non-string
    dict keys, ``Fraction``, ``Decimal``, ``complex`` and ``bytes`` apart, against the expected value.

    - ``"livecodebench"`` (LiveCodeBench/DeepCoder ``testtype: functional``), as its grader: a returned
      tuple becomes a list (only at the top), then ``result == expected``: nested tuples do not equal
      lists, int keys do not equal string keys, ``Fraction(1, 2)`` and ``Decimal("0.5")`` equal ``0.5``.
    - ``"taco"`` (TACO/APPS ``fn_name``, PrimeIntellect ``function_call``): both sides as JSON would carry
      them (every tuple a list, keys strings), equal, or a non-empty one-element expected list whose element
      equals the result (TACO/APPS store a return value ``x`` as ``[x]``, and their grader accepts both).

    Malformed text is a mismatch; other exceptions propagate (see :func:`safe_compare`).

    >>> functional_result_matches('{"t":[1,2]}', [1, 2]), functional_result_matches("5", [5])
    (True, False)
    >>> functional_result_matches("5", [5], "taco"), functional_result_matches('{"q":[1,2]}', 0.5)
    (True, True)
    """
    try:
        actual = decode_result(actual_text)
    except (ValueError, TypeError):
        return False
    return result_matches(actual, expected, semantics)


def result_matches(actual: Any, expected: Any, semantics: Semantics = "livecodebench") -> bool:
    """A decoded result against the expected value, by ``semantics`` (see
    :func:`functional_result_matches`)."""
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics={semantics!r} must be one of {SEMANTICS}")
    if semantics == "livecodebench":
        if type(actual) is tuple:
            actual = list(actual)
        return bool(actual == expected)
    actual, expected = json_round_trip(actual), json_round_trip(expected)
    if actual == expected:
        return True
    return type(expected) is list and len(expected) == 1 and bool(actual == expected[0])


def safe_compare(compare, *arguments: Any) -> tuple[bool, str | None]:
    """``(compare(*arguments), None)``, or ``(False, reason)`` when comparing raised (a signalling NaN, a
    result too deep to compare, an integer too long to convert, memory): a program's output never raises
    in the caller."""
    try:
        return bool(compare(*arguments)), None
    except Exception as error:  # noqa: BLE001 - whatever the output provokes, the test just fails
        return False, f"comparison failed: {type(error).__name__}: {str(error)[:200]}"
