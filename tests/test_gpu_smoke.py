"""scripts/gpu_smoke.py fails loudly: planted failures (a skip, frozen weights, a non-finite loss, a hang, an import
of what the bundle leaves out) are each reported and make the run exit non-zero; its checks and its wheel slimming,
by hand."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import zipfile

import pytest
import torch
from helpers import ROOT, load_script

SCRIPT = ROOT / "scripts" / "gpu_smoke.py"


@pytest.fixture(scope="module")
def smoke():
    return load_script("gpu_smoke")


def run_script(*args: str, timeout: float = 600) -> tuple[int, list[dict]]:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    return completed.returncode, lines


def by_case(lines: list[dict]) -> dict:
    return {line["case"]: line for line in lines if "case" in line}


def test_a_planted_skip_and_a_planted_hang_are_reported_and_fail_the_run(toy_policy_path):
    status, lines = run_script("--policy", str(toy_policy_path), "--cases", "env", "--plant", "env=skip")
    assert status == 1
    assert by_case(lines)["env"]["status"] == "skip" and by_case(lines)["env"]["reason"] == "planted skip"
    assert lines[-1]["summary"] == {"pass": 0, "fail": 0, "skip": 1} and lines[-1]["exit"] == 1

    # The env case's timeout is 90 s; scaled down to 3 s, the hung case is killed and reported.
    status, lines = run_script(
        "--policy", str(toy_policy_path), "--cases", "env", "--plant", "env=hang", "--timeout-scale", str(3 / 90)
    )
    assert status == 1
    env = by_case(lines)["env"]
    assert env["status"] == "fail" and env["reason"] == "timed out after 3 s"
    assert lines[-1]["summary"]["fail"] == 1


def test_a_case_that_imports_what_the_bundle_leaves_out_fails(toy_policy_path):
    """matplotlib is NOT_CARRIED: the GPU machine cannot import it, the CPU dry run's interpreter can, so the case's
    own check must catch it. The same case without the plant passes (pillow, imported by transformers only where it
    is installed, is accepted: OPTIONAL_IMPORTS)."""
    status, lines = run_script("--policy", str(toy_policy_path), "--cases", "env", "--plant", "env=not_carried")
    assert status == 1
    env = by_case(lines)["env"]
    assert env["status"] == "fail"
    assert env["reason"].startswith("imported what the bundle does not carry (NOT_CARRIED): {")
    assert "'matplotlib': ['matplotlib'" in env["reason"] and "pillow" not in env["reason"]
    status, lines = run_script("--policy", str(toy_policy_path), "--cases", "env")
    assert status == 0 and by_case(lines)["env"]["status"] == "pass"


@pytest.mark.slow
@pytest.mark.integration
def test_frozen_weights_and_a_non_finite_loss_are_reported_and_fail_the_run(toy_policy_path):
    status, lines = run_script(
        "--policy", str(toy_policy_path), "--cases", "cliff", "cliff_lora",
        "--plant", "cliff=frozen", "--plant", "cliff_lora=nan_loss",
    )  # fmt: skip
    assert status == 1
    cases = by_case(lines)
    assert cases["cliff"]["status"] == "fail"
    assert cases["cliff"]["reason"].startswith("only 0 of 46 trainable weights moved")
    assert cases["cliff_lora"]["status"] == "fail"
    assert cases["cliff_lora"]["reason"].startswith("non-finite loss logged: [nan")
    assert lines[-1]["summary"] == {"pass": 0, "fail": 2, "skip": 0}


def test_exit_status_is_zero_only_when_every_requested_case_passed(smoke):
    passed = [{"case": "env", "status": "pass"}, {"case": "grpo", "status": "pass"}]
    assert smoke.exit_status(passed, ["env", "grpo"]) == 0
    assert smoke.exit_status(passed[:1] + [{"case": "grpo", "status": "skip"}], ["env", "grpo"]) == 1
    assert smoke.exit_status(passed[:1] + [{"case": "grpo", "status": "fail"}], ["env", "grpo"]) == 1
    assert smoke.exit_status(passed[:1], ["env", "grpo"]) == 1  # a requested case that never reported


def test_loss_check_rejects_non_finite_and_missing_losses(smoke):
    history = [{"loss": 0.5}, {"loss": -0.1}, {"train_loss": 0.2, "train_runtime": 1.0, "loss": 0.2}]
    assert smoke.check_losses_finite(history, 2) == [0.5, -0.1]
    with pytest.raises(smoke.CaseFailed, match="1 losses logged for 2 steps"):
        smoke.check_losses_finite(history[:1], 2)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(smoke.CaseFailed, match="non-finite loss logged"):
            smoke.check_losses_finite([{"loss": 0.5}, {"loss": bad}], 2)


def test_weight_check_needs_movement_and_for_lora_a_frozen_base(smoke):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    before = smoke.snapshot(model)
    with pytest.raises(smoke.CaseFailed, match="only 0 of 4 trainable weights moved"):
        smoke.check_weights_moved(before, model, lora=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.25)
    assert smoke.check_weights_moved(before, model, lora=False)["largest_change"] == pytest.approx(0.25)
    with torch.no_grad():
        model[0].weight[0, 0] = float("nan")
    with pytest.raises(smoke.CaseFailed, match="1 weights became non-finite"):
        smoke.check_weights_moved(before, model, lora=False)

    class Adapted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.base = torch.nn.Linear(2, 2).requires_grad_(False)
            self.lora_B = torch.nn.Linear(2, 2, bias=False)

    adapted = Adapted()
    before = smoke.snapshot(adapted)
    with pytest.raises(smoke.CaseFailed, match="1 of 1 lora_B weights did not move"):
        smoke.check_weights_moved(before, adapted, lora=True)
    with torch.no_grad():
        adapted.lora_B.weight.add_(1.0)
        adapted.base.weight.add_(1.0)
    with pytest.raises(smoke.CaseFailed, match="frozen base weights moved"):
        smoke.check_weights_moved(before, adapted, lora=True)


def test_slim_wheel_drops_the_listed_paths_and_rewrites_record(smoke, tmp_path):
    source = tmp_path / "pyarrow-1.0-cp312-cp312-linux_x86_64.whl"
    files = {
        "pyarrow/__init__.py": b"x = 1\n",
        "pyarrow/tests/test_a.py": b"assert True\n",
        "pyarrow/include/arrow.h": b"// header\n",
        "pyarrow/libarrow_flight.so.2600": b"\0" * 100,
        "pyarrow/_s3fs.cpython-312-x86_64-linux-gnu.so": b"\0" * 10,
        "pyarrow/lib.cpython-312-x86_64-linux-gnu.so": b"\1" * 50,
    }
    with zipfile.ZipFile(source, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in files.items())
        wheel.writestr("pyarrow-1.0.dist-info/RECORD", record + "pyarrow-1.0.dist-info/RECORD,,\n")
    target = tmp_path / "out" / source.name
    target.parent.mkdir()
    removed = smoke.slim_wheel(source, target)
    assert removed == {"removed_files": 4, "removed_bytes": 12 + 10 + 100 + 10}
    with zipfile.ZipFile(target) as wheel:
        kept = sorted(wheel.namelist())
        assert kept == [
            "pyarrow-1.0.dist-info/RECORD", "pyarrow/__init__.py", "pyarrow/lib.cpython-312-x86_64-linux-gnu.so",
        ]  # fmt: skip
        assert {info.compress_type for info in wheel.infolist()} == {zipfile.ZIP_STORED}
        rows = list(csv.reader(io.StringIO(wheel.read("pyarrow-1.0.dist-info/RECORD").decode())))
    assert [row[0] for row in rows] == [
        "pyarrow/__init__.py", "pyarrow/lib.cpython-312-x86_64-linux-gnu.so", "pyarrow-1.0.dist-info/RECORD",
    ]  # fmt: skip


def test_plant_rejects_unknown_cases_and_kinds():
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--plant", "grpo=explode"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 2 and "--plant 'grpo=explode'" in completed.stderr
