"""The program of a completion: its last fenced Python code block."""

from __future__ import annotations

import re

# A block opens with a fence and an optional language tag ending its line, and closes at the next fence;
# fences may stand mid-line, as LiveCodeBench's and DeepCoder's extractors allow. Only Python (``python``,
# ``python3``, ``py``) and untagged blocks count.
_FENCE = re.compile(r"```[ \t]*(?P<language>[A-Za-z0-9_+#.-]*)[^\n`]*\n(?P<code>.*?)```", re.DOTALL)
_PYTHON_TAGS = {"", "python", "python3", "py", "py3"}


def extract_program(completion: str) -> str | None:
    """The last fenced code block of ``completion`` tagged ``python`` (``py``, ``python3``) or untagged;
    ``None`` when there is none (an unclosed block does not count: the completion was cut off).

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
    for match in _FENCE.finditer(completion):
        if match.group("language").lower() in _PYTHON_TAGS:
            program = match.group("code")
    return program
