"""From per-sample records to per-benchmark metrics (pass@k, mean@n, maj@n, answer diversity)."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..estimators import distinct_answers, maj_at_n, mean_at_n, pass_at_k
from ..rewards import check_answers

MATH_STATUS_FRACTIONS = ("no_boxed", "timeout", "error")
"""Math sample statuses whose share is reported (``<status>_fraction``)."""

CODE_STATUS_FRACTIONS = (
    "no_code",
    "wrong_answer",
    "time_limit",
    "memory_limit",
    "runtime_error",
    "compile_error",
    "sandbox_error",
)
"""Code sample statuses whose share is reported: no code block, then the first failing test's verdict."""


def default_k_values(num_samples: int) -> list[int]:
    """Powers of two up to ``num_samples``, plus ``num_samples`` itself (the paper: 1, 2, 4, ..., 128).

    >>> default_k_values(8), default_k_values(12)
    ([1, 2, 4, 8], [1, 2, 4, 8, 12])
    """
    if num_samples < 1:
        raise ValueError(f"num_samples={num_samples} must be >= 1.")
    values = [1 << i for i in range(num_samples.bit_length()) if 1 << i <= num_samples]
    return values if values[-1] == num_samples else [*values, num_samples]


def validate_k_values(k_values: Iterable[int], num_samples: int) -> list[int]:
    """Sorted unique ``k`` values, each in ``[1, num_samples]``; ``ValueError`` naming any other."""
    if num_samples < 1:
        raise ValueError(f"num_samples (n) = {num_samples} must be >= 1: pass@k needs at least one sample.")
    values = sorted({int(k) for k in k_values})
    if not values:
        raise ValueError("Give at least one k.")
    bad = [k for k in values if not 1 <= k <= num_samples]
    if bad:
        raise ValueError(
            f"k values {bad} are outside [1, n={num_samples}]; pass@k needs k <= n samples per problem."
        )
    return values


def summarize_groups(
    correct: Sequence[Sequence[bool]],
    answers: Sequence[Sequence[str | None]],
    k_values: Sequence[int],
    statuses: Sequence[Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Metrics of one benchmark from its problems' samples.

    Args:
        correct: per problem, each sample's correctness (problems may differ in n; every k must be
            at most the smallest n).
        answers: per problem, each sample's extracted answer (``None`` without a box).
        k_values: the budgets to report.
        statuses: per problem, each sample's :data:`hf_meds_cliff.rewards.STATUSES` value (optional).

    Returns:
        ``{"num_problems", "num_samples" (smallest n), "pass@k": {str(k): value}, "mean@n", "maj@n",
        "distinct_answers_mean", and with statuses "<status>_fraction" for no_boxed/timeout/error}``.
    """
    if len(correct) == 0:
        raise ValueError("No problems to summarise.")
    n = np.array([len(samples) for samples in correct])
    c = np.array([sum(bool(s) for s in samples) for samples in correct])
    k_values = validate_k_values(k_values, int(n.min()))
    summary: dict[str, Any] = {
        "num_problems": len(correct),
        "num_samples": int(n.min()),
        "pass@k": {str(k): float(np.mean(pass_at_k(n, c, k))) for k in k_values},
        "mean@n": mean_at_n(correct),
        "maj@n": maj_at_n(answers, correct),
        "distinct_answers_mean": float(np.mean([distinct_answers(a) for a in answers])),
    }
    if statuses is not None:
        flat = collections.Counter(s for problem in statuses for s in problem)
        total = sum(flat.values())
        is_code = any(status in CODE_STATUS_FRACTIONS or status == "passed" for status in flat)
        for status in CODE_STATUS_FRACTIONS if is_code else MATH_STATUS_FRACTIONS:
            summary[f"{status}_fraction"] = flat[status] / total
    return summary


def summarize_records(
    records: Iterable[Mapping[str, Any]], k_values: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """Per-benchmark metrics from per-sample records (the rows of the runner's JSONL).

    Each record needs ``benchmark``, ``problem_id``, ``sample_index``, ``correct``, ``extracted`` and
    ``status``; ``num_tokens``/``truncated`` are averaged when every record has them (not ``None``). Benchmarks keep first-seen order.
    """
    grouped: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for record in records:
        grouped.setdefault(record["benchmark"], {}).setdefault(str(record["problem_id"]), []).append(record)
    summaries = {}
    for benchmark, problems in grouped.items():
        ordered = [sorted(samples, key=lambda r: r["sample_index"]) for samples in problems.values()]
        summary = summarize_groups(
            correct=[[bool(r["correct"]) for r in samples] for samples in ordered],
            answers=[[r["extracted"] for r in samples] for samples in ordered],
            k_values=k_values,
            statuses=[[r["status"] for r in samples] for samples in ordered],
        )
        flat = [r for samples in ordered for r in samples]
        # unknown (None) for a samples file, or for samples a server answered several at a time
        if all(r.get("num_tokens") is not None for r in flat):
            summary["mean_completion_tokens"] = float(np.mean([r["num_tokens"] for r in flat]))
        if all(r.get("truncated") is not None for r in flat):
            summary["truncated_fraction"] = float(np.mean([bool(r["truncated"]) for r in flat]))
        if all("isolated" in r for r in flat):  # code: programs run with namespace isolation in force
            summary["isolated_fraction"] = float(np.mean([bool(r["isolated"]) for r in flat]))
        summaries[benchmark] = summary
    return summaries


def average_summaries(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Unweighted mean over benchmarks (the papers' "average over benchmarks") of the shared metrics."""
    if not summaries:
        raise ValueError("No benchmark summaries to average.")
    shared_k = set.intersection(*(set(s["pass@k"]) for s in summaries.values()))
    average: dict[str, Any] = {
        "num_benchmarks": len(summaries),
        "pass@k": {
            k: float(np.mean([s["pass@k"][k] for s in summaries.values()])) for k in sorted(shared_k, key=int)
        },
    }
    for key in ("mean@n", "maj@n", "distinct_answers_mean"):
        average[key] = float(np.mean([s[key] for s in summaries.values()]))
    return average


def summarize_problems(
    predictions: Sequence[Sequence[str]],
    references: Sequence[str],
    k: Sequence[int] = (1,),
    timeout: float = 5.0,
) -> dict[str, float]:
    """Score ``n`` completions per problem against the references and return pass@k, mean@n and maj@n.

    The function behind the ``evaluate`` metric (:data:`PASS_AT_K_METRIC_PATH`).

    >>> summarize_problems([["\\\\boxed{4}", "\\\\boxed{5}"], ["\\\\boxed{1}", "none"]], ["4", "2"], k=[1, 2])
    {'pass@1': 0.25, 'pass@2': 0.5, 'mean@n': 0.25, 'maj@n': 0.25}
    """
    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} prediction lists for {len(references)} references.")
    flat_completions = [completion for samples in predictions for completion in samples]
    flat_truths = [truth for samples, truth in zip(predictions, references) for _ in samples]
    if any(len(samples) == 0 for samples in predictions):
        raise ValueError("Every problem needs at least one prediction (n = 0 given).")
    checks = iter(check_answers(flat_completions, flat_truths, timeout=timeout))
    grouped = [[next(checks) for _ in samples] for samples in predictions]
    summary = summarize_groups(
        correct=[[c.correct for c in group] for group in grouped],
        answers=[[c.extracted for c in group] for group in grouped],
        k_values=k,
    )
    result = {f"pass@{key}": value for key, value in summary["pass@k"].items()}
    result["mean@n"] = summary["mean@n"]
    result["maj@n"] = summary["maj@n"]
    return result
