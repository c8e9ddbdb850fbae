"""MEDS training: ``scripts/train_meds.py`` and ``hf-meds-cliff meds`` (usage in ``scripts/train_meds.py``).

Trains :class:`~hf_meds_cliff.meds.MEDSGRPOTrainer`, then writes the model, ``metrics.jsonl``, the final error
memory (``meds_memory/``) and ``meds_metrics.png`` to the output directory. No arguments = the toy world
on CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hf_meds_cliff.meds.config import MEDSConfig
from hf_meds_cliff.meds.trainer import MEMORY_DIRNAME, MEDSGRPOTrainer
from hf_meds_cliff.script_utils import build_parser, parse_script_args, run_script, run_training

logger = logging.getLogger(__name__)

METHOD = "meds"

PLOTTED_METRICS = (
    ("reward", "reward (shaped total)"),
    ("rewards/meds_penalty/mean", "mean MEDS penalty"),
    ("meds/frac_penalized", "fraction penalised"),
    ("meds/mean_cluster_size", "mean cluster size"),
    ("meds/clusters_per_key", "clusters per key"),
    ("meds/noise_fraction", "noise fraction"),
    ("meds/top1_eigen_ratio", "top-1 eigen ratio"),
    ("meds/memory_rows", "memory rows"),
    ("meds/frac_with_feature", "fraction with a feature"),
)


def plot_meds_metrics(log_history: Sequence[Mapping[str, Any]], path: str | Path) -> Path | None:
    """Plot the MEDS metrics of ``trainer.state.log_history`` over steps into a PNG; None if none logged."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {}
    for key, title in PLOTTED_METRICS:
        points = [(r["step"], r[key]) for r in log_history if key in r and "step" in r]
        if points:
            series[title] = points
    if not series:
        logger.warning("No MEDS metrics in the log history; %s not written.", path)
        return None
    columns = 3
    rows = (len(series) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 2.8 * rows), squeeze=False)
    for axis, (title, points) in zip(axes.flat, series.items()):
        steps, values = zip(*points)
        axis.plot(steps, values, marker="o", markersize=2)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(series) :]:
        axis.axis("off")
    figure.suptitle("MEDS metrics over training steps")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def make_parser(prog: str | None = None):
    """The ``TrlParser`` of the MEDS script: script arguments, :class:`MEDSConfig`, ``ModelConfig``."""
    return build_parser(MEDSConfig, prog=prog)


def parse_args(argv: Sequence[str] | None = None):
    """``(script_args, training_args, model_args)``; no ``--config`` and no model = the toy recipe."""
    return parse_script_args(MEDSConfig, METHOD, argv=argv)


def main(script_args, training_args, model_args):
    trainer = run_training(MEDSGRPOTrainer, script_args, training_args, model_args)
    output_dir = Path(training_args.output_dir)
    trainer.meds_memory.save(output_dir / MEMORY_DIRNAME)  # on every process: each writes its shard when sharded
    if trainer.accelerator.is_main_process:
        plot = plot_meds_metrics(trainer.state.log_history, output_dir / "meds_metrics.png")
        trainer.accelerator.print(
            f"Model, tokenizer, metrics.jsonl, {MEMORY_DIRNAME}/ and "
            f"{plot.name if plot else '(no plot)'} written to {output_dir}"
        )
        trainer.accelerator.print(trainer.meds_summary())
    return trainer


if __name__ == "__main__":
    raise SystemExit(run_script(METHOD, main, parse_args))
