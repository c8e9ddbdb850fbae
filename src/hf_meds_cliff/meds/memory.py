"""Per-prompt error memory of MEDS: k-NN assignment to the previous fit, then an HDBSCAN refit.

This module owns the memory's state, its per-step algorithm and its checkpoint files; the clustering kernels it
calls (k-NN vote, spanning trees, HDBSCAN labels) are :mod:`hf_meds_cliff.meds.clustering`'s.

One :class:`ErrorMemory` holds, for every key (the trainer uses ``(prompt key, is_correct)``), the
L2-normalised features of all completions seen so far, their HDBSCAN labels from the last fit and
that fit's minimum spanning tree. :meth:`ErrorMemory.assign_and_update` is the whole per-step
algorithm of the spec (``shared/spec/meds.md``, step 3):

1. every new row is assigned a cluster by a k-nearest-neighbour vote over the stored rows of its
   key and their labels *from the previous fit* (cosine similarity, which on L2-normalised rows
   orders neighbours exactly like the euclidean distance); its cluster size is the number of
   stored rows carrying the voted label. Rows sharing a key in one call are all assigned against
   the memory as it was before the call; empty memory ⇒ size 0;
2. the rows are appended and HDBSCAN is refitted on every touched key (``min_cluster_size``,
   ``min_samples``, euclidean, excess-of-mass selection, no single cluster; fewer than 2 rows ⇒
   all noise).

Semantics follow the reference implementation (``recipe/MEDS/layer_logits_utils.py``):

* k-NN: ``k = min(knn_k, stored rows)``; neighbours ranked by decreasing cosine similarity, equal
  similarities broken by insertion order (older row first); the vote takes the most frequent
  label. Count ties: the reference takes the *smallest* label (``np.unique`` + ``argmax``), so the
  noise label ``-1`` wins any tie it is part of — kept here. Among tied *clusters* the reference's
  pick depends on how ``hdbscan`` happens to number clusters (an artefact of its MST edge
  orientation, not of the data; ``fast_hdbscan`` numbers them differently), so this memory takes
  the tied label of the nearest neighbour instead: deterministic and independent of numbering.
  Everything else about the vote equals the reference's.
* ``noise_policy="cluster"`` (reference): noise is a label like any other, a row voted into noise
  gets the number of stored noise rows. ``"ignore"`` (paper wording): noise ⇒ size 0.
* Mutual reachability uses the ``min_samples``-th nearest *other* row as core distance (what both
  ``hdbscan`` and ``fast_hdbscan`` compute); for ``min_samples=1`` it equals the euclidean
  distance, because a point's nearest-neighbour distance never exceeds its distance to any other
  point. With ``min_samples > 1`` many mutual-reachability weights are equal (they are core
  distances), HDBSCAN's result then depends on how ties are ordered, and ``hdbscan`` and
  ``fast_hdbscan`` themselves disagree on about one random set in ten; this memory orders ties
  deterministically (see :func:`~hf_meds_cliff.meds.clustering._dense_spanning_tree`) and is exact only for ``min_samples=1``.

How the fit is made fast and still exact. With ``min_samples=1`` (paper and default) the
single-linkage hierarchy is the euclidean minimum spanning tree, and the MST of the old rows plus
the new ones is the MST of (old MST edges ∪ the edges touching a new row) by the cycle property;
new edges longer than the longest edge of a known spanning tree cannot enter it and are dropped
before sorting (see :func:`~hf_meds_cliff.meds.clustering._extend_spanning_tree`). So a step costs ``O(m · n · d)`` distance
evaluations per key (``m`` new rows, ``n`` stored) instead of a full HDBSCAN, and the tree is then
condensed and its clusters selected by ``fast_hdbscan``'s own numba routines
(``clusters_from_spanning_tree``): the same partition as ``fast_hdbscan``/``hdbscan`` whenever
pairwise distances are distinct (ties may change which of several equal-weight edges is kept,
never the merge heights; cluster *numbers* are arbitrary in all three and differ between them).
Other ``min_samples`` values, a key just after eviction, and a step that brings at least as many
rows as are stored (e.g. a key's first step) use an exact dense Prim MST over the mutual
reachability distances (``O(n² · d)``). Distances are computed from coordinate differences in
float64, never through ``2 - 2·cos``, so near-duplicate rows keep their order. Keys are fitted
one after another: on 2 shared cores neither a thread pool (the ``fast_hdbscan`` routines hold
the GIL) nor one numba-parallel call over all keys was faster (``benchmarks/bench_clustering.py``
gives the step time).

Eviction (``max_rows_per_key``, default ``None`` = unbounded as in the paper) drops the oldest
rows of a key *after* appending and *before* the refit, so the stored labels always describe
exactly the stored rows and the next step's cluster sizes count only rows still in memory.

Storage, per key (measured in ``benchmarks/bench_meds_memory_scale.py``): the features as they were passed, in
one contiguous float32 array, while every value passed for the key is exactly a float32 (the trainer gathers its
features as float32), and L2-normalised rows are computed from them when the key is touched (normalisation is
row-wise, so these are the bits the whole batch's normalisation gives); a key that receives a value float32 cannot
hold switches to L2-normalised float64 rows, losslessly. Labels are int32, row ids int64, the training step of each
row int32, the spanning tree int32 edge pairs and float64 weights. Snippets (:class:`RowSnippet`) are bounded per
key: when a key holds more than :data:`SNIPPETS_PER_KEY_LIMIT` after a refit, it keeps only those of the
:data:`SNIPPETS_PER_CLUSTER` rows nearest each cluster's centre (the newest for noise) of its
:data:`SNIPPET_CLUSTERS_PER_KEY` largest clusters, the snippets a report shows (:func:`representative_rows`); the
others are dropped, their rows stay. So clustering results are bit for bit those of the earlier all-float64 memory,
and a stored row costs 88 bytes plus its key's share of at most 78 snippets.

Checkpoints (format 3): :meth:`ErrorMemory.save` writes one *shard* (a set of keys) as
``meds_memory.shard-00000-of-00001.npz`` (its arrays, concatenated with offsets) and
``meds_memory.shard-00000-of-00001.json`` (its keys in a typed JSON encoding, their first-appearance order, notes
such as the problem text, kept snippets, the npz's SHA-256 and the shard's fingerprint), then
``meds_memory.json`` last: configuration, counters, the list of shard files with the SHA-256 of each shard's JSON
(``requires``, which :func:`~hf_meds_cliff.checkpointing.missing_checkpoint_files` checks) and the memory's
fingerprint. :class:`~hf_meds_cliff.meds.memory_shard.ShardedErrorMemory` writes one shard per process in the
same layout. Every file is written atomically. :meth:`ErrorMemory.load` reads any number of shards (and formats 1
and 2, a single ``meds_memory.npz`` with ``meds_snippets.jsonl``) into one memory whose
:meth:`~ErrorMemory.fingerprint` and future assignments equal the original's, and rejects mismatched, truncated or
edited files with an error naming the file. Snippets and notes never influence assignments and are not part of
the fingerprint.

>>> import numpy as np
>>> memory = ErrorMemory()
>>> step_1 = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0], [0.14, 0.99], [0.5, 0.5], [-1.0, 0.05]])
>>> memory.assign_and_update(["q"] * 6, step_1).tolist()  # empty memory
[0, 0, 0, 0, 0, 0]
>>> memory.stored_labels("q").tolist()
[0, 0, 1, 1, 0, -1]
>>> memory.assign_and_update(["q", "q", "new"], np.array([[1.0, 0.05], [0.05, 1.0], [1.0, 0.0]])).tolist()
[3, 2, 0]
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import zipfile
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpointing import file_sha256, read_json_file, remove_stale_temporaries, write_atomically
from .clustering import (  # noqa: F401 - hdbscan_labels and the kernels are imported from here too
    NOISE_LABEL,
    _core_distances,
    _dense_spanning_tree,
    _extend_spanning_tree,
    _knn_vote,
    _normalise_rows,
    announce_first_compile,
    hdbscan_labels,
    labels_from_spanning_tree,
)

logger = logging.getLogger(__name__)

NOISE_POLICIES = ("cluster", "ignore")
MEMORY_JSON_NAME = "meds_memory.json"
"""The memory's manifest (written last by a save): configuration, counters, shard files and integrity record."""
MEMORY_NPZ_NAME = "meds_memory.npz"
"""The single array file of formats 1 and 2 (read, no longer written)."""
MEMORY_SNIPPETS_NAME = "meds_snippets.jsonl"
"""The snippet file of formats 1 and 2 (read, no longer written)."""
SNIPPETS_PER_CLUSTER = 3
"""Snippets kept per cluster of a key: the rows nearest the cluster's centre (for noise: the newest rows)."""
SNIPPET_CLUSTERS_PER_KEY = 12
"""Clusters of a key (the largest, noise apart) whose snippets are kept; noise keeps its own."""
SNIPPETS_PER_KEY_LIMIT = 2 * SNIPPETS_PER_CLUSTER * (SNIPPET_CLUSTERS_PER_KEY + 1)
"""Most snippets a key holds after a refit: above it, only its representatives are kept (at most half of it)."""
_FORMAT_VERSION = 3
_READABLE_FORMAT_VERSIONS = (1, 2, 3)  # 1: before the integrity record; 2: one npz for all keys; 3: shards
_LEGACY_NPZ_ARRAYS = ("features", "labels", "row_ids", "row_offsets", "spanning_trees", "tree_offsets", "has_tree")
_SHARD_ARRAYS = (
    "features_float32", "features_unit64", "is_float32", "labels", "row_ids", "steps", "row_offsets",
    "tree_edges", "tree_weights", "tree_offsets", "has_tree", "orders",
)  # fmt: skip


def shard_file_name(index: int, count: int, suffix: str) -> str:
    """Name of shard ``index`` of ``count`` in a memory folder, ``suffix`` ``"npz"`` (arrays) or ``"json"``.

    >>> shard_file_name(1, 8, "npz")
    'meds_memory.shard-00001-of-00008.npz'
    """
    return f"meds_memory.shard-{index:05d}-of-{count:05d}.{suffix}"


# --------------------------------------------------------------------------------------------
# keys
# --------------------------------------------------------------------------------------------


def _canonical_key(key: Any) -> Hashable:
    """Key with numpy scalars turned into Python ones; raises TypeError for unsupported types."""
    if isinstance(key, (bool, np.bool_)):
        return bool(key)
    if isinstance(key, (int, np.integer)):
        return int(key)
    if isinstance(key, str):
        return str(key)
    if isinstance(key, tuple):
        return tuple(_canonical_key(part) for part in key)
    raise TypeError(
        f"ErrorMemory keys must be str, int, bool or tuples of them (so checkpoints can store them "
        f"as JSON), got {key!r} of type {type(key).__name__}; convert it, e.g. to "
        f"(prompt_key, bool(is_correct))."
    )


def _encode_key(key: Hashable) -> list:
    if isinstance(key, bool):
        return ["b", key]
    if isinstance(key, int):
        return ["i", key]
    if isinstance(key, str):
        return ["s", key]
    return ["t", [_encode_key(part) for part in key]]  # canonical keys are only these four types


def _decode_key(encoded: Any) -> Hashable:
    if not (isinstance(encoded, list) and len(encoded) == 2):
        raise ValueError(f"Malformed key {encoded!r} in {MEMORY_JSON_NAME}; the file is corrupt.")
    kind, value = encoded
    if kind == "b" and isinstance(value, bool):
        return value
    if kind == "i" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "s" and isinstance(value, str):
        return value
    if kind == "t" and isinstance(value, list):
        return tuple(_decode_key(part) for part in value)
    raise ValueError(f"Malformed key {encoded!r} in {MEMORY_JSON_NAME}; the file is corrupt.")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _as_feature_matrix(features: Any) -> np.ndarray:
    if hasattr(features, "detach"):  # torch tensor, without importing torch
        features = features.detach().double().cpu().numpy()
    try:
        matrix = np.asarray(features, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"features must be a numeric (n, d) array, got {type(features).__name__}; pass a numpy "
            f"array or a tensor of floats."
        ) from error
    if matrix.ndim != 2:
        raise ValueError(
            f"features must have shape (n, d), got shape {matrix.shape}; stack one feature vector "
            f"per row (use features.reshape(1, -1) for a single row)."
        )
    if not np.all(np.isfinite(matrix)):
        bad_rows = np.flatnonzero(~np.all(np.isfinite(matrix), axis=1)).tolist()
        raise ValueError(
            f"features contain NaN or inf in rows {bad_rows[:10]}; drop rows without a valid "
            f"feature before calling assign_and_update (they carry cluster size 0)."
        )
    return matrix


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__}).")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}; set it to {minimum} or more.")
    return int(value)


@dataclass(frozen=True)
class RowSnippet:
    """What a stored row's completion said, for people looking at a cluster (not used by the algorithm).

    Attributes:
        text: a bounded piece of the completion, its answer region (see :func:`answer_region`).
        step: the training step whose generation produced the completion (as in the logs, 1-based).
        sample: the completion's index in that step's gathered batch (group = ``sample // num_generations``).
    """

    text: str
    step: int
    sample: int


def answer_region(text: str, max_chars: int) -> str:
    r"""At most ``max_chars`` characters of ``text`` ending where its last ``\boxed{...}`` closes.

    The answer and the reasoning just before it are what an error cluster has in common. Without a box the
    end of the text is kept. A cut is marked with a leading ``…`` (counted in ``max_chars``).

    >>> answer_region("7 + 5 = 12. 12 * 3 = 36. The answer is \\boxed{36}. Done.", 30)
    '… 36. The answer is \\boxed{36}'
    >>> answer_region("2 + 2 = 4.", 30)
    '2 + 2 = 4.'
    """
    from ..rewards.extraction import _COMMAND_PATTERN, _matching_brace

    if max_chars < 1:
        raise ValueError(f"max_chars={max_chars} must be >= 1.")
    end = len(text)
    commands = list(_COMMAND_PATTERN.finditer(text))
    if commands:
        brace = text.find("{", commands[-1].end())
        close = _matching_brace(text, brace) if brace == commands[-1].end() else None
        if close is not None:
            end = close + 1
    if end <= max_chars:
        return text[:end]
    return "…" + text[end - max_chars + 1 : end]


def _is_float32_exact(matrix: np.ndarray) -> bool:
    """Whether every value of a float64 ``matrix`` is exactly a float32 (so float32 storage loses nothing)."""
    with np.errstate(over="ignore"):
        return bool(np.array_equal(matrix.astype(np.float32).astype(np.float64), matrix))


def representative_rows(
    points: np.ndarray,
    labels: np.ndarray,
    candidates: np.ndarray,
    per_cluster: int = SNIPPETS_PER_CLUSTER,
    max_clusters: int = SNIPPET_CLUSTERS_PER_KEY,
) -> np.ndarray:
    """Rows (sorted indices) whose snippets a key keeps: the ones a person is shown for its clusters.

    Args:
        points: (n, d) L2-normalised rows of one key.
        labels: (n,) their HDBSCAN labels (-1 = noise).
        candidates: (n,) bool, rows that still have a snippet.
        per_cluster: snippets kept per cluster.
        max_clusters: clusters (the largest; equal sizes: lower label first) whose snippets are kept; noise,
            shown after the clusters, keeps its own ``per_cluster``.

    Per cluster, rows are ranked by decreasing dot product with the mean of all its rows (ties: older row first),
    noise by recency (newest first), and the first ``per_cluster`` candidates are kept. ``hf-meds-cliff report``
    shows up to ``per_cluster`` snippets per cluster, nearest the centre first, so it shows these.

    >>> points = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0], [-1.0, 0.0]])
    >>> representative_rows(points, np.array([0, 0, 0, -1, -1]), np.ones(5, bool), per_cluster=2).tolist()
    [1, 2, 3, 4]
    >>> representative_rows(points, np.array([0, 0, 0, -1, -1]), np.ones(5, bool), 1, max_clusters=0).tolist()
    [4]
    """
    labels = np.asarray(labels)
    candidates = np.asarray(candidates, dtype=bool)
    if labels.shape != candidates.shape or points.shape[0] != labels.shape[0]:
        raise ValueError(
            f"points {points.shape}, labels {labels.shape} and candidates {candidates.shape} must describe the "
            "same rows."
        )
    clustered = np.flatnonzero(labels != NOISE_LABEL)
    kept = [np.zeros(0, dtype=np.int64)]
    if clustered.size:
        unique, inverse, counts = np.unique(labels[clustered], return_inverse=True, return_counts=True)
        chosen = np.zeros(unique.shape[0], dtype=bool)
        chosen[np.lexsort((unique, -counts))[:max_clusters]] = True  # largest first, lower label on ties
        centres = np.zeros((unique.shape[0], points.shape[1]))
        np.add.at(centres, inverse, points[clustered])
        centres /= counts[:, None]
        scores = np.einsum("ij,ij->i", points[clustered], centres[inverse])
        mask = candidates[clustered] & chosen[inverse]
        rows, groups, scores = clustered[mask], inverse[mask], scores[mask]
        order = np.lexsort((rows, -scores, groups))  # by cluster, nearest the centre first, older row first
        rows, groups = rows[order], groups[order]
        rank = np.arange(rows.shape[0]) - np.searchsorted(groups, groups, side="left")
        kept.append(rows[rank < per_cluster])
    noise = np.flatnonzero((labels == NOISE_LABEL) & candidates)[::-1]
    kept.append(noise[:per_cluster])
    return np.sort(np.concatenate(kept)).astype(np.int64)


class _KeyMemory:
    """Stored rows of one key (see the module docstring for the storage): ``features`` (n, d) float32 as passed or
    float64 L2-normalised, ``row_ids`` (n,) int64, ``labels`` (n,) int32 of the last fit, ``steps`` (n,) int32
    (-1: unknown), the last fit's spanning tree as ``tree_edges`` (n - 1, 2) int32 and ``tree_weights`` (n - 1,)
    float64 (both None when it must be rebuilt densely), the kept ``snippets`` by row id, and ``order``, the key's
    rank in the memory's order of first appearance."""

    __slots__ = ("features", "labels", "order", "row_ids", "snippets", "steps", "tree_edges", "tree_weights")

    def __init__(self, dim: int, order: int):
        self.features = np.zeros((0, dim), dtype=np.float32)
        self.row_ids = np.zeros(0, dtype=np.int64)
        self.labels = np.zeros(0, dtype=np.int32)
        self.steps = np.zeros(0, dtype=np.int32)
        self.tree_edges: np.ndarray | None = np.zeros((0, 2), dtype=np.int32)
        self.tree_weights: np.ndarray | None = np.zeros(0, dtype=np.float64)
        self.snippets: dict[int, RowSnippet] = {}
        self.order = order

    @property
    def num_rows(self) -> int:
        return self.features.shape[0]

    def points(self) -> np.ndarray:
        """L2-normalised float64 rows (n, d): computed from float32 storage, the stored array otherwise."""
        if self.features.dtype == np.float32:
            return _normalise_rows(self.features.astype(np.float64))
        return self.features

    def spanning_tree(self) -> np.ndarray | None:
        """The last fit's tree as the kernels take it, (n - 1, 3) float64 ``(i, j, weight)``, or None."""
        if self.tree_edges is None:
            return None
        return np.column_stack((self.tree_edges.astype(np.float64), self.tree_weights))

    def set_spanning_tree(self, tree: np.ndarray | None) -> None:
        if tree is None:
            self.tree_edges = self.tree_weights = None
        else:
            self.tree_edges = tree[:, :2].astype(np.int32)
            self.tree_weights = np.ascontiguousarray(tree[:, 2], dtype=np.float64)

    def digest(self, key: Hashable) -> bytes:
        """SHA-256 of what decides future assignments: the key, its normalised rows, row ids, labels and tree."""
        digest = hashlib.sha256(json.dumps(_encode_key(key)).encode())
        digest.update(np.ascontiguousarray(self.points(), dtype=np.float64).tobytes())
        digest.update(self.row_ids.astype(np.int64).tobytes())
        digest.update(self.labels.astype(np.int64).tobytes())
        tree = self.spanning_tree()
        digest.update(b"no-tree" if tree is None else tree.tobytes())
        return digest.digest()

    def nbytes(self) -> int:
        """Bytes of the arrays (snippet texts not included)."""
        arrays = (self.features, self.row_ids, self.labels, self.steps, self.tree_edges, self.tree_weights)
        return sum(array.nbytes for array in arrays if array is not None)


@dataclass(frozen=True)
class _StepCounts:
    """Raw counts of one :meth:`ErrorMemory._step` (summed over shards by the sharded memory)."""

    new_keys: int = 0
    assigned_rows: int = 0
    assigned_noise: int = 0
    evicted_rows: int = 0
    clusters: int = 0
    stored: int = 0
    stored_noise: int = 0
    assign_seconds: float = 0.0
    fit_seconds: float = 0.0

    @staticmethod
    def combine(parts: Sequence[_StepCounts]) -> _StepCounts:
        """Counts summed, times the slowest part's (shards run in parallel)."""
        summed = {
            name: sum(getattr(part, name) for part in parts)
            for name in ("new_keys", "assigned_rows", "assigned_noise", "evicted_rows", "clusters", "stored",
                         "stored_noise")
        }  # fmt: skip
        return _StepCounts(
            **summed,
            assign_seconds=max((part.assign_seconds for part in parts), default=0.0),
            fit_seconds=max((part.fit_seconds for part in parts), default=0.0),
        )


def _step_stats(
    num_rows: int, num_keys: int, cluster_sizes: np.ndarray, counts: _StepCounts, memory_rows: int, memory_keys: int
) -> dict[str, float]:
    """The statistics of :meth:`ErrorMemory.last_step_stats` from a step's counts."""
    return {
        "rows": float(num_rows),
        "keys": float(num_keys),
        "new_keys": float(counts.new_keys),
        "assigned_rows": float(counts.assigned_rows),
        "mean_cluster_size": float(cluster_sizes.mean()) if num_rows else 0.0,
        "max_cluster_size": float(cluster_sizes.max()) if num_rows else 0.0,
        "assigned_noise_fraction": counts.assigned_noise / num_rows if num_rows else 0.0,
        "clusters_per_key": counts.clusters / num_keys if num_keys else 0.0,
        "noise_fraction": counts.stored_noise / counts.stored if counts.stored else 0.0,
        "memory_rows": float(memory_rows),
        "memory_keys": float(memory_keys),
        "evicted_rows": float(counts.evicted_rows),
        "assign_seconds": counts.assign_seconds,
        "fit_seconds": counts.fit_seconds,
    }


def _validated_call(
    keys: Iterable[Hashable], features: Any, snippets: Sequence[RowSnippet | None] | None, dim: int | None
) -> tuple[np.ndarray, dict[Hashable, np.ndarray], list[RowSnippet | None]]:
    """Checked ``(matrix (n, d) float64, rows of each canonical key in order of first appearance, snippets)``."""
    matrix = _as_feature_matrix(features)
    keys = list(keys)
    if len(keys) != matrix.shape[0]:
        raise ValueError(
            f"keys has {len(keys)} entries but features has {matrix.shape[0]} rows; pass one key "
            f"per feature row."
        )
    if dim is not None and matrix.shape[0] > 0 and matrix.shape[1] != dim:
        raise ValueError(
            f"features have width {matrix.shape[1]} but this memory stores width {dim}; keep "
            f"the feature options (layers, differences) fixed for a run or start a new ErrorMemory."
        )
    num_rows = matrix.shape[0]
    if snippets is None:
        snippets = [None] * num_rows
    else:
        snippets = list(snippets)
        if len(snippets) != num_rows:
            raise ValueError(
                f"snippets has {len(snippets)} entries but features has {num_rows} rows; pass one snippet "
                f"(or None) per row, or no snippets."
            )
        for snippet in snippets:
            if snippet is not None and not isinstance(snippet, RowSnippet):
                raise TypeError(
                    f"snippets must be RowSnippet or None, got {type(snippet).__name__}; build them with "
                    f"RowSnippet(text=..., step=..., sample=...)."
                )
    if num_rows and matrix.shape[1] == 0:
        raise ValueError("features have width 0; each row needs at least one value.")
    groups: dict[Hashable, list[int]] = {}
    try:
        for row, key in enumerate(keys):
            groups.setdefault(key, []).append(row)
    except TypeError as error:
        raise TypeError(f"ErrorMemory keys must be hashable: {error}") from error
    rows_by_key: dict[Hashable, np.ndarray] = {}
    for key, rows in groups.items():
        canonical = _canonical_key(key)
        indices = np.asarray(rows, dtype=np.int64)
        if canonical in rows_by_key:  # e.g. np.str_ and str spellings of one key
            indices = np.sort(np.concatenate([rows_by_key[canonical], indices]))
        rows_by_key[canonical] = indices
    return matrix, rows_by_key, snippets


def _first_row_ids(rows_by_key: dict[Hashable, np.ndarray], next_row_id: int) -> dict[Hashable, int]:
    """Row id of each key's first new row: ids are handed out key after key, in order of first appearance.

    >>> _first_row_ids({"a": np.array([0, 2]), "b": np.array([1])}, 10)
    {'a': 10, 'b': 12}
    """
    first: dict[Hashable, int] = {}
    for key, rows in rows_by_key.items():
        first[key] = next_row_id
        next_row_id += rows.shape[0]
    return first


class ErrorMemory:
    """Per-key memory of past features with HDBSCAN clusters (MEDS step 3; see module docstring).

    Args:
        min_cluster_size: HDBSCAN ``min_cluster_size`` (paper: 2; must be >= 2).
        min_samples: HDBSCAN ``min_samples`` (paper: 1). 1 enables the incremental spanning tree.
        knn_k: neighbours in the assignment vote (reference: 3).
        noise_policy: ``"cluster"`` (reference: a row voted into noise gets the number of stored
            noise rows) or ``"ignore"`` (noise ⇒ size 0).
        max_rows_per_key: keep at most this many rows per key, dropping the oldest before each
            refit; ``None`` (default, as in the paper) keeps everything.

    The memory is deterministic: the same sequence of calls gives the same state on every process,
    which :meth:`fingerprint` lets trainers check across ranks.
    """

    def __init__(
        self,
        min_cluster_size: int = 2,
        min_samples: int = 1,
        knn_k: int = 3,
        noise_policy: str = "cluster",
        max_rows_per_key: int | None = None,
    ):
        self.min_cluster_size = _check_int("min_cluster_size", min_cluster_size, 2)
        self.min_samples = _check_int("min_samples", min_samples, 1)
        self.knn_k = _check_int("knn_k", knn_k, 1)
        if noise_policy not in NOISE_POLICIES:
            raise ValueError(
                f"noise_policy must be one of {NOISE_POLICIES}, got {noise_policy!r}; use 'cluster' "
                f"(reference: noise counts as a cluster) or 'ignore' (noise gets size 0)."
            )
        self.noise_policy = noise_policy
        self.max_rows_per_key = (
            None if max_rows_per_key is None else _check_int("max_rows_per_key", max_rows_per_key, 1)
        )
        self._entries: dict[Hashable, _KeyMemory] = {}
        self._notes: dict[Hashable, str] = {}
        self._dim: int | None = None
        self._next_row_id = 0
        self._next_order = 0
        self._num_updates = 0
        self._last_stats: dict[str, float] = {}

    # ---------------------------------------------------------------- inspection

    def config(self) -> dict[str, Any]:
        """Constructor arguments, JSON-able."""
        return {
            "min_cluster_size": self.min_cluster_size,
            "min_samples": self.min_samples,
            "knn_k": self.knn_k,
            "noise_policy": self.noise_policy,
            "max_rows_per_key": self.max_rows_per_key,
        }

    def __repr__(self) -> str:
        arguments = ", ".join(f"{name}={value!r}" for name, value in self.config().items())
        return f"{type(self).__name__}({arguments}) with {self.num_rows} rows in {self.num_keys} keys"

    def __len__(self) -> int:
        return self.num_keys

    def __contains__(self, key: Any) -> bool:
        try:
            return _canonical_key(key) in self._entries
        except TypeError:
            return False

    @property
    def num_keys(self) -> int:
        return len(self._entries)

    @property
    def num_rows(self) -> int:
        return sum(entry.num_rows for entry in self._entries.values())

    @property
    def dim(self) -> int | None:
        """Width of the stored feature rows (``None`` until the first update)."""
        return self._dim

    @property
    def num_updates(self) -> int:
        """Number of :meth:`assign_and_update` calls with at least one row."""
        return self._num_updates

    def keys(self) -> list[Hashable]:
        """Keys in order of first appearance."""
        return list(self._entries)

    def stored_features(self, key: Hashable) -> np.ndarray:
        """Stored L2-normalised features (n, d) float64 of ``key`` (a copy), oldest first."""
        return np.array(self._entry(key).points(), dtype=np.float64)

    def stored_labels(self, key: Hashable) -> np.ndarray:
        """Labels (n,) int64 of the last fit of ``key`` (-1 = noise), aligned with :meth:`stored_features`."""
        return self._entry(key).labels.astype(np.int64)

    def stored_steps(self, key: Hashable) -> np.ndarray:
        """Training step (n,) int64 each stored row of ``key`` came from (its snippet's step; -1 where unknown)."""
        return self._entry(key).steps.astype(np.int64)

    def num_stored_rows(self, key: Hashable) -> int:
        """Rows stored for ``key`` (0 for a key never seen)."""
        try:
            entry = self._entries.get(_canonical_key(key))
        except TypeError:
            return 0
        return 0 if entry is None else entry.num_rows

    def label_counts(self, key: Hashable) -> dict[int, int]:
        """``{label: stored rows}`` of ``key``'s last fit (-1 = noise), labels ascending."""
        unique, counts = np.unique(self._entry(key).labels, return_counts=True)
        return {int(label): int(count) for label, count in zip(unique, counts)}

    def note(self, key: Hashable) -> str | None:
        """The text attached to ``key`` with :meth:`set_note` (e.g. the problem of a prompt), or None."""
        return self._notes.get(_canonical_key(key))

    def has_note(self, key: Hashable) -> bool:
        """Whether :meth:`set_note` attached a text to ``key``."""
        return self.note(key) is not None

    def set_note(self, key: Hashable, text: str) -> None:
        """Attach a human-readable ``text`` to a stored ``key`` (saved with the memory, never clustered)."""
        if not isinstance(text, str):
            raise TypeError(f"A note must be a str, got {type(text).__name__}.")
        self._entry(key)  # raises KeyError for an unknown key
        self._notes[_canonical_key(key)] = text

    def stored_snippets(self, key: Hashable) -> list[RowSnippet | None]:
        """Kept snippets of the stored rows of ``key``, aligned with :meth:`stored_labels` (None where no snippet
        was given or it was not kept: see :func:`representative_rows`)."""
        entry = self._entry(key)
        return [entry.snippets.get(int(row_id)) for row_id in entry.row_ids]

    def nbytes(self) -> int:
        """Bytes held by the stored arrays and kept snippet texts (without Python object overheads)."""
        arrays = sum(entry.nbytes() for entry in self._entries.values())
        texts = sum(len(s.text.encode()) for entry in self._entries.values() for s in entry.snippets.values())
        return arrays + texts

    def _entry(self, key: Hashable) -> _KeyMemory:
        canonical = _canonical_key(key)
        if canonical not in self._entries:
            raise KeyError(f"{key!r} is not in the memory; known keys: {self.num_keys}.")
        return self._entries[canonical]

    def last_step_stats(self) -> dict[str, float]:
        """Statistics of the last :meth:`assign_and_update` call, for the trainer's ``meds/`` logs.

        Keys: ``rows`` and ``keys`` (of the call), ``new_keys``, ``assigned_rows`` (rows that met a
        fitted memory), ``mean_cluster_size``/``max_cluster_size`` (returned sizes),
        ``assigned_noise_fraction`` (rows voted into noise / rows), ``clusters_per_key`` (mean number
        of non-noise clusters of the touched keys after the refit), ``noise_fraction`` (stored noise
        rows / stored rows of the touched keys), ``memory_rows``, ``memory_keys``, ``evicted_rows``,
        ``assign_seconds``, ``fit_seconds``. Empty before the first call.
        """
        return dict(self._last_stats)

    # ---------------------------------------------------------------- the step

    def assign_and_update(
        self, keys: Iterable[Hashable], features: Any, snippets: Sequence[RowSnippet | None] | None = None
    ) -> np.ndarray:
        """Cluster sizes of the new rows under the previous fit, then append and refit.

        Args:
            keys: n hashables (str, int, bool or tuples of them), one per row.
            features: (n, d) floats (numpy array or CPU/GPU tensor), L2-normalised here; ``d``
                must stay the same for the life of the memory.
            snippets: optional, n :class:`RowSnippet` (or None) stored beside the rows for inspection
                (:meth:`stored_snippets`, checkpoints; bounded per cluster, see :func:`representative_rows`);
                they do not influence any assignment.

        Returns:
            (n,) int64: per row, the number of stored rows (before this call) carrying the label its
            k nearest stored neighbours of the same key vote for; 0 for a key without stored rows
            (and for noise under ``noise_policy="ignore"``).
        """
        announce_first_compile()  # before the first numba call of a process (a cold cache compiles silently)
        matrix, rows_by_key, snippets = _validated_call(keys, features, snippets, self._dim)
        num_rows = matrix.shape[0]
        if num_rows == 0:
            sizes = np.zeros(0, dtype=np.int64)
            self._last_stats = _step_stats(0, 0, sizes, _StepCounts(), self.num_rows, self.num_keys)
            return sizes
        first_ids = _first_row_ids(rows_by_key, self._next_row_id)
        sizes, counts = self._step(rows_by_key, matrix, snippets, first_ids)
        self._advance(num_rows, matrix.shape[1])
        self._last_stats = _step_stats(num_rows, len(rows_by_key), sizes, counts, self.num_rows, self.num_keys)
        return sizes

    def _advance(self, num_rows: int, dim: int) -> None:
        """Counters after a call of ``num_rows`` rows (all processes of a sharded memory do the same)."""
        self._next_row_id += num_rows
        self._dim = dim
        self._num_updates += 1

    def _step(
        self,
        rows_by_key: dict[Hashable, np.ndarray],
        matrix: np.ndarray,
        snippets: Sequence[RowSnippet | None],
        first_ids: dict[Hashable, int],
        orders: dict[Hashable, int] | None = None,
    ) -> tuple[np.ndarray, _StepCounts]:
        """Assign, append and refit the keys of ``rows_by_key`` (rows of ``matrix``); the memory is changed only
        when every fit succeeded. ``orders`` gives new keys their rank of first appearance (default: next ones).
        Returns the sizes (n,) (0 for rows of other keys) and the step's counts."""
        cluster_sizes = np.zeros(matrix.shape[0], dtype=np.int64)
        start = time.perf_counter()
        assigned_rows = 0
        assigned_noise = 0
        stored_points: dict[Hashable, np.ndarray] = {}
        new_points: dict[Hashable, np.ndarray] = {}
        for key, rows in rows_by_key.items():
            new_points[key] = _normalise_rows(matrix[rows])  # row-wise: the bits of normalising the whole batch
            entry = self._entries.get(key)
            if entry is None or entry.num_rows == 0:
                continue
            stored_points[key] = points = entry.points()
            labels = entry.labels.astype(np.int64)
            voted = _knn_vote(new_points[key], points, labels, self.knn_k, NOISE_LABEL)
            unique_labels, counts = np.unique(labels, return_counts=True)
            sizes = counts[np.searchsorted(unique_labels, voted)]
            is_noise = voted == NOISE_LABEL
            if self.noise_policy == "ignore":
                sizes = np.where(is_noise, 0, sizes)
            cluster_sizes[rows] = sizes
            assigned_rows += rows.shape[0]
            assigned_noise += int(is_noise.sum())
        assign_seconds = time.perf_counter() - start

        start = time.perf_counter()
        # Fit every key into new objects first and commit only when all succeeded: a failing fit
        # (e.g. fast_hdbscan missing) leaves the memory exactly as it was.
        refitted: dict[Hashable, _KeyMemory] = {}
        evicted_rows = 0
        next_order = self._next_order
        for key, rows in rows_by_key.items():
            entry = self._entries.get(key)
            if entry is None:
                order = orders[key] if orders is not None else next_order
                next_order = max(next_order, order + 1)
            else:
                order = entry.order
            refitted[key], evicted = self._refit(
                entry,
                order,
                stored_points.get(key),
                new_points[key],
                matrix[rows],
                first_ids[key],
                [snippets[row] for row in rows],
            )
            evicted_rows += evicted
        new_keys = sum(key not in self._entries for key in refitted)
        self._entries.update(refitted)
        self._next_order = next_order
        fit_seconds = time.perf_counter() - start
        clusters = stored = stored_noise = 0
        for key in rows_by_key:
            labels = self._entries[key].labels
            clusters += int(np.unique(labels[labels != NOISE_LABEL]).shape[0])
            stored += labels.shape[0]
            stored_noise += int((labels == NOISE_LABEL).sum())
        return cluster_sizes, _StepCounts(
            new_keys, assigned_rows, assigned_noise, evicted_rows, clusters, stored, stored_noise,
            assign_seconds, fit_seconds,
        )  # fmt: skip

    def _refit(
        self,
        entry: _KeyMemory | None,
        order: int,
        old_points: np.ndarray | None,
        new_points: np.ndarray,
        new_values: np.ndarray,
        first_row_id: int,
        new_snippets: list[RowSnippet | None],
    ) -> tuple[_KeyMemory, int]:
        """One key's state after appending ``new_points`` (m, d) (normalised from ``new_values``, as passed),
        evicting the oldest rows beyond the cap and refitting; ``entry`` is not modified. Returns (new state, rows
        evicted)."""
        dim = new_points.shape[1]
        old = entry if entry is not None else _KeyMemory(dim, order)
        if old_points is None:
            old_points = old.points()
        num_old, num_new = old.num_rows, new_points.shape[0]
        refitted = _KeyMemory(dim, order)
        if old.features.dtype == np.float32 and _is_float32_exact(new_values):
            refitted.features = np.concatenate([old.features, new_values.astype(np.float32)])
        else:  # a value float32 cannot hold: this key keeps normalised float64 rows from now on (lossless)
            refitted.features = np.concatenate([old_points, new_points])
        points = np.ascontiguousarray(np.concatenate([old_points, new_points]))
        refitted.row_ids = np.concatenate(
            [old.row_ids, np.arange(first_row_id, first_row_id + num_new, dtype=np.int64)]
        )
        new_steps = [-1 if snippet is None else snippet.step for snippet in new_snippets]
        refitted.steps = np.concatenate([old.steps, np.asarray(new_steps, dtype=np.int32)])
        evicted = 0
        if self.max_rows_per_key is not None and refitted.num_rows > self.max_rows_per_key:
            evicted = refitted.num_rows - self.max_rows_per_key
            refitted.features = refitted.features[evicted:]
            points = np.ascontiguousarray(points[evicted:])
            refitted.row_ids = refitted.row_ids[evicted:]
            refitted.steps = refitted.steps[evicted:]
        refitted.features = np.ascontiguousarray(refitted.features)
        if self.min_samples > 1:
            tree = _dense_spanning_tree(points, _core_distances(points, self.min_samples))
        elif evicted or old.tree_edges is None or num_old < num_new:
            # Kruskal over m·n candidate edges beats Prim's n²/2 only while m is a small share of n.
            tree = _dense_spanning_tree(points, np.zeros(points.shape[0]))
        else:
            tree = _extend_spanning_tree(points, old.spanning_tree(), num_old)
        refitted.set_spanning_tree(tree)
        refitted.labels = labels_from_spanning_tree(tree, self.min_cluster_size).astype(np.int32)
        oldest = int(refitted.row_ids[0])
        candidates = {row_id: snippet for row_id, snippet in old.snippets.items() if row_id >= oldest}
        candidates.update(
            (first_row_id + index, snippet) for index, snippet in enumerate(new_snippets) if snippet is not None
        )
        if len(candidates) > SNIPPETS_PER_KEY_LIMIT:  # selecting on every refit would double the step's time
            has_snippet = np.isin(refitted.row_ids, np.fromiter(candidates, dtype=np.int64, count=len(candidates)))
            kept = refitted.row_ids[representative_rows(points, refitted.labels, has_snippet)].tolist()
            candidates = {row_id: candidates[row_id] for row_id in kept}
        refitted.snippets = candidates
        return refitted, evicted

    # ---------------------------------------------------------------- identity

    def _fingerprint_header(self) -> bytes:
        header = {"config": self.config(), "dim": self._dim, "next_row_id": self._next_row_id}
        return json.dumps(header, sort_keys=True).encode()

    def _key_digests(self) -> list[tuple[int, bytes]]:
        """``(order, digest)`` of every key (see :meth:`_KeyMemory.digest`)."""
        return [(entry.order, entry.digest(key)) for key, entry in self._entries.items()]

    def fingerprint(self) -> str:
        """SHA-256 hex digest of the configuration, counters and, key by key in order of first appearance, the
        key, its normalised rows, row ids, labels and spanning tree.

        Two memories with equal fingerprints assign identical cluster sizes to any future input; a memory split
        into shards (:class:`~hf_meds_cliff.meds.memory_shard.ShardedErrorMemory`) has the fingerprint of the
        single memory it equals.
        """
        return _combine_fingerprint(self._fingerprint_header(), self._key_digests())

    def state_equal(self, other: ErrorMemory) -> bool:
        """Whether ``other`` holds exactly the same state (see :meth:`fingerprint`)."""
        if not isinstance(other, ErrorMemory):
            raise TypeError(f"state_equal expects an ErrorMemory, got {type(other).__name__}.")
        return self.fingerprint() == other.fingerprint()

    # ---------------------------------------------------------------- checkpoints

    def _manifest(self, num_shards: int, shard_records: list[dict], fingerprint: str) -> dict[str, Any]:
        return {
            "format_version": _FORMAT_VERSION,
            "config": self.config(),
            "dim": self._dim,
            "next_row_id": self._next_row_id,
            "next_order": self._next_order,
            "num_updates": self._num_updates,
            "num_shards": num_shards,
            "requires": [name for record in shard_records for name in (record["arrays"], record["header"])],
            "shards": shard_records,
            "fingerprint": fingerprint,
        }

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the memory as one shard and its manifest into ``directory`` (created if needed; see the module
        docstring for the files).

        Each file is written to a temporary name, fsynced and renamed (temporary files of an earlier, interrupted
        save are removed first): the shard's npz, then its JSON (with the npz's SHA-256), then ``meds_memory.json``
        (with the SHA-256 of the shard's JSON and the memory's :meth:`fingerprint`), so the manifest exists only
        next to the files it describes and :meth:`load` detects files from different saves or edited files. Files
        of earlier saves that the new manifest does not list (other shard counts, formats 1-2) are removed after
        it is written. Returns the directory.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        digests = self._key_digests()
        record = _write_shard(directory, 0, 1, self, digests)
        _write_manifest(directory, self._manifest(1, [record], _combine_fingerprint(self._fingerprint_header(), digests)))
        logger.debug("Saved MEDS memory (%d rows, %d keys) to %s", self.num_rows, self.num_keys, directory)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> ErrorMemory:
        """Restore a memory written by :meth:`save` (or by a sharded memory, any number of shards, or formats 1-2);
        it behaves exactly like the saved one.

        Raises ``FileNotFoundError`` when a file is missing and ``ValueError`` naming the file and what is
        wrong when a file is malformed, truncated, or does not match the other ones (integrity record).
        """
        directory = Path(directory)
        header = _read_header(directory)
        if header["format_version"] < 3:
            return _load_legacy(cls, directory, header)
        memory = _memory_from_manifest(cls, directory, header)
        for record in header["shards"]:
            for key, entry, note in _read_shard(directory, record, header):
                memory._entries[key] = entry
                if note is not None:
                    memory._notes[key] = note
        memory._entries = dict(sorted(memory._entries.items(), key=lambda item: item[1].order))
        if memory.fingerprint() != header["fingerprint"]:
            raise ValueError(
                f"{directory / MEMORY_JSON_NAME} and its shard files do not restore the memory that was saved "
                f"(fingerprint differs from the integrity record): keys, counters or configuration were edited. "
                f"{_LOAD_FIX}"
            )
        return memory


# --------------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------------

_LOAD_FIX = "Save the memory again, or use an earlier checkpoint."


def _combine_fingerprint(header: bytes, key_digests: Iterable[tuple[int, bytes]]) -> str:
    """The memory fingerprint from its header and its keys' ``(order, digest)`` pairs (any order, any shards)."""
    digest = hashlib.sha256(header)
    for _, key_digest in sorted(key_digests):
        digest.update(key_digest)
    return digest.hexdigest()


def _shard_arrays(entries: list[_KeyMemory], dim: int) -> dict[str, np.ndarray]:
    """The npz arrays of a shard: every key's rows concatenated, with offsets (see :data:`_SHARD_ARRAYS`)."""

    def stacked(arrays, shape, dtype):
        return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(shape, dtype=dtype)

    is_float32 = np.array([entry.features.dtype == np.float32 for entry in entries], dtype=bool)
    trees = [entry for entry in entries if entry.tree_edges is not None]
    return {
        "features_float32": stacked([e.features for e in entries if e.features.dtype == np.float32], (0, dim),
                                    np.float32),
        "features_unit64": stacked([e.features for e in entries if e.features.dtype != np.float32], (0, dim),
                                   np.float64),
        "is_float32": is_float32,
        "labels": stacked([e.labels for e in entries], (0,), np.int32),
        "row_ids": stacked([e.row_ids for e in entries], (0,), np.int64),
        "steps": stacked([e.steps for e in entries], (0,), np.int32),
        "row_offsets": np.cumsum([0] + [e.num_rows for e in entries]).astype(np.int64),
        "tree_edges": stacked([e.tree_edges for e in trees], (0, 2), np.int32),
        "tree_weights": stacked([e.tree_weights for e in trees], (0,), np.float64),
        "tree_offsets": np.cumsum([0] + [0 if e.tree_edges is None else e.tree_edges.shape[0] for e in entries]
                                  ).astype(np.int64),
        "has_tree": np.array([e.tree_edges is not None for e in entries], dtype=bool),
        "orders": np.array([e.order for e in entries], dtype=np.int64),
    }  # fmt: skip


def _write_shard(
    directory: Path, index: int, count: int, memory: ErrorMemory, digests: list[tuple[int, bytes]]
) -> dict[str, Any]:
    """Write ``memory``'s keys as shard ``index`` of ``count`` (npz first, then its JSON); ``digests`` are its
    :meth:`ErrorMemory._key_digests`. Returns its record for the manifest: file names, the JSON's SHA-256, key and row
    counts."""
    arrays_name, header_name = shard_file_name(index, count, "npz"), shard_file_name(index, count, "json")
    remove_stale_temporaries(directory, (arrays_name, header_name))
    keys = list(memory._entries)
    entries = list(memory._entries.values())
    arrays = _shard_arrays(entries, memory._dim or 0)
    arrays_path = write_atomically(directory / arrays_name, lambda handle: np.savez(handle, **arrays))
    header = {
        "format_version": _FORMAT_VERSION,
        "shard": index,
        "num_shards": count,
        "keys": [_encode_key(key) for key in keys],
        "orders": [entry.order for entry in entries],
        "rows": [entry.num_rows for entry in entries],
        "notes": [memory._notes.get(key) for key in keys],
        "snippets": [
            [[row_id, snippet.text, snippet.step, snippet.sample] for row_id, snippet in sorted(e.snippets.items())]
            for e in entries
        ],
        "arrays_sha256": file_sha256(arrays_path),
        "fingerprint": _combine_fingerprint(b"", digests),
    }
    header_path = write_atomically(
        directory / header_name, lambda handle: handle.write(json.dumps(header, ensure_ascii=False).encode())
    )
    return {
        "arrays": arrays_name,
        "header": header_name,
        "header_sha256": file_sha256(header_path),
        "num_keys": len(keys),
        "num_rows": int(arrays["row_offsets"][-1]),
    }


def _write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Write ``meds_memory.json`` (last), then remove memory files of earlier saves that it does not list."""
    remove_stale_temporaries(directory, (MEMORY_JSON_NAME,))
    write_atomically(
        directory / MEMORY_JSON_NAME, lambda handle: handle.write(json.dumps(manifest, indent=1).encode())
    )
    listed = set(manifest["requires"]) | {MEMORY_JSON_NAME}
    for path in directory.iterdir():
        stale_shard = path.name.startswith("meds_memory.shard-") and path.name not in listed
        if stale_shard or path.name in (MEMORY_NPZ_NAME, MEMORY_SNIPPETS_NAME):
            path.unlink(missing_ok=True)


def _read_header(directory: Path) -> dict[str, Any]:
    """The checked ``meds_memory.json`` of ``directory`` (any readable format)."""
    json_path = directory / MEMORY_JSON_NAME
    if not json_path.is_file():
        raise FileNotFoundError(
            f"{json_path} does not exist (the save was interrupted, or this is not a folder written by "
            f"ErrorMemory.save, such as checkpoint-N/meds_memory of a MEDS run)."
        )
    header = read_json_file(json_path, _LOAD_FIX)
    if not isinstance(header, dict):  # a corrupt file is a bad value, not a caller's type error
        raise ValueError(  # noqa: TRY004
            f"{json_path} must hold a JSON object, got {type(header).__name__}; corrupt. {_LOAD_FIX}"
        )
    version = header.get("format_version")
    if version not in _READABLE_FORMAT_VERSIONS or isinstance(version, bool):
        raise ValueError(
            f"{json_path} has format_version {version!r}, this code reads {_READABLE_FORMAT_VERSIONS}; "
            f"save it again with a matching hf_meds_cliff version."
        )
    expected_types: dict[str, type] = {"config": dict, "next_row_id": int, "num_updates": int}
    if version >= 2:
        expected_types.update(fingerprint=str)
    expected_types.update(keys=list, npz_sha256=str) if version == 2 else None
    if version == 1:
        expected_types.update(keys=list)
    if version >= 3:
        expected_types.update(shards=list, requires=list, next_order=int, num_shards=int)
    for name, kind in expected_types.items():
        if not isinstance(header.get(name), kind) or isinstance(header.get(name), bool):
            raise ValueError(  # noqa: TRY004
                f"{json_path}: field {name!r} must be a JSON {kind.__name__}, got {header.get(name)!r:.80}; "
                f"corrupt. {_LOAD_FIX}"
            )
    if not (header.get("dim") is None or (isinstance(header["dim"], int) and header["dim"] > 0)):
        raise ValueError(
            f"{json_path}: field 'dim' must be a positive int or null, got {header['dim']!r}. {_LOAD_FIX}"
        )
    if version >= 3:
        for record in header["shards"]:
            if not (
                isinstance(record, dict)
                and all(isinstance(record.get(name), str) for name in ("arrays", "header", "header_sha256"))
                and all(isinstance(record.get(name), int) for name in ("num_keys", "num_rows"))
            ):
                raise ValueError(f"{json_path}: malformed shard record {record!r:.120}; corrupt. {_LOAD_FIX}")
        if len(header["shards"]) != header["num_shards"]:
            raise ValueError(
                f"{json_path} lists {len(header['shards'])} shards but says num_shards={header['num_shards']}; "
                f"corrupt. {_LOAD_FIX}"
            )
    return header


def _memory_from_manifest(cls: type, directory: Path, header: dict[str, Any]) -> Any:
    """An empty memory with the manifest's configuration and counters."""
    try:
        memory = cls(**header["config"])
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{directory / MEMORY_JSON_NAME}: invalid 'config' {header['config']!r} ({error}). {_LOAD_FIX}"
        ) from error
    memory._dim = header["dim"]
    memory._next_row_id = header["next_row_id"]
    memory._num_updates = header["num_updates"]
    memory._next_order = header.get("next_order", 0)
    return memory


def _check_listed_file(directory: Path, path: Path, sha256: str, record_path: Path) -> None:
    """Raise unless ``path``, which the manifest lists, exists and has the SHA-256 ``record_path`` holds for it."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist, but {directory / MEMORY_JSON_NAME} lists it: the memory folder lost a "
            f"file. {_LOAD_FIX}"
        )
    if file_sha256(path) != sha256:
        raise ValueError(
            f"{path} does not match {record_path} (SHA-256 differs from the integrity record): the two files come "
            f"from different saves or one was modified. {_LOAD_FIX}"
        )


def _read_shard_header(directory: Path, record: dict[str, Any]) -> dict[str, Any]:
    """The checked JSON of one shard (keys, notes, snippets), verified against the manifest's SHA-256."""
    header_path = directory / record["header"]
    _check_listed_file(directory, header_path, record["header_sha256"], directory / MEMORY_JSON_NAME)
    shard = read_json_file(header_path, _LOAD_FIX)
    fields = {"keys": list, "orders": list, "rows": list, "notes": list, "snippets": list, "arrays_sha256": str,
              "fingerprint": str}  # fmt: skip
    if not isinstance(shard, dict) or not all(isinstance(shard.get(name), kind) for name, kind in fields.items()):
        raise ValueError(f"{header_path} is not a memory shard header; corrupt. {_LOAD_FIX}")
    lengths = {len(shard[name]) for name in ("keys", "orders", "rows", "notes", "snippets")}
    if lengths != {record["num_keys"]}:
        raise ValueError(
            f"{header_path} does not hold the {record['num_keys']} keys its manifest record says; corrupt. "
            f"{_LOAD_FIX}"
        )
    return shard


def _read_shard(
    directory: Path, record: dict[str, Any], manifest: dict[str, Any], keep: Any = None
) -> list[tuple[Hashable, _KeyMemory, str | None]]:
    """``(key, state, note)`` of the keys of one shard for which ``keep(key)`` is true (all by default), checked
    against the shard's integrity record (SHA-256 of the npz, fingerprint of the shard)."""
    shard = _read_shard_header(directory, record)
    header_path, arrays_path = directory / record["header"], directory / record["arrays"]
    keys = [_decode_key(encoded) for encoded in shard["keys"]]
    wanted = [keep is None or keep(key) for key in keys]
    if not any(wanted):
        return []
    _check_listed_file(directory, arrays_path, shard["arrays_sha256"], header_path)
    try:
        with np.load(arrays_path) as archive:
            data = {name: archive[name] for name in _SHARD_ARRAYS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{arrays_path} is not a complete memory array file ({type(error).__name__}: {error}); truncated or "
            f"corrupt. {_LOAD_FIX}"
        ) from error
    dim = manifest["dim"] or 0
    row_offsets, tree_offsets = data["row_offsets"], data["tree_offsets"]
    num_keys = len(keys)
    is_float32 = data["is_float32"]
    consistent = (
        row_offsets.shape == tree_offsets.shape == (num_keys + 1,)
        and data["has_tree"].shape == is_float32.shape == data["orders"].shape == (num_keys,)
    )
    rows_float32 = int(np.diff(row_offsets)[is_float32].sum()) if consistent else -1
    consistent = (
        consistent
        and data["features_float32"].shape == (rows_float32, dim)
        and data["features_unit64"].shape == (int(row_offsets[-1]) - rows_float32, dim)
        and row_offsets[-1] == data["labels"].shape[0] == data["row_ids"].shape[0] == data["steps"].shape[0]
        and tree_offsets[-1] == data["tree_edges"].shape[0] == data["tree_weights"].shape[0]
        and data["tree_edges"].shape[1:] == (2,)
    )
    if not consistent:
        raise ValueError(
            f"{arrays_path} does not match the {num_keys} keys of {header_path} and dim={dim} (array shapes "
            f"{ {name: value.shape for name, value in data.items()} }); corrupt. {_LOAD_FIX}"
        )
    restored: list[tuple[Hashable, _KeyMemory, str | None]] = []
    digests: list[tuple[int, bytes]] = []
    float32_row, unit64_row = 0, 0
    for index, key in enumerate(keys):
        rows = slice(row_offsets[index], row_offsets[index + 1])
        num_rows = row_offsets[index + 1] - row_offsets[index]
        entry = _KeyMemory(dim, int(data["orders"][index]))
        if is_float32[index]:
            entry.features = np.ascontiguousarray(data["features_float32"][float32_row : float32_row + num_rows])
            float32_row += num_rows
        else:
            entry.features = np.ascontiguousarray(data["features_unit64"][unit64_row : unit64_row + num_rows])
            unit64_row += num_rows
        entry.labels = np.ascontiguousarray(data["labels"][rows])
        entry.row_ids = np.ascontiguousarray(data["row_ids"][rows])
        entry.steps = np.ascontiguousarray(data["steps"][rows])
        if data["has_tree"][index]:
            edges = slice(tree_offsets[index], tree_offsets[index + 1])
            entry.tree_edges = np.ascontiguousarray(data["tree_edges"][edges])
            entry.tree_weights = np.ascontiguousarray(data["tree_weights"][edges])
        else:
            entry.tree_edges = entry.tree_weights = None
        digests.append((entry.order, entry.digest(key)))
        if not wanted[index]:
            continue
        try:
            entry.snippets = {
                int(row_id): RowSnippet(text=str(text), step=int(step), sample=int(sample))
                for row_id, text, step, sample in shard["snippets"][index]
            }
        except (TypeError, ValueError) as error:
            raise ValueError(f"{header_path}: malformed snippets of key {key!r} ({error}); corrupt. {_LOAD_FIX}") from error
        note = shard["notes"][index]
        restored.append((key, entry, None if note is None else str(note)))
    if _combine_fingerprint(b"", digests) != shard["fingerprint"]:
        raise ValueError(
            f"{header_path} and {arrays_path} do not restore the shard that was saved (fingerprint differs from the "
            f"integrity record): keys or arrays were edited. {_LOAD_FIX}"
        )
    return restored


def _legacy_fingerprint(header: dict[str, Any], data: dict[str, np.ndarray]) -> str:
    """The fingerprint formats 1-2 recorded (one SHA-256 stream over all keys' float64 arrays)."""
    digest = hashlib.sha256()
    summary = {"config": header["config"], "dim": header["dim"], "next_row_id": header["next_row_id"],
               "keys": header["keys"]}  # fmt: skip
    digest.update(json.dumps(summary, sort_keys=True).encode())
    row_offsets, tree_offsets = data["row_offsets"], data["tree_offsets"]
    for index in range(len(header["keys"])):
        rows = slice(row_offsets[index], row_offsets[index + 1])
        for name, dtype in (("features", np.float64), ("row_ids", np.int64), ("labels", np.int64)):
            digest.update(np.ascontiguousarray(data[name][rows], dtype=dtype).tobytes())
        if data["has_tree"][index]:
            tree = data["spanning_trees"][tree_offsets[index] : tree_offsets[index + 1]]
            digest.update(np.ascontiguousarray(tree, dtype=np.float64).tobytes())
        else:
            digest.update(b"no-tree")
    return digest.hexdigest()


def _load_legacy(cls: type, directory: Path, header: dict[str, Any]) -> Any:
    """A memory from format 1 or 2 (one npz, one JSON, one snippet file): float64 normalised rows, every
    snippet read and then bounded per cluster as new saves keep them."""
    json_path, npz_path = directory / MEMORY_JSON_NAME, directory / MEMORY_NPZ_NAME
    if not npz_path.is_file():
        raise FileNotFoundError(
            f"{npz_path} does not exist (the save was interrupted, or this is not a folder written by "
            f"ErrorMemory.save, such as checkpoint-N/meds_memory of a MEDS run)."
        )
    version = header["format_version"]
    if version >= 2 and file_sha256(npz_path) != header["npz_sha256"]:
        raise ValueError(
            f"{npz_path} does not match {json_path} (SHA-256 differs from the integrity record): the two files "
            f"come from different saves or one was modified. {_LOAD_FIX}"
        )
    memory = _memory_from_manifest(cls, directory, header)
    keys = [_decode_key(encoded) for encoded in header["keys"]]
    try:
        with np.load(npz_path) as arrays:
            data = {name: arrays[name] for name in _LEGACY_NPZ_ARRAYS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{npz_path} is not a complete memory array file ({type(error).__name__}: {error}); truncated or "
            f"corrupt. {_LOAD_FIX}"
        ) from error
    row_offsets, tree_offsets = data["row_offsets"], data["tree_offsets"]
    dim = header["dim"]
    consistent = (
        row_offsets.shape == (len(keys) + 1,)
        and tree_offsets.shape == (len(keys) + 1,)
        and data["has_tree"].shape == (len(keys),)
        and data["features"].ndim == 2
        and row_offsets[-1] == data["features"].shape[0] == data["labels"].shape[0] == data["row_ids"].shape[0]
        and tree_offsets[-1] == data["spanning_trees"].shape[0]
        and (dim is None or data["features"].shape[1] == dim)
    )
    if not consistent:
        raise ValueError(
            f"{npz_path} does not match the {len(keys)} keys and dim={dim} of {json_path} (array shapes "
            f"{ {name: value.shape for name, value in data.items()} }); corrupt. {_LOAD_FIX}"
        )
    if version >= 2 and _legacy_fingerprint(header, data) != header["fingerprint"]:
        raise ValueError(
            f"{json_path} and {npz_path} do not restore the memory that was saved (fingerprint differs from "
            f"the integrity record): keys, counters or configuration were edited. {_LOAD_FIX}"
        )
    snippets_by_row: dict[int, RowSnippet] = {}
    snippets_path = directory / MEMORY_SNIPPETS_NAME
    if header.get("snippets") and snippets_path.is_file():
        expected_sha = header.get("snippets_sha256")
        if expected_sha is not None and file_sha256(snippets_path) != expected_sha:
            raise ValueError(
                f"{snippets_path} does not match {json_path} (SHA-256 differs from the integrity record); "
                f"delete {snippets_path.name} to load the memory without snippets, or use an earlier checkpoint."
            )
        with snippets_path.open(encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, start=1):
                try:
                    record = json.loads(line)
                    snippets_by_row[int(record["row_id"])] = RowSnippet(
                        text=str(record["text"]), step=int(record["step"]), sample=int(record["sample"])
                    )
                except (ValueError, KeyError, TypeError) as error:
                    raise ValueError(
                        f"{snippets_path} line {line_number} is not a snippet record ({error}); the file is "
                        f"corrupt: delete it to load the memory without snippets."
                    ) from error
    for index, key in enumerate(keys):
        entry = _KeyMemory(dim or 0, index)
        rows = slice(row_offsets[index], row_offsets[index + 1])
        entry.features = np.ascontiguousarray(data["features"][rows], dtype=np.float64)
        entry.labels = data["labels"][rows].astype(np.int32)
        entry.row_ids = data["row_ids"][rows].astype(np.int64)
        row_snippets = {int(r): snippets_by_row[int(r)] for r in entry.row_ids if int(r) in snippets_by_row}
        entry.steps = np.array([row_snippets[int(r)].step if int(r) in row_snippets else -1 for r in entry.row_ids],
                               dtype=np.int32)  # fmt: skip
        if data["has_tree"][index]:
            entry.set_spanning_tree(np.ascontiguousarray(data["spanning_trees"][tree_offsets[index] : tree_offsets[index + 1]]))
        else:
            entry.tree_edges = entry.tree_weights = None
        if len(row_snippets) > SNIPPETS_PER_KEY_LIMIT:  # as a refit bounds them
            has_snippet = np.array([int(r) in row_snippets for r in entry.row_ids], dtype=bool)
            kept = representative_rows(entry.features, entry.labels, has_snippet)
            row_snippets = {int(entry.row_ids[i]): row_snippets[int(entry.row_ids[i])] for i in kept.tolist()}
        entry.snippets = row_snippets
        memory._entries[key] = entry
    memory._next_order = len(keys)
    notes = header.get("notes") or [None] * len(keys)
    memory._notes = {key: str(note) for key, note in zip(keys, notes) if note is not None}
    return memory
