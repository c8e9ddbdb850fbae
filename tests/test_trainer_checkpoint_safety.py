"""What the trainers guarantee to a TRL user who calls ``train()`` and ``save_model()`` directly:

- ``train(resume_from_checkpoint=True)`` resumes from the newest *complete* checkpoint, skipping (with a warning
  naming it) a newer one whose save was killed, as the scripts do; transformers' own lookup would take the
  killed one and fail on its missing ``trainer_state.json``.
- ``training_args.bin`` (every checkpoint, the final model, the folder ``push_to_hub`` uploads) holds no secret,
  while the upload itself still authenticates with ``hub_token``.

Checkpoints are written and killed as in ``test_reliability_checkpoints.py`` (a ``BaseException`` raised by one
write of ``_save_checkpoint``), on the untrained toy model.
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest
import torch
from test_reliability_checkpoints import (
    CPU,
    Killed,
    _cliff_trainer,
    _grow_memory,
    _kill_at,
    _save,
    zero_reward,
)

from hf_meds_cliff.cliff.config import CliffConfig
from hf_meds_cliff.dapo import DAPOConfig, DAPOTrainer
from hf_meds_cliff.meds.config import MEDSConfig
from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
from hf_meds_cliff.redaction import is_secret_option

HUB_TOKEN = "hf_" + "Q" * 34
TEACHER_KEY = "sk-" + "Z" * 40


@dataclass
class ConfigWithTeacherKey(MEDSConfig):
    """A user's config with one more secret field (as a teacher API key would be)."""

    teacher_api_key: str | None = field(default=None, metadata={"help": "API key of a hosted teacher."})


def _toy_trainer(trainer_cls, config_cls, output_dir, **overrides):
    from hf_meds_cliff.toy import build_toy_model, build_toy_tokenizer, make_toy_dataset

    tokenizer = build_toy_tokenizer()
    settings = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 16,
        "max_steps": 4,
        "save_total_limit": 1,
        "save_strategy": "no",
        **CPU,
        **overrides,
    }
    return trainer_cls(
        model=build_toy_model(tokenizer, seed=0),
        reward_funcs=[zero_reward],
        args=config_cls(**settings),
        train_dataset=make_toy_dataset("train", 4, seed=0),
        processing_class=tokenizer,
    )


def _build(kind, output_dir, **overrides):
    if kind == "cliff":
        return _cliff_trainer(output_dir, save_strategy="no", **overrides)
    trainer_cls, config_cls = (MEDSGRPOTrainer, MEDSConfig) if kind == "meds" else (DAPOTrainer, DAPOConfig)
    trainer = _toy_trainer(trainer_cls, config_cls, output_dir, **overrides)
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    return trainer


def _write_method_state(kind, trainer, step):
    if kind == "meds":
        _grow_memory(trainer, step)  # rows under the key "prompt-<step % 2>"
    elif kind == "cliff":
        trainer.cliff_judge.references[f"p{step}"] = f"reference of step {step}"


def _method_module(kind):
    if kind == "meds":
        import hf_meds_cliff.meds.memory as module
    elif kind == "cliff":
        import hf_meds_cliff.cliff.trainer as module
    else:
        return None, None
    return module, "meds_memory.json" if kind == "meds" else "cliff_state.json"


# ------------------------------------------------------------------------------------------------------- resume


@pytest.mark.parametrize("kind", ["meds", "cliff", "dapo"])
def test_train_resume_true_skips_a_checkpoint_killed_mid_save(tmp_path, monkeypatch, caplog, kind):
    from transformers.trainer_utils import get_last_checkpoint

    run = tmp_path / "run"
    first = _build(kind, run)
    _write_method_state(kind, first, 1)
    _save(first, 1)
    _write_method_state(kind, first, 2)
    module, method_file = _method_module(kind)
    with monkeypatch.context() as patch:
        # killed just before trainer_state.json: method state, model, optimizer and RNG state are all there
        _kill_at("trainer_state", patch, first, module, method_file)
        with pytest.raises(Killed):
            _save(first, 2)
    assert not (run / "checkpoint-2" / "trainer_state.json").exists()
    assert get_last_checkpoint(str(run)) == str(run / "checkpoint-2")  # what transformers alone would resume

    resumed = _build(kind, run, max_steps=2)
    with pytest.raises(
        ValueError, match=r"checkpoint-2.* has no trainer_state.json.*next to it is .*checkpoint-1"
    ):
        resumed.train(resume_from_checkpoint=str(run / "checkpoint-2"))  # a folder must be complete

    loaded = []
    real_load = resumed._load_optimizer_and_scheduler

    def recording_load(checkpoint):
        loaded.append(checkpoint)
        return real_load(checkpoint)

    monkeypatch.setattr(resumed, "_load_optimizer_and_scheduler", recording_load)
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.checkpointing"):
        resumed.train(resume_from_checkpoint=True)

    assert loaded == [str(run / "checkpoint-1")]
    assert f"Skipping {run / 'checkpoint-2'}: it has no trainer_state.json" in caplog.text
    assert resumed.state.global_step == 2  # one step trained after the restored step 1
    if (
        kind == "meds"
    ):  # the memory of checkpoint-1 (key prompt-1), not the killed one's (which adds prompt-0)
        assert len(resumed.meds_memory.stored_features("prompt-1")) == 4
        assert "prompt-0" not in resumed.meds_memory.keys()  # noqa: SIM118 - a method, not a dict
    elif kind == "cliff":
        assert resumed.cliff_judge.references["p1"] == "reference of step 1"
        assert "p2" not in resumed.cliff_judge.references


def test_train_resume_true_without_a_complete_checkpoint_names_the_fix(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-3").mkdir(parents=True)  # a save killed before trainer_state.json
    trainer = _build("dapo", run)
    with pytest.raises(ValueError, match=r"no complete checkpoint-N folder .* in output_dir=.*run"):
        trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 0


# ------------------------------------------------------------------------------------------ training_args.bin


def test_config_fields_marked_secret_are_only_the_hub_token():
    """Every field whose name marks a secret is written as None: a new setting named like one would be lost."""
    for config_cls in (MEDSConfig, CliffConfig, DAPOConfig):
        flagged = {f.name for f in dataclasses.fields(config_cls) if is_secret_option(f.name)}
        assert flagged == {"hub_token"}, (config_cls.__name__, flagged)


def test_training_args_bin_has_no_secret_and_the_upload_still_has_the_token(tmp_path, monkeypatch):
    import transformers.trainer as transformers_trainer

    run = tmp_path / "run"
    trainer = _toy_trainer(
        MEDSGRPOTrainer, ConfigWithTeacherKey, run, hub_token=HUB_TOKEN, teacher_api_key=TEACHER_KEY
    )
    trainer.create_optimizer_and_scheduler(num_training_steps=4)
    uploads = []

    class FakeHubApi:  # what push_to_hub's checkpoint upload gets: its token and the files at that moment
        def upload_folder(self, folder_path, token=None, **kwargs):
            uploads.append((token, (run / "training_args.bin").read_bytes()))
            done = Future()
            done.set_result(None)
            return done

    monkeypatch.setattr(transformers_trainer, "hf_api", FakeHubApi)
    # push_to_hub=True without the repo creation of Trainer.__init__ (no network)
    trainer.args.push_to_hub, trainer.hub_model_id, trainer.push_in_progress = True, "someone/toy", None
    _save(
        trainer, 1
    )  # checkpoint-1/training_args.bin, then the push writes run/training_args.bin and uploads
    trainer.save_model(str(tmp_path / "final"))  # final/training_args.bin

    assert uploads and all(token == HUB_TOKEN for token, _ in uploads)
    secrets = {"hub_token", "teacher_api_key"}
    for path in (run / "checkpoint-1", tmp_path / "final", run):
        data = (path / "training_args.bin").read_bytes()
        assert HUB_TOKEN.encode() not in data and TEACHER_KEY.encode() not in data, path
        saved = torch.load(path / "training_args.bin", weights_only=False)
        assert type(saved) is ConfigWithTeacherKey
        assert saved.hub_token is None and saved.teacher_api_key is None
        for setting in dataclasses.fields(saved):
            if setting.name not in secrets:
                assert getattr(saved, setting.name) == getattr(trainer.args, setting.name), setting.name
    assert uploads[0][1] == (run / "training_args.bin").read_bytes()  # the uploaded file is that one
    # in memory nothing changed
    assert trainer.args.hub_token == HUB_TOKEN and trainer.args.teacher_api_key == TEACHER_KEY
    assert type(trainer.args) is ConfigWithTeacherKey
