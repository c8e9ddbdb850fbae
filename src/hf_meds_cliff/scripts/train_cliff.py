"""Cliff training: ``scripts/train_cliff.py`` and ``hf-meds-cliff cliff`` (usage in that script).

Trains :class:`~hf_meds_cliff.cliff.CliffGRPOTrainer`; ``--teacher_base_url/--teacher_model`` are shorthands
for an HTTP teacher. No arguments = the toy world on CPU with the exact rule-based teacher; ``--domain code`` alone = the
code world (stdin programs, sandboxed test reward, the rule teacher locating the first wrong program line).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from hf_meds_cliff.cliff.config import CliffConfig
from hf_meds_cliff.cliff.trainer import CliffGRPOTrainer
from hf_meds_cliff.script_utils import build_parser, parse_script_args, run_script, run_training

METHOD = "cliff"


@dataclass
class TeacherArguments:
    """Shorthands for an HTTP teacher (they set ``cliff_teacher='http'`` and its URL and model)."""

    teacher_base_url: str | None = field(
        default=None,
        metadata={
            "help": "Base URL of an OpenAI-compatible teacher, e.g. http://localhost:8001/v1 (`vllm serve`)."
        },
    )
    teacher_model: str | None = field(
        default=None, metadata={"help": "Model name the teacher endpoint serves, e.g. Qwen/Qwen3-32B."}
    )


def apply_teacher_arguments(training_args: CliffConfig, teacher_args: TeacherArguments) -> CliffConfig:
    """Fold ``--teacher_base_url/--teacher_model`` into the config."""
    if teacher_args.teacher_base_url is None and teacher_args.teacher_model is None:
        return training_args
    if not teacher_args.teacher_base_url or not teacher_args.teacher_model:
        raise ValueError(
            f"--teacher_base_url ({teacher_args.teacher_base_url!r}) and --teacher_model "
            f"({teacher_args.teacher_model!r}) go together: give both to train with an HTTP teacher."
        )
    training_args.cliff_teacher = "http"
    training_args.cliff_teacher_base_url = teacher_args.teacher_base_url
    training_args.cliff_teacher_model = teacher_args.teacher_model
    return training_args


def make_parser(prog: str | None = None):
    """The ``TrlParser`` of the Cliff script: script arguments, :class:`CliffConfig`, ``ModelConfig``, teacher
    shorthands."""
    return build_parser(CliffConfig, TeacherArguments, prog=prog)


def parse_args(argv: Sequence[str] | None = None):
    """``(script_args, training_args, model_args, teacher_args)``; no ``--config``, no model: toy recipe."""
    return parse_script_args(
        CliffConfig, METHOD, argv=argv if argv is not None else sys.argv[1:], extra=[TeacherArguments]
    )


def main(script_args, training_args, model_args, teacher_args=None):
    if teacher_args is not None:
        training_args = apply_teacher_arguments(training_args, teacher_args)
    trainer = run_training(CliffGRPOTrainer, script_args, training_args, model_args)
    trainer.close_teacher()
    trainer.accelerator.print(f"Model, tokenizer and metrics.jsonl written to {training_args.output_dir}")
    return trainer


if __name__ == "__main__":
    raise SystemExit(run_script(METHOD, main, parse_args))
