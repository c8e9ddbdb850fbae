"""Multi-process driver for ``tests/test_meds_memory_shard.py::test_two_processes_split_the_memory_over_gloo``.

    torchrun --nproc_per_node 2 tests/multiproc/memory_shard_driver.py --output_dir <dir> [--resume_from <dir>]

Runs the toy calls and the synthetic trace of the test module through a ``ShardedErrorMemory`` over
``torch.distributed`` (gloo), saves it (every rank its shard) and, with ``--resume_from``, first loads a memory
saved by another number of processes. Every rank writes the sizes it returned and the fingerprint of the whole
memory to ``rank<r>.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

from hf_meds_cliff.meds.memory_shard import ShardedErrorMemory

TESTS = Path(__file__).resolve().parents[1]


def test_module():
    spec = importlib.util.spec_from_file_location("shard_tests", TESTS / "test_meds_memory_shard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--resume_from", default=None)
    cli = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    module = test_module()
    output_dir = Path(cli.output_dir)
    result = {"world_size": world_size}
    toy = ShardedErrorMemory(rank, world_size)
    result["toy_sizes"] = [toy.assign_and_update(*step).tolist() for step in module.TOY]
    steps = module.synthetic_trace()
    if cli.resume_from:
        memory = ShardedErrorMemory.load(cli.resume_from, rank, world_size)
        result["resumed_sizes"] = [memory.assign_and_update(*step).tolist() for step in steps[4:]]
    else:
        memory = ShardedErrorMemory(rank, world_size)
        result["trace_sizes"] = [memory.assign_and_update(*step).tolist() for step in steps[:4]]
        memory.save(output_dir / "memory")
    result["fingerprint"] = memory.fingerprint()
    result["local_keys"] = memory.local.num_keys
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no process-group teardown: see meds_driver.exit_without_teardown (a gloo destructor deadlock)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
