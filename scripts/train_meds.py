"""MEDS (memory-enhanced dynamic reward shaping) on top of TRL's GRPOTrainer.

Toy world on CPU (no download; a few minutes): trains the cached toy policy, then writes the model,
``metrics.jsonl``, the final error memory (``meds_memory/``) and ``meds_metrics.png`` (the MEDS
metrics over steps) to the output directory:

    python scripts/train_meds.py

A real model on GPUs, the paper's setting for Qwen3-1.7B (α = 0.1, β = 0.2; use 0.02 / 0.04 for Qwen3-8B):

    accelerate launch --config_file recipes/accelerate/ddp_8gpu.yaml scripts/train_meds.py \\
        --model_name_or_path Qwen/Qwen3-1.7B --dataset_name DigitalLearningGmbH/MATH-lighteval \\
        --problem_column problem --answer_column solution --answer_from_solution true \\
        --reward_funcs math_answer overlong --loss_type dapo --epsilon_high 0.28 \\
        --meds_alpha 0.1 --meds_beta 0.2 --output_dir outputs/meds-qwen3-1.7b \\
        --bf16 true --use_vllm true --vllm_mode colocate

Or from a recipe: ``--config recipes/<recipe>.yaml`` (flags given after it override the file).
The first reward function decides correctness (``--meds_correctness_reward_index``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hf_meds_cliff.meds.config import MEDSConfig
from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
from hf_meds_cliff.script_utils import parse_script_args, run_training

logger = logging.getLogger(__name__)

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
    """Plot the MEDS metrics of ``trainer.state.log_history`` over steps into a PNG; None if nothing logged."""
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


def main(script_args, training_args, model_args):
    trainer = run_training(MEDSGRPOTrainer, script_args, training_args, model_args)
    if trainer.accelerator.is_main_process:
        output_dir = Path(training_args.output_dir)
        trainer.meds_memory.save(output_dir / "meds_memory")
        plot = plot_meds_metrics(trainer.state.log_history, output_dir / "meds_metrics.png")
        trainer.accelerator.print(
            f"Model, tokenizer, metrics.jsonl, meds_memory/ and {plot.name if plot else '(no plot)'} written to "
            f"{output_dir}"
        )
    return trainer


if __name__ == "__main__":
    main(*parse_script_args(MEDSConfig, "meds")).end()
