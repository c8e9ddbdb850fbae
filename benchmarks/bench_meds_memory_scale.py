"""What the MEDS error memory costs as it grows, today's memory against the one it replaced, in the same run.

Both memories get the same calls at the paper's shape: 14-dim features (float32, as the trainer gathers them), 8
wrong rows per prompt visit, every prompt visited ``--visits`` times (one visit = one epoch; the default 100 is
``run_meds.sh``'s), ``--batch-prompts`` prompts per call, a 256-character snippet per row (the trainer's default).
At each memory size (``--prompts`` prompts) it measures:

* host memory per stored row: the bytes the memory holds, measured with ``tracemalloc`` (numpy reports its
  arrays to it) before the last ``--timed-visits`` visits, each memory built alone;
* update time per call during the last ``--timed-visits`` visits (5 by default: a key prunes its snippets about
  once in 5 visits), the two memories called in turn on each call, so that other load on the machine falls on both
  alike;
* bytes on disk per row, save and load time of a checkpoint (best of ``--repeats``, in turn).

The earlier memory is the module ``src/hf_meds_cliff/meds/memory.py`` of ``--baseline`` (a git commit), loaded from
git under another name with the installed clustering kernels; the two are checked to return identical cluster sizes
on every call and identical labels and normalised rows at the end.

Bytes are extrapolated along a straight line through the measured sizes (least squares), save and load times with
the largest time per row measured, to DAPO-Math-17k: ``--paper-prompts`` 17,900 prompts x ``--visits`` x 8 =
14.3 M rows. The earlier memory is held whole by every rank; today's is split
by key over ``--ranks`` processes (``hf_meds_cliff.meds.memory_shard``), each rank holding the largest share
:func:`~hf_meds_cliff.meds.memory_shard.key_owner` gives one of them for the paper's number of prompts, and saving
only that share, plus the directory of all keys every rank keeps (measured at the paper's number of keys). The
update time of rank 0 of ``--ranks`` is measured on the same calls with the other ranks' answers left empty (its own
work, without the network). Writes ``--output`` (JSON: machine, versions, command, commit, every measurement).

    NUMBA_CACHE_DIR=$HOME/.cache/hf_meds_cliff/numba PYTHONPATH=src \\
        python benchmarks/bench_meds_memory_scale.py --prompts 50 100 200 --visits 100
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "docs" / "benchmarks_results" / "meds_memory_scale.json"


def load_baseline(commit: str):
    """``hf_meds_cliff.meds.memory`` as it was at ``commit``, imported as ``hf_meds_cliff.meds._memory_baseline``."""
    source = subprocess.run(
        ["git", "show", f"{commit}:src/hf_meds_cliff/meds/memory.py"], cwd=REPO, check=True, capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    import hf_meds_cliff.meds as package

    path = Path(tempfile.mkdtemp()) / "_memory_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"{package.__name__}._memory_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def visits_of(num_prompts: int, visits: int, rows_per_visit: int, dim: int, batch_prompts: int, seed: int):
    """For each visit, the calls of that visit: ``(keys, float32 features (n, dim), snippet texts (UTF-8), step)``.

    Every prompt has 2 to 5 error modes; a wrong rollout is a mode plus spread (HDBSCAN then finds a mix of
    clusters and noise, as on real features). Prompts are visited in a new random order each epoch.
    """
    rng = np.random.default_rng(seed)
    modes = [rng.normal(size=(int(rng.integers(2, 6)), dim)) for _ in range(num_prompts)]
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz +-=()0123456789", dtype=np.uint8)
    for visit in range(visits):
        order = rng.permutation(num_prompts)
        calls = []
        for start in range(0, num_prompts, batch_prompts):
            prompts = order[start : start + batch_prompts]
            keys, rows, texts = [], [], []
            for prompt in prompts:
                chosen = modes[prompt][rng.integers(0, len(modes[prompt]), rows_per_visit)]
                rows.append(chosen + rng.normal(scale=0.4, size=(rows_per_visit, dim)))
                keys += [(f"prompt-{prompt:05d}", False)] * rows_per_visit
                for _ in range(rows_per_visit):
                    body = rng.choice(letters, 240).tobytes().decode()
                    # bytes: the str is made where the memory receives it, so tracemalloc counts what it keeps
                    texts.append(f"{body} \\boxed{{{int(rng.integers(1000))}}}"[:256].encode())
            calls.append((keys, np.concatenate(rows).astype(np.float32), texts, visit + 1))
        yield calls


def build(module, args, num_prompts: int, visits: list) -> tuple[object, int, str]:
    """A memory of ``module`` after the visits before the timed ones, the bytes it holds (``tracemalloc``), and a
    digest of every size it returned."""
    sizes_digest = hashlib.sha256()  # not a list: what the benchmark keeps must not count as the memory's bytes
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    memory = module.ErrorMemory()
    for calls in visits[: -args.timed_visits]:
        for keys, features, texts, step in calls:
            snippets = [module.RowSnippet(text.decode(), step=step, sample=i) for i, text in enumerate(texts)]
            sizes = memory.assign_and_update(keys, features, snippets)
            sizes_digest.update(np.asarray(sizes, dtype=np.int64).tobytes())
        del keys, features, texts, snippets, sizes
    held_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return memory, held_bytes, sizes_digest


def rank_zero_of(world_size: int):
    """The all-gather rank 0 of ``world_size`` sees when the other ranks own none of the call's keys: rank 0's own
    work in a sharded step, without the network (a benchmark device; the sizes it returns are rank 0's only)."""
    from hf_meds_cliff.meds.memory import _StepCounts

    empty = {"error": None, "rows": np.zeros(0, dtype=np.int64), "sizes": np.zeros(0, dtype=np.int64),
             "counts": _StepCounts(), "label_counts": {}}  # fmt: skip
    return lambda obj: [obj] + [empty] * (world_size - 1)


def directory_bytes(num_prompts: int, world_size: int, dim: int) -> tuple[int, int]:
    """Bytes rank 0 of ``world_size`` holds after one row of each of ``num_prompts`` keys (its directory of all keys
    and the rows of the keys it owns), and how many rows it holds."""
    from hf_meds_cliff.meds.memory_shard import ShardedErrorMemory

    keys = [(f"prompt-{index:05d}", False) for index in range(num_prompts)]
    features = np.random.default_rng(0).normal(size=(num_prompts, dim)).astype(np.float32)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    memory = ShardedErrorMemory(0, world_size, rank_zero_of(world_size))
    for start in range(0, num_prompts, 512):
        memory.assign_and_update([tuple(key) for key in keys[start : start + 512]], features[start : start + 512])
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held, memory.local.num_rows


def measure_pair(modules: dict, args, num_prompts: int) -> dict[str, dict]:
    """Both memories built on the same calls (each traced alone), then the last visit and the checkpoints timed
    call by call in turn, so that load on the machine falls on both alike."""
    visits = list(visits_of(num_prompts, args.visits, args.rows_per_visit, args.dim, args.batch_prompts, args.seed))
    built = {name: build(module, args, num_prompts, visits) for name, module in modules.items()}
    results = {
        name: {
            "prompts": num_prompts,
            "rows_held": memory.num_rows,
            "ram_bytes": held_bytes,
            "ram_bytes_per_row": held_bytes / memory.num_rows,
            "rows_per_call": args.batch_prompts * args.rows_per_visit,
            "_update": [],
            "_save": [],
            "_load": [],
        }
        for name, (memory, held_bytes, _) in built.items()
    }
    from hf_meds_cliff.meds.memory_shard import ShardedErrorMemory

    rank_zero = ShardedErrorMemory(0, args.ranks, rank_zero_of(args.ranks))
    for calls in visits[: -args.timed_visits]:
        for keys, features, texts, step in calls:
            rank_zero.assign_and_update(keys, features, [modules["now"].RowSnippet(t.decode(), step, i)
                                                         for i, t in enumerate(texts)])  # fmt: skip
    results["now"]["_update_rank_zero"] = []
    timed_calls = [call for calls in visits[-args.timed_visits :] for call in calls]
    for keys, features, texts, step in timed_calls:
        snippets = [modules["now"].RowSnippet(text.decode(), step=step, sample=i) for i, text in enumerate(texts)]
        start = time.perf_counter()
        rank_zero.assign_and_update(keys, features, snippets)
        results["now"]["_update_rank_zero"].append(time.perf_counter() - start)
        for name, module in modules.items():
            memory, _, digest = built[name]
            snippets = [module.RowSnippet(text.decode(), step=step, sample=i) for i, text in enumerate(texts)]
            start = time.perf_counter()
            sizes = memory.assign_and_update(keys, features, snippets)
            results[name]["_update"].append(time.perf_counter() - start)
            digest.update(np.asarray(sizes, dtype=np.int64).tobytes())
    with tempfile.TemporaryDirectory() as directory:
        for repeat in range(args.repeats):
            for name, module in modules.items():
                folder = Path(directory) / name
                memory = built[name][0]
                start = time.perf_counter()
                memory.save(folder)
                results[name]["_save"].append(time.perf_counter() - start)
                results[name]["disk_bytes"] = sum(path.stat().st_size for path in folder.iterdir())
                start = time.perf_counter()
                loaded = module.ErrorMemory.load(folder)
                results[name]["_load"].append(time.perf_counter() - start)
                del loaded
    for name, result in results.items():
        memory, _, digest = built[name]
        result["rows_saved"] = memory.num_rows
        result["disk_bytes_per_row"] = result["disk_bytes"] / memory.num_rows
        result["save_seconds"] = min(result.pop("_save"))
        result["load_seconds"] = min(result.pop("_load"))
        result["update_seconds_per_call"] = float(np.mean(result.pop("_update")))
        if "_update_rank_zero" in result:
            result["rank_zero_keys"] = rank_zero.local.num_keys
            result["rank_zero_update_seconds_per_call"] = float(np.mean(result.pop("_update_rank_zero")))
        result["_sizes"] = digest.hexdigest()
        result["_final"] = {str(key): (memory.stored_labels(key), memory.stored_features(key)) for key in memory.keys()}
    return results


def fit(points: list[dict], field: str, rows_field: str) -> tuple[float, float]:
    """Least-squares ``field = intercept + slope * rows``; (slope, intercept)."""
    rows = np.array([p[rows_field] for p in points], dtype=np.float64)
    values = np.array([p[field] for p in points], dtype=np.float64)
    slope, intercept = np.polyfit(rows, values, 1) if len(points) > 1 else (values[0] / rows[0], 0.0)
    return float(slope), float(intercept)


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gib": memory_gib,
        "load_average": os.getloadavg(),
    }


def versions() -> dict:
    import fast_hdbscan
    import numba

    result = {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__}
    result["fast_hdbscan"] = getattr(fast_hdbscan, "__version__", "unknown")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--visits", type=int, default=100)
    parser.add_argument("--rows-per-visit", type=int, default=8)
    parser.add_argument("--dim", type=int, default=14)
    parser.add_argument("--batch-prompts", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--timed-visits", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", default="33bb6e1", help="git commit of the earlier memory (format 2)")
    parser.add_argument("--paper-prompts", type=int, default=17_900)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()

    from hf_meds_cliff.meds import memory as current
    from hf_meds_cliff.meds.memory_shard import key_owner

    baseline = load_baseline(args.baseline)
    for module in (baseline, current):  # imports and first calls (fast_hdbscan, numba) outside the measurements
        warm = module.ErrorMemory()
        for _ in range(3):
            warm.assign_and_update(["warm-up"] * 8, np.random.default_rng(0).normal(size=(8, args.dim)))
    started = machine()
    measured: dict[str, list[dict]] = {"before": [], "now": []}
    identical = True
    for num_prompts in args.prompts:
        results = measure_pair({"before": baseline, "now": current}, args, num_prompts)
        identical &= results["before"]["_sizes"] == results["now"]["_sizes"]
        for key, (labels, features) in results["before"]["_final"].items():
            now_labels, now_features = results["now"]["_final"][key]
            identical &= bool(np.array_equal(labels, now_labels) and np.array_equal(features, now_features))
        for name, result in results.items():
            result.pop("_sizes"), result.pop("_final")
            measured[name].append(result)
            print(
                f"{name:>6} {num_prompts:>5} prompts {result['rows_saved']:>8} rows: "
                f"{result['ram_bytes_per_row']:7.1f} B/row RAM, {result['disk_bytes_per_row']:7.1f} B/row disk, "
                f"save {result['save_seconds']:.3f} s, load {result['load_seconds']:.3f} s, "
                f"update {result['update_seconds_per_call'] * 1000:.1f} ms/call"
                + (f" ({result['rank_zero_update_seconds_per_call'] * 1000:.1f} on rank 0 of {args.ranks})"
                   if "rank_zero_update_seconds_per_call" in result else ""),
                flush=True,
            )

    paper_rows = args.paper_prompts * args.visits * args.rows_per_visit
    owners = np.bincount(
        [key_owner((f"prompt-{index:05d}", False), args.ranks) for index in range(args.paper_prompts)],
        minlength=args.ranks,
    )
    largest_share = float(owners.max() / owners.sum())
    rows_per_rank = {"before": paper_rows, "now": paper_rows * largest_share}
    directory, directory_rows = directory_bytes(args.paper_prompts, args.ranks, args.dim)
    paper = {}
    for name, points in measured.items():
        ram = fit(points, "ram_bytes", "rows_held")
        disk = fit(points, "disk_bytes", "rows_saved")
        # times: the largest per-row time measured (a line through noisy timings can cross zero)
        save = (max(p["save_seconds"] / p["rows_saved"] for p in points), 0.0)
        load = (max(p["load_seconds"] / p["rows_saved"] for p in points), 0.0)
        rank_rows = rows_per_rank[name]
        # now: each rank also holds the directory of every key (measured at the paper's number of keys)
        extra = directory - ram[0] * directory_rows if name == "now" else 0.0
        paper[name] = {
            "rows_per_rank": rank_rows,
            "ram_bytes_per_row": ram[0],
            "disk_bytes_per_row": disk[0],
            "ram_per_rank_gb": (ram[1] + ram[0] * rank_rows + extra) / 1e9,
            "ram_all_ranks_gb": args.ranks * (ram[1] + ram[0] * rank_rows + extra) / 1e9,
            "checkpoint_gb": (disk[1] + disk[0] * paper_rows) / 1e9,  # one copy (before) or all shards (now)
            "save_seconds_per_rank": save[1] + save[0] * rank_rows,
            "load_seconds_per_rank": load[1] + load[0] * rank_rows,
            "update_seconds_per_call": points[-1]["update_seconds_per_call"],
            "update_seconds_per_call_per_rank": points[-1].get(
                "rank_zero_update_seconds_per_call", points[-1]["update_seconds_per_call"]
            ),
        }
    paper["now"]["directory_bytes_per_rank"] = directory
    ratios = {
        field: paper["before"][field] / paper["now"][field]
        for field in ("ram_bytes_per_row", "disk_bytes_per_row", "ram_per_rank_gb", "checkpoint_gb",
                      "save_seconds_per_rank", "load_seconds_per_rank", "update_seconds_per_call",
                      "update_seconds_per_call_per_rank")
    }  # fmt: skip
    print(
        f"\nDAPO-Math-17k: {args.paper_prompts} prompts x {args.visits} visits x {args.rows_per_visit} wrong rows = "
        f"{paper_rows / 1e6:.2f} M rows; {args.ranks} ranks, largest key share {largest_share:.4f}"
    )
    print(f"{'':28}{'before':>12}{'now':>12}{'before/now':>12}")
    for field, unit in (("ram_bytes_per_row", "B"), ("disk_bytes_per_row", "B"), ("ram_per_rank_gb", "GB"),
                        ("checkpoint_gb", "GB"), ("save_seconds_per_rank", "s"), ("load_seconds_per_rank", "s"),
                        ("update_seconds_per_call", "s"), ("update_seconds_per_call_per_rank", "s")):  # fmt: skip
        print(
            f"{field + ' (' + unit + ')':28}{paper['before'][field]:12.3f}{paper['now'][field]:12.3f}"
            f"{ratios[field]:12.2f}"
        )
    print(f"cluster sizes, labels and normalised rows identical: {identical}")

    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", "src", "benchmarks"], cwd=REPO, capture_output=True, text=True,
        check=False,
    ).stdout.strip()
    record = {
        "benchmark": "bench_meds_memory_scale.py",
        "command": "python " + " ".join([os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]]),
        "commit": commit + ("-dirty" if changed else ""),
        "baseline_commit": args.baseline,
        "machine_at_start": started,
        "load_average_at_end": os.getloadavg(),
        "versions": versions(),
        "shape": {"dim": args.dim, "rows_per_visit": args.rows_per_visit, "visits": args.visits,
                  "batch_prompts": args.batch_prompts, "snippet_chars": 256},
        "measured": measured,
        "paper": {"prompts": args.paper_prompts, "rows": paper_rows, "ranks": args.ranks,
                  "largest_key_share": largest_share, "before": paper["before"], "now": paper["now"],
                  "before_over_now": ratios},
        "identical_results": identical,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
