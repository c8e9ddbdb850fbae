"""What grading one hostile output costs the caller (the training process), against a one-number output.

    python benchmarks/bench_code_compare_cost.py [--flood_mib 8] [--repeats 3]

A stdin test whose expected output is ``5``; the program prints either ``5`` (the baseline) or ``--flood_mib`` MiB
of ``1 1 1 ...`` on one line (issue 29: before the comparison was bounded, this cost the caller about 538 MiB of
peak memory and 1.5-2 s of CPU, under the GIL, per test). Each measurement runs in a fresh process, so that its
peak resident memory is its own: printed are the caller's peak RSS growth during ``run_tests`` (MiB), the peak of
Python allocations (``tracemalloc``, MiB) and the caller's own CPU time (the sandbox's processes are not counted:
they are not the caller), the median over ``--repeats`` runs, and the flood's cost as a ratio of the baseline's.
Only the public API is used, so the same script measures any version of the package on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tracemalloc


def measure(flood_mib: int) -> dict[str, float]:
    from hf_meds_cliff.code import SandboxLimits, run_tests

    limits = SandboxLimits(timeout_s=20, max_output_bytes=(flood_mib + 8) << 20)
    tests = [{"input": "", "output": "5"}]
    run_tests("print(5)\n", tests, limits=limits)  # warm: the fork server, imports
    program = f"import sys\nsys.stdout.write('1 ' * ({flood_mib} << 19))\n" if flood_mib else "print(5)\n"
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    times_before = os.times()
    result = run_tests(program, tests, limits=limits)
    times_after = os.times()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "status": result.results[0].status,
        "rss_growth_mib": (rss_after - rss_before) / 1024,
        "traced_peak_mib": peak / 2**20,
        "caller_cpu_s": (times_after.user - times_before.user) + (times_after.system - times_before.system),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flood_mib", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child)))
        return
    rows = {}
    for label, flood in (("one number (5)", 0), (f"{args.flood_mib} MiB of '1 1 1 ...'", args.flood_mib)):
        runs = []
        for _ in range(args.repeats):
            completed = subprocess.run(
                [sys.executable, __file__, "--child", str(flood)], capture_output=True, text=True, check=True
            )
            runs.append(json.loads(completed.stdout.strip().splitlines()[-1]))
        rows[label] = {
            key: statistics.median(run[key] for run in runs) for key in runs[0] if key != "status"
        } | {"status": runs[0]["status"]}
    print(
        f"{'output':<28} {'verdict':<14} {'RSS growth MiB':>15} {'traced peak MiB':>16} {'caller CPU s':>13}"
    )
    for label, row in rows.items():
        print(
            f"{label:<28} {row['status']:<14} {row['rss_growth_mib']:>15.1f} {row['traced_peak_mib']:>16.2f} "
            f"{row['caller_cpu_s']:>13.3f}"
        )
    base, flood = rows["one number (5)"], rows[f"{args.flood_mib} MiB of '1 1 1 ...'"]
    print(
        f"flood / one number: traced peak x{flood['traced_peak_mib'] / max(base['traced_peak_mib'], 1e-6):.1f}, "
        f"caller CPU x{flood['caller_cpu_s'] / max(base['caller_cpu_s'], 1e-6):.1f}"
    )


if __name__ == "__main__":
    main()
