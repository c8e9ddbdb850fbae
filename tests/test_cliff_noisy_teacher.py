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


# -- under cliff_outcome="teacher": why flips need not be disagreements ------------------------------------------------

PROBLEM = "Compute (2 + 3) * 2."
RIGHT = "2 + 3 = 5. 5 * 2 = 10. The answer is \\boxed{10}."
SKIPPED = "(2 + 3) * 2 = 10. The answer is \\boxed{10}."  # verifier-right; the exact teacher: a skipped step (0)
WRONG = "2 + 3 = 6. 6 * 2 = 12. The answer is \\boxed{12}."


def test_flips_of_the_exact_teacher_on_verifier_right_rollouts_are_agreements():
    """The SmolLM2 smoke step's pattern (flipped_to_right 3, agreement 1.0, 8 judged), by hand.

    One group of 8: [RIGHT, SKIPPED x3, WRONG x3, RIGHT]; the verifier (MathAnswerReward) says right for RIGHT and
    SKIPPED. The exact rule teacher says wrong for SKIPPED (sentence 0 skips a step) and WRONG. With seed 2 the draws
    are SKIPPED < 0.14 (flipped to right, all three copies: one text, one draw), WRONG >= 0.14 (kept wrong), RIGHT
    >= 0.02 (kept right). So 3 flips to right, every verdict equals the verifier's: agreement 8/8, no disagreement;
    outcomes [1, 1, 1, 1, 0, 0, 0, 1], mean 5/8, Bessel variance (5 (3/8)^2 + 3 (5/8)^2) / 7 = 15/56.
    """
    import math

    import torch

    from hf_meds_cliff.cliff.advantages import (
        group_normalised_advantages,
        teacher_outcome_rewards,
        teacher_verifier_counts,
    )
    from hf_meds_cliff.cliff.teachers import build_teacher
    from hf_meds_cliff.rewards import MathAnswerReward
    from hf_meds_cliff.sentences import split_sentences

    def draw(text):  # what NoisyTeacher hashes: the sentences the protocol sends, joined
        return flip_draw(2, PROBLEM, "".join(text[start:end] for start, end in split_sentences(text)))

    assert draw(SKIPPED) < 0.14 <= draw(WRONG) and draw(RIGHT) >= 0.02  # the seed's draws the case relies on
    completions = [RIGHT, SKIPPED, SKIPPED, SKIPPED, WRONG, WRONG, WRONG, RIGHT]
    verifier = MathAnswerReward()(prompts=[PROBLEM] * 8, completions=completions, answer=["10"] * 8)
    assert verifier == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    rows = StepRows(
        prompt_keys=["p"] * 8, problems=[PROBLEM] * 8, ground_truths=["10"] * 8, completions=completions,
        is_correct=[v == 1.0 for v in verifier], is_truncated=[False] * 8, group_ids=[0] * 8,
    )  # fmt: skip

    teacher = NoisyTeacher(build_teacher("rule"), false_negative_rate=0.14, false_positive_rate=0.02, seed=2)
    outcome = CliffJudge(teacher, judge_correct=True).process_step(rows)
    assert teacher.counters == {"inner_said_right": 2, "inner_said_wrong": 6, "flipped_to_right": 3}
    assert outcome.teacher_verdict == [True, True, True, True, False, False, False, True]
    outcomes, decided = teacher_outcome_rewards(torch.tensor(verifier), outcome.teacher_verdict)
    assert outcomes.tolist() == verifier and decided.tolist() == [True] * 8
    counts = teacher_verifier_counts(rows.is_correct, outcome.teacher_verdict, decided.tolist())
    assert counts == {"judged": 8.0, "right_wrong": 0.0, "wrong_right": 0.0, "agreement": 1.0}
    std = math.sqrt(15 / 56) + 1e-4
    up, down = (3 / 8) / std, -(5 / 8) / std
    torch.testing.assert_close(
        group_normalised_advantages(outcomes, torch.zeros(8, dtype=torch.long)),
        torch.tensor([up, up, up, up, down, down, down, up]),
    )

    # The exact teacher alone disagrees with the verifier on the three SKIPPED rollouts; the flips undid that.
    exact = CliffJudge(build_teacher("rule"), judge_correct=True).process_step(rows)
    exact_counts = teacher_verifier_counts(rows.is_correct, exact.teacher_verdict, [True] * 8)
    assert exact_counts == {"judged": 8.0, "right_wrong": 0.0, "wrong_right": 3.0, "agreement": 5 / 8}


def test_teacher_verifier_counts_count_used_verdicts_only():
    import math

    from hf_meds_cliff.cliff.advantages import teacher_verifier_counts

    # row 2 (teacher right, verifier wrong) is not decided (e.g. ungraded): not counted
    counts = teacher_verifier_counts([True, False, False, True], [False, True, True, None], [True, True, False, False])
    assert counts == {"judged": 2.0, "right_wrong": 1.0, "wrong_right": 1.0, "agreement": 0.0}
    assert math.isnan(teacher_verifier_counts([True], [None], [False])["agreement"])
    with pytest.raises(ValueError, match="give one of each per rollout"):
        teacher_verifier_counts([True], [True, False], [True])
