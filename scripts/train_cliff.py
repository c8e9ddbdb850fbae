"""Cliff: GRPO whose incorrect rollouts are split at the first mistake a teacher finds (``CliffGRPOTrainer``).

Toy world on CPU (no download, no LLM: the exact rule-based teacher judges the toy arithmetic chains):

    python scripts/train_cliff.py

Cliff on code, on CPU too: the code world (the toy chains as stdin programs; the sandboxed test reward; the exact rule
teacher finds the first wrong program line):

    python scripts/train_cliff.py --domain code

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

The code lives in the package (``hf_meds_cliff.scripts.train_cliff``), shared with the
``hf-meds-cliff`` command.
"""

from __future__ import annotations

from hf_meds_cliff.scripts.train_cliff import (
    TeacherArguments,
    apply_teacher_arguments,
    main,
    make_parser,
    parse_args,
)

__all__ = ["TeacherArguments", "apply_teacher_arguments", "main", "make_parser", "parse_args"]

if __name__ == "__main__":
    from hf_meds_cliff.script_utils import run_script
    from hf_meds_cliff.scripts.train_cliff import METHOD

    raise SystemExit(run_script(METHOD, main, parse_args))
