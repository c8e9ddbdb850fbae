"""Answer extraction and normalisation: the ``\\boxed{...}`` answer of a completion.

Pure string functions, shared by the training reward, the evaluation runner and MEDS (which locates
the same box token-wise).

Several boxes (:func:`extract_final_answer`): the final answer is the last box together with the
boxes just before it that math-verify's own extraction joins to it (``latex2sympy2_extended``'s
``extract_boxed_content(mode="last")``, which ``math_verify.parse`` applies to a ``\\boxed{...}``
match): walking leftwards from the last box, an earlier box joins when fewer than 10 characters
separate it from the box after it, or fewer than 70 characters containing ``and``/``or``/``,``/``;``
when its content differs; the first box that fails stops the walk. Repeated identical boxes count
once. The joined boxes form one set answer (``\\boxed{2} and \\boxed{3}`` is ``2,3``), which must
equal the ground truth as a whole: boxing every candidate (``\\boxed{1}, \\boxed{2}, ...``) gives a
set that matches no single answer, so it is never paid.
"""

from __future__ import annotations

import re

_COMMAND_PATTERN = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_INTEGER_PATTERN = re.compile(r"[+-]?\d+")
_THOUSANDS_PATTERN = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+")
_DECIMAL_PATTERN = re.compile(r"[+-]?\d*\.\d+")
_BOX_SEPARATOR_PATTERN = re.compile(r"\b(and|or)\b|,|;")  # math-verify's VALID_SEPARATOR_PATTERN
_JOIN_WITHOUT_SEPARATOR = 10  # math-verify: boxes closer than this always join
_JOIN_WITH_SEPARATOR = 70  # math-verify: boxes closer than this join when a separator lies between
_SPACE_BETWEEN_DIGITS = re.compile(r"(?<=\d)\s+(?=\d)")


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


def _box_argument(text: str, command_end: int) -> tuple[int, int, str] | None:
    """``(start, end, content)`` of the argument after a box command ending at ``command_end``.

    ``start`` is the index of the opening brace (or of the brace-less token), ``end`` the index just
    past the argument. ``None`` when the argument is missing, unclosed or empty.
    """
    index = command_end
    while index < len(text) and text[index] in " \t":  # LaTeX allows spaces before the argument
        index += 1
    if index >= len(text):
        return None
    if text[index] == "{":
        close_index = _matching_brace(text, index)
        if close_index is None:
            return None
        content = text[index + 1 : close_index].strip()
        return (index, close_index + 1, content) if content else None
    token = re.match(r"[^\s$]+", text[index:])
    content = token.group(0).rstrip(".,;") if token else ""
    return (index, index + len(token.group(0)), content) if content else None


def extract_boxed_answer(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, or ``None``.

    Nested braces are balanced (``\\{``/``\\}`` are literal braces and do not count); the brace-less
    form ``\\boxed 5`` takes the next whitespace-delimited token. The *last* box decides: when it is
    unclosed or empty the completion has no answer (``None``), even if an earlier box is well formed,
    because the model did not finish the answer it committed to last. :func:`extract_final_answer`
    adds the earlier boxes that belong to the same answer.

    >>> extract_boxed_answer("7 + 5 = 12. The answer is \\\\boxed{12}.")
    '12'
    >>> extract_boxed_answer("\\\\boxed{1} then \\\\boxed{\\\\frac{1}{2}}")
    '\\\\frac{1}{2}'
    >>> extract_boxed_answer("so \\\\boxed 5.") , extract_boxed_answer("\\\\fbox{x}")
    ('5', 'x')
    >>> extract_boxed_answer("no box"), extract_boxed_answer("\\\\boxed{12"), extract_boxed_answer("\\\\boxed{ }")
    (None, None, None)
    """
    boxes = extract_final_boxes(text)
    return boxes[-1] if boxes else None


def extract_final_boxes(text: str) -> list[str]:
    """Contents of the boxes that form the final answer, in reading order; ``[]`` without one.

    The last box, plus the earlier boxes that math-verify joins to it (see the module docstring).

    >>> extract_final_boxes("roots: \\\\boxed{2} and \\\\boxed{3}")
    ['2', '3']
    >>> extract_final_boxes("\\\\boxed{1} was my first guess but the second case gives the answer \\\\boxed{4}")
    ['4']
    >>> extract_final_boxes("\\\\boxed{5} so \\\\boxed{5}"), extract_final_boxes("\\\\boxed{1} and \\\\boxed{2")
    (['5'], [])
    """
    if not isinstance(text, str):
        raise TypeError(f"extract_boxed_answer expects a str, got {type(text).__name__}: {text!r:.80}")
    matches = list(_COMMAND_PATTERN.finditer(text))
    if not matches:
        return []
    last = _box_argument(text, matches[-1].end())
    if last is None:
        return []
    boxes = [last[2]]
    later_start = matches[-1].start()
    for match in reversed(matches[:-1]):
        argument = _box_argument(text, match.end())
        if argument is None or argument[1] > later_start or text[argument[0]] != "{":
            break  # math-verify stops at an unclosed, brace-less or enclosing box
        between = text[argument[1] : later_start]
        content = argument[2]
        joins = len(between) < _JOIN_WITHOUT_SEPARATOR or (
            content != boxes[-1]
            and len(between) < _JOIN_WITH_SEPARATOR
            and _BOX_SEPARATOR_PATTERN.search(between) is not None
        )
        if not joins:
            break
        if content != boxes[-1]:  # repeated identical boxes count once
            boxes.append(content)
        later_start = match.start()
    return boxes[::-1]


def extract_final_answer(text: str) -> str | None:
    """The final answer of a completion as one string (boxes joined with ``,``), or ``None``.

    What :func:`~hf_meds_cliff.rewards.check_answer` verifies: a single box gives its content,
    several joined boxes (see :func:`extract_final_boxes`) give ``"a,b"``, which math-verify reads
    as the set ``{a, b}``, exactly as it reads the boxes themselves.

    >>> extract_final_answer("\\\\boxed{-2} and \\\\boxed{1}"), extract_final_answer("\\\\boxed{\\\\frac{1}{2}}")
    ('-2,1', '\\\\frac{1}{2}')
    """
    boxes = extract_final_boxes(text)
    return ",".join(boxes) if boxes else None


def strip_math_delimiters(answer: str) -> str:
    """``answer`` without surrounding whitespace and one pair of enclosing math delimiters.

    Only a *pair* is removed (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``); an escaped
    dollar sign is content (``18\\$`` is eighteen dollars) and stays whole.

    >>> strip_math_delimiters(" $\\\\frac{1}{2}$ "), strip_math_delimiters("18\\\\$"), strip_math_delimiters("\\\\$18")
    ('\\\\frac{1}{2}', '18\\\\$', '\\\\$18')
    >>> strip_math_delimiters("$$x$$"), strip_math_delimiters("$5\\\\$$"), strip_math_delimiters("$5")
    ('x', '5\\\\$', '$5')
    """
    text = answer.strip()
    for opening, closing in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
            inner = text[len(opening) : len(text) - len(closing)]
            if closing.startswith("$") and _escaped(text, len(text) - len(closing)):
                continue  # the closing dollar is an escaped \$ of the content
            return inner.strip()
    return text


def _escaped(text: str, index: int) -> bool:
    """Whether the character at ``index`` is escaped by an odd number of backslashes."""
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def nesting_depth(answer: str) -> int:
    """The deepest bracket nesting of ``answer``: ``{``, ``(`` and ``[`` open, their partners close.

    Unbalanced brackets (an interval ``[0, 1)``) are counted as written, never below zero.

    >>> nesting_depth("12"), nesting_depth("\\\\frac{1}{2}"), nesting_depth("\\\\left(\\\\frac{\\\\sqrt{3}}{2}, 1\\\\right)")
    (0, 1, 3)
    """
    depth = deepest = 0
    for char in answer:
        if char in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "})]":
            depth = max(0, depth - 1)
    return deepest


def _strip_wrapper(answer: str, command: str) -> str:
    prefix = command + "{"
    if answer.startswith(prefix):
        close_index = _matching_brace(answer, len(command))
        if close_index == len(answer) - 1:
            return answer[len(prefix) : -1]
    return answer


def normalize_answer(answer: str) -> str:
    """Canonical string form of an extracted answer, for majority votes and diversity counts.

    A string-level normalisation (cheap, deterministic): drops enclosing math delimiters, spacing
    commands, ``\\left``/``\\right``, ``\\text{}`` wrappers, degree marks, trailing periods and
    whitespace that is not between two digits; ``\\dfrac``/``\\tfrac`` become ``\\frac``; integers
    lose thousands separators (``1,000``, never ``1, 000`` or ``1 000``) and leading ``+``/zeros;
    decimals lose trailing zeros. Answers that math-verify would call equal but that differ in form
    (``1/2`` vs ``0.5``) stay different: votes are over surface forms, as in the usual maj@n. It
    decides no reward (:func:`~hf_meds_cliff.rewards.check_answer` does not use it).

    >>> normalize_answer(" \\\\dfrac{1}{2} "), normalize_answer("1,000"), normalize_answer("12.50")
    ('\\\\frac{1}{2}', '1000', '12.5')
    >>> normalize_answer("\\\\text{(A)}"), normalize_answer("90^\\\\circ"), normalize_answer("\\\\left( 1, 2 \\\\right)")
    ('(A)', '90', '(1,2)')
    >>> normalize_answer("2 3"), normalize_answer("32, 349"), normalize_answer("18\\\\$")
    ('2 3', '32,349', '18\\\\$')
    """
    text = strip_math_delimiters(answer)
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
        ("\\,", " "),
        ("\\;", " "),
        ("\\:", " "),
        ("\\ ", " "),
        ("~", " "),
    ):
        text = text.replace(old, new)
    text = text.strip().rstrip(".").strip()
    if _THOUSANDS_PATTERN.fullmatch(text):  # before spaces go: "32, 349" is a pair, not 32349
        text = text.replace(",", "")
    text = _SPACE_BETWEEN_DIGITS.sub(" ", text)
    text = re.sub(r"(?<!\d)\s+|\s+(?!\d)", "", text)
    integer = canonical_integer(text)
    if integer is not None:
        return integer
    if _DECIMAL_PATTERN.fullmatch(text):
        text = text.rstrip("0").rstrip(".")
        return text if text not in ("", "-", "+") else "0"
    return text


def canonical_integer(answer: str) -> str | None:
    """The canonical digits of an answer written as a plain integer (sign, no leading zeros), else ``None``.

    The one shortcut of :func:`~hf_meds_cliff.rewards.check_answer`: two plain integers are compared
    without math-verify (no sympy, no worker process), which is exact. "Plain" is strict: optional
    sign and digits only, no separators, no spaces, no decimal point (``1,000``, ``1 000``, ``32, 349``
    and ``1.0`` go to math-verify, which reads ``32, 349`` as a pair, not as 32349). Strings, not
    ``int``: Python refuses to convert integers of more than 4300 digits, and a model can write one.

    >>> canonical_integer(" -12 "), canonical_integer("$007$"), canonical_integer("1/2"), canonical_integer("1,000")
    ('-12', '7', None, None)
    >>> canonical_integer("-0"), canonical_integer("+5"), canonical_integer("2 3"), canonical_integer("18\\\\$")
    ('0', '5', None, None)
    """
    text = strip_math_delimiters(answer)
    if not _INTEGER_PATTERN.fullmatch(text):
        return None
    sign = "-" if text[0] == "-" else ""
    digits = text.lstrip("+-").lstrip("0") or "0"
    return sign + digits if digits != "0" else "0"
