"""MEDS advantage diagnostics on hand-made groups (numbers computed by hand from TRL's formula)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_meds_cliff.meds.diagnostics import meds_advantage_diagnostics, trl_advantages

EPS = 1e-4  # TRL: advantages / (std + 1e-4)


def _columns(correctness, penalty):
    return np.stack([np.asarray(correctness, float), np.asarray(penalty, float)], axis=1)


def test_trl_advantages_group_batch_none_by_hand():
    rewards = [[1.0], [0.0], [0.0], [1.0], [1.0], [1.0]]
    groups = [0, 0, 0, 0, 1, 1]
    group_std = math.sqrt(1 / 3)  # Bessel std of [1, 0, 0, 1]
    np.testing.assert_allclose(
        trl_advantages(rewards, [1.0], groups, "group"),
        [
            0.5 / (group_std + EPS),
            -0.5 / (group_std + EPS),
            -0.5 / (group_std + EPS),
            0.5 / (group_std + EPS),
            0,
            0,
        ],
    )
    batch_std = math.sqrt((4 * (1 / 3) ** 2 + 2 * (2 / 3) ** 2) / 5)  # all six rewards, mean 2/3
    np.testing.assert_allclose(
        trl_advantages(rewards, [1.0], groups, "batch"),
        [
            0.5 / (batch_std + EPS),
            -0.5 / (batch_std + EPS),
            -0.5 / (batch_std + EPS),
            0.5 / (batch_std + EPS),
            0,
            0,
        ],
    )
    np.testing.assert_allclose(trl_advantages(rewards, [1.0], groups, "none"), [0.5, -0.5, -0.5, 0.5, 0, 0])


def test_trl_advantages_weights_and_unscorable_rows():
    # Weighted NaN-sum: row 1 has one NaN column; row 2 is all-NaN (unscorable: out of the mean, advantage 0).
    rewards = [[1.0, 0.5], [0.0, np.nan], [np.nan, np.nan], [0.0, 0.0]]
    advantages = trl_advantages(rewards, [1.0, 2.0], [0, 0, 0, 0], "none")
    # summed rewards 2.0, 0.0, NaN, 0.0 -> mean 2/3
    np.testing.assert_allclose(advantages, [4 / 3, -2 / 3, 0.0, -2 / 3])


def test_trl_advantages_normalize_then_sum_by_hand():
    rewards = [[1.0, 0.0], [0.0, 0.0]]
    # column 0 per group: ±0.5 / (std √0.5 + eps); column 1 constant -> 0; then batch-normalised again
    first = 0.5 / (math.sqrt(0.5) + EPS)
    second_std = math.sqrt(2 * first**2)  # Bessel std of [first, -first]
    expected = first / (second_std + EPS)
    np.testing.assert_allclose(
        trl_advantages(rewards, [1.0, 1.0], [0, 0], aggregation="normalize_then_sum"), [expected, -expected]
    )


def test_uniform_penalty_cancels_under_group_scaling():
    # Two right, two wrong; both wrong rollouts get the same penalty: the advantages are GRPO's up to the epsilon.
    rewards = _columns([1, 0, 0, 1], [0.0, -0.2, -0.2, 0.0])
    result = meds_advantage_diagnostics(rewards, 1, [1.0, 1.0], [0, 0, 0, 0], [True, False, False, True])
    grpo = 0.5 / (math.sqrt(1 / 3) + EPS)
    meds = 0.6 / (1.2 * math.sqrt(1 / 3) + EPS)  # rewards 1, -0.2: deviations and std both scale by 1.2
    assert result["advantage_shift"] == pytest.approx(abs(meds - grpo), abs=1e-12)
    assert result["advantage_shift"] < 1e-4
    assert result["frac_groups_differentiated"] == 0.0


def test_different_penalties_shift_by_the_hand_computed_amount():
    # group 0: uniform penalties (cancels up to the epsilon); group 1: two wrong rollouts, penalties -0.1 and -0.3.
    rewards = _columns([1, 0, 0, 1, 0, 0], [0.0, -0.2, -0.2, 0.0, -0.1, -0.3])
    correct = [True, False, False, True, False, False]
    result = meds_advantage_diagnostics(rewards, 1, [1.0, 1.0], [0, 0, 0, 0, 1, 1], correct)
    # group 1 with the penalty: mean -0.2, Bessel std √0.02, advantages ±0.1/(√0.02 + eps); GRPO: all 0 (std 0).
    group1 = 0.1 / (math.sqrt(0.02) + EPS)
    group0 = abs(0.6 / (1.2 * math.sqrt(1 / 3) + EPS) - 0.5 / (math.sqrt(1 / 3) + EPS))
    assert result["advantage_shift"] == pytest.approx((4 * group0 + 2 * group1) / 6, rel=1e-9)
    assert result["advantage_shift"] == pytest.approx(0.2355, abs=1e-4)
    assert result["frac_groups_differentiated"] == 0.5


def test_batch_scaling_shifts_even_uniform_penalties():
    # Each group has one wrong rollout (so no group is "differentiated"), but only group 0's is penalised:
    # the batch std changes, and so do group 1's advantages.
    rewards = _columns([1, 0, 1, 0], [0.0, -0.2, 0.0, 0.0])
    correct = [True, False, True, False]
    result = meds_advantage_diagnostics(rewards, 1, [1.0, 1.0], [0, 0, 1, 1], correct, scale_rewards="batch")
    std_with = math.sqrt(1.23 / 3)  # rewards 1, -0.2, 1, 0: mean 0.45, squared deviations sum 1.23
    std_without = math.sqrt(1 / 3)
    expected = (
        2 * abs(0.6 / (std_with + EPS) - 0.5 / (std_without + EPS))
        + 2 * abs(0.5 / (std_with + EPS) - 0.5 / (std_without + EPS))
    ) / 4
    assert result["advantage_shift"] == pytest.approx(expected, rel=1e-9)
    assert result["frac_groups_differentiated"] == 0.0


def test_no_scaling_keeps_the_penalty_in_the_advantages():
    rewards = _columns([1, 0, 0], [0.0, -0.2, -0.2])
    result = meds_advantage_diagnostics(
        rewards, 1, [1.0, 1.0], [0, 0, 0], [True, False, False], scale_rewards="none"
    )
    # with: 1, -0.2, -0.2 (mean 0.2) -> 0.8, -0.4, -0.4; without: 1, 0, 0 -> 2/3, -1/3, -1/3
    assert result["advantage_shift"] == pytest.approx((0.8 - 2 / 3 + 2 * (0.4 - 1 / 3)) / 3, rel=1e-9)
    assert result["frac_groups_differentiated"] == 0.0


def test_unscorable_rows_and_bad_input():
    # Row 2 has no correctness and no penalty: it is unscorable with and without the penalty (advantage 0 both).
    rewards = _columns([0, 0, np.nan, 1], [-0.1, -0.3, np.nan, 0.0])
    result = meds_advantage_diagnostics(rewards, 1, [1.0, 1.0], [0, 0, 0, 0], [False, False, False, True])
    # With the penalty the scorable rewards are -0.1, -0.3, 1.0: mean 0.2, deviations -0.3, -0.5, 0.8,
    # Bessel variance 0.98 / 2 = 0.49, std 0.7.
    std_with = 0.7 + EPS
    with_penalty = [-0.3 / std_with, -0.5 / std_with, 0.0, 0.8 / std_with]
    # Without it they are 0, 0, 1: mean 1/3, deviations -1/3, -1/3, 2/3, Bessel variance (6/9) / 2 = 1/3.
    std_without = math.sqrt(1 / 3) + EPS
    without = [-1 / 3 / std_without, -1 / 3 / std_without, 0.0, 2 / 3 / std_without]
    np.testing.assert_allclose(trl_advantages(rewards, [1.0, 1.0], [0, 0, 0, 0]), with_penalty, rtol=1e-12)
    np.testing.assert_allclose(trl_advantages(rewards[:, :1], [1.0], [0, 0, 0, 0]), without, rtol=1e-12)
    # The unscorable row counts in the mean over rows with a shift of 0: (0.1487 + 0.1369 + 0 + 0.0118) / 4.
    expected_shift = sum(abs(a - b) for a, b in zip(with_penalty, without)) / 4
    assert result["advantage_shift"] == pytest.approx(expected_shift, rel=1e-12)
    assert result["advantage_shift"] == pytest.approx(0.07437, abs=1e-5)
    assert result["frac_groups_differentiated"] == 1.0
    with pytest.raises(ValueError, match="scale_rewards"):
        trl_advantages([[1.0]], [1.0], [0], scale_rewards="std")
    with pytest.raises(ValueError, match="penalty_index=2"):
        meds_advantage_diagnostics(rewards, 2, [1.0, 1.0], [0, 0, 0, 0], [False] * 4)
    with pytest.raises(ValueError, match="reward_weights has 1"):
        trl_advantages(rewards, [1.0], [0, 0, 0, 0])
