"""Smoke runs of the study and GPU smoke scripts on their CPU paths (real training, a step or two)."""

import json

import pytest
from helpers import ROOT, load_module, load_script


@pytest.mark.slow
@pytest.mark.integration
def test_gpu_smoke_script_passes_on_the_cpu_path(toy_policy_path, capsys):
    """Three of scripts/gpu_smoke.py's cases on CPU without a bundle (CI's GPU dry-run lane runs them all against the
    prepared bundle; tests/test_gpu_smoke.py plants failures)."""
    status = load_script("gpu_smoke").main(
        ["--device", "cpu", "--policy", str(toy_policy_path), "--cases", "grpo", "meds", "cliff_lora"]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert status == 0, lines
    cases = {line["case"]: line for line in lines if "case" in line}
    assert [cases[case]["status"] for case in ("grpo", "meds", "cliff_lora")] == ["pass"] * 3
    assert cases["grpo"]["measures"]["trainer"] == "trl.trainer.grpo_trainer.GRPOTrainer"
    assert min(cases["meds"]["measures"]["penalties"]) < 0 and cases["cliff_lora"]["measures"]["split_rows"] == 2
    assert lines[-1]["summary"] == {"pass": 3, "fail": 0, "skip": 0}


@pytest.mark.slow
@pytest.mark.integration
def test_toy_study_quick_mode_trains_evaluates_and_reports(toy_policy_path, tmp_path):
    study = load_module(ROOT / "studies" / "toy_study.py", "toy_study")
    report = tmp_path / "docs" / "toy_study.md"
    assert study.main(["--quick", "--output_dir", str(tmp_path / "study"), "--report", str(report)]) == 0
    results = json.loads((tmp_path / "study" / "results.json").read_text())
    assert sorted(r["method"] for r in results["runs"]) == sorted(study.METHODS)
    for run in results["runs"]:
        assert set(run["eval"]["pass@k"]) == {"1", "2", "4"}
        assert run["probe"][0]["step"] == 0 and run["probe"][-1]["step"] == study.QUICK.steps
        assert 0.0 <= run["probe"][-1]["reward"] <= 1.0
    meds = next(r for r in results["runs"] if r["method"] == "meds")
    assert any("meds/frac_with_feature" in h for h in meds["history"])
    cliff = next(r for r in results["runs"] if r["method"] == "cliff")
    assert any("cliff/groups_cliff" in h for h in cliff["history"])
    text = report.read_text()
    assert "| meds |" in text and "figures/toy_passk.png" in text
    assert (report.parent / "figures" / "toy_passk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
