"""When MEDS has nothing to act on, and why its memory is empty: pure functions for the trainer and the report.

MEDS (as its authors run it, and this package's default) never memorises nor shapes a group whose rollouts are all
right or all wrong: the authors run it on DAPO with dynamic sampling on accuracy, which drops such groups and
generates more until the batch holds only groups with accuracy variance. Without dynamic sampling those groups stay
in the batch with GRPO's zero advantage, and when most groups are uniform (a weak or a strong policy) MEDS sees
almost nothing: its memory stays empty and its penalty 0. :func:`meds_idle` says when a step is in that state, and
:func:`idle_warning` what to do about it; :func:`explain_empty_memory` reads a run's logged metrics and says why its
memory holds no cluster.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "IDLE_UNIFORM_SHARE",
    "NO_EFFECT_BATCHES",
    "NO_EFFECT_SHIFT",
    "explain_empty_memory",
    "idle_warning",
    "meds_idle",
    "meds_without_effect",
    "no_effect_warning",
]

IDLE_UNIFORM_SHARE = 0.5
"""A step is idle when more than this share of its groups is uniform (and nothing replaces or shapes them)."""

AUTHORS_SETTING = (
    "the authors run MEDS on DAPO with dynamic sampling on accuracy (--dynamic_sampling true, which replaces uniform "
    "groups by newly generated ones)"
)


def meds_idle(
    uniform_groups: int,
    num_groups: int,
    *,
    dynamic_sampling: bool,
    shape_uniform_groups: bool,
    threshold: float = IDLE_UNIFORM_SHARE,
) -> bool:
    """Whether MEDS is (mostly) idle on a step: more than ``threshold`` of the groups uniform, none replaced
    (dynamic sampling off) and none shaped (``meds_shape_uniform_groups`` off).

    >>> meds_idle(3, 4, dynamic_sampling=False, shape_uniform_groups=False)
    True
    >>> meds_idle(2, 4, dynamic_sampling=False, shape_uniform_groups=False)  # half is not "most"
    False
    >>> meds_idle(3, 4, dynamic_sampling=True, shape_uniform_groups=False)
    False
    """
    if isinstance(uniform_groups, bool) or isinstance(num_groups, bool):
        raise TypeError("uniform_groups and num_groups are counts, not booleans.")
    if not 0 <= uniform_groups <= num_groups:
        raise ValueError(
            f"uniform_groups={uniform_groups} must be between 0 and num_groups={num_groups} (groups of the step)."
        )
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold={threshold} must be in [0, 1): the share of uniform groups above which MEDS is idle.")
    if dynamic_sampling or shape_uniform_groups or num_groups == 0:
        return False
    return uniform_groups > threshold * num_groups


def idle_warning(step: int, uniform_groups: int, num_groups: int, shapeable_rows: int, num_rows: int) -> str:
    """The one-time warning of an idle step, with its numbers and the ways out.

    >>> print(idle_warning(1, 3, 4, 4, 16))  # doctest: +ELLIPSIS
    MEDS is mostly idle: at step 1, 3 of 4 groups (75%) were uniform (all right or all wrong)...
    """
    share = uniform_groups / num_groups if num_groups else math.nan
    return (
        f"MEDS is mostly idle: at step {step}, {uniform_groups} of {num_groups} groups ({share:.0%}) were uniform "
        f"(all right or all wrong), so only {shapeable_rows} of {num_rows} rollouts could enter the error memory or "
        "be penalised. As the authors' reference does, uniform groups are neither memorised nor shaped; "
        f"{AUTHORS_SETTING}, and this run has dynamic sampling off, so nothing replaces them. Turn on "
        "--dynamic_sampling true (the authors' recipe), use prompts of medium difficulty for this policy or more "
        "generations per prompt, or set --meds_shape_uniform_groups true (memorise and shape them anyway: not the "
        "authors' rule). Logged per step as meds/idle and meds/frac_groups_uniform; this warning is shown once."
    )


NO_EFFECT_SHIFT = 1e-4
"""``meds/advantage_shift`` at or below this is no change of the update (TRL's std epsilon alone moves it ~1e-5)."""

NO_EFFECT_BATCHES = 10
"""Consecutive training batches without effect before :func:`no_effect_warning` is shown."""


def meds_without_effect(
    advantage_shifts: Sequence[float], batches: int = NO_EFFECT_BATCHES, threshold: float = NO_EFFECT_SHIFT
) -> bool:
    """Whether MEDS changed no update in the last ``batches`` training batches: each one's ``meds/advantage_shift``
    (mean |A_MEDS - A_without_penalty|, :mod:`hf_meds_cliff.meds.diagnostics`) at most ``threshold``.

    Not idle is not the same as acting: with dynamic sampling every group is mixed, yet when each group's wrong
    rollouts get one common penalty (none, or all in one cluster) group normalisation cancels it.

    >>> meds_without_effect([0.0] * 9 + [7e-6])
    True
    >>> meds_without_effect([0.0] * 9)  # fewer batches than asked for
    False
    >>> meds_without_effect([0.0] * 9 + [0.02])
    False
    """
    if batches < 1:
        raise ValueError(f"batches={batches} must be at least 1 (the number of consecutive batches to look at).")
    if threshold < 0:
        raise ValueError(f"threshold={threshold} must be >= 0 (a mean absolute advantage change).")
    recent = list(advantage_shifts)[-batches:]
    return len(recent) == batches and all(math.isfinite(v) and abs(v) <= threshold for v in recent)


def no_effect_warning(
    step: int, batches: int, frac_penalized: float, memory_keys: int, memory_rows: int, scale_rewards: str
) -> str:
    """The one-time warning when MEDS runs but changes no update, with its numbers and why.

    >>> print(no_effect_warning(12, 10, 0.006, 217, 949, "group"))  # doctest: +ELLIPSIS
    MEDS has not changed the update in 10 consecutive training batches (up to step 12): ...
    """
    per_key = memory_rows / memory_keys if memory_keys else 0.0
    cancel = (
        "under scale_rewards='group' a penalty that all wrong rollouts of a group share cancels in the "
        "normalisation, so MEDS acts only where one group's wrong rollouts get different penalties"
        if str(scale_rewards) == "group"
        else f"with scale_rewards={scale_rewards!r} the penalties it gave moved no advantage by more than "
        f"{NO_EFFECT_SHIFT:g}"
    )
    return (
        f"MEDS has not changed the update in {batches} consecutive training batches (up to step {step}): "
        f"meds/advantage_shift stayed at or below {NO_EFFECT_SHIFT:g}. It penalised {frac_penalized:.1%} of the "
        f"rollouts of the last batch, and {cancel} (meds/frac_groups_differentiated). The error memory holds "
        f"{memory_rows} wrong rollouts over {memory_keys} prompts ({per_key:.1f} per prompt), and a rollout's "
        "penalty comes from the size of its cluster among its own prompt's stored wrong rollouts. Training goes on "
        "as it would without MEDS; this warning is shown once."
    )


def _series(log_history: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    values = []
    for record in log_history:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            values.append(float(value))
    return values


def explain_empty_memory(
    log_history: Sequence[Mapping[str, Any]], num_rows: int, num_clusters: int
) -> str | None:
    """Why a run's MEDS memory holds no cluster, read from its logged metrics; ``None`` when it holds one.

    Names every cause the metrics show: idle steps (uniform groups without dynamic sampling), rollouts without a
    ``\\boxed{`` answer token (no feature), and too few stored completions per prompt for HDBSCAN (which needs at
    least 2 close points, and labels everything noise below about 4 points per prompt and outcome).

    >>> print(explain_empty_memory([{"meds/idle": 1.0, "meds/frac_groups_uniform": 0.75}], 4, 0))  # doctest: +ELLIPSIS
    The error memory holds 4 completions and no cluster, so MEDS penalised nothing. In 1 of 1 logged steps...
    """
    if num_clusters > 0:
        return None
    parts = [
        f"The error memory holds {num_rows} completion{'s' if num_rows != 1 else ''} and no cluster, so MEDS "
        "penalised nothing."
    ]
    idle = _series(log_history, "meds/idle")
    uniform = _series(log_history, "meds/frac_groups_uniform")
    if idle and sum(idle) > 0:
        mean_uniform = f" (on average {sum(uniform) / len(uniform):.0%} of groups uniform)" if uniform else ""
        parts.append(
            f"In {int(sum(idle))} of {len(idle)} logged steps most groups were uniform{mean_uniform}: all right or all "
            f"wrong groups are neither memorised nor shaped, and {AUTHORS_SETTING}; this run did not replace them."
        )
    elif uniform and not idle:  # a run from before meds/idle was logged
        parts.append(
            f"On average {sum(uniform) / len(uniform):.0%} of groups per step were uniform (all right or all wrong); "
            f"they are neither memorised nor shaped, and {AUTHORS_SETTING}."
        )
    featured = _series(log_history, "meds/frac_with_feature")
    if featured and sum(featured) / len(featured) < 0.5:
        parts.append(
            f"Only {sum(featured) / len(featured):.0%} of rollouts had a \\boxed{{ answer token on average, and a "
            "rollout without one has no feature."
        )
    if num_rows < 4:
        parts.append(
            "HDBSCAN (min_cluster_size 2) labels every point noise below about 4 stored completions per prompt and "
            "outcome, so a memory this small cannot have a cluster yet."
        )
    return " ".join(parts)
