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
"""

from __future__ import annotations

import logging
import sys

from transformers import HfArgumentParser

from hf_meds_cliff.evaluation import EvalArguments, compare_summaries, run_evaluation

logger = logging.getLogger("eval_passk")


def main(args: EvalArguments) -> dict | None:
    if args.compare:
        plot_path, csv_path = compare_summaries(args.compare, args.output_dir)
        logger.info("Wrote %s and %s", plot_path, csv_path)
        return None
    summary = run_evaluation(args)
    for benchmark, block in {
        **summary["benchmarks"],
        **({"average": summary["average"]} if "average" in summary else {}),
    }.items():
        curve = "  ".join(f"pass@{k}={100 * v:.2f}" for k, v in block["pass@k"].items())
        logger.info(
            "%s: %s  mean@n=%.2f  maj@n=%.2f", benchmark, curve, 100 * block["mean@n"], 100 * block["maj@n"]
        )
    logger.info("Results in %s", args.output_dir)
    return summary


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    (eval_args,) = HfArgumentParser(EvalArguments).parse_args_into_dataclasses()
    main(eval_args)
