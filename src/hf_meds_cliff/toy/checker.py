"""Exact, rule-based first-mistake checker for toy completions (Cliff's free teacher on the toy task)."""

from __future__ import annotations

import re
from typing import Any

from ..sentences import split_sentences
from ..text import completion_text
from .task import ToyProblem, parse_question

_STEP_PATTERN = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*(-?\d+)\s*\.?")
_ANSWER_PATTERN = re.compile(r"The answer is\s*\\boxed\{\s*(-?\d+)\s*\}\s*\.?")


def first_mistake_index(question: str | ToyProblem, completion: Any) -> int | None:
    """Index of the first wrong sentence of a toy completion, or None when the whole completion is right.

    Sentences are the spans of :func:`hf_meds_cliff.cliff.split_sentences` (the numbering the Cliff teacher
    and trainer use); each is stripped of surrounding whitespace before checking. For a problem of ``n``
    operations ``a0 op1 b1 ... opn bn``, the expected completion is ``n`` step sentences and one answer
    sentence:

    * sentence ``k`` (``0 <= k < n``) must be exactly ``L op R = V`` with an optional final ``.`` (any spacing),
      where ``L`` is the previous step's correct result (``a0`` for ``k = 0``), ``op`` and ``R`` are the
      problem's ``k``-th operator and operand, and ``V`` is the correct result of ``L op R``. So a wrong
      result, a wrongly copied operand or operator, a skipped step, an extra step, a step stated in words,
      or gibberish all fail at that sentence;
    * sentence ``n`` must be exactly ``The answer is \\boxed{A}`` with an optional ``.``, ``A`` the answer;
    * no non-blank sentence may follow it (text after the boxed answer is a mistake at its sentence).

    The first sentence breaking a rule is the mistake. A completion that stops early (all its sentences
    right but steps or the answer missing) has its mistake at its **last** sentence, the one that should
    have gone on, so the index always names an existing sentence; an empty completion gives 0. A correct
    final answer reached through a wrong step is still a mistake at that step.

    Args:
        question: the problem text (parsed with :func:`~hf_meds_cliff.toy.parse_question`, which accepts the
            question followed by other text) or a :class:`~hf_meds_cliff.toy.ToyProblem`.
        completion: the completion text, or a TRL conversational completion (list of messages).

    >>> q = "Compute (7 + 5) * 3 - 4."
    >>> first_mistake_index(q, "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\\\boxed{32}.") is None
    True
    >>> first_mistake_index(q, "7 + 5 = 12. 12 * 3 = 35. 35 - 4 = 31. The answer is \\\\boxed{31}.")
    1
    """
    problem = question if isinstance(question, ToyProblem) else parse_question(question)
    text = completion_text(completion)
    sentences = [text[start:end].strip() for start, end in split_sentences(text)]
    if not sentences:
        return 0
    steps = problem.steps
    for index, step in enumerate(steps):
        if index >= len(sentences):
            return len(sentences) - 1
        match = _STEP_PATTERN.fullmatch(sentences[index])
        if match is None:
            return index
        left, op, right, result = (
            int(match.group(1)),
            match.group(2),
            int(match.group(3)),
            int(match.group(4)),
        )
        if (left, op, right, result) != (step.left, step.op, step.right, step.result):
            return index
    answer_index = len(steps)
    if answer_index >= len(sentences):
        return len(sentences) - 1
    match = _ANSWER_PATTERN.fullmatch(sentences[answer_index])
    if match is None or int(match.group(1)) != problem.answer:
        return answer_index
    for index in range(answer_index + 1, len(sentences)):
        if sentences[index]:
            return index
    return None
