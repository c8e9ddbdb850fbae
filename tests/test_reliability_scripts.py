"""Scripts: ``--resume_from_checkpoint true/false/PATH``, the output-folder check before training, and secrets kept
out of model cards and logs."""

from __future__ import annotations

import logging
import sys

import pytest
from helpers import load_script

from hf_meds_cliff import checkpointing
from hf_meds_cliff.model_card import reproduce_command
from hf_meds_cliff.redaction import REDACTED, redact_argv, redact_secrets_in_logs

SCRIPTS = ("train_meds", "train_cliff", "train_grpo")
HUB_TOKEN = "hf_" + "Q" * 34


def _parse(script: str, *argv: str):
    module = load_script(script)
    parse = getattr(module, "parse_args", None)
    if parse is None:  # train_meds / train_grpo parse in their __main__ block with parse_script_args
        from hf_meds_cliff.dapo import DAPOConfig
        from hf_meds_cliff.meds.config import MEDSConfig
        from hf_meds_cliff.script_utils import parse_script_args

        config, method = {"train_meds": (MEDSConfig, "meds"), "train_grpo": (DAPOConfig, "grpo")}[script]
        return module, parse_script_args(config, method, list(argv))
    return module, parse(list(argv))


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_understands_resume_true_before_loading_a_model(tmp_path, script, monkeypatch):
    from hf_meds_cliff import script_utils

    def no_model(*args, **kwargs):
        raise AssertionError("the checks must run before the trainer is built")

    monkeypatch.setattr(script_utils, "build_trainer", no_model)
    module, parsed = _parse(script, "--output_dir", str(tmp_path / "run"), "--resume_from_checkpoint", "true")
    assert parsed[1].resume_from_checkpoint == "true"  # what TRL's parser hands over: a string
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint true: no complete checkpoint-N folder"):
        module.main(*parsed)


def test_resume_values_resolve_like_trl_scripts_expect(tmp_path):
    from hf_meds_cliff.script_utils import prepare_output_dir

    _, parsed = _parse("train_meds", "--output_dir", str(tmp_path), "--resume_from_checkpoint", "true")
    script_args, training_args = parsed[0], parsed[1]
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text("{}")
    assert prepare_output_dir(script_args, training_args) == str(tmp_path / "checkpoint-4")
    for value in ("false", None):
        training_args.resume_from_checkpoint = value
        assert prepare_output_dir(script_args, training_args) is None
    training_args.resume_from_checkpoint = str(tmp_path / "checkpoint-4")
    assert prepare_output_dir(script_args, training_args) == str(tmp_path / "checkpoint-4")


@pytest.mark.parametrize("script", SCRIPTS)
def test_unwritable_or_full_output_dir_stops_the_script_before_training(tmp_path, script, monkeypatch):
    from hf_meds_cliff import script_utils

    monkeypatch.setattr(script_utils, "build_trainer", lambda *a, **k: pytest.fail("must stop before"))
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a folder below a regular file cannot be created (chmod does not stop root)
    module, parsed = _parse(script, "--output_dir", str(blocker / "run"))
    with pytest.raises(ValueError, match=r"output_dir='.*file/run' is not writable"):
        module.main(*parsed)

    monkeypatch.setattr(checkpointing, "free_bytes", lambda path: 3 << 20)  # 3 MiB left on the disk
    module, parsed = _parse(script, "--output_dir", str(tmp_path / "run"), "--min_free_disk_mb", "100")
    with pytest.raises(ValueError, match=r"output_dir='.*run' has 3.0 MiB free, less than the 100 MiB"):
        module.main(*parsed)


# -------------------------------------------------------------------------------------------------------- secrets


def test_reproduce_command_redacts_secrets_and_keeps_the_rest():
    argv = [
        "scripts/train_meds.py", "--hub_token", HUB_TOKEN, "--wandb-api-key=abc123", "--db_password", "pw",
        "--cliff_teacher_api_key_env", "OPENAI_API_KEY", "--cliff_teacher_max_tokens", "512",
        "--meds_max_rows_per_key", "64", "--push_to_hub", "true", f"--note={HUB_TOKEN}",
    ]  # fmt: skip
    command = reproduce_command(argv)
    for secret in (HUB_TOKEN, "abc123", " pw"):
        assert secret not in command
    assert f"--hub_token '{REDACTED}'" in command and f"'--wandb-api-key={REDACTED}'" in command
    for kept in (
        "--cliff_teacher_api_key_env OPENAI_API_KEY",
        "--cliff_teacher_max_tokens 512",
        "per_key 64",
    ):
        assert kept in command
    assert redact_argv(["--use_auth_token", "--bf16", "false"]) == ["--use_auth_token", "--bf16", "false"]


def test_secrets_from_the_command_line_never_reach_a_log_line(caplog):
    from hf_meds_cliff.redaction import secret_values

    original = logging.getLogRecordFactory()
    try:
        redact_secrets_in_logs(secret_values(["--api_key", "plain-secret-value"]))
        with caplog.at_level(logging.INFO):
            logging.getLogger("transformers.trainer").warning("pushing with token %s", HUB_TOKEN)
            logging.getLogger("some.library").warning(
                "request failed, key=plain-secret-value, retrying %d", 3
            )
    finally:
        logging.setLogRecordFactory(original)
    assert HUB_TOKEN not in caplog.text and "plain-secret-value" not in caplog.text
    assert f"pushing with token {REDACTED}" in caplog.text and f"key={REDACTED}, retrying 3" in caplog.text


def test_model_card_written_by_the_trainer_has_no_token(tmp_path, monkeypatch):
    from test_reliability_checkpoints import _meds_trainer

    trainer = _meds_trainer(tmp_path / "run")
    monkeypatch.setattr(sys, "argv", ["scripts/train_meds.py", "--hub_token", HUB_TOKEN, "--output_dir", "x"])
    trainer.create_model_card()
    card = (tmp_path / "run" / "README.md").read_text()
    assert "--hub_token '<redacted>' --output_dir x" in card
    assert HUB_TOKEN not in card


def test_hub_token_on_the_command_line_still_recommends_hf_auth_login(tmp_path, caplog):
    """training_args.bin no longer keeps it (test_trainer_checkpoint_safety.py), but the shell history does."""
    original = logging.getLogRecordFactory()
    try:
        with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.script_utils"):
            _, parsed = _parse("train_grpo", "--output_dir", str(tmp_path), "--hub_token", HUB_TOKEN)
            logging.getLogger("hf_meds_cliff.script_utils").warning("token in use: %s", parsed[1].hub_token)
    finally:
        logging.setLogRecordFactory(original)
    assert parsed[1].hub_token == HUB_TOKEN  # still usable for the upload itself
    assert "kept out of the model card, the logs and training_args.bin" in caplog.text
    assert "hf auth login" in caplog.text
    assert HUB_TOKEN not in caplog.text and f"token in use: {REDACTED}" in caplog.text
