"""MEDS says when it is idle: most groups uniform and nothing replaces or shapes them; and when it runs
but changes no update (the SmolLM2 study's `meds_ds` arm: dynamic sampling on, no group differentiated).

Hand-computed cases of the pure functions, the report's explanation of an empty memory and its one-point charts,
and the trainer end to end: a warning once, with the numbers, and ``meds/idle`` per step.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch

from hf_meds_cliff.meds.idle import (
    NO_EFFECT_SHIFT,
    explain_empty_memory,
    idle_warning,
    meds_idle,
    meds_without_effect,
    no_effect_warning,
)


@pytest.mark.parametrize(
    ("uniform", "groups", "dynamic", "shape", "idle"),
    [
        (3, 4, False, False, True),  # the SmolLM2 run of docs/real_model.md: 3 of 4 groups uniform
        (2, 4, False, False, False),  # half is not most
        (4, 4, True, False, False),  # dynamic sampling replaces uniform groups
        (4, 4, False, True, False),  # meds_shape_uniform_groups shapes them
        (0, 0, False, False, False),  # no group at all
    ],
)
def test_idle_by_hand(uniform, groups, dynamic, shape, idle):
    assert meds_idle(uniform, groups, dynamic_sampling=dynamic, shape_uniform_groups=shape) is idle


def test_idle_rejects_impossible_counts():
    with pytest.raises(ValueError, match="uniform_groups=5 must be between 0 and num_groups=4"):
        meds_idle(5, 4, dynamic_sampling=False, shape_uniform_groups=False)
    with pytest.raises(ValueError, match=r"threshold=1.0 must be in \[0, 1\)"):
        meds_idle(1, 4, dynamic_sampling=False, shape_uniform_groups=False, threshold=1.0)


def test_warning_names_the_numbers_and_the_authors_setting():
    text = idle_warning(7, 3, 4, 4, 16)
    assert "at step 7, 3 of 4 groups (75%) were uniform" in text
    assert "only 4 of 16 rollouts" in text
    assert "DAPO with dynamic sampling on accuracy" in text and "--dynamic_sampling true" in text
    assert "--meds_shape_uniform_groups true" in text


def test_without_effect_needs_the_whole_window_at_or_below_the_threshold():
    assert meds_without_effect([0.0, 7.3e-6, 1e-4], batches=3)  # the study's largest shift was 7.3e-6
    assert not meds_without_effect([0.0, 7.3e-6, 1.01e-4], batches=3)
    assert not meds_without_effect([0.0, 0.0], batches=3)  # too few batches to tell
    assert meds_without_effect([0.3, 0.0, 0.0], batches=2)  # only the last `batches` count
    assert not meds_without_effect([0.0, float("nan")], batches=2)  # an unknown shift is not "no effect"
    assert NO_EFFECT_SHIFT == 1e-4
    with pytest.raises(ValueError, match="batches=0 must be at least 1"):
        meds_without_effect([0.0], batches=0)


def test_no_effect_warning_names_the_numbers_and_the_cancellation():
    text = no_effect_warning(12, 10, 0.00625, 217, 949, "group")
    assert "in 10 consecutive training batches (up to step 12)" in text
    assert "penalised 0.6% of the rollouts" in text and "949 wrong rollouts over 217 prompts (4.4 per prompt)" in text
    assert "scale_rewards='group'" in text and "different penalties" in text
    assert "different penalties" not in no_effect_warning(3, 10, 0.5, 0, 0, "none")  # no cancellation claimed
    assert "(0.0 per prompt)" in no_effect_warning(3, 10, 0.0, 0, 0, "group")  # an empty memory divides by nothing


def test_empty_memory_is_explained_from_the_logged_metrics():
    history = [
        {"step": 1, "meds/idle": 1.0, "meds/frac_groups_uniform": 0.75, "meds/frac_with_feature": 0.25},
        {"step": 2, "meds/idle": 0.0, "meds/frac_groups_uniform": 0.25, "meds/frac_with_feature": 0.5},
        {"train_runtime": 3.0},
    ]
    text = explain_empty_memory(history, 1, 0)
    assert text.startswith("The error memory holds 1 completion and no cluster")
    assert "In 1 of 2 logged steps most groups were uniform (on average 50% of groups uniform)" in text
    assert "Only 38% of rollouts had a \\boxed{ answer token" in text  # (0.25 + 0.5) / 2 = 37.5 %
    assert "below about 4 stored completions" in text
    assert explain_empty_memory(history, 10, 1) is None  # a memory with a cluster needs no explanation
    older = explain_empty_memory([{"meds/frac_groups_uniform": 1.0}], 0, 0)  # logged before meds/idle existed
    assert "On average 100% of groups per step were uniform" in older


def test_report_explains_an_empty_memory_and_draws_a_lone_point(tmp_path):
    from hf_meds_cliff.meds.memory import ErrorMemory, RowSnippet
    from hf_meds_cliff.report import svg_line_chart, write_report

    run = tmp_path / "run"
    run.mkdir()
    records = [{"step": 1, "meds/idle": 1.0, "meds/frac_groups_uniform": 0.75, "meds/mean_penalty": 0.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    memory = ErrorMemory()
    memory.assign_and_update([("p1", False)], np.array([[1.0, 0.0]]), [RowSnippet("\\boxed{3}", step=1, sample=0)])
    memory.save(run / "meds_memory")
    html = write_report(run).read_text()
    assert 'id="meds-empty"' in html
    assert "holds 1 completion and no cluster" in html and "In 1 of 1 logged steps most groups were uniform" in html
    # The noise "cluster" of the lone row has one step of growth: drawn as a dot, not an empty chart.
    lone = svg_line_chart([("rows", [(1.0, 1.0)])], width=170, height=70, markers=False)
    assert "<circle" in lone
    assert "<circle" not in svg_line_chart([("rows", [(1.0, 1.0), (2.0, 2.0)])], markers=False)


# -- trainer end to end --------------------------------------------------------------------------------------------


class ThreeGroupsUniform:
    """0/1 correctness: in every batch of 4 groups the first 3 all wrong, the last one [1, 0, 1, 0]."""

    __name__ = "exact_answer_reward"

    def __call__(self, prompts, completions, **kwargs):
        values = [0.0] * len(completions)
        values[-4:] = [1.0, 0.0, 1.0, 0.0]
        return values


@pytest.fixture
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _idle_run(policy_path, output_dir, **options):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.meds.config import MEDSConfig
    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
    from hf_meds_cliff.toy import make_toy_dataset

    args = MEDSConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, seed=0, max_steps=2, learning_rate=1e-4,
        per_device_train_batch_size=16, num_generations=4, max_completion_length=48, beta=0.0, logging_steps=1,
        report_to="none", save_strategy="no", dataloader_num_workers=0, **options,
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    tokenizer.padding_side = "left"
    trainer = MEDSGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(policy_path),
        reward_funcs=[ThreeGroupsUniform()],
        args=args,
        train_dataset=make_toy_dataset("train", 4, seed=0),
        processing_class=tokenizer,
    )
    trainer.train()
    return [r for r in trainer.state.log_history if "meds/idle" in r]


@pytest.mark.slow
def test_trainer_warns_once_and_logs_idle_steps(toy_policy_path, tmp_path, caplog, one_torch_thread):
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.trainer"):
        logs = _idle_run(toy_policy_path, tmp_path / "idle")
    warnings = [r.getMessage() for r in caplog.records if "MEDS is mostly idle" in r.getMessage()]
    assert len(warnings) == 1 and "at step 1, 3 of 4 groups (75%) were uniform" in warnings[0]
    assert [r["meds/idle"] for r in logs] == [1.0, 1.0]
    assert [r["meds/frac_groups_uniform"] for r in logs] == [0.75, 0.75]
    assert all(r["meds/frac_rows_shapeable"] <= 0.25 for r in logs)  # at most the mixed group's 4 of 16 rows
    assert all("collapse/cluster_concentration" in r for r in logs)  # the monitor's MEDS metric is logged

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.trainer"):
        shaped = _idle_run(toy_policy_path, tmp_path / "shaped", meds_shape_uniform_groups=True)
    assert [r["meds/idle"] for r in shaped] == [0.0, 0.0]
    assert not any("MEDS is mostly idle" in r.getMessage() for r in caplog.records)


class OneWrongInTheMixedGroup:
    """0/1 correctness: in every batch of 4 groups the first 3 all wrong, the last one [1, 1, 1, 0]. A group with one
    wrong rollout cannot give its wrong rollouts different penalties, so MEDS cannot change any update."""

    __name__ = "exact_answer_reward"

    def __call__(self, prompts, completions, **kwargs):
        values = [0.0] * len(completions)
        values[-4:] = [1.0, 1.0, 1.0, 0.0]
        return values


@pytest.mark.slow
def test_trainer_warns_once_when_meds_changes_no_update(
    toy_policy_path, tmp_path, caplog, one_torch_thread, monkeypatch
):
    import hf_meds_cliff.meds.trainer as meds_trainer

    monkeypatch.setattr(meds_trainer, "NO_EFFECT_BATCHES", 2)  # the run has 2 batches
    monkeypatch.setattr(ThreeGroupsUniform, "__call__", OneWrongInTheMixedGroup.__call__)
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.trainer"):
        logs = _idle_run(toy_policy_path, tmp_path / "no-effect")
    assert all(r["meds/advantage_shift"] <= NO_EFFECT_SHIFT for r in logs)
    assert all(r["meds/frac_groups_differentiated"] == 0.0 for r in logs)
    warnings = [r.getMessage() for r in caplog.records if "MEDS has not changed the update" in r.getMessage()]
    assert len(warnings) == 1 and "in 2 consecutive training batches (up to step 2)" in warnings[0]
    assert "scale_rewards='group'" in warnings[0]
