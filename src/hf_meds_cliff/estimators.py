"""pass@k, mean@n and maj@n: pure functions over per-problem sample outcomes.

Owned here, at the package's ground level, because the toy worlds' warm-ups (which pick their policy by pass@k)
and the evaluation runner both need them; :mod:`hf_meds_cliff.evaluation` re-exports them.
"""

from __future__ import annotations

import collections
import numbers
from collections.abc import Sequence

import numpy as np

from .rewards.extraction import normalize_answer


def _as_int_array(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        raise TypeError(f"{name} must be an integer or an array of integers, got {value!r:.80}")
    if np.issubdtype(array.dtype, np.floating) and not (
        np.all(np.isfinite(array)) and np.all(array == np.round(array))
    ):
        raise TypeError(f"{name}={value!r:.80} must hold whole numbers.")
    return array.astype(np.int64)


def pass_at_k(n, c, k: int):
    """Unbiased pass@k estimator ``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021).

    The probability that at least one of ``k`` samples drawn without replacement from ``n``
    samples, ``c`` of them correct, is correct. Computed as the stable product
    ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` (no large binomials); exactly 1.0 when ``n - c < k``.

    Args:
        n: samples per problem, an int or an array (any shape, broadcast against ``c``), ``n >= 1``.
        c: correct samples per problem, ``0 <= c <= n``, same rules as ``n``.
        k: the budget, an int with ``1 <= k <= n``.

    Returns:
        A float for scalar ``n`` and ``c``, else a float64 array of the broadcast shape.

    Raises:
        ValueError: naming the offending values when ``n < 1``, ``c < 0``, ``c > n``, ``k < 1`` or ``k > n``.

    >>> pass_at_k(4, 2, 1), pass_at_k(4, 0, 2), pass_at_k(4, 3, 2)
    (0.5, 0.0, 1.0)
    >>> pass_at_k([4, 4, 8], [1, 2, 4], 2).round(4).tolist()
    [0.5, 0.8333, 0.7857]
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an integer, got {k!r}")
    k = int(k)
    n_array, c_array = np.broadcast_arrays(_as_int_array("n", n), _as_int_array("c", c))
    if k < 1:
        raise ValueError(f"k={k} must be >= 1.")
    checks = (
        (n_array < 1, "n must be >= 1 (at least one sample per problem)"),
        (c_array < 0, "c must be >= 0"),
        (c_array > n_array, "c (correct samples) cannot exceed n (samples)"),
        (k > n_array, f"k={k} cannot exceed n; draw more samples or drop that k"),
    )
    for mask, reason in checks:
        if np.any(mask):
            index = tuple(int(i) for i in np.argwhere(mask)[0])
            where = f" at index {index}" if n_array.ndim else ""
            raise ValueError(f"{reason}: got n={int(n_array[index])}, c={int(c_array[index])}, k={k}{where}.")
    # Each distinct (n, c) pair needs one product; real evaluations have few distinct pairs.
    pairs = np.stack([n_array.ravel(), c_array.ravel()], axis=1)
    unique_pairs, inverse = np.unique(pairs, axis=0, return_inverse=True)
    values = np.empty(len(unique_pairs), dtype=np.float64)
    for row, (samples, correct) in enumerate(unique_pairs):
        if samples - correct < k:
            values[row] = 1.0
        else:
            values[row] = 1.0 - float(
                np.prod(1.0 - k / np.arange(samples - correct + 1, samples + 1, dtype=np.float64))
            )
    result = values[inverse.reshape(-1)].reshape(n_array.shape)
    if result.ndim == 0:
        return float(result)
    return result


def mean_at_n(correct: Sequence[Sequence[bool]]) -> float:
    """mean@n: the average over problems of each problem's fraction of correct samples.

    Args:
        correct: per problem, the correctness of each of its samples (problems may differ in n).

    >>> mean_at_n([[True, False], [True, True, True, False]])
    0.625
    """
    if len(correct) == 0:
        raise ValueError("mean_at_n needs at least one problem; got an empty list.")
    fractions = []
    for index, samples in enumerate(correct):
        if len(samples) == 0:
            raise ValueError(f"Problem {index} has no samples (n = 0); every problem needs at least one.")
        fractions.append(sum(bool(s) for s in samples) / len(samples))
    return float(np.mean(fractions))


def majority_answer(answers: Sequence[str | None]) -> int | None:
    """Index of a sample holding the most frequent normalised answer (the first such sample), or None.

    A tie leaves several answers with the most votes; this returns the first of them, so it is only a way to show
    *an* answer. :func:`maj_at_n` does not use it to score: it credits tied answers equally
    (:func:`majority_credit`). Samples without an answer (``None``) do not vote.

    >>> majority_answer(["12", None, "\\\\dfrac{1}{2}", "\\\\frac{1}{2}", "12"])
    0
    >>> majority_answer(["3", "\\\\frac{1}{2}", "\\\\frac{1}{2}"]), majority_answer([None, None])
    (1, None)
    """
    votes: collections.Counter[str] = collections.Counter()
    first_index: dict[str, int] = {}
    for index, answer in enumerate(answers):
        if answer is None:
            continue
        key = normalize_answer(answer)
        votes[key] += 1
        first_index.setdefault(key, index)
    if not votes:
        return None
    best = max(votes.values())
    return min(first_index[key] for key, count in votes.items() if count == best)


def majority_credit(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """One problem's maj@n credit: the share of the most-voted answers that are correct.

    Samples vote for their normalised answer (``None`` does not vote). The answers with the most votes are tied
    winners; each gets an equal share ``1 / (number of tied answers)``, counted as correct in proportion to the
    samples holding it that are correct (all or none of them, unless the checker disagrees with the normalisation).
    With one winner this is plain majority voting; with a tie the credit cannot depend on the samples' order: a
    problem whose ``n`` samples are all different answers, one of them correct, gets ``1 / n``. No vote: 0.

    >>> majority_credit(["7", "8", "8", "7"], [False, True, True, False])  # a 2-2 tie, one side correct
    0.5
    >>> majority_credit(["a", "b", "c", "d"], [True, False, False, False])  # all different: 1/4 whoever is first
    0.25
    >>> majority_credit(["5", "5", "6"], [True, True, False]), majority_credit([None], [False])
    (1.0, 0.0)
    """
    if len(answers) != len(correct):
        raise ValueError(f"Got {len(answers)} answers but {len(correct)} correctness flags; they must align.")
    by_answer: dict[str, list[bool]] = {}
    for answer, is_correct in zip(answers, correct):
        if answer is not None:
            by_answer.setdefault(normalize_answer(answer), []).append(bool(is_correct))
    if not by_answer:
        return 0.0
    most = max(len(flags) for flags in by_answer.values())
    winners = [flags for flags in by_answer.values() if len(flags) == most]
    return float(np.mean([sum(flags) / len(flags) for flags in winners]))


def maj_at_n(answers: Sequence[Sequence[str | None]], correct: Sequence[Sequence[bool]]) -> float:
    """maj@n: the mean over problems of the majority vote's credit (:func:`majority_credit`).

    A problem whose most-voted answer is unique scores 1 when that answer is correct, else 0. A tie between ``t``
    answers gives each of them ``1 / t`` of the credit (fractional credit), so no sample's position can favour its
    answer.

    Args:
        answers: per problem, each sample's extracted answer (``None`` when it has none).
        correct: per problem, each sample's correctness (aligned with ``answers``).

    >>> maj_at_n([["12", "12", "13"], ["4", "5", "5"], [None, None, None]],
    ...          [[True, True, False], [True, False, False], [False, False, False]])
    0.3333333333333333
    >>> maj_at_n([["4", "5"]], [[True, False]])  # a 1-1 tie: half the credit
    0.5
    """
    if len(answers) != len(correct):
        raise ValueError(f"Got answers for {len(answers)} problems but correctness for {len(correct)}.")
    if len(answers) == 0:
        raise ValueError("maj_at_n needs at least one problem; got an empty list.")
    credit = 0.0
    for index, (problem_answers, problem_correct) in enumerate(zip(answers, correct)):
        if len(problem_answers) != len(problem_correct) or len(problem_answers) == 0:
            raise ValueError(
                f"Problem {index}: {len(problem_answers)} answers vs {len(problem_correct)} correctness flags; "
                "they must align and be non-empty."
            )
        credit += majority_credit(problem_answers, problem_correct)
    return credit / len(answers)


def distinct_answers(answers: Sequence[str | None]) -> int:
    """Number of distinct normalised answers among a problem's samples (``None`` not counted).

    >>> distinct_answers(["12", "12.0", "\\\\dfrac{1}{2}", "\\\\frac{1}{2}", None])
    2
    """
    return len({normalize_answer(a) for a in answers if a is not None})
