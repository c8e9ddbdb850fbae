"""pass@k evaluation: ``scripts/eval_passk.py`` and ``hf-meds-cliff eval`` (usage in that script).

Writes ``samples.jsonl``, ``summary.json``, ``passk.csv`` and ``passk.png`` (see
:mod:`hf_meds_cliff.evaluation.runner`); ``--compare DIR DIR ...`` overlays finished runs instead.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from transformers import HfArgumentParser

from hf_meds_cliff.evaluation import EvalArguments, compare_summaries, run_evaluation
from hf_meds_cliff.script_utils import reword_negated_flags

logger = logging.getLogger("eval_passk")


def make_parser(prog: str | None = None) -> HfArgumentParser:
    parser = HfArgumentParser(EvalArguments)
    if prog is not None:
        parser.prog = prog
    return reword_negated_flags(parser)


def parse_args(argv: Sequence[str] | None = None, parser: HfArgumentParser | None = None) -> EvalArguments:
    """``EvalArguments`` from ``argv`` (default ``sys.argv[1:]``); an unknown flag is an argparse usage error
    (usage line, ``error: unrecognized arguments``, exit status 2), not a traceback."""
    parser = parser or make_parser()
    eval_args, unknown = parser.parse_args_into_dataclasses(
        args=None if argv is None else list(argv), return_remaining_strings=True
    )
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return eval_args


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


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """The entry point of the script and of ``hf-meds-cliff eval``; returns the exit status. Errors are one line
    on stderr (see :func:`hf_meds_cliff.cli.run_reporting_errors`)."""
    from hf_meds_cliff.errors import UsageError, run_reporting_errors

    parser = make_parser(prog=prog)

    def body() -> int:
        try:
            args = parse_args(argv, parser=parser)
        except ValueError as error:  # EvalArguments.__post_init__: an impossible combination of options
            raise UsageError(str(error)) from error
        configure_logging()
        main(args)
        return 0

    return run_reporting_errors("eval", body, usage=parser.format_usage)


if __name__ == "__main__":
    raise SystemExit(run())
