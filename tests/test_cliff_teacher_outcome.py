"""The paper's "GRPO with Teacher" (``CliffConfig(cliff_outcome="teacher")``): the teacher's verdict is the outcome.

Hand-computed cases with a teacher that disagrees with the verifier in both directions and once answers garbage:
the pure functions, the protocol (which rollouts are judged) and the trainer end to end on scripted rollouts.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import ROOT, load_module

from hf_meds_cliff import CliffConfig
from hf_meds_cliff.cliff.advantages import group_normalised_advantages, teacher_outcome_rewards
from hf_meds_cliff.cliff.protocol import GROUP_CLIFF, GROUP_SKIPPED, CliffJudge, StepRows
from hf_meds_cliff.cliff.teachers.base import Judgment

CPU = {"bf16": False, "use_cpu": True, "report_to": []}
RIGHT = "2 + 3 = 5. 5 * 2 = 10. The answer is \\boxed{10}."
WRONG = "2 + 3 = 6. 6 * 2 = 12. The answer is \\boxed{12}."
LUCKY = "2 + 3 = 4. 4 * 2 = 10. The answer is \\boxed{10}."  # verifier-right, wrong reasoning
PROBLEM = "Compute (2 + 3) * 2."


# -- pure functions ---------------------------------------------------------------------------------------------------


def test_teacher_verdicts_replace_the_verifier_where_given():
    outcomes, decided = teacher_outcome_rewards(
        torch.tensor([1.0, 0.0, 1.0, 0.0, math.nan]), [False, True, None, None, True]
    )
    assert outcomes[:4].tolist() == [0.0, 1.0, 1.0, 0.0]  # two flips, two verifier fallbacks
    assert math.isnan(outcomes[4].item())  # an ungraded row stays ungraded whatever the teacher said
    assert decided.tolist() == [True, True, False, False, False]


def test_teacher_verdicts_reject_bad_input():
    with pytest.raises(ValueError, match="3 teacher verdicts for 2 rollouts"):
        teacher_outcome_rewards(torch.tensor([1.0, 0.0]), [True, None, False])
    with pytest.raises(TypeError, match="True, False or None"):
        teacher_outcome_rewards(torch.tensor([1.0, 0.0]), [1, None])


def test_group_normalisation_by_hand():
    # Group 0 outcomes [0, 1, 0, 0]: mean 1/4, deviations (-1/4, 3/4, -1/4, -1/4), Bessel variance (3/16 + 9/16)/3
    # = 1/4, std 1/2. Group 1 [1, NaN, 0]: the NaN row is left out: mean 1/2, std sqrt(1/2), its advantage 0.
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, math.nan, 0.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    eps = 1e-4
    expected = [-0.25 / (0.5 + eps), 0.75 / (0.5 + eps), -0.25 / (0.5 + eps), -0.25 / (0.5 + eps)]
    expected += [0.5 / (math.sqrt(0.5) + eps), 0.0, -0.5 / (math.sqrt(0.5) + eps)]
    torch.testing.assert_close(group_normalised_advantages(rewards, groups), torch.tensor(expected, dtype=torch.float64))
    unscaled = group_normalised_advantages(rewards, groups, scale_rewards="none")
    torch.testing.assert_close(unscaled, torch.tensor([-0.25, 0.75, -0.25, -0.25, 0.5, 0.0, -0.5], dtype=torch.float64))
    # batch: one std over the 6 graded rows (values 0,1,0,0,1,0: mean 1/3, Bessel var (4/9*2 + 1/9*4)/5 = 4/15)
    batch = group_normalised_advantages(rewards, groups, scale_rewards="batch")
    torch.testing.assert_close(batch, unscaled / (math.sqrt(4 / 15) + eps))
    with pytest.raises(ValueError, match="scale_rewards='mean' is unknown"):
        group_normalised_advantages(rewards, groups, scale_rewards="mean")


def test_group_normalisation_equals_trl_on_contiguous_groups():
    from trl.trainer.utils import nanstd

    torch.manual_seed(0)
    rewards = torch.rand(12)
    rewards[5] = math.nan
    grouped = rewards.view(-1, 4)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(4)
    std = nanstd(grouped, dim=1).repeat_interleave(4)
    trl = torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)
    torch.testing.assert_close(group_normalised_advantages(rewards, torch.arange(12) // 4), trl)


# -- protocol -----------------------------------------------------------------------------------------------------------


class VerdictTeacher:
    """Judges from a script keyed by the rollout text: a Judgment, or an exception to raise."""

    name = "verdicts"

    def __init__(self, judgments):
        self.judgments = judgments
        self.judged: list[str] = []

    async def solve(self, problem):
        return RIGHT

    async def judge(self, problem, reference, sentences):
        text = "".join(sentences)
        self.judged.append(text)
        return self.judgments[text]

    async def aclose(self):
        pass


def _rows(completions, correct, truncated=None, groups=None):
    n = len(completions)
    return StepRows(
        prompt_keys=["p"] * n if groups is None else [f"p{g}" for g in groups],
        problems=[PROBLEM] * n,
        ground_truths=["10"] * n,
        completions=completions,
        is_correct=correct,
        is_truncated=truncated or [False] * n,
        group_ids=groups or [0] * n,
    )


def test_teacher_mode_judges_right_rollouts_too_and_reports_verdicts():
    teacher = VerdictTeacher(
        {
            RIGHT: Judgment(None, True, "ok"),
            LUCKY: Judgment(0, False, "ok"),  # the teacher says wrong, the verifier right
            WRONG: Judgment(None, True, "ok"),  # the teacher says right, the verifier wrong
        }
    )
    judge = CliffJudge(teacher, verify=lambda solution, truth: True, judge_correct=True)
    rows = _rows(
        [RIGHT, LUCKY, WRONG, WRONG + " ", RIGHT, WRONG],
        [True, True, False, False, True, True],
        truncated=[False, False, False, True, False, False],
        groups=[0, 0, 0, 0, 1, 1],
    )
    outcome = judge.process_step(rows)
    # group 0 is mixed and judged except its truncated row; group 1 is all verifier-right: skipped, no call
    assert outcome.group_modes == [GROUP_CLIFF] * 4 + [GROUP_SKIPPED] * 2
    assert sorted(teacher.judged) == sorted([RIGHT, LUCKY, WRONG])
    assert outcome.teacher_verdict == [True, False, True, None, None, None]
    # the Cliff counters still count verifier-wrong rollouts only: WRONG "has no mistake", a disagreement
    assert outcome.counters["disagreements"] == 1 and outcome.counters["agreements"] == 0
    assert outcome.counters["judge_calls"] == 3
    assert set(outcome.judge_details) == {2, 3}  # the rollout log stays about verifier-wrong rollouts


def test_verifier_mode_is_unchanged_and_a_verdict_field_wins_over_no_mistake():
    # A teacher that locates no mistake but says "wrong" in its verdict field: the verdict is what teacher mode uses.
    teacher = VerdictTeacher({RIGHT: Judgment(None, True, "ok"), WRONG: Judgment(None, False, "ok")})
    rows = _rows([RIGHT, WRONG], [True, False])
    cliff = CliffJudge(teacher, verify=lambda solution, truth: True).process_step(rows)
    assert teacher.judged == [WRONG] and cliff.teacher_verdict == [None, False]
    teacher.judged.clear()
    teacher_mode = CliffJudge(teacher, verify=lambda s, t: True, judge_correct=True).process_step(rows)
    assert sorted(teacher.judged) == sorted([RIGHT, WRONG]) and teacher_mode.teacher_verdict == [True, False]


def test_malformed_and_raising_judgments_give_no_verdict_and_are_not_cached():
    class Raising(VerdictTeacher):
        async def judge(self, problem, reference, sentences):
            text = "".join(sentences)
            self.judged.append(text)
            if text == LUCKY:
                raise RuntimeError("teacher crashed")
            return self.judgments[text]

    teacher = Raising({RIGHT: Judgment(None, None, "parse_error", "???"), WRONG: Judgment(1, False, "ok")})
    judge = CliffJudge(teacher, verify=lambda s, t: True, judge_correct=True)
    rows = _rows([RIGHT, LUCKY, WRONG], [True, True, False])
    outcome = judge.process_step(rows)
    assert outcome.teacher_verdict == [None, None, False]
    assert outcome.counters["judge_failures/parse_error"] == 1 and outcome.counters["judge_failures/error"] == 1
    again = judge.process_step(rows)  # the failed ones are asked again, the usable one comes from the cache
    assert again.counters["judge_calls"] == 2 and again.counters["judgment_cache_hits"] == 1
    assert again.teacher_verdict == [None, None, False]


def test_cached_decisions_without_a_verdict_read_no_mistake_as_right():
    teacher = VerdictTeacher({})
    judge = CliffJudge(teacher, verify=lambda s, t: True, judge_correct=True)
    from hf_meds_cliff.cliff.protocol import completion_cache_key

    judge.judgments = {  # written by an older version: no "verdict" key
        completion_cache_key("p", RIGHT): {"first_mistake": None, "agreed": False, "judged": True},
        completion_cache_key("p", WRONG): {"first_mistake": 1, "agreed": True, "judged": True},
    }
    outcome = judge.process_step(_rows([RIGHT, WRONG], [True, False]))
    assert teacher.judged == [] and outcome.teacher_verdict == [True, False]


def test_config_names_the_outcomes_and_the_aggregation_it_needs(tmp_path):
    assert CliffConfig(output_dir=str(tmp_path), **CPU).cliff_outcome == "verifier"
    with pytest.raises(ValueError, match="cliff_outcome='judge' is unknown"):
        CliffConfig(output_dir=str(tmp_path), cliff_outcome="judge", **CPU)
    with pytest.raises(ValueError, match="needs multi_objective_aggregation='sum_then_normalize'"):
        CliffConfig(
            output_dir=str(tmp_path), cliff_outcome="teacher", multi_objective_aggregation="normalize_then_sum", **CPU
        )


# -- trainer end to end ----------------------------------------------------------------------------------------------


def load_driver():
    return load_module(ROOT / "tests" / "multiproc" / "cliff_driver.py", "cliff_driver")


class DisagreeingTeacher:
    """The driver's exact teacher, except on problem ``flipped`` (right and wrong swapped for the solution and the
    rollout wrong from sentence 1) and on the rollout of problem ``garbled`` wrong from sentence 0 (unparsable)."""

    name = "disagreeing"

    def __init__(self, driver, flipped, garbled):
        self.inner = driver.ArithmeticTeacher()
        self.swap = {flipped.solution: False, driver.wrong_from(flipped, 1): True}
        self.garbled = driver.wrong_from(garbled, 0)
        self.judged: list[str] = []

    async def solve(self, problem):
        return await self.inner.solve(problem)

    async def judge(self, problem, reference, sentences):
        text = "".join(sentences)
        self.judged.append(text)
        if text in self.swap:
            right = self.swap[text]
            return Judgment(None if right else 0, right, "ok")
        if text == self.garbled:
            return Judgment(None, None, "parse_error", "no json here")
        return await self.inner.judge(problem, reference, sentences)

    async def aclose(self):
        pass


@pytest.mark.slow
def test_trainer_uses_the_teachers_verdict_as_the_outcome(tmp_path):
    """Groups 0 and 1: [right, wrong from sentence 1, wrong from sentence 0, right]; group 2 all right (the driver).
    Group 0's teacher says [wrong, right, wrong, wrong]: outcomes (0, 1, 0, 0), mean 1/4, Bessel std 1/2. Group 1's
    agrees but garbles row 6: the verifier's 0 stands, outcomes (1, 0, 0, 1), mean 1/2, std sqrt(1/3)."""
    from hf_meds_cliff.cliff.protocol import problem_text

    driver = load_driver()
    dataset_problems = [
        driver.parse_question(problem_text(row["prompt"])) for row in driver.make_toy_dataset("train", 3, seed=0)
    ]
    teacher = DisagreeingTeacher(driver, dataset_problems[0], dataset_problems[1])
    trainer = driver.build_trainer(
        str(tmp_path), 12, steps=1, num_prompts=3, shuffle_dataset=False, teacher=teacher, cliff_outcome="teacher"
    )
    initial = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    eps = 1e-4
    low, high = -0.25 / (0.5 + eps), 0.75 / (0.5 + eps)
    a = 0.5 / (math.sqrt(1 / 3) + eps)
    expected = torch.tensor([low, high, low, low, a, -a, -a, a, 0.0, 0.0, 0.0, 0.0])
    (advantages,) = trainer.recorded
    assert advantages.shape == (12,)  # one advantage per rollout
    torch.testing.assert_close(advantages, expected, rtol=1e-5, atol=1e-6)
    assert len(teacher.judged) == 8  # every row of the two mixed groups, the verifier-right ones included

    log = next(r for r in trainer.state.log_history if "cliff/teacher_verifier_agreement" in r)
    assert log["cliff/teacher_judged_rollouts"] == 7.0
    assert log["cliff/teacher_says_right_verifier_wrong"] == 1.0
    assert log["cliff/teacher_says_wrong_verifier_right"] == 2.0
    assert log["cliff/teacher_verifier_agreement"] == pytest.approx(4 / 7)
    assert log["cliff/teacher_verdict_fallbacks"] == 1.0 and log["cliff/judge_failures/parse_error"] == 1.0
    assert any(not torch.equal(v, initial[k]) for k, v in trainer.model.state_dict().items())


@pytest.mark.slow
def test_the_stage3_arm_ignores_the_same_teacher_it_is_grpo(tmp_path):
    """The erratum's claim, checked: cliff_split_credit=False, cliff_recentre=False (stage 3's grpo_teacher_paper)
    with the same disagreeing teacher gives the verifier's GRPO advantages, the teacher's verdicts unused."""
    from hf_meds_cliff.cliff.protocol import problem_text

    driver = load_driver()
    problems = [
        driver.parse_question(problem_text(row["prompt"])) for row in driver.make_toy_dataset("train", 3, seed=0)
    ]
    trainer = driver.build_trainer(
        str(tmp_path), 12, steps=1, num_prompts=3, shuffle_dataset=False,
        teacher=DisagreeingTeacher(driver, problems[0], problems[1]), cliff_split_credit=False, cliff_recentre=False,
    )  # fmt: skip
    trainer.train()
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    per_row = [row[0].item() for row in trainer.recorded[0]]
    assert per_row == pytest.approx([a, -a, -a, a, a, -a, -a, a, 0.0, 0.0, 0.0, 0.0], rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_trainer_logs_a_simulated_teachers_flips_beside_the_disagreements_they_cause(tmp_path):
    """NoisyTeacher around the driver's exact teacher, every wrong verdict flipped (false-negative rate 1): groups 0
    and 1 are [right, wrong, wrong, right] for the verifier and the exact teacher, so the 4 flips all land on
    verifier-wrong rollouts and each is a disagreement: 8 judged, 4 teacher-right-verifier-wrong, agreement 4/8. Every
    outcome of the two groups is then 1: advantages all 0 (group 2 is all right: 0)."""
    from hf_meds_cliff.cliff.teachers import NoisyTeacher

    driver = load_driver()
    teacher = NoisyTeacher(driver.ArithmeticTeacher(), false_negative_rate=1.0, false_positive_rate=0.0)
    trainer = driver.build_trainer(
        str(tmp_path), 12, steps=1, num_prompts=3, shuffle_dataset=False, teacher=teacher, cliff_outcome="teacher"
    )
    trainer.train()
    (advantages,) = trainer.recorded
    torch.testing.assert_close(advantages, torch.zeros(12))
    log = next(r for r in trainer.state.log_history if "cliff/teacher_verifier_agreement" in r)
    assert log["cliff/teacher/flipped_to_right"] == 4.0 and log["cliff/teacher/inner_said_wrong"] == 4.0
    assert log["cliff/teacher/inner_said_right"] == 4.0 and log.get("cliff/teacher/flipped_to_wrong", 0.0) == 0.0
    assert log["cliff/teacher_judged_rollouts"] == 8.0 and log["cliff/teacher_says_right_verifier_wrong"] == 4.0
    assert log["cliff/teacher_says_wrong_verifier_right"] == 0.0 and log["cliff/teacher_verifier_agreement"] == 0.5
