"""The SmolLM2 mechanism study's runner (studies/smollm2_mechanism.py): its constants against the rules, its problems,
its run claims, a tiny toy-world run stopped and resumed, and its report on synthetic files with hand-computed
statistics."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "studies"))
import smollm2_mechanism as study  # noqa: E402
import smollm2_pilot  # noqa: E402
from smollm2_mechanism import ARMS, BASE, STUDY, TINY  # noqa: E402


def test_constants_are_the_rules():
    assert ARMS == ("grpo", "dapo_ds", "meds_ds", "cliff", "grpo_teacher") and study.SEEDS == (0, 1, 2)
    assert (STUDY.steps, STUDY.prompts_per_step, STUDY.num_generations, STUDY.max_new_tokens) == (40, 2, 16, 64)
    assert (STUDY.temperature, STUDY.top_p, STUDY.samples, STUDY.pool_size, STUDY.heldout_problems) == (
        1.0, 1.0, 16, 16, 64
    )  # fmt: skip
    assert (STUDY.save_steps, STUDY.torch_threads, STUDY.design) == (10, 1, "easy_then_add")
    assert [h.name for h in study.PRIMARY] == ["M1", "M2", "C1", "T1"]
    assert [(h.split, h.direction) for h in study.PRIMARY] == [("pool", -1), ("heldout", -1), ("heldout", 0),
                                                               ("heldout", 1)]  # fmt: skip
    configs = {arm: study.arm_config(arm, STUDY, 2, "/tmp/unused") for arm in ARMS}
    for arm in ("dapo_ds", "meds_ds"):
        config = configs[arm]
        assert (config.loss_type, config.epsilon, config.epsilon_high) == ("dapo", 0.2, 0.28)
        assert config.dynamic_sampling and config.dynamic_sampling_max_rounds == 40
    assert (configs["meds_ds"].meds_alpha, configs["meds_ds"].meds_beta) == (0.1, 0.2)
    for arm in ("grpo", "cliff", "grpo_teacher"):
        assert configs[arm].loss_type == "grpo" and not getattr(configs[arm], "dynamic_sampling", False)
    assert (configs["cliff"].cliff_outcome, configs["grpo_teacher"].cliff_outcome) == ("verifier", "teacher")
    for arm in ("cliff", "grpo_teacher"):
        assert (configs[arm].cliff_teacher, configs[arm].cliff_lam) == ("rule", 0.0)
    for config in configs.values():
        assert (config.temperature, config.top_p, config.beta, config.learning_rate, config.seed) == (
            1.0, 1.0, 0.0, 1e-5, 2
        )  # fmt: skip
        assert (config.lr_scheduler_type, config.warmup_steps, config.max_steps) == ("linear", 0, 40)
        assert config.per_device_train_batch_size == 32 and config.num_generations == 16
    with pytest.raises(ValueError, match="Unknown arm"):
        study.arm_config("meds", STUDY, 0, "/tmp/unused")
    with pytest.raises(SystemExit):  # the tiny configuration never writes into docs/
        study.main(["--run", "--tiny", "--results_dir", "docs/real_model_results/mechanism_study"])


def test_pool_and_heldout_follow_the_screens(tmp_path):
    design = smollm2_pilot.DESIGNS["easy_then_add"]
    pilot = json.loads(study.PILOT_SCREEN.read_text())["problems"]
    assert sum(study.qualifies(p, 16) for p in pilot) == 8
    with pytest.raises(SystemExit, match="run --screen first"):
        study.study_problems(STUDY, tmp_path)
    # a synthetic extension of problems 33-64: every third problem qualifies (right 4 of 16), the others do not
    order = smollm2_pilot.design_problems(design, 64)
    assert [p["problem"] for p in pilot] == [p["problem"] for p in order[:32]]
    extension = [{**row, "right": 4 if i % 3 == 0 else 15, "wrong": []} for i, row in enumerate(order[32:])]
    (tmp_path / "screen-extension.json").write_text(json.dumps({"first_problem": 33, "problems": extension}))
    problems = study.study_problems(STUDY, tmp_path)
    expected = [p["problem"] for p in pilot if study.qualifies(p, 16)] + [p["problem"] for p in extension[::3][:8]]
    assert [p["problem"] for p in problems["pool"]] == expected
    assert set(problems["pool"][0]) == {"problem", "answer", "problem_id"}
    heldout = [p["problem"] for p in problems["heldout"]]
    assert len(heldout) == len(set(heldout)) == 64 and not set(heldout) & set(expected)
    held_order = [p["problem"] for p in smollm2_pilot.design_problems(design, 80, seed=1)]
    assert heldout == [p for p in held_order if p not in set(expected)][:64]
    question = "Compute (1 + 2) + 13."
    assert study.chat_prompt(STUDY, question) == smollm2_pilot.chat_prompt(design, question)
    (tmp_path / "screen-extension.json").write_text(json.dumps({"first_problem": 40, "problems": extension}))
    with pytest.raises(ValueError, match="starts at problem 40, not 33"):
        study.screened_problems(tmp_path)


def test_claims_exclude_live_holders_and_take_over_stale_ones(tmp_path):
    assert study.run_order(("grpo", "cliff"), (0, 1)) == [
        "base-seed0", "grpo-seed0", "cliff-seed0", "base-seed1", "grpo-seed1", "cliff-seed1"
    ]  # fmt: skip
    assert study.claim(tmp_path, "grpo-seed0") and not study.claim(tmp_path, "grpo-seed0")  # held by this process
    path = tmp_path / "claims" / "grpo-seed0.json"
    holder = json.loads(path.read_text())
    assert holder["pid"] == os.getpid() and holder["boot_id"] == study.boot_id()
    study.release(tmp_path, "grpo-seed0")
    assert not path.exists() and study.claim(tmp_path, "grpo-seed0")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # a live process of this boot holds the claim
        path.write_text(json.dumps({**holder, "pid": child.pid}))
        assert not study.claim(tmp_path, "grpo-seed0")
        path.write_text(json.dumps({**holder, "pid": child.pid, "boot_id": "an earlier boot"}))
        assert study.claim(tmp_path, "grpo-seed0")  # the same pid number in an earlier boot: stale
    finally:
        child.kill()
        child.wait()
    path.write_text(json.dumps({**holder, "pid": child.pid}))  # a process that has exited
    assert study.claim(tmp_path, "grpo-seed0") and json.loads(path.read_text())["pid"] == os.getpid()


def _history(rows):
    return [{"loss": 0.0, "step": i + 1, **row} for i, row in enumerate(rows)]


def test_mechanism_counts_multiply_the_logged_means_by_the_rounds():
    meds = {"config": {"generation_batch_size": 32, "num_generations": 16}, "history": _history([
        {"dynamic_sampling/rounds": 1.0, "meds/groups_mixed": 2.0, "meds/groups_revisited": 0.0,
         "meds/groups_differentiated": 0.0, "meds/rollouts_shaped": 20.0, "meds/rollouts_penalised": 0.0,
         "meds/advantage_shift": 0.00005, "meds/frac_groups_differentiated": 0.5},
        {"dynamic_sampling/rounds": 3.0, "meds/groups_mixed": 1.0, "meds/groups_revisited": 2 / 3,
         "meds/groups_differentiated": 1 / 3, "meds/rollouts_shaped": 9.0, "meds/rollouts_penalised": 2.0,
         "meds/advantage_shift": 0.02, "meds/frac_groups_differentiated": 1 / 3},
    ]) + [{"train_runtime": 1.0}]}  # fmt: skip
    m = study.mechanism(meds)
    assert (m["groups_mixed"], m["groups_revisited"], m["groups_differentiated"]) == (5, 2, 1)
    assert (m["rollouts_shaped"], m["rollouts_penalised"], m["first_differentiating_step"]) == (47, 6, 2)
    assert (m["ds_rounds_mean"], m["ds_rounds_max"], m["steps"]) == (2.0, 3.0, 2)
    assert math.isclose(m["advantage_shift_mean"], 0.010025) and m["advantage_shift_max"] == 0.02
    # 0.5 x 2 groups x 1 round + 1/3 x 2 groups x 3 rounds (a wrong rollout left unshaped counts here); one step
    # above the idle threshold 1e-4
    assert (m["groups_unequal_penalties"], m["steps_shift_above_idle"]) == (3, 1)
    cliff = {"history": _history([
        {"cliff/split_rollouts": 10.0, "cliff/split_at_token0_fraction": 0.2, "cliff/split_token_mean": 12.0,
         "cliff/prefix_fraction": 0.5, "cliff/agreement": 1.0},
        {"cliff/split_rollouts": 0.0, "cliff/split_at_token0_fraction": float("nan"),
         "cliff/split_token_mean": float("nan"), "cliff/prefix_fraction": float("nan"), "cliff/agreement": 1.0},
        {"cliff/split_rollouts": 30.0, "cliff/split_at_token0_fraction": 0.5, "cliff/split_token_mean": 4.0,
         "cliff/prefix_fraction": 0.3, "cliff/agreement": 0.5},
    ])}  # fmt: skip
    c = study.mechanism(cliff)
    assert (c["split_rollouts"], c["split_after_token0"]) == (40, 23)  # 10 * 0.8 + 30 * 0.5
    assert math.isclose(c["split_token_mean"], (10 * 12 + 30 * 4) / 40)
    assert math.isclose(c["prefix_fraction_mean"], 0.4) and math.isclose(c["mistake_found_mean"], 2.5 / 3)
    assert c["teacher_verifier_agreement_mean"] is None and "teacher_says_wrong_verifier_right" not in c
    for row, (agreement, wrong_right) in zip(cliff["history"], ((1.0, 0.0), (float("nan"), 0.0), (0.9, 3.0))):
        row.update({"cliff/teacher_verifier_agreement": agreement, "cliff/teacher_says_wrong_verifier_right":
                    wrong_right, "cliff/teacher_says_right_verifier_wrong": 0.0})  # fmt: skip
    t = study.mechanism(cliff)  # GRPO with Teacher: the teacher's verdict against the verifier's
    assert math.isclose(t["teacher_verifier_agreement_mean"], 0.95)
    assert (t["teacher_says_wrong_verifier_right"], t["teacher_says_right_verifier_wrong"]) == (3, 0)


@pytest.mark.slow
def test_tiny_run_resumes_after_a_stop_and_records_every_field(tmp_path, monkeypatch):
    results, work = tmp_path / "results", tmp_path / "work"
    arms, seeds = ("meds_ds", "grpo_teacher"), (0,)
    with pytest.raises(study.smollm2_study.SimulatedStop):  # a machine stop after the first arm's step-1 checkpoint
        study.run_study(TINY, results, work, arms, seeds, command=["test"], stop_after_step=1)
    assert (results / "base-seed0.json").exists() and not (results / "meds_ds-seed0.json").exists()
    assert (work / "meds_ds-seed0" / "checkpoint-1" / "trainer_state.json").exists()
    assert not list((work / "claims").iterdir())  # released on the way out
    study.run_study(TINY, results, work, arms, seeds, command=["test"])
    assert not list(work.glob("*/checkpoint-*")) and (work / "meds_ds-seed0" / "final").is_dir()
    for arm in arms:
        record = json.loads((results / f"{arm}-seed0.json").read_text())
        assert (record["arm"], record["seed"], record["eval_seed"], record["command"]) == (arm, 0, 0, "test")
        assert {"commit", "dirty", "code_commit", "code_dirty", "machine", "config", "history", "started", "finished",
                "eval_seconds"} <= set(record)  # fmt: skip
        assert [row["step"] for row in record["history"] if "loss" in row] == [1, 2]
        for split, size in (("pool", 8), ("heldout", 3)):
            evaluation = record[split]
            assert evaluation["split"] == split and len(evaluation["correct"]) == size
            for correct, wrong in zip(evaluation["correct"], evaluation["wrong_answers"]):
                assert correct + sum(wrong.values()) == TINY.samples
    meds = json.loads((results / "meds_ds-seed0.json").read_text())
    assert [s["resumed_from"] for s in meds["training_segments"]] == [None, "checkpoint-1"]
    assert meds["trainer"] == "MEDSGRPOTrainer" and meds["config"]["dynamic_sampling"]
    mechanism = study.mechanism(meds)
    assert mechanism["groups_mixed"] >= 2 and mechanism["ds_rounds_mean"] >= 1  # DS keeps one mixed group a step
    teacher = json.loads((results / "grpo_teacher-seed0.json").read_text())
    assert teacher["config"]["cliff_outcome"] == "teacher" and teacher["teacher"]["kind"] == "exact rule teacher"
    assert study.mechanism(teacher)["steps"] == 2

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(study, "train", must_not_run)
    monkeypatch.setattr(study, "evaluations", must_not_run)
    study.run_study(TINY, results, work, arms, seeds, command=["test"])


def _evaluation(split: str, correct: list[int], wrong: list[dict], n: int = 8) -> dict:
    return {"split": split, "problem_ids": [f"{split}{i}" for i in range(len(correct))], "samples_per_problem": n,
            "correct": correct, "wrong_answers": wrong}  # fmt: skip


def _same(counts, n=8):  # every wrong sample gives one answer: agreement 1
    return [{"7": n - c} if c < n else {} for c in counts]


def _distinct(counts, n=8):  # every wrong sample a different answer: agreement 0
    return [{f"a{j}": 1 for j in range(n - c)} for c in counts]


def _write(results: Path, arm: str, seed: int, correct: list[int], wrong: list[dict], history=()) -> None:
    record = {"arm": arm, "seed": seed, "pool": _evaluation("pool", correct, wrong),
              "heldout": _evaluation("heldout", correct, wrong), "history": list(history), "commit": "c",
              "dirty": False, "code_commit": "c", "code_dirty": False, "machine": {"cpu": "CPU A"},
              "command": f"run {arm} {seed}", "started": "t0", "finished": "t1"}  # fmt: skip
    (results / f"{arm}-seed{seed}.json").write_text(json.dumps(record))


def test_report_reproduces_hand_computed_statistics(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    counts = {
        BASE: [2, 2, 2, 2],
        "grpo": [2, 3, 4, 5],
        "dapo_ds": [2, 2, 2, 2],
        "cliff": [4, 5, 6, 7],  # one wrong sample on problem 3: agreement cannot enter there
        "grpo_teacher": [5, 6, 7, 8],  # T1: cliff − grpo_teacher = −1/8 everywhere, against the prediction
    }
    history = _history([{"dynamic_sampling/rounds": 2.0, "meds/groups_mixed": 1.0, "meds/groups_revisited": 1.0,
                         "meds/groups_differentiated": 0.5, "meds/rollouts_shaped": 8.0,
                         "meds/rollouts_penalised": 1.0, "meds/advantage_shift": 0.01}])  # fmt: skip
    split = {"cliff": 0.5, "grpo_teacher": 1.0}  # share of the 4 split wrong rollouts at token 0
    for seed in (0, 1, 2):
        for arm, correct in counts.items():
            cliff = _history([{"cliff/split_rollouts": 4.0, "cliff/split_at_token0_fraction": split[arm],
                               "cliff/split_token_mean": 3.0, "cliff/prefix_fraction": 0.2}]) if arm in split else ()
            _write(results, arm, seed, correct, _same(correct), cliff)
        _write(results, "meds_ds", seed, counts["dapo_ds"], _distinct(counts["dapo_ds"]), history)
    _write(results, BASE, 3, counts[BASE], _same(counts[BASE]))  # seed 3 incomplete: not analysed
    (results / "power.json").write_text(json.dumps({"metrics": {
        "pass@1": {"simulated_mde": 0.05, "analytic_mde_by_seed_sd": {"0.02": 0.04}},
        "pass@8": {"simulated_mde": None, "analytic_mde_by_seed_sd": {"0.02": 0.09}}}}))  # fmt: skip
    report = tmp_path / "report.md"
    analysis = study.write_report(results, report, resamples=999)
    assert analysis["seeds"] == [0, 1, 2] and analysis["incomplete_seeds"] == [3]
    rows = {row["name"]: row for row in analysis["primary"]}
    # M1, M2: agreement 0 (MEDS) − 1 (DAPO) on all 4 problems of every seed: a constant −1, so every resample gives
    # −1, the CI is that point and p = 2 * (0 + 1) / (999 + 1) = 0.002.
    for name in ("M1", "M2"):
        assert rows[name]["problems"] == 4 and rows[name]["difference"] == -1.0
        assert math.isclose(rows[name]["p"], 0.002) and rows[name]["verdict"] == "holds"
    assert rows["C1"]["problems"] == 3 and rows["C1"]["difference"] == 0.0 and rows["C1"]["p"] == 1.0  # both 1
    assert rows["C1"]["verdict"] == "not shown"
    assert math.isclose(rows["T1"]["difference"], -0.125) and rows["T1"]["verdict"] == "reversed"
    # Holm over 4: three p-values of 0.002 -> 4 * 0.002 = 0.008 for each (the running maximum); C1 stays 1.
    assert [round(rows[n]["holm_p"], 6) for n in ("M1", "M2", "T1", "C1")] == [0.008, 0.008, 0.008, 1.0]
    secondary = {row["name"]: row for row in analysis["secondary"]}
    assert math.isclose(secondary["cliff−grpo pass@1"]["difference"], 0.25)
    assert secondary["meds_ds−dapo_ds pass@1"]["difference"] == 0.0
    assert analysis["mechanisms"]["meds_ds"]["0"]["groups_differentiated"] == 1  # 0.5 a round x 2 rounds
    text = report.read_text()
    assert text.index("## What each mechanism did") < text.index("To recompute a row") < text.index("## Primary")
    assert "| `meds_ds` seed 0 | 2 | 2 | 1 | 0.50 | 1 | 16 | 2 | – | 0.0100 (0.0100) | 1 of 1 | 2.00 (2) |" in text
    assert "| M1 | `meds_ds` − `dapo_ds` | pool | agreement | < 0 | 3 | 4 |" in text and "*reversed*" in text
    assert "| C1 | `cliff` − `grpo` | heldout | agreement | ≠ 0 | 3 | 3 |" in text
    assert "pass@1 5.0 points (simulated), 4.0 (analytic); pass@8 beyond the grid points" in text
    assert "incomplete seeds (not analysed): [3]" in text and "do not all come from one version" not in text
    assert "## Prompts after a resume\n\nNo training resumed from a checkpoint" in text  # no training_segments here
    assert "| `grpo-seed0.json` | `run grpo 0` | t0 | t1 | – | – |" in text
    # the reading, generated from the numbers above it
    reading = text[text.index("## Reading"):text.index("## Prompts after a resume")]
    assert ("- MEDS acted in 3 of 3 `meds_ds` runs by the pilot's check (at least 5 % of the mixed groups that met "
            "their prompt's stored wrong rollouts were differentiated): seed 0: 1 of 2 (50 %); seed 1: 1 of 2 (50 %); "
            "seed 2: 1 of 2 (50 %). Its penalty moved the advantages (`meds/advantage_shift` above 0.0001) in 1, 1 "
            "and 1 of 1 steps; the largest per-step value was 0.0100.") in reading  # fmt: skip
    assert "after token 0 in at least 25 % of the split wrong rollouts (the pilot's check) in 3 of 3 `cliff` runs: " \
           "seed 0: 2 of 4 (50 %), mean split token 3.0;" in reading
    assert "in 0 of 3 `grpo_teacher` runs: seed 0: 0 of 4 (0 %)" in reading
    assert ("- M1: holds, as predicted (`meds_ds` − `dapo_ds`, wrong-answer agreement on the training pool: -100.0 "
            "points, 95 % CI [-100.0, -100.0], Holm p 0.008), on SmolLM2-135M-Instruct and this problem family, over "
            "3 seed(s) and 4 problems.") in reading  # fmt: skip
    t1 = "- T1: reversed, against the prediction (`cliff` − `grpo_teacher`, pass@1 on the held-out set: -12.5"
    assert t1 in reading
    assert "- C1: not shown (`cliff` − `grpo`, wrong-answer agreement on the held-out set: +0.0 points" in reading
    assert ("- meds_ds−dapo_ds pass@1: not shown (`meds_ds` − `dapo_ds`, pass@1 on the held-out set: +0.0 points, "
            "95 % CI [+0.0, +0.0], p 1, unadjusted). This is not a claim that the two are equal: the study could not "
            "tell them apart. At 80 % power it could detect a difference of about 5.0 points (simulated; 4.0 "
            "analytic), `power.json`.") in reading  # fmt: skip
    assert "- The files come from CPU A (19 files).\n" in reading and "resumed from a checkpoint" not in reading
    assert "16 training prompts, 40 steps, seeds [0, 1, 2]." in reading
    record = json.loads((results / "grpo-seed1.json").read_text())
    (results / "grpo-seed1.json").write_text(json.dumps({**record, "code_commit": "d", "machine": {"cpu": "CPU B"}}))
    study.write_report(results, report, resamples=99)
    text = report.read_text()
    assert "do not all come from one version of the code" in text
    assert ("- The files come from CPU A (18 files); CPU B (1 file). Pairs whose two runs come from different "
            "machine records: C1 seed 1, cliff−grpo pass@1 seed 1, cliff−grpo pass@8 seed 1.") in text


def test_reading_counts_the_teachers_disagreements_with_the_verifier():
    teacher = {"0": {"teacher_says_wrong_verifier_right": 13, "teacher_says_right_verifier_wrong": 0},
               "1": {"teacher_says_wrong_verifier_right": 7, "teacher_says_right_verifier_wrong": 2}}  # fmt: skip
    assert study.mechanism_reading({"grpo_teacher": teacher})[1:] == [
        "- In `grpo_teacher` the outcome is the exact teacher's verdict. It called 13 and 7 rollouts wrong that the "
        "verifier graded right, and 0 and 2 right that the verifier graded wrong (seeds 0 and 1)."
    ]
    lines = study.mechanism_reading({"grpo_teacher": {"0": {"split_rollouts": 0}}})  # not logged: no sentence
    assert not any("outcome is the exact teacher's verdict" in line for line in lines)


def test_reading_counts_the_resumed_trainings():
    recomputed = {"files": {"a-seed0": {"resumed_from_steps": [10], "steps_with_other_prompts": 3},
                            "b-seed0": {"resumed_from_steps": [20], "steps_with_other_prompts": 0},
                            "c-seed0": {"resumed_from_steps": [], "steps_with_other_prompts": 0}}}  # fmt: skip
    assert study.resume_reading(recomputed) == [
        "- 2 of 3 trainings resumed from a checkpoint (`a-seed0`, `b-seed0`); 1 of them trained on other prompts "
        'from the resume on than an uninterrupted run would ("Prompts after a resume"). The comparisons above take '
        "every run as it ran."
    ]
    assert study.resume_reading({"files": {"c-seed0": recomputed["files"]["c-seed0"]}}) == []


def test_reading_says_why_a_hypothesis_could_not_be_computed():
    row = {"name": "M1", "arm": "meds_ds", "baseline": "dapo_ds", "metric": "agreement", "split": "pool",
           "seeds": [0, 1], "problems": 0, "direction": -1}  # fmt: skip
    assert study.hypothesis_reading(row, adjusted=True) == (
        "- M1: not shown; it could not be computed (`meds_ds` − `dapo_ds`, wrong-answer agreement on the training "
        "pool): no problem had at least 2 wrong samples in every run of both arms, so none entered."
    )
    assert "no seed has the base model and every arm" in study.hypothesis_reading({**row, "seeds": []}, adjusted=True)
    runs = {"meds_ds": {0: {"pool": {"wrong_answers": [{"7": 1}, {"7": 2}]}, "machine": {"cpu": "A"}}},
            "dapo_ds": {0: {"pool": {"wrong_answers": [{}, {"a": 1, "b": 1}]}, "machine": {"cpu": "A"}}}}  # fmt: skip
    analysis = {"mechanisms": {}, "primary": [{**row, "seeds": [0]}], "secondary": [], "seeds": [0]}
    lines = study.reading_lines(analysis, runs, {"files": {}}, None, STUDY)
    assert lines[2].endswith("so none entered. Problems with at least 2 wrong samples, per run: `meds_ds` seed 0 1 of "
                             "2; `dapo_ds` seed 0 1 of 2.")  # fmt: skip


def test_screen_samples_problem_i_with_seed_i_minus_1(monkeypatch):
    """An extension screen of problems 33-35 draws them in the training order with seeds 32-34 (the pilot's screen
    drew problem i with seed i - 1), and records who was right and where a wrong rollout's split falls."""
    from transformers import AutoTokenizer

    import hf_meds_cliff.evaluation.generation as generation
    import hf_meds_cliff.real_models as real_models
    from hf_meds_cliff.evaluation.sampling import Sample
    from hf_meds_cliff.toy import toy_policy

    calls = []

    class FakeBackend:
        def __init__(self, model, **kwargs):
            self.tokenizer = AutoTokenizer.from_pretrained(str(toy_policy()))

        def problems_per_call(self, samples):
            return 2

        def generate(self, prompts, seeds, sampling):
            calls.append((prompts, list(seeds), sampling))
            groups = []
            for messages in prompts:
                question = messages[-1]["content"].split(" Put")[0]
                terms = question.replace("Compute (", "").replace(") +", " +").rstrip(".").split(" + ")
                a, b, c = (int(x) for x in terms)
                right, bad = a + b + c, a + b + c + 1
                right = f"{a} + {b} = {a + b}. {a + b} + {c} = {right}. The answer is \\boxed{{{right}}}."
                wrong = f"{a} + {b} = {a + b}. {a + b} + {c} = {bad}. The answer is \\boxed{{{bad}}}."
                groups.append([Sample(right, 10, False), Sample(wrong, 10, False)])
            return groups

    monkeypatch.setattr(generation, "TransformersBackend", FakeBackend)
    monkeypatch.setattr(real_models, "smollm2_135m", lambda: "unused")
    monkeypatch.setattr(smollm2_pilot, "provenance", lambda: {"commit": "c"})
    design = smollm2_pilot.DESIGNS["easy_then_add"]
    record = smollm2_pilot.screen(design, 3, 2, 64, 1, start=32)
    assert [seeds for _, seeds, _ in calls] == [[32, 33], [34]]
    order = smollm2_pilot.design_problems(design, 35)
    assert [p["problem"] for p in record["problems"]] == [p["problem"] for p in order[32:]]
    assert record["first_problem"] == 33 and all(p["right"] == 1 for p in record["problems"])
    assert all(w["first_mistake"] == 1 and w["split_token"] > 0 for p in record["problems"] for w in p["wrong"])


def test_the_committed_report_is_what_the_committed_files_give(tmp_path):
    """Every number and sentence of docs/smollm2_mechanism_report.md is recomputed from the committed results files."""
    report = tmp_path / "report.md"
    study.write_report(study.RESULTS, report)
    assert report.read_text() == (study.ROOT / "docs" / "smollm2_mechanism_report.md").read_text()


def test_the_outside_recomputation_gives_the_reports_mechanism_tables():
    """audit/recompute_tables.py (standard library only, written from the report's recipe without the project's code)
    gives the committed report's MEDS and Cliff rows, cell for cell."""
    import re

    folder = study.RESULTS / "audit"
    out = subprocess.run([sys.executable, str(folder / "recompute_tables.py"), str(study.RESULTS)], check=True,
                         capture_output=True, text=True)  # fmt: skip
    assert out.stderr == "" and out.stdout in (folder / "tables.md").read_text()

    def rows(text: str) -> dict:
        found = {}
        for line in text.splitlines():
            m = re.match(r"\| `?(meds_ds|cliff|grpo_teacher)`?[ -]seed ?(\d) \|(.*)", line)
            if m:
                cells = []
                for cell in (c.strip() for c in m.group(3).strip(" |").split("|")):
                    pair = re.match(r"^(\S+) \((\S+)\)$", cell)  # the report's "mean (max)"
                    cells += [pair.group(1), pair.group(2)] if pair else [cell]
                found.setdefault((m.group(1), m.group(2)), cells)  # the first table naming the run
        return found

    report = rows((study.ROOT / "docs" / "smollm2_mechanism_report.md").read_text())
    assert len(report) == 9 and report == rows(out.stdout)
