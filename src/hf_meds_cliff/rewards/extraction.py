"""Answer extraction and normalisation: the last ``\\boxed{...}`` of a completion.

Pure string functions, shared by the training reward, the evaluation runner and MEDS (which locates
the same box token-wise).
"""

from __future__ import annotations

import re

_COMMAND_PATTERN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_INTEGER_PATTERN = re.compile(r"[+-]?\d+")
_THOUSANDS_PATTERN = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")
_DECIMAL_PATTERN = re.compile(r"[+-]?\d*\.\d+")


def _matching_brace(text: str, open_index: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_index``; escaped ``\\{``/``\\}`` do not count."""
    depth = 0
    index = open_index
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2  # skip the escaped character (\{, \}, \\)
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def extract_boxed_answer(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, or ``None``.

    Nested braces are balanced (``\\{``/``\\}`` are literal braces and do not count); the brace-less
    form ``\\boxed 5`` takes the next whitespace-delimited token. The *last* box decides: when it is
    unclosed or empty the completion has no answer (``None``), even if an earlier box is well formed,
    because the model did not finish the answer it committed to last.

    >>> extract_boxed_answer("7 + 5 = 12. The answer is \\\\boxed{12}.")
    '12'
    >>> extract_boxed_answer("\\\\boxed{1} then \\\\boxed{\\\\frac{1}{2}}")
    '\\\\frac{1}{2}'
    >>> extract_boxed_answer("so \\\\boxed 5.") , extract_boxed_answer("\\\\fbox{x}")
    ('5', 'x')
    >>> extract_boxed_answer("no box"), extract_boxed_answer("\\\\boxed{12"), extract_boxed_answer("\\\\boxed{ }")
    (None, None, None)
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_boxed_answer expects a str, got {type(text).__name__}: {text!r:.80}")
    matches = list(_COMMAND_PATTERN.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    rest_index = last.end()
    # LaTeX allows spaces between the command and its argument.
    while rest_index < len(text) and text[rest_index] in " \t":
        rest_index += 1
    if rest_index >= len(text):
        return None
    if text[rest_index] == "{":
        close_index = _matching_brace(text, rest_index)
        if close_index is None:
            return None
        content = text[rest_index + 1 : close_index].strip()
        return content or None
    token = re.match(r"[^\s$]+", text[rest_index:])
    content = token.group(0).rstrip(".,;") if token else ""
    return content or None


def _strip_wrapper(answer: str, command: str) -> str:
    prefix = command + "{"
    if answer.startswith(prefix):
        close_index = _matching_brace(answer, len(command))
        if close_index == len(answer) - 1:
            return answer[len(prefix) : -1]
    return answer


def normalize_answer(answer: str) -> str:
    """Canonical string form of an extracted answer, for majority votes and diversity counts.

    A string-level normalisation (cheap, deterministic): drops spacing commands, ``$``, ``\\left``/
    ``\\right``, ``\\text{}`` wrappers, degree marks, trailing periods and whitespace; ``\\dfrac``/
    ``\\tfrac`` become ``\\frac``; integers lose thousands separators and leading ``+``/zeros;
    decimals lose trailing zeros. Answers that math-verify would call equal but that differ in form
    (``1/2`` vs ``0.5``) stay different: votes are over surface forms, as in the usual maj@n.

    >>> normalize_answer(" \\\\dfrac{1}{2} "), normalize_answer("1,000"), normalize_answer("12.50")
    ('\\\\frac{1}{2}', '1000', '12.5')
    >>> normalize_answer("\\\\text{(A)}"), normalize_answer("90^\\\\circ"), normalize_answer("\\\\left( 1, 2 \\\\right)")
    ('(A)', '90', '(1,2)')
    """
    text = answer.strip().strip("$").strip()
    for command in ("\\text", "\\mathrm", "\\textbf", "\\mathbf"):
        text = _strip_wrapper(text, command)
    for old, new in (
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("^{\\circ}", ""),
        ("^\\circ", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\:", ""),
        ("\\ ", ""),
        ("~", ""),
    ):
        text = text.replace(old, new)
    text = re.sub(r"\s+", "", text).rstrip(".")
    integer = canonical_integer(text)
    if integer is not None:
        return integer
    if _DECIMAL_PATTERN.fullmatch(text):
        text = text.rstrip("0").rstrip(".")
        return text if text not in ("", "-", "+") else "0"
    return text


def canonical_integer(answer: str) -> str | None:
    """The canonical digits of an answer written as a plain integer (sign, no leading zeros), else ``None``.

    The fast path of :func:`~hf_meds_cliff.rewards.check_answer`: two plain integers are compared
    without math-verify (no sympy, no worker process). Strings, not ``int``: Python refuses to convert
    integers of more than 4300 digits, and a model can write one.

    >>> canonical_integer(" -12 "), canonical_integer("$007$"), canonical_integer("1,000"), canonical_integer("1/2")
    ('-12', '7', '1000', None)
    >>> canonical_integer("-0"), canonical_integer("+5")
    ('0', '5')
    """
    text = answer.strip().strip("$").strip().replace("\\!", "").replace("{,}", ",")
    if _THOUSANDS_PATTERN.fullmatch(text):
        text = text.replace(",", "")
    if not _INTEGER_PATTERN.fullmatch(text):
        return None
    sign = "-" if text[0] == "-" else ""
    digits = text.lstrip("+-").lstrip("0") or "0"
    return sign + digits if digits != "0" else "0"
