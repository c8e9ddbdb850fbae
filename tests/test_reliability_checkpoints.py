"""Kill/resume of MEDS and Cliff checkpoints: a kill simulated at each stage of ``_save_checkpoint``, then a resume.

A kill is simulated by making one write of the save raise a ``BaseException`` (no ``except Exception`` in
transformers swallows it, like a SIGKILL nothing after it runs). ``save_total_limit=1`` makes rotation delete the
previous checkpoint as soon as a new one is complete, the setting in which a lost memory cannot be recovered.
The trainers are built on the untrained toy model (no warm-up) and the checkpoints are written by calling
``_save_checkpoint`` directly, so no training step runs.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, load_module

from hf_meds_cliff.checkpointing import resolve_resume_checkpoint
from hf_meds_cliff.meds.config import MEDSConfig
from hf_meds_cliff.meds.memory import ErrorMemory, shard_file_name
from hf_meds_cliff.meds.trainer import MEMORY_DIRNAME, MEDSGRPOTrainer

SHARD_NPZ, SHARD_JSON = shard_file_name(0, 1, "npz"), shard_file_name(0, 1, "json")

CPU = {"bf16": False, "use_cpu": True, "report_to": [], "seed": 0}
STAGES = ("method_state", "model", "trainer_state", "rotation")


class Killed(BaseException):
    """Stands for SIGKILL at a chosen moment."""


def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


def _meds_trainer(output_dir, **overrides) -> MEDSGRPOTrainer:
    from hf_meds_cliff.toy import build_toy_model, build_toy_tokenizer, make_toy_dataset

    tokenizer = build_toy_tokenizer()
    settings = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 16,
        "max_steps": 4,
        "save_total_limit": 1,
        **CPU,
        **overrides,
    }
    trainer = MEDSGRPOTrainer(
        model=build_toy_model(tokenizer, seed=0),
        reward_funcs=[zero_reward],
        args=MEDSConfig(**settings),
        train_dataset=make_toy_dataset("train", 4, seed=0),
        processing_class=tokenizer,
    )
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    return trainer


def _feature_width(trainer) -> int:
    return len(trainer._meds_layer_indices) - int(trainer.args.meds_use_layer_diff)


def _grow_memory(trainer, step, width=None):
    rng = np.random.default_rng(step)
    width = width or _feature_width(trainer)
    trainer.meds_memory.assign_and_update([f"prompt-{step % 2}"] * 4, rng.normal(size=(4, width)))
    return trainer.meds_memory.fingerprint()


def _save(trainer, step):
    trainer.state.global_step = step
    trainer.state.train_batch_size = trainer._train_batch_size  # what train() records before its first step
    trainer._save_checkpoint(trainer.model, trial=None)


def _kill_at(stage, monkeypatch, trainer, method_module, method_file):
    """Make the write of ``stage`` raise Killed (the MEDS or Cliff method-state file, the model, trainer_state.json,
    or the rotation of older checkpoints)."""
    import transformers.trainer as transformers_trainer
    from transformers.trainer_callback import TrainerState

    def killed(*args, **kwargs):
        raise Killed(stage)

    if stage == "method_state":
        # meds/memory.py writes with its imported write_atomically; the Cliff trainer through checkpointing's own
        # (save_checkpoint_json -> write_json_atomically -> write_atomically)
        attribute = "write_atomically"
        real = getattr(method_module, attribute)

        def kill_on_method_file(path, *args, **kwargs):
            if path.name == method_file:
                raise Killed(stage)
            return real(path, *args, **kwargs)

        monkeypatch.setattr(method_module, attribute, kill_on_method_file)
    elif stage == "model":
        monkeypatch.setattr(trainer, "save_model", killed)
    elif stage == "trainer_state":
        monkeypatch.setattr(TrainerState, "save_to_json", killed)
    else:
        monkeypatch.setattr(transformers_trainer, "rotate_checkpoints", killed)


@pytest.mark.parametrize("stage", STAGES)
def test_meds_kill_at_each_stage_of_a_checkpoint_then_resume(tmp_path, monkeypatch, stage):
    import hf_meds_cliff.meds.memory as memory_module

    trainer = _meds_trainer(tmp_path / "run")
    first = _grow_memory(trainer, 1)
    _save(trainer, 1)
    second = _grow_memory(trainer, 2)
    with monkeypatch.context() as patch:
        _kill_at(stage, patch, trainer, memory_module, "meds_memory.json")
        with pytest.raises(Killed):
            _save(trainer, 2)

    new, old = tmp_path / "run" / "checkpoint-2", tmp_path / "run" / "checkpoint-1"
    if stage != "method_state":  # the memory is written before anything of TRL's
        assert ErrorMemory.load(new / MEMORY_DIRNAME).fingerprint() == second
    assert old.is_dir(), "the previous checkpoint must survive until the new one is complete"
    assert not [p.name for p in new.rglob("*.tmp")], "no temporary file of an atomic write may stay behind"
    expected_checkpoint, expected_memory = (new, second) if stage == "rotation" else (old, first)
    checkpoint = resolve_resume_checkpoint("true", tmp_path / "run")
    assert checkpoint == str(expected_checkpoint)

    resumed = _meds_trainer(tmp_path / "run")
    resumed._load_optimizer_and_scheduler(checkpoint)
    assert resumed.meds_memory.fingerprint() == expected_memory


def test_meds_resume_without_valid_memory_is_an_error_unless_allowed(tmp_path, caplog):
    trainer = _meds_trainer(tmp_path / "run")
    _grow_memory(trainer, 1)
    _save(trainer, 1)
    checkpoint = tmp_path / "run" / "checkpoint-1"
    npz = checkpoint / MEMORY_DIRNAME / SHARD_NPZ
    npz.write_bytes(npz.read_bytes()[:64])  # truncated by a full disk
    resumed = _meds_trainer(tmp_path / "run")
    with pytest.raises(
        ValueError, match=r"Cannot resume MEDS from .*checkpoint-1.*shard-00000-of-00001.npz does not match"
    ):
        resumed._load_optimizer_and_scheduler(str(checkpoint))

    for path in (checkpoint / MEMORY_DIRNAME).iterdir():
        path.unlink()  # an empty meds_memory/ (the old "FileNotFoundError" case) ...
    with pytest.raises(
        ValueError, match=r"checkpoint-1.*meds_memory.json does not exist.*--resume_from_checkpoint"
    ):
        resumed._load_optimizer_and_scheduler(str(checkpoint))
    (
        checkpoint / MEMORY_DIRNAME
    ).rmdir()  # ... and no meds_memory/ at all (the old silent restart): both errors
    # through the real training loop, before any step runs
    with pytest.raises(ValueError, match="--meds_allow_empty_memory_on_resume true"):
        resumed.train(resume_from_checkpoint=str(checkpoint))

    allowed = _meds_trainer(tmp_path / "run", meds_allow_empty_memory_on_resume=True)
    allowed._load_optimizer_and_scheduler(str(checkpoint))
    assert allowed.meds_memory.num_rows == 0
    assert "EMPTY error memory" in caplog.text


def test_meds_memory_of_another_feature_width_is_rejected_at_load(tmp_path):
    trainer = _meds_trainer(tmp_path / "run")
    width = _feature_width(trainer)
    _grow_memory(trainer, 1, width=width + 1)  # e.g. written with another meds_num_layers
    _save(trainer, 1)
    resumed = _meds_trainer(tmp_path / "run")
    with pytest.raises(
        ValueError, match=rf"stores {width + 1}-wide features, but this run computes {width}-wide"
    ):
        resumed._load_optimizer_and_scheduler(str(tmp_path / "run" / "checkpoint-1"))


# ---------------------------------------------------------------------------------------------------------- Cliff


def _cliff_trainer(output_dir, **overrides):
    driver = load_module(ROOT / "tests" / "multiproc" / "cliff_driver.py", "cliff_driver")
    trainer = driver.build_trainer(
        str(output_dir), 4, steps=4, num_prompts=4, **{"save_total_limit": 1, **overrides}
    )
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    return trainer


@pytest.mark.parametrize("stage", STAGES)
def test_cliff_kill_at_each_stage_of_a_checkpoint_then_resume(tmp_path, monkeypatch, stage):
    import hf_meds_cliff.checkpointing as cliff_writer_module  # the Cliff trainer saves with save_checkpoint_json

    trainer = _cliff_trainer(tmp_path / "run")
    trainer.cliff_judge.references["p1"] = "first"
    _save(trainer, 1)
    trainer.cliff_judge.references["p2"] = "second"
    with monkeypatch.context() as patch:
        _kill_at(stage, patch, trainer, cliff_writer_module, "cliff_state.json")
        with pytest.raises(Killed):
            _save(trainer, 2)

    new, old = tmp_path / "run" / "checkpoint-2", tmp_path / "run" / "checkpoint-1"
    if stage != "method_state":
        assert json.loads((new / "cliff_state.json").read_text())["references"] == {
            "p1": "first",
            "p2": "second",
        }
    assert old.is_dir()
    assert not [p.name for p in new.rglob("*.tmp")]
    expected = (new, {"p1", "p2"}) if stage == "rotation" else (old, {"p1"})
    checkpoint = resolve_resume_checkpoint("true", tmp_path / "run")
    assert checkpoint == str(expected[0])
    resumed = _cliff_trainer(tmp_path / "run")
    resumed._load_optimizer_and_scheduler(checkpoint)
    assert set(resumed.cliff_judge.references) == expected[1]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"cliff_state.json does not exist"),
        ('{"version": 1, "refer', r"cliff_state.json is not valid JSON"),
        ('{"version": 1, "references": 3, "judgments": {}}', r"'references' must map prompt keys"),
    ],
)
def test_cliff_resume_without_valid_state_is_an_error_unless_allowed(tmp_path, caplog, content, message):
    trainer = _cliff_trainer(tmp_path / "run")
    _save(trainer, 1)
    state = tmp_path / "run" / "checkpoint-1" / "cliff_state.json"
    if content is None:
        state.unlink()
    else:
        state.write_text(content)
    resumed = _cliff_trainer(tmp_path / "run")
    with pytest.raises(
        ValueError, match=rf"Cannot resume Cliff from .*checkpoint-1.*{message}.*allow_missing_state"
    ):
        resumed._load_optimizer_and_scheduler(str(state.parent))
    allowed = _cliff_trainer(tmp_path / "run", cliff_allow_missing_state_on_resume=True)
    allowed._load_optimizer_and_scheduler(str(state.parent))
    assert allowed.cliff_judge.references == {} and "EMPTY Cliff caches" in caplog.text


KILLED_SAVE = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
import torch
torch.set_num_threads(1)
import hf_meds_cliff.meds.memory as memory_module
from test_reliability_checkpoints import _grow_memory, _meds_trainer, _save

trainer = _meds_trainer(sys.argv[1])
print(_grow_memory(trainer, 1), flush=True)
_save(trainer, 1)
_grow_memory(trainer, 2)
real = memory_module.write_atomically

def die_halfway_through_the_json(path, write):
    if path.name != "meds_memory.json":
        return real(path, write)

    def half_then_sigkill(handle):
        handle.write(b'{"format_version": 2, "con')
        handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    return real(path, half_then_sigkill)

memory_module.write_atomically = die_halfway_through_the_json
_save(trainer, 2)
"""


@pytest.mark.slow
def test_meds_sigkill_while_saving_the_memory_then_resume_true(tmp_path):
    """A real SIGKILL (no cleanup code runs) in the middle of the memory's JSON write at checkpoint 2."""
    run = tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_SAVE, str(run), str(ROOT / "tests")],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    first = killed.stdout.split()[0]
    memory_dir = run / "checkpoint-2" / MEMORY_DIRNAME
    leftovers = [p.name for p in memory_dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers and leftovers[0].startswith(".meds_memory.json.")  # what a kill leaves behind
    assert not (run / "checkpoint-2" / "trainer_state.json").exists()

    checkpoint = resolve_resume_checkpoint("true", run)
    assert checkpoint == str(run / "checkpoint-1")
    resumed = _meds_trainer(run)
    resumed._load_optimizer_and_scheduler(checkpoint)
    assert resumed.meds_memory.fingerprint() == first
    _save(resumed, 2)  # the resumed run reaches step 2 again: its save replaces the debris
    assert sorted(p.name for p in memory_dir.iterdir()) == ["meds_memory.json", SHARD_JSON, SHARD_NPZ]
    assert resolve_resume_checkpoint("true", run) == str(run / "checkpoint-2")


# ------------------------------------------------------------- resume_from_checkpoint=True after lost method state


class StopAfterLoad(BaseException):
    """Ends train() right after the checkpoint's state is loaded (no training step runs)."""


def _resume_true_and_stop(trainer, monkeypatch):
    """``trainer.train(resume_from_checkpoint=True)`` through the real training loop, stopped right after the
    trainer loaded a checkpoint; returns the folder it loaded."""
    loaded = []
    real = type(trainer)._load_optimizer_and_scheduler

    def load_then_stop(self, checkpoint):
        real(self, checkpoint)
        loaded.append(checkpoint)
        raise StopAfterLoad

    monkeypatch.setattr(type(trainer), "_load_optimizer_and_scheduler", load_then_stop)
    with pytest.raises(StopAfterLoad):
        trainer.train(resume_from_checkpoint=True)
    return loaded[0]


@pytest.mark.parametrize("lost", [SHARD_NPZ, SHARD_JSON, "meds_memory.json", "the whole folder"])
def test_meds_train_resume_true_skips_a_checkpoint_whose_memory_was_lost(tmp_path, monkeypatch, caplog, lost):
    import shutil

    trainer = _meds_trainer(tmp_path / "run", save_total_limit=2)
    first = _grow_memory(trainer, 1)
    _save(trainer, 1)
    _grow_memory(trainer, 2)
    _save(trainer, 2)
    damaged = tmp_path / "run" / "checkpoint-2" / MEMORY_DIRNAME
    if lost == "the whole folder":
        shutil.rmtree(damaged)
    else:
        (damaged / lost).unlink()

    resumed = _meds_trainer(tmp_path / "run", save_total_limit=2)
    checkpoint = _resume_true_and_stop(resumed, monkeypatch)
    assert checkpoint == str(tmp_path / "run" / "checkpoint-1")
    assert resumed.meds_memory.fingerprint() == first
    assert "Skipping" in caplog.text and "checkpoint-2" in caplog.text and "meds_memory/" in caplog.text


def test_meds_train_resume_true_with_no_intact_memory_names_the_folder_and_the_fix(tmp_path):
    trainer = _meds_trainer(tmp_path / "run")
    _grow_memory(trainer, 1)
    _save(trainer, 1)
    (tmp_path / "run" / "checkpoint-1" / MEMORY_DIRNAME / SHARD_NPZ).unlink()
    resumed = _meds_trainer(tmp_path / "run")
    with pytest.raises(ValueError, match=r"no complete checkpoint-N folder \(one with trainer_state.json, "
                       r"meds_memory/meds_memory.json\).*--resume_from_checkpoint PATH"):
        resumed.train(resume_from_checkpoint=True)


def test_meds_train_resume_true_with_an_empty_memory_allowed_takes_the_newest(tmp_path, monkeypatch):
    trainer = _meds_trainer(tmp_path / "run", save_total_limit=2)
    _grow_memory(trainer, 1)
    _save(trainer, 1)
    _save(trainer, 2)
    (tmp_path / "run" / "checkpoint-2" / MEMORY_DIRNAME / SHARD_NPZ).unlink()
    allowed = _meds_trainer(tmp_path / "run", save_total_limit=2, meds_allow_empty_memory_on_resume=True)
    assert _resume_true_and_stop(allowed, monkeypatch) == str(tmp_path / "run" / "checkpoint-2")
    assert allowed.meds_memory.num_rows == 0


def test_cliff_train_resume_true_skips_a_checkpoint_whose_judge_cache_was_lost(tmp_path, monkeypatch, caplog):
    trainer = _cliff_trainer(tmp_path / "run", save_total_limit=2)
    trainer.cliff_judge.references["p1"] = "first"
    _save(trainer, 1)
    trainer.cliff_judge.references["p2"] = "second"
    _save(trainer, 2)
    (tmp_path / "run" / "checkpoint-2" / "cliff_state.json").unlink()

    resumed = _cliff_trainer(tmp_path / "run", save_total_limit=2)
    assert _resume_true_and_stop(resumed, monkeypatch) == str(tmp_path / "run" / "checkpoint-1")
    assert set(resumed.cliff_judge.references) == {"p1"}
    assert "Skipping" in caplog.text and "cliff_state.json" in caplog.text
