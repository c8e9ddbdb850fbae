"""The report's error-collapse section: the ``collapse/*`` metrics of :class:`~hf_meds_cliff.ErrorCollapseCallback`.

Kept apart from :mod:`hf_meds_cliff.report` (which calls it and hands it its chart helper, so this module imports
nothing of the report's).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence

__all__ = ["COLLAPSE_CURVES", "collapse_section"]

COLLAPSE_CURVES = (
    "collapse/distinct_wrong_answers", "collapse/window/distinct_wrong_answers",
    "collapse/top_wrong_share", "collapse/window/top_wrong_share",
    "collapse/wrong_answer_entropy", "collapse/window/wrong_answer_entropy",
    "collapse/wrong_rollouts", "collapse/cluster_concentration",
)  # fmt: skip
"""The curves shown, in order, when logged."""

_READING = (
    "Per prompt with at least one wrong rollout: distinct wrong final answers, the share of its wrong rollouts "
    "giving its most frequent wrong answer, and the entropy (nats) of its wrong answers, averaged over prompts; "
    "<code>window/</code> pools the last training batches per prompt. Fewer distinct wrong answers is expected "
    "when problems become solved (fewer wrong rollouts): read them beside <code>wrong_rollouts</code> and the shares "
    "before calling a run collapsed. <code>cluster_concentration</code> (MEDS runs): share of a prompt's stored "
    "wrong completions in its largest error-memory cluster."
)


def _first_last(points: Sequence[tuple[float, float]]) -> str:
    finite = [(step, value) for step, value in points if math.isfinite(value)]
    if not finite:
        return "<td>–</td><td>–</td>"
    (first_step, first), (last_step, last) = finite[0], finite[-1]
    return f"<td>{first:.3g} (step {first_step:g})</td><td>{last:.3g} (step {last_step:g})</td>"


def collapse_section(
    series: Mapping[str, Sequence[tuple[float, float]]], chart_grid: Callable[[Mapping, Sequence[str]], str]
) -> str:
    """HTML of the section, or "" when the run logged no ``collapse/`` metric.

    Args:
        series: per metric name its ``(step, value)`` points (``hf_meds_cliff.report.metric_series``).
        chart_grid: draws a grid of charts of ``series`` for the given names (the report's own helper).
    """
    names = [name for name in COLLAPSE_CURVES if name in series]
    if not names:
        return ""
    rows = "".join(
        f"<tr><td><code>{html.escape(name)}</code></td>{_first_last(series[name])}</tr>" for name in names
    )
    return (
        '<section id="collapse"><h2>Error collapse</h2>'
        f'<p class="note">{_READING}</p>'
        '<table class="clusters"><thead><tr><th>metric</th><th>first logged</th><th>last logged</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>{chart_grid(series, names)}</section>"
    )
