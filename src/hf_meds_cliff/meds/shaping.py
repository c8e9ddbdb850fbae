"""MEDS reward shaping and the paper's feature-diversity diagnostic (pure functions).

Spec (``shared/spec/meds.md``, step 4), with penalty ``p = min(α · log(|C| + 1), β)``:

* incorrect completion: ``r̃ = r − p``;
* correct completion (targets ``"right"``/``"both"``, the reference's sign-preserving form):
  ``r̃ = r / (1 + p)``.

A row with cluster size 0 (empty memory, no feature, noise under ``noise_policy="ignore"``) gets
``p = log(1) · α = 0`` and keeps its reward. NaN rewards (TRL turns ``None`` into NaN) stay NaN.

Groups whose correctness has no variance (all rollouts wrong, or all right: :func:`uniform_correctness_rows`) are
not shaped by default: the reference trains with DAPO's filter on accuracy, which drops them, so the penalty
never gives them an advantage (``MEDSConfig.meds_shape_uniform_groups``).

>>> shape_rewards([0.0, 1.0, 0.0], [False, True, False], [3, 3, 0], alpha=0.1, beta=0.2).round(4).tolist()
[-0.1386, 1.0, 0.0]
>>> shape_rewards([0.0, 1.0], [False, True], [100, 3], alpha=0.1, beta=0.2, target="both").round(4).tolist()
[-0.2, 0.8782]
"""

from __future__ import annotations

from typing import Any

import numpy as np

PENALTY_TARGETS = ("wrong", "right", "both", "none")


def _is_torch(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch"


def _check_coefficients(alpha: float, beta: float) -> None:
    for name, value in (("alpha", alpha), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a float, got {value!r} ({type(value).__name__}).")
        if not np.isfinite(value) or value < 0:
            raise ValueError(
                f"{name} must be a finite number >= 0, got {value}; the paper uses alpha=0.1, "
                f"beta=0.2 (alpha=0.02, beta=0.04 for Qwen3-8B), and 0 disables the penalty."
            )


def _as_sizes(cluster_sizes: Any) -> np.ndarray:
    if _is_torch(cluster_sizes):
        cluster_sizes = cluster_sizes.detach().cpu().numpy()
    sizes = np.asarray(cluster_sizes)
    if sizes.ndim != 1:
        raise ValueError(f"cluster_sizes must have shape (B,), got {sizes.shape}.")
    if sizes.size and not np.issubdtype(sizes.dtype, np.number):
        raise TypeError(f"cluster_sizes must be numbers, got dtype {sizes.dtype}.")
    sizes = sizes.astype(np.float64)
    if np.any(~np.isfinite(sizes)) or np.any(sizes < 0):
        raise ValueError(
            f"cluster_sizes must be finite and >= 0, got {sizes[(~np.isfinite(sizes)) | (sizes < 0)][:5]}; "
            f"use 0 for rows without a feature."
        )
    return sizes


def penalties(cluster_sizes: Any, alpha: float, beta: float) -> np.ndarray:
    """Per-row penalty ``min(alpha · log(size + 1), beta)``.

    Args:
        cluster_sizes: (B,) non-negative cluster sizes (0 ⇒ penalty 0).
        alpha, beta: non-negative scale and cap.

    Returns:
        (B,) float64 penalties.

    >>> penalties([0, 1, 3, 1000], alpha=0.1, beta=0.2).round(4).tolist()
    [0.0, 0.0693, 0.1386, 0.2]
    """
    _check_coefficients(alpha, beta)
    sizes = _as_sizes(cluster_sizes)
    return np.minimum(alpha * np.log1p(sizes), beta)


def shape_rewards(
    rewards: Any,
    is_correct: Any,
    cluster_sizes: Any,
    alpha: float,
    beta: float,
    target: str = "wrong",
    has_feature: Any = None,
) -> Any:
    """Shape verifiable rewards by the size of the past-error cluster each completion falls into.

    Args:
        rewards: (B,) rewards ``r`` (numpy/list, or a torch tensor: then a tensor of the same dtype
            and device comes back).
        is_correct: (B,) bools, which rows count as correct.
        cluster_sizes: (B,) non-negative sizes ``|C|`` from :meth:`ErrorMemory.assign_and_update`.
        alpha, beta: penalty scale and cap, both >= 0.
        target: ``"wrong"`` (default: only incorrect rows, ``r − p``), ``"right"`` (only correct
            rows, ``r / (1 + p)``), ``"both"`` or ``"none"`` (rewards returned unchanged, as a copy).
        has_feature: optional (B,) bools; rows without a feature get no penalty whatever their size.

    Returns:
        (B,) shaped rewards, float64 for numpy input.
    """
    if target not in PENALTY_TARGETS:
        raise ValueError(f"target must be one of {PENALTY_TARGETS}, got {target!r}.")
    penalty = penalties(cluster_sizes, alpha, beta)
    batch_size = penalty.shape[0]
    correct = _as_bool_vector("is_correct", is_correct, batch_size)
    if has_feature is not None:
        penalty = np.where(_as_bool_vector("has_feature", has_feature, batch_size), penalty, 0.0)
    penalise_wrong = (~correct) & (target in ("wrong", "both"))
    penalise_right = correct & (target in ("right", "both"))

    if _is_torch(rewards):
        import torch

        if rewards.shape != (batch_size,):
            raise ValueError(
                f"rewards must have shape ({batch_size},) like cluster_sizes, got {tuple(rewards.shape)}."
            )
        as_tensor = lambda array: torch.as_tensor(array, device=rewards.device)
        penalty_t = as_tensor(penalty).to(rewards.dtype)
        shaped = torch.where(as_tensor(penalise_wrong), rewards - penalty_t, rewards)
        return torch.where(as_tensor(penalise_right), shaped / (1.0 + penalty_t), shaped)

    values = np.asarray(rewards, dtype=np.float64)
    if values.shape != (batch_size,):
        raise ValueError(f"rewards must have shape ({batch_size},) like cluster_sizes, got {values.shape}.")
    shaped = np.where(penalise_wrong, values - penalty, values)
    return np.where(penalise_right, shaped / (1.0 + penalty), shaped)


def uniform_correctness_rows(is_correct: Any, num_generations: int, graded: Any = None) -> np.ndarray:
    """Which rows belong to a group whose correctness has no variance (all graded rows wrong, or all right).

    Args:
        is_correct: (B,) bools in TRL's group order (``num_generations`` consecutive rows per prompt).
        num_generations: rows per group; ``B`` must be a multiple of it.
        graded: optional (B,) bools; rows that are not graded (correctness ``None``) are ignored, and a group with
            fewer than two graded rows has no variance (as in :func:`hf_meds_cliff.dapo.groups_with_signal`).

    Returns:
        (B,) bools, True for every row of such a group. These are the groups DAPO's dynamic sampling drops on
        accuracy (the reference's ``filter_groups_metric=acc``); under group normalisation their correctness gives
        no advantage, so any variance the MEDS penalty put into them would be the whole signal.

    >>> uniform_correctness_rows([False, False, True, False, True, True], 2).tolist()
    [True, True, False, False, True, True]
    >>> uniform_correctness_rows([False, True, False, False], 2, graded=[True, False, True, True]).tolist()
    [True, True, True, True]
    """
    if isinstance(num_generations, bool) or not isinstance(num_generations, (int, np.integer)) or num_generations < 1:
        raise ValueError(f"num_generations must be an integer >= 1, got {num_generations!r}.")
    correct = np.asarray(is_correct.detach().cpu().numpy() if _is_torch(is_correct) else is_correct)
    if correct.ndim != 1 or correct.shape[0] % num_generations:
        raise ValueError(
            f"is_correct must have shape (B,) with B a multiple of num_generations={num_generations}, got "
            f"{correct.shape}."
        )
    correct = _as_bool_vector("is_correct", correct, correct.shape[0])
    scored = (
        np.ones_like(correct) if graded is None else _as_bool_vector("graded", graded, correct.shape[0])
    )
    grouped_correct = (correct & scored).reshape(-1, num_generations).sum(axis=1)
    grouped_scored = scored.reshape(-1, num_generations).sum(axis=1)
    mixed = (grouped_scored >= 2) & (grouped_correct > 0) & (grouped_correct < grouped_scored)
    return np.repeat(~mixed, num_generations)


def _as_bool_vector(name: str, values: Any, batch_size: int) -> np.ndarray:
    if _is_torch(values):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.shape != (batch_size,):
        raise ValueError(f"{name} must have shape ({batch_size},) like cluster_sizes, got {array.shape}.")
    if array.dtype != np.bool_:
        if not np.issubdtype(array.dtype, np.number) or not np.all(np.isin(array, (0, 1))):
            raise TypeError(f"{name} must hold booleans (or 0/1), got {array[:5]!r}.")
        array = array.astype(bool)
    return array


def top1_eigen_ratio(features: Any) -> float:
    """Largest eigenvalue over the sum of eigenvalues of the step's feature matrix (paper Fig. 5).

    Uses the uncentred second-moment matrix ``Fᵀ F / n`` of ``features`` (n, d) (the paper does not
    say it centres): 1.0 when all rows are collinear, ``1/d`` for rows spread evenly over ``d``
    orthogonal directions; lower = more diverse. Returns NaN for no rows or an all-zero matrix.

    >>> round(top1_eigen_ratio([[1.0, 0.0], [0.0, 1.0]]), 6)
    0.5
    >>> round(top1_eigen_ratio([[1.0, 1.0], [2.0, 2.0]]), 6)
    1.0
    """
    if _is_torch(features):
        features = features.detach().double().cpu().numpy()
    matrix = np.asarray(features, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"features must have shape (n, d), got {matrix.shape}.")
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        return float("nan")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("features contain NaN or inf; drop rows without a valid feature first.")
    eigenvalues = np.clip(np.linalg.eigvalsh(matrix.T @ matrix / matrix.shape[0]), 0.0, None)
    total = eigenvalues.sum()
    if total <= 0.0:
        return float("nan")
    return float(eigenvalues.max() / total)
