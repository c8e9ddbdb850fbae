"""The learning study: the pre-registered stage-1 rule on hand-made results, the results format, and
the quick mode end to end (stage 1, decision, stage 2, report)."""

from __future__ import annotations

import json
import math

import pytest
from helpers import ROOT, load_module

study = load_module(ROOT / "studies" / "learning_study.py", "learning_study")
common = study.study_common


def _write(path, value):
    path.write_text(json.dumps(value))


def _warmup(results, world, pass1, pass16):
    per_seed = {str(s): {"pass@1": p1, "pass@16": p16} for s, (p1, p16) in enumerate(zip(pass1, pass16))}
    _write(results / f"warmup-{world}.json", {"method": "warmup", "heldout_per_eval_seed": per_seed})


def _runs(results, name, pass1, pass16, minutes=2.0):
    for seed, (p1, p16) in enumerate(zip(pass1, pass16)):
        run = {"method": "grpo", "seed": seed, "stage": 1, "config": {}, "train_seconds": 600.0, "train_cpu_seconds": 60 * minutes,
               "heldout": {"pass@1": p1, "pass@16": p16}}  # fmt: skip
        _write(results / f"stage1-{name}-seed{seed}.json", run)


def test_stage1_rule_by_hand(tmp_path):
    a, b, c, d = study.CANDIDATES
    # warm-up: pass@1 0.30 at every evaluation seed; pass@16 0.80, 0.82, 0.78, 0.80, 0.80 -> mean 0.80, sd 0.01414
    _warmup(tmp_path, "trap", [0.30] * 5, [0.80, 0.82, 0.78, 0.80, 0.80])
    _warmup(tmp_path, "toy", [0.30] * 5, [0.80] * 5)
    # a: gains +6, +5 (0.35 - 0.30 is 0.0499999... in floats: counts), +7, +2, +8 -> 4 of 5; pass@16 mean 0.78
    #    >= 0.80 - 2 * 0.01414 = 0.7717: passes, mean gain 5.6
    _runs(tmp_path, a.name, [0.36, 0.35, 0.37, 0.32, 0.38], [0.78] * 5)
    # b: gains all +10 but pass@16 mean 0.70 < 0.7717: fails (sharper, not better)
    _runs(tmp_path, b.name, [0.40] * 5, [0.70] * 5)
    # c: gains +6 in 3 seeds only: fails rule 1
    _runs(tmp_path, c.name, [0.36, 0.36, 0.36, 0.30, 0.30], [0.80] * 5)
    # d: gains +6.5 everywhere, pass@16 fine, but 9 minutes a run: over the budget
    _runs(tmp_path, d.name, [0.365] * 5, [0.80] * 5, minutes=9.0)
    decision = study.decide(tmp_path, study.CANDIDATES)
    rows = {row["candidate"]: row for row in decision["candidates"]}
    assert rows[a.name]["seeds_with_gain"] == 4 and rows[a.name]["passes"]
    assert rows[a.name]["mean_pass1_gain"] == pytest.approx(0.056)
    assert rows[a.name]["warmup_pass16_sd"] == pytest.approx(0.0141421, abs=1e-6)
    assert (
        rows[b.name]["rule"] == {"pass1": True, "pass16": False, "budget": True}
        and not rows[b.name]["passes"]
    )
    assert rows[c.name]["seeds_with_gain"] == 3 and not rows[c.name]["passes"]
    assert rows[d.name]["rule"]["budget"] is False and not rows[d.name]["passes"]
    assert decision["complete"] and decision["chosen"] == a.name

    # d within budget: gain 6.5 vs a's 5.6 -> d (more than 1 point apart? no: 0.9) -> tie -> fewer steps: a (60)
    _runs(tmp_path, d.name, [0.365] * 5, [0.80] * 5, minutes=3.0)
    assert study.decide(tmp_path, study.CANDIDATES)["chosen"] == a.name
    # d clearly better (+8): d
    _runs(tmp_path, d.name, [0.38] * 5, [0.80] * 5, minutes=3.0)
    assert study.decide(tmp_path, study.CANDIDATES)["chosen"] == d.name
    # an incomplete candidate means no decision yet
    (tmp_path / f"stage1-{c.name}-seed4.json").unlink()
    decision = study.decide(tmp_path, study.CANDIDATES)
    assert not decision["complete"] and decision["chosen"] is None  # d passes, but c is not finished


def test_candidates_are_the_preregistered_ones():
    # The rule and the candidates were committed before any stage-1 run; changing them afterwards is a change of
    # the study that must show up in review (docs/learning_study.md lists them).
    assert [(c.name, c.world, c.steps, c.pool_size, c.learning_rate, c.lr_scheduler_type) for c in study.CANDIDATES] == [
        ("trap-lr2e-4", "trap", 60, 120, 2e-4, "constant_with_warmup"),
        ("trap-lr5e-4-cosine", "trap", 60, 120, 5e-4, "cosine"),
        ("trap-lr1e-4-long", "trap", 120, 240, 1e-4, "constant_with_warmup"),
        ("toy-lr1e-4-long", "toy", 120, 240, 1e-4, "constant_with_warmup"),
    ]  # fmt: skip
    assert all(c.visits_per_prompt == 4 for c in study.CANDIDATES)
    assert (study.MIN_PASS1_GAIN, study.MIN_SEEDS_WITH_GAIN, study.NOISE_SDS) == (0.05, 4, 2.0)


def test_stage3_design_is_the_preregistered_one():
    # Stage 3's arms, hypotheses and statistics were committed before any stage-3 run (docs/learning_study.md renders
    # them from learning_design.py); a change afterwards is a change of the study that must show up in review.
    design = study.learning_design
    assert [(a.name, a.method, a.overlong, a.overrides) for a in design.STAGE3_ARMS] == [
        ("grpo", "grpo", False, ()),
        ("dapo", "dapo", True, ()),
        ("dapo_no_overlong", "dapo", False, ()),
        ("dapo_ds", "dapo", True, (("dynamic_sampling", True),)),
        ("meds_ds", "meds", True, (("dynamic_sampling", True),)),
        ("meds", "meds", True, ()),
        ("meds_answer", "meds", True, (("meds_cluster_by", "answer"),)),
        ("meds_noise_free", "meds", True, (("meds_noise_policy", "ignore"),)),
        ("cliff", "cliff", False, ()),
        ("cliff_b0", "cliff", False, (("cliff_recentre", False),)),
        ("grpo_teacher_paper", "cliff", False, (("cliff_split_credit", False), ("cliff_recentre", False))),
    ]
    assert [(h.name, h.arm, h.baseline, h.direction) for h in design.STAGE3_HYPOTHESES] == [
        ("H1", "meds", "dapo", 1), ("H2", "meds_ds", "dapo_ds", 1), ("H3", "dapo_ds", "dapo", 1),
        ("H4", "meds_answer", "meds", 1), ("H5", "meds_noise_free", "meds", 1), ("H6", "dapo_no_overlong", "dapo", 1),
        ("H7", "dapo_no_overlong", "grpo", -1), ("H8", "cliff_b0", "cliff", 1), ("H9", "cliff", "grpo_teacher_paper", 1),
    ]  # fmt: skip
    assert design.STAGE3_SEEDS == tuple(range(100, 108)) and design.STAGE3_REGIME == "trap-lr1e-4-long"
    assert (design.BOOTSTRAP_RESAMPLES, design.FAMILY_ALPHA) == (10_000, 0.05)


def test_holm_by_hand():
    assert common.holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]  # 3 x 0.01; 2 x 0.03; max(0.06, 0.04)
    assert common.holm([0.04, 0.01]) == [0.04, 0.02]
    adjusted = common.holm([0.02, math.nan, 0.5])  # NaN is not counted: m = 2
    assert adjusted[0] == 0.04 and math.isnan(adjusted[1]) and adjusted[2] == 0.5
    assert common.holm([0.6, 0.7]) == [1.0, 1.0]  # capped at 1, monotone


def test_bootstrap_over_problems_and_seeds_by_hand():
    resamples = 20_000
    # 1 seed, problem differences 0 and 0.2: resampled means 0 (1/4), 0.1 (1/2), 0.2 (1/4)
    # -> 95 % CI [0, 0.2]; #{<= 0} ~ B/4, #{>= 0} = B -> p ~ 2 (B/4 + 1) / (B + 1) ~ 0.5
    result = common.bootstrap_difference([[0.5, 0.7]], [[0.5, 0.5]], resamples=resamples)
    assert result["difference"] == pytest.approx(0.1)
    assert (result["ci_low"], result["ci_high"]) == (pytest.approx(0.0), pytest.approx(0.2))
    assert result["p"] == pytest.approx(0.5, abs=0.03)
    # seeds are resampled too: 2 seeds with differences 1 and 0 on one problem -> means 1, 0.5, 0 w.p. 1/4, 1/2, 1/4
    result = common.bootstrap_difference([[1.0], [0.0]], [[0.0], [0.0]], resamples=resamples)
    assert result["difference"] == pytest.approx(0.5) and result["p"] == pytest.approx(0.5, abs=0.03)
    assert (result["ci_low"], result["ci_high"]) == (pytest.approx(0.0), pytest.approx(1.0))
    # every difference positive: no resample reaches 0 -> p = 2 / (B + 1), the smallest the bootstrap can give
    result = common.bootstrap_difference([[0.6, 0.7], [0.8, 0.6]], [[0.5, 0.5], [0.5, 0.5]], resamples=resamples)
    assert result["p"] == pytest.approx(2 / (resamples + 1)) and result["ci_low"] > 0
    with pytest.raises(ValueError, match=r"arm \(1, 2\) and baseline \(2, 2\) must be the same"):
        common.bootstrap_difference([[0.5, 0.7]], [[0.5, 0.5], [0.5, 0.5]])


def test_pass_at_k_matrix_by_hand():
    # pass@2 with n = 4: 1 - C(4 - c, 2) / C(4, 2) = 1 - C(4 - c, 2) / 6: c = 0 -> 0, 1 -> 1/2, 2 -> 5/6, 4 -> 1
    assert common.pass_at_k_matrix([[0, 1], [2, 4]], n=4, k=2).tolist() == [[0.0, 0.5], [pytest.approx(5 / 6), 1.0]]


@pytest.mark.slow
@pytest.mark.integration
def test_quick_mode_writes_the_results_format_and_the_report(toy_policy_path, tmp_path):
    results, report = tmp_path / "results", tmp_path / "docs" / "learning_study.md"
    common = ["--quick", "--results_dir", str(results), "--output_dir", str(tmp_path / "work")]
    assert study.main([*common, "--stage", "1", "--decide"]) == 0
    assert (
        study.main([*common, "--stage", "2", "--methods", "grpo", "meds", "cliff", "--report", str(report)])
        == 0
    )
    stage1 = json.loads((results / "stage1-quick-seed0.json").read_text())
    assert stage1["method"] == "grpo" and stage1["stage"] == 1 and stage1["seed"] == 0
    assert isinstance(stage1["config"], dict) and stage1["config"]["steps"] == 2
    warmup = json.loads((results / "warmup.json").read_text())
    for record in (
        stage1,
        warmup,
        *(json.loads((results / f"{m}-seed0.json").read_text()) for m in ("grpo", "meds", "cliff")),
    ):
        assert set(record["heldout"]) >= {"pass@1", "pass@4"}  # quick: 4 samples, so pass@k up to 4
        assert all(0.0 <= record["heldout"][f"pass@{k}"] <= 1.0 for k in (1, 2, 3, 4))
    cliff = json.loads((results / "cliff-seed0.json").read_text())
    assert cliff["method"] == "cliff" and cliff["seed"] == 0 and cliff["stage"] == 2
    assert [p["step"] for p in cliff["curve"]] == [0, 1, 2]
    assert any("cliff/prefix_fraction" in h for h in cliff["history"])
    meds = json.loads((results / "meds-seed0.json").read_text())
    assert any("meds/advantage_shift" in h for h in meds["history"])
    text = report.read_text()
    assert "| quick | toy | 2 |" in text and "| cliff | 1 |" in text
    assert (report.parent / "figures" / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Resume: nothing is trained again.
    mtimes = {p: p.stat().st_mtime for p in results.glob("*-seed0.json")}
    assert study.main([*common, "--stage", "2", "--methods", "grpo", "meds", "cliff"]) == 0
    assert mtimes == {p: p.stat().st_mtime for p in results.glob("*-seed0.json")}


def _stage3_run(results, arm, seed, correct, samples=4, commit="a" * 40, history=(), cpu=None):
    run = {"stage": 3, "arm": arm, "method": arm.split("_")[0], "seed": seed, "samples_per_problem": samples,
           "heldout": {"pass@1": sum(correct) / (samples * len(correct))}, "heldout_correct": correct,
           "validation": {"pass@1": 0.5}, "validation_correct": [2] * len(correct), "commit": commit, "dirty": False,
           "history": list(history), "train_cpu_seconds": cpu}  # fmt: skip
    _write(results / f"stage3-{arm}-seed{seed}.json", run)


def test_stage3_report_tables_by_hand(tmp_path):
    learning_report = study.learning_report
    # H3 dapo_ds - dapo: every problem of every seed 1 more correct of 4 -> pass@1 +25 points, p = 2 / (B + 1)
    # H6 dapo_no_overlong - dapo: identical counts -> +0.0, p = 1 (every resample is 0)
    for seed in (100, 101, 102):
        _stage3_run(tmp_path, "dapo", seed, [1, 2, 0, 3])
        _stage3_run(tmp_path, "dapo_ds", seed, [2, 3, 1, 4])
        _stage3_run(tmp_path, "dapo_no_overlong", seed, [1, 2, 0, 3])
    # one seed only: no comparison yet; its mechanism metrics are averaged over the logged steps
    meds_history = [{"step": 1, "reward": 0.5, "meds/frac_penalized": 0.25, "meds/advantage_shift": 0.01,
                     "meds/frac_groups_differentiated": 0.5},
                    {"step": 2, "reward": 0.5, "meds/frac_penalized": 0.75, "meds/advantage_shift": 0.03,
                     "meds/frac_groups_differentiated": 0.0}]  # fmt: skip
    _stage3_run(tmp_path, "meds", 100, [4, 4, 4, 4], history=meds_history, cpu=90.4)
    text = learning_report.stage3_results_section(tmp_path)
    primary, secondary = text.split("held-out pass@16")
    rows = {line.split(" | ")[1]: line for line in primary.splitlines() if line.startswith("| H")}
    assert "| H3 | `dapo_ds` − `dapo` | > | – | no pair of runs yet |" in secondary  # 4 samples: no pass@16
    b = study.learning_design.BOOTSTRAP_RESAMPLES
    # Holm over the family: only H3 and H6 have a p (m = 2): H3 2 * 2 / (B + 1), H6 1
    h3 = rows["`dapo_ds` − `dapo`"]
    assert "| 3 | +25.0 (+25.0, +25.0) |" in h3 and f"| {2 / (b + 1):.4f} | {4 / (b + 1):.4f} |" in h3
    assert h3.endswith("| interim: holds |")  # 10 of 88 runs: every verdict is interim
    assert "**Incomplete: 10 of 88 pre-registered runs.**" in text
    h6 = rows["`dapo_no_overlong` − `dapo`"]
    assert "| +0.0 (+0.0, +0.0) | 1.0000 | 1.0000 |" in h6 and h6.endswith("| interim: not shown |")
    assert rows["`meds` − `dapo`"].endswith("| – | no pair of runs yet | | | | |")
    assert "| `dapo_ds` | 3 | 62.5 ± 0.0 |" in text  # 10 of 16 samples correct and "aaaaaaaa" in text
    assert "| `meds` | 1 | 50.0 | 0.0200 | 25.0 | n/a | 90 |" in text
    assert "| `dapo` | 3 | n/a | n/a | n/a | n/a | n/a |" in text
    # stage 2's tables leave stage 3's files out
    assert learning_report._runs(tmp_path) == {}


@pytest.mark.slow
@pytest.mark.integration
def test_quick_stage3_writes_the_preregistered_record(toy_policy_path, tmp_path):
    results = tmp_path / "results"
    common = ["--quick", "--results_dir", str(results), "--output_dir", str(tmp_path / "work")]
    arms = ["grpo", "meds_answer", "cliff_b0"]
    assert study.main([*common, "--stage", "3", "--arms", *arms, "--seeds", "100", "--report", str(tmp_path / "r.md")]) == 0
    for arm in arms:
        run = json.loads((results / f"stage3-{arm}-seed100.json").read_text())
        assert (run["stage"], run["arm"], run["seed"]) == (3, arm, 100)
        assert run["method"] == {"grpo": "grpo", "meds_answer": "meds", "cliff_b0": "cliff"}[arm]
        assert set(run["heldout"]) >= {"pass@1", "pass@4"} and set(run["validation"]) >= {"pass@1", "pass@4"}
        for key in ("heldout_correct", "validation_correct"):  # quick: 4 problems x 4 samples
            assert len(run[key]) == 4 and all(isinstance(c, int) and 0 <= c <= 4 for c in run[key])
        assert run["heldout"]["pass@1"] == pytest.approx(sum(run["heldout_correct"]) / 16)
        assert run["commit"] is None or len(run["commit"]) == 40
        assert run["started_at"] <= run["finished_at"] and run["finished_at"].endswith("+00:00")
    meds = json.loads((results / "stage3-meds_answer-seed100.json").read_text())
    assert meds["arm_config"]["meds_cluster_by"] == "answer" and meds["arm_config"]["overlong_penalty"] is True
    assert any("meds/answer_memory/clusters_per_key" in h for h in meds["history"])
    cliff = json.loads((results / "stage3-cliff_b0-seed100.json").read_text())
    assert cliff["arm_config"]["cliff_recentre"] is False and cliff["arm_config"]["overlong_penalty"] is False
    assert json.loads((results / "stage3-warmup.json").read_text())["per_eval_seed"]["100"]["heldout_correct"]
    assert "### Stage 3 results" in (tmp_path / "r.md").read_text()
    mtimes = {p: p.stat().st_mtime for p in results.glob("stage3-*.json")}
    assert study.main([*common, "--stage", "3", "--arms", *arms, "--seeds", "100"]) == 0  # resumes: nothing retrained
    assert mtimes == {p: p.stat().st_mtime for p in results.glob("stage3-*.json")}
