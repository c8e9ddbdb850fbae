"""Prompts for the Cliff teacher and a parser for its judgments that never raises.

Judging (spec "Protocol per training step", 3): the teacher gets the problem, a *verified*
reference solution and the rollout split into numbered sentences ``[0] ...``, and answers with its
reasoning followed by a JSON object::

    {"final_answer_correct": false, "first_mistake": 3}

with ``first_mistake = -1`` (or ``null``) when it finds no mistake. :func:`parse_judgment` reads
that object from free-form model output and gives every malformed answer a defined outcome and a
status (see :mod:`hf_meds_cliff.cliff.teachers.base` for what the trainer does with each).
"""

from __future__ import annotations

import ast
import json
import re
import statistics
from collections.abc import Sequence
from typing import Any

from ..data import QWEN_MATH_INSTRUCTION
from .agentic import is_agentic_units
from .teachers.base import Judgment

__all__ = [
    "AGENTIC_CODE_JUDGE_SYSTEM_PROMPT",
    "AGENTIC_JUDGE_SYSTEM_PROMPT",
    "CODE_INSTRUCTION",
    "CODE_JUDGE_SYSTEM_PROMPT",
    "DOMAINS",
    "JUDGE_NO_REFERENCE_SYSTEM_PROMPT",
    "JUDGE_SYSTEM_PROMPT",
    "NO_MISTAKE",
    "aggregate_judgments",
    "build_judge_messages",
    "build_solve_messages",
    "check_domain",
    "format_numbered_sentences",
    "format_numbered_units",
    "parse_judgment",
]

NO_MISTAKE = -1
"""The ``first_mistake`` value that means "no mistake" in the teacher's JSON."""

JUDGE_SYSTEM_PROMPT = """\
You are a meticulous grader of step-by-step math solutions. You receive a problem, a verified \
reference solution, and a student's solution split into numbered sentences [0], [1], [2], ...

Your task: decide whether the student's final answer is correct, and find the FIRST sentence that \
contains a genuine mistake (the "pitfall step").

Rules:
1. A final answer that matches the reference answer is correct unless the solution contains an \
irrefutable, fatal error.
2. Do not penalise a different but valid method, algebraically equivalent rewrites, or notation \
differences. The reference shows one correct route, not the only one.
3. Do not penalise a failed attempt or a slip that the student later notices and corrects; judge \
the reasoning the student finally relies on.
4. Reasoning that gets stuck, loops, repeats itself without progress, or degenerates into \
gibberish counts as a mistake at the sentence where it starts.
5. Mark only the first genuine mistake: an error in computation, logic, a false claim, a \
misreading of the problem, or an unjustified final answer. Later sentences that merely build on \
it do not matter.

First explain your reasoning briefly. Then end your reply with exactly one JSON object on its own \
line, with no text after it:
{"final_answer_correct": true or false, "first_mistake": <the id of the first sentence with a \
mistake, or -1 if there is no mistake>}"""

_JUDGE_USER_TEMPLATE = """\
## Problem
{problem}

## Verified reference solution
{reference}

## Student solution ({count} sentences, numbered from 0)
{numbered}

Find the first mistaken sentence of the student solution. Give your reasoning, then the JSON object \
{{"final_answer_correct": ..., "first_mistake": ...}} (first_mistake is a sentence id from 0 to \
{last}, or -1 if there is no mistake)."""


JUDGE_NO_REFERENCE_SYSTEM_PROMPT = """\
You are a meticulous grader of step-by-step math solutions. You receive a problem and a student's \
solution split into numbered steps [0], [1], [2], ... No reference solution is given: check every \
step yourself.

Your task: decide whether the student's final answer is correct, and find the FIRST step that \
contains a genuine mistake (the "pitfall step"), or say that there is none.

Rules:
1. Work the problem out yourself where needed; do not trust the student's claims.
2. Do not penalise a valid method, algebraically equivalent rewrites, or notation differences.
3. Do not penalise a failed attempt or a slip that the student later notices and corrects; judge \
the reasoning the student finally relies on.
4. Reasoning that gets stuck, loops, repeats itself without progress, or degenerates into \
gibberish counts as a mistake at the step where it starts.
5. Mark only the first genuine mistake: an error in computation, logic, a false claim, a \
misreading of the problem, or an unjustified final answer. Later steps that merely build on it do \
not matter. A solution without any mistake gets -1.

First explain your reasoning briefly. Then end your reply with exactly one JSON object on its own \
line, with no text after it:
{"final_answer_correct": true or false, "first_mistake": <the id of the first step with a \
mistake, or -1 if there is no mistake>}"""
"""The judge's system prompt when there is no reference solution (``build_judge_messages(problem, None, ...)``:
``hf-meds-cliff judge-eval`` on data without an answer column, such as ProcessBench). Same JSON reply and
parser as :data:`JUDGE_SYSTEM_PROMPT`."""

_JUDGE_NO_REFERENCE_USER_TEMPLATE = """\
## Problem
{problem}

## Student solution ({count} steps, numbered from 0)
{numbered}

Find the first mistaken step of the student solution, if any. Give your reasoning, then the JSON \
object {{"final_answer_correct": ..., "first_mistake": ...}} (first_mistake is a step id from 0 to \
{last}, or -1 if there is no mistake)."""


def format_numbered_sentences(sentences: Sequence[str]) -> str:
    """One line per sentence, ``[k] text`` (surrounding whitespace of each sentence stripped).

    >>> print(format_numbered_sentences(["7 + 5 = 12. ", "12 * 3 = 35."]))
    [0] 7 + 5 = 12.
    [1] 12 * 3 = 35.
    """
    return "\n".join(f"[{index}] {sentence.strip()}" for index, sentence in enumerate(sentences))


def build_judge_messages(
    problem: str,
    reference: str | None,
    sentences: Sequence[str],
    *,
    domain: str = "math",
    execution: str | None = None,
) -> list[dict[str, str]]:
    """Chat messages asking the teacher to judge ``sentences`` (a rollout) against ``reference``.

    ``reference=None`` asks for a judgment without a reference solution (its own prompt,
    :data:`JUDGE_NO_REFERENCE_SYSTEM_PROMPT`; same reply format): what ``hf-meds-cliff judge-eval`` sends for
    data that has no ground-truth answer, such as ProcessBench. Training always passes a verified reference.

    ``domain="code"`` gives the code judge (:data:`CODE_JUDGE_SYSTEM_PROMPT`; it needs the reference program):
    ``sentences`` are then the units of :func:`~hf_meds_cliff.cliff.split_code_units` and ``execution`` is what
    running the student's program showed (:func:`hf_meds_cliff.cliff.code_domain.describe_test_run`);
    ``execution`` is ignored on math.

    A tool-calling rollout (a unit is a ``[tool call]``, see :mod:`hf_meds_cliff.cliff.agentic`) gets the agentic
    form of the domain's prompt (:data:`AGENTIC_JUDGE_SYSTEM_PROMPT`, :data:`AGENTIC_CODE_JUDGE_SYSTEM_PROMPT`): the
    same rules, plus what a unit is and that a wrong action can be the first mistake and an environment reply never
    is. Every other rollout gets the single-turn prompt, unchanged.
    """
    check_domain(domain)
    if reference is not None and not isinstance(sentences, str) and is_agentic_units(sentences):
        _check_rollout_units(sentences, "split_agentic_rollout")
        return _build_agentic_judge_messages(problem, reference, sentences, domain, execution)
    if domain == "code":
        return _build_code_judge_messages(problem, reference, sentences, execution)
    for name, value in (("problem", problem), ("reference", reference)):
        if not isinstance(value, str) and not (name == "reference" and value is None):
            raise TypeError(f"`{name}` must be a str, got {type(value).__name__}: {value!r:.80}")
    _check_rollout_units(sentences, "split_sentences")
    if reference is None:
        user = _JUDGE_NO_REFERENCE_USER_TEMPLATE.format(
            problem=problem.strip(),
            count=len(sentences),
            numbered=format_numbered_sentences(sentences),
            last=len(sentences) - 1,
        )
        return [
            {"role": "system", "content": JUDGE_NO_REFERENCE_SYSTEM_PROMPT},
            {"role": "user", "content": user},
        ]
    user = _JUDGE_USER_TEMPLATE.format(
        problem=problem.strip(),
        reference=reference.strip(),
        count=len(sentences),
        numbered=format_numbered_sentences(sentences),
        last=len(sentences) - 1,
    )
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def build_solve_messages(problem: str, *, domain: str = "math") -> list[dict[str, str]]:
    """Chat messages asking the teacher to solve ``problem`` with the Qwen-Math instruction.

    ``domain="code"`` asks for a complete Python program in one fenced block instead (:data:`CODE_INSTRUCTION`);
    the reference filter then runs it on the row's tests.

    >>> build_solve_messages("Compute 1 + 2.")[0]["content"]
    'Compute 1 + 2.\\nPlease reason step by step, and put your final answer within \\\\boxed{}.'
    """
    if not isinstance(problem, str):
        raise TypeError(f"`problem` must be a str, got {type(problem).__name__}: {problem!r:.80}")
    check_domain(domain)
    content = problem.strip()
    if domain == "code":
        return [{"role": "system", "content": CODE_INSTRUCTION}, {"role": "user", "content": content}]
    if QWEN_MATH_INSTRUCTION not in content:
        content = f"{content}\n{QWEN_MATH_INSTRUCTION}"
    return [{"role": "user", "content": content}]


# --- code ------------------------------------------------------------------------------------------

DOMAINS = ("math", "code")
"""The task domains the Cliff judge has prompts for."""

CODE_INSTRUCTION = (
    "Solve the programming problem. Think about the algorithm first, then give a complete Python 3 program in "
    "one ```python code block. If the problem names a function (starter code), define that function; otherwise "
    "read the input from standard input and write the answer to standard output."
)
"""The teacher's instruction for writing a reference program (the reference filter runs it on the row's tests)."""

CODE_JUDGE_SYSTEM_PROMPT = """\
You are a meticulous reviewer of solutions to programming problems. You receive a problem, a verified \
reference program that passes all of the problem's tests, the student's answer split into numbered units \
[0], [1], [2], ... (each sentence of the explanation is one unit and each non-blank line of code is one unit), \
and the result of running the student's program on the tests.

Your task: decide whether the student's program is correct, and find the FIRST unit that contains a genuine \
mistake (the "pitfall step").

Rules:
1. A program that passes the tests is correct unless it contains an irrefutable, fatal error.
2. Do not penalise a different but valid algorithm, equivalent rewrites (other names, other loops, other \
library calls), or style. The reference shows one correct program, not the only one.
3. Do not penalise an attempt or a slip that the student later notices and corrects; judge the code and \
reasoning the student finally relies on.
4. Output that gets stuck, loops, repeats itself without progress, or degenerates into gibberish counts as a \
mistake at the unit where it starts.
5. Mark only the first genuine mistake. For code this is typically the first line whose logic is wrong: a \
wrong formula or condition, an off-by-one in a range, index or bound, a misread input or output format, a \
wrong data type or overflow, a missing case, or an algorithm whose complexity is too high for the limits (mark \
the line or sentence where that algorithm is chosen). A wrong claim in the explanation that the code then \
follows is the mistake. Later units that merely build on it do not matter.
6. Use the test result: the failing test's input, expected and actual output, or the error, point to the \
mistake; trace the program on that input to find the line where it first goes wrong.

First explain your reasoning briefly. Then end your reply with exactly one JSON object on its own line, with \
no text after it:
{"final_answer_correct": true or false, "first_mistake": <the id of the first unit with a mistake, or -1 if \
there is no mistake>}"""

_CODE_JUDGE_USER_TEMPLATE = """\
## Problem
{problem}

## Verified reference program
{reference}

## Student answer ({count} units, numbered from 0)
{numbered}

## Result of running the student's program
{execution}

Find the first mistaken unit of the student answer. Give your reasoning, then the JSON object \
{{"final_answer_correct": ..., "first_mistake": ...}} (first_mistake is a unit id from 0 to {last}, or -1 if \
there is no mistake)."""


def format_numbered_units(units: Sequence[str]) -> str:
    """One line per unit, ``[k] text``; code units keep their indentation (only line ends are stripped).

    >>> print(format_numbered_units(["Read n.\\n```python\\n", "for i in range(n):\\n", "    print(i)\\n```"]))
    [0] Read n.
    ```python
    [1] for i in range(n):
    [2]     print(i)
    ```
    """
    return "\n".join(f"[{index}] {unit.rstrip()}" for index, unit in enumerate(units))


def _check_rollout_units(units: Sequence[str], splitter: str) -> None:
    """``TypeError`` unless ``units`` (the judge's ``sentences`` argument) is a sequence of str, the texts of
    ``splitter(completion)``; ``ValueError`` when it is empty."""
    if isinstance(units, str) or not all(isinstance(u, str) for u in units):
        raise TypeError(
            f"`sentences` must be a sequence of str (the texts of `{splitter}(completion)`), "
            f"got {type(units).__name__}: {units!r:.80}"
        )
    if len(units) == 0:
        raise ValueError(
            "`sentences` is empty: an empty rollout cannot be judged (give it p(a) = 0 instead)."
        )


def check_domain(domain: str) -> None:
    """Raise ``ValueError`` unless ``domain`` is one the judge has prompts for (:data:`DOMAINS`)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain={domain!r} is unknown; use one of {list(DOMAINS)}.")


def _build_code_judge_messages(
    problem: str, reference: str, units: Sequence[str], execution: str | None
) -> list[dict[str, str]]:
    for name, value in (("problem", problem), ("reference", reference)):
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a str, got {type(value).__name__}: {value!r:.80}")
    if execution is not None and not isinstance(execution, str):
        raise TypeError(
            f"`execution` must be a str or None, got {type(execution).__name__}: {execution!r:.80}"
        )
    _check_rollout_units(units, "split_code_units")
    user = _CODE_JUDGE_USER_TEMPLATE.format(
        problem=problem.strip(),
        reference=reference.strip(),
        count=len(units),
        numbered=format_numbered_units(units),
        execution=(execution or "Not available: judge the program by reading it.").strip(),
        last=len(units) - 1,
    )
    return [{"role": "system", "content": CODE_JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


# --- agentic (tool-calling) rollouts -------------------------------------------------------------------

_AGENTIC_UNITS = """\
The student worked as an agent: it could call tools, and the environment answered each call. Its \
rollout is split into numbered units [0], [1], [2], ...: each sentence the student wrote is one unit, and \
each tool call (the tool's name and its arguments together) is one unit, shown as \
[tool call] name {arguments}. Under a tool call, lines marked [environment: name] show what the \
environment returned. They are not the student's work and have no id of their own."""

_AGENTIC_RULES = """\
Agentic rules:
A. The first mistake may be an action: calling the wrong tool (or a tool that does not exist), passing \
wrong arguments, or acting on a tool result wrongly (misreading it, copying a different value, or \
ignoring an error the environment reported). Mark the id of that tool call or sentence.
B. Never mark the environment's replies. If the environment returned an error or a surprising value, the \
mistake is the student's unit that caused it or that used it wrongly, not the reply.
C. A correct tool call whose result the student uses correctly is not a mistake, even when the step \
could have been done without a tool. Do not penalise an extra call that changes nothing the answer \
depends on."""

AGENTIC_JUDGE_SYSTEM_PROMPT = f"""\
You are a meticulous grader of step-by-step math solutions. You receive a problem, a verified \
reference solution, and a student's solution. {_AGENTIC_UNITS}

Your task: decide whether the student's final answer is correct, and find the FIRST unit that \
contains a genuine mistake (the "pitfall step").

Rules:
1. A final answer that matches the reference answer is correct unless the solution contains an \
irrefutable, fatal error.
2. Do not penalise a different but valid method, algebraically equivalent rewrites, or notation \
differences. The reference shows one correct route, not the only one.
3. Do not penalise a failed attempt or a slip that the student later notices and corrects; judge \
the reasoning the student finally relies on.
4. Reasoning or actions that get stuck, loop, repeat themselves without progress, or degenerate into \
gibberish count as a mistake at the unit where they start.
5. Mark only the first genuine mistake: an error in computation, logic, a false claim, a \
misreading of the problem, a wrong action, or an unjustified final answer. Later units that merely \
build on it do not matter.

{_AGENTIC_RULES}

First explain your reasoning briefly. Then end your reply with exactly one JSON object on its own \
line, with no text after it:
{{"final_answer_correct": true or false, "first_mistake": <the id of the first unit with a \
mistake, or -1 if there is no mistake>}}"""
"""The math judge's system prompt for a tool-calling rollout (chosen when a unit is a tool call)."""

AGENTIC_CODE_JUDGE_SYSTEM_PROMPT = f"""\
You are a meticulous reviewer of solutions to programming problems. You receive a problem, a verified \
reference program that passes all of the problem's tests, the student's answer, and the result of \
running the student's program on the tests. {_AGENTIC_UNITS} Each non-blank line of code the student \
wrote is one unit too.

Your task: decide whether the student's program is correct, and find the FIRST unit that contains a \
genuine mistake (the "pitfall step").

Rules:
1. A program that passes the tests is correct unless it contains an irrefutable, fatal error.
2. Do not penalise a different but valid algorithm, equivalent rewrites (other names, other loops, other \
library calls), or style. The reference shows one correct program, not the only one.
3. Do not penalise an attempt or a slip that the student later notices and corrects; judge the code, \
actions and reasoning the student finally relies on.
4. Output or actions that get stuck, loop, repeat themselves without progress, or degenerate into \
gibberish count as a mistake at the unit where they start.
5. Mark only the first genuine mistake: a wrong formula or condition, an off-by-one, a misread input or \
output format, a missing case, an algorithm too slow for the limits, a wrong claim the code then \
follows, or a wrong action. Later units that merely build on it do not matter.
6. Use the test result and what the environment returned (for example a program run through a tool): \
they point to the mistake; trace the program to find the unit where it first goes wrong.

{_AGENTIC_RULES}

First explain your reasoning briefly. Then end your reply with exactly one JSON object on its own line, \
with no text after it:
{{"final_answer_correct": true or false, "first_mistake": <the id of the first unit with a mistake, or -1 \
if there is no mistake>}}"""
"""The code judge's system prompt for a tool-calling rollout (chosen when a unit is a tool call)."""

_AGENTIC_JUDGE_USER_TEMPLATE = """\
## Problem
{problem}

## Verified reference solution
{reference}

## Student rollout ({count} units, numbered from 0; environment replies are not units)
{numbered}

Find the first mistaken unit (sentence or tool call) of the student rollout. Give your reasoning, then \
the JSON object {{"final_answer_correct": ..., "first_mistake": ...}} (first_mistake is a unit id from 0 \
to {last}, or -1 if there is no mistake)."""

_AGENTIC_CODE_JUDGE_USER_TEMPLATE = """\
## Problem
{problem}

## Verified reference program
{reference}

## Student rollout ({count} units, numbered from 0; environment replies are not units)
{numbered}

## Result of running the student's program
{execution}

Find the first mistaken unit (sentence, line of code or tool call) of the student rollout. Give your \
reasoning, then the JSON object {{"final_answer_correct": ..., "first_mistake": ...}} (first_mistake is a \
unit id from 0 to {last}, or -1 if there is no mistake)."""


def _build_agentic_judge_messages(
    problem: str, reference: str, units: Sequence[str], domain: str, execution: str | None
) -> list[dict[str, str]]:
    """The judge's messages for a tool-calling rollout (units of :func:`~hf_meds_cliff.cliff.agentic.split_agentic_rollout`)."""
    for name, value in (("problem", problem), ("reference", reference)):
        if not isinstance(value, str):
            raise TypeError(f"`{name}` must be a str, got {type(value).__name__}: {value!r:.80}")
    values = {
        "problem": problem.strip(),
        "reference": reference.strip(),
        "count": len(units),
        "numbered": format_numbered_units(units),
        "last": len(units) - 1,
    }
    if domain == "code":
        values["execution"] = (execution or "Not available: judge the program by reading it.").strip()
        system, user = AGENTIC_CODE_JUDGE_SYSTEM_PROMPT, _AGENTIC_CODE_JUDGE_USER_TEMPLATE.format(**values)
    else:
        system, user = AGENTIC_JUDGE_SYSTEM_PROMPT, _AGENTIC_JUDGE_USER_TEMPLATE.format(**values)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# --- parsing -----------------------------------------------------------------------------------

_MISTAKE_KEYS = (
    "first_mistake",
    "first_mistake_id",
    "first_mistake_index",
    "first_mistake_step",
    "first_error",
    "first_error_id",
    "mistake_id",
    "mistake",
    "pitfall",
    "pitfall_step",
    "first_incorrect_sentence",
)
_VERDICT_KEYS = (
    "final_answer_correct",
    "correct",
    "is_correct",
    "verdict",
    "answer_correct",
    "final_correct",
)
_NO_MISTAKE_WORDS = frozenset(
    {"", "none", "null", "nil", "n/a", "na", "no mistake", "no_mistake", "no error", "-1"}
)
_TRUE_WORDS = frozenset({"true", "yes", "correct", "right", "1"})
_FALSE_WORDS = frozenset({"false", "no", "incorrect", "wrong", "0"})
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_FIELD_PATTERN = re.compile(
    r"[\"']?(?P<key>" + "|".join(_MISTAKE_KEYS + _VERDICT_KEYS) + r")[\"']?\s*[:=]\s*"
    r"(?P<value>-?\d+|true|false|null|none|\"[^\"]*\"|'[^']*')",
    re.IGNORECASE,
)


def _balanced_objects(text: str) -> list[str]:
    """Top-level ``{...}`` substrings of ``text`` in order (braces inside double-quoted strings ignored)."""
    objects: list[str] = []
    depth = 0
    start = -1
    in_string = False
    escaped = False
    for index, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"' or ch == "\n":
                in_string = (
                    False  # a newline ends a broken string so that one stray quote cannot swallow the rest
                )
            continue
        if ch == '"' and depth > 0:
            in_string = True
        elif ch == "{":
            if depth == 0:
                start = index
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                objects.append(text[start : index + 1])
    return objects


def _load_object(candidate: str) -> dict[str, Any] | None:
    """``candidate`` as a dict, repairing trailing commas, single quotes and Python literals."""
    attempts = [candidate, _TRAILING_COMMA.sub(r"\1", candidate)]
    for attempt in attempts:
        try:
            value = json.loads(attempt)
        except (json.JSONDecodeError, RecursionError):
            continue
        return value if isinstance(value, dict) else None
    pythonic = re.sub(
        r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", attempts[1]))
    )
    try:
        value = ast.literal_eval(pythonic)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _lookup(obj: dict[str, Any], keys: Sequence[str]) -> tuple[bool, Any]:
    normalised = {str(k).strip().lower().replace(" ", "_").replace("-", "_"): v for k, v in obj.items()}
    for key in keys:
        if key in normalised:
            return True, normalised[key]
    return False, None


def _parse_verdict(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().strip(".").lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def _parse_mistake(value: Any) -> tuple[str, int | None]:
    """``("ok", id)``, ``("ok", None)`` for "no mistake", or ``("invalid_field", None)``."""
    if value is None or isinstance(value, bool):
        return ("ok", None) if value is None or value is False else ("invalid_field", None)
    if isinstance(value, float):
        if not value.is_integer():
            return "invalid_field", None
        value = int(value)
    if isinstance(value, int):
        return ("ok", None) if value == NO_MISTAKE else ("ok", value)
    if isinstance(value, list) and len(value) == 1:
        return _parse_mistake(value[0])
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _NO_MISTAKE_WORDS:
            return "ok", None
        match = re.fullmatch(r"(?:sentence|step)?\s*\[?\s*(-?\d+)\s*\]?", word)
        if match:
            return _parse_mistake(int(match.group(1)))
    return "invalid_field", None


def _judgment_from_fields(
    has_mistake: bool, mistake_value: Any, has_verdict: bool, verdict_value: Any, num_sentences: int, raw: str
) -> Judgment:
    verdict = _parse_verdict(verdict_value) if has_verdict else None
    if not has_mistake:
        return Judgment(None, verdict, "missing_field", raw)
    status, first_mistake = _parse_mistake(mistake_value)
    if status != "ok":
        return Judgment(None, verdict, status, raw)
    if first_mistake is not None and not 0 <= first_mistake < num_sentences:
        return Judgment(None, verdict, "out_of_range", raw)
    return Judgment(first_mistake, verdict, "ok", raw)


def parse_judgment(text: Any, num_sentences: int) -> Judgment:
    """Read the verdict and the first-mistake id from a teacher's answer; never raises on the answer.

    The last JSON object that has a first-mistake or verdict field wins (the answer may hold several:
    drafts in the reasoning, then the final one); a reply after ``</think>`` is preferred over the
    thinking. Repairs: code fences, text before/after, trailing commas, single quotes, Python
    literals, ids as strings (``"3"``, ``"[3]"``, ``"step 3"``), aliases of the field names. Without
    any parsable object, ``"first_mistake": 3``-style fields are read by a regular expression.

    Outcomes: ``ok`` (``first_mistake`` None means "no mistake": -1, null, "none"), ``empty``,
    ``parse_error`` (nothing readable), ``missing_field`` (an object without a first-mistake field;
    its verdict is kept), ``invalid_field`` (e.g. ``"first_mistake": "two"`` or 2.5),
    ``out_of_range`` (id < -1 or >= ``num_sentences``).

    >>> parse_judgment('Sentence [2] is wrong.\\n```json\\n{"final_answer_correct": false, "first_mistake": 2,}\\n```', 4)
    Judgment(first_mistake=2, verdict_correct=False, status='ok', raw='...')
    >>> parse_judgment('{"final_answer_correct": true, "first_mistake": -1}', 4).first_mistake is None
    True
    >>> parse_judgment("I think step 9 is wrong.", 4).status
    'parse_error'
    """
    if isinstance(num_sentences, bool) or not isinstance(num_sentences, int) or num_sentences < 0:
        raise ValueError(f"`num_sentences` must be a non-negative int, got {num_sentences!r}.")
    raw = text if isinstance(text, str) else ("" if text is None else repr(text))
    if not isinstance(text, str) or not text.strip():
        return Judgment(None, None, "empty", raw)

    regions = [text]
    if "</think>" in text:
        regions.insert(0, text.rsplit("</think>", 1)[1])
    first_without_fields: dict[str, Any] | None = None
    for region in regions:
        for candidate in reversed(_balanced_objects(region)):
            obj = _load_object(candidate)
            if obj is None:
                continue
            has_mistake, mistake_value = _lookup(obj, _MISTAKE_KEYS)
            has_verdict, verdict_value = _lookup(obj, _VERDICT_KEYS)
            if has_mistake or has_verdict:
                return _judgment_from_fields(
                    has_mistake, mistake_value, has_verdict, verdict_value, num_sentences, raw
                )
            if first_without_fields is None:
                first_without_fields = obj
        # No usable object: last resort, "key": value pairs anywhere (e.g. an unterminated object).
        fields: dict[str, Any] = {}
        for match in _FIELD_PATTERN.finditer(region):
            value = match.group("value")
            lowered = value.lower()
            if lowered in ("null", "none"):
                parsed: Any = None
            elif lowered in ("true", "false"):
                parsed = lowered == "true"
            elif value[0] in "\"'":
                parsed = value[1:-1]
            else:
                parsed = int(value)
            fields[match.group("key").lower()] = parsed  # later matches win
        has_mistake, mistake_value = _lookup(fields, _MISTAKE_KEYS)
        has_verdict, verdict_value = _lookup(fields, _VERDICT_KEYS)
        if has_mistake or has_verdict:
            return _judgment_from_fields(
                has_mistake, mistake_value, has_verdict, verdict_value, num_sentences, raw
            )
    if first_without_fields is not None:
        return Judgment(None, None, "missing_field", raw)
    return Judgment(None, None, "parse_error", raw)


def aggregate_judgments(judgments: Sequence[Judgment]) -> tuple[Judgment, float]:
    """Self-consistency: combine k judgments of one rollout into one, with an agreement score.

    Uses the ``ok`` judgments only. The first mistake is the lower median of the located mistakes
    when most ``ok`` judgments locate one (else ``None`` = no mistake); the verdict is the majority
    (ties -> ``None``). Agreement is the share of ``ok`` judgments within one sentence of the chosen
    index (or, for "no mistake", also saying no mistake). Without any ``ok`` judgment the first
    endpoint failure is returned if any (so the group still falls back to GRPO), else the first one.

    Returns:
        ``(judgment, agreement)`` with agreement in ``[0, 1]``.

    >>> ok = [Judgment(2, False, "ok"), Judgment(3, False, "ok"), Judgment(7, False, "ok")]
    >>> aggregate_judgments(ok)
    (Judgment(first_mistake=3, verdict_correct=False, status='ok', raw=''), 0.666...)
    """
    if len(judgments) == 0:
        raise ValueError("aggregate_judgments needs at least one judgment.")
    usable = [j for j in judgments if j.ok]
    if not usable:
        from .teachers.base import is_endpoint_failure

        failures = [j for j in judgments if is_endpoint_failure(j)]
        return (failures or list(judgments))[0], 0.0
    located = [j.first_mistake for j in usable if j.first_mistake is not None]
    if len(located) * 2 > len(usable):
        first_mistake: int | None = int(statistics.median_low(located))
        agreeing = sum(
            1 for j in usable if j.first_mistake is not None and abs(j.first_mistake - first_mistake) <= 1
        )
    else:
        first_mistake = None
        agreeing = len(usable) - len(located)
    votes = [j.verdict_correct for j in usable if j.verdict_correct is not None]
    yes, no = votes.count(True), votes.count(False)
    verdict = True if yes > no else False if no > yes else None
    raw = "\n\n---\n\n".join(j.raw for j in usable if j.raw)
    return Judgment(first_mistake, verdict, "ok", raw), agreeing / len(usable)
