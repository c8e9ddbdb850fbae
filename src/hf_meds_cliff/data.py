"""Dataset helpers shared by the trainers, the scripts and the evaluation runner.

Prompt identity: MEDS keys its error memory and Cliff its reference/judgment caches by prompt.
A dataset id column wins when there is one; otherwise the prompt is hashed. The hash is over the
canonical JSON of the prompt (a string or a list of chat messages), so it is stable across
processes, runs and Python versions (unlike ``hash()``) and independent of any template.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

QWEN_MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""The Qwen-Math instruction appended to every problem in the papers' recipes."""


def prompt_key(prompt: Any) -> str:
    """Stable identity of a prompt: a hex digest of its canonical JSON.

    >>> prompt_key("Compute 1 + 2.") == prompt_key("Compute 1 + 2.")
    True
    >>> prompt_key([{"role": "user", "content": "a"}]) == prompt_key([{"content": "a", "role": "user"}])
    True
    >>> len(prompt_key("x"))
    16
    """
    canonical = json.dumps(prompt, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).hexdigest()


def prompt_keys(prompts: Sequence[Any], ids: Sequence[Any] | None = None) -> list[str]:
    """Identity of each prompt: ``str(id)`` when an id column is given, else :func:`prompt_key`.

    >>> prompt_keys(["a", "a", "b"]) [0] == prompt_keys(["a"])[0]
    True
    >>> prompt_keys(["a", "b"], ids=[7, 8])
    ['7', '8']
    """
    if ids is not None:
        if len(ids) != len(prompts):
            raise ValueError(f"Got {len(ids)} prompt ids for {len(prompts)} prompts; they must align one to one.")
        return [str(i) for i in ids]
    return [prompt_key(p) for p in prompts]


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
