"""ErrorMemory: exact cluster sizes on hand-made sets, noise policies, eviction, checkpoints, and
equivalence with the reference per-row loop (scikit-learn cosine k-NN + ``hdbscan`` per key)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from hf_meds_cliff.meds import ErrorMemory, hdbscan_labels
from hf_meds_cliff.meds.memory import (
    MEMORY_JSON_NAME,
    RowSnippet,
    _knn_vote,
    shard_file_name,
)

SHARD_NPZ, SHARD_JSON = shard_file_name(0, 1, "npz"), shard_file_name(0, 1, "json")


def unit(degrees: float) -> list[float]:
    radians = np.deg2rad(degrees)
    return [float(np.cos(radians)), float(np.sin(radians))]


# Group A (3 rows) around 2°, group B (2 rows) around 91°, one outlier at 225°. Euclidean MST edges:
# A-A 2°, 2°; B-B 3°; A-B 86°; B-outlier 132°. Cutting from the top: the outlier falls out alone
# (size 1 < 2 ⇒ noise), then {A, B} splits into A and B, both >= 2 rows ⇒ two clusters.
STEP_1 = np.array([unit(a) for a in (0, 2, 4, 90, 93, 225)])


def partition(labels) -> list[int]:
    """Labels renumbered by first appearance (noise stays -1), to compare partitions."""
    numbering: dict[int, int] = {}
    return [-1 if label == -1 else numbering.setdefault(label, len(numbering)) for label in labels]


def test_hand_made_clusters_and_sizes():
    memory = ErrorMemory()
    assert memory.assign_and_update(["q"] * 6, STEP_1).tolist() == [0] * 6  # empty memory
    assert partition(memory.stored_labels("q")) == [0, 0, 0, 1, 1, -1]

    queries = np.array([unit(1), unit(91), unit(220), unit(1)])
    sizes = memory.assign_and_update(["q", "q", "q", "other"], queries)
    # 1° -> A, A, A; 91° -> B, B, then A (87° away) beats the outlier (134°); 220° -> outlier
    # (noise), then B, B: the 2-1 majority is B. A key seen for the first time gets 0.
    assert sizes.tolist() == [3, 2, 2, 0]
    # Refit with the step's rows: the 220° row joins the outlier to form a 2-row cluster.
    assert partition(memory.stored_labels("q")) == [0, 0, 0, 1, 1, 2, 0, 1, 2]
    # Sizes count the stored rows, now including last step's rows (not this step's).
    assert memory.assign_and_update(["q", "q"], np.array([unit(3), unit(3)])).tolist() == [4, 4]


def test_noise_policies_and_single_row():
    for policy, expected in (("cluster", 1), ("ignore", 0)):
        memory = ErrorMemory(knn_k=1, noise_policy=policy)
        memory.assign_and_update(["q"] * 6, STEP_1)
        # The nearest stored row of 220° is the outlier: noise, 1 stored noise row.
        assert memory.assign_and_update(["q"], np.array([unit(220)])).tolist() == [expected]
        assert memory.last_step_stats()["assigned_noise_fraction"] == 1.0

    for policy, expected in (("cluster", 1), ("ignore", 0)):
        memory = ErrorMemory(noise_policy=policy)
        assert memory.assign_and_update(["q"], np.array([unit(10)])).tolist() == [0]
        assert memory.stored_labels("q").tolist() == [-1]  # < 2 rows ⇒ all noise
        # k = min(3, 1 stored row): the single neighbour is noise.
        assert memory.assign_and_update(["q"], np.array([unit(50)])).tolist() == [expected]


def test_knn_vote_tie_breaks():
    stored = np.array([unit(0), unit(10), unit(20), unit(0)])
    query = np.array([unit(1)])
    # Neighbours of 1°: rows 0 and 3 (0°, the older first), then row 1 (10°).
    # 1-1-1 tie among clusters: the nearest neighbour's label.
    assert _knn_vote(query, stored, np.array([5, 1, 2, 7]), 3, -1).tolist() == [5]
    # Noise wins any tie it is part of (the reference's smallest-label rule).
    assert _knn_vote(query, stored, np.array([5, -1, 2, 7]), 3, -1).tolist() == [-1]
    # Rows 0 and 3 are identical: the older one ranks first.
    assert _knn_vote(query, stored, np.array([5, 1, 2, 7]), 1, -1).tolist() == [5]
    # A 2-1 majority beats the nearest row.
    assert _knn_vote(query, stored, np.array([5, 1, 2, 1]), 3, -1).tolist() == [1]


def test_duplicate_keys_in_one_call_use_the_old_memory():
    memory = ErrorMemory()
    rows = np.array([unit(0), unit(1), unit(90), unit(2), unit(91)])
    assert memory.assign_and_update(["a", "b", "a", "a", "b"], rows).tolist() == [0] * 5
    assert partition(memory.stored_labels("a")) == [-1, -1, -1]  # 3 rows: no split survives
    assert memory.stored_features("a").shape == (3, 2)
    # Interleaved keys of one call are each assigned against the memory before the call, so the
    # result does not depend on how the rows are split into calls.
    together = ErrorMemory()
    separately = ErrorMemory()
    for memory_ in (together, separately):
        memory_.assign_and_update(["q"] * 6, STEP_1)
    queries = np.array([unit(1), unit(91), unit(2)])
    joint = together.assign_and_update(["q", "q", "q"], queries)
    copies = [_copy(separately) for _ in range(3)]
    individual = [copies[i].assign_and_update(["q"], queries[i : i + 1])[0] for i in range(3)]
    assert joint.tolist() == individual == [3, 2, 3]


def _copy(memory: ErrorMemory) -> ErrorMemory:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        memory.save(directory)
        return ErrorMemory.load(directory)


def test_empty_call_and_stats():
    memory = ErrorMemory()
    assert memory.assign_and_update([], np.zeros((0, 3))).tolist() == []
    assert memory.num_rows == 0 and memory.num_updates == 0
    memory.assign_and_update(["q"] * 6, STEP_1)
    memory.assign_and_update(["q", "q", "new"], np.array([unit(1), unit(91), unit(5)]))
    stats = memory.last_step_stats()
    assert stats["rows"] == 3 and stats["keys"] == 2 and stats["new_keys"] == 1
    assert stats["assigned_rows"] == 2
    assert stats["mean_cluster_size"] == pytest.approx((3 + 2 + 0) / 3)
    assert stats["max_cluster_size"] == 3
    assert stats["memory_rows"] == 9 and stats["memory_keys"] == 2
    # "q": 8 rows in clusters A (4) and B (3), outlier noise; "new": 1 row, noise.
    assert stats["clusters_per_key"] == pytest.approx((2 + 0) / 2)
    assert stats["noise_fraction"] == pytest.approx(2 / 9)
    assert stats["fit_seconds"] >= 0 and stats["assign_seconds"] >= 0


def test_eviction_drops_oldest_before_refit():
    memory = ErrorMemory(max_rows_per_key=5)
    memory.assign_and_update(["q"] * 3, np.array([unit(0), unit(1), unit(2)]))
    memory.assign_and_update(["q"] * 3, np.array([unit(90), unit(91), unit(93)]))
    assert memory.last_step_stats()["evicted_rows"] == 1
    kept = memory.stored_features("q")
    np.testing.assert_allclose(kept, np.array([unit(a) for a in (1, 2, 90, 91, 93)]))
    labels = memory.stored_labels("q")
    assert partition(labels) == partition(hdbscan_labels(kept)) == [0, 0, 1, 1, 1]
    # 1.5° finds 1° and 2° (and 90°): the 0° row is gone, so its cluster has 2 rows, not 3.
    assert memory.assign_and_update(["q"], np.array([unit(1.5)])).tolist() == [2]
    assert memory.stored_features("q").shape == (5, 2)


def test_save_load_round_trip_and_identical_future(tmp_path):
    rng = np.random.default_rng(7)
    keys = [("p1", True), ("p1", False), ("p2", False), 17, "plain"]

    def batch(step):
        centres = np.repeat(np.eye(6)[:3], 4, axis=0)
        return rng.normal(scale=0.15, size=(12, 6)) + centres, [keys[(i + step) % 5] for i in range(12)]

    uninterrupted = ErrorMemory(noise_policy="ignore")
    steps = [batch(step) for step in range(6)]
    for features, step_keys in steps[:3]:
        uninterrupted.assign_and_update(step_keys, features)
    uninterrupted.save(tmp_path)
    assert all((tmp_path / name).is_file() for name in (SHARD_NPZ, SHARD_JSON, MEMORY_JSON_NAME))
    header = json.loads((tmp_path / MEMORY_JSON_NAME).read_text())
    assert header["config"]["noise_policy"] == "ignore" and header["requires"] == [SHARD_NPZ, SHARD_JSON]
    assert len(json.loads((tmp_path / SHARD_JSON).read_text())["keys"]) == 5

    resumed = ErrorMemory.load(tmp_path)
    assert resumed.fingerprint() == uninterrupted.fingerprint()
    assert resumed.keys() == uninterrupted.keys()
    assert resumed.config() == uninterrupted.config()
    for features, step_keys in steps[3:]:
        expected = uninterrupted.assign_and_update(step_keys, features)
        np.testing.assert_array_equal(resumed.assign_and_update(step_keys, features), expected)
    assert resumed.state_equal(uninterrupted)
    # numpy scalars are the same keys as their Python values
    assert (np.str_("p1"), np.bool_(True)) in resumed and np.int64(17) in resumed

    empty = ErrorMemory(min_cluster_size=3)
    assert ErrorMemory.load(empty.save(tmp_path / "empty")).state_equal(empty)


def test_snippets_follow_their_rows_through_eviction_and_checkpoints(tmp_path):
    memory = ErrorMemory(max_rows_per_key=4)
    first = [RowSnippet(f"answer \\boxed{{{i}}} <b>", step=1, sample=i) for i in range(3)]
    memory.assign_and_update(["q", "q", "r"], np.array([unit(0), unit(1), unit(90)]), snippets=first)
    second = [RowSnippet("é \\boxed{7}", step=2, sample=0), None, RowSnippet("late", step=2, sample=5)]
    memory.assign_and_update(["q", "q", "q"], np.array([unit(2), unit(3), unit(4)]), snippets=second)
    # q got 5 rows, the cap is 4: the oldest row (step 1, sample 0) left with its snippet.
    assert memory.stored_snippets("q") == [first[1], second[0], None, second[2]]
    assert memory.stored_snippets("r") == [first[2]]
    without_snippets = ErrorMemory(max_rows_per_key=4)
    without_snippets.assign_and_update(["q", "q", "r"], np.array([unit(0), unit(1), unit(90)]))
    without_snippets.assign_and_update(["q", "q", "q"], np.array([unit(2), unit(3), unit(4)]))
    assert without_snippets.fingerprint() == memory.fingerprint()  # snippets never change assignments

    memory.set_note("q", "Compute 1 + 2.")
    with pytest.raises(KeyError, match="'nope' is not in the memory"):
        memory.set_note("nope", "x")
    memory.save(tmp_path)
    shard = json.loads((tmp_path / SHARD_JSON).read_text(encoding="utf-8"))
    assert shard["snippets"][0][0] == [1, "answer \\boxed{1} <b>", 1, 1]  # [row id, text, step, sample]
    restored = ErrorMemory.load(tmp_path)
    assert restored.state_equal(memory)
    for key in ("q", "r"):
        assert restored.stored_snippets(key) == memory.stored_snippets(key)
        assert restored.stored_steps(key).tolist() == memory.stored_steps(key).tolist()
    assert memory.stored_steps("q").tolist() == [1, 2, -1, 2]  # from the snippets given (kept or not), -1: none
    assert (restored.note("q"), restored.note("r")) == ("Compute 1 + 2.", None)

    # Saving a memory without snippets into the same folder leaves none behind.
    without_snippets.save(tmp_path)
    assert ErrorMemory.load(tmp_path).stored_snippets("q") == [None] * 4

    memory.save(tmp_path)
    shard["snippets"][0][0] = [1, "edited", 1, 1]
    (tmp_path / SHARD_JSON).write_text(json.dumps(shard))
    with pytest.raises(ValueError, match="shard-00000-of-00001.json does not match .*integrity record"):
        ErrorMemory.load(tmp_path)  # the manifest's integrity record covers the shard's JSON, snippets included
    with pytest.raises(ValueError, match="snippets has 1 entries but features has 2 rows"):
        memory.assign_and_update(["q", "q"], np.array([unit(0), unit(1)]), snippets=[None])
    with pytest.raises(TypeError, match="snippets must be RowSnippet or None, got str"):
        memory.assign_and_update(["q"], np.array([unit(0)]), snippets=["text"])


def test_fingerprint_sees_state_changes():
    first, second = ErrorMemory(), ErrorMemory()
    assert first.fingerprint() == second.fingerprint()
    first.assign_and_update(["q"] * 6, STEP_1)
    second.assign_and_update(["q"] * 6, STEP_1)
    assert first.state_equal(second)
    second.assign_and_update(["q"], np.array([unit(7)]))
    assert not first.state_equal(second)
    assert ErrorMemory(knn_k=5).fingerprint() != ErrorMemory().fingerprint()


def test_bad_input_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="min_cluster_size must be >= 2"):
        ErrorMemory(min_cluster_size=1)
    with pytest.raises(TypeError, match="knn_k must be an int"):
        ErrorMemory(knn_k=2.5)
    with pytest.raises(ValueError, match="noise_policy must be one of"):
        ErrorMemory(noise_policy="drop")
    with pytest.raises(ValueError, match="max_rows_per_key must be >= 1"):
        ErrorMemory(max_rows_per_key=0)
    memory = ErrorMemory()
    with pytest.raises(ValueError, match="keys has 2 entries but features has 3 rows"):
        memory.assign_and_update(["a", "b"], np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"shape \(n, d\)"):
        memory.assign_and_update(["a"], np.zeros(3))
    with pytest.raises(ValueError, match="NaN or inf in rows \\[1\\]"):
        memory.assign_and_update(["a", "a"], np.array([[1.0, 0.0], [np.nan, 1.0]]))
    with pytest.raises(TypeError, match="keys must be str, int, bool or tuples"):
        memory.assign_and_update([("a", 1.5)], np.ones((1, 2)))
    with pytest.raises(TypeError, match="must be hashable"):
        memory.assign_and_update([["a"]], np.ones((1, 2)))
    assert memory.num_rows == 0  # rejected calls leave no state behind
    memory.assign_and_update(["a"], np.ones((1, 2)))
    with pytest.raises(ValueError, match="width 3 but this memory stores width 2"):
        memory.assign_and_update(["a"], np.ones((1, 3)))
    with pytest.raises(FileNotFoundError, match="meds_memory.json does not exist"):
        ErrorMemory.load(tmp_path / "missing")


def _mixture(rng, num_rows, dim=14, num_modes=3):
    centres = rng.normal(size=(num_modes, dim))
    rows = centres[rng.integers(0, num_modes, num_rows)] + rng.normal(scale=0.35, size=(num_rows, dim))
    return rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_labels_match_hdbscan_package(seed):
    hdbscan = pytest.importorskip("hdbscan")
    from sklearn.preprocessing import normalize

    rng = np.random.default_rng(seed)
    for num_rows in (2, 3, 5, 17, 60, 150):
        features = _mixture(rng, num_rows)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = hdbscan.HDBSCAN(min_cluster_size=2, min_samples=1).fit_predict(normalize(features))
        assert partition(hdbscan_labels(features)) == partition(reference)


def _reference_step(state, keys, features, k=3):
    """The reference implementation's per-row loop (recipe/MEDS/layer_logits_utils.py) with its
    vote, returning sizes and, per row, whether the vote was a tie between distinct clusters."""
    import hdbscan
    from sklearn.neighbors import NearestNeighbors
    from sklearn.preprocessing import normalize

    sizes, ambiguous = np.zeros(len(keys), dtype=int), np.zeros(len(keys), dtype=bool)
    groups: dict = {}
    for row, key in enumerate(keys):
        groups.setdefault(key, []).append(row)
    for key, rows in groups.items():
        vectors, labels = state.setdefault(key, ([], []))
        if labels:
            stored, stored_labels = np.stack(vectors), np.array(labels)
            for row in rows:
                nn = NearestNeighbors(n_neighbors=min(k, len(stored)), metric="cosine", algorithm="brute")
                nn.fit(stored)
                neighbours = stored_labels[nn.kneighbors(features[row][None])[1][0]]
                unique, counts = np.unique(neighbours, return_counts=True)
                label = unique[np.argmax(counts)]
                tied = unique[counts == counts.max()]
                ambiguous[row] = len(tied) > 1 and -1 not in tied
                sizes[row] = int(np.sum(stored_labels == label))
        vectors.extend(features[rows])
        if len(vectors) < 2:
            labels[:] = [-1] * len(vectors)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fitted = hdbscan.HDBSCAN(min_cluster_size=2, min_samples=1).fit_predict(
                    normalize(np.stack(vectors))
                )
            labels[:] = fitted.tolist()
    return sizes, ambiguous


def test_matches_reference_loop_over_steps():
    pytest.importorskip("hdbscan")
    rng = np.random.default_rng(3)
    memory, state = ErrorMemory(), {}
    keys_per_step = 4
    compared = 0
    centres = {key: rng.normal(size=(3, 14)) for key in range(keys_per_step)}
    for step in range(8):
        keys = [(f"p{key}", bool(step % 2)) for key in range(keys_per_step) for _ in range(6)]
        features = np.stack(
            [centres[int(k[0][1:])][rng.integers(0, 3)] + rng.normal(scale=0.3, size=14) for k in keys]
        )
        ours = memory.assign_and_update(keys, features)
        reference, ambiguous = _reference_step(state, keys, features)
        np.testing.assert_array_equal(ours[~ambiguous], reference[~ambiguous])
        compared += int((~ambiguous).sum())
        for key in set(keys):
            assert partition(memory.stored_labels(key)) == partition(state[key][1])
    assert compared >= 150
    assert memory.num_rows == 8 * 24


def test_incremental_fit_equals_fit_from_scratch():
    rng = np.random.default_rng(11)
    memory = ErrorMemory()
    for _ in range(12):
        memory.assign_and_update(["q"] * 16, _mixture(rng, 16))
        labels = memory.stored_labels("q")
        assert partition(labels) == partition(hdbscan_labels(memory.stored_features("q")))
    assert len(set(labels.tolist()) - {-1}) >= 2


def test_min_samples_two_uses_mutual_reachability():
    # Rows at 0°, 1° | 60°, 61° | 200°, 202°, 203°. With min_samples=2 a row's core distance is its
    # second nearest other row: ~60° for each of the first four, ~3° for the last three. Mutual
    # reachability then joins 1°-60° at 59° before 0°-1° and 60°-61° (both at 60°), so the first four
    # rows fall out one at a time and never split into two pairs: one 4-row cluster plus the tight
    # triple. With min_samples=1 (plain euclidean) the three pairs are three clusters instead, so
    # this data tells the two settings apart.
    rows = np.array([unit(a) for a in (0, 1, 60, 61, 200, 202, 203)])
    two_clusters, three_clusters = [0, 0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2, 2]
    memory = ErrorMemory(min_samples=2)
    memory.assign_and_update(["q"] * 7, rows)
    assert partition(memory.stored_labels("q")) == two_clusters
    assert partition(hdbscan_labels(rows, min_samples=2)) == two_clusters
    assert partition(hdbscan_labels(rows, min_samples=1)) == three_clusters
    plain = ErrorMemory(min_samples=1)
    plain.assign_and_update(["q"] * 7, rows)
    assert partition(plain.stored_labels("q")) == three_clusters

    hdbscan = pytest.importorskip("hdbscan")
    from sklearn.preprocessing import normalize

    for min_samples, expected in ((2, two_clusters), (1, three_clusters)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = hdbscan.HDBSCAN(min_cluster_size=2, min_samples=min_samples).fit_predict(
                normalize(rows)
            )
        assert partition(reference) == expected


def test_extended_spanning_tree_is_a_minimum_spanning_tree():
    from hf_meds_cliff.meds.memory import _dense_spanning_tree, _extend_spanning_tree, _normalise_rows

    rng = np.random.default_rng(5)
    points = _normalise_rows(_mixture(rng, 90))
    tree = _dense_spanning_tree(points[:70], np.zeros(70))
    for num_old, num_new in ((70, 16), (86, 4)):
        tree = _extend_spanning_tree(points[: num_old + num_new], tree, num_old)
        full = _dense_spanning_tree(points[: num_old + num_new], np.zeros(num_old + num_new))
        np.testing.assert_allclose(np.sort(tree[:, 2]), np.sort(full[:, 2]), rtol=0, atol=1e-15)
        edges = {tuple(sorted(map(int, edge[:2]))) for edge in tree}
        assert edges == {tuple(sorted(map(int, edge[:2]))) for edge in full}


def test_import_is_light_and_tensors_are_accepted():
    import subprocess
    import sys

    code = (
        "import sys; from hf_meds_cliff.meds import ErrorMemory, shape_rewards, top1_eigen_ratio; "
        "print(sorted(m for m in ('trl', 'fast_hdbscan', 'torch') if m in sys.modules))"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "[]"

    torch = pytest.importorskip("torch")
    from_tensor, from_array = ErrorMemory(), ErrorMemory()
    from_tensor.assign_and_update(["q"] * 6, torch.tensor(STEP_1, dtype=torch.float32))
    from_array.assign_and_update(["q"] * 6, STEP_1.astype(np.float32))
    assert from_tensor.state_equal(from_array)


def test_a_failing_fit_leaves_the_memory_unchanged(monkeypatch):
    import hf_meds_cliff.meds.memory as memory_module

    memory = ErrorMemory()
    memory.assign_and_update(["a"] * 6 + ["b"] * 6, np.concatenate([STEP_1, STEP_1[::-1]]))
    before = memory.fingerprint()
    real = memory_module.labels_from_spanning_tree
    calls = []

    def fails_on_second_key(tree, min_cluster_size):
        calls.append(tree.shape[0])
        if len(calls) == 2:
            raise RuntimeError("fast_hdbscan went away")
        return real(tree, min_cluster_size)

    monkeypatch.setattr(memory_module, "labels_from_spanning_tree", fails_on_second_key)
    with pytest.raises(RuntimeError, match="went away"):
        memory.assign_and_update(["a", "b", "c"], np.array([unit(1), unit(2), unit(3)]))
    assert memory.fingerprint() == before and memory.num_updates == 1
    monkeypatch.setattr(memory_module, "labels_from_spanning_tree", real)
    assert memory.assign_and_update(["a", "b"], np.array([unit(1), unit(1)])).tolist() == [3, 3]


def test_a_cold_numba_cache_is_announced_once_before_the_first_compile(monkeypatch, caplog):
    """A first run on a machine compiles the clustering routines with no output of numba's own: say so, once."""
    import logging

    from hf_meds_cliff.meds import clustering

    for cache_exists, expected in ((True, 0), (False, 1)):
        monkeypatch.setattr(clustering, "_ANNOUNCED", False)
        monkeypatch.setattr(clustering.os.path, "exists", lambda path, cache_exists=cache_exists: cache_exists)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.clustering"):
            ErrorMemory().assign_and_update(["q", "q"], np.eye(2))
            ErrorMemory().assign_and_update(["q", "q"], np.eye(2))  # once per process
        assert sum("compiling its numba routines" in r.getMessage() for r in caplog.records) == expected
