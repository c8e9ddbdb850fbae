"""Where Cliff's splits fall: the causes, the per-step metrics, the token-0 warning and the sequence-level warning,
by hand and in the trainer on scripted rollouts."""

from __future__ import annotations

import logging

import pytest
from helpers import ROOT, load_module

from hf_meds_cliff.cliff.splits import (
    SPLIT_WINDOW_MIN_ROLLOUTS,
    sequence_level_warning,
    split_record,
    split_step_metrics,
    split_window_warning,
)


def load_driver():
    return load_module(ROOT / "tests" / "multiproc" / "cliff_driver.py", "cliff_driver")


@pytest.mark.parametrize(
    ("arguments", "cause"),
    [
        ((0, 1, 0, True), "one_sentence"),
        ((0, 3, 0, True), "first_sentence"),
        ((0, 3, 0, False), "no_mistake_found"),
        ((0, 3, 0, None), "no_answer"),
        ((0, 3, 2, True), "later_sentence"),
        ((14, 3, 1, True), "after_token0"),
    ],
)
def test_causes(arguments, cause):
    assert split_record(*arguments).cause == cause
    assert split_record(0, 3, 0, None, truncated=True).cause == "truncated"


def test_bad_record_names_the_values():
    with pytest.raises(ValueError, match="token=-1"):
        split_record(-1, 3, 0, True)


def test_step_metrics_by_hand():
    records = [split_record(0, 1, 0, True), split_record(10, 3, 1, True), split_record(20, 4, 2, True)]
    assert split_step_metrics(records) == {
        "split_rollouts": 3.0,
        "split_at_token0_fraction": pytest.approx(1 / 3),
        "split_token_mean": 10.0,
    }
    empty = split_step_metrics([])
    assert empty["split_rollouts"] == 0.0 and empty["split_at_token0_fraction"] != empty["split_at_token0_fraction"]


def test_window_warning_thresholds_and_causes():
    one_sentence = split_record(0, 1, 0, True)
    # too few rollouts: no verdict yet
    assert split_window_warning([one_sentence] * (SPLIT_WINDOW_MIN_ROLLOUTS - 1)) is None
    # 9 of 10 at token 0 is "nearly every"; 8 of 10 is not
    after = split_record(12, 3, 1, True)
    assert split_window_warning([one_sentence] * 9 + [after]) is not None
    assert split_window_warning([one_sentence] * 8 + [after] * 2) is None
    message = split_window_warning(
        [one_sentence] * 6 + [split_record(0, 3, 0, False)] * 3 + [split_record(0, 2, 0, None, truncated=True)]
    )
    assert message.startswith("Cliff split 10 of the last 10 wrong rollouts of its groups (100%) at token 0")
    assert "a one-sentence answer (its first mistake can only be sentence 0): 6" in message
    assert "the teacher found no mistake (a disagreement with the verifier, given p(a) = 0): 3" in message
    assert "truncated at max_completion_length" in message and "raise it" in message
    # (6 * 1 + 3 * 3 + 2) / 10 sentences on average
    assert "the answers are short (on average 1.7 sentences)" in message and "stronger teacher" in message


@pytest.mark.parametrize(
    ("level", "loss_type", "warned"),
    [
        ("token", "dapo", False),
        ("sequence", "dapo", True),
        ("sequence", "grpo", True),
        ("sequence", "luspo", True),
        ("sequence", "sapo", True),
        ("sequence", "cispo", False),  # its per-token term multiplies each token's log-probability by its advantage
        ("sequence", "vespo", False),
    ],
)
def test_sequence_level_warning_by_loss(level, loss_type, warned):
    message = sequence_level_warning(level, loss_type)
    assert (message is not None) == warned
    if warned:
        assert f"loss_type={loss_type!r}" in message and "importance_sampling_level='token'" in message


def test_trainer_warns_at_start_under_sequence_level_importance_sampling(tmp_path, caplog):
    driver = load_driver()
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.cliff.trainer"):
        driver.build_trainer(str(tmp_path / "seq"), 8, importance_sampling_level="sequence", loss_type="dapo")
    assert any("Cliff with importance_sampling_level='sequence'" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.cliff.trainer"):
        driver.build_trainer(str(tmp_path / "token"), 8, loss_type="dapo")
        driver.build_trainer(
            str(tmp_path / "teacher"), 8, importance_sampling_level="sequence", cliff_outcome="teacher"
        )
    assert not any("Cliff with importance_sampling_level='sequence'" in r.getMessage() for r in caplog.records)


def _one_sentence_wrong(problem, row):
    """Right rollouts write the whole solution; wrong ones a single, wrong first step (one sentence, no box)."""
    group, member = divmod(row, 4)
    if group % 3 == 2 or member in (0, 3):
        return problem.solution
    op, right = problem.operations[0]
    value = {"+": problem.first_operand + right, "-": problem.first_operand - right, "*": problem.first_operand * right}
    return f"{problem.first_operand} {op} {right} = {value[op] + 1}."


@pytest.mark.slow
def test_trainer_logs_splits_and_warns_on_one_sentence_answers(tmp_path, caplog, monkeypatch):
    driver = load_driver()
    # The driver's own rollouts: per mixed group one wrong rollout from sentence 1 and one from sentence 0.
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.cliff.trainer"):
        trainer = driver.build_trainer(str(tmp_path / "two"), 12, steps=2)
        trainer.train()
    logged = [r for r in trainer.state.log_history if "cliff/split_rollouts" in r]
    assert [r["cliff/split_rollouts"] for r in logged] == [4.0, 4.0]
    assert [r["cliff/split_at_token0_fraction"] for r in logged] == [0.5, 0.5]
    assert all(r["cliff/split_token_mean"] > 0 for r in logged)
    assert not any("at token 0" in r.getMessage() for r in caplog.records)

    caplog.clear()
    monkeypatch.setattr(driver, "scripted_completion", _one_sentence_wrong)
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.cliff.trainer"):
        trainer = driver.build_trainer(str(tmp_path / "one"), 12, steps=2)
        trainer.train()
    logged = [r for r in trainer.state.log_history if "cliff/split_rollouts" in r]
    assert [r["cliff/split_at_token0_fraction"] for r in logged] == [1.0, 1.0]
    assert [r["cliff/split_token_mean"] for r in logged] == [0.0, 0.0]
    warnings = [r.getMessage() for r in caplog.records if "at token 0" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("Cliff split 8 of the last 8 wrong rollouts of its groups (100%) at token 0")
    assert "a one-sentence answer (its first mistake can only be sentence 0): 8" in warnings[0]
