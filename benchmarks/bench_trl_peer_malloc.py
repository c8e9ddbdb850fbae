"""TRL's CPU log-probability kernel under glibc's default malloc vs the peer runner's ``MALLOC_ENVIRONMENT``.

``tools/trl_peer_suite.py`` runs TRL's tool and environment tests with stand-ins over Qwen's 151,680-token vocabulary
(the tests hard-code its ids). On a CPU, TRL's chunked log-probability kernel (``trl.kernels.ChunkedLogProbFunction``)
scores every position of every sequence against 32768-row slices of the LM head in torch element-wise ops, so a tool
test's ~750 positions (3 rollouts of ~250 tokens: Qwen 3's tool preamble, the call, the tool's reply) make ~100 MB
temporaries. glibc serves those with ``mmap`` and unmaps them on ``free``; the runner's setting keeps freed memory in
the heap. This benchmark times one forward and backward of the kernel at that size (hidden size 16, as the
stand-ins), in two child processes that differ only in the environment, alternating rounds, and reports the ratio of
wall seconds (default / runner's setting) with each child's user and system CPU seconds.

    OMP_NUM_THREADS=1 python benchmarks/bench_trl_peer_malloc.py --tokens 750 --steps 3 --rounds 2 \\
        --output docs/trl_peer_suite_results/malloc-benchmark.json
    python benchmarks/bench_trl_peer_malloc.py --tokens 300 --steps 1 --rounds 1   # small
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

from trl_peer_suite import MALLOC_ENVIRONMENT

from hf_meds_cliff.machine import cpu_model_and_flags

CHILD = """
import json, resource, sys, time
import torch
from trl.kernels import ChunkedLogProbFunction

tokens, vocab, hidden_size, steps = (int(value) for value in sys.argv[1:5])
generator = torch.Generator().manual_seed(0)
hidden = torch.randn(tokens, hidden_size, generator=generator, requires_grad=True)
weight = torch.randn(vocab, hidden_size, generator=generator, requires_grad=True)
targets = torch.randint(0, vocab, (tokens,), generator=generator)


def step():
    out = ChunkedLogProbFunction.apply(hidden, weight, None, targets, 1.0, 32768, None, 1.0, ("log_probs",))
    out[0].sum().backward()


step()  # warm-up: the first step faults in the heap under either setting
usage, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
for _ in range(steps):
    step()
end, after = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "wall_s_per_step": (end - start) / steps,
    "user_s_per_step": (after.ru_utime - usage.ru_utime) / steps,
    "system_s_per_step": (after.ru_stime - usage.ru_stime) / steps,
    "page_faults_per_step": (after.ru_minflt - usage.ru_minflt) / steps,
    "max_rss_mb": after.ru_maxrss / 1024,
}))
"""


def run_child(environment: dict[str, str], args) -> dict:
    command = [sys.executable, "-c", CHILD, str(args.tokens), str(args.vocab), str(args.hidden_size), str(args.steps)]
    done = subprocess.run(command, env=environment, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=750, help="positions scored (a tool test: ~750)")
    parser.add_argument("--vocab", type=int, default=151680, help="LM head rows (the stand-ins': 151,680)")
    parser.add_argument("--hidden_size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per child, after one warm-up step")
    parser.add_argument("--rounds", type=int, default=2, help="alternating default/runner-setting rounds")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)

    base = {key: value for key, value in os.environ.items() if key not in MALLOC_ENVIRONMENT}
    base.setdefault("OMP_NUM_THREADS", "1")
    runs = {"glibc_default": [], "runner_setting": []}
    for _ in range(args.rounds):
        runs["glibc_default"].append(run_child(base, args))
        runs["runner_setting"].append(run_child({**base, **MALLOC_ENVIRONMENT}, args))
    median = {
        name: {key: statistics.median(run[key] for run in results) for key in results[0]}
        for name, results in runs.items()
    }
    ratio = median["glibc_default"]["wall_s_per_step"] / median["runner_setting"]["wall_s_per_step"]

    import torch
    import trl

    model, flags = cpu_model_and_flags()
    result = {
        "benchmark": "trl_peer_malloc",
        "ratio_wall_default_over_runner_setting": round(ratio, 2),
        "median": median,
        "runs": runs,
        "malloc_environment": MALLOC_ENVIRONMENT,
        "config": vars(args) | {"output": str(args.output) if args.output else None},
        "machine": {
            "cpu": model,
            "cpu_flags": flags,
            "cpus": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "glibc": platform.libc_ver()[1],
        },
        "torch_version": torch.__version__,
        "trl_version": trl.__version__,
        "command": "python benchmarks/bench_trl_peer_malloc.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    print(json.dumps({"ratio": result["ratio_wall_default_over_runner_setting"], "median": median}, indent=1))
    if args.output:
        args.output.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
