"""pass@k, mean@n and maj@n now live in :mod:`hf_meds_cliff.estimators` (below both the toy world and the
evaluation runner, which both use them); this path is kept for code that imports them from here."""

from ..estimators import distinct_answers, maj_at_n, majority_answer, mean_at_n, pass_at_k

__all__ = ["distinct_answers", "maj_at_n", "majority_answer", "mean_at_n", "pass_at_k"]
