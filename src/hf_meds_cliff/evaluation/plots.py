"""pass@k curves (log2 k axis) and CSV tables, for one run or several compared."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SummaryEntry = tuple[str, Mapping[str, Any]]
"""``(model label, summary JSON dict)`` with ``summary["benchmarks"][name]["pass@k"]``."""


def _panels(entries: Sequence[SummaryEntry]) -> list[str]:
    names: list[str] = []
    for _, summary in entries:
        for name in summary["benchmarks"]:
            if name not in names:
                names.append(name)
    if any("average" in summary for _, summary in entries):
        names.append("average")
    return names


def _curve(summary: Mapping[str, Any], panel: str) -> tuple[list[int], list[float]] | None:
    block = summary.get("average") if panel == "average" else summary["benchmarks"].get(panel)
    if not block:
        return None
    ks = sorted(int(k) for k in block["pass@k"])
    return ks, [100.0 * block["pass@k"][str(k)] for k in ks]


def plot_pass_at_k(entries: Sequence[SummaryEntry], path: str | Path, title: str | None = None) -> Path:
    """Write a PNG with one panel per benchmark (and the average), one line per model.

    Args:
        entries: ``(label, summary)`` pairs; the summary is the runner's ``summary.json`` content.
        path: the PNG to write.
        title: figure title (default: none).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    if not entries:
        raise ValueError("Nothing to plot: give at least one (label, summary) entry.")
    panels = _panels(entries)
    columns = min(3, len(panels))
    rows = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for axis, panel in zip(axes.flat, panels):
        for label, summary in entries:
            curve = _curve(summary, panel)
            if curve is not None:
                axis.plot(*curve, marker="o", markersize=3, label=label)
        axis.set_xscale("log", base=2)
        ticks = sorted({k for _, summary in entries if (c := _curve(summary, panel)) for k in c[0]})
        axis.set_xticks(ticks, [str(k) for k in ticks])
        axis.minorticks_off()
        axis.set_ylim(-2, 102)
        axis.set_title(panel)
        axis.set_xlabel("k")
        axis.set_ylabel("pass@k (%)")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def write_csv(entries: Sequence[SummaryEntry], path: str | Path) -> Path:
    """One row per (model, benchmark): the backend the samples came from (``transformers``, ``vllm``, ``openai``, or
    ``samples`` for a samples file scored with ``--samples``), n, problems, mean@n, maj@n, distinct answers, pass@k
    columns (empty where a run did not report that k)."""
    all_k = sorted({int(k) for _, s in entries for b in s["benchmarks"].values() for k in b["pass@k"]})
    header = ["model", "backend", "benchmark", "num_problems", "num_samples", "mean@n", "maj@n"]
    header += ["distinct_answers_mean"]
    header += [f"pass@{k}" for k in all_k]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for label, summary in entries:
            blocks = dict(summary["benchmarks"])
            if "average" in summary:
                blocks["average"] = summary["average"]
            backend = (summary.get("settings") or {}).get("backend") or ""
            for name, block in blocks.items():
                row = [label, backend, name, block.get("num_problems", ""), block.get("num_samples", "")]
                row += [f"{block[key]:.6f}" for key in ("mean@n", "maj@n", "distinct_answers_mean")]
                row += [f"{block['pass@k'][str(k)]:.6f}" if str(k) in block["pass@k"] else "" for k in all_k]
                writer.writerow(row)
    return path
