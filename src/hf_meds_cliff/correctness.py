"""Checks shared by the MEDS and Cliff trainers on the reward that decides correctness.

Both methods split rollouts into correct and incorrect with ``reward >= threshold`` on one reward
function (``meds_correctness_reward_index`` / ``cliff_correctness_reward_index``). A reward that is not
a 0/1 verdict (a length or format score, a partial-credit grade) silently breaks them: MEDS penalises
every rollout as "wrong", Cliff sees no mixed group and skips them all. The trainers run
:func:`check_binary_correctness` on their first training batch and stop with its message.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "binarize_correctness",
    "binarize_trainer_correctness",
    "check_binary_correctness",
    "correctness_threshold",
    "non_binary_correctness_values",
]

logger = logging.getLogger(__name__)

BINARIZED_THRESHOLD = 0.5
"""Where a binarised column (0.0 / 1.0) is split into wrong and correct."""


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
    binarize_field: str | None = None,
) -> None:
    """Raise ``ValueError`` when the correctness rewards of a batch are not a binary verdict.

    Args:
        values: the correctness reward of every rollout of the batch (NaN = not graded).
        method: ``"MEDS"`` or ``"Cliff"`` (for the message).
        index_field, index: the config field that selects the reward (e.g. ``meds_correctness_reward_index``)
            and its value.
        threshold_field, threshold: the config field of the correctness threshold and its value.
        reward_name: the name of the selected reward function.
        binarize_field: the config field of the opt-in binarising mode, named in the message as the fix for a
            graded score.

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
        + (
            f" For a graded score (a reward model, partial credit), pass {binarize_field}=True: correct then means "
            f"score >= {threshold_field}."
            if binarize_field
            else ""
        )
    )


def check_trainer_correctness_reward(trainer: Any, values: Sequence[float]) -> None:
    """:func:`check_binary_correctness` for a MEDS or Cliff trainer: the fields are its config's
    ``<prefix>correctness_reward_index`` and ``<prefix>correctness_threshold`` (``trainer._config_prefix``), the
    method its ``_name``, the reward name from ``trainer.reward_func_names``."""
    index_field = f"{trainer._config_prefix}correctness_reward_index"
    threshold_field = f"{trainer._config_prefix}correctness_threshold"
    binarize_field = f"{trainer._config_prefix}binarize_correctness"
    if getattr(trainer.args, binarize_field, False):
        return  # binarised: 0/1 by construction
    index = getattr(trainer.args, index_field)
    check_binary_correctness(
        values,
        method=trainer._name,
        index_field=index_field,
        index=index,
        threshold_field=threshold_field,
        threshold=getattr(trainer.args, threshold_field),
        reward_name=trainer.reward_func_names[index],
        binarize_field=binarize_field,
    )


def binarize_correctness(scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """The 0/1 verdict of graded scores: ``(B,) -> (B,)`` float, 1.0 where ``score >= threshold``, 0.0 below, NaN
    (a reward function's ``None``: not graded) kept as NaN.

    >>> binarize_correctness(torch.tensor([0.1, 0.4, 0.7, 0.9, float("nan")]), 0.5).tolist()
    [0.0, 0.0, 1.0, 1.0, nan]
    """
    scores = scores.float()
    verdict = (scores >= threshold).float()
    return torch.where(torch.isnan(scores), scores, verdict)


def correctness_threshold(trainer: Any) -> float:
    """The value from which a MEDS or Cliff trainer's correctness column counts as correct: the configured
    ``<prefix>correctness_threshold``, or :data:`BINARIZED_THRESHOLD` once the column is binarised to 0/1."""
    if getattr(trainer.args, f"{trainer._config_prefix}binarize_correctness", False):
        return BINARIZED_THRESHOLD
    return float(getattr(trainer.args, f"{trainer._config_prefix}correctness_threshold"))


def binarize_trainer_correctness(trainer: Any, rewards_per_func: torch.Tensor) -> None:
    """For a MEDS or Cliff trainer, on TRL's gathered ``(B, n_funcs)`` rewards (in place): binarise the correctness
    column when ``<prefix>binarize_correctness`` is on, and log ``<method>/frac_correct`` (the fraction of graded rows
    that count as correct; NaN rows left out) in both modes.

    When binarising, a first training batch whose graded rows all fall into one class (every score below the threshold,
    or every one at or above it) is warned about once: no group then has mixed correctness, so MEDS shapes nothing
    (uniform groups are left alone) and Cliff falls back to GRPO for every group, which usually means the threshold does
    not suit the scores' scale.
    """
    prefix = trainer._config_prefix
    args = trainer.args
    index = getattr(args, f"{prefix}correctness_reward_index")
    mode = "train" if trainer.model.training else "eval"
    column = rewards_per_func[:, index]
    if getattr(args, f"{prefix}binarize_correctness", False):
        threshold = float(getattr(args, f"{prefix}correctness_threshold"))
        verdict = binarize_correctness(column, threshold).to(rewards_per_func.dtype)
        graded = ~torch.isnan(column)
        if mode == "train" and not getattr(trainer, "_binarize_single_class_checked", False):
            trainer._binarize_single_class_checked = True
            correct = int((verdict[graded] == 1).sum())
            if graded.any() and correct in (0, int(graded.sum())):
                logger.warning(
                    "%s binarises reward function %d (%r) with %scorrectness_threshold=%g, but on the first training "
                    "batch all %d graded rollouts are %s (scores from %g to %g): no group has mixed correctness, so "
                    "the method changes nothing until some do. Set %scorrectness_threshold inside the scores' range.",
                    trainer._name, index, trainer.reward_func_names[index], prefix, threshold, int(graded.sum()),
                    "correct" if correct else "wrong", float(column[graded].min()), float(column[graded].max()), prefix,
                )  # fmt: skip
        rewards_per_func[:, index] = verdict
        column = rewards_per_func[:, index]
    graded = ~torch.isnan(column)
    if graded.any():
        is_correct = column[graded] >= correctness_threshold(trainer)
        name = prefix.rstrip("_")
        trainer._metrics[mode][f"{name}/frac_correct"].append(float(is_correct.float().mean()))

