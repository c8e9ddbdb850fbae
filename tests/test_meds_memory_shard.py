"""The error memory's footprint and its split over processes: storage arithmetic, snippet bounds, key ownership, and
sharded memories (ranks simulated by threads with a real all-gather) that equal one memory exactly, through
checkpoints written and read with other numbers of processes. The torchrun lane is in test_meds_trainer.py."""

from __future__ import annotations

import hashlib
import json
import threading

import numpy as np
import pytest

from hf_meds_cliff.checkpointing import missing_checkpoint_files
from hf_meds_cliff.meds.clustering import _normalise_rows
from hf_meds_cliff.meds.memory import (
    MEMORY_JSON_NAME,
    SNIPPETS_PER_KEY_LIMIT,
    ErrorMemory,
    RowSnippet,
    representative_rows,
    shard_file_name,
)
from hf_meds_cliff.meds.memory_shard import ShardedErrorMemory, key_owner


class _ThreadGroup:
    """``world_size`` ranks as threads; ``all_gather`` of rank r returns every rank's object, like the collective."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.slots: list = [None] * world_size
        self.barrier = threading.Barrier(world_size, timeout=60)  # a rank that never gathers fails the others

    def all_gather_for(self, rank: int):
        def all_gather(obj):
            self.slots[rank] = obj
            self.barrier.wait()
            gathered = list(self.slots)
            self.barrier.wait()
            return gathered

        return all_gather


def run_ranks(world_size: int, work):
    """``([work(rank, all_gather) for each rank], [error or None for each rank])``, the ranks running concurrently."""
    group = _ThreadGroup(world_size)
    results: list = [None] * world_size
    errors: list = [None] * world_size

    def target(rank):
        try:
            results[rank] = work(rank, group.all_gather_for(rank))
        except BaseException as error:  # noqa: BLE001 - returned to the test
            errors[rank] = error

    threads = [threading.Thread(target=target, args=(rank,)) for rank in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results, errors


def synthetic_trace(num_prompts=12, visits=7, rows_per_visit=8, dim=14, seed=3):
    """Steps of (keys, float32 features, snippets): prompts revisited in random order, rows near a few centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_prompts, 4, dim))
    steps = []
    for visit in range(visits):
        keys, rows, snippets = [], [], []
        for prompt in rng.permutation(num_prompts)[: num_prompts // 2]:
            for member in range(rows_per_visit):
                keys.append((f"p{prompt}", bool(member % 3 == 0)))
                rows.append(centres[prompt, rng.integers(4)] + 0.1 * rng.normal(size=dim))
                snippets.append(RowSnippet(f"visit {visit} row {member}", visit + 1, len(snippets)))
        steps.append((keys, np.asarray(rows, dtype=np.float32), snippets))
    return steps


def _unit(degrees):
    radians = np.deg2rad(degrees)
    return [np.cos(radians), np.sin(radians)]


TOY = [
    (["q"] * 6, np.array([_unit(a) for a in (0, 2, 4, 90, 93, 225)]), None),
    (["q", "q", "q", "other"], np.array([_unit(1), _unit(91), _unit(220), _unit(1)]), None),
    (["q", "q", "other"], np.array([_unit(3), _unit(3), _unit(2)]), None),
]


# ---------------------------------------------------------------------------------------------- pure functions


def test_key_owner_is_the_sha256_of_the_key_encoding_modulo_the_world_size():
    encoding = b'["t", [["s", "prompt-0"], ["b", false]]]'  # the typed JSON encoding of ("prompt-0", False)
    expected = int.from_bytes(hashlib.sha256(encoding).digest()[:8], "big")
    for world_size in (1, 2, 3, 8):
        assert key_owner(("prompt-0", False), world_size) == expected % world_size
    assert key_owner(np.str_("x"), 5) == key_owner("x", 5)  # numpy spellings are the same key
    owners = {key_owner((f"prompt-{i}", False), 4) for i in range(100)}
    assert owners == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="world_size must be an int >= 1, got 0"):
        key_owner("x", 0)


def test_storage_bytes_per_row_by_hand():
    """float32 features (4·d), row id 8, label 4, step 4, tree edge 8 + weight 8 per row after the first."""
    memory = ErrorMemory()
    rng = np.random.default_rng(0)
    memory.assign_and_update(["k"] * 10, rng.normal(size=(10, 14)).astype(np.float32))
    assert memory.nbytes() == 10 * (14 * 4 + 8 + 4 + 4) + 9 * (8 + 8)
    # a value float32 cannot hold: the key switches to normalised float64 rows (8·d), its results unchanged
    wide = ErrorMemory()
    values = rng.normal(size=(10, 14))
    wide.assign_and_update(["k"] * 10, values)
    assert wide.nbytes() == 10 * (14 * 8 + 8 + 4 + 4) + 9 * (8 + 8)
    same_as_float32 = ErrorMemory()
    same_as_float32.assign_and_update(["k"] * 10, values.astype(np.float32))
    wide_too = ErrorMemory()
    wide_too.assign_and_update(["k"] * 10, values.astype(np.float32).astype(np.float64))
    assert wide_too.nbytes() == same_as_float32.nbytes()  # float32-exact float64 values are stored as float32
    assert wide_too.fingerprint() == same_as_float32.fingerprint()


def test_a_key_switching_storage_keeps_its_clusters_bit_for_bit():
    rng = np.random.default_rng(5)
    first = rng.normal(size=(6, 4)).astype(np.float32)
    second = rng.normal(size=(3, 4))  # not float32-exact
    third = rng.normal(size=(3, 4)).astype(np.float32)
    switched = ErrorMemory()
    reference = ErrorMemory()
    for memory in (switched, reference):
        memory.assign_and_update(["k"] * 6, first)
    switched.assign_and_update(["k"] * 3, second)
    reference.assign_and_update(["k"] * 3, second)
    np.testing.assert_array_equal(switched.stored_features("k")[:6], _normalise_rows(first.astype(np.float64)))
    assert switched.assign_and_update(["k"] * 3, third).tolist() == reference.assign_and_update(["k"] * 3, third).tolist()


def test_representative_rows_by_hand():
    points = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0], [-0.6, 0.8], [-0.8, 0.6], [-1.0, 0.0]])
    labels = np.array([0, 0, 0, 1, 1, 1, -1])
    everyone = np.ones(7, dtype=bool)
    # cluster 0: centre (0.8, 0.467), dot products 0.8, 0.92, 0.853: rows 1, 2, 0; cluster 1: centre (-0.467, 0.8),
    # dot products 0.8, 0.92, 0.853: rows 4, 5, 3; noise: row 6
    assert representative_rows(points, labels, everyone, per_cluster=2).tolist() == [1, 2, 4, 5, 6]
    assert representative_rows(points, labels, everyone, per_cluster=1).tolist() == [1, 4, 6]
    # only candidates count; equal sizes: the lower label first, so max_clusters=1 keeps cluster 0's (and noise's)
    candidates = np.array([True, False, True, True, True, True, False])
    assert representative_rows(points, labels, candidates, per_cluster=1, max_clusters=1).tolist() == [2]
    with pytest.raises(ValueError, match="must describe the same rows"):
        representative_rows(points, labels[:3], everyone)


def test_snippets_are_bounded_per_key_and_steps_kept_per_row():
    memory = ErrorMemory()
    for keys, features, snippets in synthetic_trace(num_prompts=2, visits=80):
        memory.assign_and_update(keys, features, snippets)
    for key in memory.keys():
        assert sum(s is not None for s in memory.stored_snippets(key)) <= SNIPPETS_PER_KEY_LIMIT
        assert (memory.stored_steps(key) >= 1).all()  # every row keeps its step, snippet or not
    assert max(memory.num_stored_rows(key) for key in memory.keys()) > 2 * SNIPPETS_PER_KEY_LIMIT

    # More than the limit after a refit: exactly the representatives stay, at most 3 per cluster.
    rng = np.random.default_rng(4)
    count = SNIPPETS_PER_KEY_LIMIT + 1
    features = rng.normal(size=(5, 14))[rng.integers(0, 5, count)] + 0.3 * rng.normal(size=(count, 14))
    keys, snippets = [("p", False)] * count, [RowSnippet(f"row {i}", 1, i) for i in range(count)]
    memory = ErrorMemory()
    memory.assign_and_update(keys, features, snippets)
    labels = memory.stored_labels(("p", False))
    expected = representative_rows(memory.stored_features(("p", False)), labels, np.ones(len(labels), dtype=bool))
    kept = memory.stored_snippets(("p", False))
    assert [i for i, s in enumerate(kept) if s is not None] == expected.tolist()
    assert all(sum(s is not None for s, l in zip(kept, labels) if l == label) <= 3 for label in set(labels.tolist()))


# ---------------------------------------------------------------------------------------------- sharded = single


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("trace", ["toy", "synthetic", "synthetic_capped"])
def test_sharded_sizes_equal_one_memory(world_size, trace):
    steps = TOY if trace == "toy" else synthetic_trace()
    kwargs = {"max_rows_per_key": 30} if trace == "synthetic_capped" else {}
    single = ErrorMemory(**kwargs)
    expected = [single.assign_and_update(*step).tolist() for step in steps]
    expected_stats = single.last_step_stats()

    def work(rank, all_gather):
        memory = ShardedErrorMemory(rank, world_size, all_gather, **kwargs)
        sizes = [memory.assign_and_update(*step).tolist() for step in steps]
        touched = {key: memory.label_counts(key) for key in dict.fromkeys(steps[-1][0])}
        return sizes, memory.fingerprint(), memory.last_step_stats(), memory.keys(), memory.num_rows, touched, {
            key: memory.num_stored_rows(key) for key in memory.keys()
        }, memory.local.num_keys

    results, errors = run_ranks(world_size, work)
    assert errors == [None] * world_size
    assert any(size > 0 for step in expected for size in step)
    for sizes, fingerprint, stats, keys, num_rows, touched, stored_rows, _ in results:
        assert sizes == expected
        assert fingerprint == single.fingerprint()
        assert {k: v for k, v in stats.items() if not k.endswith("_seconds")} == {
            k: v for k, v in expected_stats.items() if not k.endswith("_seconds")
        }
        assert keys == single.keys() and num_rows == single.num_rows
        assert touched == {key: single.label_counts(key) for key in touched}
        assert stored_rows == {key: single.num_stored_rows(key) for key in single.keys()}
    assert sum(result[-1] for result in results) == single.num_keys  # each key on exactly one rank


def _continue(memory_factory, steps, world_size):
    def work(rank, all_gather):
        memory = memory_factory(rank, all_gather)
        return [memory.assign_and_update(*step).tolist() for step in steps], memory.fingerprint()

    results, errors = run_ranks(world_size, work)
    assert errors == [None] * world_size, errors
    return results


@pytest.mark.parametrize(("saved_by", "loaded_by"), [(3, 2), (2, 3), (2, 2), (1, 2), (2, 1)])
def test_checkpoints_move_between_world_sizes(tmp_path, saved_by, loaded_by):
    steps = synthetic_trace()
    single = ErrorMemory()
    for step in steps[:4]:
        single.assign_and_update(*step)
    fingerprint_at_save = single.fingerprint()
    expected = [single.assign_and_update(*step).tolist() for step in steps[4:]]

    if saved_by == 1:
        writer = ErrorMemory()
        for step in steps[:4]:
            writer.assign_and_update(*step)
        writer.save(tmp_path)
    else:
        _continue(lambda rank, gather: _saved_sharded(rank, saved_by, gather, steps[:4], tmp_path), [], saved_by)
    manifest = json.loads((tmp_path / MEMORY_JSON_NAME).read_text())
    assert manifest["num_shards"] == saved_by and manifest["fingerprint"] == fingerprint_at_save
    assert ErrorMemory.load(tmp_path).fingerprint() == fingerprint_at_save  # any shard count reads as one memory

    if loaded_by == 1:
        memory = ErrorMemory.load(tmp_path)
        assert [memory.assign_and_update(*step).tolist() for step in steps[4:]] == expected
        assert memory.state_equal(single)
        return
    results = _continue(
        lambda rank, gather: ShardedErrorMemory.load(tmp_path, rank, loaded_by, gather), steps[4:], loaded_by
    )
    for sizes, fingerprint in results:
        assert sizes == expected and fingerprint == single.fingerprint()


def test_a_format_2_memory_is_split_over_the_processes_that_resume_it():
    """``tests/data/meds_memory_v2`` (written by the one-npz format) loaded by 2 ranks continues as that code did."""
    import sys
    from pathlib import Path

    folder = Path(__file__).parent / "data" / "meds_memory_v2"
    sys.path.insert(0, str(folder.parent))
    try:
        from build_meds_memory_v2 import trace
    finally:
        sys.path.remove(str(folder.parent))
    expected = json.loads((folder / "expected.json").read_text())
    keys, rows, snippets = trace()[2]

    def work(rank, all_gather):
        memory = ShardedErrorMemory.load(folder, rank, 2, all_gather)
        return memory.assign_and_update(keys, rows, snippets).tolist(), memory.num_rows, memory.local.num_keys

    results, errors = run_ranks(2, work)
    assert errors == [None, None]
    assert all(sizes == expected["next_sizes"] and rows_after == expected["rows_after"] for sizes, rows_after, _ in results)
    assert results[0][2] + results[1][2] == len(expected["labels_after"])


def _saved_sharded(rank, world_size, all_gather, steps, folder):
    memory = ShardedErrorMemory(rank, world_size, all_gather)
    for step in steps:
        memory.assign_and_update(*step)
    memory.set_note(steps[0][0][0], "the first prompt")
    memory.save(folder)
    return memory


def test_each_rank_reads_only_its_own_shard_when_the_world_size_is_unchanged(tmp_path, monkeypatch):
    steps = synthetic_trace()
    _continue(lambda rank, gather: _saved_sharded(rank, 2, gather, steps, tmp_path), [], 2)
    assert ErrorMemory.load(tmp_path).note(steps[0][0][0]) == "the first prompt"
    import hf_meds_cliff.meds.memory_shard as shard_module

    opened = []
    real = shard_module._read_shard

    def spy(directory, record, manifest, keep=None):
        opened.append(record["arrays"])
        return real(directory, record, manifest, keep)

    monkeypatch.setattr(shard_module, "_read_shard", spy)
    results = _continue(lambda rank, gather: ShardedErrorMemory.load(tmp_path, rank, 2, gather), [], 2)
    assert sorted(opened) == [shard_file_name(0, 2, "npz"), shard_file_name(1, 2, "npz")]  # one each
    assert len({fingerprint for _, fingerprint in results}) == 1


def test_a_corrupt_shard_stops_every_rank_and_is_named(tmp_path):
    steps = synthetic_trace()
    folder = tmp_path / "checkpoint-1" / "meds_memory"
    _continue(lambda rank, gather: _saved_sharded(rank, 2, gather, steps, folder), [], 2)
    damaged = folder / shard_file_name(1, 2, "npz")
    damaged.write_bytes(damaged.read_bytes()[:200])  # truncated
    _, errors = run_ranks(2, lambda rank, gather: ShardedErrorMemory.load(folder, rank, 2, gather))
    assert all(isinstance(error, ValueError) for error in errors)
    assert all("shard-00001-of-00002.npz does not match" in str(error) for error in errors)
    assert "rank 1" in str(errors[0])  # rank 0's own shard was fine: it names the rank that failed

    damaged.unlink()  # a lost shard makes the checkpoint incomplete for resume_from_checkpoint=True
    (tmp_path / "checkpoint-1" / "trainer_state.json").write_text("{}")
    assert missing_checkpoint_files(tmp_path / "checkpoint-1", ["meds_memory/meds_memory.json"]) == [
        f"meds_memory/{shard_file_name(1, 2, 'npz')}"
    ]


def test_sharded_notes_and_bad_arguments():
    def work(rank, all_gather):
        memory = ShardedErrorMemory(rank, 2, all_gather)
        memory.assign_and_update(["a", "b", "c", "d"], np.eye(4))
        for key in ("a", "b"):
            memory.set_note(key, f"problem {key}")
        with pytest.raises(KeyError, match="'zzz' is not in the memory"):
            memory.set_note("zzz", "x")
        owned = [key for key in "abcd" if memory.owns(key)]
        return owned, [memory.has_note(key) for key in "abcd"], [memory.note(key) for key in owned]

    results, errors = run_ranks(2, work)
    assert errors == [None, None]
    for owned, has_notes, notes in results:
        assert has_notes == [True, True, False, False]
        assert notes == [f"problem {key}" if key in "ab" else None for key in owned]
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 2\), got 2"):
        ShardedErrorMemory(2, 2, lambda obj: [obj])


@pytest.mark.multiprocess
def test_two_processes_split_the_memory_over_gloo(tmp_path):
    """torchrun, 2 CPU processes, torch.distributed (gloo): the toy and the synthetic trace give one memory's sizes;
    a 2-process save resumes on 1 process and a 1-process save on 2."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from helpers import free_port

    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    if not Path(torchrun).exists():
        pytest.skip("torchrun is not available")
    driver = Path(__file__).parent / "multiproc" / "memory_shard_driver.py"

    def launch(output_dir, *extra):
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        command = [torchrun, "--nproc_per_node", "2", "--master_port", str(free_port()), str(driver),
                   "--output_dir", str(output_dir), *extra]  # fmt: skip
        completed = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=300)
        assert completed.returncode == 0, completed.stderr[-4000:]
        return [json.loads((output_dir / f"rank{rank}.json").read_text()) for rank in range(2)]

    steps = synthetic_trace()
    toy, single = ErrorMemory(), ErrorMemory()
    toy_sizes = [toy.assign_and_update(*step).tolist() for step in TOY]
    trace_sizes = [single.assign_and_update(*step).tolist() for step in steps[:4]]
    saved_fingerprint = single.fingerprint()
    single.save(tmp_path / "one-process")
    resumed_sizes = [single.assign_and_update(*step).tolist() for step in steps[4:]]

    ranks = launch(tmp_path / "two")
    for result in ranks:
        assert result["world_size"] == 2
        assert result["toy_sizes"] == toy_sizes and result["trace_sizes"] == trace_sizes
        assert result["fingerprint"] == saved_fingerprint
    assert 0 < ranks[0]["local_keys"] < single.num_keys and ranks[0]["local_keys"] + ranks[1]["local_keys"] == single.num_keys
    # 2 -> 1: the two shards read as one memory continue like the uninterrupted one
    merged = ErrorMemory.load(tmp_path / "two" / "memory")
    assert [merged.assign_and_update(*step).tolist() for step in steps[4:]] == resumed_sizes
    # 1 -> 2: a one-process save, split over two processes
    for result in launch(tmp_path / "resumed", "--resume_from", str(tmp_path / "one-process")):
        assert result["resumed_sizes"] == resumed_sizes and result["fingerprint"] == single.fingerprint()
