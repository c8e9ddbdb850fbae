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


def problem_text(prompt: Any) -> str:
    """The problem a teacher sees: a plain prompt, or the content of the last user message of a chat prompt.

    >>> problem_text("Compute 1 + 2.")
    'Compute 1 + 2.'
    >>> problem_text([{"role": "system", "content": "s"}, {"role": "user", "content": "Compute 1 + 2."}])
    'Compute 1 + 2.'
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                content = message.get("content", "")
                if isinstance(content, str):
                    return content
                # multimodal content blocks: keep the text parts
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise TypeError(
        f"Cannot find the problem text in prompt {prompt!r:.120}; expected a string or chat messages."
    )


PROMPT_TEMPLATES = ("qwen_math", "qwen_math_user", "plain", "one_shot_boxed", "keep")
"""How a problem becomes a chat prompt:

- ``qwen_math``: the Qwen-Math template of both papers, the instruction as the system message and the
  problem as the user message.
- ``qwen_math_user``: the problem followed by the instruction in one user message (for chat templates
  that have no system role).
- ``plain``: the problem alone as the user message.
- ``one_shot_boxed``: one worked example turn (a user message, then an assistant message ending ``\\boxed{5}``)
  before the problem, each user message followed by "Put the final answer in \\boxed{}.": for small instruct
  models that write no box when only asked to (SmolLM2-135M-Instruct: 0 of 16 boxed zero-shot, 6 of 8 one-shot).
- ``keep``: the dataset already has a ``prompt`` column (string or chat list); use it unchanged.
"""


BOX_INSTRUCTION = "Put the final answer in \\boxed{}."
"""The instruction of the ``one_shot_boxed`` template, after each user message."""

ONE_SHOT_QUESTION = "Compute 3 + 2."
ONE_SHOT_SOLUTION = "3 + 2 = 5. The answer is \\boxed{5}."
"""The ``one_shot_boxed`` example: the toy world's solution format (one operation per sentence), so the rule-based
Cliff teacher can read what a model imitating it writes."""


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
    if template == "one_shot_boxed":
        return [
            {"role": "user", "content": f"{ONE_SHOT_QUESTION} {BOX_INSTRUCTION}"},
            {"role": "assistant", "content": ONE_SHOT_SOLUTION},
            {"role": "user", "content": f"{problem} {BOX_INSTRUCTION}"},
        ]
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


# ----------------------------------------------------------------------------------------------
# Code problems: prompts and training data (DeepCoder-Preview-Dataset and rows in the same schemas)

CODE_PROMPT_TEMPLATES = ("code", "code_system")
"""How a code problem becomes a chat prompt:

- ``code``: one user message: the problem, then what to write (a stdin program, or the starter code to complete, or
  the function to define) and that the answer's last fenced ```` ```python ```` block is the program.
- ``code_system``: the same instruction as a system message and the problem (with its starter code) as the user
  message.

The program graded is the last fenced code block of the completion (:func:`hf_meds_cliff.code.extract_program`).
"""

CODE_FENCE_INSTRUCTION = (
    "Give the complete solution in one fenced ```python code block at the end of your answer; only the last code "
    "block is run."
)
CODE_STDIN_INSTRUCTION = (
    "Write a Python 3 program that reads the input from standard input and prints the answer to standard output "
    "(do not hard-code the examples). " + CODE_FENCE_INSTRUCTION
)
CODE_STARTER_INSTRUCTION = (
    "Write the solution in Python 3 by completing the starter code below, keeping its class and function "
    "signatures; import what you use. " + CODE_FENCE_INSTRUCTION
)
CODE_FUNCTION_INSTRUCTION = (
    "Write the solution in Python 3 as a function named `{fn_name}` that takes the inputs as arguments and returns "
    "the answer; import what you use. " + CODE_FENCE_INSTRUCTION
)


def code_instruction(*, starter_code: str | None = None, fn_name: str | None = None) -> str:
    """What the model is asked to write: a stdin program, the starter code completed, or a function ``fn_name``.

    >>> code_instruction().startswith("Write a Python 3 program that reads the input from standard input")
    True
    >>> "`solve`" in code_instruction(fn_name="solve")
    True
    """
    if starter_code and starter_code.strip():
        return CODE_STARTER_INSTRUCTION
    if fn_name:
        return CODE_FUNCTION_INSTRUCTION.format(fn_name=fn_name)
    return CODE_STDIN_INSTRUCTION


def build_code_prompt(
    problem: str,
    *,
    starter_code: str | None = None,
    fn_name: str | None = None,
    template: str = "code",
) -> list[dict[str, str]]:
    """Chat prompt for a code ``problem`` under ``template`` (see :data:`CODE_PROMPT_TEMPLATES`).

    A non-empty ``starter_code`` is shown in a fenced block after the problem (functional problems such as
    LiveCodeBench's LeetCode ones or HumanEval); otherwise ``fn_name`` names the function to write, and without
    either the task is a stdin/stdout program.

    >>> prompt = build_code_prompt("Print the sum of two integers.")
    >>> [m["role"] for m in prompt], "standard input" in prompt[0]["content"]
    (['user'], True)
    >>> prompt = build_code_prompt("Add.", starter_code="def add(a, b):", template="code_system")
    >>> [m["role"] for m in prompt], prompt[1]["content"].endswith("```python\\ndef add(a, b):\\n```")
    (['system', 'user'], True)
    """
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"A code problem needs its statement text, got {problem!r:.80}.")
    body = problem.strip()
    if starter_code and starter_code.strip():
        body += f"\n\n```python\n{starter_code.strip()}\n```"
    instruction = code_instruction(starter_code=starter_code, fn_name=fn_name)
    if template == "code":
        return [{"role": "user", "content": f"{body}\n\n{instruction}"}]
    if template == "code_system":
        return [{"role": "system", "content": instruction}, {"role": "user", "content": body}]
    raise ValueError(f"Unknown code prompt template {template!r}; choose one of {CODE_PROMPT_TEMPLATES}.")


def json_object(value: Any, *, row: int | None = None, column: str = "metadata") -> dict[str, Any]:
    """A row's JSON-object column (DeepCoder's ``metadata`` is a JSON string; an object or null also works).

    >>> json_object('{"func_name": "solve"}'), json_object(None), json_object({"a": 1})
    ({'func_name': 'solve'}, {}, {'a': 1})
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            where = f"row {row}, " if row is not None else ""
            raise ValueError(
                f"{where}column {column!r} is not valid JSON ({error}): {value[:80]!r}"
            ) from error
    if not isinstance(value, dict):
        where = f"row {row}, " if row is not None else ""
        raise TypeError(f"{where}column {column!r} must be a JSON object, got {type(value).__name__}.")
    return value


DEEPCODER_CONFIGS = ("primeintellect", "taco", "lcbv5", "codeforces")
"""Configs of ``agentica-org/DeepCoder-Preview-Dataset``: ``primeintellect``, ``taco`` and ``lcbv5`` have train splits
(``lcbv5`` and ``codeforces`` test splits too)."""

LIVECODEBENCH_OVERLAP_WARNING = (
    "DeepCoder's `lcbv5` config holds LiveCodeBench problems (May 2023 to Feb 2025), which LiveCodeBench v6 "
    "(release_v6, and its v5 window) also contains: do not train on `lcbv5` when you report LiveCodeBench v5/v6 "
    "(train on `primeintellect` and `taco` only, or evaluate on a window after the training data)."
)


def code_function_name(tests: Any, metadata: Any = None, *, row: int | None = None) -> str | None:
    """The function a row's functional tests call: ``metadata["func_name"]`` (LiveCodeBench, DeepCoder's lcbv5),
    TACO's ``fn_name`` key, or PrimeIntellect's per-test ``fn_name``; ``None`` for stdin problems.

    >>> code_function_name('{"inputs": [[1]], "outputs": [[2]], "fn_name": "double"}')
    'double'
    >>> code_function_name('[{"type": "function_call", "fn_name": "f", "input": [1], "output": [2]}]')
    'f'
    >>> code_function_name('[{"input": "1\\\\n", "output": "2", "testtype": "stdin"}]', '{"func_name": null}') is None
    True
    """
    name = json_object(metadata, row=row).get("func_name")
    if name:
        return str(name)
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            return None  # reported with the row by the test parser
    if isinstance(tests, dict) and tests.get("fn_name"):
        return str(tests["fn_name"])
    if isinstance(tests, list):
        for case in tests:
            if isinstance(case, dict) and case.get("fn_name"):
                return str(case["fn_name"])
    return None


def prepare_code_dataset(
    dataset,
    *,
    problem_column: str = "problem",
    tests_column: str = "tests",
    prompt_template: str = "code",
    dataset_config: str | None = None,
    validate_tests: bool = True,
):
    """Map a code dataset (DeepCoder-Preview-Dataset rows, or rows in the same schemas) to the columns the code
    reward reads: ``prompt`` (chat list), ``tests`` (JSON string, as in the source) and ``fn_name`` (the function the
    functional tests call; ``None`` for stdin problems).

    The ``tests`` column may hold any format :func:`hf_meds_cliff.code.parse_tests` reads (PrimeIntellect
    ``[{"type": "stdin_stdout"|"function_call", "input", "output"}]``, TACO ``{"inputs", "outputs", "fn_name"?}``,
    LiveCodeBench ``[{"input", "output", "testtype"}]``, ...), as an object or a JSON string; the function name comes
    from ``metadata["func_name"]`` or the tests themselves, the starter code from ``starter_code`` (or
    ``metadata["starter_code"]``) and is shown in the prompt. ``prompt_template="keep"`` uses a ready ``prompt``
    column. Other columns are kept. With ``validate_tests`` every row's tests are parsed once here, so a malformed
    row stops loading with its row and field named instead of scoring 0 at some later step.

    ``dataset_config="lcbv5"``, or rows whose tests are in LiveCodeBench's ``testtype`` schema, log
    :data:`LIVECODEBENCH_OVERLAP_WARNING`: that data overlaps LiveCodeBench v5/v6.
    """
    if prompt_template not in (*CODE_PROMPT_TEMPLATES, "keep"):
        raise ValueError(
            f"Unknown prompt_template={prompt_template!r} for a code dataset; choose one of "
            f"{[*CODE_PROMPT_TEMPLATES, 'keep']}."
        )
    columns = list(dataset.column_names)
    source_column = "prompt" if prompt_template == "keep" else problem_column
    missing = [c for c in (source_column, tests_column) if c not in columns]
    if missing:
        raise ValueError(
            f"The code dataset lacks the column(s) {missing}; it has {columns}. Map yours with "
            "`--problem_column <problem statement column>` and `--tests_column <tests column>` (or "
            "`--prompt_template keep` when a ready `prompt` column should be used as it is)."
        )
    first_tests = dataset[0][tests_column] if len(dataset) else None
    if dataset_config == "lcbv5" or '"testtype"' in (
        first_tests if isinstance(first_tests, str) else json.dumps(first_tests, default=str)
    ):
        logger.warning(LIVECODEBENCH_OVERLAP_WARNING)
    if validate_tests:
        from .code import parse_tests

    def convert(row, index):
        raw_tests = row[tests_column]
        if raw_tests is None or (isinstance(raw_tests, (str, list, dict)) and not raw_tests):
            raise ValueError(
                f"Row {index}, column {tests_column!r}: no tests; a code problem without tests cannot be rewarded. "
                "Drop such rows before training."
            )
        metadata = row.get("metadata")
        fn_name = code_function_name(raw_tests, metadata, row=index)
        if validate_tests:
            parse_tests(raw_tests, fn_name=fn_name, row=index)  # raises naming the row and the field
        # New columns that then replace the source ones: a `tests` column of objects cannot take JSON text in place.
        out = {
            "_tests_json": raw_tests if isinstance(raw_tests, str) else json.dumps(raw_tests),
            "_fn_name": fn_name,
        }
        if prompt_template != "keep":
            problem = row[problem_column]
            if not isinstance(problem, str) or not problem.strip():
                raise ValueError(
                    f"Row {index}, column {problem_column!r}: no problem statement; drop the row or point "
                    "--problem_column at another column."
                )
            starter_code = row.get("starter_code") or json_object(metadata, row=index).get("starter_code")
            out["prompt"] = build_code_prompt(
                problem, starter_code=starter_code, fn_name=fn_name, template=prompt_template
            )
        return out

    mapped = dataset.map(convert, with_indices=True, desc="Preparing code prompts")
    replaced = {tests_column, "tests", "fn_name"} & set(columns)
    mapped = mapped.remove_columns(sorted(replaced))
    return mapped.rename_columns({"_tests_json": "tests", "_fn_name": "fn_name"})
