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
from collections.abc import Sequence

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

    @staticmethod
    def can_read(problem: str) -> bool:
        """Whether ``problem`` is a code-world question.

        >>> RuleBasedCodeTeacher.can_read("Read an integer a from standard input and print a + 1.")
        True
        >>> RuleBasedCodeTeacher.can_read("Compute (7 + 5) * 3 - 4.")
        False
        """
        from hf_meds_cliff.toy.code_task import parse_code_question

        try:
            parse_code_question(problem)
        except (ValueError, TypeError):
            return False
        return True

    async def solve(self, problem: str) -> str | None:
        from hf_meds_cliff.toy.code_task import parse_code_question

        self.counters["solve_calls"] += 1
        try:
            return parse_code_question(problem).solution
        except (ValueError, TypeError) as error:
            self.counters["failures/parse_error"] += 1
            logger.warning("Rule-based code teacher cannot solve %r: %s", problem[:120], error)
            return None

    async def judge(self, problem: str, reference: str, sentences: Sequence[str]) -> Judgment:
        from hf_meds_cliff.toy.code_checker import UndecidableProgram, first_mistake_unit

        self.counters["judge_calls"] += 1
        units = list(sentences)
        if not units:
            self.counters["failures/empty"] += 1
            return Judgment(None, None, "empty", "empty rollout")
        spans, position = [], 0
        for unit in units:  # the units cover the rollout: their concatenation is the completion
            spans.append((position, position + len(unit)))
            position += len(unit)
        try:
            first_mistake = first_mistake_unit(problem, "".join(units), spans)
        except UndecidableProgram as undecidable:
            self.counters["failures/undecidable"] += 1
            return Judgment(None, None, "parse_error", f"undecidable program: {undecidable}")
        except (ValueError, TypeError) as error:
            self.counters["failures/parse_error"] += 1
            return Judgment(None, None, "parse_error", f"{type(error).__name__}: {error}")
        return Judgment(first_mistake, first_mistake is None, "ok", f"first_mistake_unit={first_mistake}")
