"""Crash-safe method state: atomic writes, integrity record, loading errors, resume-checkpoint resolution.

The trainer-level kill/resume tests (a kill simulated at each stage of ``_save_checkpoint``) are in
``test_reliability_checkpoints.py``.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from hf_meds_cliff.checkpointing import (
    check_output_dir,
    latest_complete_checkpoint,
    remove_stale_temporaries,
    resolve_resume_checkpoint,
    write_atomically,
    write_json_atomically,
)
from hf_meds_cliff.meds.memory import MEMORY_JSON_NAME, MEMORY_NPZ_NAME, ErrorMemory, shard_file_name

SHARD_NPZ, SHARD_JSON = shard_file_name(0, 1, "npz"), shard_file_name(0, 1, "json")


def _filled_memory() -> ErrorMemory:
    rng = np.random.default_rng(3)
    memory = ErrorMemory()
    centres = np.repeat(np.eye(4)[:2], 4, axis=0)
    memory.assign_and_update(["a"] * 4 + ["b"] * 4, centres + rng.normal(scale=0.1, size=(8, 4)))
    return memory


# ---------------------------------------------------------------------------------------------- atomic writes


class _Interrupted(BaseException):
    """Stands for a kill: BaseException like KeyboardInterrupt/SystemExit, so no `except Exception` swallows it."""


def test_interrupted_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    write_json_atomically(target, {"step": 1})

    def half_then_kill(handle):
        handle.write(b'{"step": 2, "trunc')
        raise _Interrupted

    with pytest.raises(_Interrupted):
        write_atomically(target, half_then_kill)
    assert json.loads(target.read_text()) == {"step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_memory_save_removes_temporaries_of_a_killed_save(tmp_path):
    # A SIGKILL mid-write leaves the temporary file (no `except` runs): the next save into the folder removes it.
    tmp_path.joinpath(f".{SHARD_NPZ}.abc123.tmp").write_bytes(b"")
    tmp_path.joinpath(f".{MEMORY_JSON_NAME}.def456.tmp").write_bytes(b"{")
    tmp_path.joinpath(f".{SHARD_JSON}.olderstyle").write_bytes(b"")  # earlier versions: no .tmp suffix
    tmp_path.joinpath(".unrelated.tmp").write_bytes(b"keep")
    tmp_path.joinpath(MEMORY_NPZ_NAME).write_bytes(b"format 2")  # an earlier format's file: replaced
    tmp_path.joinpath(shard_file_name(1, 2, "npz")).write_bytes(b"")  # a save with another shard count
    _filled_memory().save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".unrelated.tmp", MEMORY_JSON_NAME, SHARD_JSON, SHARD_NPZ]
    assert remove_stale_temporaries(tmp_path, (SHARD_NPZ,)) == []


def test_memory_kill_between_npz_and_json_is_detected(tmp_path, monkeypatch):
    """The npz is replaced first and the JSON last: a kill in between leaves a new npz next to the old JSON,
    which the integrity record (npz SHA-256 in the JSON) rejects instead of loading a mixed state."""
    _filled_memory().save(tmp_path)
    bigger = _filled_memory()
    bigger.assign_and_update(["c"] * 3, np.eye(4)[:3])

    import hf_meds_cliff.meds.memory as memory_module

    real = memory_module.write_atomically

    def kill_at(name):
        def write(path, content):
            if path.name == name:
                raise _Interrupted
            return real(path, content)

        return write

    # killed before the manifest: the new shard JSON does not match the old manifest's record
    monkeypatch.setattr(memory_module, "write_atomically", kill_at(MEMORY_JSON_NAME))
    with pytest.raises(_Interrupted):
        bigger.save(tmp_path)
    with pytest.raises(ValueError, match=rf"{SHARD_JSON} does not match .*meds_memory.json \(SHA-256"):
        ErrorMemory.load(tmp_path)
    # killed between the shard's npz and its JSON: the new npz does not match the shard JSON's record
    monkeypatch.setattr(memory_module, "write_atomically", real)
    _filled_memory().save(tmp_path)
    monkeypatch.setattr(memory_module, "write_atomically", kill_at(SHARD_JSON))
    with pytest.raises(_Interrupted):
        bigger.save(tmp_path)
    with pytest.raises(ValueError, match=rf"{SHARD_NPZ} does not match .*{SHARD_JSON} \(SHA-256"):
        ErrorMemory.load(tmp_path)


# ---------------------------------------------------------------------------------------------- loading errors


def _saved(tmp_path):
    memory = _filled_memory()
    memory.save(tmp_path)
    return memory, tmp_path / MEMORY_JSON_NAME, tmp_path / SHARD_NPZ


def _rehash(tmp_path):
    """Rewrite the integrity record after an edit, as a careless tool would: only the fingerprints can tell."""
    import hashlib

    shard = json.loads((tmp_path / SHARD_JSON).read_text())
    shard["arrays_sha256"] = hashlib.sha256((tmp_path / SHARD_NPZ).read_bytes()).hexdigest()
    (tmp_path / SHARD_JSON).write_text(json.dumps(shard))
    manifest = json.loads((tmp_path / MEMORY_JSON_NAME).read_text())
    manifest["shards"][0]["header_sha256"] = hashlib.sha256((tmp_path / SHARD_JSON).read_bytes()).hexdigest()
    (tmp_path / MEMORY_JSON_NAME).write_text(json.dumps(manifest))


def test_truncated_npz_names_the_file(tmp_path):
    _, _, npz_path = _saved(tmp_path)
    npz_path.write_bytes(npz_path.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf"{SHARD_NPZ} does not match .*SHA-256"):
        ErrorMemory.load(tmp_path)
    _rehash(tmp_path)  # no integrity record to catch it first: the archive itself is reported
    with pytest.raises(ValueError, match=rf"{SHARD_NPZ} is not a complete memory array file \(BadZipFile"):
        ErrorMemory.load(tmp_path)


def test_npz_from_another_save_is_rejected(tmp_path):
    _, _, npz_path = _saved(tmp_path)
    other = ErrorMemory()
    other.assign_and_update(["a"] * 3, np.eye(4)[:3])
    other.save(tmp_path / "other")
    npz_path.write_bytes((tmp_path / "other" / SHARD_NPZ).read_bytes())
    with pytest.raises(ValueError, match="different saves or one was modified"):
        ErrorMemory.load(tmp_path)
    _rehash(tmp_path)
    with pytest.raises(ValueError, match="does not match the 2 keys|fingerprint differs"):
        ErrorMemory.load(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", r"meds_memory.json is empty"),
        ('{"format_version": 3, "con', r"meds_memory.json is not valid JSON"),
        ("7", r"meds_memory.json must hold a JSON object, got int"),
        (
            '{"format_version": 3, "config": 7, "keys": [], "next_row_id": 0, "num_updates": 0}',
            r"field 'config' must be a JSON dict, got 7",
        ),
        ('{"format_version": 9}', r"format_version 9, this code reads \(1, 2, 3\)"),
    ],
)
def test_malformed_json_names_the_file_and_the_problem(tmp_path, content, message):
    _, json_path, _ = _saved(tmp_path)
    json_path.write_text(content)
    with pytest.raises(ValueError, match=message):
        ErrorMemory.load(tmp_path)


def test_swapped_keys_are_detected_by_the_integrity_record(tmp_path):
    memory, _, _ = _saved(tmp_path)
    shard = json.loads((tmp_path / SHARD_JSON).read_text())
    shard["keys"] = shard["keys"][::-1]
    (tmp_path / SHARD_JSON).write_text(json.dumps(shard))
    with pytest.raises(ValueError, match=rf"{SHARD_JSON} does not match .*SHA-256"):
        ErrorMemory.load(tmp_path)
    _rehash(tmp_path)
    with pytest.raises(ValueError, match="fingerprint differs from the integrity record"):
        ErrorMemory.load(tmp_path)
    shard["keys"] = shard["keys"][::-1]
    (tmp_path / SHARD_JSON).write_text(json.dumps(shard))
    _rehash(tmp_path)
    assert ErrorMemory.load(tmp_path).state_equal(memory)


def test_a_lost_shard_file_is_named(tmp_path):
    _saved(tmp_path)
    (tmp_path / SHARD_NPZ).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{SHARD_NPZ} does not exist, but .*meds_memory.json lists it"):
        ErrorMemory.load(tmp_path)


def test_format_2_folder_written_by_earlier_versions_loads_and_continues_exactly():
    """``tests/data/meds_memory_v2`` was written by the format-2 code (``build_meds_memory_v2.py``), with the sizes
    that code returned for the next call: the loaded memory returns the same, and keeps the same labels."""
    import sys
    from pathlib import Path

    folder = Path(__file__).parent / "data" / "meds_memory_v2"
    sys.path.insert(0, str(folder.parent))
    try:
        from build_meds_memory_v2 import trace
    finally:
        sys.path.remove(str(folder.parent))
    expected = json.loads((folder / "expected.json").read_text())
    memory = ErrorMemory.load(folder)
    assert memory.note(("prompt-0", False)) == "What is 1 + 2?".replace("2", "1")
    keys, rows, snippets = trace()[2]
    assert memory.assign_and_update(keys, rows, snippets).tolist() == expected["next_sizes"]
    for encoded, labels in expected["labels_after"].items():
        assert memory.stored_labels(tuple(json.loads(encoded))).tolist() == labels
    assert memory.num_rows == expected["rows_after"]


def test_format_2_integrity_record_still_checked(tmp_path):
    import shutil
    from pathlib import Path

    folder = tmp_path / "v2"
    shutil.copytree(Path(__file__).parent / "data" / "meds_memory_v2", folder)
    header = json.loads((folder / MEMORY_JSON_NAME).read_text())
    header["keys"] = header["keys"][::-1]
    (folder / MEMORY_JSON_NAME).write_text(json.dumps(header))
    with pytest.raises(ValueError, match="fingerprint differs from the integrity record"):
        ErrorMemory.load(folder)
    (folder / MEMORY_NPZ_NAME).write_bytes((folder / MEMORY_NPZ_NAME).read_bytes()[:100])
    with pytest.raises(ValueError, match=r"meds_memory.npz does not match .*meds_memory.json \(SHA-256"):
        ErrorMemory.load(folder)
    del header["npz_sha256"], header["fingerprint"]
    header["format_version"] = 1  # a version-1 file: no integrity record to catch it first
    (folder / MEMORY_JSON_NAME).write_text(json.dumps(header))
    with pytest.raises(ValueError, match=r"meds_memory.npz is not a complete memory array file \(BadZipFile"):
        ErrorMemory.load(folder)


def test_npz_zip_without_an_array_is_rejected(tmp_path):
    _, _, npz_path = _saved(tmp_path)
    with zipfile.ZipFile(npz_path, "w") as archive:
        archive.writestr("labels.npy", b"")
    _rehash(tmp_path)
    with pytest.raises(ValueError, match=rf"{SHARD_NPZ} is not a complete memory array file"):
        ErrorMemory.load(tmp_path)


# ---------------------------------------------------------------------------------------------- resume argument


def _checkpoint(output_dir, step, complete=True):
    folder = output_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if complete:
        (folder / "trainer_state.json").write_text("{}")
    return folder


def test_resume_true_picks_the_latest_complete_checkpoint(tmp_path, caplog):
    _checkpoint(tmp_path, 2)
    latest = _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 12, complete=False)  # killed while saving
    (tmp_path / "checkpoint-notanumber").mkdir()
    for value in ("true", "True", "latest", True):
        assert resolve_resume_checkpoint(value, tmp_path) == str(latest)
    assert "checkpoint-12" in caplog.text and "trainer_state.json" in caplog.text
    for value in ("false", "False", "", None, False):
        assert resolve_resume_checkpoint(value, tmp_path) is None
    assert resolve_resume_checkpoint(str(tmp_path / "checkpoint-2"), tmp_path) == str(
        tmp_path / "checkpoint-2"
    )


def test_resume_errors_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match=r"no complete checkpoint-N folder .* in output_dir="):
        resolve_resume_checkpoint("true", tmp_path)
    _checkpoint(tmp_path, 3)
    incomplete = _checkpoint(tmp_path, 5, complete=False)
    with pytest.raises(
        ValueError, match=r"has no trainer_state.json.*latest complete one next to it is .*checkpoint-3"
    ):
        resolve_resume_checkpoint(str(incomplete), tmp_path)
    with pytest.raises(ValueError, match="is not a folder"):
        resolve_resume_checkpoint(str(tmp_path / "nope"), tmp_path)
    assert latest_complete_checkpoint(tmp_path / "absent") is None


# ---------------------------------------------------------------------------------------------- output folder


def test_output_dir_under_a_file_is_rejected(tmp_path):
    # Running as root, chmod cannot make a folder unwritable; a path below a regular file cannot be created.
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=r"output_dir='.*a_file/run' is not writable"):
        check_output_dir(blocker / "run", min_free_bytes=0)


def test_output_dir_with_too_little_free_space_is_rejected(tmp_path, monkeypatch):
    from hf_meds_cliff import checkpointing

    assert check_output_dir(tmp_path / "run", min_free_bytes=1) == tmp_path / "run"
    monkeypatch.setattr(checkpointing, "free_bytes", lambda path: 1 << 20)  # a disk with 1 MiB left
    with pytest.raises(
        ValueError, match=r"has 1.0 MiB free, less than the 500 MiB required.*--min_free_disk_mb"
    ):
        check_output_dir(tmp_path / "run", min_free_bytes=500 << 20)
