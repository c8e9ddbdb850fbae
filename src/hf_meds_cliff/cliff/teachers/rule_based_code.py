"""The code world's exact, free teacher: finds the first wrong program line of a code-world rollout.

The code world (:mod:`hf_meds_cliff.toy.code_task`) renders the toy arithmetic chains as stdin programs. This
teacher rebuilds the problem (chain and tests) from the prompt text, evaluates the student's program statement by
statement with the checker's pure evaluator (:func:`hf_meds_cliff.toy.code_checker.first_wrong_line`: model output
is parsed, never executed) against the chain's intermediate values on the tests, and reports the unit of the first
wrong line in the numbering of :func:`hf_meds_cliff.cliff.split_code_units` (the units it is given). So Cliff on
code runs end to end on CPU without any LLM.
"""

from __future__ import annotations

import logging

from .base import Judgment
from .rule_based import RuleBasedToyTeacher

logger = logging.getLogger(__name__)

__all__ = ["RuleBasedCodeTeacher"]


class RuleBasedCodeTeacher(RuleBasedToyTeacher):
    """Exact teacher for the code world.

    ``solve`` returns the worked completion (a sentence of prose and the reference program in a fenced block);
    ``judge`` returns the unit index of the first wrong program line (``first_mistake=None`` and verdict "correct"
    when there is none). ``status="parse_error"`` (counted in ``counters``) when the problem is not a code-world
    question or the program leaves the checker's vocabulary before any wrong line (the checker then cannot tell
    where it goes wrong, so it names no unit rather than guess); ``"empty"`` for a rollout without units.

    >>> import asyncio
    >>> from hf_meds_cliff.cliff import code_unit_texts
    >>> teacher = RuleBasedCodeTeacher()
    >>> q = "Read an integer a from standard input and print (a + 5) * 3."
    >>> rollout = "Read a, then apply 2 operations.\\n```python\\na = int(input())\\nx = a + 5\\nx = x * 2\\nprint(x)\\n```"
    >>> asyncio.run(teacher.judge(q, asyncio.run(teacher.solve(q)), code_unit_texts(rollout))).first_mistake
    3
    """

    name = "rule-based-code"
    domain = "code"  # the trainer refuses it on a math run

    _world = "code"
    _logger = logger

    @staticmethod
    def _parse(problem: str):
        from hf_meds_cliff.toy.code_task import parse_code_question

        return parse_code_question(problem)

    @classmethod
    def can_read(cls, problem: str) -> bool:
        """Whether ``problem`` is a code-world question.

        >>> RuleBasedCodeTeacher.can_read("Read an integer a from standard input and print a + 1.")
        True
        >>> RuleBasedCodeTeacher.can_read("Compute (7 + 5) * 3 - 4.")
        False
        """
        return super().can_read(problem)

    def _judge_units(self, problem: str, sentences: list[str]) -> Judgment:
        from hf_meds_cliff.toy.code_checker import UndecidableProgram, first_mistake_unit

        spans, position = [], 0
        for unit in sentences:  # the units cover the rollout: their concatenation is the completion
            spans.append((position, position + len(unit)))
            position += len(unit)
        try:
            first_mistake = first_mistake_unit(problem, "".join(sentences), spans)
        except UndecidableProgram as undecidable:
            self.counters["failures/undecidable"] += 1
            return Judgment(None, None, "parse_error", f"undecidable program: {undecidable}")
        except (ValueError, TypeError) as error:
            self.counters["failures/parse_error"] += 1
            return Judgment(None, None, "parse_error", f"{type(error).__name__}: {error}")
        return Judgment(first_mistake, first_mistake is None, "ok", f"first_mistake_unit={first_mistake}")
