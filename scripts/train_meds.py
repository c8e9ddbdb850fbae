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

The code lives in the package (``hf_meds_cliff.scripts.train_meds``), shared with the
``hf-meds-cliff`` command.
"""

from __future__ import annotations

from hf_meds_cliff.scripts.train_meds import PLOTTED_METRICS, main, make_parser, parse_args, plot_meds_metrics

__all__ = ["PLOTTED_METRICS", "main", "make_parser", "parse_args", "plot_meds_metrics"]

if __name__ == "__main__":
    from hf_meds_cliff.script_utils import run_script
    from hf_meds_cliff.scripts.train_meds import METHOD

    raise SystemExit(run_script(METHOD, main, parse_args))
