r"""pass@k evaluation of a model on math benchmarks (unbiased estimator, math-verify scoring).

Toy world on CPU (no download; the toy test split is built in). ``toy`` is the cached warmed-up
policy every training script starts from; compare it with a trained one:

    python scripts/eval_passk.py --model_name_or_path toy --output_dir runs/eval/toy-warmup
    python scripts/eval_passk.py --model_name_or_path outputs/meds-toy --label toy-meds \
        --output_dir runs/eval/toy-meds
    python scripts/eval_passk.py --compare runs/eval/toy-warmup runs/eval/toy-meds --output_dir runs/eval/compare

A real model on GPUs with the MEDS paper's settings (vLLM when installed, else transformers):

    python scripts/eval_passk.py --model_name_or_path Qwen/Qwen3-1.7B \
        --benchmarks aime24 aime25 amc23 math500 olympiadbench \
        --num_samples 128 --temperature 1.0 --top_p 1.0 --seed 0 --max_new_tokens 7168 \
        --output_dir runs/eval/qwen3-1.7b

Add ``--adapter_path runs/meds-lora`` for a LoRA adapter. Re-running the same command resumes (the
problems already in ``samples.jsonl`` are skipped).

Outputs: ``samples.jsonl``, ``summary.json``, ``passk.csv``, ``passk.png`` (see
``hf_meds_cliff.evaluation.runner``).

The code lives in the package (``hf_meds_cliff.scripts.eval_passk``), shared with the
``hf-meds-cliff`` command.
"""

from __future__ import annotations

from hf_meds_cliff.scripts.eval_passk import main, make_parser, parse_args, run

__all__ = ["main", "make_parser", "parse_args"]

if __name__ == "__main__":
    raise SystemExit(run())
