"""Dataset helpers shared by the trainers, the scripts and the evaluation runner.

Prompt identity: MEDS keys its error memory and Cliff its reference/judgment caches by prompt.
A dataset id column wins when there is one; otherwise the prompt is hashed. The hash is over the
canonical JSON of the prompt (a string or a list of chat messages), so it is stable across
processes, runs and Python versions (unlike ``hash()``) and independent of any template.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

from .rewards.extraction import extract_boxed_answer
from .text import completion_text  # noqa: F401 - re-exported from its previous home (hf_meds_cliff.text)

logger = logging.getLogger(__name__)

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


def answer_text(value: Any) -> str | None:
    """A ground truth as text the answer checker compares: strings stripped, numbers as written, a list of
    scalars joined by ``", "`` (``[24, 0]`` -> ``"24, 0"``), verl-style ``{"ground_truth": ...}`` unwrapped;
    ``None`` for a missing value. Other types (nested lists, other dicts, booleans) raise ``TypeError``, NaN and
    infinities ``ValueError``.

    >>> [answer_text(v) for v in (" 7 ", 7, 2.5, [24, 0], {"ground_truth": "x"}, None)]
    ['7', '7', '2.5', '24, 0', 'x', None]
    """
    if isinstance(value, dict) and "ground_truth" in value:
        value = value["ground_truth"]
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        raise TypeError(f"a boolean ({value!r}) is not a math answer")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a math answer")
        return str(value)
    if isinstance(value, (list, tuple)):
        parts = []
        for item in value:
            if isinstance(item, (list, tuple, dict)) or item is None:
                raise TypeError(f"a nested or incomplete list ({value!r:.80}) has no comparable text form")
            parts.append(answer_text(item))
        return ", ".join(parts)
    raise TypeError(f"a {type(value).__name__} ({value!r:.80}) is not a math answer")


_EXAMPLES_SHOWN = 3


def _log_dropped(reasons: list[str | None], problems: list[Any], total: int) -> None:
    """One warning per drop reason: how many rows and the first few (row index and problem text)."""
    by_reason: dict[str, list[int]] = {}
    for index, reason in enumerate(reasons):
        if reason is not None:
            by_reason.setdefault(reason, []).append(index)
    for reason, rows in by_reason.items():
        examples = "; ".join(f"row {i}: {str(problems[i])[:60]!r}" for i in rows[:_EXAMPLES_SHOWN])
        logger.warning("Dropped %d of %d rows: %s (e.g. %s).", len(rows), total, reason, examples)


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
    ``solution`` column). Answers are turned into text with :func:`answer_text` (numbers and lists of
    numbers included). Rows left without an answer cannot be rewarded: they are dropped, and a warning says
    how many for each reason with examples.

    Raises ``ValueError`` naming the missing columns, the available ones and the flags that map them; the
    rows whose problem is null or empty; or the row and column of an answer with no text form.
    """
    if prompt_template not in PROMPT_TEMPLATES:
        raise ValueError(f"Unknown prompt_template={prompt_template!r}; choose one of {PROMPT_TEMPLATES}.")
    columns = list(dataset.column_names)
    source_column = "prompt" if prompt_template == "keep" else problem_column
    needed = [answer_column, source_column]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ValueError(
            f"The dataset lacks the column(s) {missing}; it has {columns}. Map yours with "
            "`--problem_column <problem text column>` and `--answer_column <ground-truth column>` "
            "(add `--answer_from_solution true` when that column is a worked solution ending in \\boxed{...}, "
            "or `--prompt_template keep` when a ready `prompt` column should be used as it is)."
        )
    problems = dataset[source_column]
    empty = [i for i, p in enumerate(problems) if p is None or (isinstance(p, str) and not p.strip())]
    if empty:
        raise ValueError(
            f"{len(empty)} row(s) of column {source_column!r} have no problem text (null or empty), e.g. rows "
            f"{empty[:10]}; a prompt cannot be built from them. Drop them from the dataset (e.g. "
            f"`dataset.filter(lambda row: row[{source_column!r}])`) or point --problem_column at another column."
        )

    def convert(row, index):
        try:
            answer = answer_text(row[answer_column])
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"Row {index}, column {answer_column!r}: {error}. Fix that row (the ground truth must be text, "
                "a number or a flat list of them) or drop it before training."
            ) from error
        reason = None
        if answer_from_solution:
            answer = extract_boxed_answer(answer) if answer else None
            if answer is None:
                reason = f"no \\boxed{{}} answer in the solution column {answer_column!r}"
        elif not answer:
            reason = f"missing or empty answer in column {answer_column!r}"
        out = {"_answer_text": answer, "_drop_reason": reason}
        if prompt_template != "keep":
            out["prompt"] = build_prompt(str(row[problem_column]), prompt_template)
        return out

    mapped = dataset.map(convert, with_indices=True, desc="Preparing prompts")
    reasons = mapped["_drop_reason"]
    _log_dropped(reasons, problems, len(reasons))
    kept = [i for i, reason in enumerate(reasons) if reason is None]
    # A mixed-type answer column loads as a `Json` feature, which would decode "24" back into 24 if the text were
    # written into it: the text goes into a new string column that then replaces it.
    mapped = mapped.remove_columns(["_drop_reason", *(["answer"] if "answer" in columns else [])])
    mapped = mapped.rename_column("_answer_text", "answer")
    return mapped if len(kept) == len(reasons) else mapped.select(kept)


def warn_long_prompts(dataset, tokenizer, max_prompt_tokens: int | None) -> list[int]:
    """Warn (count, longest examples) about prompts longer than ``max_prompt_tokens`` tokens after the chat
    template; returns their row indices. TRL does not truncate prompts, so one very long prompt slows a whole
    generation batch (and may not fit in memory)."""
    if max_prompt_tokens is None or "prompt" not in dataset.column_names:
        return []

    def model_input(prompt) -> str:  # what TRL feeds the model: the chat template for conversational prompts
        if isinstance(prompt, str):
            return prompt
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(str(message.get("content", "")) for message in prompt)

    texts = [model_input(prompt) for prompt in dataset["prompt"]]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    long_rows = [i for i, length in enumerate(lengths) if length > max_prompt_tokens]
    if long_rows:
        longest = sorted(long_rows, key=lambda i: -lengths[i])[:_EXAMPLES_SHOWN]
        logger.warning(
            "%d of %d prompts are longer than max_prompt_tokens=%d tokens (longest: %s); TRL does not truncate "
            "them, so they slow every generation batch they are in. Filter them out or raise --max_prompt_tokens.",
            len(long_rows),
            len(lengths),
            max_prompt_tokens,
            ", ".join(f"row {i}: {lengths[i]} tokens" for i in longest),
        )
    return long_rows
