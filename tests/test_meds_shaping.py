"""MEDS reward shaping (spec step 4) and the top-1 eigen-ratio diagnostic, against hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hf_meds_cliff.meds import penalties, shape_rewards, top1_eigen_ratio

# Rows: wrong with |C|=3, wrong with |C|=0, right with |C|=3, right with |C|=0.
REWARDS = [0.0, 0.0, 1.0, 1.0]
CORRECT = [False, False, True, True]
SIZES = [3, 0, 3, 0]
P3 = 0.1 * math.log(4)  # alpha * log(|C| + 1) = 0.138629..., under the cap beta = 0.2


def test_penalties_hand_values():
    np.testing.assert_allclose(
        penalties([0, 1, 3, 6, 1000], alpha=0.1, beta=0.2),
        [0.0, 0.1 * math.log(2), P3, 0.1 * math.log(7), 0.2],
    )
    assert penalties([5, 9], alpha=0.0, beta=0.2).tolist() == [0.0, 0.0]
    np.testing.assert_allclose(penalties([2], alpha=0.02, beta=0.04), [0.02 * math.log(3)])


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("wrong", [-P3, 0.0, 1.0, 1.0]),
        ("right", [0.0, 0.0, 1.0 / (1.0 + P3), 1.0]),
        ("both", [-P3, 0.0, 1.0 / (1.0 + P3), 1.0]),
        ("none", [0.0, 0.0, 1.0, 1.0]),
    ],
)
def test_shape_rewards_all_targets(target, expected):
    shaped = shape_rewards(REWARDS, CORRECT, SIZES, alpha=0.1, beta=0.2, target=target)
    np.testing.assert_allclose(shaped, expected, rtol=0, atol=1e-12)
    assert shaped.dtype == np.float64


def test_cap_mask_nan_and_non_binary_rewards():
    # the cap: log(1001) * 0.1 = 0.69 > beta
    np.testing.assert_allclose(shape_rewards([0.0], [False], [1000], 0.1, 0.2), [-0.2])
    # rows without a feature keep their reward whatever size they carry
    shaped = shape_rewards(
        REWARDS, CORRECT, SIZES, 0.1, 0.2, target="both", has_feature=[False, True, True, True]
    )
    np.testing.assert_allclose(shaped, [0.0, 0.0, 1.0 / (1.0 + P3), 1.0])
    # TRL's NaN for a missing reward stays NaN; a shaped (e.g. overlong-penalised) reward shifts
    shaped = shape_rewards([np.nan, -0.5, 0.5], [False, False, True], [3, 3, 3], 0.1, 0.2, target="both")
    assert math.isnan(shaped[0])
    np.testing.assert_allclose(shaped[1:], [-0.5 - P3, 0.5 / (1.0 + P3)])


def test_torch_in_torch_out():
    rewards = torch.tensor(REWARDS, dtype=torch.float32)
    shaped = shape_rewards(rewards, torch.tensor(CORRECT), torch.tensor(SIZES), 0.1, 0.2, target="both")
    assert isinstance(shaped, torch.Tensor) and shaped.dtype == torch.float32
    torch.testing.assert_close(shaped, torch.tensor([-P3, 0.0, 1.0 / (1.0 + P3), 1.0]))


def test_group_of_all_wrong_answers_gets_a_signal():
    # GRPO advantages of an all-wrong group are all 0 without shaping; with it the rows that
    # repeat a big past cluster fall below the group mean.
    shaped = shape_rewards([0.0] * 4, [False] * 4, [0, 1, 7, 0], 0.1, 0.2)
    advantages = (shaped - shaped.mean()) / (shaped.std() + 1e-4)
    assert advantages[2] < advantages[1] < 0 < advantages[0] == advantages[3]


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0, got -0.1"):
        shape_rewards(REWARDS, CORRECT, SIZES, alpha=-0.1, beta=0.2)
    with pytest.raises(ValueError, match="beta must be a finite number >= 0"):
        penalties(SIZES, alpha=0.1, beta=float("inf"))
    with pytest.raises(TypeError, match="alpha must be a float"):
        penalties(SIZES, alpha="0.1", beta=0.2)
    with pytest.raises(ValueError, match="target must be one of"):
        shape_rewards(REWARDS, CORRECT, SIZES, 0.1, 0.2, target="all")
    with pytest.raises(ValueError, match=r"rewards must have shape \(4,\)"):
        shape_rewards(REWARDS[:3], CORRECT, SIZES, 0.1, 0.2)
    with pytest.raises(ValueError, match=r"is_correct must have shape \(4,\)"):
        shape_rewards(REWARDS, CORRECT[:2], SIZES, 0.1, 0.2)
    with pytest.raises(ValueError, match="cluster_sizes must be finite and >= 0"):
        shape_rewards(REWARDS, CORRECT, [3, -1, 0, 0], 0.1, 0.2)
    with pytest.raises(TypeError, match="is_correct must hold booleans"):
        shape_rewards(REWARDS, [0.5, 0, 1, 1], SIZES, 0.1, 0.2)


def test_top1_eigen_ratio_hand_values():
    # F^T F / n = diag(2/3, 1/3)
    assert top1_eigen_ratio([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]) == pytest.approx(2 / 3)
    # rotated basis: (e1 + e2)/√2, (e1 - e2)/√2 ⇒ I/2 ⇒ 0.5; collinear rows ⇒ 1
    assert top1_eigen_ratio(np.array([[1.0, 1.0], [1.0, -1.0]]) / math.sqrt(2)) == pytest.approx(0.5)
    assert top1_eigen_ratio(torch.tensor([[1.0, 2.0, 2.0], [-2.0, -4.0, -4.0]])) == pytest.approx(1.0)
    # uncentred: a constant non-zero row set is one direction, ratio 1 (centred would be 0/0)
    assert top1_eigen_ratio(np.ones((5, 4))) == pytest.approx(1.0)
    # 14 orthonormal directions equally used: the minimum, 1/14
    assert top1_eigen_ratio(np.eye(14)) == pytest.approx(1 / 14)
    assert math.isnan(top1_eigen_ratio(np.zeros((0, 14))))
    assert math.isnan(top1_eigen_ratio(np.zeros((3, 14))))
    with pytest.raises(ValueError, match=r"shape \(n, d\)"):
        top1_eigen_ratio(np.ones(3))


# ---------------------------------------------------------------------------------------------
# Groups whose correctness has no variance: not shaped by default, as in the reference
# ---------------------------------------------------------------------------------------------


def test_uniform_correctness_rows_by_hand():
    from hf_meds_cliff.meds.shaping import uniform_correctness_rows

    # groups of 3: all wrong, mixed, all right
    correct = [False, False, False, True, False, False, True, True, True]
    assert uniform_correctness_rows(correct, 3).tolist() == [True] * 3 + [False] * 3 + [True] * 3
    # ungraded rows are ignored: group 0's graded rows are all wrong; group 1 has one graded row only
    assert uniform_correctness_rows(
        [False, True, False, True], 2, graded=[True, False, True, False]
    ).tolist() == [True, True, True, True]
    assert uniform_correctness_rows(torch.tensor([True, False]), 2).tolist() == [False, False]
    with pytest.raises(ValueError, match="multiple of num_generations=4"):
        uniform_correctness_rows([True, False], 4)
    with pytest.raises(ValueError, match="num_generations must be an integer >= 1, got 0"):
        uniform_correctness_rows([True, False], 0)


# Two groups of 4. Group A: all wrong, cluster sizes 0, 1, 7, 3. Group B: two wrong (sizes 3, 0), two right.
MIXED_BATCH_CORRECT = [False] * 4 + [False, False, True, True]
MIXED_BATCH_SIZES = [0, 1, 7, 3, 3, 0, 5, 5]
MIXED_BATCH_REWARDS = [0.0] * 6 + [1.0, 1.0]


def _group_advantages(shaped):
    """TRL's group normalisation (Bessel std + 1e-4) of two groups of 4, computed here row by row."""
    out = []
    for group in (shaped[:4], shaped[4:]):
        mean = sum(group) / 4
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / 3)
        out += [(r - mean) / (std + 1e-4) for r in group]
    return out


def test_uniform_group_gets_no_advantage_from_the_penalty_by_default():
    from hf_meds_cliff.meds.diagnostics import trl_advantages
    from hf_meds_cliff.meds.shaping import uniform_correctness_rows

    uniform = uniform_correctness_rows(MIXED_BATCH_CORRECT, 4)
    assert uniform.tolist() == [True] * 4 + [False] * 4
    shaped = shape_rewards(
        MIXED_BATCH_REWARDS, MIXED_BATCH_CORRECT, MIXED_BATCH_SIZES, 0.1, 0.2, has_feature=~uniform
    )
    # Group A keeps its rewards; group B's wrong rows get -0.1·log(4) and 0.
    np.testing.assert_allclose(shaped, [0, 0, 0, 0, -P3, 0, 1, 1], rtol=0, atol=1e-12)
    # Group B by hand: mean (2 − P3)/4 = 0.465343, Bessel std 0.619957.
    mean_b = (2 - P3) / 4
    std_b = math.sqrt(((-P3 - mean_b) ** 2 + mean_b**2 + 2 * (1 - mean_b) ** 2) / 3)
    assert mean_b == pytest.approx(0.465343, abs=1e-6) and std_b == pytest.approx(0.619957, abs=1e-6)
    expected = [0.0] * 4 + [(r - mean_b) / (std_b + 1e-4) for r in (-P3, 0.0, 1.0, 1.0)]
    np.testing.assert_allclose(expected[4:], [-0.974058, -0.750483, 0.862270, 0.862270], atol=1e-6)
    columns = np.stack([MIXED_BATCH_REWARDS, shaped - np.asarray(MIXED_BATCH_REWARDS)], axis=1)
    advantages = trl_advantages(columns, [1.0, 1.0], np.arange(8) // 4)  # what TRL computes from the columns
    np.testing.assert_allclose(advantages, expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(_group_advantages(shaped.tolist()), expected, rtol=0, atol=1e-12)


def test_shaping_uniform_groups_gives_wrong_answers_large_advantages():
    """``meds_shape_uniform_groups=True`` (the earlier behaviour): the penalty is group A's only variance."""
    from hf_meds_cliff.meds.diagnostics import trl_advantages

    shaped = shape_rewards(MIXED_BATCH_REWARDS, MIXED_BATCH_CORRECT, MIXED_BATCH_SIZES, 0.1, 0.2)
    p1, p7 = 0.1 * math.log(2), 0.2  # 0.1·log(8) = 0.208 is capped at beta
    np.testing.assert_allclose(shaped[:4], [0.0, -p1, -p7, -P3], rtol=0, atol=1e-12)
    mean_a = -(p1 + p7 + P3) / 4  # -0.101986, Bessel std 0.086445
    std_a = math.sqrt((mean_a**2 + (p1 + mean_a) ** 2 + (p7 + mean_a) ** 2 + (P3 + mean_a) ** 2) / 3)
    expected_a = [(r - mean_a) / (std_a + 1e-4) for r in (0.0, -p1, -p7, -P3)]
    np.testing.assert_allclose(expected_a, [1.178421, 0.377508, -1.132525, -0.423404], atol=1e-6)
    columns = np.stack([MIXED_BATCH_REWARDS, shaped - np.asarray(MIXED_BATCH_REWARDS)], axis=1)
    advantages = trl_advantages(columns, [1.0, 1.0], np.arange(8) // 4)
    np.testing.assert_allclose(advantages[:4], expected_a, rtol=0, atol=1e-9)
    assert advantages[0] > 1.0  # a wrong answer with an empty cluster gets a large positive advantage
