"""One MEDS error memory per job, split by key over the processes of a distributed run.

Without it, every rank keeps the whole memory (the features of all ranks are gathered so that every copy stays
identical). :class:`ShardedErrorMemory` keeps only the keys a rank *owns*, :func:`key_owner` (a stable hash of the
key modulo the number of processes), in an :class:`~hf_meds_cliff.meds.memory.ErrorMemory`:

1. every rank is called with the same gathered batch (what the trainer gathers anyway), and hands every rank the
   same global row ids (key after key, in order of first appearance, as one memory would);
2. each rank assigns, appends and refits only its keys' rows (``ErrorMemory._step``, the single memory's code);
3. one ``all_gather_object`` returns every rank's cluster sizes, step counts and per-key label counts, so every
   rank returns the sizes of the whole batch, equal to one memory's, and the same ``last_step_stats``.

Every rank also keeps a *directory* of all keys (first-appearance order, stored rows, whether a note exists, about
a hundred bytes per key), updated without communication (a key's stored rows after a call are
``min(rows + new, max_rows_per_key)`` whichever rank owns it), so :meth:`~ShardedErrorMemory.keys`,
:meth:`~ShardedErrorMemory.num_stored_rows` and the totals are global.

Checkpoints: :meth:`~ShardedErrorMemory.save` (collective) writes each rank's keys as its own shard
(``meds_memory.shard-<rank>-of-<world>.npz`` and ``.json``), then rank 0 writes ``meds_memory.json``, the manifest
listing all shards, with the fingerprint of the whole memory (equal to the single memory's,
:meth:`ErrorMemory.fingerprint`). :meth:`~ShardedErrorMemory.load` (collective) reads only the rank's own shard
when the world size is the one that saved; otherwise it re-shards: every rank reads the shards' key lists and keeps
the keys it now owns. :meth:`ErrorMemory.load` reads any shard count into one memory (``hf-meds-cliff report``).
All ranks must see the same folder (a shared filesystem on several nodes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .clustering import announce_first_compile
from .memory import (
    MEMORY_JSON_NAME,
    ErrorMemory,
    RowSnippet,
    _canonical_key,
    _combine_fingerprint,
    _decode_key,
    _encode_key,
    _first_row_ids,
    _load_legacy,
    _memory_from_manifest,
    _read_header,
    _read_shard,
    _read_shard_header,
    _step_stats,
    _StepCounts,
    _validated_call,
    _write_manifest,
    _write_shard,
)

logger = logging.getLogger(__name__)

AllGather = Callable[[Any], list]
"""``all_gather(obj) -> [obj of rank 0, obj of rank 1, ...]`` on every rank (a collective)."""


def key_owner(key: Hashable, world_size: int) -> int:
    """The rank that owns ``key`` among ``world_size`` processes: SHA-256 of the key's JSON encoding, modulo.

    Stable across processes, runs and Python versions (unlike ``hash``).

    >>> key_owner(("prompt-0", False), 1)
    0
    >>> [key_owner(("prompt-0", correct), 4) for correct in (False, True)]
    [3, 0]
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}.")
    encoded = json.dumps(_encode_key(_canonical_key(key))).encode()
    return int.from_bytes(hashlib.sha256(encoded).digest()[:8], "big") % world_size


def torch_all_gather(obj: Any) -> list:
    """``torch.distributed.all_gather_object`` over the default process group (gloo or NCCL)."""
    import torch.distributed as dist

    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


class ShardedErrorMemory:
    """The error memory of a ``world_size``-process job, this process holding the keys it owns (module docstring).

    Args:
        rank, world_size: this process and the number of processes.
        all_gather: the collective (default :func:`torch_all_gather`); every method marked *collective* must be
            called on all ranks, in the same order, with the same arguments.
        **memory_kwargs: :class:`~hf_meds_cliff.meds.memory.ErrorMemory`'s arguments.

    It answers what the trainer asks a memory: :meth:`assign_and_update` (collective), :meth:`last_step_stats`,
    :meth:`keys`, :meth:`num_stored_rows`, :meth:`label_counts` (keys owned here, or touched by the last call),
    notes, :meth:`save`/:meth:`load` (collective). Per-row contents (:meth:`stored_labels`, ...) exist only on
    the owner; :meth:`ErrorMemory.load` of a saved folder gives the whole memory.
    """

    def __init__(self, rank: int, world_size: int, all_gather: AllGather | None = None, **memory_kwargs: Any):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}.")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}.")
        self.rank = rank
        self.world_size = world_size
        self._all_gather = all_gather if all_gather is not None else torch_all_gather
        self.local = ErrorMemory(**memory_kwargs)
        """This rank's keys (an :class:`ErrorMemory` whose counters are the whole memory's)."""
        self._directory: dict[Hashable, list] = {}  # key -> [order, stored rows, has note]
        self._touched_counts: dict[Hashable, dict[int, int]] = {}
        self._last_stats: dict[str, float] = {}

    # ---------------------------------------------------------------- what the trainer reads

    def config(self) -> dict[str, Any]:
        return self.local.config()

    def owns(self, key: Hashable) -> bool:
        """Whether this rank holds ``key``'s rows."""
        return key_owner(key, self.world_size) == self.rank

    def __repr__(self) -> str:
        return (
            f"ShardedErrorMemory(rank={self.rank}, world_size={self.world_size}, {self.config()}) with "
            f"{self.num_rows} rows in {self.num_keys} keys ({self.local.num_rows} rows here)"
        )

    def __len__(self) -> int:
        return self.num_keys

    def __contains__(self, key: Any) -> bool:
        try:
            return _canonical_key(key) in self._directory
        except TypeError:
            return False

    @property
    def num_keys(self) -> int:
        return len(self._directory)

    @property
    def num_rows(self) -> int:
        return sum(rows for _, rows, _ in self._directory.values())

    @property
    def dim(self) -> int | None:
        return self.local.dim

    @property
    def num_updates(self) -> int:
        return self.local.num_updates

    def keys(self) -> list[Hashable]:
        """All keys of the job, in order of first appearance."""
        return list(self._directory)

    def num_stored_rows(self, key: Hashable) -> int:
        """Rows stored for ``key`` on its owner (0 for a key never seen)."""
        try:
            entry = self._directory.get(_canonical_key(key))
        except TypeError:
            return 0
        return 0 if entry is None else entry[1]

    def label_counts(self, key: Hashable) -> dict[int, int]:
        """``{label: stored rows}`` of ``key``: for keys owned here, and for every key of the last call."""
        canonical = _canonical_key(key)
        if canonical in self._touched_counts:
            return dict(self._touched_counts[canonical])
        if canonical in self.local:
            return self.local.label_counts(canonical)
        raise KeyError(
            f"{key!r} is held by rank {key_owner(canonical, self.world_size)} (this is rank {self.rank}) and was not "
            "in the last call; ask its owner, or load the saved memory with ErrorMemory.load."
        )

    def _owned_entry_check(self, key: Hashable) -> Hashable:
        canonical = _canonical_key(key)
        if canonical not in self.local:
            owner = key_owner(canonical, self.world_size)
            raise KeyError(
                f"{key!r} is not held by rank {self.rank}: its rows are on rank {owner}. Ask that rank, or load the "
                "saved memory with ErrorMemory.load (every shard)."
            )
        return canonical

    def stored_features(self, key: Hashable) -> np.ndarray:
        """:meth:`ErrorMemory.stored_features` of a key owned by this rank."""
        return self.local.stored_features(self._owned_entry_check(key))

    def stored_labels(self, key: Hashable) -> np.ndarray:
        """:meth:`ErrorMemory.stored_labels` of a key owned by this rank."""
        return self.local.stored_labels(self._owned_entry_check(key))

    def stored_steps(self, key: Hashable) -> np.ndarray:
        """:meth:`ErrorMemory.stored_steps` of a key owned by this rank."""
        return self.local.stored_steps(self._owned_entry_check(key))

    def stored_snippets(self, key: Hashable) -> list[RowSnippet | None]:
        """:meth:`ErrorMemory.stored_snippets` of a key owned by this rank."""
        return self.local.stored_snippets(self._owned_entry_check(key))

    def has_note(self, key: Hashable) -> bool:
        entry = self._directory.get(_canonical_key(key))
        return bool(entry and entry[2])

    def note(self, key: Hashable) -> str | None:
        """The note of an owned key (None elsewhere: see :meth:`has_note`)."""
        return self.local.note(key) if _canonical_key(key) in self.local else None

    def set_note(self, key: Hashable, text: str) -> None:
        """Attach ``text`` to a stored ``key``: kept by its owner, known to every rank (call it on every rank)."""
        if not isinstance(text, str):
            raise TypeError(f"A note must be a str, got {type(text).__name__}.")
        canonical = _canonical_key(key)
        if canonical not in self._directory:
            raise KeyError(f"{key!r} is not in the memory; known keys: {self.num_keys}.")
        self._directory[canonical][2] = True
        if canonical in self.local:
            self.local.set_note(canonical, text)

    def last_step_stats(self) -> dict[str, float]:
        """:meth:`ErrorMemory.last_step_stats` of the whole job (times: the slowest rank's)."""
        return dict(self._last_stats)

    # ---------------------------------------------------------------- the step (collective)

    def assign_and_update(
        self, keys: Iterable[Hashable], features: Any, snippets: Sequence[RowSnippet | None] | None = None
    ) -> np.ndarray:
        """:meth:`ErrorMemory.assign_and_update` of the whole batch (same on every rank), each rank fitting its keys.

        Collective. Returns the (n,) int64 sizes of every row, equal to one memory's.
        """
        announce_first_compile()
        matrix, rows_by_key, snippets = _validated_call(keys, features, snippets, self.local.dim)
        num_rows = matrix.shape[0]
        if num_rows == 0:
            sizes = np.zeros(0, dtype=np.int64)
            self._last_stats = _step_stats(0, 0, sizes, _StepCounts(), self.num_rows, self.num_keys)
            return sizes
        first_ids = _first_row_ids(rows_by_key, self.local._next_row_id)
        orders = {}
        for key in rows_by_key:
            if key not in self._directory:
                orders[key] = len(self._directory) + len(orders)
        owned = {key: rows for key, rows in rows_by_key.items() if self.owns(key)}
        error = None
        try:
            local_sizes, counts = self.local._step(owned, matrix, snippets, first_ids, orders)
        except Exception as failure:  # noqa: BLE001 - reported to every rank below, then raised everywhere
            error, local_sizes, counts = failure, np.zeros(num_rows, dtype=np.int64), _StepCounts()
        owned_rows = np.concatenate(list(owned.values())) if owned else np.zeros(0, dtype=np.int64)
        part = {
            "error": None if error is None else f"{type(error).__name__}: {error}",
            "rows": owned_rows,
            "sizes": local_sizes[owned_rows],
            "counts": counts,
            "label_counts": {key: self.local.label_counts(key) for key in owned} if error is None else {},
        }
        parts = self._all_gather(part)
        failures = [(rank, p["error"]) for rank, p in enumerate(parts) if p["error"] is not None]
        if failures:
            if error is not None:
                raise error
            raise RuntimeError(f"The error memory's update failed on rank(s) {failures}; see their logs.")
        sizes = np.zeros(num_rows, dtype=np.int64)
        self._touched_counts = {}
        for p in parts:
            sizes[p["rows"]] = p["sizes"]
            self._touched_counts.update(p["label_counts"])
        cap = self.local.max_rows_per_key
        for key, rows in rows_by_key.items():
            entry = self._directory.setdefault(key, [orders[key], 0, False]) if key in orders else self._directory[key]
            entry[1] = entry[1] + rows.shape[0] if cap is None else min(entry[1] + rows.shape[0], cap)
        self.local._advance(num_rows, matrix.shape[1])
        self.local._next_order = len(self._directory)
        combined = _StepCounts.combine([p["counts"] for p in parts])
        self._last_stats = _step_stats(num_rows, len(rows_by_key), sizes, combined, self.num_rows, self.num_keys)
        return sizes

    # ---------------------------------------------------------------- identity and files (collective)

    def fingerprint(self) -> str:
        """:meth:`ErrorMemory.fingerprint` of the whole memory (collective)."""
        digests = [pair for part in self._all_gather(self.local._key_digests()) for pair in part]
        return _combine_fingerprint(self.local._fingerprint_header(), digests)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write this rank's shard, then (rank 0) the manifest (collective; see the module docstring)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        error, record, digests = None, None, []
        try:
            digests = self.local._key_digests()
            record = _write_shard(directory, self.rank, self.world_size, self.local, digests)
        except Exception as failure:  # noqa: BLE001 - every rank must reach the gather
            error = failure
        parts = self._all_gather(
            {"record": record, "digests": digests, "error": None if error is None else repr(error)}
        )
        failures = [(rank, p["error"]) for rank, p in enumerate(parts) if p["error"] is not None]
        if failures:
            if error is not None:
                raise error
            raise OSError(f"Saving the error memory to {directory} failed on rank(s) {failures}.")
        if self.rank == 0:
            digests = [pair for p in parts for pair in p["digests"]]
            fingerprint = _combine_fingerprint(self.local._fingerprint_header(), digests)
            manifest = self.local._manifest(self.world_size, [p["record"] for p in parts], fingerprint)
            _write_manifest(directory, manifest)
        self._all_gather(None)  # nobody returns before the manifest exists
        return directory

    @classmethod
    def load(
        cls, directory: str | os.PathLike, rank: int, world_size: int, all_gather: AllGather | None = None
    ) -> ShardedErrorMemory:
        """This rank's part of a saved memory (any shard count, or formats 1-2); collective.

        Same world size as the save: reads the manifest, every shard's JSON (keys) and its own npz. Another world
        size (or an unsharded save): re-shards, each rank keeping the keys it owns now. A failure on any rank
        raises on every rank (``ValueError``/``FileNotFoundError`` naming the file), so no rank trains on alone.
        """
        directory = Path(directory)
        gather = all_gather if all_gather is not None else torch_all_gather
        memory = error = None
        try:
            memory = cls._load_part(Path(directory), rank, world_size, gather)
        except (OSError, ValueError) as failure:
            error = failure
        reports = gather(None if error is None else (type(error).__name__, str(error)))
        if error is not None:
            raise error
        failed = [(r, report) for r, report in enumerate(reports) if report is not None]
        if failed:
            kind, message = failed[0][1]
            error_type = FileNotFoundError if kind == "FileNotFoundError" else ValueError
            raise error_type(f"rank {failed[0][0]}: {message}")
        return memory

    @classmethod
    def _load_part(cls, directory: Path, rank: int, world_size: int, gather: AllGather) -> ShardedErrorMemory:
        header = _read_header(directory)
        sharded = cls(rank, world_size, gather, **_memory_from_manifest(ErrorMemory, directory, header).config())
        local = sharded.local
        if header["format_version"] < 3:
            whole = _load_legacy(ErrorMemory, directory, header)
            for key, entry in whole._entries.items():
                sharded._directory[key] = [entry.order, entry.num_rows, key in whole._notes]
                if sharded.owns(key):
                    local._entries[key] = entry
                    if key in whole._notes:
                        local._notes[key] = whole._notes[key]
            local._dim, local._next_row_id = whole._dim, whole._next_row_id
            local._num_updates, local._next_order = whole._num_updates, whole._next_order
            return sharded
        template = _memory_from_manifest(ErrorMemory, directory, header)
        local._dim, local._next_row_id = template._dim, template._next_row_id
        local._num_updates, local._next_order = template._num_updates, template._next_order
        same_layout = header["num_shards"] == world_size
        for index, record in enumerate(header["shards"]):
            shard = _read_shard_header(directory, record)
            keys = [_decode_key(encoded) for encoded in shard["keys"]]
            for key, order, rows, note in zip(keys, shard["orders"], shard["rows"], shard["notes"]):
                sharded._directory[key] = [int(order), int(rows), note is not None]
            if (same_layout and index == rank) or (not same_layout and any(map(sharded.owns, keys))):
                for key, entry, note in _read_shard(directory, record, header, keep=sharded.owns):
                    local._entries[key] = entry
                    if note is not None:
                        local._notes[key] = note
        sharded._directory = dict(sorted(sharded._directory.items(), key=lambda item: item[1][0]))
        local._entries = dict(sorted(local._entries.items(), key=lambda item: item[1].order))
        return sharded


def build_error_memory(num_processes: int, process_index: int, **memory_kwargs: Any) -> ErrorMemory | ShardedErrorMemory:
    """One process: an :class:`ErrorMemory`; several: a :class:`ShardedErrorMemory` over ``torch.distributed``."""
    if num_processes == 1:
        return ErrorMemory(**memory_kwargs)
    return ShardedErrorMemory(process_index, num_processes, **memory_kwargs)


def load_error_memory(directory: str | os.PathLike, num_processes: int, process_index: int) -> ErrorMemory | ShardedErrorMemory:
    """The saved memory in ``directory`` for this process (:meth:`ErrorMemory.load` or :meth:`ShardedErrorMemory.load`)."""
    if num_processes == 1:
        return ErrorMemory.load(directory)
    return ShardedErrorMemory.load(directory, process_index, num_processes)


__all__ = [
    "MEMORY_JSON_NAME",
    "ShardedErrorMemory",
    "build_error_memory",
    "key_owner",
    "load_error_memory",
    "torch_all_gather",
]
