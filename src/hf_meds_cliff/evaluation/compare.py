"""``hf-meds-cliff compare RUN_A RUN_B``: is run B better than run A, per benchmark, with a confidence interval.

This module owns the comparison of finished evaluation runs (``hf-meds-cliff compare``, and its alias
``hf-meds-cliff eval --compare``):

- Each run is a folder written by ``hf-meds-cliff eval`` (or its ``summary.json``); the per-problem outcomes are
  read from the folder's ``samples.jsonl`` (``n`` samples, ``c`` correct, per problem).
- Runs must cover the same benchmarks and, in each, the same problems; otherwise the comparison is refused with the
  difference named (which benchmarks, how many problems, which ones).
- For every benchmark and every ``k`` both runs can estimate (``k`` <= the fewest samples of any problem in either):
  each run's pass@k (the unbiased estimator, averaged over problems), the difference ``run - baseline`` (the first
  run is the baseline), and a **paired bootstrap 95 % CI** of that difference over problems: ``num_bootstrap``
  resamples (default 10,000) of the problems with replacement, drawn with ``numpy.random.default_rng(seed)``
  (default seed 0), the same resampled problems for both runs; the CI is the 2.5th and 97.5th percentiles of the
  resampled mean differences (numpy's linear interpolation). It reflects the uncertainty from which problems were
  drawn, not from the samples drawn per problem.
- Labels: ``--label`` (one per run) in the table, the JSON and the plot; by default each summary's ``model``.

Writes, with ``--output_dir``, ``compare.json`` (everything printed), ``compare_passk.csv`` and ``compare_passk.png``.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..estimators import pass_at_k

logger = logging.getLogger(__name__)

__all__ = ["bootstrap_difference", "compare_runs", "format_comparison", "main"]

DEFAULT_NUM_BOOTSTRAP = 10_000
DEFAULT_SEED = 0


def bootstrap_difference(
    baseline: Sequence[float], other: Sequence[float], num_bootstrap: int = DEFAULT_NUM_BOOTSTRAP, seed: int = 0
) -> tuple[float, float, float]:
    """``(mean(other - baseline), CI low, CI high)``: the paired difference over problems and its bootstrap 95 % CI.

    ``baseline[i]`` and ``other[i]`` are the two runs' scores on problem ``i``. Problems are resampled with
    replacement ``num_bootstrap`` times (``numpy.random.default_rng(seed)``); the CI is the 2.5th and 97.5th
    percentiles of the resampled mean differences.

    >>> bootstrap_difference([0.0, 0.5, 1.0], [0.5, 1.0, 1.5])  # the same difference on every problem
    (0.5, 0.5, 0.5)
    """
    baseline_array = np.asarray(baseline, dtype=np.float64)
    other_array = np.asarray(other, dtype=np.float64)
    if baseline_array.shape != other_array.shape or baseline_array.ndim != 1 or len(baseline_array) == 0:
        raise ValueError(
            f"Paired scores must be two equally long, non-empty lists; got {baseline_array.shape} and "
            f"{other_array.shape}."
        )
    if not isinstance(num_bootstrap, int) or num_bootstrap < 1:
        raise ValueError(f"num_bootstrap={num_bootstrap!r} must be a positive integer (e.g. 10000).")
    differences = other_array - baseline_array
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(differences), size=(num_bootstrap, len(differences)))
    means = differences[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(differences.mean()), float(low), float(high)


def _run_folder(path: str | Path) -> Path:
    path = Path(path)
    return path.parent if path.name.endswith(".json") else path


def _per_problem(folder: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """``{benchmark: {problem_id: (n, c)}}`` from a run folder's ``samples.jsonl``."""
    from .runner import SAMPLES_FILE

    path = folder / SAMPLES_FILE
    if not path.is_file():
        raise ValueError(
            f"{folder} has no {SAMPLES_FILE}: compare needs each run's per-problem outcomes (pass a folder written "
            "by `hf-meds-cliff eval`)."
        )
    counts: dict[str, dict[str, list[int]]] = {}
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                benchmark, problem, correct = record["benchmark"], str(record["problem_id"]), record["correct"]
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{line_number}: not a sample record ({error}).") from None
            tally = counts.setdefault(benchmark, {}).setdefault(problem, [0, 0])
            tally[0] += 1
            tally[1] += bool(correct)
    return {b: {p: (n, c) for p, (n, c) in problems.items()} for b, problems in counts.items()}


def _check_same_problems(labels: Sequence[str], runs: Sequence[dict[str, dict[str, tuple[int, int]]]]) -> None:
    base_label, base = labels[0], runs[0]
    for label, run in zip(labels[1:], runs[1:]):
        if set(run) != set(base):
            only_base, only_run = sorted(set(base) - set(run)), sorted(set(run) - set(base))
            raise ValueError(
                f"Runs {base_label!r} and {label!r} cover different benchmarks ({base_label}: {sorted(base)}; "
                f"{label}: {sorted(run)}; only in {base_label}: {only_base or 'none'}; only in {label}: "
                f"{only_run or 'none'}). Compare runs on the same benchmarks."
            )
        for benchmark in base:
            mine, theirs = set(base[benchmark]), set(run[benchmark])
            if mine != theirs:
                only_base, only_run = sorted(mine - theirs), sorted(theirs - mine)
                raise ValueError(
                    f"{benchmark}: runs {base_label!r} ({len(mine)} problems) and {label!r} ({len(theirs)} problems) "
                    f"scored different problems ({len(only_base)} only in {base_label}"
                    + (f", e.g. {', '.join(only_base[:5])}" if only_base else "")
                    + f"; {len(only_run)} only in {label}"
                    + (f", e.g. {', '.join(only_run[:5])}" if only_run else "")
                    + "). Compare runs on the same problem set (the same --benchmarks and --max_problems)."
                )


def compare_runs(
    paths: Sequence[str | Path],
    labels: Sequence[str] | None = None,
    *,
    k_values: Sequence[int] | None = None,
    num_bootstrap: int = DEFAULT_NUM_BOOTSTRAP,
    seed: int = DEFAULT_SEED,
    output_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Compare finished runs (see the module docstring); returns the comparison as a dict.

    ``{"labels": [...], "baseline": label, "num_bootstrap", "seed", "benchmarks": {name: {"num_problems",
    "pass@k": {k: {"runs": {label: value}, "difference": {label: d}, "ci95": {label: [low, high]}}}}}}``, with
    differences for every run but the baseline.

    Raises:
        ValueError: fewer than two runs, a wrong number of labels, a run folder without ``samples.jsonl``, runs on
            different benchmarks or problems (named), or no ``k`` both runs can estimate.
    """
    from .runner import load_summary

    if len(paths) < 2:
        raise ValueError(f"Give at least two runs to compare, got {len(paths)}.")
    summaries = [load_summary(path) for path in paths]
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"Got {len(labels)} labels for {len(paths)} runs; give one --label per run.")
    names = (
        list(labels)
        if labels is not None
        else [s.get("model") or Path(p).name for s, p in zip(summaries, paths)]
    )
    for index, name in enumerate(names):
        if names.count(name) > 1:
            names[index] = f"{name} ({index + 1})"
    runs = [_per_problem(_run_folder(path)) for path in paths]
    _check_same_problems(names, runs)
    benchmarks: dict[str, Any] = {}
    for benchmark in runs[0]:
        problems = sorted(runs[0][benchmark])
        fewest = min(run[benchmark][p][0] for run in runs for p in problems)
        reported = [set(map(int, s["benchmarks"].get(benchmark, {}).get("pass@k", {}))) for s in summaries]
        asked = sorted(set(k_values)) if k_values else sorted(set.intersection(*reported) or {1})
        usable = [k for k in asked if 1 <= k <= fewest]
        if not usable:
            raise ValueError(
                f"{benchmark}: no k in {asked} can be estimated for every run (the fewest samples of a problem is "
                f"{fewest}); pass --k values <= {fewest}."
            )
        block: dict[str, Any] = {"num_problems": len(problems), "pass@k": {}}
        for k in usable:
            scores = [
                [pass_at_k(run[benchmark][p][0], run[benchmark][p][1], k) for p in problems] for run in runs
            ]
            entry: dict[str, Any] = {
                "runs": {name: float(np.mean(score)) for name, score in zip(names, scores)},
                "difference": {},
                "ci95": {},
            }
            for name, score in zip(names[1:], scores[1:]):
                difference, low, high = bootstrap_difference(scores[0], score, num_bootstrap, seed)
                entry["difference"][name] = difference
                entry["ci95"][name] = [low, high]
            block["pass@k"][str(k)] = entry
        benchmarks[benchmark] = block
    comparison = {
        "labels": names,
        "baseline": names[0],
        "runs": [str(path) for path in paths],
        "num_bootstrap": num_bootstrap,
        "seed": seed,
        "benchmarks": benchmarks,
    }
    if output_dir is not None:
        from .plots import plot_pass_at_k, write_csv

        output = Path(output_dir)
        output.mkdir(parents=True, exist_ok=True)
        (output / "compare.json").write_text(json.dumps(comparison, indent=2) + "\n")
        entries = list(zip(names, summaries))
        write_csv(entries, output / "compare_passk.csv")
        plot_pass_at_k(entries, output / "compare_passk.png", title="pass@k")
    return comparison


def format_comparison(comparison: dict[str, Any]) -> str:
    """The comparison as a text table: per benchmark and k, each run's pass@k (%), and each run's difference from
    the baseline with its 95 % CI (percentage points)."""
    names = comparison["labels"]
    baseline = comparison["baseline"]
    differences = [f"{name} - {baseline}" for name in names[1:]]
    header = ["benchmark", "k", *names, *differences, *(["95% CI"] * len(differences))]
    rows = []
    for benchmark, block in comparison["benchmarks"].items():
        for k, entry in block["pass@k"].items():
            rows.append(
                [
                    f"{benchmark} ({block['num_problems']})",
                    k,
                    *(f"{100 * entry['runs'][name]:.2f}" for name in names),
                    *(f"{100 * entry['difference'][name]:+.2f}" for name in names[1:]),
                    *(
                        f"[{100 * entry['ci95'][name][0]:+.2f}, {100 * entry['ci95'][name][1]:+.2f}]"
                        for name in names[1:]
                    ),
                ]
            )
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]
    ]
    lines.append(
        f"pass@k in %; differences from {baseline} in percentage points, 95% CI from a paired bootstrap over problems "
        f"({comparison['num_bootstrap']} resamples, seed {comparison['seed']})."
    )
    return "\n".join(lines)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Compare finished `hf-meds-cliff eval` runs: pass@k side by side per benchmark, and each run's "
        "difference from the first with a paired bootstrap 95% CI over problems. Refuses runs on different "
        "benchmarks or problem sets.",
    )
    parser.add_argument(
        "runs",
        nargs="+",
        help="Run folders written by `hf-meds-cliff eval` (or their summary.json); the first is the baseline.",
    )
    parser.add_argument(
        "--label",
        nargs="+",
        action="extend",
        default=None,
        help="One name per run, in order (default: each run's model).",
    )
    parser.add_argument(
        "--k", nargs="+", type=int, default=None, help="The k values (default: those both summaries report)."
    )
    parser.add_argument(
        "--num_bootstrap",
        type=int,
        default=DEFAULT_NUM_BOOTSTRAP,
        help="Bootstrap resamples of the problems (default: %(default)s).",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="Seed of the bootstrap (default: %(default)s)."
    )
    parser.add_argument(
        "--output_dir",
        default=None,
        help="Also write compare.json, compare_passk.csv and compare_passk.png here.",
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """``hf-meds-cliff compare``: prints the table on stdout; errors are one line on stderr (exit 1)."""
    from ..errors import UsageError, run_reporting_errors

    parser = build_parser(prog)
    args = parser.parse_args(None if argv is None else list(argv))

    def body() -> int:
        if len(args.runs) < 2:
            raise UsageError(f"give at least two runs to compare, got {len(args.runs)}.")
        comparison = compare_runs(
            args.runs,
            args.label,
            k_values=args.k,
            num_bootstrap=args.num_bootstrap,
            seed=args.seed,
            output_dir=args.output_dir,
        )
        print(format_comparison(comparison))
        return 0

    return run_reporting_errors("compare", body, usage=parser.format_usage)
