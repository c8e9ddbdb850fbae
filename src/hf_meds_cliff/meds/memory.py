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

Checkpoints: :meth:`ErrorMemory.save` writes ``meds_memory.npz`` (features, labels, row ids and
spanning trees of all keys, concatenated with offsets), ``meds_memory.json`` (configuration,
keys in a typed JSON encoding, counters, optional per-key notes such as the problem text, and an integrity
record: the SHA-256 of the other files and the memory's fingerprint) and, when rows carry them,
``meds_snippets.jsonl`` (one line per stored row: its id, the training step and sample it came from, and a
bounded snippet of the completion's answer region, :class:`RowSnippet`), so a person can read what the
completions of a cluster said; snippets and notes never influence assignments and are not part of the
fingerprint. All are written atomically, the JSON last. :meth:`ErrorMemory.load` restores a memory whose
:meth:`~ErrorMemory.fingerprint` and future assignments equal the original's, and rejects mismatched,
truncated or edited files with an error naming the file.

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
from dataclasses import asdict, dataclass
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
MEMORY_SNIPPETS_NAME = "meds_snippets.jsonl"
MEMORY_NPZ_NAME = "meds_memory.npz"
MEMORY_JSON_NAME = "meds_memory.json"
_FORMAT_VERSION = 2
_READABLE_FORMAT_VERSIONS = (1, 2)  # 1: before the integrity record (npz_sha256, fingerprint)
_NPZ_ARRAYS = ("features", "labels", "row_ids", "row_offsets", "spanning_trees", "tree_offsets", "has_tree")


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


class _KeyMemory:
    """Stored rows of one key: features (n, d), row ids (n,), labels (n,), the MST of the last
    fit ((n - 1, 3), or None when it must be rebuilt densely) and the rows' snippets (n, or None each)."""

    __slots__ = ("features", "labels", "row_ids", "snippets", "spanning_tree")

    def __init__(self, dim: int):
        self.features = np.zeros((0, dim), dtype=np.float64)
        self.row_ids = np.zeros(0, dtype=np.int64)
        self.labels = np.zeros(0, dtype=np.int64)
        self.spanning_tree: np.ndarray | None = np.zeros((0, 3), dtype=np.float64)
        self.snippets: list[RowSnippet | None] = []

    @property
    def num_rows(self) -> int:
        return self.features.shape[0]


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
        return f"ErrorMemory({arguments}) with {self.num_rows} rows in {self.num_keys} keys"

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
        """Stored L2-normalised features (n, d) of ``key`` (a copy), oldest first."""
        return self._entry(key).features.copy()

    def stored_labels(self, key: Hashable) -> np.ndarray:
        """Labels (n,) of the last fit of ``key`` (-1 = noise), aligned with :meth:`stored_features`."""
        return self._entry(key).labels.copy()

    def note(self, key: Hashable) -> str | None:
        """The text attached to ``key`` with :meth:`set_note` (e.g. the problem of a prompt), or None."""
        return self._notes.get(_canonical_key(key))

    def set_note(self, key: Hashable, text: str) -> None:
        """Attach a human-readable ``text`` to a stored ``key`` (saved with the memory, never clustered)."""
        if not isinstance(text, str):
            raise TypeError(f"A note must be a str, got {type(text).__name__}.")
        self._entry(key)  # raises KeyError for an unknown key
        self._notes[_canonical_key(key)] = text

    def stored_snippets(self, key: Hashable) -> list[RowSnippet | None]:
        """Snippets of the stored rows of ``key`` (None where none was given), as :meth:`stored_labels`."""
        return list(self._entry(key).snippets)

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
                (:meth:`stored_snippets`, checkpoints); they do not influence any assignment.

        Returns:
            (n,) int64: per row, the number of stored rows (before this call) carrying the label its
            k nearest stored neighbours of the same key vote for; 0 for a key without stored rows
            (and for noise under ``noise_policy="ignore"``).
        """
        announce_first_compile()  # before the first numba call of a process (a cold cache compiles silently)
        matrix = _as_feature_matrix(features)
        keys = list(keys)
        if len(keys) != matrix.shape[0]:
            raise ValueError(
                f"keys has {len(keys)} entries but features has {matrix.shape[0]} rows; pass one key "
                f"per feature row."
            )
        if self._dim is not None and matrix.shape[0] > 0 and matrix.shape[1] != self._dim:
            raise ValueError(
                f"features have width {matrix.shape[1]} but this memory stores width {self._dim}; keep "
                f"the feature options (layers, differences) fixed for a run or start a new ErrorMemory."
            )
        num_rows = matrix.shape[0]
        if snippets is None:
            snippets = [None] * num_rows
        else:
            snippets = list(snippets)
            if len(snippets) != num_rows:
                raise ValueError(
                    f"snippets has {len(snippets)} entries but features has {num_rows} rows; pass one "
                    "snippet "
                    f"(or None) per row, or no snippets."
                )
            for snippet in snippets:
                if snippet is not None and not isinstance(snippet, RowSnippet):
                    raise TypeError(
                        f"snippets must be RowSnippet or None, got {type(snippet).__name__}; build them with "
                        f"RowSnippet(text=..., step=..., sample=...)."
                    )
        cluster_sizes = np.zeros(num_rows, dtype=np.int64)
        if num_rows == 0:
            self._last_stats = self._stats(0, {}, cluster_sizes, 0, 0, 0, 0, 0.0, 0.0)
            return cluster_sizes
        if matrix.shape[1] == 0:
            raise ValueError("features have width 0; each row needs at least one value.")
        points = _normalise_rows(matrix)

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

        start = time.perf_counter()
        assigned_rows = 0
        assigned_noise = 0
        for key, rows in rows_by_key.items():
            entry = self._entries.get(key)
            if entry is None or entry.num_rows == 0:
                continue
            voted = _knn_vote(points[rows], entry.features, entry.labels, self.knn_k, NOISE_LABEL)
            unique_labels, counts = np.unique(entry.labels, return_counts=True)
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
        next_row_id = self._next_row_id
        evicted_rows = 0
        for key, rows in rows_by_key.items():
            refitted[key], evicted = self._refit(
                self._entries.get(key), points[rows], next_row_id, [snippets[row] for row in rows]
            )
            next_row_id += rows.shape[0]
            evicted_rows += evicted
        new_keys = sum(key not in self._entries for key in refitted)
        self._entries.update(refitted)
        self._next_row_id = next_row_id
        self._dim = points.shape[1]
        fit_seconds = time.perf_counter() - start
        self._num_updates += 1
        self._last_stats = self._stats(
            num_rows,
            rows_by_key,
            cluster_sizes,
            new_keys,
            assigned_rows,
            assigned_noise,
            evicted_rows,
            assign_seconds,
            fit_seconds,
        )
        return cluster_sizes

    def _refit(
        self,
        entry: _KeyMemory | None,
        new_points: np.ndarray,
        first_row_id: int,
        new_snippets: list[RowSnippet | None],
    ) -> tuple[_KeyMemory, int]:
        """One key's state after appending ``new_points`` (m, d), evicting the oldest rows beyond
        the cap and refitting; ``entry`` is not modified. Returns (new state, rows evicted)."""
        dim = new_points.shape[1]
        old = entry if entry is not None else _KeyMemory(dim)
        num_old, num_new = old.num_rows, new_points.shape[0]
        refitted = _KeyMemory(dim)
        refitted.features = np.ascontiguousarray(np.concatenate([old.features, new_points]))
        refitted.row_ids = np.concatenate(
            [old.row_ids, np.arange(first_row_id, first_row_id + num_new, dtype=np.int64)]
        )
        refitted.snippets = [*old.snippets, *new_snippets]
        evicted = 0
        if self.max_rows_per_key is not None and refitted.num_rows > self.max_rows_per_key:
            evicted = refitted.num_rows - self.max_rows_per_key
            refitted.features = np.ascontiguousarray(refitted.features[evicted:])
            refitted.row_ids = refitted.row_ids[evicted:]
            refitted.snippets = refitted.snippets[evicted:]
        points = refitted.features
        if self.min_samples > 1:
            tree = _dense_spanning_tree(points, _core_distances(points, self.min_samples))
        elif evicted or old.spanning_tree is None or num_old < num_new:
            # Kruskal over m·n candidate edges beats Prim's n²/2 only while m is a small share of n.
            tree = _dense_spanning_tree(points, np.zeros(points.shape[0]))
        else:
            tree = _extend_spanning_tree(points, old.spanning_tree, num_old)
        refitted.spanning_tree = tree
        refitted.labels = labels_from_spanning_tree(tree, self.min_cluster_size)
        return refitted, evicted

    def _stats(
        self,
        num_rows: int,
        rows_by_key: dict[Hashable, np.ndarray],
        cluster_sizes: np.ndarray,
        new_keys: int,
        assigned_rows: int,
        assigned_noise: int,
        evicted_rows: int,
        assign_seconds: float,
        fit_seconds: float,
    ) -> dict[str, float]:
        clusters = 0
        stored = 0
        stored_noise = 0
        for key in rows_by_key:
            labels = self._entries[key].labels
            clusters += int(np.unique(labels[labels != NOISE_LABEL]).shape[0])
            stored += labels.shape[0]
            stored_noise += int((labels == NOISE_LABEL).sum())
        num_keys = len(rows_by_key)
        return {
            "rows": float(num_rows),
            "keys": float(num_keys),
            "new_keys": float(new_keys),
            "assigned_rows": float(assigned_rows),
            "mean_cluster_size": float(cluster_sizes.mean()) if num_rows else 0.0,
            "max_cluster_size": float(cluster_sizes.max()) if num_rows else 0.0,
            "assigned_noise_fraction": assigned_noise / num_rows if num_rows else 0.0,
            "clusters_per_key": clusters / num_keys if num_keys else 0.0,
            "noise_fraction": stored_noise / stored if stored else 0.0,
            "memory_rows": float(self.num_rows),
            "memory_keys": float(self.num_keys),
            "evicted_rows": float(evicted_rows),
            "assign_seconds": assign_seconds,
            "fit_seconds": fit_seconds,
        }

    # ---------------------------------------------------------------- identity

    def fingerprint(self) -> str:
        """SHA-256 hex digest of the configuration, keys, counters and every stored array.

        Two memories with equal fingerprints assign identical cluster sizes to any future input.
        """
        digest = hashlib.sha256()
        header = {
            "config": self.config(),
            "dim": self._dim,
            "next_row_id": self._next_row_id,
            "keys": [_encode_key(key) for key in self._entries],
        }
        digest.update(json.dumps(header, sort_keys=True).encode())
        for entry in self._entries.values():
            for array in (entry.features, entry.row_ids, entry.labels):
                digest.update(np.ascontiguousarray(array).tobytes())
            tree = entry.spanning_tree
            digest.update(b"no-tree" if tree is None else np.ascontiguousarray(tree).tobytes())
        return digest.hexdigest()

    def state_equal(self, other: ErrorMemory) -> bool:
        """Whether ``other`` holds exactly the same state (see :meth:`fingerprint`)."""
        if not isinstance(other, ErrorMemory):
            raise TypeError(f"state_equal expects an ErrorMemory, got {type(other).__name__}.")
        return self.fingerprint() == other.fingerprint()

    # ---------------------------------------------------------------- checkpoints

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``meds_memory.npz`` and ``meds_memory.json`` into ``directory`` (created if needed).

        Each file is written to a temporary name, fsynced and renamed (temporary files of an earlier,
        interrupted save are removed first). The npz goes first and the JSON last; the JSON carries the
        integrity record (the npz's SHA-256 and the memory's :meth:`fingerprint`), so a JSON exists only
        next to the npz it describes and :meth:`load` detects files from different saves or edited
        files. Returns the directory.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(directory, (MEMORY_NPZ_NAME, MEMORY_JSON_NAME, MEMORY_SNIPPETS_NAME))
        entries = list(self._entries.values())
        dim = self._dim if self._dim is not None else 0
        row_offsets = np.cumsum([0] + [entry.num_rows for entry in entries]).astype(np.int64)
        trees = [entry.spanning_tree for entry in entries]
        tree_offsets = np.cumsum([0] + [0 if t is None else t.shape[0] for t in trees]).astype(np.int64)

        def stacked(arrays, shape, dtype):
            return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(shape, dtype=dtype)

        arrays = {
            "features": stacked([e.features for e in entries], (0, dim), np.float64),
            "labels": stacked([e.labels for e in entries], (0,), np.int64),
            "row_ids": stacked([e.row_ids for e in entries], (0,), np.int64),
            "row_offsets": row_offsets,
            "spanning_trees": stacked([t for t in trees if t is not None], (0, 3), np.float64),
            "tree_offsets": tree_offsets,
            "has_tree": np.array([t is not None for t in trees], dtype=bool),
        }
        npz_path = write_atomically(directory / MEMORY_NPZ_NAME, lambda handle: np.savez(handle, **arrays))
        header = {
            "format_version": _FORMAT_VERSION,
            "config": self.config(),
            "dim": self._dim,
            "next_row_id": self._next_row_id,
            "num_updates": self._num_updates,
            "keys": [_encode_key(key) for key in self._entries],
            "npz_sha256": file_sha256(npz_path),
            "fingerprint": self.fingerprint(),
            "notes": [self._notes.get(key) for key in self._entries],
        }
        snippet_lines = [
            json.dumps({"row_id": int(row_id), **asdict(snippet)}, ensure_ascii=False) + "\n"
            for entry in entries
            for row_id, snippet in zip(entry.row_ids, entry.snippets)
            if snippet is not None
        ]
        header["snippets"] = bool(snippet_lines)
        snippets_path = directory / MEMORY_SNIPPETS_NAME
        if snippet_lines:
            write_atomically(snippets_path, lambda handle: handle.write("".join(snippet_lines).encode()))
            header["snippets_sha256"] = file_sha256(snippets_path)
        else:
            snippets_path.unlink(missing_ok=True)  # a stale file from an earlier save must not be read back
        write_atomically(
            directory / MEMORY_JSON_NAME, lambda handle: handle.write(json.dumps(header, indent=1).encode())
        )
        logger.debug("Saved MEDS memory (%d rows, %d keys) to %s", self.num_rows, self.num_keys, directory)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike) -> ErrorMemory:
        """Restore a memory written by :meth:`save`; it behaves exactly like the saved one.

        Raises ``FileNotFoundError`` when a file is missing and ``ValueError`` naming the file and what is
        wrong when a file is malformed, truncated, or does not match the other one (integrity record).
        """
        directory = Path(directory)
        json_path, npz_path = directory / MEMORY_JSON_NAME, directory / MEMORY_NPZ_NAME
        for path in (json_path, npz_path):
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} does not exist (the save was interrupted, or this is not a folder written by "
                    f"ErrorMemory.save, such as checkpoint-N/meds_memory of a MEDS run)."
                )
        fix = "Save the memory again, or use an earlier checkpoint."
        header = read_json_file(json_path, fix)
        if not isinstance(header, dict):  # a corrupt file is a bad value, not a caller's type error
            raise ValueError(  # noqa: TRY004
                f"{json_path} must hold a JSON object, got {type(header).__name__}; corrupt. {fix}"
            )
        version = header.get("format_version")
        if version not in _READABLE_FORMAT_VERSIONS:
            raise ValueError(
                f"{json_path} has format_version {version!r}, this code reads {_READABLE_FORMAT_VERSIONS}; "
                f"save it again with a matching hf_meds_cliff version."
            )
        expected_types = {"config": dict, "keys": list, "next_row_id": int, "num_updates": int}
        if version >= 2:
            expected_types.update(npz_sha256=str, fingerprint=str)
        for name, kind in expected_types.items():
            if not isinstance(header.get(name), kind) or isinstance(header.get(name), bool):
                raise ValueError(  # noqa: TRY004
                    f"{json_path}: field {name!r} must be a JSON {kind.__name__}, got {header.get(name)!r:.80}; "
                    f"corrupt. {fix}"
                )
        if not (header.get("dim") is None or (isinstance(header["dim"], int) and header["dim"] > 0)):
            raise ValueError(
                f"{json_path}: field 'dim' must be a positive int or null, got {header['dim']!r}. {fix}"
            )
        if version >= 2 and file_sha256(npz_path) != header["npz_sha256"]:
            raise ValueError(
                f"{npz_path} does not match {json_path} (SHA-256 differs from the integrity record): the two files "
                f"come from different saves or one was modified. {fix}"
            )
        try:
            memory = cls(**header["config"])
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{json_path}: invalid 'config' {header['config']!r} ({error}). {fix}"
            ) from error
        keys = [_decode_key(encoded) for encoded in header["keys"]]
        try:
            with np.load(npz_path) as arrays:
                data = {name: arrays[name] for name in _NPZ_ARRAYS}
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            raise ValueError(
                f"{npz_path} is not a complete memory array file ({type(error).__name__}: {error}); truncated or "
                f"corrupt. {fix}"
            ) from error
        row_offsets, tree_offsets = data["row_offsets"], data["tree_offsets"]
        dim = header["dim"]
        consistent = (
            row_offsets.shape == (len(keys) + 1,)
            and tree_offsets.shape == (len(keys) + 1,)
            and data["has_tree"].shape == (len(keys),)
            and data["features"].ndim == 2
            and row_offsets[-1]
            == data["features"].shape[0]
            == data["labels"].shape[0]
            == data["row_ids"].shape[0]
            and tree_offsets[-1] == data["spanning_trees"].shape[0]
            and (dim is None or data["features"].shape[1] == dim)
        )
        if not consistent:
            raise ValueError(
                f"{npz_path} does not match the {len(keys)} keys and dim={dim} of {json_path} (array shapes "
                f"{ {name: value.shape for name, value in data.items()} }); corrupt. {fix}"
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
                            f"{snippets_path} line {line_number} is not a snippet record ({error}); the "
                            "file is "
                            f"corrupt: delete it to load the memory without snippets."
                        ) from error
        memory._dim = dim
        memory._next_row_id = header["next_row_id"]
        memory._num_updates = header["num_updates"]
        for index, key in enumerate(keys):
            entry = _KeyMemory(memory._dim or 0)
            rows = slice(row_offsets[index], row_offsets[index + 1])
            entry.features = np.ascontiguousarray(data["features"][rows], dtype=np.float64)
            entry.labels = data["labels"][rows].astype(np.int64)
            entry.row_ids = data["row_ids"][rows].astype(np.int64)
            entry.snippets = [snippets_by_row.get(int(row_id)) for row_id in entry.row_ids]
            if data["has_tree"][index]:
                tree_rows = slice(tree_offsets[index], tree_offsets[index + 1])
                entry.spanning_tree = np.ascontiguousarray(data["spanning_trees"][tree_rows])
            else:
                entry.spanning_tree = None
            memory._entries[key] = entry
        notes = header.get("notes") or [None] * len(keys)
        memory._notes = {key: str(note) for key, note in zip(keys, notes) if note is not None}
        if version >= 2 and memory.fingerprint() != header["fingerprint"]:
            raise ValueError(
                f"{json_path} and {npz_path} do not restore the memory that was saved (fingerprint differs from "
                f"the integrity record): keys, counters or configuration were edited. {fix}"
            )
        return memory
