"""MEDS on tool-calling rollouts: the answer token is looked for in the policy's final turn only.

A multi-turn rollout of TRL's ``GRPOTrainer`` holds tool output spliced between the policy's turns (``tool_mask``
0). A ``\\boxed{`` inside a tool result, or in an earlier turn the policy went on from, is not the policy's answer:
:func:`locate_final_turn_answers` runs the usual rule (:func:`~hf_meds_cliff.meds.features.locate_answer_token`) on
the tokens of the final assistant turn and shifts the location back to completion coordinates. The feature is then
read, as on single-turn rollouts, from the policy's hidden state at the position that predicts that token (the
token before it: the policy's own, or the environment's last token when the answer opens the turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..agentic import final_assistant_run
from .features import AnswerLocation, locate_answer_token

__all__ = ["AGENTIC_NO_ANSWER", "AGENTIC_ANSWER_OUTSIDE_FINAL_TURN", "locate_final_turn_answers"]

AGENTIC_NO_ANSWER = "no_answer"
"""Status of a rollout whose final turn has no answer token (it gets no feature and no penalty)."""
AGENTIC_ANSWER_OUTSIDE_FINAL_TURN = "answer_outside_final_turn"
"""Status of a rollout without an answer in its final turn that has a ``\\boxed{...}`` elsewhere (tool output or
an earlier turn): also no feature, counted apart because it is what a turn-blind rule would have taken."""


def locate_final_turn_answers(
    completion_ids_list: Sequence[Sequence[int]],
    tool_masks: Sequence[Sequence[int]],
    tokenizer,
    rule: str = "auto",
) -> tuple[list[AnswerLocation | None], list[str]]:
    """Answer tokens of tool-calling rollouts, found in each rollout's final assistant turn.

    Args:
        completion_ids_list: the completions' token ids (tool output included, no padding).
        tool_masks: TRL's tool masks (1: the policy's token, 0: tool output), at least as long as the ids.
        tokenizer: the policy's tokenizer.
        rule: :func:`~hf_meds_cliff.meds.features.locate_answer_token`'s rule.

    Returns:
        ``(locations, statuses)``: per rollout an :class:`~hf_meds_cliff.meds.features.AnswerLocation` in
        completion coordinates whose target lies in the final turn, or ``None``; and its status, ``"located"``,
        :data:`AGENTIC_NO_ANSWER` or :data:`AGENTIC_ANSWER_OUTSIDE_FINAL_TURN`.
    """
    if len(completion_ids_list) != len(tool_masks):
        raise ValueError(
            f"Got {len(completion_ids_list)} completions and {len(tool_masks)} tool masks; pass one mask per completion."
        )
    locations: list[AnswerLocation | None] = []
    statuses: list[str] = []
    for ids, mask in zip(completion_ids_list, tool_masks):
        ids = [int(t) for t in ids]
        turn = final_assistant_run(mask, len(ids))
        location = None
        if turn is not None:
            start, end = turn
            found = locate_answer_token(ids[start:end], tokenizer, rule=rule)
            if found is not None:
                location = replace(
                    found, query_index=found.query_index + start, target_index=found.target_index + start
                )
        locations.append(location)
        if location is not None:
            statuses.append("located")
        elif locate_answer_token(ids, tokenizer, rule="decoded") is not None:
            statuses.append(AGENTIC_ANSWER_OUTSIDE_FINAL_TURN)
        else:
            statuses.append(AGENTIC_NO_ANSWER)
    return locations, statuses
