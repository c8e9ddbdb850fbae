"""pass@k evaluation: the unbiased estimator, benchmarks, generation backends, the runner and plots.

>>> from hf_meds_cliff.evaluation import pass_at_k
>>> pass_at_k(128, 1, 1), pass_at_k(128, 1, 128)
(0.0078125, 1.0)

The estimator is also an ``evaluate`` metric: ``evaluate.load(PASS_AT_K_METRIC_PATH)``.
"""

from pathlib import Path

from .benchmarks import BENCHMARKS, BenchmarkSpec, EvalProblem, known_benchmarks, load_benchmark
from .estimators import distinct_answers, maj_at_n, majority_answer, mean_at_n, pass_at_k
from .generation import Sample, SamplingSettings, TransformersBackend, VLLMBackend, build_backend
from .plots import plot_pass_at_k, write_csv
from .runner import EvalArguments, compare_summaries, load_summary, run_evaluation
from .summary import default_k_values, summarize_groups, summarize_problems, summarize_records

PASS_AT_K_METRIC_PATH = str(Path(__file__).parent / "metric" / "pass_at_k.py")
"""Path of the ``evaluate`` metric module: ``evaluate.load(PASS_AT_K_METRIC_PATH)`` (offline)."""

__all__ = [
    "BENCHMARKS",
    "PASS_AT_K_METRIC_PATH",
    "BenchmarkSpec",
    "EvalArguments",
    "EvalProblem",
    "Sample",
    "SamplingSettings",
    "TransformersBackend",
    "VLLMBackend",
    "build_backend",
    "compare_summaries",
    "default_k_values",
    "distinct_answers",
    "known_benchmarks",
    "load_benchmark",
    "load_summary",
    "maj_at_n",
    "majority_answer",
    "mean_at_n",
    "pass_at_k",
    "plot_pass_at_k",
    "run_evaluation",
    "summarize_groups",
    "summarize_problems",
    "summarize_records",
    "write_csv",
]
