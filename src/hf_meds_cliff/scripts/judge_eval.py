"""Measure a Cliff teacher on labelled first-mistake data (ProcessBench format) before training with it.

::

    # a served teacher on ProcessBench (Hub dataset, all four splits), 50 items per split
    vllm serve Qwen/Qwen3-32B --port 8001 &
    hf-meds-cliff judge-eval --data Qwen/ProcessBench --split all --limit 50 \\
        --cliff_teacher_base_url http://127.0.0.1:8001/v1 --cliff_teacher_model Qwen/Qwen3-32B \\
        --output_json judge_eval/qwen3-32b.json
    # the same with ProcessBench's own critique prompt, comparable with the published F1
    hf-meds-cliff judge-eval --data Qwen/ProcessBench --prompt processbench ...
    # offline: a labelled set from the toy policy's own rollouts, judged by the rule-based teacher
    hf-meds-cliff judge-eval --data toy --cliff_teacher rule
    # human audit of a training run's judgments: export, fill in human_label, re-score
    hf-meds-cliff judge-eval --export_rollouts outputs/cliff/cliff_rollouts.jsonl --export_to audit.jsonl
    hf-meds-cliff judge-eval --data audit.jsonl --label_column human_label --prediction_column teacher_first_mistake

Re-running the same command resumes: items already in ``<output_json>.items.jsonl`` are not judged again.
Metric definitions: :mod:`hf_meds_cliff.cliff.judge_eval` and ``docs/judge_eval.md``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from ..cliff.config import SELF_CONSISTENCY_REDUCERS
from ..cliff.judge_eval import (
    PROMPT_KINDS,
    JudgeEvalSettings,
    export_rollouts,
    format_metrics_table,
    load_labelled_items,
    run_judge_eval,
)
from ..cliff.teachers.factory import TEACHER_KINDS

logger = logging.getLogger(__name__)


@dataclass
class JudgeEvalArguments:
    """Options of ``hf-meds-cliff judge-eval`` (the teacher options are those of the Cliff trainer)."""

    data: str | None = field(
        default=None,
        metadata={
            "help": "Labelled data: 'toy' (the toy policy's own rollouts labelled by the exact checker, offline), 'qwen_world' (the same for the Qwen-tokenizer world), a "
            "local ProcessBench-format .jsonl/.json/.parquet file (problem, steps, label), or a Hub dataset id "
            "such as Qwen/ProcessBench."
        },
    )
    split: str | None = field(
        default=None,
        metadata={
            "help": "Hub split(s), comma-separated, or 'all' (ProcessBench's gsm8k, math, olympiadbench, omnimath; "
            "the default for a Hub id). For a local file: the split name of its items (default: the file name) "
            "unless rows have a 'split' column."
        },
    )
    limit: int | None = field(default=None, metadata={"help": "Judge only the first N items of each split."})
    output_json: str = field(
        default="judge_eval.json",
        metadata={
            "help": "Where to write the metrics (JSON); the judged items go to <name>.items.jsonl beside it, which a "
            "re-run with the same settings resumes from."
        },
    )
    label_column: str = field(
        default="label",
        metadata={
            "help": "Column with the first wrong step (-1 = none); 'human_label' for an audited export."
        },
    )
    answer_column: str | None = field(
        default=None,
        metadata={
            "help": "Column with the ground-truth answer. When given, the reference filter runs as in training (the "
            "teacher solves, the verifier checks, a verified solution is the reference; unverified items get no "
            "judgment). Without it the teacher judges without a reference and makes no solve call."
        },
    )
    prediction_column: str | None = field(
        default=None,
        metadata={
            "help": "Re-score stored predictions (e.g. 'teacher_first_mistake' of an audited export) instead of "
            "calling a teacher."
        },
    )
    prompt: str = field(
        default="cliff",
        metadata={
            "help": "'cliff': Cliff's judge prompt and parser (the training code path); 'processbench': "
            "ProcessBench's critique prompt with the step index in \\boxed{} (HTTP teachers), comparable with the "
            "published numbers.",
            "choices": list(PROMPT_KINDS),
        },
    )
    toy_size: int = field(default=64, metadata={"help": "--data toy: number of labelled rollouts to build."})
    seed: int = field(default=0, metadata={"help": "--data toy: seed of the problems and the sampling."})
    max_items_in_flight: int = field(
        default=64,
        metadata={"help": "Items judged at once (the teacher bounds its requests in flight itself)."},
    )
    export_rollouts: str | None = field(
        default=None,
        metadata={
            "help": "Instead of judging: export this training run's cliff_rollouts.jsonl (a file or the run "
            "directory) to --export_to as ProcessBench-format rows with an empty human_label column."
        },
    )
    export_to: str | None = field(default=None, metadata={"help": "Output .jsonl of --export_rollouts."})
    cliff_teacher: str = field(
        default="auto",
        metadata={
            "help": "Teacher kind: 'http' (OpenAI-compatible server), 'transformers' (a local model), 'rule' (the toy "
            "world's exact checker) or 'auto' (http with a base URL, transformers with only a model, else rule).",
            "choices": list(TEACHER_KINDS),
        },
    )
    cliff_teacher_base_url: str | None = field(
        default=None,
        metadata={"help": "Base URL of the OpenAI-compatible teacher, e.g. http://127.0.0.1:8000/v1."},
    )
    cliff_teacher_model: str | None = field(
        default=None, metadata={"help": "Served model name (http) or local path / hub id (transformers)."}
    )
    cliff_teacher_api_key_env: str = field(
        default="CLIFF_TEACHER_API_KEY",
        metadata={"help": "Environment variable holding the HTTP teacher's API key (never logged)."},
    )
    cliff_teacher_concurrency: int = field(
        default=32, metadata={"help": "Teacher requests in flight at most."}
    )
    cliff_teacher_timeout: float = field(default=300.0, metadata={"help": "Per-request timeout in seconds."})
    cliff_teacher_max_retries: int = field(default=2, metadata={"help": "Retries of a failed request."})
    cliff_teacher_temperature: float = field(
        default=0.6, metadata={"help": "Sampling temperature of the teacher."}
    )
    cliff_teacher_max_tokens: int = field(
        default=4096, metadata={"help": "Maximum tokens per teacher reply."}
    )
    cliff_self_consistency: int = field(
        default=1,
        metadata={"help": "Judgments per item, reduced as in training (--cliff_self_consistency_reducer)."},
    )
    cliff_self_consistency_reducer: str = field(
        default="median",
        metadata={
            "help": "'median' or 'majority' (see the Cliff trainer).",
            "choices": list(SELF_CONSISTENCY_REDUCERS),
        },
    )
    cliff_reference_filter: bool = field(
        default=True,
        metadata={
            "help": "With --answer_column: verify the teacher's solution before using it as the reference (as in "
            "training). False: its solution is the reference unverified."
        },
    )

    def __post_init__(self):
        if self.export_rollouts is not None:
            if not self.export_to:
                raise ValueError(
                    "--export_rollouts needs --export_to PATH.jsonl (where to write the audit file)."
                )
            return
        if not self.data:
            raise ValueError("Give --data: 'toy', a ProcessBench-format .jsonl/.parquet file, or a Hub id.")
        if self.prompt not in PROMPT_KINDS:
            raise ValueError(f"--prompt {self.prompt!r} is unknown; use one of {list(PROMPT_KINDS)}.")
        for name in (
            "cliff_teacher_concurrency",
            "cliff_self_consistency",
            "max_items_in_flight",
            "toy_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"--{name} {value!r} must be a positive integer.")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit {self.limit!r} must be a positive integer.")

    def resolved_teacher_kind(self) -> str:
        if self.cliff_teacher != "auto":
            return self.cliff_teacher
        return (
            "http" if self.cliff_teacher_base_url else "transformers" if self.cliff_teacher_model else "rule"
        )


def make_parser(prog: str | None = None) -> HfArgumentParser:
    from hf_meds_cliff.script_utils import reword_negated_flags

    parser = HfArgumentParser(JudgeEvalArguments)
    if prog is not None:
        parser.prog = prog
    return reword_negated_flags(parser)


def build_eval_teacher(args: JudgeEvalArguments):
    from ..cliff.teachers import build_teacher

    kind = args.resolved_teacher_kind()
    if kind == "rule":
        return build_teacher("rule")
    options = {
        "solve_temperature": args.cliff_teacher_temperature,
        "judge_temperature": args.cliff_teacher_temperature,
    }
    if kind == "http":
        return build_teacher(
            "http", base_url=args.cliff_teacher_base_url, model=args.cliff_teacher_model,
            api_key_env=args.cliff_teacher_api_key_env, max_concurrency=args.cliff_teacher_concurrency,
            timeout=args.cliff_teacher_timeout, max_retries=args.cliff_teacher_max_retries,
            solve_max_tokens=args.cliff_teacher_max_tokens, judge_max_tokens=args.cliff_teacher_max_tokens, **options,
        )  # fmt: skip
    return build_teacher(
        "transformers",
        model=args.cliff_teacher_model,
        max_new_tokens=args.cliff_teacher_max_tokens,
        **options,
    )


def main(args: JudgeEvalArguments) -> dict | None:
    if args.export_rollouts is not None:
        from pathlib import Path

        from ..cliff.trainer import ROLLOUT_LOG_NAME

        source = Path(args.export_rollouts)
        if source.is_dir():
            source = source / ROLLOUT_LOG_NAME
        if not source.is_file():
            raise ValueError(f"--export_rollouts {args.export_rollouts!r}: no {ROLLOUT_LOG_NAME} there.")
        count = export_rollouts(source, args.export_to)
        print(f"Exported {count} judged rollouts to {args.export_to}; fill in human_label, then score with "
              f"--data {args.export_to} --label_column human_label")  # fmt: skip
        return None
    items, unlabelled = load_labelled_items(
        args.data, split=args.split, label_column=args.label_column, answer_column=args.answer_column,
        prediction_column=args.prediction_column, limit=args.limit, toy_size=args.toy_size, seed=args.seed,
    )  # fmt: skip
    if not items:
        raise ValueError(
            f"--data {args.data!r} has no labelled items ({unlabelled} rows without {args.label_column})."
        )
    rescoring = args.prediction_column is not None
    generated = args.data in ("toy", "qwen_world")
    teacher = None if rescoring else build_eval_teacher(args)
    kind = "stored:" + args.prediction_column if rescoring else args.resolved_teacher_kind()
    settings = JudgeEvalSettings(
        teacher=kind,
        prompt=args.prompt,
        self_consistency=args.cliff_self_consistency,
        reducer=args.cliff_self_consistency_reducer,
        reference_filter=args.cliff_reference_filter,
        data=args.data,
        label_column=args.label_column,
        extra={
            # the served model, not its address: a teacher restarted on another port resumes the same run
            "model": args.cliff_teacher_model,
            "temperature": args.cliff_teacher_temperature, "max_tokens": args.cliff_teacher_max_tokens,
            "answer_column": args.answer_column, "split": args.split, "limit": args.limit,
            "toy_size": args.toy_size if generated else None, "seed": args.seed if generated else None,
        },
    )  # fmt: skip
    from pathlib import Path

    from tqdm.auto import tqdm

    from ..checkpointing import write_json_atomically

    with tqdm(total=len(items), desc="judge-eval", unit="item", file=sys.stderr, disable=rescoring) as bar:

        def progress(done: int, total: int) -> None:
            bar.n = done
            bar.refresh()

        summary = run_judge_eval(
            items, teacher, output_json=args.output_json, settings=settings, prompt=args.prompt,
            self_consistency=args.cliff_self_consistency, reducer=args.cliff_self_consistency_reducer,
            reference_filter=args.cliff_reference_filter, max_items_in_flight=args.max_items_in_flight,
            progress=progress,
        )  # fmt: skip
    summary["counts"]["unlabelled_skipped"] = unlabelled
    write_json_atomically(Path(args.output_json), summary)
    print(format_metrics_table(summary))
    print(f"Metrics written to {args.output_json}")
    return summary


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def parse_args(argv: Sequence[str] | None = None) -> JudgeEvalArguments:
    """``JudgeEvalArguments`` from ``argv`` (default ``sys.argv[1:]``); an unknown flag is an argparse usage error."""
    from hf_meds_cliff.errors import parse_dataclass_args

    return parse_dataclass_args(make_parser(), argv)


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """The entry point of ``hf-meds-cliff judge-eval``; returns the exit status, errors as one line on stderr."""
    from hf_meds_cliff.errors import run_dataclass_command

    return run_dataclass_command(
        "judge-eval", make_parser(prog=prog), main, argv, before_main=configure_logging
    )


if __name__ == "__main__":
    raise SystemExit(run())
