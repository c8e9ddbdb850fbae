"""Can MEDS act in this run? An estimate from the run's shape, before any compute is spent.

MEDS sizes a rollout's cluster from its own prompt's *stored* wrong rollouts only (as the authors'
``layer_logits_utils.cluster_and_log`` does): at a prompt's first memorised visit every size is 0, and a penalty
that every wrong rollout of a group shares cancels in GRPO's group normalisation. So MEDS changes an update only
at a *revisit* whose memory already holds enough wrong rollouts for HDBSCAN to give two of them different sizes:
with ``min_cluster_size`` m, HDBSCAN (no single cluster) labels ``2m`` or fewer points either all noise or two
clusters of m, which gives every new rollout the same size; ``2m + 1`` points can split unevenly
(:func:`rows_to_split`).

:func:`estimate_meds_visits` turns the run's shape (prompts in the pool, prompts memorised per generation, number
of generations, dynamic sampling) into how often each prompt is memorised again and how many wrong rollouts it
holds when it is, and :func:`meds_can_act` into a verdict:

- memorised visits: with DAPO's dynamic sampling (the authors' recipe) every group of the trained batch has both
  right and wrong rollouts and is memorised, so each generation memorises ``prompts_per_generation`` groups.
  Without it only such mixed groups are memorised: ``mixed_fraction`` of them (1.0, the default, gives an upper
  bound);
- how visits spread over prompts: without dynamic sampling and with every group memorised, TRL's sampler visits
  every prompt once per pass (a new permutation each pass), so each prompt gets ``floor`` or ``ceil`` of the
  passes; otherwise (dynamic sampling draws its extra prompts from a permutation of its own, and which groups are
  mixed is chance) the visits of a prompt are Poisson with the passes as mean;
- wrong rollouts stored per visit: ``num_generations × (1 - pass_rate)`` (``pass_rate`` 0.5 by default, a mixed
  group's expected share), capped at ``max_rows_per_key``.

Checked against the SmolLM2 study (``docs/real_model_results/study/meds_ds-seed*.json``: 512 prompts, 60 steps of 2
prompts, dynamic sampling): 0.23 passes and 12.0 prompts memorised twice are predicted; the logged memory held
217 and 220 keys after 120 memorised groups (each new prompt adds a right and a wrong key), that is 11.5 and 10
prompts memorised twice. ``tests/test_meds_preflight.py`` recomputes both from the committed files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = [
    "MIN_REVISIT_SHARE",
    "MEDSVisitEstimate",
    "estimate_meds_visits",
    "meds_can_act",
    "meds_preflight_message",
    "rows_to_split",
    "training_generations",
]

MIN_REVISIT_SHARE = 0.5
"""MEDS can act on a run only when at least this share of memorised visits find their prompt memorised before (below
it, most prompts are memorised once)."""

DEFAULT_PASS_RATE = 0.5
"""The assumed share of right rollouts in a memorised (mixed) group, for the wrong rollouts stored per visit."""


def rows_to_split(min_cluster_size: int) -> int:
    """The fewest stored rows of one prompt at which HDBSCAN can give two new rollouts different cluster sizes.

    With ``allow_single_cluster`` off (the reference's fit), ``2m`` or fewer points (``m = min_cluster_size``) are
    either all noise or two clusters of ``m``: every label carries the same count, so every rollout of a group gets
    the same size (the penalty then cancels in the group normalisation). ``2m + 1`` points can split ``m`` and
    ``m + 1``, or two clusters and a noise point.

    >>> rows_to_split(2)
    5
    """
    if min_cluster_size < 2:
        raise ValueError(f"min_cluster_size={min_cluster_size} must be >= 2 (HDBSCAN's smallest cluster).")
    return 2 * min_cluster_size + 1


def training_generations(
    max_steps: int, gradient_accumulation_steps: int, steps_per_generation: int, num_iterations: int
) -> int:
    """Generation batches TRL samples in ``max_steps`` optimizer steps: one every ``steps_per_generation ×
    num_iterations`` micro-batches, ``gradient_accumulation_steps`` micro-batches a step.

    >>> training_generations(60, 1, 1, 1)
    60
    >>> training_generations(10, 4, 8, 1)  # one generation serves two optimizer steps
    5
    """
    for name, value in (
        ("max_steps", max_steps),
        ("gradient_accumulation_steps", gradient_accumulation_steps),
        ("steps_per_generation", steps_per_generation),
        ("num_iterations", num_iterations),
    ):
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1.")
    return math.ceil(max_steps * gradient_accumulation_steps / (steps_per_generation * num_iterations))


@dataclass(frozen=True)
class MEDSVisitEstimate:
    """How often MEDS meets each prompt again in a run, and with how many stored wrong rollouts.

    Attributes:
        pool_size: distinct prompts the run draws from.
        memorised_visits: group visits that enter the error memory over the run.
        visits_per_prompt: ``memorised_visits / pool_size`` (passes over the pool, as the memory sees them).
        prompts_memorised: expected prompts memorised at least once.
        revisited_prompts: expected prompts memorised at least twice.
        revisit_share: share of memorised visits whose prompt was memorised before (nonzero cluster sizes possible).
        wrong_rows_per_visit: wrong rollouts a memorised visit stores.
        rows_at_revisit: mean stored wrong rollouts of a prompt at a revisit.
        rows_to_split: stored rows HDBSCAN needs to give a group's rollouts different sizes.
        actable_share: share of memorised visits whose prompt already holds ``rows_to_split`` wrong rollouts.
        model: ``"permutation"`` (every prompt visited once per pass) or ``"poisson"``.
        dynamic_sampling, mixed_fraction, pass_rate, num_generations: the assumptions used.
    """

    pool_size: int
    memorised_visits: float
    visits_per_prompt: float
    prompts_memorised: float
    revisited_prompts: float
    revisit_share: float
    wrong_rows_per_visit: float
    rows_at_revisit: float
    rows_to_split: int
    actable_share: float
    model: str
    dynamic_sampling: bool
    mixed_fraction: float
    pass_rate: float
    num_generations: int

    def as_metrics(self, prefix: str = "meds/preflight/") -> dict[str, float]:
        """The estimate's numbers under ``prefix``, for a run's metrics."""
        return {
            f"{prefix}{name}": float(value) for name, value in asdict(self).items() if not isinstance(value, str)
        } | {f"{prefix}can_act": float(meds_can_act(self))}

    @classmethod
    def from_metrics(cls, record: Mapping[str, Any], prefix: str = "meds/preflight/") -> MEDSVisitEstimate | None:
        """The estimate a run logged with :meth:`as_metrics` (its ``model`` is not logged: ``"logged"``); ``None``
        when ``record`` holds none."""
        values = {}
        for item in fields(cls):
            value = record.get(f"{prefix}{item.name}")
            if item.name == "model":
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                return None
            values[item.name] = value
        integers = ("pool_size", "rows_to_split", "num_generations")
        values.update({name: int(values[name]) for name in integers})
        values["dynamic_sampling"] = bool(values["dynamic_sampling"])
        return cls(model="logged", **values)


def _visit_distribution(mean: float, model: str, tail: float = 1e-12) -> list[tuple[int, float]]:
    """``(visits, probability)`` of one prompt's memorised visits, to a negligible tail."""
    if model == "permutation":
        low = math.floor(mean)
        high_share = mean - low
        return [(low, 1.0 - high_share), (low + 1, high_share)] if high_share > 0 else [(low, 1.0)]
    points, probability, count, covered = [], math.exp(-mean), 0, 0.0
    while covered < 1.0 - tail and count < 10 * mean + 100:
        points.append((count, probability))
        covered += probability
        count += 1
        probability *= mean / count
    return points


def estimate_meds_visits(
    pool_size: int,
    prompts_per_generation: int,
    generations: int,
    num_generations: int,
    *,
    dynamic_sampling: bool,
    mixed_fraction: float | None = None,
    pass_rate: float = DEFAULT_PASS_RATE,
    min_cluster_size: int = 2,
    max_rows_per_key: int | None = None,
) -> MEDSVisitEstimate:
    """How often each prompt is memorised again, and how many wrong rollouts it holds then (module docstring).

    Args:
        pool_size: distinct prompts of the training set.
        prompts_per_generation: prompt groups per generation batch (``generation_batch_size // num_generations``,
            all processes).
        generations: generation batches of the run (:func:`training_generations`).
        num_generations: rollouts per prompt (G).
        dynamic_sampling: DAPO's dynamic sampling on accuracy (every trained group mixed, all memorised).
        mixed_fraction: share of groups with both right and wrong rollouts; without dynamic sampling only those are
            memorised. ``None``: 1.0, an upper bound. Ignored with dynamic sampling.
        pass_rate: expected share of right rollouts in a mixed group.
        min_cluster_size: HDBSCAN's (``meds_min_cluster_size``).
        max_rows_per_key: the memory's cap per prompt and outcome (``meds_max_rows_per_key``), if any.

    >>> study = estimate_meds_visits(512, 2, 60, 8, dynamic_sampling=True)  # the SmolLM2 study's meds_ds arm
    >>> round(study.visits_per_prompt, 3), round(study.revisited_prompts, 1), meds_can_act(study)
    (0.234, 12.0, False)
    >>> toy = estimate_meds_visits(64, 8, 40, 8, dynamic_sampling=True)  # 5 visits a prompt, 4 wrong rows each
    >>> round(toy.revisit_share, 2), round(toy.rows_at_revisit, 1), meds_can_act(toy)
    (0.8, 12.5, True)
    """
    for name, value in (
        ("pool_size", pool_size),
        ("prompts_per_generation", prompts_per_generation),
        ("num_generations", num_generations),
    ):
        if value < 1:
            raise ValueError(f"{name}={value} must be >= 1.")
    if generations < 0:
        raise ValueError(f"generations={generations} must be >= 0.")
    if mixed_fraction is not None and not 0.0 < mixed_fraction <= 1.0:
        raise ValueError(
            f"mixed_fraction={mixed_fraction} must be in (0, 1]: the share of groups with both right and wrong "
            "rollouts."
        )
    if not 0.0 <= pass_rate < 1.0:
        raise ValueError(f"pass_rate={pass_rate} must be in [0, 1): the share of right rollouts in a mixed group.")
    if max_rows_per_key is not None and max_rows_per_key < 1:
        raise ValueError(f"max_rows_per_key={max_rows_per_key} must be >= 1 or None.")
    memorised_share = 1.0 if dynamic_sampling or mixed_fraction is None else float(mixed_fraction)
    memorised_visits = generations * prompts_per_generation * memorised_share
    mean = memorised_visits / pool_size
    model = "permutation" if not dynamic_sampling and memorised_share == 1.0 else "poisson"
    wrong_per_visit = num_generations * (1.0 - pass_rate)
    needed = rows_to_split(min_cluster_size)
    cap = math.inf if max_rows_per_key is None else max_rows_per_key

    memorised = revisited = later_visits = actable_visits = rows_at_revisits = 0.0
    for visits, probability in _visit_distribution(mean, model):
        if visits >= 1:
            memorised += probability
        if visits >= 2:
            revisited += probability
        for earlier in range(1, visits):  # the visit after `earlier` memorised ones
            stored = min(earlier * wrong_per_visit, cap)
            later_visits += probability
            rows_at_revisits += probability * stored
            actable_visits += probability * (stored >= needed)
    return MEDSVisitEstimate(
        pool_size=pool_size,
        memorised_visits=memorised_visits,
        visits_per_prompt=mean,
        prompts_memorised=pool_size * memorised,
        revisited_prompts=pool_size * revisited,
        revisit_share=later_visits / mean if mean > 0 else 0.0,
        wrong_rows_per_visit=wrong_per_visit,
        rows_at_revisit=rows_at_revisits / later_visits if later_visits > 0 else 0.0,
        rows_to_split=needed,
        actable_share=actable_visits / mean if mean > 0 else 0.0,
        model=model,
        dynamic_sampling=bool(dynamic_sampling),
        mixed_fraction=memorised_share,
        pass_rate=pass_rate,
        num_generations=num_generations,
    )


def meds_can_act(estimate: MEDSVisitEstimate) -> bool:
    """Whether MEDS can change updates in this run: at least half the memorised visits are revisits
    (:data:`MIN_REVISIT_SHARE`) and a revisit finds, on average, at least the rows HDBSCAN needs to split."""
    return estimate.revisit_share >= MIN_REVISIT_SHARE and estimate.rows_at_revisit >= estimate.rows_to_split


def meds_preflight_message(estimate: MEDSVisitEstimate, steps: int | None = None) -> str:
    """What the estimate says, in a sentence or three: why MEDS can or cannot act, and what changes it.

    >>> print(meds_preflight_message(estimate_meds_visits(512, 2, 60, 8, dynamic_sampling=True), steps=60))
    ... # doctest: +ELLIPSIS
    MEDS can barely act in this run: 0.23 memorised visits per prompt over 60 steps (512 prompts); 12.0 prompts...
    """
    over = f" over {steps} steps" if steps is not None else ""
    upper = (
        ""
        if estimate.dynamic_sampling or estimate.mixed_fraction < 1.0
        else " at most (without dynamic sampling only groups with both right and wrong rollouts are memorised)"
    )
    facts = (
        f"{estimate.visits_per_prompt:.2f} memorised visits per prompt{over} ({estimate.pool_size} prompts){upper}; "
        f"{estimate.revisited_prompts:.1f} prompts are expected to be memorised twice or more, and "
        f"{estimate.revisit_share:.0%} of memorised visits find their prompt's memory non-empty, holding "
        f"{estimate.rows_at_revisit:.1f} wrong rollouts on average ({estimate.wrong_rows_per_visit:g} per visit, "
        f"assuming {estimate.pass_rate:.0%} right in a mixed group of {estimate.num_generations}); "
        f"{estimate.actable_share:.0%} of memorised visits find the {estimate.rows_to_split} stored wrong rollouts "
        "HDBSCAN needs to give two rollouts different cluster sizes."
    )
    if meds_can_act(estimate):
        return f"MEDS can act in this run: {facts}"
    return (
        f"MEDS can barely act in this run: {facts} MEDS sizes a rollout's cluster from its own prompt's stored wrong "
        "rollouts only, so a first visit always gets size 0, and a penalty that all wrong rollouts of a group share "
        "cancels in the group normalisation. To let it act: train on fewer prompts or for more steps (the authors "
        "train 100 epochs), or raise num_generations"
        + ("" if estimate.dynamic_sampling else ", and turn on --dynamic_sampling true (the authors' recipe)")
        + "."
    )
