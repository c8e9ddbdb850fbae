"""``hf-meds-cliff judge-eval``: metric definitions by hand, a scripted OpenAI-compatible teacher over HTTP, the
reference filter, ProcessBench's critique prompt, resuming after a kill, ``--data toy``, the rollout export and
re-scoring, and the teacher cost the Cliff trainer logs."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, needs_qwen_tokenizer

from hf_meds_cliff.cli import main as cli_main
from hf_meds_cliff.cliff.judge_eval import (
    build_processbench_messages,
    items_path_for,
    judge_metrics,
    parse_boxed_index,
)
from hf_meds_cliff.cliff.judging import JUDGE_NO_REFERENCE_SYSTEM_PROMPT, JUDGE_SYSTEM_PROMPT
from hf_meds_cliff.testing import LoopbackChatServer, Reply


def verdict(first_mistake: int) -> str:
    body = json.dumps({"final_answer_correct": first_mistake == -1, "first_mistake": first_mistake})
    return f"Checked each step.\n{body}"


# --- pure metrics ----------------------------------------------------------------------------------------------


def test_metrics_match_the_definitions_by_hand():
    # erroneous: hit, near miss (1), far miss (3), missed error (-1), unparsable; correct: hit, false alarm, failed
    labels = [2, 1, 0, 3, 2, -1, -1, -1]
    predictions = [2, 2, 3, -1, None, -1, 1, None]
    m = judge_metrics(labels, predictions)
    assert m["accuracy_erroneous"] == 1 / 5
    assert m["accuracy_correct"] == 1 / 3
    assert m["f1"] == pytest.approx(2 * (1 / 5) * (1 / 3) / (1 / 5 + 1 / 3))
    # verdict right: 2, 2, 3 (errors flagged), -1 on a correct item -> 4 of 8
    assert m["verdict_accuracy"] == 4 / 8
    assert m["mean_distance"] == pytest.approx((0 + 1 + 3) / 3)
    assert m["within_one"] == pytest.approx(2 / 3)
    assert m["counts"] == {
        "items": 8, "erroneous": 5, "correct": 3, "erroneous_hits": 1, "correct_hits": 1, "no_prediction": 2,
        "predicted_step": 3,
    }  # fmt: skip


def test_metrics_edge_cases():
    nothing = judge_metrics([3, -1], [None, None])
    assert (nothing["f1"], nothing["verdict_accuracy"], nothing["mean_distance"], nothing["within_one"]) == (
        0.0,
        0.0,
        None,
        None,
    )
    only_correct = judge_metrics([-1, -1], [-1, -1])
    assert (only_correct["accuracy_erroneous"], only_correct["accuracy_correct"], only_correct["f1"]) == (
        0.0,
        1.0,
        0.0,
    )
    with pytest.raises(ValueError, match="2 labels but 1 predictions"):
        judge_metrics([1, 2], [1])


def test_processbench_prompt_and_boxed_index_parser():
    messages = build_processbench_messages("What is 1+1?", ["1+1=3.", "So 3."])
    content = messages[0]["content"]
    assert messages[0]["role"] == "user" and len(messages) == 1
    assert "<paragraph_0>\n1+1=3.\n</paragraph_0>\n\n<paragraph_1>\nSo 3.\n</paragraph_1>" in content
    assert "What is 1+1?" in content and "\\boxed{}" in content
    assert parse_boxed_index("<think>maybe \\boxed{0}</think> final: \\boxed{1}", 2) == (1, "ok")
    assert parse_boxed_index("\\boxed{\\text{-1}}", 2) == (-1, "ok")
    assert parse_boxed_index("\\boxed{two}", 2) == (None, "invalid_field")
    assert parse_boxed_index("\\boxed{2}", 2) == (None, "out_of_range")
    assert parse_boxed_index("", 2) == (None, "empty")


# --- a scripted teacher over HTTP ---------------------------------------------------------------------------------

# id, split, label, number of steps, the teacher's reply (None: HTTP 500)
SCRIPT = [
    ("hit", "s1", 2, 4, verdict(2)),
    ("near", "s1", 1, 4, verdict(2)),
    ("far", "s1", 0, 5, verdict(3)),
    ("missed", "s1", 3, 4, verdict(-1)),
    ("right", "s1", -1, 3, verdict(-1)),
    ("false-alarm", "s2", -1, 3, verdict(1)),
    ("unparsable", "s2", 2, 3, "I think step 2 is wrong."),
    ("failed", "s2", -1, 3, None),
    ("right-2", "s2", -1, 3, verdict(-1)),
]
PROMPT_TOKENS, COMPLETION_TOKENS = 120, 15


def write_script(path: Path, with_answers: bool = False) -> Path:
    rows = []
    for item_id, split, label, count, _ in SCRIPT:
        row = {
            "id": item_id,
            "generator": "scripted",
            "problem": f"Problem {item_id}: compute something.",
            "steps": [f"Step {k} of {item_id}." for k in range(count)],
            "final_answer_correct": label == -1,
            "label": label,
            "split": split,
        }
        if with_answers:
            row["answer"] = "4"
        rows.append(row)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


class ScriptedTeacher:
    """Replies by the problem's id (found in the request), with ``usage``; solve requests get ``solutions``."""

    def __init__(self, solutions: dict[str, str] | None = None, delay: float = 0.0):
        self.replies = {item_id: reply for item_id, *_, reply in SCRIPT}
        self.solutions = solutions or {}
        self.delay = delay

    def __call__(self, body, index):
        text = body["messages"][-1]["content"]
        item_id = text.split("Problem ", 1)[1].split(":", 1)[0]
        if "Please reason step by step" in text:  # a solve request
            return Reply(
                content=self.solutions[item_id], usage={"prompt_tokens": 30, "completion_tokens": 40}
            )
        reply = self.replies[item_id]
        if reply is None:
            return Reply(status=500, content="overloaded", delay=self.delay)
        return Reply(
            content=reply, delay=self.delay,
            usage={"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS},
        )  # fmt: skip


def run_cli(args: list[str]) -> int:
    return cli_main(["judge-eval", *args])


def run_direct(args: list[str]):
    """The command's code without the CLI's error reporting: errors raise (the CLI prints them as one line)."""
    from hf_meds_cliff.scripts import judge_eval

    return judge_eval.main(judge_eval.parse_args(args))


def http_args(server, output: Path) -> list[str]:
    return [
        "--cliff_teacher_base_url", server.base_url, "--cliff_teacher_model", "scripted",
        "--cliff_teacher_max_retries", "0", "--output_json", str(output),
    ]  # fmt: skip


def test_scripted_teacher_over_http_gives_the_hand_computed_metrics(tmp_path, capsys):
    data = write_script(tmp_path / "scripted.jsonl")
    output = tmp_path / "out" / "metrics.json"
    with LoopbackChatServer(ScriptedTeacher()) as server:
        assert run_cli(["--data", str(data), *http_args(server, output)]) == 0
        requests = list(server.requests)
    summary = json.loads(output.read_text())

    # erroneous: hit, near, far, missed, unparsable (1 hit of 5); correct: right, false-alarm, failed, right-2 (2 of 4)
    assert summary["accuracy_erroneous"] == pytest.approx(1 / 5)
    assert summary["accuracy_correct"] == pytest.approx(2 / 4)
    assert summary["f1"] == pytest.approx(2 * 0.2 * 0.5 / 0.7)
    # verdict right: hit, near, far, right, right-2 (missed, false alarm, unparsable, failed are wrong)
    assert summary["verdict_accuracy"] == pytest.approx(5 / 9)
    assert summary["mean_distance"] == pytest.approx((0 + 1 + 3) / 3)
    assert summary["within_one"] == pytest.approx(2 / 3)
    assert summary["parse_failures"] == 1
    assert summary["counts"]["request_failures"] == 1
    assert (summary["counts"]["items"], summary["counts"]["erroneous"], summary["counts"]["correct"]) == (
        9,
        5,
        4,
    )
    # per split: s1 = hit, near, far, missed (1/4) + right (1/1); s2 = unparsable (0/1) + false-alarm, failed, right-2
    s1, s2 = summary["splits"]["s1"], summary["splits"]["s2"]
    assert (s1["accuracy_erroneous"], s1["accuracy_correct"], s1["f1"]) == (0.25, 1.0, pytest.approx(0.4))
    assert (s2["accuracy_erroneous"], s2["accuracy_correct"], s2["f1"]) == (0.0, pytest.approx(1 / 3), 0.0)
    assert summary["f1_average_over_splits"] == pytest.approx(0.2)
    # cost: one request per item (no solve call without an answer column; no retries), usage of 8 answered requests
    cost = summary["cost"]
    assert cost["requests"] == 9 == len(requests)
    assert (cost["prompt_tokens"], cost["completion_tokens"]) == (8 * PROMPT_TOKENS, 8 * COMPLETION_TOKENS)
    assert cost["wall_time_s"] > 0 and cost["mean_latency_s"] > 0
    # the no-reference variant of Cliff's judge prompt, steps numbered as given
    system_prompts = {r.body["messages"][0]["content"] for r in requests}
    assert system_prompts == {JUDGE_NO_REFERENCE_SYSTEM_PROMPT}
    hit_request = next(r for r in requests if "Problem hit:" in r.body["messages"][-1]["content"])
    assert "[3] Step 3 of hit." in hit_request.body["messages"][-1]["content"]
    table = capsys.readouterr().out
    assert "all" in table and "20.0" in table and "960 prompt + 120 completion tokens" in table
    # one record per item beside the metrics
    lines = [json.loads(line) for line in items_path_for(output).read_text().splitlines()]
    assert sorted(r["id"] for r in lines if r["kind"] == "item") == sorted(s[0] for s in SCRIPT)


def test_reference_filter_runs_when_the_data_has_an_answer_column(tmp_path):
    data = write_script(tmp_path / "answers.jsonl", with_answers=True)
    # the teacher's solution is right (boxed 4) except for "hit" and "near": those get no judgment
    solutions = {item_id: "2 + 2 = 4. \\boxed{4}" for item_id, *_ in SCRIPT}
    solutions.update({"hit": "\\boxed{5}", "near": "\\boxed{7}"})
    output = tmp_path / "metrics.json"
    with LoopbackChatServer(ScriptedTeacher(solutions)) as server:
        run_cli(["--data", str(data), "--answer_column", "answer", *http_args(server, output)])
        requests = list(server.requests)
    summary = json.loads(output.read_text())
    assert summary["reference_filter"] == {
        "solve_calls": 9, "verified": 7, "unverified": 2, "statuses": {"verified": 7, "wrong": 2}
    }  # fmt: skip
    assert summary["counts"]["reference_unverified"] == 2
    judge_requests = [r for r in requests if r.body["messages"][0]["role"] == "system"]
    assert len(judge_requests) == 7 and len(requests) == 16
    assert {r.body["messages"][0]["content"] for r in judge_requests} == {JUDGE_SYSTEM_PROMPT}
    assert all(
        "## Verified reference solution\n2 + 2 = 4." in r.body["messages"][-1]["content"]
        for r in judge_requests
    )
    # hit and near now have no prediction: erroneous hits 0 of 5
    assert summary["accuracy_erroneous"] == 0.0 and summary["accuracy_correct"] == 0.5
    assert summary["cost"]["requests"] == 16


def test_processbench_prompt_over_http(tmp_path):
    data = write_script(tmp_path / "pb.jsonl")
    boxed = {"hit": "\\boxed{2}", "near": "\\boxed{0}", "far": "no box", "missed": "\\boxed{3}"}

    def responder(body, index):
        text = body["messages"][-1]["content"]
        item_id = text.split("Problem ", 1)[1].split(":", 1)[0]
        return Reply(content=boxed.get(item_id, "\\boxed{-1}"))

    output = tmp_path / "pb.json"
    with LoopbackChatServer(responder) as server:
        run_cli(["--data", str(data), "--prompt", "processbench", *http_args(server, output)])
        assert all("<paragraph_0>" in r.body["messages"][0]["content"] for r in server.requests)
    summary = json.loads(output.read_text())
    # erroneous: hit 2 ok, near 0 vs 1, far unparsable, missed 3 ok, unparsable -1 vs 2 -> 2 of 5; correct all -1
    assert summary["accuracy_erroneous"] == pytest.approx(2 / 5)
    assert summary["accuracy_correct"] == 1.0
    assert summary["parse_failures"] == 1
    assert summary["mean_distance"] == pytest.approx(1 / 3)


def test_bad_input_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "problem": "p", "steps": ["a", "b"], "label": 5}) + "\n")
    assert (
        run_cli(["--data", str(bad), "--cliff_teacher", "rule", "--output_json", str(tmp_path / "o.json")])
        == 1
    )
    err = capsys.readouterr().err  # through the command: one line, no traceback
    assert (
        "hf-meds-cliff judge-eval: error: " in err
        and "label=5 is not a step index" in err
        and "Traceback" not in err
    )
    with pytest.raises(ValueError, match=r"label=5 is not a step index.*from 0 to 1"):
        run_direct(["--data", str(bad), "--cliff_teacher", "rule", "--output_json", str(tmp_path / "o.json")])
    bad.write_text(json.dumps({"id": "x", "problem": "p", "steps": ["a"]}) + "\n")
    with pytest.raises(ValueError, match="no label column 'label'"):
        run_direct(["--data", str(bad), "--cliff_teacher", "rule", "--output_json", str(tmp_path / "o.json")])
    with pytest.raises(ValueError, match="cannot: use an OpenAI-compatible teacher"):
        run_direct(["--data", str(write_script(tmp_path / "s.jsonl")), "--prompt", "processbench",
                 "--cliff_teacher", "rule", "--output_json", str(tmp_path / "o.json")])  # fmt: skip


# --- resuming -------------------------------------------------------------------------------------------------------


def test_a_killed_run_resumes_where_it_stopped(tmp_path):
    """Kill the command after some items; the re-run judges only the others and gives the uninterrupted metrics."""
    data = write_script(tmp_path / "scripted.jsonl")
    output = tmp_path / "resume.json"
    items_file = items_path_for(output)
    with LoopbackChatServer(ScriptedTeacher(delay=0.4)) as server:
        args = [*http_args(server, output), "--max_items_in_flight", "1", "--cliff_teacher_concurrency", "1"]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "hf_meds_cliff.cli", "judge-eval", "--data", str(data), *args],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and process.poll() is None:
                text = items_file.read_text() if items_file.exists() else ""
                if text.count('"kind": "item"') >= 3:
                    break
                time.sleep(0.05)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
        assert not output.exists()  # killed before the summary
        done_before = [
            json.loads(line)["id"] for line in items_file.read_text().splitlines() if '"item"' in line
        ]
        assert 3 <= len(done_before) < len(SCRIPT)
        first_run_requests = len(server.requests)
        # a torn last line (a kill mid-write) is dropped
        with items_file.open("a") as handle:
            handle.write('{"kind": "item", "key": "s2/right-2')
        run_cli(["--data", str(data), *args])
        resumed_requests = [r.body["messages"][-1]["content"] for r in server.requests[first_run_requests:]]
    summary = json.loads(output.read_text())
    assert summary["counts"]["resumed"] == len(done_before)
    assert len(resumed_requests) == len(SCRIPT) - len(done_before)
    assert not any(f"Problem {item_id}:" in text for item_id in done_before for text in resumed_requests)
    assert summary["f1"] == pytest.approx(2 * 0.2 * 0.5 / 0.7) and summary["cost"]["requests"] == 9

    with pytest.raises(ValueError, match=r"other settings \(\['self_consistency'\]\)"):
        run_direct(["--data", str(data), *args, "--cliff_self_consistency", "3"])


# --- offline: the toy world's labelled set ------------------------------------------------------------------------


def test_data_toy_runs_offline_with_exact_labels(tmp_path, toy_policy_path, capsys):
    from hf_meds_cliff.cliff.judge_eval import load_labelled_items
    from hf_meds_cliff.toy import first_mistake_index

    output = tmp_path / "toy.json"
    run_cli(["--data", "toy", "--toy_size", "12", "--cliff_teacher", "rule", "--output_json", str(output)])
    summary = json.loads(output.read_text())
    assert summary["counts"]["items"] == 12
    # the rule-based teacher is the checker that labelled the set: every verdict and located step is right
    assert summary["verdict_accuracy"] == 1.0 and summary["parse_failures"] == 0
    if summary["counts"]["erroneous"]:
        assert summary["accuracy_erroneous"] == 1.0 and summary["mean_distance"] == 0.0
    if summary["counts"]["correct"]:
        assert summary["accuracy_correct"] == 1.0
    assert "toy" in capsys.readouterr().out
    # labels are the exact checker's on the rollout the steps come from
    items, _ = load_labelled_items("toy", toy_size=12)
    for item in items:
        expected = first_mistake_index(item.problem, "".join(item.steps))
        assert item.label == (-1 if expected is None else expected)
        assert item.generator == "toy-policy" and item.answer is None


# --- export of a training run and re-scoring of an audited file ---------------------------------------------------


def test_export_rollouts_and_rescore_an_audit(tmp_path):
    text = "2 + 3 = 5. 5 * 2 = 11. The answer is \\boxed{11}."
    spans = [[0, 11], [11, 23], [23, len(text)]]
    base = {"problem": "Compute (2 + 3) * 2.", "ground_truth": "10", "completion": text, "sentences": spans}
    records = [
        {**base, "step": 1, "sample": 0, "source": "judged", "teacher_votes": [1], "teacher_statuses": ["ok"]},
        {**base, "step": 1, "sample": 3, "source": "judged", "teacher_votes": [None], "teacher_statuses": ["ok"]},
        {**base, "step": 2, "sample": 1, "source": "judged", "teacher_votes": [None], "teacher_statuses": ["parse_error"]},
        {**base, "step": 2, "sample": 2, "source": "cached", "agreed": True, "first_mistake": 2},
        {**base, "step": 3, "sample": 0, "source": "truncated"},
    ]  # fmt: skip
    log = tmp_path / "run" / "cliff_rollouts.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn": ')
    audit = tmp_path / "audit.jsonl"
    run_cli(["--export_rollouts", str(log.parent), "--export_to", str(audit)])
    rows = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [r["id"] for r in rows] == [
        "step1-sample0",
        "step1-sample3",
        "step2-sample1",
        "step2-sample2",
        "step3-sample0",
    ]
    assert rows[0]["steps"] == ["2 + 3 = 5. ", "5 * 2 = 11. ", "The answer is \\boxed{11}."]
    assert [r["teacher_first_mistake"] for r in rows] == [1, -1, None, 2, None]
    assert all(r["human_label"] is None and r["answer"] == "10" for r in rows)

    with pytest.raises(ValueError, match="pass --label_column human_label"):
        run_direct(["--data", str(audit), "--prediction_column", "teacher_first_mistake", "--output_json", str(tmp_path / "x.json")])  # fmt: skip
    # a human audits four rows (the mistake is sentence 1 in all of them) and leaves one empty
    for row, label in zip(rows, [1, 1, 1, 1, None]):
        row["human_label"] = label
    audit.write_text("".join(json.dumps(r) + "\n" for r in rows))
    output = tmp_path / "rescored.json"
    run_cli(["--data", str(audit), "--label_column", "human_label", "--prediction_column", "teacher_first_mistake",
             "--output_json", str(output)])  # fmt: skip
    summary = json.loads(output.read_text())
    # predictions 1 (hit), -1 (missed), None (no judgment), 2 (near miss) against label 1
    assert summary["counts"]["items"] == 4 and summary["counts"]["unlabelled_skipped"] == 1
    assert summary["accuracy_erroneous"] == 0.25 and summary["verdict_accuracy"] == 0.5
    assert summary["mean_distance"] == 0.5 and summary["within_one"] == 1.0
    assert summary["cost"]["requests"] == 0
    # no stored prediction is wrong everywhere, but no unparsable reply of this run
    assert summary["parse_failures"] == 0 and summary["counts"]["statuses"] == {
        "no_prediction": 1,
        "rescored": 3,
    }


# --- the teacher's cost during training ---------------------------------------------------------------------------


@pytest.mark.slow
def test_trainer_logs_teacher_cost_and_the_card_states_it(tmp_path):
    from test_cliff_trainer import ToyTeacherResponder, load_driver

    from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher

    driver = load_driver()
    scripted = ToyTeacherResponder(driver)

    def with_usage(body, index):
        reply = scripted(body, index)
        reply.usage = {"prompt_tokens": 50, "completion_tokens": 7}
        return reply

    with LoopbackChatServer(with_usage) as server:
        teacher = OpenAICompatibleTeacher(server.base_url, "loopback", max_retries=0, timeout=10)
        trainer = driver.build_trainer(str(tmp_path / "run"), 12, steps=2, teacher=teacher)
        trainer.train()
        trainer.close_teacher()
        served = len(server.requests)
    logs = [r for r in trainer.state.log_history if "cliff/teacher_requests" in r]
    assert len(logs) == 2
    for log in logs:
        assert log["cliff/teacher_requests"] == log["cliff/teacher/requests"]
        assert log["cliff/teacher_prompt_tokens"] == 50 * log["cliff/teacher_requests"]
        assert log["cliff/teacher_completion_tokens"] == 7 * log["cliff/teacher_requests"]
        assert 0 < log["cliff/teacher_time_fraction"] <= 1 and log["cliff/teacher_time_s"] > 0
    assert sum(log["cliff/teacher_requests"] for log in logs) == served > 0
    totals = trainer.cliff_teacher_cost
    assert (totals["requests"], totals["prompt_tokens"], totals["rounds"]) == (served, 50 * served, 2)
    assert not math.isnan(totals["cycle_time_s"]) and totals["teacher_time_s"] < totals["cycle_time_s"]
    trainer.create_model_card()
    card = (tmp_path / "run" / "README.md").read_text()
    assert "### Teacher cost" in card
    assert f"| {served} | {50 * served} | {7 * served} |" in card


# --- a real OpenAI-compatible server ----------------------------------------------------------------------------


@pytest.mark.slow
def test_judge_eval_through_transformers_serve(tmp_path):
    """``transformers serve`` on loopback with the hand-built verdict model, which answers every request with
    ``{"final_answer_correct": false, "first_mistake": 1}``: the metrics follow from the labels alone."""
    pytest.importorskip("fastapi", reason="`transformers serve` needs transformers[serving] (the test extra)")
    pytest.importorskip("uvicorn", reason="`transformers serve` needs transformers[serving] (the test extra)")
    from test_cliff_served_teacher import ServedTeacher, write_verdict_teacher

    # label, number of steps: hit, near miss (1), far miss (2), id out of range (1 step: unparsable), 2 false alarms
    cases = [(1, 3), (2, 4), (3, 4), (0, 1), (-1, 3), (-1, 2)]
    data = tmp_path / "served.jsonl"
    data.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"i{k}",
                    "problem": f"Problem {k}.",
                    "steps": [f"s{j}." for j in range(n)],
                    "label": label,
                }
            )
            + "\n"
            for k, (label, n) in enumerate(cases)
        )
    )
    folder = write_verdict_teacher(tmp_path / "verdict-teacher")
    server = ServedTeacher(folder, tmp_path / "serve.log")
    output = tmp_path / "served.json"
    try:
        run_cli([
            "--data", str(data), "--cliff_teacher_base_url", server.base_url, "--cliff_teacher_model", str(folder),
            "--cliff_teacher_timeout", "120", "--output_json", str(output),
        ])  # fmt: skip
    finally:
        server.stop()
    summary = json.loads(output.read_text())
    assert (
        summary["accuracy_erroneous"] == 0.25 and summary["accuracy_correct"] == 0.0 and summary["f1"] == 0.0
    )
    assert summary["verdict_accuracy"] == 0.5
    assert summary["mean_distance"] == 1.0 and summary["within_one"] == pytest.approx(2 / 3)
    assert summary["parse_failures"] == 1 and summary["counts"]["statuses"] == {"ok": 5, "out_of_range": 1}
    cost = summary["cost"]
    assert cost["requests"] == 6 and cost["usage_reported"] == 6
    assert cost["prompt_tokens"] > 6 * 10 and cost["completion_tokens"] >= 6  # the server's own token counts


def test_report_shows_a_calibration_run(tmp_path):
    from hf_meds_cliff.report import write_report

    data = write_script(tmp_path / "scripted.jsonl")
    run_dir = tmp_path / "run"
    output = run_dir / "judge_eval" / "scripted.json"
    with LoopbackChatServer(ScriptedTeacher()) as server:
        run_cli(["--data", str(data), *http_args(server, output)])
    html = write_report(run_dir).read_text()
    assert "Teacher calibration (judge-eval)" in html and 'href="#judge-eval"' in html
    row = html.split("<td>scripted.json</td>", 1)[1].split("</tr>", 1)[0]
    # erroneous 20.0, correct 50.0, F1 28.6, verdict 55.6, distance 1.33, within one 66.7, 1 unparsed, 9 requests
    assert (
        "<td>20.0</td><td>50.0</td><td>28.6</td><td>55.6</td><td>1.33</td><td>66.7</td><td>1</td><td>9</td>"
        in row
    )
    assert "<td>960 + 120</td>" in row


def test_help_lists_the_teacher_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    for option in (
        "--data",
        "--output_json",
        "--limit",
        "--prompt",
        "--cliff_teacher_base_url",
        "--cliff_self_consistency",
        "--label_column",
    ):
        assert option in text


def test_teacher_cost_totals_are_restored_and_an_old_checkpoint_restarts_them(tmp_path, caplog):
    from collections import Counter
    from types import SimpleNamespace

    from hf_meds_cliff.cliff.cost import teacher_step_cost
    from hf_meds_cliff.cliff.trainer import TEACHER_COST_NAME, CliffTokenAdvantageTrainer

    holder = SimpleNamespace(cliff_teacher_cost=Counter({"requests": 1.0}), _cliff_failure_keys={"teacher/x"})
    path = tmp_path / TEACHER_COST_NAME
    path.write_text(json.dumps({"requests": 7, "prompt_tokens": 70, "teacher_time_s": 1.5, "rounds": 2,
                                "logged_counter_keys": ["teacher/judge_calls"]}))  # fmt: skip
    CliffTokenAdvantageTrainer._load_teacher_cost(holder, str(path))
    assert holder._cliff_failure_keys == {"teacher/x", "teacher/judge_calls"}  # logged from the resume's first step
    assert holder.cliff_teacher_cost == Counter(
        {"requests": 7.0, "prompt_tokens": 70.0, "completion_tokens": 0.0, "teacher_time_s": 1.5,
         "cycle_time_s": 0.0, "rounds": 2.0}
    )  # fmt: skip
    CliffTokenAdvantageTrainer._load_teacher_cost(holder, str(tmp_path / "absent.json"))
    assert holder.cliff_teacher_cost["requests"] == 7.0 and "not restored" in caplog.text
    # an HTTP teacher's own request count (retries included) vs the calls of a teacher that sends no requests
    http = teacher_step_cost({"requests": 6, "prompt_tokens": 300}, {"judge_calls": 4}, 2.0, 8.0, True)
    local = teacher_step_cost({}, {"solve_calls": 2, "judge_calls": 4}, 2.0, 8.0, False)
    assert (http["requests"], http["prompt_tokens"], http["time_fraction"]) == (6.0, 300.0, 0.25)
    assert (local["requests"], local["completion_tokens"]) == (6.0, 0.0)


# --- the Qwen-tokenizer world's labelled set -----------------------------------------------------------------------


def test_qwen_world_checker_by_hand():
    from hf_meds_cliff.cliff.judge_eval import qwen_world_first_mistake
    from hf_meds_cliff.toy.qwen_world import MathWorldProblem

    problem = MathWorldProblem(
        "arithmetic", "What is the value of $12 \\times 6 - 52$?",
        "First, $12 \\times 6 = 72$. Then $72 - 52 = 20$. The answer is $\\boxed{20}$.", "20",
    )  # fmt: skip
    right = "First, $12 \\times 6 = 72$.  Then $72 - 52 = 20$. So the final answer is \\boxed{20}."
    assert qwen_world_first_mistake(problem, right) is None  # either closing, whitespace aside
    assert qwen_world_first_mistake(problem, right.replace("= 72$.", "= 74$.")) == 0
    assert qwen_world_first_mistake(problem, right.replace("= 20$.", "= 21$.")) == 1
    assert qwen_world_first_mistake(problem, right.replace("boxed{20}", "boxed{21}")) == 2
    assert qwen_world_first_mistake(problem, right + " Also 3.") == 3
    assert (
        qwen_world_first_mistake(problem, "First, $12 \\times 6 = 72$.") == 0
    )  # stopped early: its last sentence
    assert qwen_world_first_mistake(problem, "") == 0


@pytest.mark.slow
@needs_qwen_tokenizer
def test_qwen_world_set_through_the_reference_filter(tmp_path):
    """The Qwen-world policy's rollouts, labelled exactly, judged over HTTP by an oracle that answers each item's
    label; the teacher's reference solutions are the world's worked solutions, verified by math-verify."""
    from hf_meds_cliff.cliff.judge_eval import (
        qwen_world_first_mistake,
        qwen_world_labelled_items,
        run_judge_eval,
    )
    from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher
    from hf_meds_cliff.toy.qwen_world import math_world_problems

    items = qwen_world_labelled_items(8)
    problems = {p.question: p for p in math_world_problems("test", 16, stream="judge-eval")}
    for item in items:
        mistake = qwen_world_first_mistake(problems[item.problem], "".join(item.steps))
        assert (
            item.label == (-1 if mistake is None else mistake)
            and item.answer == problems[item.problem].answer
        )
    labels = {(item.problem.strip(), tuple(s.strip() for s in item.steps)): item.label for item in items}

    def oracle(body, index):
        messages = body["messages"]
        if messages[0]["role"] != "system":  # solve: the world's worked solution
            return Reply(content=problems[messages[0]["content"].splitlines()[0]].solution)
        user = messages[-1]["content"]
        problem = user.split("## Problem\n")[1].split("\n\n## ")[0]
        numbered = user.split("numbered from 0)\n")[1].split("\n\nFind the first")[0].splitlines()
        steps = tuple(line.split("] ", 1)[1] for line in numbered)
        return Reply(content=verdict(labels[(problem, steps)]))

    with LoopbackChatServer(oracle) as server:
        teacher = OpenAICompatibleTeacher(server.base_url, "oracle", max_retries=0, timeout=30)
        summary = run_judge_eval(items, teacher, output_json=tmp_path / "qwen_world.json")
    assert summary["reference_filter"]["verified"] == len(items)
    assert summary["verdict_accuracy"] == 1.0 and summary["parse_failures"] == 0
    # one solve call per distinct problem (several rollouts share one), one judge call per item
    assert summary["reference_filter"]["solve_calls"] == len({item.problem for item in items})
    assert summary["cost"]["requests"] == summary["reference_filter"]["solve_calls"] + len(items)
    if summary["counts"]["erroneous"]:
        assert summary["accuracy_erroneous"] == 1.0 and summary["mean_distance"] == 0.0


def test_a_dataset_folder_with_named_splits_like_processbench(tmp_path):
    """The Hub path (``datasets.load_dataset``) on a local folder laid out as ``Qwen/ProcessBench``: one file per
    split, declared in the README's ``configs``; ``--split`` picks splits and ``--limit`` cuts each."""
    folder = tmp_path / "ProcessBench"
    folder.mkdir()
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: gsm8k\n    path: gsm8k.jsonl\n"
        "  - split: math\n    path: math.jsonl\n---\n"
    )
    for split, labels in (("gsm8k", [0, -1, 1]), ("math", [-1, 2])):
        rows = [
            {"id": f"{split}-{k}", "generator": "g", "problem": f"Problem {split}{k}: x.", "steps": ["a.", "b.", "c."],
             "final_answer_correct": label == -1, "label": label}
            for k, label in enumerate(labels)
        ]  # fmt: skip
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def responder(body, index):  # always "no mistake"
        return Reply(content=verdict(-1))

    output = tmp_path / "pb.json"
    with LoopbackChatServer(responder) as server:
        run_cli(["--data", str(folder), "--split", "gsm8k,math", "--limit", "2", *http_args(server, output)])
    summary = json.loads(output.read_text())
    # gsm8k: labels 0, -1 (limit 2); math: -1, 2. "No mistake" everywhere: correct items right, erroneous wrong
    assert summary["counts"]["items"] == 4
    assert (summary["splits"]["gsm8k"]["counts"]["items"], summary["splits"]["math"]["counts"]["items"]) == (
        2,
        2,
    )
    assert (summary["accuracy_erroneous"], summary["accuracy_correct"], summary["verdict_accuracy"]) == (
        0.0,
        1.0,
        0.5,
    )
