"""Checks shared by the MEDS and Cliff trainers on the reward that decides correctness.

Both methods split rollouts into correct and incorrect with ``reward >= threshold`` on one reward
function (``meds_correctness_reward_index`` / ``cliff_correctness_reward_index``). A reward that is not
a 0/1 verdict (a length or format score, a partial-credit grade) silently breaks them: MEDS penalises
every rollout as "wrong", Cliff sees no mixed group and skips them all. The trainers run
:func:`check_binary_correctness` on their first training batch and stop with its message.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["check_binary_correctness", "non_binary_correctness_values"]


def non_binary_correctness_values(values: Sequence[float], threshold: float = 1.0) -> list[float]:
    """The values that make ``values`` (one reward per rollout, NaN = not graded) not a binary verdict.

    A binary verdict takes at most one value below ``threshold`` (wrong) and at most one at or above it
    (right); with the default threshold 1.0 these are the usual 0 and 1. Returns the distinct offending
    values, sorted (empty when the rewards are binary). NaN rows (a reward function's ``None``) are ignored.

    >>> non_binary_correctness_values([0.0, 1.0, float("nan"), 1.0])
    []
    >>> non_binary_correctness_values([0.2, 0.5, 0.9])
    [0.2, 0.5, 0.9]
    >>> non_binary_correctness_values([-1.0, 2.0], threshold=2.0)
    []
    """
    distinct = sorted({float(v) for v in values if not math.isnan(float(v))})
    below = [v for v in distinct if v < threshold]
    above = [v for v in distinct if v >= threshold]
    if len(below) <= 1 and len(above) <= 1:
        return []
    return distinct


def check_binary_correctness(
    values: Sequence[float],
    *,
    method: str,
    index_field: str,
    index: int,
    threshold_field: str,
    threshold: float,
    reward_name: str,
) -> None:
    """Raise ``ValueError`` when the correctness rewards of a batch are not a binary verdict.

    Args:
        values: the correctness reward of every rollout of the batch (NaN = not graded).
        method: ``"MEDS"`` or ``"Cliff"`` (for the message).
        index_field, index: the config field that selects the reward (e.g. ``meds_correctness_reward_index``)
            and its value.
        threshold_field, threshold: the config field of the correctness threshold and its value.
        reward_name: the name of the selected reward function.

    >>> check_binary_correctness([0.1, 0.4, 0.7], method="MEDS", index_field="meds_correctness_reward_index",
    ...     index=0, threshold_field="meds_correctness_threshold", threshold=1.0, reward_name="length")
    Traceback (most recent call last):
    ...
    ValueError: MEDS needs a 0/1 correctness reward, but reward function 0 ('length', selected by ...
    """
    offending = non_binary_correctness_values(values, threshold)
    if not offending:
        return
    shown = ", ".join(f"{v:g}" for v in offending[:6]) + (", ..." if len(offending) > 6 else "")
    correct = sum(1 for v in values if not math.isnan(float(v)) and float(v) >= threshold)
    raise ValueError(
        f"{method} needs a 0/1 correctness reward, but reward function {index} ({reward_name!r}, selected by "
        f"{index_field}={index}) returned {len(offending)} distinct values on the first training batch ({shown}); "
        f"with {threshold_field}={threshold:g}, {correct} of {len(values)} rollouts count as correct. {method} "
        "splits rollouts into correct (reward >= threshold) and incorrect ones, so a graded reward (length, format, "
        f"partial credit) would treat nearly every rollout as wrong. Point {index_field} at the verifiable 0/1 "
        f"reward (e.g. hf_meds_cliff.rewards.MathAnswerReward), or set {threshold_field} for a two-valued reward "
        "on another scale."
    )


def check_trainer_correctness_reward(trainer: Any, values: Sequence[float]) -> None:
    """:func:`check_binary_correctness` for a MEDS or Cliff trainer: the fields are its config's
    ``<prefix>correctness_reward_index`` and ``<prefix>correctness_threshold`` (``trainer._config_prefix``), the
    method its ``_name``, the reward name from ``trainer.reward_func_names``."""
    index_field = f"{trainer._config_prefix}correctness_reward_index"
    threshold_field = f"{trainer._config_prefix}correctness_threshold"
    index = getattr(trainer.args, index_field)
    check_binary_correctness(
        values,
        method=trainer._name,
        index_field=index_field,
        index=index,
        threshold_field=threshold_field,
        threshold=getattr(trainer.args, threshold_field),
        reward_name=trainer.reward_func_names[index],
    )
