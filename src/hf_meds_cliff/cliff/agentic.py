"""Cliff on tool-calling rollouts: the units a teacher can point at, and their first tokens.

A multi-turn rollout of TRL's ``GRPOTrainer`` (``tools=`` or ``environment_factory=``) interleaves the policy's
turns (prose, then tool calls) with the environment's replies. The teacher numbers **units**:

- each sentence of an assistant turn's prose (:func:`~hf_meds_cliff.cliff.split_sentences`, or
  :func:`~hf_meds_cliff.cliff.split_code_units` on code);
- each tool call, its name and arguments together, as one unit, shown as ``[tool call] name {json arguments}``.

The environment's replies are shown under the call they answer, labelled ``[environment: name]``: context for
the teacher, never a unit of their own, so the first mistake is always one of the policy's sentences or actions
(a wrong tool, wrong arguments, or a sentence that acts on a tool result wrongly). Each unit starts at a token
(the first token whose text reaches the unit's first character; a turn's first unit starts at the turn's first
token), and the incorrect suffix of eq. 4/5 starts at the first mistaken unit's token. Tool-output tokens get no
advantage and stay out of the baseline ``b``: :func:`agentic_token_advantages` uses TRL's ``tool_mask``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..agentic import (
    ENVIRONMENT_MARKER,
    TOOL_CALL_MARKER,
    assistant_runs,
    format_tool_call,
    parse_tool_call_unit,
    policy_token_mask,
)
from ..sentences import split_sentences

if TYPE_CHECKING:
    import torch

__all__ = [
    "ENVIRONMENT_MARKER",
    "TOOL_CALL_MARKER",
    "AgenticRollout",
    "AgenticSplit",
    "agentic_token_advantages",
    "format_tool_call",
    "is_agentic_units",
    "parse_tool_call_unit",
    "split_agentic_rollout",
]

_DECODE = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}


def is_agentic_units(units: Sequence[str]) -> bool:
    """Whether a rollout's units come from a tool-calling rollout (one of them is a tool call).

    The judge prompt switches to its agentic form on this; a rollout of a tool-using run that called no tool is
    judged as the single-turn text it is.
    """
    return any(isinstance(unit, str) and unit.lstrip().startswith(TOOL_CALL_MARKER) for unit in units)


@dataclass
class AgenticRollout:
    """One tool-calling rollout as the teacher sees it, and where each unit starts in the completion's tokens.

    Attributes:
        transcript: the text the teacher gets (units one per line; environment replies indented under their call).
        spans: character spans of the units in ``transcript``; they cover it exactly, in order (an environment
            reply belongs to the span of the call it answers, so it is shown but is never a unit).
        kinds: per unit, ``"sentence"`` or ``"tool_call"``.
        token_starts: per unit, the completion-token index where it starts (non-decreasing; always a policy token).
        turns: per unit, the index of the assistant turn it belongs to.
    """

    transcript: str
    spans: list[tuple[int, int]] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    token_starts: list[int] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)

    @property
    def units(self) -> list[str]:
        return [self.transcript[start:end] for start, end in self.spans]


def _tool_call_starts(text: str, calls: Sequence[tuple[str, Any]], search_from: int) -> list[int]:
    """Character positions where each tool call starts in an assistant turn's decoded ``text``.

    The first call starts at the first non-blank character after the prose; each later one at the next
    occurrence of the markup that opened the first (e.g. Qwen's ``<tool_call>``), found after the previous call's
    name; a template without such markup falls back to the position of the call's name.
    """
    starts: list[int] = []
    position = search_from
    while position < len(text) and text[position].isspace():
        position += 1
    first_start = position
    opener = ""
    previous_name_at = search_from
    for index, (name, _arguments) in enumerate(calls):
        name_at = text.find(json.dumps(name), previous_name_at)
        if name_at == -1:
            name_at = text.find(name, previous_name_at)
        if index == 0:
            starts.append(min(first_start, name_at) if name_at != -1 else first_start)
            opener = text[first_start:name_at].strip() if name_at != -1 else ""
        else:
            opener_at = text.find(opener, previous_name_at) if opener else -1
            if opener_at != -1 and (name_at == -1 or opener_at <= name_at):
                starts.append(opener_at)
            elif name_at != -1:
                starts.append(name_at)
            else:
                starts.append(starts[-1])
        if name_at != -1:
            previous_name_at = name_at + len(name)
    return starts


def split_agentic_rollout(
    tokenizer: Any,
    completion_ids: Sequence[int],
    tool_mask: Sequence[int],
    messages: Sequence[dict] | None,
    split_prose: Callable[[str], list[tuple[int, int]]] = split_sentences,
) -> AgenticRollout:
    """The units of one tool-calling rollout and the token where each starts.

    Args:
        tokenizer: the policy's tokenizer (only ``decode`` is used).
        completion_ids: the completion's token ids, tool output included (TRL's ``completion_ids``), no padding.
        tool_mask: TRL's tool mask of the same tokens (1: the policy's, 0: tool output).
        messages: TRL's parsed completion (``[assistant, tool, ..., assistant]`` messages); the assistant messages
            give each turn's prose (``content``) and tool calls (``tool_calls``), the tool messages the environment
            replies shown to the teacher. ``None`` or a string (no parsed messages): each turn is prose only.
        split_prose: the unit splitter of a turn's prose (sentences on math, sentences and program lines on code).

    Returns:
        An :class:`AgenticRollout`. A turn whose message does not match its tokens (a truncated turn the parser
        dropped) is read as prose decoded from its tokens.
    """
    ids = [int(t) for t in completion_ids]
    if len(tool_mask) < len(ids):
        raise ValueError(
            f"tool_mask has {len(tool_mask)} entries for {len(ids)} completion tokens; pass the rollout's own mask."
        )
    runs = assistant_runs(tool_mask, len(ids))
    message_list = [m for m in messages if isinstance(m, dict)] if isinstance(messages, Sequence) else []
    turns: list[list[dict]] = []  # per assistant message, the tool messages that answer it
    assistants: list[dict] = []
    for message in message_list:
        if message.get("role") == "assistant":
            assistants.append(message)
            turns.append([])
        elif message.get("role") == "tool" and turns:
            turns[-1].append(message)
    if len(assistants) != len(runs):  # e.g. an empty trailing turn; fall back to the tokens alone
        assistants, turns = [{} for _ in runs], [[] for _ in runs]

    from .advantages import token_index_at_char  # torch only when rollouts are split (the prompts need none)

    rollout = AgenticRollout(transcript="")
    pieces: list[str] = []
    length = 0
    for turn_index, ((run_start, run_end), message, replies) in enumerate(zip(runs, assistants, turns)):
        run_ids = ids[run_start:run_end]
        text = tokenizer.decode(run_ids, **_DECODE)
        content = message.get("content") if isinstance(message.get("content"), str) else None
        calls = [
            (call["function"]["name"], call["function"].get("arguments", {}))
            for call in message.get("tool_calls") or []
            if isinstance(call, dict) and isinstance(call.get("function"), dict) and "name" in call["function"]
        ]
        if content is None:  # no parsed message: the decoded turn without special tokens is its prose
            content = tokenizer.decode(run_ids, skip_special_tokens=True)
            calls = []
        prose = content.strip()
        prose_at = text.find(prose) if prose else 0
        if prose_at == -1:
            prose_at = 0
        turn_units: list[tuple[str, str, int]] = []  # (kind, unit text, character position in `text`)
        for start, end in split_prose(prose) if prose else []:
            unit = prose[start:end].strip()
            if unit:
                turn_units.append(("sentence", unit, prose_at + start))
        call_starts = _tool_call_starts(text, calls, prose_at + len(prose)) if calls else []
        for (name, arguments), start in zip(calls, call_starts):
            turn_units.append(("tool_call", format_tool_call(name, arguments), start))
        for position, (kind, unit, char_at) in enumerate(turn_units):
            token_at = run_start if position == 0 else run_start + token_index_at_char(tokenizer, run_ids, char_at, **_DECODE)
            if rollout.token_starts:
                token_at = max(token_at, rollout.token_starts[-1])
            piece = unit + "\n"
            rollout.spans.append((length, length + len(piece)))
            rollout.kinds.append(kind)
            rollout.token_starts.append(min(token_at, run_end - 1))
            rollout.turns.append(turn_index)
            pieces.append(piece)
            length += len(piece)
        if replies and rollout.spans:
            reply_text = "".join(
                f"    {ENVIRONMENT_MARKER}{reply.get('name', 'tool')}] "
                f"{str(reply.get('content', '')).strip()}\n"
                for reply in replies
            )
            pieces.append(reply_text)
            length += len(reply_text)
            start, _ = rollout.spans[-1]
            rollout.spans[-1] = (start, length)
    rollout.transcript = "".join(pieces)
    return rollout


class AgenticSplit:
    """The unit splitter Cliff's judge uses on a tool-calling run.

    The judge numbers a rollout by splitting its text; a tool-calling rollout's text is its
    :attr:`AgenticRollout.transcript`, whose units were found from its tokens and messages. The trainer registers
    each step's rollouts before judging; a text not registered (a rollout without tools) is split by ``fallback``.
    """

    def __init__(self, fallback: Callable[[str], list[tuple[int, int]]]):
        self.fallback = fallback
        self._spans: dict[str, list[tuple[int, int]]] = {}

    def register(self, rollouts: Sequence[AgenticRollout]) -> None:
        """Replace the registered rollouts with ``rollouts`` (this step's, of every process)."""
        self._spans = {rollout.transcript: list(rollout.spans) for rollout in rollouts}

    def register_spans(self, transcripts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]) -> None:
        self._spans = {text: [tuple(s) for s in unit_spans] for text, unit_spans in zip(transcripts, spans)}

    def __call__(self, text: str) -> list[tuple[int, int]]:
        spans = self._spans.get(text)
        return list(spans) if spans is not None else self.fallback(text)


def agentic_token_advantages(
    advantages: torch.Tensor,
    is_correct: torch.Tensor,
    group_ids: torch.Tensor,
    suffix_start: torch.Tensor,
    completion_mask: torch.Tensor,
    tool_mask: torch.Tensor | None,
    lam: float = 0.0,
    recentre: bool = True,
) -> torch.Tensor:
    """Cliff token advantages (eq. 4/5) over the policy's tokens only: ``(B, T)``.

    :func:`~hf_meds_cliff.cliff.cliff_token_advantages` with the mask ``completion_mask * tool_mask``, so tool-output
    tokens get exactly 0 and the group baseline ``b`` is the mean over the policy's tokens. ``tool_mask=None`` (a
    single-turn batch) gives :func:`~hf_meds_cliff.cliff.cliff_token_advantages` itself.

    Example (one group: a correct rollout of 2 policy tokens; an incorrect one of 2 policy tokens, 2 tool-output
    tokens and 2 policy tokens whose first mistake is the action at token 4; A_cor = 1, A_inc = -1, λ = 0:
    u = [1, 1 | 0, 0, ·, ·, -1, -1], b = 0):

    >>> import torch
    >>> agentic_token_advantages(torch.tensor([1.0, -1.0]), torch.tensor([True, False]), torch.tensor([0, 0]),
    ...     torch.tensor([0, 4]), torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]]),
    ...     torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 1, 1]])).tolist()
    [[1.0, 1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, -1.0, -1.0]]
    """
    from .advantages import cliff_token_advantages

    mask = policy_token_mask(completion_mask, tool_mask)
    return cliff_token_advantages(
        advantages, is_correct, group_ids, suffix_start, mask, lam=lam, recentre=recentre
    )
