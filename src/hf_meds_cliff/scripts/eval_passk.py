"""pass@k evaluation: ``scripts/eval_passk.py`` and ``hf-meds-cliff eval`` (usage in that script).

Writes ``samples.jsonl``, ``summary.json``, ``passk.csv`` and ``passk.png`` (see
:mod:`hf_meds_cliff.evaluation.runner`); ``--compare DIR DIR ...`` compares finished runs instead (an alias of
``hf-meds-cliff compare``, :mod:`hf_meds_cliff.evaluation.compare`).

::

    hf-meds-cliff eval --model_name_or_path M --benchmarks aime24 math500 --num_samples 16 --output_dir D
    hf-meds-cliff eval --backend openai --base_url http://127.0.0.1:8000/v1 --model_name_or_path M \
        --api_key_env OPENAI_API_KEY --benchmarks humaneval --output_dir D      # a served model
    hf-meds-cliff eval --samples samples.jsonl --benchmarks humaneval --output_dir D  # generations made elsewhere
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from transformers import HfArgumentParser

from hf_meds_cliff.errors import parse_dataclass_args, run_dataclass_command
from hf_meds_cliff.evaluation import EvalArguments, run_evaluation
from hf_meds_cliff.script_utils import reword_negated_flags

logger = logging.getLogger("eval_passk")


def make_parser(prog: str | None = None) -> HfArgumentParser:
    parser = HfArgumentParser(EvalArguments)
    if prog is not None:
        parser.prog = prog
    return reword_negated_flags(parser)


def parse_args(argv: Sequence[str] | None = None, parser: HfArgumentParser | None = None) -> EvalArguments:
    """``EvalArguments`` from ``argv`` (default ``sys.argv[1:]``); an unknown flag is an argparse usage error."""
    return parse_dataclass_args(parser or make_parser(), argv)


def main(args: EvalArguments) -> dict | None:
    if args.compare:  # the alias of `hf-meds-cliff compare` (--label a,b: one name per run)
        from hf_meds_cliff.evaluation.compare import compare_runs, format_comparison

        labels = [label.strip() for label in args.label.split(",")] if args.label else None
        comparison = compare_runs(args.compare, labels, output_dir=args.output_dir)
        print(format_comparison(comparison))
        logger.info("Wrote compare.json, compare_passk.csv and compare_passk.png to %s", args.output_dir)
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


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """The entry point of the script and of ``hf-meds-cliff eval``; returns the exit status. Errors are one line
    on stderr (see :func:`hf_meds_cliff.errors.run_reporting_errors`)."""
    return run_dataclass_command("eval", make_parser(prog=prog), main, argv, before_main=configure_logging)


if __name__ == "__main__":
    raise SystemExit(run())
