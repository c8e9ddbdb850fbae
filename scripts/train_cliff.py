"""Cliff: GRPO whose incorrect rollouts are split at the first mistake a teacher finds (``CliffGRPOTrainer``).

Toy world on CPU (no download, no LLM: the exact rule-based teacher judges the toy arithmetic chains):

    python scripts/train_cliff.py

A real student with an LLM teacher served over HTTP beside training. Any OpenAI-compatible server works
(`vllm serve`, SGLang, `transformers serve`, a hosted API). With 8 GPUs, give the teacher two of them:

    CUDA_VISIBLE_DEVICES=6,7 vllm serve Qwen/Qwen3-32B --tensor-parallel-size 2 --port 8001 \\
        --max-model-len 16384 --enable-prefix-caching
    CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 accelerate launch --config_file recipes/accelerate/ddp_8gpu.yaml \\
        --num_processes 6 scripts/train_cliff.py --config recipes/cliff_qwen3_4b.yaml \\
        --teacher_base_url http://localhost:8001/v1 --teacher_model Qwen/Qwen3-32B

`--teacher_base_url/--teacher_model` are shorthands for `--cliff_teacher http --cliff_teacher_base_url ...
--cliff_teacher_model ...`. A hosted API reads its key from the variable named by `--cliff_teacher_api_key_env`
(default `CLIFF_TEACHER_API_KEY`); the key is never logged. The teacher's calls of a step run concurrently (at most
`--cliff_teacher_concurrency` in flight per process) and are sharded over the training processes, so a step costs
about one call's latency per `ceil(calls / (concurrency x processes))`. Prefix caching on the server pays off:
every judge prompt of a query repeats the problem and the reference solution.

A small local teacher on the training machine instead: `--cliff_teacher transformers --cliff_teacher_model PATH`.
Every `cliff_*` option is listed by `python scripts/train_cliff.py --help`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from hf_meds_cliff import CliffConfig, CliffGRPOTrainer
from hf_meds_cliff.script_utils import parse_script_args, run_training


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


def main(script_args, training_args, model_args, teacher_args=None):
    if teacher_args is not None:
        training_args = apply_teacher_arguments(training_args, teacher_args)
    trainer = run_training(CliffGRPOTrainer, script_args, training_args, model_args)
    trainer.close_teacher()
    trainer.accelerator.print(f"Model, tokenizer and metrics.jsonl written to {training_args.output_dir}")
    return trainer


def parse_args(argv=None):
    return parse_script_args(
        CliffConfig, "cliff", argv=argv if argv is not None else sys.argv[1:], extra=[TeacherArguments]
    )


if __name__ == "__main__":
    main(*parse_args()).end()
