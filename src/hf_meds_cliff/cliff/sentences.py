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
