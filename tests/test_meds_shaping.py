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
