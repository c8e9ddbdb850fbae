"""GRPO / DAPO baseline training: ``scripts/train_grpo.py`` and ``hf-meds-cliff grpo`` (usage in that
script). TRL's ``GRPOTrainer`` plus DAPO's dynamic sampling when ``--dynamic_sampling true``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hf_meds_cliff.dapo import DAPOConfig, DAPOTrainer
from hf_meds_cliff.script_utils import build_parser, parse_script_args, run_script, run_training

METHOD = "grpo"


def make_parser(prog: str | None = None):
    """The ``TrlParser`` of the GRPO script: script arguments, :class:`DAPOConfig`, ``ModelConfig``."""
    return build_parser(DAPOConfig, prog=prog)


def parse_args(argv: Sequence[str] | None = None):
    """``(script_args, training_args, model_args)``; no ``--config`` and no model = the toy recipe."""
    return parse_script_args(DAPOConfig, METHOD, argv=argv)


def main(script_args, training_args, model_args):
    trainer = run_training(DAPOTrainer, script_args, training_args, model_args)
    trainer.accelerator.print(f"Model, tokenizer and metrics.jsonl written to {training_args.output_dir}")
    return trainer


if __name__ == "__main__":
    raise SystemExit(run_script(METHOD, main, parse_args))
