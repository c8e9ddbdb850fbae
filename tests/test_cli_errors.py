"""``hf-meds-cliff`` errors are one line (plus usage for a usage error) with exit status 2/1/130 and no
traceback; the report survives a damaged run folder and says what it skipped; a failed eval does not block its
folder; run text cannot reverse or widen the page; huge values draw no NaN."""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_meds_cliff import cli
from hf_meds_cliff.report import svg_line_chart, write_report

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(cli.__file__).parents[1])}
ENV.pop(cli.DEBUG_ENV, None)


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real console entry point in a fresh interpreter (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "hf_meds_cliff.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        stdin=subprocess.DEVNULL,
    )


def error_lines(stderr: str, command: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"hf-meds-cliff {command}: error:")]


def assert_one_line_error(result, command: str, status: int, pattern: str) -> str:
    assert result.returncode == status, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = error_lines(result.stderr, command)
    assert re.search(pattern, line), line
    if status == 2:  # a usage error shows the usage line too
        assert "usage: hf-meds-cliff " + command in result.stderr
    return line


# ---------------------------------------------------------------------------------------------------------
# One line, not a traceback
# ---------------------------------------------------------------------------------------------------------


def test_report_errors_are_one_line(tmp_path):
    missing = run_cli("report", str(tmp_path / "no-such-run"))
    assert_one_line_error(missing, "report", 1, r"no-such-run is not a directory; pass the --output_dir")

    run = tmp_path / "run"
    run.mkdir()
    directory = run_cli("report", str(run), "-o", str(tmp_path))
    assert_one_line_error(directory, "report", 2, r"-o .* is a directory; give the HTML file's path")

    unknown = run_cli("report", str(run), "--colour", "red")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "unrecognized arguments: --colour red" in unknown.stderr


def test_eval_errors_are_one_line(tmp_path):
    out = str(tmp_path / "out")
    missing_model = run_cli("eval", "--model_name_or_path", str(tmp_path / "nope"), "--output_dir", out)
    assert_one_line_error(missing_model, "eval", 2, r"nope'? does not exist")

    k_over_n = run_cli("eval", "--model_name_or_path", "toy", "--output_dir", out, "--num_samples", "2",
                       "--k_values", "4")  # fmt: skip
    assert_one_line_error(k_over_n, "eval", 2, r"\b4\b.*\b2\b|k")

    unknown_benchmark = run_cli("eval", "--model_name_or_path", "toy", "--output_dir", out, "--benchmarks",
                                "no_such_benchmark")  # fmt: skip
    assert_one_line_error(unknown_benchmark, "eval", 2, r"no_such_benchmark")

    unknown_flag = run_cli("eval", "--model_name_or_path", "toy", "--output_dir", out, "--temprature", "1")
    assert unknown_flag.returncode == 2 and "Traceback" not in unknown_flag.stderr
    assert "usage: hf-meds-cliff eval" in unknown_flag.stderr
    assert "error: unrecognized arguments: --temprature 1" in unknown_flag.stderr

    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    file_output = run_cli("eval", "--model_name_or_path", "toy", "--output_dir", str(a_file))
    assert_one_line_error(file_output, "eval", 1, r"a-file is a file, not a folder")


def test_a_hub_id_offline_is_one_line_and_does_not_block_the_folder(tmp_path, toy_policy_path):
    out = tmp_path / "eval"
    common = ["--output_dir", str(out), "--num_samples", "2", "--toy_num_problems", "3", "--no_progress"]
    offline = run_cli("eval", "--model_name_or_path", "no-such-org/no-such-model", *common)
    line = assert_one_line_error(offline, "eval", 1, r"no-such-org/no-such-model")
    assert len(line) < 1000
    # The failed run wrote its settings but no sample: the corrected command runs in the same folder.
    assert (out / "eval_config.json").is_file()
    assert cli.main(["eval", "--model_name_or_path", "toy", *common]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_name_or_path"] == "toy"
    lines = (out / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 2
    # ... and a folder that does hold samples still refuses other settings.
    with pytest.raises(ValueError, match="holds results from different settings"):
        from hf_meds_cliff.evaluation import EvalArguments, run_evaluation

        run_evaluation(EvalArguments(model_name_or_path="toy", output_dir=str(out), num_samples=2,
                                     toy_num_problems=3, seed=1, progress=False))  # fmt: skip


def test_interrupt_and_unexpected_errors_are_one_line_and_debug_shows_the_trace(capsys, monkeypatch):
    def interrupted():
        raise KeyboardInterrupt

    assert cli.run_reporting_errors("eval", interrupted) == 130
    assert capsys.readouterr().err == "hf-meds-cliff eval: interrupted\n"

    def bug():
        raise ZeroDivisionError("division by zero\n  in a helper")

    assert cli.run_reporting_errors("report", bug) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "error: ZeroDivisionError: division by zero in a helper (set HF_MEDS_CLIFF_DEBUG=1" in err

    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    assert cli.run_reporting_errors("report", bug) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().endswith("in a helper (set "
                                                                               "HF_MEDS_CLIFF_DEBUG=1 for the "
                                                                               "traceback)")  # fmt: skip


def test_debug_flag_before_the_command_shows_the_traceback(tmp_path):
    result = run_cli("--debug", "report", str(tmp_path / "missing"))
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert error_lines(result.stderr, "report")


def test_training_setup_errors_are_one_line_and_training_errors_keep_their_trace(tmp_path, capsys):
    from hf_meds_cliff import script_utils
    from hf_meds_cliff.script_utils import run_script
    from hf_meds_cliff.scripts import train_grpo

    missing = tmp_path / "missing.jsonl"
    argv = ["--model_name_or_path", str(tmp_path / "no-model"), "--output_dir", str(tmp_path / "out"),
            "--use_cpu", "true", "--bf16", "false"]  # fmt: skip
    status = run_script("grpo", train_grpo.main, lambda: train_grpo.parse_args(argv))
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    (line,) = error_lines(err, "grpo")
    assert "no-model" in line and "does not exist" in line

    for bad in (["--max_steps", "many"], ["--max_steps"]):
        with pytest.raises(SystemExit) as exited:  # argparse's own usage error: usage line + error, status 2
            run_script("grpo", train_grpo.main, lambda bad=bad: train_grpo.parse_args(bad))
        err = capsys.readouterr().err
        assert exited.value.code == 2 and "Traceback" not in err and "error: argument" in err, err
    status = run_script("grpo", train_grpo.main, lambda: train_grpo.parse_args(["--num_generations", "1"]))
    err = capsys.readouterr().err  # GRPOConfig.__post_init__ rejects it: a usage error, one line
    assert status == 2 and "Traceback" not in err and len(error_lines(err, "grpo")) == 1, err

    def failing_during_training(*_):
        script_utils._TRAINING_STARTED.set()  # as run_training does before trainer.train()
        raise ZeroDivisionError("inside a training step")

    with pytest.raises(ZeroDivisionError):  # not a set-up error: the traceback is kept
        run_script("grpo", failing_during_training, lambda: train_grpo.parse_args([]))
    assert not missing.exists()


def test_negated_flags_have_their_own_help():
    result = run_cli("eval", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert re.search(r"--no_progress, --no-progress Turn off --progress \(default: on\)", text), text
    assert re.search(r"--no_verify_strict, --no-verify-strict Turn off --verify_strict", text), text
    assert "--no_progress, --no-progress Show" not in text


# ---------------------------------------------------------------------------------------------------------
# A damaged run folder still gets its report, which says what it skipped
# ---------------------------------------------------------------------------------------------------------

GOOD_ROLLOUT = {
    "step": 1, "sample": 0, "problem": "Compute 1 + 1.", "ground_truth": "2", "completion": "1 + 1 = 3. So 3.",
    "sentences": [[0, 10], [10, 16]], "first_mistake": 0, "agreed": True, "source": "judged",
    "group_mode": "cliff", "teacher_raw": ["FIRST_MISTAKE 0"], "teacher_statuses": ["ok"],
}  # fmt: skip


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "reward": 0.25}) + "\n" + json.dumps({"step": 2, "reward": 0.75}) + "\n"
    )
    (run / "checkpoint-2" / "trainer_state.json").write_text(
        json.dumps({"log_history": [{"step": 1, "reward": 0.1}, {"step": 2, "reward": 0.2}]})
    )
    (run / "cliff_rollouts.jsonl").write_text(json.dumps(GOOD_ROLLOUT) + "\n")
    return run


def _report(run: Path) -> str:
    return write_report(run).read_text(encoding="utf-8")


def _skipped_box(page: str) -> str:
    match = re.search(r'<section id="skipped".*?</section>', page, re.DOTALL)
    assert match, "the report does not say what it skipped"
    return match.group(0)


@pytest.mark.parametrize(
    "damage, file_name, reason",
    [
        (b'{"step": 3, "rew', "metrics.jsonl", "line 3: not valid JSON"),
        (b'{"step": 3, "reward": "\xff\xfe"}', "metrics.jsonl", "line 3: not UTF-8"),
        (b"[1, 2, 3]", "metrics.jsonl", "line 3: a JSON list, not an object"),
    ],
)
def test_damaged_metrics_lines_are_skipped_and_counted(tmp_path, damage, file_name, reason):
    run = _run_folder(tmp_path)
    with (run / "metrics.jsonl").open("ab") as handle:
        handle.write(damage)  # the last line, cut (no newline), or bad bytes / a non-object
    page = _report(run)
    box = _skipped_box(page)
    assert file_name in box and reason in box and "1 skipped" in box
    assert "2 logged steps" in page  # the two good lines still draw


def test_unreadable_metrics_fall_back_to_the_checkpoint_and_a_truncated_state_to_an_older_one(tmp_path):
    run = _run_folder(tmp_path)
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "rew')
    page = _report(run)
    assert "checkpoint-2/trainer_state.json" in page and "2 logged steps" in page
    assert "no readable record" in _skipped_box(page)

    (run / "checkpoint-3").mkdir()
    (run / "checkpoint-3" / "trainer_state.json").write_text('{"log_history": [{"step": 1, "re')
    page = _report(run)
    box = _skipped_box(page)
    assert "checkpoint-3/trainer_state.json" in box and "not valid JSON" in box
    assert "checkpoint-2/trainer_state.json</code>; every other" in page


@pytest.mark.parametrize("content", ["", "{not json", "[]", '{"references": [], "judgments": {}}'])
def test_an_empty_or_malformed_cliff_state_is_skipped(tmp_path, content):
    run = _run_folder(tmp_path)
    (run / "checkpoint-2" / "cliff_state.json").write_text(content)
    page = _report(run)
    assert "cliff_state.json" in _skipped_box(page)
    assert "1 logged wrong rollouts" in page  # the rollouts still show


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"sentences": [[0, "ten"]]}, "sentences is not a list of [start, end] integer pairs"),
        ({"sentences": "0-10"}, "sentences is not a list"),
        ({"first_mistake": "1"}, "first_mistake is not an integer or null"),
        ({"teacher_raw": "FIRST_MISTAKE 0"}, "teacher_raw is not a list of strings"),
        ({"step": "one"}, "step is not an integer"),
    ],
)
def test_malformed_rollouts_are_skipped_with_their_reason(tmp_path, change, reason):
    run = _run_folder(tmp_path)
    bad = {**GOOD_ROLLOUT, "sample": 1, **change}
    with (run / "cliff_rollouts.jsonl").open("a") as handle:
        handle.write(json.dumps(bad) + "\n")
    page = _report(run)
    box = _skipped_box(page)
    assert "cliff_rollouts.jsonl" in box and f"line 2: {reason}"[:40] in box
    assert page.count('<article class="rollout"') == 1  # the good rollout only
    assert "FIRST_MISTAKE 0" in page and page.count('<div class="raw">') == 1  # not one block per character


@pytest.mark.parametrize(
    "summary, reason",
    [
        ({"benchmarks": {}}, "no benchmarks in it"),
        ({"benchmarks": {"toy": {"pass@k": {"1": "high"}}}}, "pass@1 = 'high' is not a number"),
        ({"benchmarks": {"toy": {"pass@k": {}}}}, "has no pass@k table"),
    ],
)
def test_a_bad_eval_summary_next_to_the_run_does_not_kill_the_report(tmp_path, summary, reason):
    run = _run_folder(tmp_path)
    (run / "eval").mkdir()
    (run / "eval" / "summary.json").write_text(json.dumps({"model": "m", **summary}))
    page = _report(run)
    box = _skipped_box(page)
    assert "summary.json" in box and html.escape(reason) in box
    assert "No eval summary in or next to the run" in page


def test_metrics_jsonl_is_written_atomically(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from hf_meds_cliff import script_utils

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n')
    trainer = SimpleNamespace(state=SimpleNamespace(log_history=[{"step": 1}, {"step": 2, "x": object()}]))
    with pytest.raises(TypeError):  # json fails on the second record: nothing half-written
        script_utils.write_metrics(trainer, tmp_path)
    assert path.read_text() == '{"step": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
    trainer.state.log_history[1] = {"step": 2, "x": 1.5}
    script_utils.write_metrics(trainer, tmp_path)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"step": 1},
        {"step": 2, "x": 1.5},
    ]


# ---------------------------------------------------------------------------------------------------------
# Smaller: bidi isolation, wrapping, huge values, a quoted hint
# ---------------------------------------------------------------------------------------------------------


def test_run_text_is_bidi_isolated_and_wraps(tmp_path):
    run = _run_folder(tmp_path)
    rollout = {**GOOD_ROLLOUT, "sample": 2, "problem": "Compute \u202e1 + 1.", "completion": "x \u202e= 3. " + "9" * 200_000,
               "sentences": [[0, 7]]}  # fmt: skip
    with (run / "cliff_rollouts.jsonl").open("a") as handle:
        handle.write(json.dumps(rollout) + "\n")
    page = _report(run)
    assert "<bdi>Compute \u202e1 + 1.</bdi>" in page  # the problem cannot reverse "ground truth" after it
    assert re.search("<bdi>[^<]*9{1000}", page)  # the text after the last sentence too
    for fragment in ("unicode-bidi: isolate", "overflow-wrap: anywhere"):
        assert fragment in page
    assert re.search(r"bdi, code, pre, td[^{]*\{ unicode-bidi: isolate; \}", page)


@pytest.mark.parametrize(
    "points",
    [[(1, 1.7e308), (2, -1.7e308)], [(1, 1.7e308), (2, 1.7e308)], [(1e308, 0.5), (-1e308, 0.25)]],
)
def test_values_near_the_float_limit_draw_finite_points(points):
    svg = svg_line_chart([("metric", points)])
    coordinates = (
        re.findall(r'c[xy]="([^"]+)"', svg)
        + re.findall(r'points="([^"]+)"', svg)[0].replace(",", " ").split()
    )
    assert coordinates and all(math.isfinite(float(value)) for value in coordinates), svg
    assert "nan" not in svg.lower()


def test_the_eval_hint_quotes_the_folder_name(tmp_path):
    run = tmp_path / "my run $(touch pwned)"
    run.mkdir()
    page = _report(run)
    assert "--model_name_or_path &#x27;" in page and "$(touch pwned)&#x27;" in page


@pytest.mark.slow
def test_a_training_command_set_up_error_through_accelerate_is_one_line(tmp_path):
    result = run_cli("grpo", "--model_name_or_path", str(tmp_path / "missing-model"), "--output_dir",
                     str(tmp_path / "out"), "--use_cpu", "true", "--bf16", "false", timeout=300)  # fmt: skip
    assert_one_line_error(result, "grpo", 1, r"missing-model'? looks like a local path but does not exist")


def test_judge_eval_errors_are_one_line(tmp_path):
    missing = run_cli("judge-eval", "--data", str(tmp_path / "no-such-file.jsonl"), "--output_json",
                      str(tmp_path / "out.json"))  # fmt: skip
    assert missing.returncode in (1, 2) and "Traceback" not in missing.stderr, missing.stderr[-2000:]
    assert len(error_lines(missing.stderr, "judge-eval")) == 1
    unknown = run_cli("judge-eval", "--data", "toy", "--colour", "red")
    assert unknown.returncode == 2 and "unrecognized arguments: --colour red" in unknown.stderr
    assert "Traceback" not in unknown.stderr
