"""Sentence segmentation of a rollout, as the Cliff teacher sees it numbered ``[0]``, ``[1]``, ...

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

__all__ = ["sentence_texts", "split_sentences"]

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


def _math_and_brace_mask(text: str) -> list[bool]:
    """``protected[i]`` is True when a sentence may not end right after character ``i``.

    Math regions protect every character but the last closing delimiter; brace groups protect their
    content and opening brace (so ``\\frac{1}{2}.`` still ends after the ``.``).
    """
    n = len(text)
    protected = [False] * n
    i = 0
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            nxt = text[i + 1]
            closer = {"[": "\\]", "(": "\\)"}.get(nxt)
            if closer is not None:
                end = text.find(closer, i + 2)
                if end != -1:
                    for k in range(i, end + 1):  # up to and including the backslash of the closer
                        protected[k] = True
                    i = end + 2
                    continue
            i += 2  # an escaped character (\$, \{, \\ ...) is literal
            continue
        if ch == "$":
            if text.startswith("$$", i):
                end = text.find("$$", i + 2)
                if end != -1:
                    for k in range(i, end + 1):
                        protected[k] = True
                    i = end + 2
                    continue
                i += 2
                continue
            end = _closing_dollar(text, i + 1)
            if end != -1:
                for k in range(i, end):
                    protected[k] = True
                i = end + 1
                continue
        i += 1

    # Balanced braces ("{...}" and "\\{...\\}") outside math; an unmatched or mismatched closer is ignored.
    stack: list[tuple[int, bool]] = []
    i = 0
    while i < n:
        ch = text[i]
        escaped = ch == "\\" and i + 1 < n and text[i + 1] in "{}"
        brace = text[i + 1] if escaped else ch
        if brace == "{" and (escaped or ch == "{"):
            stack.append((i, escaped))
        elif brace == "}" and (escaped or ch == "}") and stack and stack[-1][1] == escaped:
            start, _ = stack.pop()
            for k in range(start, i + 1 if escaped else i):  # "\\}" ends at its "}"
                protected[k] = True
        i += 2 if ch == "\\" else 1
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
    i = start
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "$":
            if i > start and not text[i - 1].isspace() and not (i + 1 < n and text[i + 1].isdigit()):
                return i
            if i + 1 < n and text[i + 1] == "$":
                return -1  # a display-math delimiter cannot close inline math
        elif ch == "\n" and text.startswith("\n", i + 1):
            return -1
        i += 1
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
    i = 0
    while i < n:
        ch = text[i]
        boundary = -1
        if protected[i]:
            i += 1
            continue
        if ch == "\n":
            boundary = i + 1
        elif ch in _TERMINATORS:
            j = i + 1
            while j < n and (text[j] in _TERMINATORS or text[j] in _CLOSERS):
                j += 1
            if j == n or text[j].isspace():
                is_exception = (
                    ch == "."
                    and j == i + 1
                    and (_is_list_marker(text, sentence_start, i) or _is_abbreviation(text, i))
                )
                if not is_exception:
                    boundary = j
            i = j - 1
        if boundary != -1:
            while boundary < n and text[boundary].isspace():
                boundary += 1
            ends.append(boundary)
            sentence_start = boundary
            i = boundary
            continue
        i += 1
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
