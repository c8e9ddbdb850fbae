"""The SmolLM2 study's runner (studies/smollm2_study.py) on its test-only tiny toy-world configuration, and its report
on synthetic results files with hand-computed statistics."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "studies"))
import smollm2_study  # noqa: E402
from smollm2_study import ARMS, BASE, SEEDS, STUDY, TINY, SimulatedStop, run_study  # noqa: E402


def test_the_study_splits_are_the_pre_registered_problems():
    from hf_meds_cliff.data import build_prompt
    from hf_meds_cliff.real_world import real_world_rows

    problems = smollm2_study.study_problems(STUDY)
    assert [len(problems[name]) for name in ("train", "validation", "test")] == [512, 32, 128]
    used_before = {row["problem"] for row in real_world_rows("test", 48, "addsub99")}  # level choice and probe
    validation = {row["problem"] for row in problems["validation"]}
    test = {row["problem"] for row in problems["test"]}
    assert not (validation | test) & used_before and not validation & test and len(test) == 128
    assert problems["train"] == real_world_rows("train", 512, "addsub99")
    assert smollm2_study.chat_prompt(STUDY, "Compute 17 + 25.") == build_prompt("Compute 17 + 25.", "one_shot_boxed")


def test_pre_registered_constants():
    assert ARMS == ("grpo", "dapo_ds", "meds_ds", "cliff", "cliff_sim", "grpo_teacher_sim") and SEEDS == (0, 1)
    assert [h.name for h in smollm2_study.HYPOTHESES] == ["P1", "M1", "O1", "O2", "O3", "O4", "T1"]
    assert (STUDY.steps, STUDY.prompts_per_step, STUDY.num_generations, STUDY.max_new_tokens) == (60, 2, 8, 48)
    assert (STUDY.validation, STUDY.test, STUDY.train_problems, STUDY.save_steps) == ((48, 80), (80, 208), 512, 10)
    assert smollm2_study.SIMULATED_TEACHER == {"false_negative_rate": 0.14, "false_positive_rate": 0.02}
    dapo = smollm2_study.arm_config("dapo_ds", STUDY, 1, "/tmp/unused")
    meds = smollm2_study.arm_config("meds_ds", STUDY, 1, "/tmp/unused")
    for config in (dapo, meds):
        assert (config.loss_type, config.epsilon, config.epsilon_high) == ("dapo", 0.2, 0.28)
        assert config.dynamic_sampling and config.dynamic_sampling_max_rounds == 40
        assert (config.temperature, config.top_p, config.beta, config.learning_rate) == (0.7, 1.0, 0.0, 1e-5)
        assert (config.lr_scheduler_type, config.warmup_steps, config.seed) == ("linear", 0, 1)
    assert (meds.meds_alpha, meds.meds_beta) == (0.1, 0.2)
    teacher = smollm2_study.arm_config("grpo_teacher_sim", STUDY, 0, "/tmp/unused")
    cliff = smollm2_study.arm_config("cliff", STUDY, 0, "/tmp/unused")
    assert (teacher.cliff_outcome, cliff.cliff_outcome) == ("teacher", "verifier")
    assert (cliff.cliff_lam, cliff.loss_type, cliff.cliff_teacher) == (0.0, "grpo", "rule")
    grpo = smollm2_study.arm_config("grpo", STUDY, 0, "/tmp/unused")
    assert not getattr(grpo, "dynamic_sampling", False) and grpo.epsilon_high == 0.2
    with pytest.raises(ValueError, match="Unknown arm"):
        smollm2_study.arm_config("dapo", STUDY, 0, "/tmp/unused")
    with pytest.raises(SystemExit):  # the tiny configuration never writes into docs/
        smollm2_study.main(["--run", "--tiny", "--results_dir", "docs/real_model_results/study"])


@pytest.mark.slow
def test_tiny_run_records_every_field_and_resumes_after_a_stop(tmp_path, monkeypatch):
    results, work = tmp_path / "results", tmp_path / "work"
    arms, seeds = ("meds_ds", "grpo_teacher_sim"), (0,)
    # A simulated machine stop right after the first arm's checkpoint of step 1 (of 2).
    with pytest.raises(SimulatedStop):
        run_study(TINY, results, work, arms, seeds, command=["test"], stop_after_step=1)
    assert (results / "base-seed0.json").exists() and not (results / "meds_ds-seed0.json").exists()
    assert (work / "meds_ds-seed0" / "checkpoint-1" / "trainer_state.json").exists()
    assert not (work / "meds_ds-seed0" / "checkpoint-2").exists()
    base_mtime = (results / "base-seed0.json").stat().st_mtime_ns

    run_study(TINY, results, work, arms, seeds, command=["test"])
    assert (results / "base-seed0.json").stat().st_mtime_ns == base_mtime  # finished work is not redone
    assert not list(work.glob("*/checkpoint-*")) and (work / "meds_ds-seed0" / "final").is_dir()
    for arm in arms:
        record = json.loads((results / f"{arm}-seed0.json").read_text())
        assert (record["arm"], record["seed"], record["eval_seed"], record["settings"]) == (
            arm, 0, 0, json.loads(json.dumps(dataclasses.asdict(TINY)))
        )
        assert {"commit", "dirty", "started", "finished", "command", "machine", "config", "history"} <= set(record)
        assert record["started"] <= record["finished"] and record["command"] == "test"
        assert {"cpu", "cpu_flags", "torch", "trl", "transformers"} <= set(record["machine"])
        config_class = type(smollm2_study.arm_config(arm, TINY, 0, str(tmp_path)))
        assert {f.name for f in dataclasses.fields(config_class) if f.init} <= set(record["config"])
        assert record["config"]["seed"] == 0 and record["config"]["save_steps"] == 1
        steps = [row for row in record["history"] if "reward" in row]
        assert [row["step"] for row in steps] == [1, 2]  # both steps, across the stop
        assert all("collapse/top_wrong_share" in row and "collapse/window/batches" in row for row in steps)
        for split, size in (("validation", 2), ("test", 3)):
            evaluation = record[split]
            assert len(evaluation["problem_ids"]) == len(evaluation["correct"]) == size
            for correct, wrong in zip(evaluation["correct"], evaluation["wrong_answers"]):
                assert correct + sum(wrong.values()) == TINY.samples  # every sample is right or a counted wrong answer
            expected = sum(c / TINY.samples for c in evaluation["correct"]) / size
            assert math.isclose(evaluation["pass@1"], expected)
            assert {f"pass@{k}" for k in range(1, TINY.samples + 1)} <= set(evaluation)
    meds = json.loads((results / "meds_ds-seed0.json").read_text())
    assert [s["resumed_from"] for s in meds["training_segments"]] == [None, "checkpoint-1"]
    assert meds["trainer"] == "MEDSGRPOTrainer" and meds["config"]["dynamic_sampling"]
    logged = [row for row in meds["history"] if "reward" in row]
    for key in ("meds/idle", "meds/frac_groups_uniform", "dynamic_sampling/rounds"):
        assert all(key in row for row in logged), key
    teacher = json.loads((results / "grpo_teacher_sim-seed0.json").read_text())
    assert teacher["config"]["cliff_outcome"] == "teacher" and teacher["teacher"]["kind"] == "simulated"
    assert teacher["teacher"]["false_negative_rate"] == 0.14
    assert all("cliff/teacher_says_right_verifier_wrong" in row for row in teacher["history"] if "reward" in row)

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(smollm2_study, "train", must_not_run)
    monkeypatch.setattr(smollm2_study, "evaluate", must_not_run)
    run_study(TINY, results, work, arms, seeds, command=["test"])


def _evaluation(correct: list[int], wrong: list[dict], n: int = 8) -> dict:
    return {"problem_ids": [f"p{i}" for i in range(len(correct))], "samples_per_problem": n, "correct": correct,
            "wrong_answers": wrong, "pass@1": sum(correct) / (n * len(correct))}  # fmt: skip


def _same(counts):  # every wrong sample gives one answer: agreement 1
    return [{"7": 8 - c} if c < 8 else {} for c in counts]


def _distinct(counts):  # every wrong sample a different answer: agreement 0
    return [{f"a{j}": 1 for j in range(8 - c)} for c in counts]


MACHINE = {"cpu": "CPU A", "cpu_count": 2, "cpu_flags": ["avx2", "fma"], "platform": "Linux", "python": "3.11.7",
           "torch": "2.13.0+cpu", "torch_threads": 1, "trl": "1.16.0", "transformers": "5.24.0"}  # fmt: skip


def _write(results: Path, arm: str, seed: int, correct: list[int], wrong: list[dict], machine=MACHINE) -> None:
    evaluation = _evaluation(correct, wrong)
    record = {"arm": arm, "seed": seed, "test": evaluation, "validation": evaluation, "history": [], "commit": "c",
              "dirty": False, "machine": machine, "command": f"python run {arm} {seed}", "started": "t0",
              "finished": "t1", "train_seconds_last_segment": 90.0,
              "training_segments": [{"resumed_from": None}]}  # fmt: skip
    (results / f"{arm}-seed{seed}.json").write_text(json.dumps(record))


def test_report_reproduces_hand_computed_bootstrap_and_holm(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    counts = {
        BASE: [0, 0, 0, 7],  # problem 3 has one wrong sample: it cannot enter P1
        "grpo": [1, 2, 3, 4],
        "cliff": [3, 4, 5, 6],  # pass@1 +2/8 on every problem and seed; pass@8 equal (all 1)
        "dapo_ds": [0, 0, 0, 0],
        "cliff_sim": [2, 2, 2, 2],
        "grpo_teacher_sim": [3, 3, 3, 3],  # T1: -1/8 everywhere, against the prediction
    }
    for seed in (0, 1):
        for arm, correct in counts.items():
            _write(results, arm, seed, correct, _distinct(correct) if arm == BASE else _same(correct))
        meds = [1, 0, 0, 0] if seed == 0 else [0, 0, 0, 0]
        _write(results, "meds_ds", seed, meds, _same(meds))
    other_flags = {**MACHINE, "cpu_flags": ["avx2"]}  # another machine: one CPU flag fewer
    _write(results, BASE, 2, counts[BASE], _distinct(counts[BASE]), other_flags)  # seed 2 incomplete: not analysed
    (results / "dapo_ds-seed2.failed.json").write_text(
        json.dumps({"arm": "dapo_ds", "seed": 2, "errors": [{"error": "RuntimeError: x"}] * 2})
    )
    report = tmp_path / "report.md"
    analysis = smollm2_study.write_report(results, report, resamples=999)
    assert analysis["seeds"] == [0, 1] and analysis["incomplete_seeds"] == [2]
    assert analysis["failed"] == {"dapo_ds": {"2": ["RuntimeError: x", "RuntimeError: x"]}}
    rows = {row["name"]: row for row in analysis["hypotheses"]}
    # Constant cell differences: every resample gives the same difference, so the CI is that point and the
    # bootstrap p is 2 * (0 + 1) / (999 + 1) = 0.002 (no resample on the other side of 0).
    for name, difference, problems in (("P1", 1.0, 3), ("O3", 0.25, 4), ("T1", -0.125, 4)):
        row = rows[name]
        assert row["problems"] == problems
        assert math.isclose(row["difference"], difference)
        assert math.isclose(row["ci_low"], difference) and math.isclose(row["ci_high"], difference)
        assert math.isclose(row["p"], 0.002)
        # Holm over 7: three p-values of 0.002 are the smallest: 7 * 0.002, max(that, 6 * 0.002), ... = 0.014
        assert math.isclose(row["holm_p"], 0.014)
    assert (rows["P1"]["verdict"], rows["O3"]["verdict"], rows["T1"]["verdict"]) == ("holds", "holds", "reversed")
    for name in ("M1", "O4"):  # zero difference everywhere: p = min(1, 2 * 1000 / 1000) = 1
        assert rows[name]["difference"] == 0 and rows[name]["p"] == 1.0 and rows[name]["holm_p"] == 1.0
        assert rows[name]["verdict"] == "not shown"
    # O1: meds − dapo pass@1 differs only on problem 0 of seed 0 by 1/8: mean over 2 x 4 cells = 1/64
    assert math.isclose(rows["O1"]["difference"], 1 / 64) and math.isclose(rows["O2"]["difference"], 1 / 8)
    ranked = sorted(rows.values(), key=lambda r: r["p"])
    expected, running = {}, 0.0
    for rank, row in enumerate(ranked):
        running = max(running, min(1.0, (7 - rank) * row["p"]))
        expected[row["name"]] = running
    assert all(math.isclose(rows[name]["holm_p"], value) for name, value in expected.items())
    assert rows["O1"]["verdict"] == "not shown"  # p >= 0.25: a resample without seed 0's problem 0 gives 0
    text = report.read_text()
    assert "| P1 | `grpo` − `base` | agreement | > 0 | 2 | 3 |" in text and "*reversed*" in text
    assert "T1 (simulated teacher): reversed" in text and "not a claim that the two are equal" in text
    assert "incomplete seeds (not analysed): [2]" in text and "`dapo_ds` seed 2" in text
    assert "do not all come from one commit" not in text  # one commit "c", clean
    # provenance: the two machine records are told apart by their CPU flags alone, and each file's command is listed
    assert "**The runs come from 2 different machine records.**" in text
    assert "- Machine of 14 file(s): CPU A, 2 cores (2 CPU flags" in text and "- Machine of 1 file(s)" in text
    assert "torch 2.13.0+cpu (1 thread), trl 1.16.0, transformers 5.24.0" in text
    assert "| `cliff-seed1.json` | `python run cliff 1` | t0 | t1 | 1.5 | 1: step 0 |" in text


def test_a_run_that_fails_twice_is_recorded_and_not_tried_again(tmp_path, monkeypatch):
    calls = []

    def failing(arm, seed, *args, **kwargs):
        calls.append((arm, seed))
        raise RuntimeError(f"boom {len(calls)}")

    monkeypatch.setattr(smollm2_study, "run_base", lambda *args, **kwargs: None)
    monkeypatch.setattr(smollm2_study, "run_arm", failing)
    run_study(TINY, tmp_path, tmp_path / "work", ("cliff",), (3,), command=["test"])
    assert calls == [("cliff", 3), ("cliff", 3)]  # run again once, with the same seed
    failed = json.loads((tmp_path / "cliff-seed3.failed.json").read_text())
    assert [e["error"] for e in failed["errors"]] == ["RuntimeError: boom 1", "RuntimeError: boom 2"]
    assert {"commit", "dirty", "machine", "command"} <= set(failed)
    run_study(TINY, tmp_path, tmp_path / "work", ("cliff",), (3,), command=["test"])
    assert len(calls) == 2  # a failed run is reported, not tried a third time
