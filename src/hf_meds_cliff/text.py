"""Text of TRL completions: the one helper that the dataset code, the rewards, the toy checker and the trainers
all need, kept in a module that imports nothing of the package, so none of them imports another to get it.

``hf_meds_cliff.data.completion_text`` (its previous home) still works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def completion_text(completion: Any) -> str:
    """Text of a TRL completion, which is a string or (conversational) a list of messages.

    >>> completion_text("x = 1")
    'x = 1'
    >>> completion_text([{"role": "assistant", "content": "x = 1"}])
    'x = 1'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and all(isinstance(m, dict) for m in completion):
        return "".join(str(m.get("content", "")) for m in completion)
    raise TypeError(
        f"Expected a completion string or a list of chat messages, got {type(completion).__name__}: {completion!r:.80}"
    )
