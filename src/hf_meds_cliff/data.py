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
            raise ValueError(
                f"Got {len(ids)} prompt ids for {len(prompts)} prompts; they must align one to one."
            )
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


PROMPT_TEMPLATES = ("qwen_math", "qwen_math_user", "plain", "keep")
"""How a problem becomes a chat prompt:

- ``qwen_math``: the Qwen-Math template of both papers, the instruction as the system message and the
  problem as the user message.
- ``qwen_math_user``: the problem followed by the instruction in one user message (for chat templates
  that have no system role).
- ``plain``: the problem alone as the user message.
- ``keep``: the dataset already has a ``prompt`` column (string or chat list); use it unchanged.
"""


def build_prompt(problem: str, template: str = "qwen_math") -> list[dict[str, str]]:
    """Chat prompt for ``problem`` under ``template`` (see :data:`PROMPT_TEMPLATES`).

    >>> build_prompt("1 + 1?", "plain")
    [{'role': 'user', 'content': '1 + 1?'}]
    >>> build_prompt("1 + 1?")[0]["role"]
    'system'
    """
    if template == "qwen_math":
        return [{"role": "system", "content": QWEN_MATH_INSTRUCTION}, {"role": "user", "content": problem}]
    if template == "qwen_math_user":
        return [{"role": "user", "content": f"{problem}\n{QWEN_MATH_INSTRUCTION}"}]
    if template == "plain":
        return [{"role": "user", "content": problem}]
    raise ValueError(f"Unknown prompt_template={template!r}; choose one of {PROMPT_TEMPLATES}.")


def prepare_math_dataset(
    dataset,
    *,
    problem_column: str = "problem",
    answer_column: str = "answer",
    answer_from_solution: bool = False,
    prompt_template: str = "qwen_math",
):
    """Map a math dataset to the columns the trainers read: ``prompt`` (chat list) and ``answer`` (str).

    Other columns (ids, metadata) are kept, so an id column stays available to the trainers.
    ``answer_from_solution=True`` takes the last ``\\boxed{}`` of ``answer_column`` (e.g. MATH's
    ``solution`` column). Rows left without an answer cannot be rewarded and are dropped.

    Raises ``ValueError`` naming the missing columns, the available ones and the flags that map them.
    """
    if prompt_template not in PROMPT_TEMPLATES:
        raise ValueError(f"Unknown prompt_template={prompt_template!r}; choose one of {PROMPT_TEMPLATES}.")
    columns = list(dataset.column_names)
    needed = [answer_column] + (["prompt"] if prompt_template == "keep" else [problem_column])
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ValueError(
            f"The dataset lacks the column(s) {missing}; it has {columns}. Map yours with "
            "`--problem_column <problem text column>` and `--answer_column <ground-truth column>` "
            "(add `--answer_from_solution true` when that column is a worked solution ending in \\boxed{...}, "
            "or `--prompt_template keep` when a ready `prompt` column should be used as it is)."
        )

    def to_answer(value) -> str | None:
        if isinstance(value, dict) and "ground_truth" in value:  # verl-style {"ground_truth": ...}
            value = value["ground_truth"]
        if answer_from_solution:
            from .rewards import extract_boxed_answer

            return extract_boxed_answer(str(value))
        return None if value is None else str(value).strip()

    def convert(row):
        out = {"answer": to_answer(row[answer_column])}
        if prompt_template != "keep":
            out["prompt"] = build_prompt(str(row[problem_column]), prompt_template)
        return out

    mapped = dataset.map(convert, desc="Preparing prompts")
    return mapped.filter(lambda row: row["answer"] not in (None, ""), desc="Dropping rows without an answer")
