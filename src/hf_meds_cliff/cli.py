"""The ``hf-meds-cliff`` command, in the manner of ``trl grpo --config ...``.

::

    hf-meds-cliff meds   [--config recipe.yaml] [training flags] [accelerate launch flags]
    hf-meds-cliff cliff  [--config recipe.yaml] [training flags] [accelerate launch flags]
    hf-meds-cliff grpo   [--config recipe.yaml] [training flags] [accelerate launch flags]
    hf-meds-cliff eval   --model_name_or_path M --output_dir D [evaluation flags]
    hf-meds-cliff eval   --samples FILE --benchmarks B --output_dir D     (generations made elsewhere)
    hf-meds-cliff compare RUN_A RUN_B [--label A B] [--output_dir D]     (B - A per benchmark, with a 95% CI)
    hf-meds-cliff report RUN_DIR [-o report.html]
    hf-meds-cliff judge-eval --data Qwen/ProcessBench|FILE|toy [teacher flags] [--output_json PATH]
    hf-meds-cliff preflight meds|cliff|grpo [--config recipe.yaml] [training flags] [--num_processes N]

The training commands take exactly the arguments of ``scripts/train_<method>.py`` (both run the code of
:mod:`hf_meds_cliff.scripts`); with no arguments they train on the offline toy world. As with ``trl``, flags
the training parser does not know go to ``accelerate launch`` (``--num_processes 8``, ``--config_file ...``,
or ``--accelerate_config zero3`` for one of TRL's packaged accelerate configs), and the run is started with
``accelerate launch -m hf_meds_cliff.scripts.train_<method>``. ``eval`` and ``report`` run in this process.
``hf-meds-cliff <command> --help`` lists every option.

Errors are one line on stderr, ``hf-meds-cliff <command>: error: <message>``, as ``trl`` and ``accelerate`` print
them: exit status 2 for a usage error (with the usage line), 1 for a failure, 130 for Ctrl-C. The traceback is
shown with ``hf-meds-cliff --debug <command> ...`` or ``HF_MEDS_CLIFF_DEBUG=1``. A training command's set-up
errors (before training starts) are printed the same way by the training process.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from collections.abc import Sequence

from .errors import DEBUG_ENV, PROG, UsageError, run_reporting_errors
from .scripts import TRAINING_COMMANDS

__all__ = ["DEBUG_ENV", "PROG", "UsageError", "main", "run_reporting_errors"]


def _subtract_subsequence(items: Sequence[str], subsequence: Sequence[str]) -> list[str]:
    """``items`` without the ordered ``subsequence`` (the strings the training parser did not consume)."""
    remaining = iter(subsequence)
    current = next(remaining, None)
    kept = []
    for item in items:
        if current is not None and item == current:
            current = next(remaining, None)
        else:
            kept.append(item)
    return kept


def split_training_arguments(command: str, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split a training command's ``argv`` into ``(accelerate launch flags, training-script flags)``.

    The training parser (with the toy recipe as the default config, as the script uses it) decides: what
    it does not consume goes to ``accelerate launch``. ``--help`` prints the training parser's help and exits.
    """
    from .script_utils import with_toy_recipe

    module_name, _ = TRAINING_COMMANDS[command]
    module = importlib.import_module(f"hf_meds_cliff.scripts.{module_name}")
    parser = module.make_parser(prog=f"{PROG} {command}")
    *_, config_remaining, cli_remaining = parser.parse_args_and_config(
        with_toy_recipe(argv, module.METHOD), return_remaining_strings=True, separate_remaining_strings=True
    )
    if config_remaining:
        raise ValueError(
            f"Unknown keys in the --config file: {config_remaining}; remove them or fix their spelling "
            f"(`{PROG} {command} --help` lists the options)."
        )
    from trl.cli.accelerate_config import resolve_accelerate_config_argument

    launch_args = resolve_accelerate_config_argument(list(cli_remaining))
    return launch_args, _subtract_subsequence(argv, cli_remaining)


def run_training_command(command: str, argv: Sequence[str]) -> int:
    """``accelerate launch [launch flags] -m hf_meds_cliff.scripts.train_<method> [training flags]``."""
    from accelerate.commands.launch import launch_command, launch_command_parser

    launch_args, script_args = split_training_arguments(command, argv)
    module_name, _ = TRAINING_COMMANDS[command]
    accelerate_args = launch_command_parser().parse_args(
        [*launch_args, "-m", f"hf_meds_cliff.scripts.{module_name}", *script_args]
    )
    try:
        launch_command(accelerate_args)
    except subprocess.CalledProcessError as error:
        return error.returncode or 1
    return 0


def run_eval_command(argv: Sequence[str]) -> int:
    from .scripts import eval_passk

    return eval_passk.run(argv, prog=f"{PROG} eval")


def run_compare_command(argv: Sequence[str]) -> int:
    from .evaluation.compare import main as compare_main

    return compare_main(argv, prog=f"{PROG} compare")


def run_preflight_command(argv: Sequence[str]) -> int:
    from .scripts import preflight

    return preflight.run(argv, prog=f"{PROG} preflight")


def run_judge_eval_command(argv: Sequence[str]) -> int:
    from .scripts import judge_eval

    return judge_eval.run(argv, prog=f"{PROG} judge-eval")


def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "run_dir", help="Output directory of a training run (what `hf-meds-cliff meds/cliff/grpo` wrote)."
    )
    parser.add_argument(
        "-o", "--output", default=None, help="Where to write the HTML file (default: RUN_DIR/report.html)."
    )
    parser.add_argument(
        "--eval_dir",
        nargs="*",
        default=[],
        help="Extra `hf-meds-cliff eval` output folders (with summary.json) to show; those in or next to "
        "RUN_DIR are found on their own.",
    )
    parser.add_argument(
        "--max_prompts",
        type=int,
        default=50,
        help="MEDS: prompts shown, those with the largest clusters first.",
    )
    parser.add_argument(
        "--max_rollouts", type=int, default=60, help="Cliff: judged rollouts shown, the latest steps first."
    )
    return parser


def run_report_command(argv: Sequence[str]) -> int:
    from .report import write_report

    parser = add_report_arguments(
        argparse.ArgumentParser(
            prog=f"{PROG} report",
            description="Write one self-contained, offline HTML report of a training run: metric curves, "
            "MEDS error clusters with their completions, Cliff's judged rollouts with the first mistake "
            "highlighted, pass@k.",
        )
    )
    args = parser.parse_args(list(argv))

    def body() -> int:
        if args.output is not None and os.path.isdir(args.output):
            raise UsageError(
                f"-o {args.output} is a directory; give the HTML file's path, e.g. "
                f"{os.path.join(args.output, 'report.html')}."
            )
        if args.max_prompts < 1 or args.max_rollouts < 1:
            raise UsageError(
                f"--max_prompts {args.max_prompts} and --max_rollouts {args.max_rollouts} must be >= 1."
            )
        path = write_report(
            args.run_dir,
            args.output,
            eval_dirs=args.eval_dir,
            max_prompts=args.max_prompts,
            max_rollouts=args.max_rollouts,
        )
        print(f"Report written to {path}")
        return 0

    return run_reporting_errors("report", body, usage=parser.format_usage)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="MEDS and Cliff reward shaping on TRL's GRPOTrainer: train, evaluate pass@k, and look at "
        "a run.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--debug", action="store_true", help=f"Show the Python traceback of an error (same as {DEBUG_ENV}=1)."
    )
    commands = parser.add_subparsers(dest="command", metavar="{meds,cliff,grpo,eval,compare,report,preflight,judge-eval}")
    for name, (_, help_text) in TRAINING_COMMANDS.items():
        commands.add_parser(name, help=help_text, add_help=False)  # --help goes to the training parser
    commands.add_parser(
        "eval",
        help="pass@k on math and code benchmarks: of a model (transformers, vLLM, an OpenAI-compatible server) or "
        "of a samples file made elsewhere (as scripts/eval_passk.py).",
        add_help=False,
    )
    commands.add_parser(
        "compare",
        help="Compare finished eval runs: pass@k per benchmark side by side, the difference with a paired bootstrap "
        "95%% CI over problems; refuses runs on different benchmarks or problems (as eval --compare).",
        add_help=False,
    )
    commands.add_parser(
        "report", help="Write RUN_DIR/report.html, a self-contained view of a run.", add_help=False
    )
    commands.add_parser(
        "preflight",
        help="Before launching a recipe: can MEDS or Cliff act in its run (visits per prompt, rows per visit; the "
        "teacher's calls and tokens per step)? Loads no model.",
        add_help=False,
    )
    commands.add_parser(
        "judge-eval",
        help="Measure a Cliff teacher on labelled first-mistake data (ProcessBench format, or the toy world's).",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hf-meds-cliff`` command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, _ = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.debug:  # set only by a --debug before the command (after it, the flag is the command's own)
        os.environ[DEBUG_ENV] = "1"  # also reaches the training processes accelerate starts
    rest = argv[argv.index(args.command) + 1 :]
    if args.command in TRAINING_COMMANDS:
        return run_reporting_errors(args.command, lambda: run_training_command(args.command, rest))
    if args.command == "eval":
        return run_eval_command(rest)
    if args.command == "compare":
        return run_compare_command(rest)
    if args.command == "judge-eval":
        return run_judge_eval_command(rest)
    if args.command == "preflight":
        return run_preflight_command(rest)
    return run_report_command(rest)


if __name__ == "__main__":
    raise SystemExit(main())
