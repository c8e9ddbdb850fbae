"""GRPO / DAPO baselines: TRL's ``GRPOTrainer`` with the project's verifiable math rewards, plus DAPO's dynamic
sampling when ``--dynamic_sampling true`` (off by default: then it is exactly ``GRPOTrainer``).

Toy world on CPU (no download; trains the cached toy policy for a few minutes):

    python scripts/train_grpo.py

A real model on GPUs (MATH levels; answers are the last \\boxed{} of the `solution` column):

    accelerate launch --config_file recipes/accelerate/ddp_8gpu.yaml scripts/train_grpo.py \\
        --model_name_or_path Qwen/Qwen3-1.7B --dataset_name DigitalLearningGmbH/MATH-lighteval \\
        --problem_column problem --answer_column solution --answer_from_solution true \\
        --output_dir outputs/grpo-qwen3-1.7b --bf16 true --use_vllm true --vllm_mode colocate

The DAPO baseline of the MEDS paper (loss, clip-higher, overlong penalty, dynamic sampling):

    accelerate launch --config_file recipes/accelerate/ddp_8gpu.yaml scripts/train_grpo.py \
        --config recipes/dapo_qwen3_1.7b.yaml

Flags given after ``--config`` override the file.
Add ``--use_peft --lora_r 64 --lora_alpha 128`` for LoRA.

The code lives in the package (``hf_meds_cliff.scripts.train_grpo``), shared with the
``hf-meds-cliff`` command.
"""

from __future__ import annotations

from hf_meds_cliff.scripts.train_grpo import main, make_parser, parse_args

__all__ = ["main", "make_parser", "parse_args"]

if __name__ == "__main__":
    from hf_meds_cliff.script_utils import run_script
    from hf_meds_cliff.scripts.train_grpo import METHOD

    raise SystemExit(run_script(METHOD, main, parse_args))
