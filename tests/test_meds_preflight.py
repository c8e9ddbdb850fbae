"""Can MEDS act in a run? The visit estimate by hand, against the SmolLM2 study's logged memory, and in the trainer.

Also what MEDS did, counted per group (``meds_group_counts``), and the memory statistics of a dynamic-sampling round
that memorised nothing.
"""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from helpers import ROOT, load_module

from hf_meds_cliff.meds.diagnostics import meds_group_counts, meds_summary_line
from hf_meds_cliff.meds.preflight import (
    MEDSVisitEstimate,
    estimate_meds_visits,
    meds_can_act,
    meds_preflight_message,
    rows_to_split,
    training_generations,
)

STUDY = ROOT / "docs" / "real_model_results" / "study"


# -- the estimate by hand ---------------------------------------------------------------------------------------------


def test_permutation_visits_by_hand():
    # No dynamic sampling, every group memorised (the upper bound): 8 prompts, 4 a generation, 5 generations = 2.5
    # passes, so half the prompts are visited 2 times and half 3 times (TRL reshuffles each pass).
    estimate = estimate_meds_visits(8, 4, 5, 8, dynamic_sampling=False)
    assert estimate.model == "permutation" and estimate.visits_per_prompt == 2.5
    assert estimate.prompts_memorised == 8 and estimate.revisited_prompts == 8
    # visits after the first: 1 for a 2-visit prompt, 2 for a 3-visit one -> (0.5 * 1 + 0.5 * 2) / 2.5 = 0.6
    assert estimate.revisit_share == pytest.approx(0.6)
    # stored wrong rows at those revisits (4 per visit): 4 (2-visit prompt); 4 and 8 (3-visit) -> (0.5*4 + 0.5*12)/1.5
    assert estimate.wrong_rows_per_visit == 4
    assert estimate.rows_at_revisit == pytest.approx(8 / 1.5)
    # visits that find >= 5 stored wrong rows: only a 3-visit prompt's third -> 0.5 / 2.5
    assert estimate.actable_share == pytest.approx(0.2)
    assert meds_can_act(estimate)


def test_poisson_visits_by_hand():
    # Dynamic sampling: 100 prompts, 2 memorised a generation, 50 generations -> mean 1 visit, Poisson.
    estimate = estimate_meds_visits(100, 2, 50, 16, dynamic_sampling=True)
    assert estimate.model == "poisson" and estimate.visits_per_prompt == 1.0
    assert estimate.prompts_memorised == pytest.approx(100 * (1 - math.exp(-1)))
    assert estimate.revisited_prompts == pytest.approx(100 * (1 - 2 * math.exp(-1)))
    # E[max(X - 1, 0)] = mean - P(X >= 1) = e^-1; E[X(X-1)/2] = 1/2, times 8 wrong rows a visit
    assert estimate.revisit_share == pytest.approx(math.exp(-1))
    assert estimate.rows_at_revisit == pytest.approx(8 * 0.5 / math.exp(-1))
    assert not meds_can_act(estimate)  # most memorised visits are first visits


def test_mixed_fraction_and_row_cap():
    # Without dynamic sampling a mixed fraction below 1 thins the memorised visits (Poisson), a cap bounds the rows.
    thinned = estimate_meds_visits(10, 10, 4, 8, dynamic_sampling=False, mixed_fraction=0.5)
    assert thinned.model == "poisson" and thinned.visits_per_prompt == 2.0
    capped = estimate_meds_visits(4, 4, 10, 8, dynamic_sampling=False, max_rows_per_key=6)
    assert capped.rows_at_revisit == pytest.approx(np.mean([min(4 * k, 6) for k in range(1, 10)]))
    # with dynamic sampling the mixed fraction is not used: every trained group is mixed
    assert estimate_meds_visits(10, 10, 4, 8, dynamic_sampling=True, mixed_fraction=0.5).visits_per_prompt == 4.0


def test_can_act_needs_half_revisits_and_enough_rows():
    # every prompt visited twice (permutation): half the visits are revisits, but G=4 stores 2 wrong rows a visit,
    # fewer than the 5 HDBSCAN needs; with G=16 (8 a visit) the same run can act
    small = estimate_meds_visits(4, 4, 2, 4, dynamic_sampling=False)
    assert small.revisit_share == 0.5 and small.rows_at_revisit == 2.0 and not meds_can_act(small)
    large = estimate_meds_visits(4, 4, 2, 16, dynamic_sampling=False)
    assert large.revisit_share == 0.5 and large.rows_at_revisit == 8.0 and meds_can_act(large)


def test_rows_to_split_and_generations():
    assert rows_to_split(2) == 5 and rows_to_split(3) == 7
    assert training_generations(60, 1, 1, 1) == 60
    assert training_generations(10, 4, 8, 1) == 5  # a generation serves two optimizer steps
    assert training_generations(3, 2, 2, 2) == 2  # 6 micro-batches, a generation every 2 x 2 of them (reused)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: estimate_meds_visits(0, 2, 10, 8, dynamic_sampling=True), "pool_size=0 must be >= 1"),
        (lambda: estimate_meds_visits(8, 2, -1, 8, dynamic_sampling=True), "generations=-1 must be >= 0"),
        (lambda: estimate_meds_visits(8, 2, 1, 8, dynamic_sampling=False, mixed_fraction=0), "mixed_fraction=0"),
        (lambda: estimate_meds_visits(8, 2, 1, 8, dynamic_sampling=True, pass_rate=1.0), "pass_rate=1.0"),
        (lambda: rows_to_split(1), "min_cluster_size=1 must be >= 2"),
        (lambda: training_generations(0, 1, 1, 1), "max_steps=0 must be >= 1"),
    ],
)
def test_bad_input_names_the_value(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_metrics_round_trip_and_message():
    estimate = estimate_meds_visits(512, 2, 60, 8, dynamic_sampling=True)
    metrics = estimate.as_metrics()
    assert metrics["meds/preflight/can_act"] == 0.0 and metrics["meds/preflight/dynamic_sampling"] == 1.0
    restored = MEDSVisitEstimate.from_metrics(metrics)
    assert restored is not None and restored.visits_per_prompt == estimate.visits_per_prompt
    assert MEDSVisitEstimate.from_metrics({"loss": 1.0}) is None
    message = meds_preflight_message(estimate, steps=60)
    assert message.startswith("MEDS can barely act in this run: 0.23 memorised visits per prompt over 60 steps")
    assert "12.0 prompts are expected to be memorised twice" in message and "for more steps" in message
    can = meds_preflight_message(estimate_meds_visits(64, 8, 40, 8, dynamic_sampling=True))
    assert can.startswith("MEDS can act in this run: 5.00 memorised visits per prompt")


def test_report_shows_the_logged_estimate(tmp_path):
    from hf_meds_cliff.meds.memory import ErrorMemory
    from hf_meds_cliff.report import write_report

    run = tmp_path / "run"
    run.mkdir()
    estimate = estimate_meds_visits(512, 2, 60, 8, dynamic_sampling=True)
    records = [{"step": 1, "meds/mean_penalty": 0.0, **estimate.as_metrics()}, {"step": 2, "meds/mean_penalty": 0.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    memory = ErrorMemory()
    memory.assign_and_update([("p1", False)], np.array([[1.0, 0.0]]))
    memory.save(run / "meds_memory")
    html = write_report(run).read_text()
    assert 'id="meds-preflight">At the start of training: MEDS can barely act in this run: 0.23 memorised' in html


# -- against the SmolLM2 study's logged memory ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_estimate_predicts_the_smollm2_study(seed):
    """The study's meds_ds arm: 512 prompts, 60 steps of 2 prompts, dynamic sampling. Each memorised group adds a
    (prompt, right) and a (prompt, wrong) key when its prompt is new, so the final key count says how many of the 120
    memorised groups revisited a prompt."""
    record = json.loads((STUDY / f"meds_ds-seed{seed}.json").read_text())
    settings = record["settings"]
    steps, prompts = settings["steps"], settings["prompts_per_step"]
    final_keys = [r["meds/memory_keys"] for r in record["history"] if "meds/memory_keys" in r][-1]
    revisits = (2 * steps * prompts - final_keys) / 2
    estimate = estimate_meds_visits(
        settings["train_problems"], prompts, steps, settings["num_generations"], dynamic_sampling=True
    )
    assert round(estimate.visits_per_prompt, 2) == 0.23  # the audit's "about 0.23 passes"
    assert 9 <= revisits <= 12  # measured: 11.5 and 10 prompts memorised twice
    assert abs(estimate.revisited_prompts - revisits) <= 2.5  # predicted: 12.0
    assert not meds_can_act(estimate)


# -- what MEDS did, per group ---------------------------------------------------------------------------------------


def test_group_counts_by_hand():
    # 3 groups of 4. Group 0: revisited, wrong penalties -0.1 / -0.2 (differentiated). Group 1: revisited, both wrong
    # -0.1 (not). Group 2: first visit (sizes 0, no penalty), one row unshaped (not memorised).
    penalties = [0.0, -0.1, -0.2, 0.0, 0.0, -0.1, -0.1, 0.0, 0.0, 0.0, 0.0, 0.0]
    correct = [True, False, False, True] * 3
    shaped = [True] * 11 + [False]
    revisited = [True] * 8 + [False] * 4
    counts = meds_group_counts(penalties, correct, shaped, revisited, np.arange(12) // 4)
    assert counts == {
        "groups_mixed": 3,
        "groups_revisited": 2,
        "groups_differentiated": 1,
        "rollouts_shaped": 11,
        "rollouts_penalised": 4,
    }
    # an all-wrong group is not mixed; an unshaped row's penalty never counts
    assert meds_group_counts([-0.1, -0.2], [False, False], [True, True], [True, True], [0, 0])["groups_mixed"] == 0
    with pytest.raises(ValueError, match=r"shaped must have shape \(2,\)"):
        meds_group_counts([0.0, 0.0], [True, False], [True], [True, True], [0, 0])
    line = meds_summary_line(counts, 30, 6)
    assert line == (
        "MEDS differentiated 1 of 3 mixed groups (1 of the 2 that met their prompt's stored mistakes) and penalised "
        "4 of 11 shaped rollouts; its memory holds 30 rollouts under 6 keys."
    )


# -- the trainer ----------------------------------------------------------------------------------------------------


def half_right(prompts, completions, **kwargs):
    """0/1 correctness: the first half of each group of 8 right (every group mixed)."""
    return [1.0 if i % 8 < 4 else 0.0 for i in range(len(completions))]


def half_right_rollouts(prompts, trainer):
    """Scripted generation: in each group of 8 the first 4 write the solution, the others a wrong one (off by one
    from sentence 0 or 1); every completion has a ``\boxed{}`` answer, so every row gets a feature."""
    from hf_meds_cliff.cliff.protocol import problem_text
    from hf_meds_cliff.toy.task import parse_question

    driver = load_module(ROOT / "tests" / "multiproc" / "cliff_driver.py", "cliff_driver")
    tokenizer = trainer.processing_class
    prompt_ids, completion_ids = [], []
    for index, prompt in enumerate(prompts):
        problem = parse_question(problem_text(prompt))
        text = problem.solution if index % 8 < 4 else driver.wrong_from(problem, index % 2)
        prompt_ids.append(list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"]))
        completion_ids.append(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id])
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[0.0] * len(ids) for ids in completion_ids],
    }


def _meds_run(tmp_path, name, num_prompts, steps, reward=half_right, **options):
    from hf_meds_cliff.meds.config import MEDSConfig
    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer
    from hf_meds_cliff.toy.model import build_toy_model
    from hf_meds_cliff.toy.task import make_toy_dataset
    from hf_meds_cliff.toy.tokenizer import build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    settings = dict(
        output_dir=str(tmp_path / name), use_cpu=True, bf16=False, seed=0, max_steps=steps, learning_rate=1e-4,
        per_device_train_batch_size=32, num_generations=8, max_completion_length=24, beta=0.0, logging_steps=1,
        report_to="none", save_strategy="no", dataloader_num_workers=0, activation_checkpointing=False,
    )  # fmt: skip
    settings.update(options)
    trainer = MEDSGRPOTrainer(
        model=build_toy_model(tokenizer, seed=0),
        reward_funcs=[reward],
        args=MEDSConfig(**settings),
        train_dataset=make_toy_dataset("train", num_prompts, seed=0),
        processing_class=tokenizer,
        rollout_func=half_right_rollouts,
    )
    trainer.train()
    return trainer


@pytest.mark.slow
def test_trainer_warns_when_each_prompt_is_seen_once_and_not_when_revisited(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.trainer"):
        once = _meds_run(tmp_path, "once", num_prompts=8, steps=2)  # 4 prompts a step: one pass
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("MEDS can barely act")]
    assert len(warnings) == 1
    assert "1.00 memorised visits per prompt over 2 steps (8 prompts) at most" in warnings[0]
    assert "0.0 prompts are expected to be memorised twice" in warnings[0]
    first = once.state.log_history[0]
    assert first["meds/preflight/visits_per_prompt"] == 1.0 and first["meds/preflight/can_act"] == 0.0
    assert once.meds_preflight is not None and once.meds_preflight.revisit_share == 0.0

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.trainer"):
        revisited = _meds_run(tmp_path, "revisited", num_prompts=4, steps=3)  # 3 visits each, 4 wrong rows a visit
    assert not [r for r in caplog.records if r.getMessage().startswith("MEDS can barely act")]
    assert revisited.state.log_history[0]["meds/preflight/can_act"] == 1.0
    assert revisited.meds_preflight.visits_per_prompt == 3.0
    # every group is mixed and every prompt of steps 2 and 3 was memorised before
    totals = revisited.meds_totals
    assert totals["groups_mixed"] == 12 and totals["groups_revisited"] == 8
    assert "of 12 mixed groups" in revisited.meds_summary()


class UniformThenMixed:
    """All wrong on odd calls (a dynamic-sampling round without survivors), half right on even ones."""

    __name__ = "uniform_then_mixed"

    def __init__(self):
        self.calls = 0

    def __call__(self, prompts, completions, **kwargs):
        self.calls += 1
        if self.calls % 2:
            return [0.0] * len(completions)
        return half_right(prompts, completions)


@pytest.mark.slow
def test_a_round_without_survivors_logs_no_memory_statistics(tmp_path):
    # Each step: round 1 all wrong (dropped, nothing memorised), round 2 mixed (4 groups of 8 memorised, 32 rows).
    # The memory's statistics are logged for round 2 only: memory_rows 32 after step 1 and 64 after step 2 (not the
    # mean with round 1's stale 32 at step 2).
    trainer = _meds_run(
        tmp_path, "ds", num_prompts=8, steps=2, reward=UniformThenMixed(), dynamic_sampling=True,
        meds_min_cluster_size=2,
    )  # fmt: skip
    logged = [r for r in trainer.state.log_history if "meds/memory_rows" in r]
    assert [r["dynamic_sampling/rounds"] for r in logged] == [2.0, 2.0]
    assert [r["meds/memory_rows"] for r in logged] == [32.0, 64.0]
    assert [r["meds/rows"] for r in logged] == [32.0, 32.0]
