"""studies/compare_final_weights.py's tensor comparison, against hand-computed values."""

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "studies"))
from compare_final_weights import compare  # noqa: E402


def test_equal_models_are_bit_equal_and_differences_are_measured_against_the_baselines_move():
    base = {"w": torch.zeros(2), "b": torch.zeros(1)}
    b = {"w": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0])}  # moved ||(3, 0, 4)|| = 5 from base
    same = compare({k: v.clone() for k, v in b.items()}, b, base)
    assert same["bit_equal"] and same["tensors_differing"] == 0 and same["max_abs_difference"] == 0.0
    assert same["l2_baseline_moved_from_base"] == 5.0 and same["relative_difference"] == 0.0
    a = {"w": torch.tensor([3.0, 0.5]), "b": torch.tensor([4.0])}  # one tensor differs, by 0.5
    row = compare(a, b, base)
    assert not row["bit_equal"] and row["tensors_differing"] == 1 and row["tensors"] == 2
    assert math.isclose(row["max_abs_difference"], 0.5) and math.isclose(row["relative_difference"], 0.5 / 5)


def test_models_with_different_tensors_are_refused():
    with pytest.raises(ValueError, match="different tensors"):
        compare({"w": torch.zeros(1)}, {"v": torch.zeros(1)}, {})
