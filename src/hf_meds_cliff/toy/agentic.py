r"""The toy world with tools: a calculator environment, its exact first-wrong-action rule, and scripted policies.

Offline, for tests, CI, the benchmark and ``docs/agents.md``. A toy problem (``"Compute (7 + 5) * 3 - 4."``) is
solved by calling the calculator's tools, one per step of the chain, and stating the answer::

    [tool call] add {"a": 7, "b": 5}          -> [environment: add] 12
    [tool call] multiply {"a": 12, "b": 3}    -> [environment: multiply] 36
    36 - 4 = 32.                              (a step may also be written out)
    The answer is \boxed{32}.

:func:`first_wrong_action` is Cliff's rule teacher on such rollouts (exact, free): the first unit that calls the
wrong tool, passes wrong arguments, states a step or a tool result wrongly, or answers wrongly.
:class:`ScriptedToolPolicy` replaces ``model.generate`` as TRL's own tool tests do: each rollout's turns are fixed
texts, so every advantage of a training step can be computed by hand.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..agentic import parse_tool_call_unit
from .task import ToyProblem, parse_question

__all__ = [
    "TOOL_FOR_OPERATOR",
    "CalculatorEnvironment",
    "FinalAnswerReward",
    "ScoredCalculatorEnvironment",
    "ScriptedToolPolicy",
    "add",
    "async_multiply",
    "final_assistant_text",
    "first_wrong_action",
    "multiply",
    "subtract",
    "tiny_tool_policy",
    "tool_call_text",
    "tool_tokenizer",
]

TOOL_FOR_OPERATOR = {"+": "add", "-": "subtract", "*": "multiply"}
"""The calculator tool that performs each operator of the chain."""
SCRATCHPAD_TOOLS = frozenset({"note"})
"""Tools that change nothing the answer depends on: calling them is never a mistake."""

_STEP = re.compile(r"(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*(-?\d+)\s*\.?")
_ANSWER = re.compile(r"The answer is\s*\\boxed\{\s*(-?\d+)\s*\}\s*\.?")


# -- tools -----------------------------------------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """
    Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum a + b.
    """
    return a + b


def subtract(a: int, b: int) -> int:
    """
    Subtract one integer from another.

    Args:
        a: The integer to subtract from.
        b: The integer to subtract.

    Returns:
        The difference a - b.
    """
    return a - b


def multiply(a: int, b: int) -> int:
    """
    Multiply two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product a * b.
    """
    return a * b


async def async_multiply(a: int, b: int) -> int:
    """
    Multiply two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The product a * b.
    """
    return a * b


async_multiply.__name__ = "multiply"  # the calculator's multiply tool, asynchronous: TRL names a tool by __name__


class CalculatorEnvironment:
    """An ``environment_factory`` environment: the calculator's tools and a scratchpad, one instance per rollout."""

    def reset(self, **kwargs) -> None:
        self.calls = 0
        self.notes: list[str] = []

    def add(self, a: int, b: int) -> int:
        """
        Add two integers.

        Args:
            a: The first integer.
            b: The second integer.

        Returns:
            The sum a + b.
        """
        self.calls += 1
        return a + b

    def subtract(self, a: int, b: int) -> int:
        """
        Subtract one integer from another.

        Args:
            a: The integer to subtract from.
            b: The integer to subtract.

        Returns:
            The difference a - b.
        """
        self.calls += 1
        return a - b

    def multiply(self, a: int, b: int) -> int:
        """
        Multiply two integers.

        Args:
            a: The first integer.
            b: The second integer.

        Returns:
            The product a * b.
        """
        self.calls += 1
        return a * b

    def note(self, text: str) -> str:
        """
        Write a note on the scratchpad.

        Args:
            text: What to note.

        Returns:
            A confirmation.
        """
        self.notes.append(text)
        return "noted"


class ScoredCalculatorEnvironment(CalculatorEnvironment):
    """:class:`CalculatorEnvironment` that owns a reward too (TRL's ``get_reward``): 1.0 when it was called."""

    def get_reward(self) -> float:
        return 1.0 if self.calls else 0.0


# -- the rule ----------------------------------------------------------------------------------------------------------


def _arguments_match(arguments: Any, left: int, op: str, right: int) -> bool:
    if not isinstance(arguments, dict) or set(arguments) != {"a", "b"}:
        return False
    try:
        a, b = int(arguments["a"]), int(arguments["b"])
    except (TypeError, ValueError):
        return False
    return (a, b) == (left, right) or (op in "+*" and (a, b) == (right, left))


def first_wrong_action(question: str | ToyProblem, units: Sequence[str]) -> int | None:
    r"""Index of the first wrong unit of a tool-calling toy rollout, or ``None`` when it is right throughout.

    Units are those of :func:`hf_meds_cliff.cliff.agentic.split_agentic_rollout`: sentences and tool calls
    (``[tool call] name {json}``, with the environment's reply under them, which is never judged). Each step
    ``L op R = V`` of the chain is done either by a call to its tool (:data:`TOOL_FOR_OPERATOR`) with arguments
    ``{"a": L, "b": R}`` (either order for ``+`` and ``*``), or by a sentence ``L op R = V``. A unit is wrong when it
    calls a tool other than the step's (an unknown tool included), passes other arguments, or is a sentence that is
    not the next step, not a correct restatement of the last call's result (``L op R = V`` with the tool's ``V``:
    stating another value is acting on the tool result wrongly) and not the answer ``The answer is \boxed{A}``
    after the last step. Scratchpad calls (``note``) are never wrong. Anything after the answer is a mistake; a
    rollout that stops early has its mistake at its last unit; no unit at all gives 0.

    >>> q = "Compute (7 + 5) * 3."
    >>> units = ['[tool call] add {"a": 7, "b": 5}', "7 + 5 = 12.", '[tool call] multiply {"a": 12, "b": 3}',
    ...          "The answer is \\boxed{36}."]
    >>> first_wrong_action(q, units) is None
    True
    >>> first_wrong_action(q, ['[tool call] add {"a": 7, "b": 5}', "7 + 5 = 13."])
    1
    >>> first_wrong_action(q, ['[tool call] multiply {"a": 7, "b": 5}'])
    0
    """
    problem = question if isinstance(question, ToyProblem) else parse_question(question)
    steps = problem.steps
    if not units:
        return 0
    done = 0  # steps of the chain done so far
    last_call = None  # the step the previous tool call performed, which a sentence may restate
    answered = False
    for index, unit in enumerate(units):
        if answered:
            if unit.strip():
                return index
            continue
        call = parse_tool_call_unit(unit)
        if call is not None:
            name, arguments = call
            if name in SCRATCHPAD_TOOLS:
                continue
            if done >= len(steps):
                return index
            step = steps[done]
            if name != TOOL_FOR_OPERATOR[step.op] or not _arguments_match(arguments, step.left, step.op, step.right):
                return index
            done += 1
            last_call = step
            continue
        sentence = unit.strip()
        step_match = _STEP.fullmatch(sentence)
        if step_match is not None:
            left, op, right, value = (int(step_match[1]), step_match[2], int(step_match[3]), int(step_match[4]))
            if last_call is not None and (left, op, right) == (last_call.left, last_call.op, last_call.right):
                if value != last_call.result:
                    return index
                last_call = None
                continue
            if done < len(steps) and (left, op, right, value) == (
                steps[done].left, steps[done].op, steps[done].right, steps[done].result,
            ):  # fmt: skip
                done += 1
                last_call = None
                continue
            return index
        answer_match = _ANSWER.fullmatch(sentence)
        if answer_match is not None and done == len(steps) and int(answer_match[1]) == problem.answer:
            answered = True
            continue
        return index
    return None if answered else len(units) - 1


# -- reward ------------------------------------------------------------------------------------------------------------


def final_assistant_text(completion: Any) -> str:
    """The content of a completion's last assistant message (the text itself for a plain completion).

    >>> final_assistant_text([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "1"},
    ...                       {"role": "assistant", "content": "b"}])
    'b'
    """
    if isinstance(completion, str):
        return completion
    for message in reversed(list(completion)):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return str(message.get("content") or "")
    return ""


class FinalAnswerReward:
    r"""1.0 when the last assistant message states the toy answer (``The answer is \boxed{A}``), else 0.0.

    Only the policy's final turn counts: an answer inside tool output or an earlier turn is not the answer.

    >>> reward = FinalAnswerReward()
    >>> reward([[{"role": "assistant", "content": "The answer is \\boxed{36}."}]], answer=["36"])
    [1.0]
    """

    def __call__(self, completions, answer, **kwargs) -> list[float]:
        rewards = []
        for completion, expected in zip(completions, answer):
            match = _ANSWER.search(final_assistant_text(completion))
            rewards.append(1.0 if match is not None and match[1] == str(expected).strip() else 0.0)
        return rewards


# -- scripted policies ---------------------------------------------------------------------------------------------


def tool_call_text(name: str, **arguments: Any) -> str:
    """A tool call in Qwen's format (what a Qwen policy writes to call a tool).

    >>> tool_call_text("add", a=1, b=2)
    '<tool_call>\\n{"name": "add", "arguments": {"a": 1, "b": 2}}\\n</tool_call>'
    """
    import json

    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def tool_tokenizer():
    """Qwen's tokenizer with Qwen3's tool-calling chat template and TRL's response template (offline)."""
    from trl.chat_template_utils import add_response_schema, qwen3_chat_template

    from .qwen_world import load_qwen_tokenizer

    tokenizer = load_qwen_tokenizer()
    tokenizer.chat_template = qwen3_chat_template
    return add_response_schema(tokenizer)


def tiny_tool_policy(tokenizer, seed: int = 0, hidden_size: int = 16):
    """A randomly initialised two-layer Qwen3 over ``tokenizer``'s vocabulary (its outputs are scripted anyway)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    vocab_size = len(tokenizer) + (-len(tokenizer)) % 64
    config = AutoConfig.for_model(
        "qwen3", vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=hidden_size // 2,
        max_position_embeddings=2048, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


class ScriptedToolPolicy:
    """``model.generate`` replaced by fixed turns, as TRL's tool tests do (``patch.object(model, "generate", ...)``).

    ``scripts[i]`` are the assistant turns of rollout ``i`` of every generation batch (rollouts in batch order), each
    a text without the end-of-turn token (added here). TRL generates the first turn of every rollout at once, then,
    after running the tools, the next turn of the rollouts whose last turn called a tool; so a turn that calls a tool
    must be followed by another turn, and a turn without a call must be the last.
    """

    def __init__(self, tokenizer, scripts: Sequence[Sequence[str]]):
        for index, turns in enumerate(scripts):
            if not turns:
                raise ValueError(f"scripts[{index}] has no turn; give every rollout at least one.")
            for position, turn in enumerate(turns):
                calls = "<tool_call>" in turn
                last = position == len(turns) - 1
                if calls == last:
                    raise ValueError(
                        f"scripts[{index}] turn {position} {'calls a tool' if calls else 'calls no tool'} but is "
                        f"{'the last' if last else 'not the last'} turn; a turn calls a tool exactly when another "
                        "turn follows (TRL generates again only after a tool call)."
                    )
        self.tokenizer = tokenizer
        self.scripts = [list(turns) for turns in scripts]
        self._active: list[int] = []
        self._turn = 0
        self.calls = 0

    def __call__(self, input_ids, **kwargs):
        import torch

        self.calls += 1
        if not self._active:  # a new generation batch: every rollout's first turn
            if input_ids.shape[0] != len(self.scripts):
                raise ValueError(
                    f"generate got {input_ids.shape[0]} rows for a new batch but the script has {len(self.scripts)} "
                    "rollouts; give one script per rollout of a generation batch."
                )
            self._active, self._turn = list(range(len(self.scripts))), 0
        elif input_ids.shape[0] != len(self._active):
            raise ValueError(
                f"generate got {input_ids.shape[0]} rows but {len(self._active)} scripted rollouts called a tool "
                "last turn; TRL stopped a rollout early (max_completion_length or max_tool_calling_iterations)."
            )
        texts = [self.scripts[row][self._turn] for row in self._active]
        eos = self.tokenizer.eos_token_id
        rows = [self.tokenizer(text, add_special_tokens=False)["input_ids"] + [eos] for text in texts]
        width = max(len(row) for row in rows)
        pad = self.tokenizer.pad_token_id
        completion = torch.tensor([row + [pad] * (width - len(row)) for row in rows], device=input_ids.device)
        self._active = [row for row, text in zip(self._active, texts) if "<tool_call>" in text]
        self._turn += 1
        return torch.cat([input_ids, completion], dim=-1)
