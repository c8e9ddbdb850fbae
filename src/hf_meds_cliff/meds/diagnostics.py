"""Does MEDS change the update? Advantage diagnostics from the gathered rewards (pure functions).

With binary correctness and group normalisation, advantages are invariant to any increasing affine map of the
two reward values of a group: if every wrong rollout of a group gets the same penalty, MEDS's advantages equal
GRPO's (up to TRL's ``1e-4`` epsilon). MEDS acts only where the wrong rollouts of one group get *different*
penalties, and the penalty saturates at ``beta`` (cluster size ``>= exp(beta / alpha) - 1``), which makes
penalties equal again as memories grow. Two numbers say whether it acts:

* ``advantage_shift``: mean over rows of ``|A_MEDS - A_without_penalty|``, both computed exactly as TRL does
  (:func:`trl_advantages`);
* ``frac_groups_differentiated``: the share of the batch's groups whose wrong rollouts got different penalties.

>>> import numpy as np
>>> rewards = np.array([[1.0, 0.0], [0.0, -0.1], [0.0, -0.1], [1.0, 0.0]])  # columns: correctness, penalty
>>> d = meds_advantage_diagnostics(rewards, penalty_index=1, reward_weights=[1.0, 1.0], group_ids=[0, 0, 0, 0],
...                                is_correct=[True, False, False, True])
>>> round(d["advantage_shift"], 4), d["frac_groups_differentiated"]  # 0 up to TRL's 1e-4 epsilon
(0.0, 0.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

TRL_STD_EPSILON = 1e-4
"""TRL divides by ``std + 1e-4`` (``GRPOTrainer._generate_and_score_completions``, trl 1.16)."""

SCALE_REWARDS = ("group", "batch", "none")
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


def _as_array(values: Any, name: str, ndim: int) -> np.ndarray:
    if type(values).__module__.split(".")[0] == "torch":
        values = values.detach().double().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {array.shape}.")
    return array


def _nanstd(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    """TRL's ``nanstd``: Bessel-corrected, NaN ignored, NaN where fewer than two values."""
    count = np.sum(~np.isnan(values), axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nansum(values, axis=axis, keepdims=True) / count
        variance = np.nansum((values - mean) ** 2, axis=axis, keepdims=True) / (count - 1)
    variance = np.where(count > 1, variance, np.nan)
    std = np.sqrt(variance)
    return std if axis is not None else std.reshape(())


def _nanmean(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    count = np.sum(~np.isnan(values), axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nansum(values, axis=axis, keepdims=True) / count
    return np.where(count > 0, mean, np.nan)


def _group_index(group_ids: Any, batch_size: int) -> tuple[np.ndarray, int]:
    ids = np.asarray(group_ids)
    if ids.shape != (batch_size,):
        raise ValueError(f"group_ids must have shape ({batch_size},), got {ids.shape}.")
    _, index = np.unique(ids, return_inverse=True)
    return index.reshape(-1), int(index.max()) + 1 if batch_size else 0


def _per_group(values: np.ndarray, index: np.ndarray, num_groups: int, reduce) -> np.ndarray:
    """``reduce`` applied to each group's rows, broadcast back to the rows."""
    out = np.empty(values.shape, dtype=np.float64)
    for group in range(num_groups):
        rows = index == group
        out[rows] = reduce(values[rows], axis=0)
    return out


def trl_advantages(
    rewards_per_func: Any,
    reward_weights: Any,
    group_ids: Any,
    scale_rewards: str = "group",
    aggregation: str = "sum_then_normalize",
) -> np.ndarray:
    """The (B,) advantages TRL's ``GRPOTrainer`` computes from gathered rewards (trl 1.16).

    Args:
        rewards_per_func: (B, F) rewards, NaN where a reward function returned None.
        reward_weights: (F,) weights of the reward functions.
        group_ids: (B,) id of each row's group (TRL's groups are consecutive blocks of ``num_generations``).
        scale_rewards: ``"group"`` (divide by the group's std + 1e-4), ``"batch"`` (the batch's std + 1e-4) or
            ``"none"`` (only centre by the group mean).
        aggregation: TRL's ``multi_objective_aggregation``: ``"sum_then_normalize"`` (weighted NaN-sum, then the
            above) or ``"normalize_then_sum"`` (each function normalised per group, weighted sum, then
            normalised over the batch; ``scale_rewards`` is not used there, as in TRL).

    Rows where every function is NaN are unscorable: excluded from the means and stds, advantage 0; any other
    NaN advantage (e.g. a std over one value) becomes 0, as ``torch.nan_to_num`` does in TRL.

    >>> trl_advantages([[1.0], [0.0]], [1.0], [0, 0]).round(4).tolist()
    [0.707, -0.707]
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}.")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}.")
    values = _as_array(rewards_per_func, "rewards_per_func", 2)
    weights = _as_array(reward_weights, "reward_weights", 1)
    if weights.shape[0] != values.shape[1]:
        raise ValueError(
            f"reward_weights has {weights.shape[0]} entries but rewards_per_func has {values.shape[1]} columns."
        )
    index, num_groups = _group_index(group_ids, values.shape[0])
    unscorable = np.isnan(values).all(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        if aggregation == "sum_then_normalize":
            rewards = np.nansum(values * weights[None, :], axis=1)
            rewards[unscorable] = np.nan
            advantages = rewards - _per_group(rewards, index, num_groups, _nanmean)
            if scale_rewards == "group":
                advantages = advantages / (_per_group(rewards, index, num_groups, _nanstd) + TRL_STD_EPSILON)
            elif scale_rewards == "batch":
                advantages = advantages / (_nanstd(rewards) + TRL_STD_EPSILON)
        else:
            mean_k = _per_group(values, index, num_groups, _nanmean)
            std_k = _per_group(values, index, num_groups, _nanstd)
            rewards = np.nansum((values - mean_k) / (std_k + TRL_STD_EPSILON) * weights[None, :], axis=1)
            rewards[unscorable] = np.nan
            advantages = (rewards - np.nanmean(rewards)) / (_nanstd(rewards) + TRL_STD_EPSILON)
    return np.nan_to_num(advantages, nan=0.0)


def meds_advantage_diagnostics(
    rewards_per_func: Any,
    penalty_index: int,
    reward_weights: Any,
    group_ids: Any,
    is_correct: Any,
    scale_rewards: str = "group",
    aggregation: str = "sum_then_normalize",
    tolerance: float = 1e-9,
) -> dict[str, float]:
    """How much the MEDS penalty column changes TRL's advantages this step.

    Args:
        rewards_per_func: (B, F) gathered rewards as TRL normalises them, the MEDS penalty in column
            ``penalty_index``.
        penalty_index: the penalty column; "without penalty" drops it (the advantages plain GRPO would get).
        reward_weights: (F,) TRL's reward weights (the penalty's included).
        group_ids: (B,) group of each row.
        is_correct: (B,) bools; rows with a NaN correctness reward should be False here (they are not
            penalised, so they never make a group differentiated).
        scale_rewards, aggregation: TRL's settings (see :func:`trl_advantages`).
        tolerance: penalties closer than this count as equal.

    Returns:
        ``advantage_shift`` (mean over rows of ``|A_MEDS − A_without_penalty|``) and
        ``frac_groups_differentiated`` (share of all groups in which at least two wrong rollouts got penalties
        differing by more than ``tolerance``).
    """
    values = _as_array(rewards_per_func, "rewards_per_func", 2)
    weights = _as_array(reward_weights, "reward_weights", 1)
    if not 0 <= penalty_index < values.shape[1]:
        raise ValueError(
            f"penalty_index={penalty_index} is out of range for {values.shape[1]} reward columns."
        )
    batch_size = values.shape[0]
    correct = np.asarray(is_correct, dtype=bool)
    if correct.shape != (batch_size,):
        raise ValueError(f"is_correct must have shape ({batch_size},), got {correct.shape}.")
    if batch_size == 0:
        return {"advantage_shift": 0.0, "frac_groups_differentiated": 0.0}
    keep = [i for i in range(values.shape[1]) if i != penalty_index]
    with_penalty = trl_advantages(values, weights, group_ids, scale_rewards, aggregation)
    without_penalty = trl_advantages(values[:, keep], weights[keep], group_ids, scale_rewards, aggregation)

    index, num_groups = _group_index(group_ids, batch_size)
    differentiated = _differentiated_groups(values[:, penalty_index], correct, index, num_groups, tolerance)
    return {
        "advantage_shift": float(np.mean(np.abs(with_penalty - without_penalty))),
        "frac_groups_differentiated": int(differentiated.sum()) / num_groups,
    }


def _differentiated_groups(
    penalty: np.ndarray, correct: np.ndarray, index: np.ndarray, num_groups: int, tolerance: float
) -> np.ndarray:
    """(num_groups,) bools: at least two wrong rollouts of the group got penalties more than ``tolerance`` apart."""
    out = np.zeros(num_groups, dtype=bool)
    for group in range(num_groups):
        wrong_penalties = penalty[(index == group) & ~correct & ~np.isnan(penalty)]
        out[group] = wrong_penalties.size >= 2 and wrong_penalties.max() - wrong_penalties.min() > tolerance
    return out


def meds_group_counts(
    penalties: Any, is_correct: Any, shaped: Any, revisited: Any, group_ids: Any, tolerance: float = 1e-9
) -> dict[str, int]:
    """What MEDS did to one batch's groups, as counts (the trainer sums them over the run).

    Args:
        penalties: (B,) the MEDS penalty of each row (0 where not shaped, NaN where ungraded).
        is_correct: (B,) bools.
        shaped: (B,) bools, rows the penalty may act on (memorised and not in a uniform group).
        revisited: (B,) bools, rows whose prompt already had stored wrong rollouts before this batch.
        group_ids: (B,) group of each row.
        tolerance: penalties closer than this count as equal.

    Returns:
        ``groups_mixed`` (groups with a shaped right and a shaped wrong rollout), ``groups_revisited`` (those whose
        prompt was memorised before: the only ones MEDS can differentiate, since a first visit sizes every rollout
        0), ``groups_differentiated`` (groups whose wrong rollouts got different penalties), ``rollouts_shaped``,
        ``rollouts_penalised`` (nonzero penalty).

    >>> meds_group_counts([0.0, -0.1, -0.2, 0.0, 0.0, 0.0], [True, False, False, True, False, False],
    ...                   [True] * 6, [True, True, True, False, False, False], [0, 0, 0, 1, 1, 1])
    {'groups_mixed': 2, 'groups_revisited': 1, 'groups_differentiated': 1, 'rollouts_shaped': 6, 'rollouts_penalised': 2}
    """
    penalty = _as_array(penalties, "penalties", 1)
    batch_size = penalty.shape[0]
    arrays = {}
    for name, values in (("is_correct", is_correct), ("shaped", shaped), ("revisited", revisited)):
        arrays[name] = np.asarray(values, dtype=bool)
        if arrays[name].shape != (batch_size,):
            raise ValueError(f"{name} must have shape ({batch_size},), got {arrays[name].shape}.")
    correct, shaped_rows, revisited_rows = arrays["is_correct"], arrays["shaped"], arrays["revisited"]
    if batch_size == 0:
        return dict.fromkeys(
            ("groups_mixed", "groups_revisited", "groups_differentiated", "rollouts_shaped", "rollouts_penalised"), 0
        )
    index, num_groups = _group_index(group_ids, batch_size)
    mixed = np.zeros(num_groups, dtype=bool)
    revisited_groups = np.zeros(num_groups, dtype=bool)
    for group in range(num_groups):
        rows = (index == group) & shaped_rows
        mixed[group] = bool((correct[rows]).any() and (~correct[rows]).any())
        revisited_groups[group] = mixed[group] and bool(revisited_rows[rows].any())
    shaped_penalty = np.where(shaped_rows, penalty, np.nan)
    differentiated = _differentiated_groups(shaped_penalty, correct, index, num_groups, tolerance)
    with np.errstate(invalid="ignore"):
        penalised = shaped_rows & (np.abs(np.nan_to_num(penalty)) > tolerance)
    return {
        "groups_mixed": int(mixed.sum()),
        "groups_revisited": int(revisited_groups.sum()),
        "groups_differentiated": int(differentiated.sum()),
        "rollouts_shaped": int(shaped_rows.sum()),
        "rollouts_penalised": int(penalised.sum()),
    }


def meds_summary_line(totals: Any, memory_rows: int, memory_keys: int) -> str:
    """One line on what MEDS did in a run, from summed :func:`meds_group_counts`.

    >>> print(meds_summary_line({"groups_mixed": 320, "groups_revisited": 250, "groups_differentiated": 61,
    ...                          "rollouts_shaped": 2560, "rollouts_penalised": 700}, 1234, 128))
    MEDS differentiated 61 of 320 mixed groups (61 of the 250 that met their prompt's stored mistakes) and \
penalised 700 of 2,560 shaped rollouts; its memory holds 1,234 rollouts under 128 keys.
    """
    get = lambda name: int(totals.get(name, 0))  # noqa: E731
    return (
        f"MEDS differentiated {get('groups_differentiated'):,} of {get('groups_mixed'):,} mixed groups "
        f"({get('groups_differentiated'):,} of the {get('groups_revisited'):,} that met their prompt's stored "
        f"mistakes) and penalised {get('rollouts_penalised'):,} of {get('rollouts_shaped'):,} shaped rollouts; its "
        f"memory holds {memory_rows:,} rollouts under {memory_keys:,} keys."
    )
