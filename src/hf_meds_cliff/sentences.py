"""Sentence segmentation of a rollout, as the Cliff teacher sees it numbered ``[0]``, ``[1]``, ...

Owned at the package's ground level because Cliff and the toy world's checkers both number a rollout with it;
:mod:`hf_meds_cliff.cliff` re-exports :func:`split_sentences` and :func:`split_code_units`.

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


class _NextIndex:
    """``text.find(needle, start)`` for queries that never decrease, in linear time over all of them (an answer
    stays valid until a query passes it): without it, every unclosed ``\\[`` rescanned the rest of the text."""

    def __init__(self, text: str, needle: str):
        self.text, self.needle = text, needle
        self.answer = -2  # no query yet

    def __call__(self, start: int) -> int:
        if self.answer == -2 or (self.answer != -1 and self.answer < start):
            self.answer = self.text.find(self.needle, start)
        return self.answer


def _math_and_brace_mask(text: str) -> bytearray:
    """``protected[i]`` is 1 when a sentence may not end right after character ``i``.

    Math regions protect every character but the last closing delimiter; brace groups protect their
    content and opening brace (so ``\\frac{1}{2}.`` still ends after the ``.``). Escaped characters
    (``\\$``, ``\\{`` outside a brace pair, ``\\\\``) are literal. Linear time: the searches for closing
    delimiters resume where the previous one stopped, and nested brace groups are marked once.
    """
    protected = bytearray(len(text))
    closers = {"\\[": _NextIndex(text, "\\]"), "\\(": _NextIndex(text, "\\)"), "$$": _NextIndex(text, "$$")}
    dollar = _DollarCloser(text)
    position = 0
    while (match := _MATH_TOKEN.search(text, position)) is not None:
        start, token = match.start(), match.group()
        position = match.end()
        if token in ("\\[", "\\(", "$$"):
            end = closers[token](start + 2)
            if end != -1:
                _protect(protected, start, end + 1)  # up to and including the closer's first character
                position = end + 2
        elif token == "$":
            end = dollar(start + 1)
            if end != -1:
                _protect(protected, start, end)
                position = end + 1

    # Balanced braces ("{...}" and "\\{...\\}"); an unmatched or mismatched closer is ignored. The groups
    # nest (a stack pairs them), so their union is marked, each character once.
    groups: list[tuple[int, int]] = []
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
            groups.append((opening, start + 1 if escaped else start))  # "\\}" ends at its "}"
    marked_to = 0
    for start, end in sorted(groups):
        if end > marked_to:
            _protect(protected, max(start, marked_to), end)
            marked_to = end
    return protected


def _closing_dollar(text: str, start: int) -> int:
    """Index of the ``$`` closing inline math opened at ``start - 1``; -1 when it is not math.

    Pandoc's rule tells math from currency: the opening ``$`` has a non-space right after it, the
    closing one a non-space right before it and no digit right after it; inline math never spans a
    blank line.
    """
    return _DollarCloser(text)(start)


class _DollarCloser:
    """:func:`_closing_dollar` for openings that never move backwards, in linear time over all of them.

    A scan from ``start`` stops at an event: the closing ``$``, a blank line, a ``$$`` or the end of the
    text. A later opening ``start2`` (right after a ``$``, so the escape pairs ``\\x`` are read alike from
    both) that lies before that event stops at the same event: the tokens in between are no events for any
    start before them. So the last event is kept and reused until an opening passes it.
    """

    def __init__(self, text: str):
        self.text = text
        self.event, self.answer = -1, -1  # no scan yet

    def __call__(self, start: int) -> int:
        text, n = self.text, len(self.text)
        if start >= n or text[start].isspace():
            return -1
        if self.event > start:
            return self.answer
        self.event, self.answer = n, -1
        position = start
        while (match := _DOLLAR_TOKEN.search(text, position)) is not None:
            index, token = match.start(), match.group()
            position = match.end()
            if token == "\n\n":
                self.event = index
                return -1
            if token == "$":
                if (
                    index > start
                    and not text[index - 1].isspace()
                    and not (index + 1 < n and text[index + 1].isdigit())
                ):
                    self.event, self.answer = index, index
                    return index
                if index + 1 < n and text[index + 1] == "$":
                    self.event = index
                    return -1  # a display-math delimiter cannot close inline math
        return -1


def _is_list_marker(text: str, sentence_start: int, dot: int) -> bool:
    """True when ``text[.. dot]`` is ``"1."``/``"a."``/``"iv."`` at the start of a line."""
    return _ListMarkers(text)(sentence_start, dot)


class _ListMarkers:
    """:func:`_is_list_marker` for dots that never move backwards, in linear time over all of them: the line's
    start is found from the previous dot's, and only the few characters a marker can have are looked at
    (before, each dot rescanned its whole line and sentence)."""

    _LONGEST = 6  # _LIST_MARKER matches at most 6 characters

    def __init__(self, text: str):
        self.text = text
        self.dot, self.line_start = 0, 0
        self.earlier_text_on_line: dict[int, bool] = {}  # sentence_start -> non-space before it on its line
        self.first_non_space: dict[int, int] = {}  # start -> the first non-space character from there on

    def _line_start(self, dot: int) -> int:
        newline = self.text.rfind("\n", self.dot, dot)
        if newline != -1:
            self.line_start = newline + 1
        self.dot = dot
        return self.line_start

    def __call__(self, sentence_start: int, dot: int) -> bool:
        text = self.text
        line_start = self._line_start(dot)
        if line_start < sentence_start:
            earlier = self.earlier_text_on_line.get(sentence_start)
            if earlier is None:
                index = sentence_start
                while index > line_start and text[index - 1].isspace():
                    index -= 1
                earlier = self.earlier_text_on_line[sentence_start] = index > line_start
            if earlier:
                return False  # the line began in an earlier sentence: the dot is not at the line start
        start = max(line_start, sentence_start)
        first = self.first_non_space.get(start)
        if first is None:
            first, n = start, len(text)
            while first < n and text[first].isspace():
                first += 1
            self.first_non_space[start] = first
        if first >= dot:
            return False  # nothing but spaces before the dot
        last = dot
        while last > first and text[last - 1].isspace():
            last -= 1
        # text[first:last] is text[start:dot].strip(): a marker only when short
        return last - first <= self._LONGEST and _LIST_MARKER.fullmatch(text[first:last]) is not None


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
    list_markers = _ListMarkers(text)
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
                    and (list_markers(sentence_start, i) or _is_abbreviation(text, i))
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
