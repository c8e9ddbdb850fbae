"""Clustering throughput of one MEDS step: ErrorMemory vs a reference-style per-row loop.

One training step touches ``--keys`` keys (default 512 prompts) with ``--rows`` new features each
(default 16 rollouts), 14-dim and L2-normalised, against memories of 16, 160 and 1600 stored rows
per key. Both methods get the same data in the same run:

* ``ErrorMemory.assign_and_update`` (k-NN vote per key in one numba call, incremental exact MST,
  ``fast_hdbscan`` condensed tree / EOM selection);
* baseline in the style of the reference (``recipe/MEDS/layer_logits_utils.py``): for every new row a
  scikit-learn ``KNeighborsClassifier(n_neighbors=3, metric="cosine")`` fitted on the key's stored
  rows and labels, then one ``hdbscan.HDBSCAN(min_cluster_size=2, min_samples=1)`` refit per key
  on all its rows.

The baseline's stored labels are the memory's (the same partition ``hdbscan`` finds, see
``tests/test_meds_memory.py``), so the two are also checked to return the same cluster sizes.
A baseline on fewer keys (``--baseline-keys``) is scaled linearly to ``--keys`` and says so.

    NUMBA_CACHE_DIR=/root/.cache/hf_meds_cliff/numba python benchmarks/bench_clustering.py
    python benchmarks/bench_clustering.py --keys 512 --baseline-keys 64 --memory-sizes 16 160 1600
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings

import numpy as np

from hf_meds_cliff.meds import ErrorMemory


def make_step_data(rng: np.random.Generator, num_keys: int, memory_rows: int, new_rows: int, dim: int):
    """Per key: (memory_rows + new_rows, dim) L2-normalised rows from a few modes per key (error
    patterns) plus spread, so HDBSCAN finds a realistic mix of clusters and noise."""
    data = []
    for _ in range(num_keys):
        modes = rng.normal(size=(int(rng.integers(2, 6)), dim))
        total = memory_rows + new_rows
        rows = modes[rng.integers(0, len(modes), total)] + rng.normal(scale=0.4, size=(total, dim))
        data.append(rows / np.linalg.norm(rows, axis=1, keepdims=True))
    return data


def build_memory(data, memory_rows: int) -> ErrorMemory:
    memory = ErrorMemory()
    keys = [(f"prompt-{index}", False) for index in range(len(data))]
    for key, rows in zip(keys, data):
        memory.assign_and_update([key] * memory_rows, rows[:memory_rows])
    return memory


def copy_memory(memory: ErrorMemory) -> ErrorMemory:
    with tempfile.TemporaryDirectory() as directory:
        memory.save(directory)
        return ErrorMemory.load(directory)


def run_memory_step(memory: ErrorMemory, data, memory_rows: int):
    keys, features = [], []
    for index, rows in enumerate(data):
        keys += [(f"prompt-{index}", False)] * (rows.shape[0] - memory_rows)
        features.append(rows[memory_rows:])
    features = np.concatenate(features)
    start, start_cpu = time.perf_counter(), time.process_time()
    sizes = memory.assign_and_update(keys, features)
    seconds = (time.perf_counter() - start, time.process_time() - start_cpu)
    return seconds, sizes, memory.last_step_stats()


def run_reference_step(memory: ErrorMemory, data, memory_rows: int, num_keys: int):
    """The reference's per-row loop over the first ``num_keys`` keys.

    Returns ((wall seconds, process CPU seconds), sizes).
    """
    import hdbscan
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.preprocessing import normalize

    sizes = []
    start, start_cpu = time.perf_counter(), time.process_time()
    for index in range(num_keys):
        key = (f"prompt-{index}", False)
        stored, labels = memory.stored_features(key), memory.stored_labels(key)
        new_rows = data[index][memory_rows:]
        for row in new_rows:
            classifier = KNeighborsClassifier(n_neighbors=min(3, len(stored)), metric="cosine")
            classifier.fit(stored, labels)
            label = classifier.predict(row[None])[0]
            sizes.append(int(np.sum(labels == label)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hdbscan.HDBSCAN(min_cluster_size=2, min_samples=1).fit_predict(
                normalize(np.concatenate([stored, new_rows]))
            )
    return (time.perf_counter() - start, time.process_time() - start_cpu), np.array(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=512, help="keys (prompts) touched per step")
    parser.add_argument("--rows", type=int, default=16, help="new rows per key per step")
    parser.add_argument("--dim", type=int, default=14, help="feature width")
    parser.add_argument("--memory-sizes", type=int, nargs="+", default=[16, 160, 1600])
    parser.add_argument(
        "--baseline-keys",
        type=int,
        default=None,
        help="run the baseline on only this many keys and scale its time to --keys (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed ErrorMemory steps (median)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    # Warm-up on a small problem: numba compilation / cache loading and the fast_hdbscan import
    # are one-off costs of a run, not of a step.
    warmup = make_step_data(rng, 4, 32, args.rows, args.dim)
    run_memory_step(build_memory(warmup, 32), warmup, 32)
    run_reference_step(build_memory(warmup, 32), warmup, 32, 1)

    print(
        f"one step: {args.keys} keys x {args.rows} new rows, dim {args.dim}; ErrorMemory: median of "
        f"{args.repeats}; wall and process-CPU seconds (CPU is the fairer figure on a shared machine)"
    )
    print(
        f"{'rows/key':>8} {'ours wall':>9} {'ours cpu':>9} {'ref wall':>9} {'ref cpu':>9} "
        f"{'ratio wall':>10} {'ratio cpu':>9} {'same size':>9}  notes"
    )
    for memory_rows in args.memory_sizes:
        data = make_step_data(rng, args.keys, memory_rows, args.rows, args.dim)
        memory = build_memory(data, memory_rows)
        walls, cpus, sizes, stats = [], [], None, None
        for _ in range(args.repeats):
            (wall, cpu), sizes, stats = run_memory_step(copy_memory(memory), data, memory_rows)
            walls.append(wall)
            cpus.append(cpu)
        ours_wall, ours_cpu = statistics.median(walls), statistics.median(cpus)

        baseline_keys = min(args.baseline_keys or args.keys, args.keys)
        (ref_wall, ref_cpu), reference_sizes = run_reference_step(memory, data, memory_rows, baseline_keys)
        scale = args.keys / baseline_keys
        agreement = float(np.mean(sizes[: reference_sizes.shape[0]] == reference_sizes))
        notes = (
            f"assign {stats['assign_seconds']:.3f}s fit {stats['fit_seconds']:.3f}s; "
            f"clusters/key {stats['clusters_per_key']:.1f}, noise {stats['noise_fraction']:.2f}"
        )
        if baseline_keys < args.keys:
            notes += f"; reference run on {baseline_keys} keys ({ref_wall:.1f}s wall), scaled x{scale:g}"
        print(
            f"{memory_rows:>8} {ours_wall:>9.3f} {ours_cpu:>9.3f} {ref_wall * scale:>9.2f} "
            f"{ref_cpu * scale:>9.2f} {ref_wall * scale / ours_wall:>9.1f}x {ref_cpu * scale / ours_cpu:>8.1f}x "
            f"{agreement:>9.1%}  {notes}",
            flush=True,
        )


if __name__ == "__main__":
    main()
