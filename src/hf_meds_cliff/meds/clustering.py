"""The clustering kernels of MEDS' error memory: the k-NN vote, the spanning trees and HDBSCAN's labels.

Pure functions over numpy arrays (the numba ones compiled on first use and cached in ``NUMBA_CACHE_DIR``, ``nogil``
so callers may thread); :class:`~hf_meds_cliff.meds.memory.ErrorMemory` owns the per-key state, the per-step
algorithm that calls them and the checkpoint files. The semantics (ties, noise, mutual reachability) and why the
incremental spanning tree is exact are in :mod:`hf_meds_cliff.meds.memory`'s docstring.

The first process on a machine compiles the numba routines (these and ``fast_hdbscan``'s): about a minute or two on
2 cores, silent in numba itself, so :func:`announce_first_compile` says so once before it starts.
"""

from __future__ import annotations

import logging
import math
import os

import numba
import numpy as np

from .._vllm_compat import make_llvmlite_scan_safe

make_llvmlite_scan_safe()  # numba loads llvmlite, whose library handle crashes vLLM's start-up scan (see there)

logger = logging.getLogger(__name__)

NOISE_LABEL = -1
"""HDBSCAN's label of a row in no cluster."""

_ANNOUNCED = False


def announce_first_compile() -> None:
    """Log a warning, once per process, when the numba routines are not compiled on this machine yet (their cache
    index is missing), so a first run does not sit silent while numba compiles; nothing when the cache is warm."""
    global _ANNOUNCED
    if _ANNOUNCED:
        return
    _ANNOUNCED = True
    kernels = (_knn_vote, _extend_spanning_tree, _core_distances, _dense_spanning_tree)
    try:
        cold = not all(os.path.exists(kernel._cache._cache_file._index_path) for kernel in kernels)
    except Exception:  # noqa: BLE001 - numba's cache layout is internal: when unsure, say it
        cold = True
    if cold:
        logger.warning(
            "MEDS clustering: compiling its numba routines (and fast_hdbscan's) for this machine; the first time "
            "this takes about a minute or two on 2 cores with no other output. They are cached (NUMBA_CACHE_DIR) "
            "for later runs."
        )


# --------------------------------------------------------------------------------------------
# numba kernels (compiled on first use, cached in NUMBA_CACHE_DIR; nogil so callers may thread)
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _knn_vote(queries, stored, labels, k, noise_label):  # pragma: no cover - numba
    """k-NN majority vote of ``queries`` (m, d) over ``stored`` (n, d) with ``labels`` (n,).

    Rows are L2-normalised, so decreasing dot product = increasing cosine distance. Equal
    similarities keep the older (lower-index) row first. Count ties go to ``noise_label`` when it
    is among the tied labels, else to the tied label met first from the nearest neighbour on.
    Returns the voted label per query, (m,) int64.
    """
    num_queries, dim = queries.shape
    num_stored = stored.shape[0]
    k = min(k, num_stored)
    voted = np.empty(num_queries, dtype=np.int64)
    best_similarity = np.empty(k, dtype=np.float64)
    best_index = np.empty(k, dtype=np.int64)
    for q in range(num_queries):
        filled = 0
        for j in range(num_stored):
            similarity = 0.0
            for c in range(dim):
                similarity += queries[q, c] * stored[j, c]
            if filled < k:
                position = filled
                filled += 1
            elif similarity > best_similarity[k - 1]:
                position = k - 1
            else:
                continue
            while position > 0 and similarity > best_similarity[position - 1]:
                best_similarity[position] = best_similarity[position - 1]
                best_index[position] = best_index[position - 1]
                position -= 1
            best_similarity[position] = similarity
            best_index[position] = j
        best_label = 0
        best_count = 0
        for a in range(k):  # nearest first, so among equal counts the nearest label is met first
            label = labels[best_index[a]]
            count = 0
            for b in range(k):
                if labels[best_index[b]] == label:
                    count += 1
            if count > best_count or (
                count == best_count and label == noise_label and best_label != noise_label
            ):
                best_count = count
                best_label = label
        voted[q] = best_label
    return voted


@numba.njit(cache=True, nogil=True)
def _find_root(parents, node):  # pragma: no cover - numba
    while parents[node] != node:
        parents[node] = parents[parents[node]]
        node = parents[node]
    return node


@numba.njit(cache=True, nogil=True)
def _extend_spanning_tree(points, old_tree, num_old):  # pragma: no cover - numba
    """Euclidean MST of ``points`` (n, d) given the MST ``old_tree`` (num_old - 1, 3) of its first
    ``num_old`` rows: Kruskal over the old tree's edges plus the edges touching a new row.

    New edges longer than ``bound`` are skipped: the old tree plus each new row's shortest edge to
    an old row is a spanning tree whose longest edge is ``bound``, and an MST edge is never longer
    than the longest edge of any spanning tree (MST edges are minimax paths). Returns (n - 1, 3)
    float64 rows ``(i, j, distance)``; equal weights keep candidate order (old edges first, then
    new rows in order), so the result is deterministic.
    """
    num_points, dim = points.shape
    num_added = num_points - num_old
    num_old_edges = old_tree.shape[0]
    distances = np.empty((num_added, num_points), dtype=np.float64)
    bound = 0.0
    for e in range(num_old_edges):
        bound = max(bound, old_tree[e, 2])
    for a in range(num_added):
        j = num_old + a
        nearest_old = np.inf
        for i in range(j):
            squared = 0.0
            for c in range(dim):
                diff = points[i, c] - points[j, c]
                squared += diff * diff
            distances[a, i] = math.sqrt(squared)
            if i < num_old and distances[a, i] < nearest_old:
                nearest_old = distances[a, i]
        bound = max(bound, nearest_old)  # inf when there is no old row: nothing is skipped
    num_candidates = num_old_edges
    for a in range(num_added):
        for i in range(num_old + a):
            if distances[a, i] <= bound:
                num_candidates += 1
    sources = np.empty(num_candidates, dtype=np.int64)
    targets = np.empty(num_candidates, dtype=np.int64)
    weights = np.empty(num_candidates, dtype=np.float64)
    for e in range(num_old_edges):
        sources[e] = np.int64(old_tree[e, 0])
        targets[e] = np.int64(old_tree[e, 1])
        weights[e] = old_tree[e, 2]
    e = num_old_edges
    for a in range(num_added):
        for i in range(num_old + a):
            if distances[a, i] <= bound:
                sources[e] = i
                targets[e] = num_old + a
                weights[e] = distances[a, i]
                e += 1
    order = np.argsort(weights, kind="mergesort")
    parents = np.arange(num_points)
    tree = np.empty((max(num_points - 1, 0), 3), dtype=np.float64)
    added = 0
    for position in range(num_candidates):
        if added == num_points - 1:
            break
        e = order[position]
        root_a = _find_root(parents, sources[e])
        root_b = _find_root(parents, targets[e])
        if root_a == root_b:
            continue
        parents[root_a] = root_b
        tree[added, 0] = sources[e]
        tree[added, 1] = targets[e]
        tree[added, 2] = weights[e]
        added += 1
    return tree


@numba.njit(cache=True, nogil=True)
def _core_distances(points, min_samples):  # pragma: no cover - numba
    """Distance of each row of ``points`` (n, d) to its ``min_samples``-th nearest other row
    (clipped to ``n - 1``, at least 1), as ``hdbscan``/``fast_hdbscan`` define it. Returns (n,)."""
    num_points, dim = points.shape
    k = max(1, min(min_samples, num_points - 1))
    core = np.zeros(num_points, dtype=np.float64)
    if num_points < 2:
        return core
    distances = np.empty(num_points - 1, dtype=np.float64)
    for i in range(num_points):
        position = 0
        for j in range(num_points):
            if j == i:
                continue
            squared = 0.0
            for c in range(dim):
                diff = points[i, c] - points[j, c]
                squared += diff * diff
            distances[position] = math.sqrt(squared)
            position += 1
        core[i] = np.sort(distances)[k - 1]
    return core


@numba.njit(cache=True, nogil=True)
def _dense_spanning_tree(points, core):  # pragma: no cover - numba
    """Exact Prim MST of ``points`` (n, d) under mutual reachability
    ``max(core[i], core[j], ||x_i - x_j||)``; ``core`` (n,). Ties pick the lowest index.
    Returns (n - 1, 3) float64 rows ``(i, j, weight)``."""
    num_points, dim = points.shape
    tree = np.empty((max(num_points - 1, 0), 3), dtype=np.float64)
    if num_points < 2:
        return tree
    in_tree = np.zeros(num_points, dtype=np.bool_)
    best_weight = np.full(num_points, np.inf)
    best_source = np.zeros(num_points, dtype=np.int64)
    current = 0
    in_tree[0] = True
    for edge in range(num_points - 1):
        next_node = -1
        next_weight = np.inf
        for v in range(num_points):
            if in_tree[v]:
                continue
            squared = 0.0
            for c in range(dim):
                diff = points[current, c] - points[v, c]
                squared += diff * diff
            weight = max(math.sqrt(squared), core[current], core[v])
            if weight < best_weight[v]:
                best_weight[v] = weight
                best_source[v] = current
            if best_weight[v] < next_weight:
                next_weight = best_weight[v]
                next_node = v
        tree[edge, 0] = best_source[next_node]
        tree[edge, 1] = next_node
        tree[edge, 2] = next_weight
        in_tree[next_node] = True
        current = next_node
    return tree


def labels_from_spanning_tree(spanning_tree: np.ndarray, min_cluster_size: int) -> np.ndarray:
    """HDBSCAN labels (n,) int64 of the points of a spanning tree (n - 1, 3) of ``(i, j, weight)``.

    Condensed tree and excess-of-mass selection (no single cluster) are ``fast_hdbscan``'s
    (imported here, lazily: its numba import takes seconds). Fewer than 2 points ⇒ all noise.
    """
    num_points = spanning_tree.shape[0] + 1
    if num_points < 2:
        return np.full(num_points, NOISE_LABEL, dtype=np.int64)
    from fast_hdbscan.hdbscan import clusters_from_spanning_tree

    labels = clusters_from_spanning_tree(
        spanning_tree, min_cluster_size=min_cluster_size, allow_single_cluster=False
    )[0]
    return np.asarray(labels, dtype=np.int64)


def hdbscan_labels(features: np.ndarray, min_cluster_size: int = 2, min_samples: int = 1) -> np.ndarray:
    """HDBSCAN labels (n,) of ``features`` (n, d) with the memory's semantics, from scratch.

    Rows are L2-normalised first; euclidean metric; fewer than 2 rows ⇒ all noise.
    """
    points = _normalise_rows(np.asarray(features, dtype=np.float64))
    if points.shape[0] < 2:
        return np.full(points.shape[0], NOISE_LABEL, dtype=np.int64)
    core = _core_distances(points, min_samples) if min_samples > 1 else np.zeros(points.shape[0])
    return labels_from_spanning_tree(_dense_spanning_tree(points, core), min_cluster_size)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _normalise_rows(features: np.ndarray) -> np.ndarray:
    """L2-normalised copy of (n, d) float64 rows; all-zero rows stay zero."""
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return np.ascontiguousarray(features / np.where(norms > 0.0, norms, 1.0))
