"""The answer-oracle memory of MEDS (``meds_cluster_by="answer"``): an ablation, not the paper's method.

MEDS clusters each prompt's past rollouts by their layer-logit features and penalises a rollout by the size of the
cluster it falls into (:class:`~hf_meds_cliff.meds.memory.ErrorMemory`). Whether that helps depends on two things at
once: the *idea* (penalise repeating a frequent past mistake) and the *features* (do they group rollouts that make
the same mistake?). This memory removes the second: a rollout's cluster is the set of stored rollouts of the same
key (prompt, correctness) whose exact final answer string (``extract_final_answer``: the last ``\\boxed{...}``, with
the boxes joined to it) equals its own. With verifiable answers that is the grouping the features are meant to
approximate, so comparing the two runs separates the idea from the features.

Semantics mirror :class:`ErrorMemory`'s so that only the grouping differs: the cluster size of a new row is the number
of rows *stored before this call* under its key with its answer (rows of the same call are not counted); the rows are
then appended; ``max_rows_per_key`` evicts the oldest rows of a key after appending. There is no noise: every answer
is a cluster (a first-seen answer has size 0). A row without an answer (``None``) gets size 0 and is not stored.

>>> memory = AnswerMemory()
>>> memory.assign_and_update([("q", False)] * 3, ["7", "7", "9"]).tolist()  # empty memory
[0, 0, 0]
>>> memory.assign_and_update([("q", False), ("q", False), ("q", True), ("q", False)], ["7", "9", "7", None]).tolist()
[2, 1, 0, 0]
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..checkpointing import read_json_file, write_atomically
from .memory import _canonical_key, _decode_key, _encode_key

ANSWER_MEMORY_JSON_NAME = "meds_answer_memory.json"
_FORMAT_VERSION = 1


class AnswerMemory:
    """Per-key history of exact final answers; cluster size = stored rows of the key with the same answer.

    Args:
        max_rows_per_key: cap of stored rows per key, oldest evicted first (``None``: keep all, as ``ErrorMemory``).
    """

    def __init__(self, max_rows_per_key: int | None = None):
        if max_rows_per_key is not None and (
            isinstance(max_rows_per_key, bool) or not isinstance(max_rows_per_key, int) or max_rows_per_key < 1
        ):
            raise ValueError(f"max_rows_per_key must be an int >= 1 or None (no cap), got {max_rows_per_key!r}.")
        self.max_rows_per_key = max_rows_per_key
        self._answers: dict[Hashable, deque[str]] = {}
        self._counts: dict[Hashable, Counter] = {}
        self._last_stats: dict[str, float] = {}

    def config(self) -> dict[str, Any]:
        return {"max_rows_per_key": self.max_rows_per_key}

    def __len__(self) -> int:
        return len(self._answers)

    @property
    def num_rows(self) -> int:
        return sum(len(answers) for answers in self._answers.values())

    def stored_answers(self, key: Hashable) -> list[str]:
        """The stored answers of ``key``, oldest first (``[]`` for an unknown key)."""
        return list(self._answers.get(_canonical_key(key), ()))

    def last_step_stats(self) -> dict[str, float]:
        """Statistics of the last :meth:`assign_and_update`: ``rows``, ``rows_without_answer``, ``mean_cluster_size``,
        ``max_cluster_size``, ``clusters_per_key`` (distinct stored answers per touched key) and ``memory_rows``."""
        return dict(self._last_stats)

    def assign_and_update(self, keys: Sequence[Hashable], answers: Sequence[str | None]) -> np.ndarray:
        """Cluster sizes (B,) int64 of the rows against the memory as it was before the call; then store the rows.

        Args:
            keys: (B,) memory keys, e.g. ``(prompt_key, is_correct)``.
            answers: (B,) exact final answers (strings), ``None`` for a row without one (size 0, not stored).
        """
        if len(keys) != len(answers):
            raise ValueError(f"Got {len(keys)} keys and {len(answers)} answers; they must align one to one.")
        canonical = [_canonical_key(key) for key in keys]
        for answer in answers:
            if answer is not None and not isinstance(answer, str):
                raise TypeError(f"answers must be strings or None, got {answer!r} ({type(answer).__name__}).")
        sizes = np.array(
            [
                0 if answer is None else self._counts.get(key, Counter())[answer]
                for key, answer in zip(canonical, answers)
            ],
            dtype=np.int64,
        )
        for key, answer in zip(canonical, answers):
            if answer is None:
                continue
            stored = self._answers.setdefault(key, deque())
            counts = self._counts.setdefault(key, Counter())
            stored.append(answer)
            counts[answer] += 1
            if self.max_rows_per_key is not None and len(stored) > self.max_rows_per_key:
                oldest = stored.popleft()
                counts[oldest] -= 1
                if counts[oldest] == 0:
                    del counts[oldest]
        touched = {key for key, answer in zip(canonical, answers) if answer is not None}
        self._last_stats = {
            "rows": float(len(answers)),
            "rows_without_answer": float(sum(answer is None for answer in answers)),
            "mean_cluster_size": float(sizes.mean()) if len(sizes) else 0.0,
            "max_cluster_size": float(sizes.max()) if len(sizes) else 0.0,
            "clusters_per_key": (
                sum(len(self._counts[key]) for key in touched) / len(touched) if touched else 0.0
            ),
            "memory_rows": float(self.num_rows),
        }
        return sizes

    # ---------------------------------------------------------------- checkpoints

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``meds_answer_memory.json`` into ``directory`` (atomically); returns the file's path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {
            "format_version": _FORMAT_VERSION,
            "config": self.config(),
            "keys": [_encode_key(key) for key in self._answers],
            "answers": [list(answers) for answers in self._answers.values()],
        }
        return write_atomically(
            directory / ANSWER_MEMORY_JSON_NAME, lambda handle: handle.write(json.dumps(state).encode())
        )

    @classmethod
    def load(cls, directory: str | os.PathLike) -> AnswerMemory:
        """Restore a memory written by :meth:`save`; ``FileNotFoundError`` when absent, ``ValueError`` naming the file
        when it is malformed."""
        path = Path(directory) / ANSWER_MEMORY_JSON_NAME
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist (not a checkpoint of a meds_cluster_by='answer' run).")
        fix = "Save the memory again, or use an earlier checkpoint."
        state = read_json_file(path, fix)
        well_formed = (
            isinstance(state, dict)
            and state.get("format_version") == _FORMAT_VERSION
            and isinstance(state.get("config"), dict)
            and isinstance(state.get("keys"), list)
            and isinstance(state.get("answers"), list)
            and len(state["keys"]) == len(state["answers"])
            and all(isinstance(a, list) and all(isinstance(s, str) for s in a) for a in state["answers"])
        )
        if not well_formed:
            raise ValueError(f"{path} is not an answer memory of format {_FORMAT_VERSION}; corrupt. {fix}")
        memory = cls(**state["config"])
        for encoded, answers in zip(state["keys"], state["answers"]):
            key = _decode_key(encoded)
            memory._answers[key] = deque(answers)
            memory._counts[key] = Counter(answers)
        return memory
