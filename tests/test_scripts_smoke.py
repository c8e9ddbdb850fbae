"""Smoke runs of the study and GPU smoke scripts on their CPU paths (real training, a step or two)."""

import json

import pytest
from helpers import ROOT, load_module, load_script


@pytest.mark.slow
def test_gpu_smoke_script_passes_on_the_cpu_path(toy_policy_path, capsys):
    status = load_script("gpu_smoke").main(
        ["--device", "cpu", "--steps", "1", "--policy", str(toy_policy_path),
         "--cases", "grpo", "meds", "meds_gradacc", "cliff_lora"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    for case in ("grpo", "meds", "meds_gradacc", "cliff_lora"):
        assert f"PASS {case} " in out
    assert "MEDS/GRPO step-time ratio:" in out


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
