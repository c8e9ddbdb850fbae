"""The report's view of a judged tool-calling rollout (``cliff_rollouts.jsonl``): tool calls and the environment's
replies set apart, the first wrong action marked.

A tool-calling rollout is logged as the transcript the teacher saw (:mod:`hf_meds_cliff.cliff.agentic`): one unit
per line, a tool call as ``[tool call] name {arguments}`` and the environment's replies indented under it as
``[environment: name] ...``. :func:`agentic_rollout_html` draws each unit (sentence or tool call) numbered, coloured
by its place relative to the first mistake, and each environment reply in a box of its own, unnumbered.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from .cliff.agentic import ENVIRONMENT_MARKER, TOOL_CALL_MARKER, is_agentic_units

__all__ = ["AGENTIC_CSS", "agentic_rollout_html", "is_agentic_record", "mistake_label"]

AGENTIC_CSS = """
.agentic .unit { display: block; margin: 2px 0; }
.agentic .call { font-family: ui-monospace, monospace; }
.agentic .call::before { content: "tool call "; color: #6b7280; font-size: 11px; }
.agentic .env { display: block; margin: 2px 0 6px 24px; padding: 2px 6px; border-left: 3px solid #9ca3af;
  background: #f3f4f6; color: #374151; font-family: ui-monospace, monospace; font-size: 12px; }
.agentic .env::before { content: "environment (context, no advantage) "; color: #6b7280; font-size: 11px; }
"""
"""Styles of the agentic view, added to the report's own."""


def _esc(value: Any) -> str:
    return f"<bdi>{html.escape(str(value), quote=True)}</bdi>"


def _units(record: Mapping[str, Any]) -> list[str]:
    text = str(record.get("completion") or "")
    return [
        text[int(start) : int(end)]
        for start, end in record.get("sentences") or []
        if 0 <= int(start) <= int(end) <= len(text)
    ]


def is_agentic_record(record: Mapping[str, Any]) -> bool:
    """Whether a logged rollout is a tool-calling one (one of its units is a tool call)."""
    return is_agentic_units(_units(record))


def mistake_label(record: Mapping[str, Any]) -> str:
    """``unit N (tool call: name)`` or ``unit N (sentence)`` for the verdict line of a tool-calling rollout."""
    units = _units(record)
    mistake = record.get("first_mistake")
    if not isinstance(mistake, int) or not 0 <= mistake < len(units):
        return f"unit {mistake}"
    unit = units[mistake].strip()
    if unit.startswith(TOOL_CALL_MARKER):
        name = unit[len(TOOL_CALL_MARKER) :].split(" ", 1)[0]
        return f"unit {mistake} (wrong action: tool call {name})"
    return f"unit {mistake} (sentence)"


def agentic_rollout_html(record: Mapping[str, Any]) -> str | None:
    """HTML of a logged tool-calling rollout; ``None`` when the record is not one (the report draws it as usual)."""
    units = _units(record)
    if not is_agentic_units(units):
        return None
    mistake = record.get("first_mistake")
    located = record.get("agreed") is True and isinstance(mistake, int)
    out = ['<div class="agentic">']
    for index, unit in enumerate(units):
        lines = unit.rstrip("\n").split("\n")
        own = [line for line in lines if not line.lstrip().startswith(ENVIRONMENT_MARKER)]
        replies = [line.strip() for line in lines if line.lstrip().startswith(ENVIRONMENT_MARKER)]
        if not located:
            kind = "plain"
        elif index < mistake:
            kind = "prefix"
        elif index == mistake:
            kind = "mistake"
        else:
            kind = "suffix"
        body = "\n".join(own).strip()
        is_call = body.startswith(TOOL_CALL_MARKER)
        if is_call:
            body = body[len(TOOL_CALL_MARKER) :]
        title = ' title="first wrong action"' if kind == "mistake" and is_call else ""
        out.append(
            f'<span class="s unit {kind}{" call" if is_call else ""}"{title}><sup>[{index}]</sup>{_esc(body)}</span>'
        )
        for reply in replies:
            name, _, content = reply[len(ENVIRONMENT_MARKER) :].partition("] ")
            out.append(f'<span class="env">{_esc(f"{name}: {content}")}</span>')
    out.append("</div>")
    return "".join(out)
