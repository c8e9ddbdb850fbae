"""Measure a Cliff teacher before training: ``hf-meds-cliff judge-eval`` on ProcessBench-format data.

A labelled item is a problem, its solution as a list of ``steps`` and ``label``, the index of the earliest
wrong step (-1 when the solution has none): the format of ProcessBench (Hub ``Qwen/ProcessBench``, splits
``gsm8k``, ``math``, ``olympiadbench``, ``omnimath``; fields ``id``, ``generator``, ``problem``, ``steps``,
``final_answer_correct``, ``label``). The teacher judges each item through the Cliff judging protocol, the code
path training uses (:class:`~hf_meds_cliff.cliff.protocol.CliffJudge`'s solve/judge calls, the judge prompt of
:mod:`hf_meds_cliff.cliff.judging` and its parser, self-consistency reduced as in training), with the item's
``steps`` as the numbered units (no re-splitting):

- without a ground-truth answer in the data (ProcessBench) the teacher judges without a reference (the
  no-reference prompt variant) and no solve call is made;
- with an answer column, the reference filter runs as in training: the teacher solves the problem, the verifier
  checks its answer, and only a verified solution is used as the reference. An item whose reference is not
  verified gets no judgment (as its group would fall back to plain GRPO in training); the outcome is reported
  under ``reference_filter``;
- ``prompt="processbench"`` sends ProcessBench's own critique prompt instead (the earliest wrong paragraph's index
  in ``\\boxed{}``), so numbers can be set beside the published ones.

Metrics (:func:`judge_metrics`; fractions in [0, 1]): erroneous items have ``label != -1``, correct items
``label == -1``; the prediction is the teacher's ``first_mistake`` (-1 = no mistake); an unparsable reply or a
failed request is no prediction and counts as wrong everywhere.

- ``accuracy_erroneous``: share of erroneous items whose prediction equals the label;
- ``accuracy_correct``: share of correct items predicted -1;
- ``f1``: ``2ab / (a + b)`` of those two (0 when both are 0);
- ``verdict_accuracy``: share of all items where (prediction == -1) equals (label == -1);
- ``mean_distance`` / ``within_one``: over erroneous items with a predicted step index (not -1, not unparsed), the
  mean ``|prediction - label|`` and the share with ``|prediction - label| <= 1`` (null without such items);
- ``parse_failures``: items without a prediction because of unparsable replies (failed requests are
  ``counts["request_failures"]``);
- ``cost``: ``requests`` (HTTP requests, retries included; for a teacher that sends none, its solve and judge
  calls), ``prompt_tokens`` / ``completion_tokens`` (summed from the server's ``usage``; ``usage_reported`` counts the
  replies that had one), ``wall_time_s`` (of the whole run, resumed sessions added up) and ``mean_latency_s`` (mean
  time of one request from sending it to the reply, waiting for a free concurrency slot excluded).

Resumable: every judged item is appended to ``<output_json without .json>.items.jsonl`` as soon as it is done; a
re-run with the same settings skips the items found there (a torn last line from a kill is dropped).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .judge_data import (  # noqa: F401 - the labelled data's names, importable from here as before
    NO_MISTAKE,
    PROCESSBENCH_SPLITS,
    LabelledItem,
    export_rollouts,
    items_from_rows,
    load_labelled_items,
    qwen_world_first_mistake,
    qwen_world_labelled_items,
    toy_labelled_items,
)
from .protocol import CliffJudge, reduce_first_mistakes
from .teachers.base import ENDPOINT_FAILURES, SolveFailure, Teacher

logger = logging.getLogger(__name__)

__all__ = [
    "PROCESSBENCH_CRITIQUE_TEMPLATE",
    "PROCESSBENCH_SPLITS",
    "LabelledItem",
    "build_processbench_messages",
    "export_rollouts",
    "format_metrics_table",
    "items_path_for",
    "judge_metrics",
    "load_labelled_items",
    "parse_boxed_index",
    "qwen_world_first_mistake",
    "qwen_world_labelled_items",
    "run_judge_eval",
    "summarize_records",
    "toy_labelled_items",
]

# ProcessBench's critique prompt, quoted for compatibility (so our numbers can be set beside the published ones)
# from QwenLM/ProcessBench, code/templates/critique_template.txt (Zheng et al., 2024, arXiv:2412.06559).
PROCESSBENCH_CRITIQUE_TEMPLATE = """\
The following is a math problem and a solution (split into paragraphs, enclosed with tags and indexed from 0):

[Math Problem]

{problem}

[Solution]

{tagged_response}

Your task is to review and critique the solution paragraph by paragraph. Once you identify an error in a \
paragraph, return the index of the paragraph where the earliest error occurs. Otherwise, return the index of \
-1 (which typically denotes "not found").

Please put your final answer (i.e., the index) in \\boxed{{}}.
"""

PROMPT_KINDS = ("cliff", "processbench")


# ---------------------------------------------------------------------------------------------------------------
# Metrics (pure)
# ---------------------------------------------------------------------------------------------------------------


def judge_metrics(labels: Sequence[int], predictions: Sequence[int | None]) -> dict[str, Any]:
    """The judge-eval metrics of one set (see the module docstring for the definitions).

    Args:
        labels: per item the first wrong step, -1 when the solution has no mistake.
        predictions: per item the teacher's first mistake (-1 = no mistake), None = no prediction (unparsable
            reply or failed request: wrong everywhere).

    >>> m = judge_metrics([2, 2, -1, -1], [2, None, -1, 0])
    >>> m["accuracy_erroneous"], m["accuracy_correct"], m["f1"], m["verdict_accuracy"], m["mean_distance"]
    (0.5, 0.5, 0.5, 0.5, 0.0)
    """
    if len(labels) != len(predictions):
        raise ValueError(
            f"{len(labels)} labels but {len(predictions)} predictions; give one prediction per item."
        )
    erroneous = [(label, p) for label, p in zip(labels, predictions) if label != NO_MISTAKE]
    correct = [(label, p) for label, p in zip(labels, predictions) if label == NO_MISTAKE]
    hits_erroneous = sum(p == label for label, p in erroneous)
    hits_correct = sum(p == NO_MISTAKE for _, p in correct)
    a = hits_erroneous / len(erroneous) if erroneous else 0.0
    b = hits_correct / len(correct) if correct else 0.0
    verdicts = sum(
        p is not None and (p == NO_MISTAKE) == (label == NO_MISTAKE) for label, p in zip(labels, predictions)
    )
    distances = [abs(p - label) for label, p in erroneous if p is not None and p != NO_MISTAKE]
    return {
        "accuracy_erroneous": a,
        "accuracy_correct": b,
        "f1": 2 * a * b / (a + b) if a + b > 0 else 0.0,
        "verdict_accuracy": verdicts / len(labels) if labels else 0.0,
        "mean_distance": sum(distances) / len(distances) if distances else None,
        "within_one": sum(d <= 1 for d in distances) / len(distances) if distances else None,
        "counts": {
            "items": len(labels),
            "erroneous": len(erroneous),
            "correct": len(correct),
            "erroneous_hits": hits_erroneous,
            "correct_hits": hits_correct,
            "no_prediction": sum(p is None for p in predictions),
            "predicted_step": len(distances),
        },
    }


def summarize_records(records: Sequence[dict[str, Any]], wall_time_s: float | None = None) -> dict[str, Any]:
    """The JSON summary of judged item records: metrics, counts, per-split metrics and cost."""
    labels = [r["label"] for r in records]
    predictions = [r["prediction"] for r in records]
    summary = judge_metrics(labels, predictions)
    statuses = Counter(r["status"] for r in records)
    parse_failures = sum(n for s, n in statuses.items() if _is_parse_failure(s))
    summary["parse_failures"] = parse_failures
    summary["counts"].update(
        parse_failures=parse_failures,
        request_failures=sum(n for s, n in statuses.items() if s in ENDPOINT_FAILURES),
        reference_unverified=sum(n for s, n in statuses.items() if s.startswith("reference_")),
        statuses=dict(sorted(statuses.items())),
    )
    splits = sorted({r["split"] for r in records})
    if len(splits) > 1:
        summary["splits"] = {}
        for name in splits:
            part = [r for r in records if r["split"] == name]
            metrics = judge_metrics([r["label"] for r in part], [r["prediction"] for r in part])
            metrics["parse_failures"] = sum(_is_parse_failure(r["status"]) for r in part)
            summary["splits"][name] = metrics
        summary["f1_average_over_splits"] = sum(m["f1"] for m in summary["splits"].values()) / len(splits)
    reference = Counter(r.get("reference_status") for r in records if r.get("reference_status"))
    if reference:  # per item: the outcome of its problem's solve call (one call per problem)
        summary["reference_filter"] = {
            "solve_calls": sum(1 for r in records if r.get("solve_call")),
            "verified": reference.get("verified", 0),
            "unverified": sum(n for s, n in reference.items() if s not in ("verified", "unfiltered")),
            "statuses": dict(sorted(reference.items())),
        }
    requests = sum(r.get("requests", 0) for r in records)
    request_seconds = sum(r.get("request_seconds", 0.0) for r in records)
    summary["cost"] = {
        "requests": requests,
        "prompt_tokens": sum(r.get("prompt_tokens", 0) for r in records),
        "completion_tokens": sum(r.get("completion_tokens", 0) for r in records),
        "usage_reported": sum(r.get("usage_reported", 0) for r in records),
        "wall_time_s": wall_time_s,
        "mean_latency_s": request_seconds / requests if requests else None,
    }
    return summary


def _is_parse_failure(status: str) -> bool:
    """An item without a prediction because the teacher's reply could not be read (not a failed request, an
    unverified reference, or a re-scored item without a stored prediction)."""
    return (
        status not in ("ok", "rescored", "no_prediction")
        and status not in ENDPOINT_FAILURES
        and not status.startswith("reference_")
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def format_metrics_table(summary: dict[str, Any]) -> str:
    """A short human-readable table of a summary (percentages; distance in steps)."""
    header = f"{'set':<16}{'items':>7}{'err acc':>9}{'cor acc':>9}{'F1':>7}{'verdict':>9}{'dist':>7}{'<=1':>7}{'unparsed':>10}"
    lines = [header, "-" * len(header)]

    def row(name: str, m: dict[str, Any]) -> str:
        distance = "-" if m["mean_distance"] is None else f"{m['mean_distance']:.2f}"
        return (
            f"{name:<16}{m['counts']['items']:>7}{_percent(m['accuracy_erroneous']):>9}"
            f"{_percent(m['accuracy_correct']):>9}{_percent(m['f1']):>7}{_percent(m['verdict_accuracy']):>9}"
            f"{distance:>7}{_percent(m['within_one']):>7}{m['parse_failures']:>10}"
        )

    for name, metrics in summary.get("splits", {}).items():
        lines.append(row(name, metrics))
    lines.append(row("all", summary))
    cost = summary["cost"]
    latency = "-" if cost["mean_latency_s"] is None else f"{cost['mean_latency_s']:.3f} s"
    wall = "-" if cost["wall_time_s"] is None else f"{cost['wall_time_s']:.1f} s"
    lines.append(
        f"cost: {cost['requests']} requests, {cost['prompt_tokens']} prompt + {cost['completion_tokens']} completion "
        f"tokens, wall time {wall}, mean latency {latency}; request failures: {summary['counts']['request_failures']}"
    )
    if "reference_filter" in summary:
        ref = summary["reference_filter"]
        lines.append(
            f"reference filter: {ref['solve_calls']} solve calls; items with a verified reference: {ref['verified']}, "
            f"without: {ref['unverified']}"
            + (f", unfiltered: {ref['statuses']['unfiltered']}" if "unfiltered" in ref["statuses"] else "")
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# ProcessBench's critique prompt
# ---------------------------------------------------------------------------------------------------------------


def build_processbench_messages(problem: str, steps: Sequence[str]) -> list[dict[str, str]]:
    """ProcessBench's critique request: the paragraphs tagged ``<paragraph_k>`` (from 0), one user message."""
    tagged = "\n\n".join(f"<paragraph_{k}>\n{step}\n</paragraph_{k}>" for k, step in enumerate(steps))
    return [
        {
            "role": "user",
            "content": PROCESSBENCH_CRITIQUE_TEMPLATE.format(problem=problem, tagged_response=tagged),
        }
    ]


def parse_boxed_index(text: Any, num_steps: int) -> tuple[int | None, str]:
    """``(index, status)`` from the last ``\\boxed{}`` of a critique reply; index -1 = no error found.

    >>> parse_boxed_index("Paragraph 2 is wrong. \\\\boxed{2}", 4)
    (2, 'ok')
    >>> parse_boxed_index("\\\\boxed{-1}", 4), parse_boxed_index("\\\\boxed{7}", 4), parse_boxed_index("no box", 4)
    ((-1, 'ok'), (None, 'out_of_range'), (None, 'parse_error'))
    """
    from ..rewards.extraction import extract_boxed_answer

    if not isinstance(text, str) or not text.strip():
        return None, "empty"
    region = text.rsplit("</think>", 1)[1] if "</think>" in text else text
    boxed = extract_boxed_answer(region)
    if boxed is None and region is not text:
        boxed = extract_boxed_answer(text)
    if boxed is None:
        return None, "parse_error"
    match = re.fullmatch(r"\s*(?:\\text\{)?\s*(-?\d+)\s*\}?\s*", boxed)
    if match is None:
        return None, "invalid_field"
    index = int(match.group(1))
    if not -1 <= index < num_steps:
        return None, "out_of_range"
    return index, "ok"


# ---------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------


def items_path_for(output_json: str | os.PathLike) -> Path:
    """Where the per-item records of ``output_json`` go: ``<name without .json>.items.jsonl`` beside it."""
    path = Path(output_json)
    return path.with_name((path.name.removesuffix(".json")) + ".items.jsonl")


def _read_items_file(
    path: Path,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[tuple[float, float]]]:
    """``(header, item records, sessions (start, last item time))`` of an items file; torn lines are dropped."""
    header, records, sessions = None, [], []
    if not path.exists():
        return header, records, sessions
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(entry, dict):
                continue
            kind = entry.get("kind")
            if kind == "header" and header is None:
                header = entry
            elif kind == "session":
                sessions.append([entry["started"], entry["started"]])
            elif kind == "item":
                records.append(entry)
                if sessions:
                    sessions[-1][1] = max(sessions[-1][1], entry.get("finished", sessions[-1][1]))
    return header, records, [tuple(s) for s in sessions]


@dataclass
class JudgeEvalSettings:
    """What a run's records depend on; a resumed run must match them."""

    teacher: str
    prompt: str = "cliff"
    self_consistency: int = 1
    reducer: str = "median"
    reference_filter: bool = True
    data: str = ""
    label_column: str = "label"
    extra: dict[str, Any] = field(default_factory=dict)


def _item_key(item: LabelledItem) -> str:
    digest = hashlib.blake2b(
        json.dumps([item.problem, item.steps, item.label], ensure_ascii=False).encode(), digest_size=8
    ).hexdigest()
    return f"{item.split}/{item.id}/{digest}"


def run_judge_eval(
    items: Sequence[LabelledItem],
    teacher: Teacher | None,
    *,
    output_json: str | os.PathLike | None = None,
    settings: JudgeEvalSettings | None = None,
    prompt: str = "cliff",
    self_consistency: int = 1,
    reducer: str = "median",
    reference_filter: bool = True,
    verify: Callable[[str, str], bool] | None = None,
    max_items_in_flight: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Judge ``items`` with ``teacher`` and return the summary (also written to ``output_json`` when given).

    ``teacher=None`` re-scores the items' stored ``prediction`` (no calls). Item records go to
    :func:`items_path_for` ``(output_json)`` as they finish; items already recorded there by an earlier run with the
    same ``settings`` are not judged again.
    """
    if prompt not in PROMPT_KINDS:
        raise ValueError(f"prompt={prompt!r} is unknown; use one of {PROMPT_KINDS}.")
    if prompt == "processbench" and teacher is not None and not hasattr(teacher, "ask"):
        raise ValueError(
            f"prompt='processbench' sends a free-form critique request, which {type(teacher).__name__} cannot: use an "
            "OpenAI-compatible teacher (--cliff_teacher http), or prompt='cliff'."
        )
    if not isinstance(max_items_in_flight, int) or max_items_in_flight < 1:
        raise ValueError(f"max_items_in_flight={max_items_in_flight!r} must be a positive integer.")
    keys = [_item_key(item) for item in items]
    if len(set(keys)) != len(keys):
        duplicates = [k for k, n in Counter(keys).items() if n > 1]
        raise ValueError(
            f"Duplicate items (same split, id and content): {duplicates[:3]}; remove the duplicates."
        )
    settings = settings or JudgeEvalSettings(
        teacher=repr(teacher), prompt=prompt, self_consistency=self_consistency, reducer=reducer,
        reference_filter=reference_filter,
    )  # fmt: skip
    items_path = items_path_for(output_json) if output_json is not None else None
    done: dict[str, dict[str, Any]] = {}
    sessions: list[tuple[float, float]] = []
    if items_path is not None:
        header, previous, sessions = _read_items_file(items_path)
        wanted = json.loads(json.dumps(asdict(settings)))
        if header is not None and header.get("settings") != wanted:
            different = sorted(k for k in wanted if header.get("settings", {}).get(k) != wanted[k])
            raise ValueError(
                f"{items_path} holds a run with other settings ({different}); to resume it use the same settings, "
                "to start over delete it or give another --output_json."
            )
        valid = set(keys)
        done = {r["key"]: r for r in previous if r.get("key") in valid}
        items_path.parent.mkdir(parents=True, exist_ok=True)
        torn = (
            items_path.exists() and items_path.stat().st_size and not items_path.read_bytes().endswith(b"\n")
        )
        with items_path.open("a", encoding="utf-8") as handle:
            if torn:  # a kill mid-write left half a line: end it, so it is dropped alone
                handle.write("\n")
            if header is None:
                handle.write(json.dumps({"kind": "header", "settings": wanted}) + "\n")
            handle.write(json.dumps({"kind": "session", "started": time.time()}) + "\n")
        if done:
            logger.info("Resuming: %d of %d items already judged in %s", len(done), len(items), items_path)
    todo = [(key, item) for key, item in zip(keys, items) if key not in done]
    session_started = time.time()
    new_records: list[dict[str, Any]] = []
    if todo:
        if teacher is None:
            new_records = [_rescored_record(key, item) for key, item in todo]
            _append_records(items_path, new_records)
        else:
            judge = CliffJudge(
                teacher, verify=verify, reference_filter=reference_filter, self_consistency=self_consistency,
                reducer=reducer,
            )  # fmt: skip
            try:
                new_records = judge._run(
                    _judge_all(
                        judge, todo, prompt, items_path, max_items_in_flight, progress, len(done), len(items)
                    )
                )
            finally:
                judge.close()
    by_key = {**done, **{r["key"]: r for r in new_records}}
    records = [by_key[key] for key in keys]
    past_wall = sum(end - start for start, end in sessions)
    summary = summarize_records(records, wall_time_s=past_wall + (time.time() - session_started))
    summary["settings"] = asdict(settings)
    summary["counts"]["resumed"] = len(done)
    if output_json is not None:
        from ..checkpointing import write_json_atomically

        write_json_atomically(Path(output_json), summary)
    return summary


def _append_records(path: Path | None, records: Sequence[dict[str, Any]]) -> None:
    if path is None or not records:
        return
    with path.open("a", encoding="utf-8") as handle:
        handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        handle.flush()


def _rescored_record(key: str, item: LabelledItem) -> dict[str, Any]:
    return {
        "kind": "item", "key": key, "id": item.id, "split": item.split, "label": item.label,
        "prediction": item.prediction, "status": "rescored" if item.prediction is not None else "no_prediction",
        "finished": time.time(),
    }  # fmt: skip


async def _judge_all(
    judge: CliffJudge,
    todo: list[tuple[str, LabelledItem]],
    prompt: str,
    items_path: Path | None,
    max_items_in_flight: int,
    progress: Callable[[int, int], None] | None,
    already: int,
    total: int,
) -> list[dict[str, Any]]:
    semaphore = asyncio.Semaphore(max_items_in_flight)
    records: list[dict[str, Any]] = []
    solves: dict[
        tuple[str, str], asyncio.Task
    ] = {}  # one solve per problem, as training caches its reference

    async def one(key: str, item: LabelledItem) -> None:
        async with semaphore:
            record = await _judge_item(judge, key, item, prompt, solves)
        records.append(record)
        _append_records(
            items_path, [record]
        )  # one write per finished item: a kill loses only items in flight
        if progress is not None:
            progress(already + len(records), total)

    await asyncio.gather(*(one(key, item) for key, item in todo))
    return records


async def _judge_item(
    judge: CliffJudge,
    key: str,
    item: LabelledItem,
    prompt: str,
    solves: dict[tuple[str, str], asyncio.Task],
) -> dict[str, Any]:
    from .teachers.openai_compatible import REQUEST_COST, OpenAICompatibleTeacher

    cost: Counter = Counter()
    REQUEST_COST.set(cost)  # this task's context: the teacher's requests for this item add to ``cost``
    calls = 0
    counts_requests = isinstance(judge.teacher, OpenAICompatibleTeacher)  # it adds its requests to ``cost``
    started = time.perf_counter()
    record: dict[str, Any] = {
        "kind": "item",
        "key": key,
        "id": item.id,
        "split": item.split,
        "label": item.label,
    }
    reference = None
    if prompt == "cliff" and item.answer is not None:
        problem_key = (item.problem, item.answer)
        if problem_key not in solves:  # started from this item's task: its requests are this item's cost
            solves[problem_key] = asyncio.ensure_future(judge._solve(item.problem, item.answer))
            record["solve_call"] = True
            calls += 1
        solved = await solves[problem_key]
        # verified, unfiltered (filter off), wrong, no_ground_truth, or an endpoint failure of the solve call
        record["reference_status"] = solved["status"]
        if not solved["verified"]:
            status = (
                solved["status"] if solved["status"] in ENDPOINT_FAILURES else "reference_" + solved["status"]
            )
            record.update(prediction=None, status=status, statuses=[], votes=[], raw=[])
            return _finish(record, cost, calls, started, counts_requests)
        reference = solved["solution"]
    if prompt == "cliff":
        results = await asyncio.gather(
            *(judge._judge(item.problem, reference, item.steps) for _ in range(judge.self_consistency))
        )
        statuses = [r["status"] for r in results]
        votes = [r["first_mistake"] for r in results]
        raws = [r.get("raw", "") for r in results]
    else:
        answers = await asyncio.gather(
            *(
                judge.teacher.ask(build_processbench_messages(item.problem, item.steps))
                for _ in range(judge.self_consistency)
            )
        )
        statuses, votes, raws = [], [], []
        for answer in answers:
            if isinstance(answer, SolveFailure):
                statuses.append(answer.status)
                votes.append(None)
                raws.append(answer.message)
                continue
            index, status = parse_boxed_index(answer, len(item.steps))
            statuses.append(status)
            votes.append(None if index == NO_MISTAKE else index)
            raws.append(answer)
    calls += len(statuses)
    usable = [vote for vote, status in zip(votes, statuses) if status == "ok"]
    if usable:
        mistake, _ = reduce_first_mistakes(usable, judge.reducer)
        record.update(prediction=NO_MISTAKE if mistake is None else mistake, status="ok")
    else:
        endpoint = [s for s in statuses if s in ENDPOINT_FAILURES]
        record.update(prediction=None, status=endpoint[0] if len(endpoint) == len(statuses) else next(
            s for s in statuses if s not in ENDPOINT_FAILURES
        ))  # fmt: skip
    record.update(statuses=statuses, votes=votes, raw=[r[:4000] for r in raws])
    return _finish(record, cost, calls, started, counts_requests)


def _finish(
    record: dict[str, Any], cost: Counter, calls: int, started: float, counts_requests: bool
) -> dict[str, Any]:
    record["latency_s"] = time.perf_counter() - started  # the item's wall time, queueing included
    # HTTP teachers count their requests (retries included) and time each from sending to reply; other teachers
    # make one call per solve or judgment, timed together with the item
    record["requests"] = int(cost["requests"]) if counts_requests else calls
    record["request_seconds"] = float(cost["request_seconds"]) if counts_requests else record["latency_s"]
    record["prompt_tokens"] = int(cost["prompt_tokens"])
    record["completion_tokens"] = int(cost["completion_tokens"])
    record["usage_reported"] = int(cost["usage_reported"])
    record["finished"] = time.time()
    return record
