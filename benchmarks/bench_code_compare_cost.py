"""What grading one hostile output costs the caller (the training process), against a one-number output.

    python benchmarks/bench_code_compare_cost.py [--flood_mib 8] [--repeats 3]

A stdin test whose expected output is ``5``; the program prints either ``5`` (the baseline) or ``--flood_mib`` MiB
of ``1 1 1 ...`` on one line (before the comparison was bounded, this cost the caller about 538 MiB of
peak memory and 1.5-2 s of CPU, under the GIL, per test). Each measurement runs in a fresh process, so that its
peak resident memory is its own: printed are the caller's peak RSS growth during ``run_tests`` (MiB), the peak of
Python allocations (``tracemalloc``, MiB, in runs of their own) and the caller's own CPU time (the sandbox's
processes are not counted: they are not the caller), each the median over ``--repeats`` runs; the one-number row is
the baseline measured in the same run.
Only the public API is used, so the same script measures any version of the package on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tracemalloc


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(flood_mib: int, traced: bool) -> dict[str, float]:
    """One ``run_tests`` in this process: RSS growth and CPU (``traced=False``), or the peak of Python
    allocations (``traced=True``: ``tracemalloc`` slows the CPU, so it is measured in a run of its own)."""
    from hf_meds_cliff.code import SandboxLimits, run_tests

    limits = SandboxLimits(timeout_s=20, max_output_bytes=(flood_mib + 8) << 20)
    tests = [{"input": "", "output": "5"}]
    run_tests("print(5)\n", tests, limits=limits)  # warm: the fork server, imports
    program = f"import sys\nsys.stdout.write('1 ' * ({flood_mib} << 19))\n" if flood_mib else "print(5)\n"
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if traced:
        tracemalloc.start()
    cpu_before = _cpu_s()
    result = run_tests(program, tests, limits=limits)
    cpu_after = _cpu_s()
    peak = tracemalloc.get_traced_memory()[1] if traced else 0
    if traced:
        tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if traced:
        return {"status": result.results[0].status, "traced_peak_mib": peak / 2**20}
    return {
        "status": result.results[0].status,
        "rss_growth_mib": (rss_after - rss_before) / 1024,
        "caller_cpu_s": cpu_after - cpu_before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flood_mib", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.traced)))
        return

    def child(flood: int, traced: bool) -> dict:
        command = [sys.executable, __file__, "--child", str(flood)] + (["--traced"] if traced else [])
        completed = subprocess.run(command, capture_output=True, text=True, check=True)
        return json.loads(completed.stdout.strip().splitlines()[-1])

    print(f"{'output':<28} {'verdict':<14} {'RSS growth MiB':>15} {'traced peak MiB':>16} {'caller CPU s':>13}")
    for label, flood in (("one number (5)", 0), (f"{args.flood_mib} MiB of '1 1 1 ...'", args.flood_mib)):
        plain = [child(flood, traced=False) for _ in range(args.repeats)]
        traced = [child(flood, traced=True) for _ in range(args.repeats)]
        rss = statistics.median(run["rss_growth_mib"] for run in plain)
        cpu = statistics.median(run["caller_cpu_s"] for run in plain)
        peak = statistics.median(run["traced_peak_mib"] for run in traced)
        print(f"{label:<28} {plain[0]['status']:<14} {rss:>15.1f} {peak:>16.2f} {cpu:>13.3f}")


if __name__ == "__main__":
    main()
