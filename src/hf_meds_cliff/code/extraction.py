"""The program of a completion: its last fenced Python code block."""

from __future__ import annotations

# A block opens with a fence and an optional language tag ending its line, and closes at the next fence;
# fences may stand mid-line, as LiveCodeBench's and DeepCoder's extractors allow. Only Python (``python``,
# ``python3``, ``py``) and untagged blocks count.
#
# These are the matches of the regular expression
#     ```[ \t]*(?P<language>[A-Za-z0-9_+#.-]*)[^\n`]*\n(?P<code>.*?)```      (re.DOTALL, re.finditer)
# found by a scan that does linear work: the expression backtracks over every split of a fence line that
# cannot open a block (a fence followed by 49 KB of spaces took 9-15 s), and its lazy ``.*?`` rescans the
# rest of the text from every fence left unclosed. A fence at ``p`` opens a block when the rest of its line
# holds no backtick and ends with a newline, and some fence starts after that newline; the block's language
# is the longest run of tag characters after the fence's spaces and tabs, its code runs from after the
# newline to the first such fence. Failing at ``p``, the search goes on at ``p + 1`` (fences may overlap, as
# in four backticks); matching, it goes on after the closing fence.
_FENCE = "```"
_LANGUAGE_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+#.-")
_PYTHON_TAGS = {"", "python", "python3", "py", "py3"}


class _NextIndex:
    """``text.find(needle, start)`` for queries that never decrease, in linear time over all queries: an
    answer stays valid until a query passes it."""

    def __init__(self, text: str, needle: str):
        self.text, self.needle = text, needle
        self.answer = -2  # no query yet

    def __call__(self, start: int) -> int:
        if self.answer == -2 or (self.answer != -1 and self.answer < start):
            self.answer = self.text.find(self.needle, start)
        return self.answer


def _blocks(completion: str):
    """``(language, code)`` of every fenced block, in order (see the comment above)."""
    next_fence = _NextIndex(completion, _FENCE)
    next_newline = _NextIndex(completion, "\n")
    next_backtick = _NextIndex(completion, "`")
    closing = _NextIndex(completion, _FENCE)
    position = 0
    while (fence := next_fence(position)) != -1:
        header = fence + 3
        newline = next_newline(header)
        if newline == -1:
            return  # no later fence line can end with a newline either
        backtick = next_backtick(header)
        end = closing(newline + 1)
        if end == -1:
            return  # nor can any later fence line be closed
        if backtick != -1 and backtick < newline:
            position = fence + 1
            continue
        start = header
        while start < newline and completion[start] in " \t":
            start += 1
        stop = start
        while stop < newline and completion[stop] in _LANGUAGE_CHARACTERS:
            stop += 1
        yield completion[start:stop], completion[newline + 1 : end]
        position = end + 3


def extract_program(completion: str) -> str | None:
    """The last fenced code block of ``completion`` tagged ``python`` (``py``, ``python3``) or untagged;
    ``None`` when there is none (an unclosed block does not count: the completion was cut off). Linear time
    in the completion's length.

    >>> extract_program("Idea...\\n```python\\nprint(1)\\n```\\nBetter:\\n```\\nprint(2)\\n```")
    'print(2)\\n'
    >>> extract_program("```cpp\\nint main(){}\\n```") is None
    True
    >>> extract_program("no code") is None
    True
    """
    if not isinstance(completion, str):
        raise TypeError(f"extract_program takes the completion text, got {type(completion).__name__}")
    program = None
    for language, code in _blocks(completion):
        if language.lower() in _PYTHON_TAGS:
            program = code
    return program
