"""NoisyTeacher: a simulated teacher with a stated error profile (the SmolLM2 study's teacher)."""

from __future__ import annotations

import asyncio

import pytest

from hf_meds_cliff.cliff.protocol import CliffJudge, StepRows
from hf_meds_cliff.cliff.teachers import Judgment, NoisyTeacher
from hf_meds_cliff.cliff.teachers.noisy import flip_draw


class Exact:
    """Wrong (mistake at unit 1) for rollouts starting "W", right otherwise; "E" gives a parse error."""

    name = "exact"

    async def solve(self, problem):
        return "\\boxed{1}"

    async def judge(self, problem, reference, sentences):
        text = "".join(sentences)
        if text.startswith("E"):
            return Judgment(None, None, "parse_error", "?")
        return Judgment(1, False, "ok") if text.startswith("W") else Judgment(None, True, "ok")

    async def aclose(self):
        pass


def judge(teacher, text):
    return asyncio.run(teacher.judge("Compute 1 + 2.", "ref", [text[:3], text[3:]]))


def test_flips_exactly_where_the_draw_is_below_the_rate():
    teacher = NoisyTeacher(Exact(), false_negative_rate=0.14, false_positive_rate=0.02, seed=3)
    wrong = [f"W{i:04d}." for i in range(2000)]
    right = [f"R{i:04d}." for i in range(2000)]
    called_right = [judge(teacher, t).verdict_correct for t in wrong]
    called_wrong = [judge(teacher, t).verdict_correct is False for t in right]
    for text, verdict in zip(wrong, called_right):
        assert verdict == (flip_draw(3, "Compute 1 + 2.", text) < 0.14)
    for text, flipped in zip(right, called_wrong):
        assert flipped == (flip_draw(3, "Compute 1 + 2.", text) < 0.02)
    # the rates hold within 4 binomial standard deviations (sd 0.0078 and 0.0031 at n = 2000)
    assert abs(sum(called_right) / 2000 - 0.14) < 0.032 and abs(sum(called_wrong) / 2000 - 0.02) < 0.013
    assert teacher.counters["flipped_to_right"] == sum(called_right)
    assert teacher.counters["flipped_to_wrong"] == sum(called_wrong)
    again = NoisyTeacher(Exact(), 0.14, 0.02, seed=3)
    assert [judge(again, t).verdict_correct for t in wrong[:50]] == called_right[:50]  # deterministic


def test_failures_pass_through_and_rates_are_checked():
    teacher = NoisyTeacher(Exact(), false_negative_rate=1.0, false_positive_rate=1.0)
    assert judge(teacher, "Eabc.").status == "parse_error"
    flipped = judge(teacher, "Rabc.")
    assert (flipped.first_mistake, flipped.verdict_correct) == (0, False)
    with pytest.raises(ValueError, match="false_negative_rate=1.5 must be a probability"):
        NoisyTeacher(Exact(), 1.5, 0.0)


def test_in_teacher_mode_its_false_negatives_become_right_outcomes():
    rows = StepRows(
        prompt_keys=["p"] * 3, problems=["Compute 1 + 2."] * 3, ground_truths=["1"] * 3,
        completions=["Rok. done.", "Wbad. done.", "Rok2. done."], is_correct=[True, False, True],
        is_truncated=[False] * 3, group_ids=[0] * 3,
    )  # fmt: skip
    always_wrong_to_right = NoisyTeacher(Exact(), false_negative_rate=1.0, false_positive_rate=0.0)
    judge_ = CliffJudge(always_wrong_to_right, verify=lambda s, t: True, judge_correct=True)
    assert judge_.process_step(rows).teacher_verdict == [True, True, True]
