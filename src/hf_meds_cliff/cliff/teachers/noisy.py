"""A teacher with a stated error profile: another teacher's verdicts flipped at fixed rates (a simulated teacher).

For studies that need an imperfect teacher whose errors are known, e.g. the SmolLM2 study's simulated teacher
(``docs/real_model_study.md``): the exact rule teacher with the false-negative and false-positive rates the Cliff
paper reports for its LLM teachers. Flips are independent per distinct rollout text and deterministic: a hash of
(``seed``, problem, rollout text) gives the uniform number, so a resumed run, a repeated rollout or a cached judgment
sees the same verdict, and identical rollouts of one group (common for a small policy) flip together.

Counters (``counters``; the Cliff trainer logs them as ``cliff/teacher/<name>``), all per ``judge`` call with an
``ok`` judgment: ``inner_said_right`` and ``inner_said_wrong`` (the wrapped teacher's verdict), ``flipped_to_right``
(of the ``inner_said_wrong`` calls) and ``flipped_to_wrong`` (of the ``inner_said_right`` calls), so the realised
rates are ``flipped_to_right / inner_said_wrong`` and ``flipped_to_wrong / inner_said_right``. A flip is measured
against the **wrapped teacher**, never against the verifier: the exact rule teacher also grades the steps and the
format, so it calls some verifier-right rollouts wrong (``"So the answer is \\boxed{10}."``, a skipped step, text
after the box); flipping such a verdict to right makes teacher and verifier *agree*. Under
``cliff_outcome="teacher"``, where verifier-right rollouts are judged too, ``flipped_to_right`` is therefore not
``cliff/teacher_says_right_verifier_wrong``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence

from .base import Judgment, Teacher

__all__ = ["NoisyTeacher", "flip_draw"]


def flip_draw(seed: int, problem: str, rollout: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, problem, rollout).

    >>> flip_draw(0, "Compute 1 + 2.", "1 + 2 = 3.") == flip_draw(0, "Compute 1 + 2.", "1 + 2 = 3.")
    True
    >>> flip_draw(0, "p", "a") != flip_draw(1, "p", "a")
    True
    """
    digest = hashlib.blake2b(f"{seed}\x00{problem}\x00{rollout}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class NoisyTeacher:
    """``inner``'s judgments, flipped at stated rates: a rollout ``inner`` calls wrong is called right ("no
    mistake") with probability ``false_negative_rate``; one it calls right is called wrong (first mistake at unit 0)
    with probability ``false_positive_rate``. ``solve`` and failed judgments pass through unchanged.

    >>> import asyncio
    >>> class Exact:
    ...     name = "exact"
    ...     async def judge(self, problem, reference, sentences):
    ...         return Judgment(1, False, "ok")
    >>> always = NoisyTeacher(Exact(), false_negative_rate=1.0, false_positive_rate=0.0)
    >>> asyncio.run(always.judge("p", "r", ["a. ", "b."]))
    Judgment(first_mistake=None, verdict_correct=True, status='ok', raw='simulated false negative (exact: 1)')
    """

    def __init__(self, inner: Teacher, false_negative_rate: float, false_positive_rate: float, seed: int = 0):
        for name, rate in (("false_negative_rate", false_negative_rate), ("false_positive_rate", false_positive_rate)):
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name}={rate!r} must be a probability in [0, 1].")
        self.inner = inner
        self.false_negative_rate = float(false_negative_rate)
        self.false_positive_rate = float(false_positive_rate)
        self.seed = int(seed)
        self.name = f"noisy({getattr(inner, 'name', type(inner).__name__)}, fn={self.false_negative_rate:g}, " \
            f"fp={self.false_positive_rate:g})"
        self.counters: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"NoisyTeacher({self.inner!r}, false_negative_rate={self.false_negative_rate}, " \
            f"false_positive_rate={self.false_positive_rate}, seed={self.seed})"

    async def solve(self, problem: str):
        return await self.inner.solve(problem)

    async def judge(self, problem: str, reference: str, sentences: Sequence[str]) -> Judgment:
        judgment = await self.inner.judge(problem, reference, sentences)
        if judgment.status != "ok" or not sentences:
            return judgment
        inner_name = getattr(self.inner, "name", type(self.inner).__name__)
        right = judgment.verdict_correct if judgment.verdict_correct is not None else judgment.first_mistake is None
        self.counters["inner_said_right" if right else "inner_said_wrong"] += 1
        draw = flip_draw(self.seed, problem, "".join(sentences))
        if not right and draw < self.false_negative_rate:
            self.counters["flipped_to_right"] += 1
            return Judgment(None, True, "ok", f"simulated false negative ({inner_name}: {judgment.first_mistake})")
        if right and draw < self.false_positive_rate:
            self.counters["flipped_to_wrong"] += 1
            return Judgment(0, False, "ok", f"simulated false positive ({inner_name}: no mistake)")
        return judgment

    async def aclose(self) -> None:
        await self.inner.aclose()
