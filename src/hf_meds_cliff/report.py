"""``hf-meds-cliff report RUN_DIR``: one self-contained HTML file that shows what MEDS and Cliff did in a run.

The report reads only what the trainers and ``hf-meds-cliff eval`` write, and recomputes nothing that a
trainer decided:

* curves of the run's reward, length, ``meds/*`` and ``cliff/*`` metrics: ``metrics.jsonl`` (written at the
  end of a run) or, for a run still going or stopped, the newest ``checkpoint-*/trainer_state.json``;
* MEDS: the error memory (``RUN_DIR/meds_memory`` or the newest checkpoint's), per prompt its clusters of
  wrong and of correct completions: size, growth over the steps (the steps its rows came from), and
  representative completions (the stored answer-region snippets nearest the cluster's centre);
* Cliff: ``cliff_rollouts.jsonl`` (judged wrong rollouts with their sentences, first mistake, the teacher's
  raw answers and the reference; code rollouts with numbered program lines, the first mistaken line named and
  the failing test the judge saw) and the newest ``cliff_state.json`` (reference and judgment caches);
* pass@k: ``summary.json`` files of ``hf-meds-cliff eval`` inside the run directory, next to it when they
  evaluated this run's model, or given with ``--eval_dir``;
* teacher calibration: ``hf-meds-cliff judge-eval`` metrics (``--output_json``) saved in the run directory or
  its ``judge_eval/`` folder.

A damaged run folder (a truncated or non-UTF-8 line in ``metrics.jsonl``, a truncated ``trainer_state.json``, an
empty ``cliff_state.json``, malformed rollout records, an eval summary without benchmarks) never stops the
report: each bad record is skipped, counted, and listed at the top of the page.

The page is static and offline: inline CSS, inline SVG charts and a few lines of inline JavaScript (sorting
and filtering); a Content-Security-Policy forbids any network request. Every text from a run is HTML-escaped.

>>> from hf_meds_cliff.report import svg_line_chart
>>> svg_line_chart([("reward", [(1, 0.2), (2, 0.5)])]).startswith("<svg")
True
"""

from __future__ import annotations

import datetime as _datetime
import html
import itertools
import json
import logging
import math
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .agentic_report import AGENTIC_CSS, agentic_rollout_html, is_agentic_record, mistake_label

logger = logging.getLogger(__name__)

REPORT_NAME = "report.html"
METRICS_NAME = "metrics.jsonl"
EVAL_SUMMARY_NAME = "summary.json"
READY_ATTRIBUTE = "data-report-ready"
"""Set on ``<html>`` by the page's script once it ran (browser tests look for it)."""

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def esc(value: Any) -> str:
    """HTML-escaped text of ``value`` (quotes too, so it is safe inside attributes).

    >>> esc('<img src=x onerror="alert(1)">')
    '&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'
    """
    return html.escape("" if value is None else str(value), quote=True)


# ----------------------------------------------------------------------------------------------------
# Reading a run
# ----------------------------------------------------------------------------------------------------


@dataclass
class RunData:
    """Everything the report shows, as read from a run directory."""

    run_dir: Path
    log_history: list[dict[str, Any]] = field(default_factory=list)
    log_source: Path | None = None
    memory: Any = None  # hf_meds_cliff.meds.ErrorMemory
    memory_path: Path | None = None
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    rollouts_path: Path | None = None
    cliff_state: dict[str, Any] | None = None
    cliff_state_path: Path | None = None
    eval_summaries: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)
    """Per file, why records of it were skipped (shown at the top of the report)."""

    def skip(self, path: Path | str, reason: str) -> None:
        logger.warning("Report: skipping %s: %s", path, reason)
        self.skipped.setdefault(str(path), []).append(reason)

    judge_evals: list[tuple[Path, dict[str, Any]]] = field(default_factory=list)

    @property
    def method(self) -> str:
        if self.memory is not None or any(key.startswith("meds/") for r in self.log_history for key in r):
            return "MEDS"
        if (
            self.rollouts
            or self.cliff_state is not None
            or any(key.startswith("cliff/") for r in self.log_history for key in r)
        ):
            return "Cliff"
        return "GRPO"


def checkpoints(run_dir: Path) -> list[Path]:
    """``checkpoint-N`` folders of ``run_dir``, oldest (smallest N) first."""
    found = []
    for child in run_dir.iterdir() if run_dir.is_dir() else []:
        match = _CHECKPOINT.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def _candidates(run_dir: Path, relative: str) -> list[Path]:
    """The existing ``relative`` paths: ``run_dir``'s first, then the checkpoints', newest first."""
    return [
        folder / relative
        for folder in [run_dir, *reversed(checkpoints(run_dir))]
        if (folder / relative).exists()
    ]


def _skip_to(skipped: RunData | None) -> Any:
    """The ``skip(path, reason)`` of ``skipped``, or a logger-only one."""
    if skipped is not None:
        return skipped.skip
    return lambda path, reason: logger.warning("Report: skipping %s: %s", path, reason)


def read_jsonl_objects(path: Path, skipped: RunData | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each line of the JSON-lines file ``path`` that holds a JSON object; a line
    that is not UTF-8, not JSON (a truncated write) or not an object is skipped with its reason."""
    skip = _skip_to(skipped)
    try:
        raw_lines = path.read_bytes().split(b"\n")
    except OSError as error:
        skip(path, f"unreadable ({error})")
        return []
    objects = []
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            skip(path, f"line {number}: not UTF-8 text")
            continue
        except ValueError:
            skip(path, f"line {number}: not valid JSON (a truncated write?)")
            continue
        if not isinstance(value, dict):
            skip(path, f"line {number}: a JSON {type(value).__name__}, not an object")
            continue
        objects.append((number, value))
    return objects


def read_json_object(path: Path, skipped: RunData | None = None) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None (skipped with its reason) when it is unreadable, empty, truncated
    or not an object."""
    skip = _skip_to(skipped)
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as error:
        skip(path, f"unreadable ({error})")
        return None
    except UnicodeDecodeError:
        skip(path, "not UTF-8 text")
        return None
    except ValueError:
        skip(path, "empty or not valid JSON (a truncated write?)")
        return None
    if not isinstance(value, dict):
        skip(path, f"a JSON {type(value).__name__}, not an object")
        return None
    return value


def read_log_history(
    run_dir: Path, skipped: RunData | None = None
) -> tuple[list[dict[str, Any]], Path | None]:
    """The run's logged records: ``metrics.jsonl``, else (missing, or no readable line in it) the newest
    checkpoint's readable ``trainer_state.json``."""
    skip = _skip_to(skipped)
    metrics = run_dir / METRICS_NAME
    if metrics.is_file():
        records = [record for _, record in read_jsonl_objects(metrics, skipped)]
        if records:
            return records, metrics
        skip(metrics, "no readable record; curves come from the newest checkpoint's trainer_state.json")
    for checkpoint in reversed(checkpoints(run_dir)):
        state_path = checkpoint / "trainer_state.json"
        if not state_path.is_file():
            continue
        state = read_json_object(state_path, skipped)
        history = state.get("log_history") if state is not None else None
        if state is not None and not isinstance(history, list):
            skip(state_path, "no log_history list")
        if isinstance(history, list):
            kept = [record for record in history if isinstance(record, dict)]
            if len(kept) < len(history):
                skip(state_path, f"{len(history) - len(kept)} log_history entries are not objects")
            return kept, state_path
    return [], None


def _rollout_problem(record: Mapping[str, Any]) -> str | None:
    """Why a ``cliff_rollouts.jsonl`` record cannot be shown, or None when it can."""
    for name in ("step", "sample"):
        if isinstance(record.get(name), bool) or not isinstance(record.get(name), int):
            return f"{name} is not an integer"
    sentences = record.get("sentences", [])
    if not isinstance(sentences, list) or not all(
        isinstance(span, list)
        and len(span) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
        for span in sentences
    ):
        return "sentences is not a list of [start, end] integer pairs"
    mistake = record.get("first_mistake")
    if mistake is not None and (isinstance(mistake, bool) or not isinstance(mistake, int)):
        return "first_mistake is not an integer or null"
    for name in ("teacher_raw", "teacher_statuses"):
        value = record.get(name)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{name} is not a list of strings"
    if record.get("completion") is not None and not isinstance(record.get("completion"), str):
        return "completion is not a string"
    return None


def read_rollouts(path: Path, skipped: RunData | None = None) -> list[dict[str, Any]]:
    """Cliff's judged rollouts; a step logged twice (after a resume) keeps its last line per sample. A line
    that cannot be shown (see :func:`_rollout_problem`) is skipped with its reason."""
    skip = _skip_to(skipped)
    latest: dict[tuple[int, int], dict[str, Any]] = {}
    for number, record in read_jsonl_objects(path, skipped):
        problem = _rollout_problem(record)
        if problem is not None:
            skip(path, f"line {number}: {problem}")
            continue
        latest[(record["step"], record["sample"])] = record
    return [latest[key] for key in sorted(latest)]


def _summary_problem(summary: Mapping[str, Any]) -> str | None:
    """Why an eval ``summary.json`` cannot be shown, or None when it can."""
    blocks = dict(summary.get("benchmarks") or {}) if isinstance(summary.get("benchmarks"), dict) else None
    if not blocks:
        return "no benchmarks in it"
    if isinstance(summary.get("average"), dict):
        blocks["average"] = summary["average"]
    for name, block in blocks.items():
        passk = block.get("pass@k") if isinstance(block, dict) else None
        if not isinstance(passk, dict) or not passk:
            return f"benchmark {name!r} has no pass@k table"
        for k, value in passk.items():
            if not str(k).isdigit() or not _finite(value):
                return f"benchmark {name!r}: pass@{k} = {value!r} is not a number"
    return None


def _glob_siblings(folder: Path, pattern: str, attempts: int = 3) -> list[Path]:
    """``folder.glob(pattern)`` that survives folders vanishing while it walks (a shared parent such as ``/tmp``,
    where other programs delete their temporary folders): ``pathlib`` then raises ``FileNotFoundError``; the walk
    is retried, and given up with a warning (no summary found there) after ``attempts`` failures."""
    for _ in range(attempts):
        try:
            return list(folder.glob(pattern))
        except OSError as error:
            last_error = error
    logger.warning("Not looking for eval summaries next to the run in %s: %s", folder, last_error)
    return []


def find_eval_summaries(
    run_dir: Path, eval_dirs: Iterable[str | os.PathLike] = (), skipped: RunData | None = None
) -> list[tuple[Path, dict]]:
    """``summary.json`` files of ``hf-meds-cliff eval``: inside ``run_dir`` (any depth up to 3, outside
    checkpoints), next to it when their ``model_name_or_path`` is ``run_dir``, and in ``eval_dirs``."""
    candidates: list[Path] = []
    for depth in ("", "*", "*/*", "*/*/*"):
        candidates += [
            p for p in run_dir.glob(f"{depth}/{EVAL_SUMMARY_NAME}".lstrip("/")) if "checkpoint-" not in str(p)
        ]
    resolved_run = run_dir.resolve()
    if run_dir.parent.is_dir():
        for path in [
            *_glob_siblings(run_dir.parent, f"*/{EVAL_SUMMARY_NAME}"),
            *_glob_siblings(run_dir.parent, f"*/*/{EVAL_SUMMARY_NAME}"),
        ]:
            if resolved_run in path.resolve().parents:
                continue
            try:
                model = json.loads(path.read_text(encoding="utf-8")).get("model_name_or_path")
            except (OSError, ValueError):
                continue
            if model and Path(os.path.expanduser(str(model))).resolve() == resolved_run:
                candidates.append(path)
    for folder in eval_dirs:
        path = Path(folder)
        path = path if path.name == EVAL_SUMMARY_NAME else path / EVAL_SUMMARY_NAME
        if not path.is_file():
            raise FileNotFoundError(
                f"--eval_dir {folder}: no {EVAL_SUMMARY_NAME} there; pass an eval output folder."
            )
        candidates.append(path)
    summaries, seen = [], set()
    for path in candidates:
        key = path.resolve()
        if key in seen:
            continue
        seen.add(key)
        summary = read_json_object(path, skipped)
        if summary is None:
            continue
        problem = _summary_problem(summary)
        if problem is not None:
            _skip_to(skipped)(path, f"eval summary not shown: {problem}")
            continue
        summaries.append((path, summary))
    return summaries


def collect_run(run_dir: str | os.PathLike, eval_dirs: Iterable[str | os.PathLike] = ()) -> RunData:
    """Read every artefact the report uses from ``run_dir`` (see the module docstring)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(
            f"{run_dir} is not a directory; pass the --output_dir of a training run (e.g. outputs/meds-toy)."
        )
    data = RunData(run_dir=run_dir)
    data.log_history, data.log_source = read_log_history(run_dir, data)
    for memory_path in _candidates(run_dir, "meds_memory"):
        from .meds.memory import ErrorMemory

        try:
            data.memory, data.memory_path = ErrorMemory.load(memory_path), memory_path
            break
        except (OSError, ValueError, KeyError, TypeError) as error:
            data.skip(memory_path, f"error memory not loadable ({' '.join(str(error).split())})")
    rollouts_path = run_dir / "cliff_rollouts.jsonl"
    if rollouts_path.is_file():
        data.rollouts, data.rollouts_path = read_rollouts(rollouts_path, data), rollouts_path
    for state_path in _candidates(run_dir, "cliff_state.json"):
        state = read_json_object(state_path, data)
        if state is None:
            continue
        if not all(isinstance(state.get(name, {}), dict) for name in ("references", "judgments")) or not all(
            isinstance(judgment, dict) for judgment in state.get("judgments", {}).values()
        ):
            data.skip(state_path, "references/judgments are not objects")
            continue
        data.cliff_state, data.cliff_state_path = state, state_path
        break
    data.eval_summaries = find_eval_summaries(run_dir, eval_dirs, data)
    data.judge_evals = find_judge_evals(run_dir, data)
    return data


def find_judge_evals(run_dir: Path, skipped: RunData | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """``hf-meds-cliff judge-eval`` summaries (JSON with its metric keys) in ``run_dir`` and ``run_dir/judge_eval``;
    other JSON files there are not judge-eval results and are passed over; a judge-eval result whose ``settings``,
    ``counts`` or ``cost`` is not an object is skipped with its reason."""
    found = []
    for path in sorted([*run_dir.glob("*.json"), *run_dir.glob("judge_eval/*.json")]):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not (
            isinstance(summary, dict)
            and {"accuracy_erroneous", "accuracy_correct", "f1", "cost"} <= set(summary)
        ):
            continue
        malformed = [
            name for name in ("settings", "counts", "cost") if not isinstance(summary.get(name) or {}, dict)
        ]
        if malformed:
            _skip_to(skipped)(path, f"judge-eval result not shown: {', '.join(malformed)} not an object")
            continue
        found.append((path, summary))
    return found


def judge_eval_section(data: RunData) -> str:
    """Teacher calibration: the judge-eval runs found beside the run (empty string without any)."""
    if not data.judge_evals:
        return ""
    header = (
        '<section id="judge-eval"><h2>Teacher calibration (judge-eval)</h2>'
        '<p class="note">First-mistake judging measured on labelled data before or beside this run '
        "(<code>hf-meds-cliff judge-eval</code>; definitions in docs/judge_eval.md). Accuracies in %, distance in "
        "steps.</p>"
        '<table class="passk"><thead><tr><th>file</th><th>teacher</th><th>prompt</th><th>items</th>'
        "<th>erroneous acc.</th><th>correct acc.</th><th>F1</th><th>verdict acc.</th><th>mean distance</th>"
        "<th>within one</th><th>unparsed</th><th>requests</th><th>tokens (prompt + completion)</th>"
        "<th>mean latency</th></tr></thead><tbody>"
    )
    out = [header]
    for path, summary in data.judge_evals:
        settings = summary.get("settings") or {}
        extra = settings.get("extra") or {}
        cost = summary.get("cost") or {}
        teacher = " ".join(str(v) for v in (settings.get("teacher"), extra.get("model")) if v)
        distance = summary.get("mean_distance")
        latency = cost.get("mean_latency_s")
        cells = [
            path.name, teacher, settings.get("prompt", ""), (summary.get("counts") or {}).get("items", ""),
            _percent(summary.get("accuracy_erroneous")), _percent(summary.get("accuracy_correct")),
            _percent(summary.get("f1")), _percent(summary.get("verdict_accuracy")),
            f"{distance:.2f}" if _finite(distance) else "", _percent(summary.get("within_one")),
            summary.get("parse_failures", ""), cost.get("requests", ""),
            f"{cost.get('prompt_tokens', 0)} + {cost.get('completion_tokens', 0)}",
            f"{latency:.3f} s" if _finite(latency) else "",
        ]  # fmt: skip
        out.append("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in cells) + "</tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


# ----------------------------------------------------------------------------------------------------
# SVG charts
# ----------------------------------------------------------------------------------------------------


def _fmt(value: float) -> str:
    if value == 0 or (1e-3 <= abs(value) < 1e5):
        return f"{value:.4g}"
    return f"{value:.1e}"


def svg_line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    width: int = 300,
    height: int = 160,
    x_label: str = "step",
    log2_x: bool = False,
    y_range: tuple[float, float] | None = None,
    markers: bool | None = None,
    x_ticks: Sequence[float] | None = None,
) -> str:
    """An inline SVG line chart of ``series`` (name, [(x, y), ...]); non-finite points are dropped."""
    cleaned = [
        (name, [(float(x), float(y)) for x, y in points if _finite(x) and _finite(y)])
        for name, points in series
    ]
    cleaned = [(name, points) for name, points in cleaned if points]
    left, right, top, bottom = 56, 8, 8, 26
    if not cleaned:
        return (
            f'<svg class="chart" width="{width}" height="{height}" role="img">'
            '<text x="10" y="20">no data</text></svg>'
        )

    def tx(x: float) -> float:
        return math.log2(x) if log2_x and x > 0 else x

    xs = [tx(x) for _, points in cleaned for x, _ in points]
    ys = [y for _, points in cleaned for _, y in points]
    x_min, x_max = _padded(min(xs), max(xs), 1.0)
    y_min, y_max = y_range if y_range is not None else _padded(min(ys), max(ys), abs(min(ys)) * 0.1 or 1.0)
    plot_w, plot_h = width - left - right, height - top - bottom
    # Halves keep the spans finite for values near +-1.8e308 (a full span would overflow to inf and draw NaN).
    x_half_span, y_half_span = x_max / 2 - x_min / 2, y_max / 2 - y_min / 2

    def px(x: float) -> float:
        return left + (tx(x) / 2 - x_min / 2) / x_half_span * plot_w

    def py(y: float) -> float:
        return top + (1 - (y / 2 - y_min / 2) / y_half_span) * plot_h

    parts = [
        f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
    ]
    parts.append(
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fff" stroke="#d1d5db"/>'
    )
    for fraction in (0.25, 0.5, 0.75):
        y = top + fraction * plot_h
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#f1f5f9"/>')
    parts.append(
        f'<text class="tick" x="{left - 4}" y="{top + 8}" text-anchor="end">{esc(_fmt(y_max))}</text>'
    )
    parts.append(
        f'<text class="tick" x="{left - 4}" y="{top + plot_h}" text-anchor="end">{esc(_fmt(y_min))}</text>'
    )
    x_lo = 2**x_min if log2_x else x_min
    x_hi = 2**x_max if log2_x else x_max
    for tick in x_ticks or []:
        parts.append(
            f'<text class="tick" x="{px(tick):.1f}" y="{height - 12}" text-anchor="middle">'
            f"{esc(_fmt(tick))}</text>"
        )
    if not x_ticks:
        parts.append(f'<text class="tick" x="{left}" y="{height - 12}">{esc(_fmt(round(x_lo, 6)))}</text>')
        parts.append(
            f'<text class="tick" x="{left + plot_w}" y="{height - 12}" text-anchor="end">'
            f"{esc(_fmt(round(x_hi, 6)))}</text>"
        )
    parts.append(
        f'<text class="tick" x="{left + plot_w / 2:.1f}" y="{height - 2}" text-anchor="middle">'
        f"{esc(x_label)}</text>"
    )
    for index, (name, points) in enumerate(cleaned):
        colour = PALETTE[index % len(PALETTE)]
        coordinates = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{coordinates}">'
            f"<title>{esc(name)}</title></polyline>"
        )
        if len(points) == 1 or (markers if markers is not None else len(points) <= 40):  # a lone point: a dot
            for x, y in points:
                parts.append(
                    f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{colour}">'
                    f"<title>{esc(name)}: {esc(_fmt(x))} → {esc(_fmt(y))}</title></circle>"
                )
    parts.append("</svg>")
    return "".join(parts)


def _padded(low: float, high: float, pad: float) -> tuple[float, float]:
    """``(low, high)``, widened by ``pad`` on each side when equal, clamped to finite floats."""
    if high == low:
        low, high = low - pad, high + pad
    return max(low, -sys.float_info.max), min(high, sys.float_info.max)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _legend(names: Sequence[str]) -> str:
    return (
        '<div class="legend">'
        + "".join(
            f'<span><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{esc(name)}</span>'
            for i, name in enumerate(names)
        )
        + "</div>"
    )


# ----------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------

_KEY_METRICS = (
    "reward", "completions/mean_length", "completions/clipped_ratio", "entropy",
    "meds/mean_penalty", "meds/frac_penalized", "meds/max_cluster_size", "meds/clusters_per_key",
    "meds/top1_eigen_ratio", "meds/memory_rows",
    "cliff/agreement", "cliff/groups_cliff", "cliff/first_mistake_sentence", "cliff/prefix_fraction",
    "cliff/judge_calls",
)  # fmt: skip
"""Curves shown first (when logged); every other logged metric is under "All logged metrics"."""


def metric_series(log_history: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per metric name, its finite ``(step, value)`` points in log order (evaluation-only records skipped)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for record in log_history:
        step = record.get("step")
        if not _finite(step):
            continue
        for name, value in record.items():
            if name in ("step", "epoch") or name.startswith("eval_") or not _finite(value):
                continue
            series.setdefault(name, []).append((float(step), float(value)))
    return series


def _chart_grid(series: Mapping[str, list[tuple[float, float]]], names: Sequence[str]) -> str:
    cells = []
    for name in names:
        if name in series:
            cells.append(
                f'<figure class="metric"><figcaption>{esc(name)}</figcaption>'
                f"{svg_line_chart([(name, series[name])])}</figure>"
            )
    return '<div class="grid">' + "".join(cells) + "</div>" if cells else ""


def _no_metrics(data: RunData) -> str:
    return (
        f'<p class="empty">No logged metrics found (no {METRICS_NAME} and no checkpoint with '
        "trainer_state.json in "
        f"{esc(data.run_dir)}).</p>"
    )


def curves_section(data: RunData) -> str:
    """The key curves: reward (and per reward function), length, the main ``meds/`` and ``cliff/`` metrics."""
    series = metric_series(data.log_history)
    if not series:
        return f'<section id="curves"><h2>Training curves</h2>{_no_metrics(data)}</section>'
    names = [n for n in _KEY_METRICS if n in series]
    names[1:1] = sorted(n for n in series if n.startswith("rewards/") and n.endswith("/mean"))
    steps = sorted({step for points in series.values() for step, _ in points})
    return (
        f'<section id="curves"><h2>Training curves</h2><p class="note">{len(steps)} logged steps from '
        f"<code>{esc(data.log_source)}</code>; every other metric is under "
        f'<a href="#metrics">all logged metrics</a>.</p>{_chart_grid(series, names)}</section>'
    )


def all_metrics_section(data: RunData) -> str:
    """Every logged metric, grouped: general, ``meds/*``, ``cliff/*`` (collapsed)."""
    series = metric_series(data.log_history)
    if not series:
        return ""
    groups = [
        ("general", sorted(n for n in series if not n.startswith(("meds/", "cliff/")))),
        ("MEDS (meds/*)", sorted(n for n in series if n.startswith("meds/"))),
        ("Cliff (cliff/*)", sorted(n for n in series if n.startswith("cliff/"))),
    ]
    body = "".join(f"<h3>{esc(title)}</h3>{_chart_grid(series, names)}" for title, names in groups if names)
    return (
        f'<section id="metrics"><h2>All logged metrics</h2><details><summary>{len(series)} metrics</summary>'
        f"{body}</details></section>"
    )


@dataclass
class _Cluster:
    label: int
    is_correct: bool
    rows: list[int]
    steps: list[int | None]
    representatives: list[Any]  # RowSnippet | None


def _clusters_of(memory, key) -> list[_Cluster]:
    import numpy as np

    labels = memory.stored_labels(key)
    features = memory.stored_features(key)
    snippets = memory.stored_snippets(key)
    row_steps = [None if step < 0 else int(step) for step in memory.stored_steps(key).tolist()]
    clusters = []
    for label in sorted(set(labels.tolist())):
        rows = np.flatnonzero(labels == label)
        if label == -1:  # noise has no centre: show the newest rows
            order = rows[::-1]
        else:
            centre = features[rows].mean(axis=0)
            order = rows[np.argsort(-(features[rows] @ centre), kind="stable")]
        representatives = [snippets[i] for i in order if snippets[i] is not None][:3]
        clusters.append(
            _Cluster(
                label=int(label),
                is_correct=bool(key[1]),
                rows=rows.tolist(),
                steps=[row_steps[i] for i in rows],
                representatives=representatives,
            )
        )
    clusters.sort(key=lambda c: (c.label == -1, -len(c.rows)))
    return clusters


def _growth(steps: Sequence[int | None], all_steps: Sequence[int]) -> list[tuple[float, float]]:
    known = sorted(s for s in steps if s is not None)
    points, count, index = [], 0, 0
    for step in all_steps:
        while index < len(known) and known[index] <= step:
            count += 1
            index += 1
        points.append((float(step), float(count)))
    return points


def meds_section(data: RunData, max_prompts: int) -> str:
    memory = data.memory
    if memory is None:
        return ""
    prompts: dict[str, dict[bool, Any]] = {}
    memory_keys = memory.keys()
    for key in memory_keys:
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], bool):
            prompts.setdefault(str(key[0]), {})[key[1]] = key
        else:
            prompts.setdefault(str(key), {})[False] = key
    all_steps: set[int] = set()
    summaries = []
    for prompt, keys in prompts.items():
        clusters = [
            c
            for is_correct in (False, True)
            if is_correct in keys
            for c in _clusters_of(memory, keys[is_correct])
        ]
        for cluster in clusters:
            all_steps.update(s for s in cluster.steps if s is not None)
        wrong = [c for c in clusters if not c.is_correct and c.label != -1]
        right = [c for c in clusters if c.is_correct and c.label != -1]
        note = next((memory.note(k) for k in keys.values() if memory.note(k)), None)
        summaries.append(
            {
                "prompt": prompt,
                "note": note,
                "clusters": clusters,
                "largest_wrong": max((len(c.rows) for c in wrong), default=0),
                "largest": max((len(c.rows) for c in wrong + right), default=0),
                "rows": sum(len(c.rows) for c in clusters),
                "num_clusters": len(wrong) + len(right),
            }
        )
    summaries.sort(key=lambda s: (-s["largest_wrong"], -s["largest"], -s["rows"], s["prompt"]))
    shown = summaries[:max_prompts]
    steps_axis = sorted(all_steps)
    has_snippets = any(c.representatives for s in summaries for c in s["clusters"])
    out = [
        '<section id="meds"><h2>MEDS: error clusters per prompt</h2>',
        (
            f'<p class="note">Memory <code>{esc(data.memory_path)}</code>: {memory.num_rows} rows in '
            f"{memory.num_keys} "
            f"keys ({len(prompts)} prompts), config <code>{esc(json.dumps(memory.config()))}</code>. "
            "A cluster is a group of past completions of one prompt whose answer-token features "
            "HDBSCAN put together; MEDS penalises a new wrong completion by the size of the wrong "
            "cluster it falls into. Growth curves count the cluster's current rows by the step they "
            "came from; the completions shown are the stored snippets nearest the cluster's centre.</p>"
        ),
    ]
    from .meds.idle import explain_empty_memory

    why_empty = explain_empty_memory(
        data.log_history, memory.num_rows, sum(s["num_clusters"] for s in summaries)
    )
    if why_empty:
        out.append(f'<p class="empty" id="meds-empty">{esc(why_empty)}</p>')
    from .meds.preflight import MEDSVisitEstimate, meds_preflight_message

    estimate = next(
        (e for e in map(MEDSVisitEstimate.from_metrics, data.log_history) if e is not None), None
    )  # logged once, with the first step
    if estimate is not None:
        out.append(
            f'<p class="note" id="meds-preflight">At the start of training: {esc(meds_preflight_message(estimate))}</p>'
        )
    if not has_snippets:
        out.append(
            '<p class="empty">This memory has no completion snippets (saved with '
            "meds_store_snippets=False or by an "
            "older version): clusters are shown without their completions.</p>"
        )
    if len(shown) < len(summaries):
        out.append(
            f'<p class="note">Showing the {len(shown)} of {len(summaries)} prompts with the largest clusters '
            "(<code>--max_prompts</code>).</p>"
        )
    out.append(
        '<div class="controls">Sort prompts by <select id="meds-sort">'
        '<option value="largest_wrong">largest wrong cluster</option>'
        '<option value="largest">largest cluster (wrong or correct)</option>'
        '<option value="rows">stored completions</option>'
        '<option value="clusters">number of clusters</option>'
        '<option value="prompt">prompt</option></select></div><div id="meds-prompts">'
    )
    for summary in shown:
        out.append(_prompt_block(summary, steps_axis))
    out.append("</div></section>")
    return "".join(out)


def _prompt_block(summary: Mapping[str, Any], steps_axis: Sequence[int]) -> str:
    title = summary["note"] or f"prompt {summary['prompt']}"
    attributes = (
        f'data-largest_wrong="{summary["largest_wrong"]}" data-largest="{summary["largest"]}" '
        f'data-rows="{summary["rows"]}" data-clusters="{summary["num_clusters"]}" data-prompt="{esc(title)}"'
    )
    out = [
        (
            f'<details class="prompt" {attributes}><summary><span class="ptitle">{esc(title)}</span>'
            f'<span class="badges"><b class="wrong">largest wrong cluster {summary["largest_wrong"]}</b>'
            f"<b>{summary['num_clusters']} clusters</b><b>{summary['rows']} stored</b></span></summary>"
        ),
        (
            f'<p class="note">prompt key <code>{esc(summary["prompt"])}</code></p>'
            '<table class="clusters"><thead><tr><th>key</th><th>cluster</th><th>size</th>'
            "<th>size over steps</th><th>representative completions</th>"
            "</tr></thead><tbody>"
        ),
    ]
    for cluster in summary["clusters"][:12]:
        kind = (
            '<span class="tag ok">correct</span>'
            if cluster.is_correct
            else '<span class="tag bad">wrong</span>'
        )
        name = "noise" if cluster.label == -1 else f"#{cluster.label}"
        growth = (
            svg_line_chart(
                [("rows", _growth(cluster.steps, steps_axis))], width=170, height=70, markers=False
            )
            if steps_axis
            else '<span class="empty">no step recorded</span>'
        )
        snippets = (
            "".join(
                f'<div class="snippet"><span class="meta">step {s.step} · sample {s.sample}</span>'
                f"<pre>{esc(s.text)}</pre></div>"
                for s in cluster.representatives
            )
            or '<span class="empty">no snippet stored</span>'
        )
        out.append(
            f'<tr><td>{kind}</td><td>{name}</td><td class="num">{len(cluster.rows)}</td><td>{growth}</td>'
            f"<td>{snippets}</td></tr>"
        )
    if len(summary["clusters"]) > 12:
        out.append(
            f'<tr><td colspan="5" class="note">{len(summary["clusters"]) - 12} smaller clusters not shown'
            "</td></tr>"
        )
    out.append("</tbody></table></details>")
    return "".join(out)


def _rollout_text(record: Mapping[str, Any]) -> str:
    """The completion with its sentences coloured: correct prefix, first mistake, incorrect suffix."""
    agentic = agentic_rollout_html(record)  # tool-calling rollouts: calls and environment replies set apart
    if agentic is not None:
        return agentic
    text = str(record.get("completion") or "")
    spans = [(int(a), int(b)) for a, b in record.get("sentences") or [] if 0 <= int(a) <= int(b) <= len(text)]
    mistake = record.get("first_mistake")
    located = record.get("agreed") is True and mistake is not None
    out, cursor = [], 0
    for index, (start, end) in enumerate(spans):
        if start < cursor:
            continue
        out.append(_isolated(text[cursor:start]))
        if not located:
            kind = "plain"
        elif index < mistake:
            kind = "prefix"
        elif index == mistake:
            kind = "mistake"
        else:
            kind = "suffix"
        unit = text[start:end]
        body = unit.rstrip("\n")  # a line break inside the box would draw its outline on the next line too
        out.append(
            f'<span class="s {kind}"><sup>[{index}]</sup>{esc(body)}</span>{_isolated(unit[len(body) :])}'
        )
        cursor = end
    out.append(_isolated(text[cursor:]))
    return "".join(out)


def _isolated(text: str) -> str:
    """Run text between our own markup, escaped and bidi-isolated (an unclosed U+202E stays inside)."""
    return f"<bdi>{esc(text)}</bdi>" if text else ""


def _mistake_line(record: Mapping[str, Any]) -> str:
    """Code rollouts: ``: `<the mistaken line>``` for the verdict label; empty on math or when unknown."""
    if record.get("domain") != "code":
        return ""
    text = str(record.get("completion") or "")
    spans = record.get("sentences") or []
    mistake = record.get("first_mistake")
    if not isinstance(mistake, int) or not 0 <= mistake < len(spans):
        return ""
    start, end = (int(v) for v in spans[mistake])
    lines = [
        line for line in text[start:end].splitlines() if line.strip() and not line.lstrip().startswith("```")
    ]
    return f": {lines[0].strip()[:80]}" if lines else ""


def _verdict(record: Mapping[str, Any]) -> tuple[str, str]:
    """(filter class, label) of how the trainer decided this wrong rollout."""
    source = record.get("source")
    if source == "truncated":
        return "truncated", "truncated: p(a) = 0 without a teacher call"
    if source == "unverified":
        return "unverified", "no verified reference: plain GRPO"
    if record.get("group_mode") not in (None, "cliff"):
        return "fallback", f"group fell back to GRPO ({record.get('group_mode')})"
    agreed = record.get("agreed")
    if agreed is True:
        cached = " (cached judgment)" if source == "cached" else ""
        unit = "unit" if record.get("domain") == "code" else "sentence"
        where = f"{unit} {record.get('first_mistake')}{_mistake_line(record)}"
        if is_agentic_record(record):
            where = mistake_label(record)
        return "agree", f"first mistake at {where}{cached}"
    if agreed is False:
        return "disagree", "teacher found no mistake in a verifier-wrong rollout (disagreement): p(a) = 0"
    statuses = ", ".join(record.get("teacher_statuses") or []) or "none"
    return "malformed", f"no usable teacher answer ({statuses}): p(a) = 0"


def cliff_section(data: RunData, max_rollouts: int) -> str:
    if not data.rollouts and data.cliff_state is None:
        return ""
    out = ['<section id="cliff"><h2>Cliff: judged rollouts and their first mistakes</h2>']
    usable = [r for r in data.rollouts if r.get("agreed") is not None]
    agree = sum(1 for r in usable if r["agreed"])
    counts: dict[str, int] = {}
    for record in data.rollouts:
        counts[_verdict(record)[0]] = counts.get(_verdict(record)[0], 0) + 1
    if data.rollouts:
        steps = sorted({int(r["step"]) for r in data.rollouts})
        share = f"{100 * agree / len(usable):.1f} %" if usable else "n/a"
        out.append(
            f'<p class="note"><code>{esc(data.rollouts_path)}</code>: {len(data.rollouts)} logged '
            f"wrong rollouts from {len(steps)} steps. Teacher–verifier agreement on the judged (or "
            f"cached) ones: <b>{share}</b> ({agree} of {len(usable)} rollouts the verifier marks wrong, "
            "the teacher located a mistake in; the paper reports "
            "85–90 %). Sentences are numbered as the teacher saw them (code rollouts: each sentence of the "
            "explanation and each non-blank program line is one unit; the failing test the judge saw is shown "
            "under the program).</p>"
        )
    else:
        out.append('<p class="empty">No cliff_rollouts.jsonl in the run (cliff_log_rollouts=0?).</p>')
    if data.cliff_state is not None:
        judgments = data.cliff_state.get("judgments", {})
        cached_agree = sum(1 for j in judgments.values() if j.get("agreed") is True)
        out.append(
            f'<p class="note">Caches in <code>{esc(data.cliff_state_path)}</code>: '
            f"{len(data.cliff_state.get('references', {}))} verified reference solutions, "
            f"{len(judgments)} judgments "
            f"({cached_agree} with a located mistake).</p>"
        )
    out.append(
        '<p class="legend"><span class="s prefix">correct prefix (before the first mistake)</span> '
        '<span class="s mistake">first mistake</span> <span class="s suffix">incorrect suffix</span> '
        '<span class="s plain">not located</span></p>'
    )
    labels = {
        "agree": "mistake located", "disagree": "disagreement", "truncated": "truncated",
        "malformed": "unusable answer", "unverified": "no verified reference", "fallback": "fallback",
    }  # fmt: skip
    options = "".join(
        f'<option value="{kind}">{esc(label)} ({counts[kind]})</option>'
        for kind, label in labels.items()
        if kind in counts
    )
    out.append(
        '<div class="controls">Show <select id="cliff-filter">'
        f'<option value="all">all ({len(data.rollouts)})</option>'
        f'{options}</select></div><div id="cliff-rollouts">'
    )
    newest_first = sorted(data.rollouts, key=lambda r: (-int(r["step"]), int(r["sample"])))[:max_rollouts]
    for record in newest_first:
        out.append(_rollout_block(record))
    out.append("</div>")
    if len(newest_first) < len(data.rollouts):
        out.append(
            f'<p class="note">The newest {len(newest_first)} of {len(data.rollouts)} rollouts are shown '
            "(<code>--max_rollouts</code>).</p>"
        )
    out.append("</section>")
    return "".join(out)


def _rollout_block(record: Mapping[str, Any]) -> str:
    kind, label = _verdict(record)
    raw_answers = record.get("teacher_raw") or []
    statuses = record.get("teacher_statuses") or []
    teacher = (
        "".join(
            f'<div class="raw"><span class="meta">teacher answer {i + 1}'
            f"{' · ' + esc(statuses[i]) if i < len(statuses) else ''}</span><pre>{esc(raw)}</pre></div>"
            for i, raw in enumerate(raw_answers)
        )
        or f'<p class="note">No teacher call for this rollout ({esc(record.get("source"))}).</p>'
    )
    reference = record.get("reference")
    code = record.get("domain") == "code"
    reference_html = (
        f"<details><summary>reference {'program' if code else 'solution'} (teacher, verified)</summary>"
        f"<pre>{esc(reference)}</pre></details>"
        if reference
        else ""
    )
    if code:  # the failing test the judge saw, and the tests themselves (long: collapsed)
        execution = record.get("execution")
        if execution:
            reference_html = (
                '<div class="execution"><span class="meta">running the program (what the judge saw)</span>'
                f"<pre>{esc(execution)}</pre></div>{reference_html}"
            )
        return (
            f'<article class="rollout" data-kind="{kind}"><header><b>step {esc(record.get("step"))}</b> · sample '
            f'{esc(record.get("sample"))} · code · <span class="tag {"ok" if kind == "agree" else "bad"}">'
            f"{esc(label)}</span></header>"
            f'<p class="problem"><b>Problem:</b> {esc(record.get("problem"))}</p>'
            f'<div class="completion code">{_rollout_text(record)}</div>{reference_html}{teacher}'
            f"<details><summary>tests</summary><pre>{esc(record.get('ground_truth'))}</pre></details></article>"
        )
    return (
        f'<article class="rollout" data-kind="{kind}"><header><b>step {esc(record.get("step"))}</b> · sample '
        f'{esc(record.get("sample"))} · <span class="tag {"ok" if kind == "agree" else "bad"}">'
        f"{esc(label)}</span></header>"
        f'<p class="problem"><b>Problem:</b> <bdi>{esc(record.get("problem"))}</bdi> <span class="meta">ground truth '
        f"<code>{esc(record.get('ground_truth'))}</code></span></p>"
        f'<div class="completion">{_rollout_text(record)}</div>{teacher}{reference_html}</article>'
    )


_EVAL_FLAGS_FROM_TRAINING = ("--prompt_template", "--problem_column", "--answer_column")


def eval_command_hint(run_dir: Path) -> str:
    """The ``hf-meds-cliff eval`` command for a run without an eval summary, with the run's own prompt template and
    dataset columns, read from the reproduce command in its model card (``README.md``). The toy world is evaluated
    on the ``toy`` benchmark; any other dataset on its held-out split, which the user names.

    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp())
    >>> _ = (run / "README.md").write_text("### Reproduce\\n\\n```bash\\nhf-meds-cliff grpo --dataset_name "
    ...     "data/train.jsonl --prompt_template one_shot_boxed\\n```\\n")
    >>> eval_command_hint(run).split(" --")[2:4]
    ['benchmarks HELD_OUT_SPLIT_OF_data/train.jsonl', 'prompt_template one_shot_boxed']
    """
    flags: dict[str, str] = {}
    try:
        card = (run_dir / "README.md").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        card = ""
    block = re.search(r"### Reproduce\s*```bash\n(.*?)\n```", card, re.DOTALL)
    try:
        words = shlex.split(block.group(1)) if block else []
    except ValueError:  # an edited card: fall back to the defaults
        words = []
    for flag, value in itertools.pairwise(words):
        if flag.startswith("--"):
            flags.setdefault(flag, value)
    dataset = flags.get("--dataset_name", "toy")
    code = flags.get("--domain") == "code"
    benchmark = "toy" if dataset == "toy" and not code else f"HELD_OUT_SPLIT_OF_{dataset}"
    parts = ["hf-meds-cliff eval --model_name_or_path", shlex.quote(str(run_dir)), "--benchmarks", benchmark]
    if benchmark != "toy":  # the toy prompts are used as they are
        parts += [f"{flag} {shlex.quote(flags[flag])}" for flag in _EVAL_FLAGS_FROM_TRAINING if flag in flags]
    return " ".join([*parts, "--output_dir", shlex.quote(str(run_dir / "eval"))])


def eval_section(data: RunData) -> str:
    if not data.eval_summaries:
        return (
            '<section id="passk"><h2>pass@k</h2><p class="empty">No eval summary in or next to the run. '
            f"Evaluate it with <code>{esc(eval_command_hint(data.run_dir))}</code> and render the report again."
            "</p></section>"
        )
    out = ['<section id="passk"><h2>pass@k</h2>']
    curves = []
    for path, summary in data.eval_summaries:
        name = str(summary.get("model") or path.parent.name)
        blocks = dict(summary["benchmarks"])
        if "average" in summary:
            blocks["average"] = summary["average"]
        ks = sorted({int(k) for block in blocks.values() for k in block.get("pass@k", {})})
        settings = summary.get("settings", {})
        out.append(
            f'<h3>{esc(name)}</h3><p class="note"><code>{esc(path)}</code> · '
            f"n = {esc(settings.get('num_samples'))}, temperature {esc(settings.get('temperature'))}</p>"
            '<table class="passk"><thead><tr><th>benchmark</th>'
            + "".join(f"<th>pass@{k}</th>" for k in ks)
            + "<th>mean@n</th><th>maj@n</th></tr></thead><tbody>"
        )
        for benchmark, block in blocks.items():
            cells = "".join(
                f'<td class="num">{100 * block["pass@k"][str(k)]:.1f}</td>'
                if str(k) in block.get("pass@k", {})
                else "<td></td>"
                for k in ks
            )
            out.append(
                f'<tr><td>{esc(benchmark)}</td>{cells}<td class="num">{_percent(block.get("mean@n"))}</td>'
                f'<td class="num">{_percent(block.get("maj@n"))}</td></tr>'
            )
        out.append("</tbody></table>")
        main_block = blocks.get("average") or next(iter(blocks.values()))
        curves.append(
            (
                name,
                [
                    (float(k), 100 * float(v))
                    for k, v in sorted(main_block.get("pass@k", {}).items(), key=lambda kv: int(kv[0]))
                ],
            )
        )
    out.append(
        '<figure class="metric wide"><figcaption>pass@k (%) against k (average over benchmarks when several)'
        "</figcaption>"
        + svg_line_chart(
            curves,
            width=460,
            height=220,
            x_label="k (log scale)",
            log2_x=True,
            y_range=(0.0, 100.0),
            x_ticks=sorted({k for _, points in curves for k, _ in points}),
        )
        + f"{_legend([name for name, _ in curves])}</figure></section>"
    )
    return "".join(out)


def _percent(value: Any) -> str:
    return f"{100 * float(value):.1f}" if _finite(value) else ""


# ----------------------------------------------------------------------------------------------------
# The page
# ----------------------------------------------------------------------------------------------------

_CSS = """
:root { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #111827; background: #f8fafc; }
body { margin: 0 auto; max-width: 1240px; padding: 16px 24px 48px; overflow-wrap: anywhere; }
bdi, code, pre, td, th, figcaption, summary, .ptitle, .s, .legend span, .skipped li { unicode-bidi: isolate; }
.skipped { background: #fffbeb; border: 1px solid #fde68a; border-radius: 6px; padding: 6px 12px; font-size: 13px; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 2px solid #e5e7eb; }
h3 { font-size: 15px; margin: 16px 0 6px; color: #374151; }
nav a { margin-right: 14px; }
code { background: #eef2f7; padding: 0 3px; border-radius: 3px; font-size: 12px; }
.note { color: #4b5563; font-size: 13px; } .empty { color: #92400e; font-size: 13px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(280px, 1fr)); gap: 10px; }
svg.chart { width: 100%; height: auto; display: block; }
figure.metric { margin: 0; background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px; }
figure.metric.wide { max-width: 520px; }
figure.metric figcaption { font-size: 12px; color: #374151; margin-bottom: 2px; }
svg.chart text.tick { font-size: 10px; fill: #6b7280; }
.legend span { margin-right: 12px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 10px;
  margin-right: 4px; border-radius: 2px; }
.controls { margin: 8px 0; font-size: 13px; }
details.prompt { background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; margin: 6px 0;
  padding: 6px 10px; }
details.prompt > summary { cursor: pointer; display: flex; justify-content: space-between; gap: 12px; }
.ptitle { font-family: ui-monospace, monospace; font-size: 13px; }
.badges b { font-weight: 500; font-size: 12px; background: #f1f5f9; border-radius: 10px; padding: 1px 8px;
  margin-left: 4px; } .badges b.wrong { background: #fee2e2; color: #991b1b; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #e5e7eb; padding: 4px 6px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.passk { width: auto; margin-bottom: 10px; } table.passk td, table.passk th { padding: 3px 10px; }
.snippet { margin-bottom: 4px; } .meta { color: #6b7280; font-size: 11px; }
pre { margin: 2px 0; white-space: pre-wrap; word-break: break-word; font-size: 12px; background: #f8fafc;
  border: 1px solid #eef2f7; padding: 4px 6px; border-radius: 4px; }
.tag { font-size: 11px; padding: 1px 7px; border-radius: 9px; }
.tag.ok { background: #dcfce7; color: #166534; }
.tag.bad { background: #fee2e2; color: #991b1b; }
article.rollout { background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; margin: 8px 0;
  padding: 8px 12px; }
article.rollout header { font-size: 13px; } .problem { font-size: 13px; margin: 4px 0; }
.completion { font-family: ui-monospace, monospace; font-size: 13px; line-height: 1.9;
  white-space: pre-wrap; }
.s { border-radius: 3px; padding: 1px 2px; } .s sup { font-size: 9px; color: #6b7280; margin-right: 2px; }
.s.prefix { background: #dcfce7; } .s.suffix { background: #fee2e2; }
.s.mistake { background: #fca5a5; outline: 2px solid #b91c1c; font-weight: 600; }
.s.plain { background: #f1f5f9; }
.completion.code { line-height: 1.5; } .completion.code .s { display: inline; }
.completion.code .s sup { display: inline-block; min-width: 2.6em; font-size: 10px; vertical-align: baseline; }
.execution pre { background: #fef2f2; border-color: #fecaca; }
.clusters svg.chart { width: 170px; }
.raw pre { background: #fffbeb; border-color: #fde68a; }
article.rollout details summary { font-size: 12px; color: #374151; cursor: pointer; }
"""

_SCRIPT = """
(function () {
  var sorter = document.getElementById("meds-sort");
  if (sorter) {
    sorter.addEventListener("change", function () {
      var box = document.getElementById("meds-prompts");
      var key = sorter.value;
      var items = Array.prototype.slice.call(box.children);
      items.sort(function (a, b) {
        if (key === "prompt") { return a.dataset.prompt.localeCompare(b.dataset.prompt); }
        return Number(b.dataset[key]) - Number(a.dataset[key]);
      });
      items.forEach(function (item) { box.appendChild(item); });
    });
  }
  var filter = document.getElementById("cliff-filter");
  if (filter) {
    filter.addEventListener("change", function () {
      var items = document.querySelectorAll("#cliff-rollouts article.rollout");
      for (var i = 0; i < items.length; i++) {
        items[i].hidden = filter.value !== "all" && items[i].dataset.kind !== filter.value;
      }
    });
  }
  // A fragment such as #meds-sort=rows&cliff-filter=disagree presets the controls (for links and tests).
  location.hash.slice(1).split("&").forEach(function (pair) {
    var parts = pair.split("=");
    var control = parts.length === 2 ? document.getElementById(parts[0]) : null;
    if (control && control.tagName === "SELECT") {
      control.value = decodeURIComponent(parts[1]);
      control.dispatchEvent(new Event("change"));
    }
  });
  var first = document.querySelector("details.prompt");
  if (first) { first.open = true; }
  document.documentElement.setAttribute("__READY__", "1");
})();
""".replace("__READY__", READY_ATTRIBUTE)


def skipped_section(data: RunData) -> str:
    """What could not be read and was left out: per file, the number of records and the first reasons."""
    if not data.skipped:
        return ""
    total = sum(len(reasons) for reasons in data.skipped.values())
    items = []
    for path, reasons in data.skipped.items():
        shown = "; ".join(reasons[:5]) + (f"; and {len(reasons) - 5} more" if len(reasons) > 5 else "")
        items.append(f"<li><code>{esc(path)}</code>: {len(reasons)} skipped ({esc(shown)})</li>")
    return (
        f'<section id="skipped" class="skipped"><b>Skipped while reading the run: {total} '
        f"record{'s' if total != 1 else ''}</b> (damaged or unreadable; the rest of the report is shown)"
        f"<ul>{''.join(items)}</ul></section>"
    )


def render_report(data: RunData, *, max_prompts: int = 50, max_rollouts: int = 60) -> str:
    """The report's HTML (a complete, self-contained document)."""
    from . import __version__
    from .report_collapse import collapse_section

    collapse = collapse_section(metric_series(data.log_history), _chart_grid)
    sections = [
        skipped_section(data),
        curves_section(data),
        collapse,
        meds_section(data, max_prompts),
        cliff_section(data, max_rollouts),
        judge_eval_section(data),
        eval_section(data),
        all_metrics_section(data),
    ]
    nav = [("curves", "Curves")]
    if collapse:
        nav.append(("collapse", "Error collapse"))
    if data.memory is not None:
        nav.append(("meds", "MEDS clusters"))
    if data.rollouts or data.cliff_state is not None:
        nav.append(("cliff", "Cliff rollouts"))
    if data.judge_evals:
        nav.append(("judge-eval", "Teacher calibration"))
    nav += [("passk", "pass@k"), ("metrics", "All metrics")]
    generated = _datetime.datetime.now(_datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(data.run_dir.name)} · hf-meds-cliff report</title><style>{_CSS}{AGENTIC_CSS}</style></head><body>"
        f"<h1>{esc(data.method)} run <code>{esc(data.run_dir)}</code></h1>"
        f'<p class="note">hf-meds-cliff {esc(__version__)} report, generated {generated}. '
        "Static and offline: open "
        "it in any browser.</p><nav>"
        + "".join(f'<a href="#{anchor}">{esc(label)}</a>' for anchor, label in nav)
        + "</nav>"
        + "".join(sections)
        + f"<script>{_SCRIPT}</script></body></html>\n"
    )


def write_report(
    run_dir: str | os.PathLike,
    output: str | os.PathLike | None = None,
    *,
    eval_dirs: Iterable[str | os.PathLike] = (),
    max_prompts: int = 50,
    max_rollouts: int = 60,
) -> Path:
    """Read ``run_dir`` and write its report (default ``run_dir/report.html``); returns the path."""
    if max_prompts < 1 or max_rollouts < 1:
        raise ValueError(f"max_prompts={max_prompts} and max_rollouts={max_rollouts} must be >= 1.")
    data = collect_run(run_dir, eval_dirs)
    path = Path(output) if output is not None else data.run_dir / REPORT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(data, max_prompts=max_prompts, max_rollouts=max_rollouts), encoding="utf-8")
    return path
