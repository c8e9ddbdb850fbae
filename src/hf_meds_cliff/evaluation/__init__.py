"""pass@k evaluation: the unbiased estimator, benchmarks, generation backends, the runner and plots.

>>> from hf_meds_cliff.evaluation import pass_at_k
>>> pass_at_k(128, 1, 1), pass_at_k(128, 1, 128)
(0.0078125, 1.0)

The estimator is also an ``evaluate`` metric: ``evaluate.load(PASS_AT_K_METRIC_PATH)``.

Re-exports only, loaded on first attribute access: importing this package (or the pure
:mod:`~hf_meds_cliff.estimators`, as the toy warm-up does) loads neither the benchmark registry
nor the runner, which import the toy world themselves.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

_LAZY_ATTRIBUTES = {
    "BENCHMARKS": "hf_meds_cliff.evaluation.benchmarks",
    "BenchmarkSpec": "hf_meds_cliff.evaluation.benchmarks",
    "EvalProblem": "hf_meds_cliff.evaluation.benchmarks",
    "known_benchmarks": "hf_meds_cliff.evaluation.benchmarks",
    "load_benchmark": "hf_meds_cliff.evaluation.benchmarks",
    "distinct_answers": "hf_meds_cliff.estimators",
    "maj_at_n": "hf_meds_cliff.estimators",
    "majority_answer": "hf_meds_cliff.estimators",
    "majority_credit": "hf_meds_cliff.estimators",
    "mean_at_n": "hf_meds_cliff.estimators",
    "pass_at_k": "hf_meds_cliff.estimators",
    "Sample": "hf_meds_cliff.evaluation.generation",
    "SamplingSettings": "hf_meds_cliff.evaluation.generation",
    "TransformersBackend": "hf_meds_cliff.evaluation.generation",
    "VLLMBackend": "hf_meds_cliff.evaluation.generation",
    "OpenAIBackend": "hf_meds_cliff.evaluation.openai_backend",
    "build_backend": "hf_meds_cliff.evaluation.generation",
    "plot_pass_at_k": "hf_meds_cliff.evaluation.plots",
    "write_csv": "hf_meds_cliff.evaluation.plots",
    "EvalArguments": "hf_meds_cliff.evaluation.runner",
    "compare_summaries": "hf_meds_cliff.evaluation.runner",
    "compare_runs": "hf_meds_cliff.evaluation.compare",
    "load_summary": "hf_meds_cliff.evaluation.runner",
    "run_evaluation": "hf_meds_cliff.evaluation.runner",
    "default_k_values": "hf_meds_cliff.evaluation.summary",
    "summarize_groups": "hf_meds_cliff.evaluation.summary",
    "summarize_problems": "hf_meds_cliff.evaluation.summary",
    "summarize_records": "hf_meds_cliff.evaluation.summary",
}

PASS_AT_K_METRIC_PATH = str(Path(__file__).parent / "metric" / "pass_at_k.py")
"""Path of the ``evaluate`` metric module: ``evaluate.load(PASS_AT_K_METRIC_PATH)`` (offline)."""

__all__ = [
    "BENCHMARKS",
    "PASS_AT_K_METRIC_PATH",
    "BenchmarkSpec",
    "EvalArguments",
    "EvalProblem",
    "OpenAIBackend",
    "Sample",
    "SamplingSettings",
    "TransformersBackend",
    "VLLMBackend",
    "build_backend",
    "compare_runs",
    "compare_summaries",
    "default_k_values",
    "distinct_answers",
    "known_benchmarks",
    "load_benchmark",
    "load_summary",
    "maj_at_n",
    "majority_answer",
    "majority_credit",
    "mean_at_n",
    "pass_at_k",
    "plot_pass_at_k",
    "run_evaluation",
    "summarize_groups",
    "summarize_problems",
    "summarize_records",
    "write_csv",
]

if TYPE_CHECKING:  # pragma: no cover
    from ..estimators import (
        distinct_answers,
        maj_at_n,
        majority_answer,
        majority_credit,
        mean_at_n,
        pass_at_k,
    )
    from .benchmarks import BENCHMARKS, BenchmarkSpec, EvalProblem, known_benchmarks, load_benchmark
    from .compare import compare_runs
    from .generation import Sample, SamplingSettings, TransformersBackend, VLLMBackend, build_backend
    from .openai_backend import OpenAIBackend
    from .plots import plot_pass_at_k, write_csv
    from .runner import EvalArguments, compare_summaries, load_summary, run_evaluation
    from .summary import default_k_values, summarize_groups, summarize_problems, summarize_records


def __getattr__(name: str) -> Any:
    module_name = _LAZY_ATTRIBUTES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'hf_meds_cliff.evaluation' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
