"""The toy world's exact, free teacher: recomputes the arithmetic chain and finds the first wrong step.

The spec names rule-based pitfall detectors as future work for tasks whose steps can be checked
mechanically; on the toy task (``"Compute (7 + 5) * 3 - 4."``) they are exact, so the Cliff trainer
runs end to end on CPU without any LLM. The toy world's ``parse_question`` and
``first_mistake_index`` are imported on first use.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from .base import Judgment

logger = logging.getLogger(__name__)

__all__ = ["RuleBasedToyTeacher"]


def _join_sentences(sentences: Sequence[str]) -> str:
    """The completion text back from its sentences (re-inserting a space if they were stripped)."""
    parts = [
        s if s[-1:].isspace() or index == len(sentences) - 1 else s + " " for index, s in enumerate(sentences)
    ]
    return "".join(parts)


class RuleBasedToyTeacher:
    """Exact teacher for the toy world.

    ``solve`` returns the worked solution of the question; ``judge`` returns the index of the first
    sentence that deviates from the correct chain (``first_mistake_index``), the verdict "correct"
    when there is none, and ``status="parse_error"`` (counted) when the problem is not a toy question.
    """

    name = "rule-based-toy"

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    _world = "toy"  # the log line of a problem the teacher cannot solve names the world
    _logger = logger  # ... and goes to the teacher module's logger

    @staticmethod
    def _parse(problem: str):
        """The parsed question (with its ``solution``); ``ValueError``/``TypeError`` when it is not one."""
        from hf_meds_cliff.toy import parse_question

        return parse_question(problem)

    @classmethod
    def can_read(cls, problem: str) -> bool:
        """Whether ``problem`` is a toy question this teacher can solve and judge.

        >>> RuleBasedToyTeacher.can_read("Compute (7 + 5) * 3 - 4."), RuleBasedToyTeacher.can_read("Solve x^2 = 4.")
        (True, False)
        """
        try:
            cls._parse(problem)
        except (ValueError, TypeError):
            return False
        return True

    async def solve(self, problem: str) -> str | None:
        self.counters["solve_calls"] += 1
        try:
            return self._parse(problem).solution
        except (ValueError, TypeError) as error:
            self.counters["failures/parse_error"] += 1
            self._logger.warning(
                "Rule-based %s teacher cannot solve %r: %s", self._world, problem[:120], error
            )
            return None

    async def judge(self, problem: str, reference: str, sentences: Sequence[str]) -> Judgment:
        self.counters["judge_calls"] += 1
        units = list(sentences)
        if not units:  # nothing to judge: no request, the rollout stays a plain GRPO negative
            self.counters["failures/empty"] += 1
            return Judgment(None, None, "empty", "empty rollout")
        return self._judge_units(problem, units)

    def _judge_units(self, problem: str, sentences: list[str]) -> Judgment:
        """The judgment of a non-empty rollout (``judge`` has counted the call); a tool-calling rollout (a unit is a
        tool call) is judged by :func:`hf_meds_cliff.toy.agentic.first_wrong_action`, the calculator world's rule."""
        from hf_meds_cliff.toy import first_mistake_index

        from ..agentic import is_agentic_units

        try:
            if is_agentic_units(sentences):
                from hf_meds_cliff.toy.agentic import first_wrong_action

                first_mistake = first_wrong_action(problem, sentences)
            else:
                first_mistake = first_mistake_index(problem, _join_sentences(sentences))
        except (ValueError, TypeError) as error:
            self.counters["failures/parse_error"] += 1
            return Judgment(None, None, "parse_error", f"{type(error).__name__}: {error}")
        if first_mistake is not None and not 0 <= first_mistake < len(sentences):
            self.counters["failures/out_of_range"] += 1
            return Judgment(None, None, "out_of_range", f"first_mistake_index={first_mistake}")
        return Judgment(first_mistake, first_mistake is None, "ok", f"first_mistake_index={first_mistake}")

    async def aclose(self) -> None:
        return None
