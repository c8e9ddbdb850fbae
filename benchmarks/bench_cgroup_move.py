"""What a test's memory and pids groups cost: making them, a process moving itself in, removing them.

A fresh process moves itself into a fresh group by writing ``0`` to its ``tasks`` file (cgroup v1: one thread, the
calling one; what the sandbox's program process does) or to its ``cgroup.procs`` file (the whole process: the kernel
takes a global lock for it, whose first writer after a quiet spell waits for an RCU grace period). Each move is timed
in the moving process, after a pause that lets the kernel's lock go quiet, as between two programs of a batch. Needs
a writable memory group (as root, where v1's memory and pids hierarchies or v2's controllers are mounted):

    python benchmarks/bench_cgroup_move.py --moves 20 --out docs/code_sandbox_results/cgroup_move.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path

GROUPS_PATH = Path(__file__).resolve().parents[1] / "src" / "hf_meds_cliff" / "code" / "_groups.py"


def load_groups():
    spec = importlib.util.spec_from_file_location("hf_meds_cliff_sandbox_groups", GROUPS_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed_move(folder_fd: int, name: str, entry: str) -> float:
    """Milliseconds a fresh child takes to move itself into ``name`` through ``entry`` (measured in the child)."""
    target = os.open(f"{name}/{entry}", os.O_WRONLY, dir_fd=folder_fd)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        started = time.perf_counter()
        os.write(target, b"0")
        os.write(write_end, repr((time.perf_counter() - started) * 1000).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    elapsed = float(os.read(read_end, 64))
    for fd in (read_end, write_end, target):
        os.close(fd)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--moves", type=int, default=20)
    parser.add_argument("--pause_s", type=float, default=0.05, help="quiet time before each move")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.moves < 1:
        raise SystemExit(f"--moves={args.moves} must be at least 1")
    groups_module = load_groups()
    groups, reason = groups_module.ProgramGroups.create()
    if groups is None:
        raise SystemExit(f"no writable memory group here ({reason}): run as root where one is mounted")
    entries = ["cgroup.procs"] if groups.kind == "cgroup_v2" else ["tasks", "cgroup.procs"]
    moves: dict[str, list[float]] = {entry: [] for entry in entries}
    make_ms, remove_ms = [], []
    try:
        for _ in range(args.moves):
            for entry in entries:
                started = time.perf_counter()
                test = groups.new_test(128 << 20, 32)
                make_ms.append((time.perf_counter() - started) * 1000)
                time.sleep(args.pause_s)
                moves[entry].append(timed_move(groups.fds[0], test.name, entry))
                started = time.perf_counter()
                groups.kill_and_remove(test)
                remove_ms.append((time.perf_counter() - started) * 1000)
    finally:
        groups.remove()
    summary = {
        "kind": groups.kind,
        "moves": args.moves,
        "pause_s": args.pause_s,
        "make_test_groups_ms_median": statistics.median(make_ms),
        "remove_test_groups_ms_median": statistics.median(remove_ms),
        **{f"move_through_{entry}_ms_median": statistics.median(times) for entry, times in moves.items()},
        **{f"move_through_{entry}_ms_max": max(times) for entry, times in moves.items()},
        "machine": {"platform": os.uname().release, "load_average_at_end": os.getloadavg()},
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps({**summary, "raw_ms": moves}, indent=2) + "\n")


if __name__ == "__main__":
    main()
