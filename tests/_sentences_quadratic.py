"""The sentence splitter as it was before the linear rewrite (quadratic on some texts), kept as the oracle of
tests/test_sentences_linear.py. Sentence segmentation of a rollout, as the Cliff teacher sees it numbered ``[0]``, ``[1]``, ...

Cliff's pitfall step p(a) is a *sentence* index; the trainer maps it back to tokens through the
character spans returned here, and the toy world's exact checker indexes its first mistake with the
same function. So the spans must be deterministic and lossless: concatenated they give the text
back, with no gap and no overlap, and trailing whitespace belongs to the sentence before it.

Rules, in order of precedence:

1. Nothing splits inside math: ``$...$`` (told from currency by Pandoc's rule), ``$$...$$``, ``\\(...\\)``, ``\\[...\\]`` (a delimiter that is
   never closed is treated as a literal character), nor inside balanced ``{...}`` (so
   ``\\frac{1}{2}`` or ``\\boxed{3.5}`` stay whole; an unbalanced brace is ignored).
2. A sentence ends after ``.``, ``!`` or ``?`` (plus any closing quotes, brackets or ``*``) that is
   followed by whitespace or the end of the text -- except a list marker at the start of a line
   (``1. ``, ``a) `` has no dot anyway, ``iv. ``) and a known abbreviation (``e.g.``, ``i.e.``,
   ``cf.``, ``vs.``, ``Fig.``, ...). Decimals (``3.5``) never split since no whitespace follows the dot.
3. A sentence ends at every line break outside math; blank lines go to the sentence before them.
4. A span that would hold only whitespace (leading blank lines) is merged into its neighbour.
"""

from __future__ import annotations

import re

__all__ = ["code_unit_texts", "sentence_texts", "split_code_units", "split_sentences"]

_TERMINATORS = ".!?"
_CLOSERS = "\"')]*\u201d\u2019"
_ABBREVIATIONS = frozenset(
    {
        "e.g",
        "i.e",
        "cf",
        "vs",
        "approx",
        "resp",
        "al",
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "fig",
        "figs",
        "eq",
        "eqs",
        "sec",
        "thm",
        "lem",
        "prop",
        "cor",
        "vol",
        "viz",
        "w.r.t",
        "wrt",
        "s.t",
    }
)
_LIST_MARKER = re.compile(r"(?:\d{1,3}|[A-Za-z]|[ivxlcdmIVXLCDM]{1,6})")


_MATH_TOKEN = re.compile(r"\\[\[(]|\\.|\$\$|\$", re.DOTALL)
_DOLLAR_TOKEN = re.compile(r"\\.|\$|\n\n", re.DOTALL)
_BRACE_TOKEN = re.compile(r"\\[{}]|\\.|[{}]", re.DOTALL)
_CANDIDATE = re.compile(r"[.!?\n]")
_WHITESPACE = re.compile(r"\s*")


def _protect(protected: bytearray, start: int, end: int) -> None:
    protected[start:end] = b"\x01" * (end - start)


def _math_and_brace_mask(text: str) -> bytearray:
    """``protected[i]`` is 1 when a sentence may not end right after character ``i``.

    Math regions protect every character but the last closing delimiter; brace groups protect their
    content and opening brace (so ``\\frac{1}{2}.`` still ends after the ``.``). Escaped characters
    (``\\$``, ``\\{`` outside a brace pair, ``\\\\``) are literal.
    """
    protected = bytearray(len(text))
    position = 0
    while (match := _MATH_TOKEN.search(text, position)) is not None:
        start, token = match.start(), match.group()
        position = match.end()
        if token in ("\\[", "\\("):
            end = text.find("\\]" if token == "\\[" else "\\)", start + 2)
            if end != -1:
                _protect(protected, start, end + 1)  # up to and including the backslash of the closer
                position = end + 2
        elif token == "$$":
            end = text.find("$$", start + 2)
            if end != -1:
                _protect(protected, start, end + 1)
                position = end + 2
        elif token == "$":
            end = _closing_dollar(text, start + 1)
            if end != -1:
                _protect(protected, start, end)
                position = end + 1

    # Balanced braces ("{...}" and "\\{...\\}"); an unmatched or mismatched closer is ignored.
    stack: list[tuple[int, bool]] = []
    position = 0
    while (match := _BRACE_TOKEN.search(text, position)) is not None:
        start, token = match.start(), match.group()
        position = match.end()
        escaped = token in ("\\{", "\\}")
        if token[-1] == "{" and (escaped or token == "{"):
            stack.append((start, escaped))
        elif token[-1] == "}" and (escaped or token == "}") and stack and stack[-1][1] == escaped:
            opening, _ = stack.pop()
            _protect(protected, opening, start + 1 if escaped else start)  # "\\}" ends at its "}"
    return protected


def _closing_dollar(text: str, start: int) -> int:
    """Index of the ``$`` closing inline math opened at ``start - 1``; -1 when it is not math.

    Pandoc's rule tells math from currency: the opening ``$`` has a non-space right after it, the
    closing one a non-space right before it and no digit right after it; inline math never spans a
    blank line.
    """
    n = len(text)
    if start >= n or text[start].isspace():
        return -1
    position = start
    while (match := _DOLLAR_TOKEN.search(text, position)) is not None:
        index, token = match.start(), match.group()
        position = match.end()
        if token == "\n\n":
            return -1
        if token == "$":
            if (
                index > start
                and not text[index - 1].isspace()
                and not (index + 1 < n and text[index + 1].isdigit())
            ):
                return index
            if index + 1 < n and text[index + 1] == "$":
                return -1  # a display-math delimiter cannot close inline math
    return -1


def _is_list_marker(text: str, sentence_start: int, dot: int) -> bool:
    """True when ``text[.. dot]`` is ``"1."``/``"a."``/``"iv."`` at the start of a line."""
    line_start = text.rfind("\n", 0, dot) + 1
    marker_start = max(line_start, sentence_start)
    if line_start < sentence_start and text[line_start:sentence_start].strip():
        return False  # the line began in an earlier sentence: the dot is not at the line start
    return _LIST_MARKER.fullmatch(text[marker_start:dot].strip()) is not None


def _is_abbreviation(text: str, dot: int) -> bool:
    word_start = dot
    while word_start > 0 and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:dot].lstrip("([{\"'").lower()
    return word in _ABBREVIATIONS


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``[(start, end), ...]`` of the sentences of ``text``.

    The spans cover the text exactly: ``spans[0][0] == 0``, ``spans[-1][1] == len(text)`` and
    ``spans[k][1] == spans[k + 1][0]``. Empty text gives ``[]``.

    >>> text = "7 + 5 = 12. 12 * 3 = 36. The answer is \\\\boxed{36}."
    >>> [text[s:e] for s, e in split_sentences(text)]
    ['7 + 5 = 12. ', '12 * 3 = 36. ', 'The answer is \\\\boxed{36}.']
    >>> text = "So x = 3.5, e.g. half of 7.\\n\\n1. Done!"
    >>> [text[s:e] for s, e in split_sentences(text)]
    ['So x = 3.5, e.g. half of 7.\\n\\n', '1. Done!']
    """
    if not isinstance(text, str):
        raise TypeError(f"split_sentences expects a str, got {type(text).__name__}: {text!r:.80}")
    n = len(text)
    if n == 0:
        return []
    protected = _math_and_brace_mask(text)
    ends: list[int] = []
    sentence_start = 0
    position = 0
    while (match := _CANDIDATE.search(text, position)) is not None:
        i = match.start()
        position = i + 1
        if protected[i]:
            continue
        boundary = -1
        if text[i] == "\n":
            boundary = i + 1
        else:
            j = i + 1
            while j < n and (text[j] in _TERMINATORS or text[j] in _CLOSERS):
                j += 1
            if j == n or text[j].isspace():
                is_exception = (
                    text[i] == "."
                    and j == i + 1
                    and (_is_list_marker(text, sentence_start, i) or _is_abbreviation(text, i))
                )
                if not is_exception:
                    boundary = j
            position = j
        if boundary != -1:
            boundary = _WHITESPACE.match(text, boundary).end()
            ends.append(boundary)
            sentence_start = position = boundary
    if not ends or ends[-1] != n:
        ends.append(n)

    spans: list[tuple[int, int]] = []
    start = 0
    for end in ends:
        if end <= start:
            continue
        if spans and not text[spans[-1][0] : spans[-1][1]].strip():
            spans[-1] = (spans[-1][0], end)  # leading whitespace-only span joins the next sentence
        else:
            spans.append((start, end))
        start = end
    return spans


def sentence_texts(text: str) -> list[str]:
    """The sentences of ``text`` as strings (``"".join(sentence_texts(t)) == t``).

    >>> sentence_texts("x = 1. So y = 2.")
    ['x = 1. ', 'So y = 2.']
    """
    return [text[start:end] for start, end in split_sentences(text)]


# A fence opens a code block at the start of a line: up to three spaces, then three or more backticks or
# tildes (CommonMark); backticks may not appear in its info string. It closes at a line holding only a run of
# the same character at least as long (and whitespace).
_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")


def _lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of the lines of ``text[start:end]``, each with its ``"\\n"``; the last may lack one."""
    spans: list[tuple[int, int]] = []
    position = start
    while position < end:
        newline = text.find("\n", position, end)
        line_end = end if newline == -1 else newline + 1
        spans.append((position, line_end))
        position = line_end
    return spans


def _code_blocks(text: str) -> list[tuple[int, int, int, int]]:
    """``(fence_start, body_start, body_end, block_end)`` of each fenced code block, in order.

    ``text[fence_start:body_start]`` is the opening fence line, ``text[body_start:body_end]`` the program
    and ``text[body_end:block_end]`` the closing fence line. A block never closed (a rollout truncated
    inside its program) runs to the end of the text with an empty closing part.
    """
    blocks: list[tuple[int, int, int, int]] = []
    lines = _lines(text, 0, len(text))
    index = 0
    while index < len(lines):
        start, end = lines[index]
        opening = _FENCE_OPEN.match(text[start:end].rstrip("\r\n"))
        index += 1
        if opening is None or (opening.group("fence")[0] == "`" and "`" in opening.group("info")):
            continue
        fence = opening.group("fence")
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body_start = end
        while index < len(lines) and not closing.match(
            text[lines[index][0] : lines[index][1]].rstrip("\r\n")
        ):
            index += 1
        if index < len(lines):
            blocks.append((start, body_start, lines[index][0], lines[index][1]))
            index += 1
        else:
            blocks.append((start, body_start, len(text), len(text)))
    return blocks


def _prose_pieces(text: str, start: int, end: int) -> list[tuple[int, int, bool]]:
    """The sentences of the prose ``text[start:end]``; a whitespace-only one starts no unit."""
    return [
        (start + s, start + e, bool(text[start + s : start + e].strip()))
        for s, e in split_sentences(text[start:end])
    ]


def split_code_units(text: str) -> list[tuple[int, int]]:
    """Character spans of the *units* of a code rollout: prose sentences and program lines.

    The numbering a Cliff teacher sees for a code rollout (prose plus a program). Prose outside fenced
    code blocks is split by :func:`split_sentences`; inside a fenced block (```` ``` ```` or ``~~~``,
    CommonMark rules) each non-blank line is one unit. Blank lines and the fence lines belong to the unit
    before them (the opening fence to the last prose sentence before the block, the closing fence to the
    program's last line); a fence with nothing before it joins the unit after it. A block that is never
    closed (a truncated rollout) is code up to the end. Same guarantees as :func:`split_sentences`: the
    spans cover the text exactly, in order, with no gap, no overlap and no whitespace-only span (unless
    the whole text is whitespace); empty text gives ``[]``.

    >>> text = "Read n and print it.\\n```python\\nn = int(input())\\n\\nprint(n)\\n```\\nDone."
    >>> [text[s:e] for s, e in split_code_units(text)]
    ['Read n and print it.\\n```python\\n', 'n = int(input())\\n\\n', 'print(n)\\n```\\n', 'Done.']
    """
    if not isinstance(text, str):
        raise TypeError(f"split_code_units expects a str, got {type(text).__name__}: {text!r:.80}")
    if not text:
        return []
    # Each piece is (start, end, starts_unit): pieces that do not start a unit (fences, blank code lines)
    # are glued onto the unit before them.
    pieces: list[tuple[int, int, bool]] = []
    position = 0
    for fence_start, body_start, body_end, block_end in _code_blocks(text):
        pieces.extend(_prose_pieces(text, position, fence_start))
        pieces.append((fence_start, body_start, False))
        for line_start, line_end in _lines(text, body_start, body_end):
            pieces.append((line_start, line_end, bool(text[line_start:line_end].strip())))
        if block_end > body_end:
            pieces.append((body_end, block_end, False))
        position = block_end
    pieces.extend(_prose_pieces(text, position, len(text)))

    spans: list[tuple[int, int]] = []
    pending_start: int | None = None  # a leading non-unit piece waits for the first unit
    for start, end, starts_unit in pieces:
        if start == end:
            continue
        if not starts_unit and spans:
            spans[-1] = (spans[-1][0], end)
        elif not starts_unit:
            pending_start = start if pending_start is None else pending_start
        else:
            spans.append((start if pending_start is None else pending_start, end))
            pending_start = None
    if pending_start is not None:  # only fences and blank lines: one unit
        spans.append((pending_start, len(text)))
    return spans


def code_unit_texts(text: str) -> list[str]:
    """The units of a code rollout as strings (``"".join(code_unit_texts(t)) == t``).

    >>> code_unit_texts("```\\nx = 1\\ny = 2\\n```")
    ['```\\nx = 1\\n', 'y = 2\\n```']
    """
    return [text[start:end] for start, end in split_code_units(text)]
