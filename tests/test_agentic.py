"""Cliff and MEDS on tool-calling rollouts (TRL ``tools=`` / ``environment_factory=``): pure functions with
hand-computed values, and ``trainer.train()`` on scripted multi-turn batches (``generate`` patched as in TRL's own
tool tests) with the calculator world of :mod:`hf_meds_cliff.toy.agentic`."""

from __future__ import annotations

import hashlib
import json
import os
from unittest.mock import patch

import pytest
import torch

from hf_meds_cliff.agentic import assistant_runs, environment_runs, final_assistant_run, policy_token_mask
from hf_meds_cliff.cliff.agentic import (
    agentic_token_advantages,
    is_agentic_units,
    parse_tool_call_unit,
    split_agentic_rollout,
)
from hf_meds_cliff.cliff.judging import (
    AGENTIC_CODE_JUDGE_SYSTEM_PROMPT,
    AGENTIC_JUDGE_SYSTEM_PROMPT,
    build_judge_messages,
)
from hf_meds_cliff.toy.agentic import first_wrong_action, tool_call_text

QUESTION = "Compute (7 + 5) * 3."

# -- pure functions --------------------------------------------------------------------------------------------------


def test_runs_of_the_tool_mask():
    mask = [1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1]
    assert assistant_runs(mask) == [(0, 2), (5, 7), (8, 11)]
    assert environment_runs(mask) == [(2, 5), (7, 8)]
    assert final_assistant_run(mask) == (8, 11)
    assert final_assistant_run(mask, length=8) == (5, 7)  # padding (1s) after the completion is ignored
    assert final_assistant_run([0, 0]) is None
    with pytest.raises(ValueError, match="length=5"):
        assistant_runs([1, 1], length=5)


def test_agentic_advantages_hand_computed_baseline_over_policy_tokens_only():
    # One group. Row 0 correct: 3 policy tokens. Row 1 incorrect: 2 policy tokens, 3 tool tokens, 3 policy tokens;
    # its first wrong action starts at token 5. A_cor = 1.5, A_inc = -0.5, lambda = 0.
    # u (policy tokens) = [1.5, 1.5, 1.5 | 0, 0, -0.5, -0.5, -0.5]; b = (4.5 - 1.5) / 8 = 0.375.
    completion_mask = torch.tensor([[1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    tool_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 1, 1, 1]])
    result = agentic_token_advantages(
        torch.tensor([1.5, -0.5]), torch.tensor([True, False]), torch.tensor([0, 0]), torch.tensor([0, 5]),
        completion_mask, tool_mask,
    )  # fmt: skip
    b = 0.375
    expected = torch.tensor(
        [[1.5 - b] * 3 + [0.0] * 5, [-b, -b, 0.0, 0.0, 0.0, -0.5 - b, -0.5 - b, -0.5 - b]], dtype=torch.float32
    )
    torch.testing.assert_close(result, expected)
    assert result[1, 2:5].eq(0).all()  # tool output: no advantage
    assert result.sum().item() == pytest.approx(0.0, abs=1e-6)  # the group's policy tokens sum to zero
    # Without the tool mask (the old behaviour) b would count the tool tokens: 3/11, not 0.375.
    old = agentic_token_advantages(
        torch.tensor([1.5, -0.5]), torch.tensor([True, False]), torch.tensor([0, 0]), torch.tensor([0, 5]),
        completion_mask, None,
    )  # fmt: skip
    assert old[1, 2].item() != 0.0
    with pytest.raises(ValueError, match="tool_mask has shape"):
        policy_token_mask(completion_mask, tool_mask[:, :4])


def test_first_wrong_action_rule():
    call = lambda name, **kw: f"[tool call] {name} {json.dumps(kw)}"  # noqa: E731
    right = [call("add", a=7, b=5), "7 + 5 = 12.", call("multiply", a=12, b=3), "The answer is \\boxed{36}."]
    assert first_wrong_action(QUESTION, right) is None
    assert first_wrong_action(QUESTION, [call("add", a=5, b=7), call("multiply", a=3, b=12), "The answer is \\boxed{36}."]) is None
    assert first_wrong_action(QUESTION, [call("subtract", a=7, b=5)] + right[1:]) == 0  # wrong tool
    assert first_wrong_action(QUESTION, [call("divide", a=7, b=5)]) == 0  # a tool that does not exist
    assert first_wrong_action(QUESTION, [right[0], right[1], call("multiply", a=12, b=4)]) == 2  # wrong arguments
    assert first_wrong_action(QUESTION, [right[0], "7 + 5 = 13."]) == 1  # acting on the tool result wrongly
    assert first_wrong_action(QUESTION, [call("note", text="x"), *right]) is None  # the scratchpad is neutral
    assert first_wrong_action(QUESTION, right[:2]) == 1  # stopped early: the last unit
    assert first_wrong_action(QUESTION, [*right, "More."]) == 4
    # The environment's reply under a call is never read as the student's work.
    assert first_wrong_action(QUESTION, [right[0] + "\n    [environment: add] 13", *right[1:]]) is None


SINGLE_TURN_DIGESTS = {
    # sha256 of json.dumps(build_judge_messages(...)) on the main branch before agentic prompts existed.
    ("math", "R"): "2b7a16e46c79232e3953a7fd0144fbc7a01247f43f28fba026f50cc0d1bc43ac",
    ("math", None): "c975bc47c79bad6ff7db08d130fb1199324b5671fbf59a07a6310fce6cd41f2a",
    ("code", "R"): "58feac71ad268bcac8b41800c01130e8c02204298a4ca6884d875f09b816520e",
}


@pytest.mark.parametrize(("domain", "reference"), list(SINGLE_TURN_DIGESTS))
def test_single_turn_judge_prompt_is_byte_identical(domain, reference):
    messages = build_judge_messages(
        QUESTION, reference, ["7 + 5 = 12. ", "12 * 3 = 35."], domain=domain,
        execution="x" if domain == "code" else None,
    )  # fmt: skip
    assert hashlib.sha256(json.dumps(messages).encode()).hexdigest() == SINGLE_TURN_DIGESTS[(domain, reference)]


@pytest.mark.parametrize(("domain", "system"), [("math", AGENTIC_JUDGE_SYSTEM_PROMPT), ("code", AGENTIC_CODE_JUDGE_SYSTEM_PROMPT)])
def test_agentic_judge_prompt_in_both_domains(domain, system):
    units = ['[tool call] add {"a": 7, "b": 5}\n    [environment: add] 12', "7 + 5 = 12.", "The answer is \\boxed{12}."]
    assert is_agentic_units(units) and not is_agentic_units(["7 + 5 = 12."])
    messages = build_judge_messages(QUESTION, "R", units, domain=domain, execution="failed" if domain == "code" else None)
    assert messages[0]["content"] == system
    assert "wrong tool" in system and "Never mark the environment's replies" in system
    user = messages[1]["content"]
    assert '[0] [tool call] add {"a": 7, "b": 5}\n    [environment: add] 12\n[1] 7 + 5 = 12.' in user
    assert "from 0 to 2" in user and ("failed" in user) == (domain == "code")
    assert parse_tool_call_unit(units[0]) == ("add", {"a": 7, "b": 5})


# -- the scripted world --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tool_tokenizer():
    from hf_meds_cliff.toy.agentic import tool_tokenizer as build

    return build()


def _answer(value):
    return f"The answer is \\boxed{{{value}}}."


# One group of four rollouts of QUESTION (answer 36). First wrong unit: None, 0 (a tool that does not exist), 1 (a
# sentence acting on the tool result wrongly), 2 (a call with wrong arguments).
CLIFF_SCRIPTS = [
    [tool_call_text("add", a=7, b=5), "7 + 5 = 12. " + tool_call_text("multiply", a=12, b=3), _answer(36)],
    [tool_call_text("divide", a=7, b=5), _answer(1)],
    [tool_call_text("add", a=7, b=5), "7 + 5 = 13. " + tool_call_text("multiply", a=13, b=3), _answer(39)],
    [tool_call_text("add", a=7, b=5), "7 + 5 = 12. " + tool_call_text("multiply", a=12, b=4), _answer(48)],
]
CLIFF_FIRST_MISTAKES = [None, 0, 1, 2]


def test_split_agentic_rollout_units_and_tokens(tool_tokenizer):
    tokenizer = tool_tokenizer
    eos = tokenizer.eos_token_id
    turn = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]  # noqa: E731
    env = tokenizer("\n<|im_start|>user\n<tool_response>\n12\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
                    add_special_tokens=False)["input_ids"]  # fmt: skip
    first, second = turn(CLIFF_SCRIPTS[3][0]), turn(CLIFF_SCRIPTS[3][1])
    ids = first + env + second
    mask = [1] * len(first) + [0] * len(env) + [1] * len(second)
    messages = [
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 7, "b": 5}}}]},
        {"role": "tool", "name": "add", "content": "12"},
        {"role": "assistant", "content": "7 + 5 = 12.", "tool_calls": [{"type": "function", "function": {"name": "multiply", "arguments": {"a": 12, "b": 4}}}]},
    ]  # fmt: skip
    rollout = split_agentic_rollout(tokenizer, ids, mask, messages)
    assert rollout.units == [
        '[tool call] add {"a": 7, "b": 5}\n    [environment: add] 12\n',
        "7 + 5 = 12.\n",
        '[tool call] multiply {"a": 12, "b": 4}\n',
    ]
    assert rollout.kinds == ["tool_call", "sentence", "tool_call"]
    second_start = len(first) + len(env)
    tool_call_token = tokenizer.convert_tokens_to_ids("<tool_call>")
    assert rollout.token_starts == [0, second_start, second_start + second.index(tool_call_token)]
    assert all(mask[start] == 1 for start in rollout.token_starts)  # a unit always starts on a policy token


def _capture_outputs(trainer):
    captured = []
    original = trainer._generate_and_score_completions

    def wrapped(inputs):
        output = original(inputs)
        captured.append({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in output.items()})
        return output

    return captured, patch.object(trainer, "_generate_and_score_completions", side_effect=wrapped)


def _expected_cliff(output, rewards, first_mistake_tokens):
    """Eq. 4/5 by hand for one group, λ = 0: TRL's A_i = (r_i - mean) / (std + 1e-4); u = A_cor on correct rows, 0
    before and A_i from the first wrong unit's token on incorrect ones; b = mean of u over the policy's tokens."""
    rewards = torch.tensor(rewards, dtype=torch.float32)
    sequence = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    correct = [m is None for m in first_mistake_tokens]
    a_cor = sequence[[i for i, c in enumerate(correct) if c]].mean()
    mask = (output["completion_mask"] * output["tool_mask"]).float()
    uncentred = torch.zeros_like(mask)
    for row, start in enumerate(first_mistake_tokens):
        if start is None:
            uncentred[row] = a_cor
        else:
            uncentred[row, start:] = sequence[row]
    uncentred = uncentred * mask
    b = uncentred.sum() / mask.sum()
    return (uncentred - b) * mask


def _cliff_trainer(tokenizer, tmp_path, **kwargs):
    from datasets import Dataset

    from hf_meds_cliff.cliff import CliffConfig, CliffGRPOTrainer
    from hf_meds_cliff.toy.agentic import FinalAnswerReward, tiny_tool_policy

    rows = kwargs.pop("rows", 4)
    columns = {"prompt": [[{"role": "user", "content": QUESTION}]] * rows, "answer": ["36"] * rows}
    columns.update(kwargs.pop("columns", {}))
    reward_funcs = kwargs.pop("reward_funcs", [FinalAnswerReward()])
    args = CliffConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=rows, num_generations=4, max_steps=1, report_to="none",
        use_cpu=True, bf16=False, max_completion_length=256, logging_steps=1, learning_rate=0.1, shuffle_dataset=False,
        cliff_teacher="rule", save_strategy="no",
    )  # fmt: skip
    return CliffGRPOTrainer(
        model=tiny_tool_policy(tokenizer), processing_class=tokenizer, reward_funcs=reward_funcs, args=args,
        train_dataset=Dataset.from_dict(columns), **kwargs,
    )  # fmt: skip


def _first_mistake_tokens(output):
    """The first wrong unit's token, found from the token ids alone: rollout 1's first token (unit 0), rollout 2's
    second turn's first token (unit 1: the sentence opening the turn) and rollout 3's second ``<tool_call>`` (unit 2)."""
    second_turn = [assistant_runs(mask.tolist())[1][0] for mask in output["tool_mask"]]
    ids = output["completion_ids"][3].tolist()
    tool_call = 151657  # Qwen's <tool_call>, as TRL's own tool tests hard-code it
    return [None, 0, second_turn[2], [i for i, t in enumerate(ids) if t == tool_call][1]]


@pytest.mark.parametrize("multiply_tool", ["sync", "async"])
def test_cliff_trains_on_tool_calls_with_hand_computed_advantages(tool_tokenizer, tmp_path, multiply_tool):
    from hf_meds_cliff.toy.agentic import ScriptedToolPolicy, add, async_multiply, multiply

    tools = [add, multiply if multiply_tool == "sync" else async_multiply]
    trainer = _cliff_trainer(tool_tokenizer, tmp_path, tools=tools)
    before = {n: p.clone() for n, p in trainer.model.named_parameters()}
    captured, capture = _capture_outputs(trainer)
    with patch.object(trainer.model, "generate", side_effect=ScriptedToolPolicy(tool_tokenizer, CLIFF_SCRIPTS)), capture:
        trainer.train()
    output = captured[0]
    outcome = trainer.cliff_last_outcome
    assert outcome.first_mistake == CLIFF_FIRST_MISTAKES
    expected = _expected_cliff(output, [1.0, 0.0, 0.0, 0.0], _first_mistake_tokens(output))
    torch.testing.assert_close(output["advantages"], expected, atol=1e-5, rtol=1e-5)
    tool_tokens = output["tool_mask"] == 0
    assert tool_tokens.any() and output["advantages"][tool_tokens].eq(0).all()
    # The first wrong action splits the trajectory: rollout 3 is 0 before its wrong multiply call, negative after.
    split = _first_mistake_tokens(output)[3]
    policy = (output["tool_mask"][3] * output["completion_mask"][3]).bool()
    before_split, after_split = output["advantages"][3, :split][policy[:split]], output["advantages"][3, split:][policy[split:]]
    assert len(set(before_split.tolist())) == 1 and (after_split < before_split[0]).all()
    logs = trainer.state.log_history[-2]
    assert logs["tools/failure_frequency"] == pytest.approx(1 / 7)  # "divide" does not exist: 1 of 7 calls failed
    assert logs["cliff/groups_cliff"] == 1.0
    assert any(not torch.equal(p, trainer.model.get_parameter(n)) for n, p in before.items())
    if multiply_tool == "sync":
        _check_report(tmp_path)


def _check_report(run_dir):
    """The report draws the logged tool-calling rollouts: tool calls and environment replies apart, the first
    wrong action marked."""
    from hf_meds_cliff.report import collect_run, render_report

    page = render_report(collect_run(run_dir))
    assert page.count('class="agentic"') == 3  # the three wrong rollouts
    assert '<span class="env"><bdi>add: 12</bdi></span>' in page  # the environment's reply, set apart, unnumbered
    assert 'title="first wrong action"' in page  # "divide" and the wrong multiply call
    assert "first mistake at unit 0 (wrong action: tool call divide)" in page
    assert "first mistake at unit 2 (wrong action: tool call multiply)" in page
    assert "first mistake at unit 1 (sentence)" in page
    assert '<span class="s unit mistake"><sup>[1]</sup><bdi>7 + 5 = 13.</bdi></span>' in page


def test_cliff_with_several_environments_and_an_environment_owned_reward(tool_tokenizer, tmp_path, monkeypatch):
    """Two groups in one batch, each bound to its own environment: ``plain`` (no reward of its own) and ``scored``
    (an environment-owned reward next to the correctness reward)."""
    from hf_meds_cliff.toy.agentic import CalculatorEnvironment, ScoredCalculatorEnvironment, ScriptedToolPolicy

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = _cliff_trainer(
        tool_tokenizer, tmp_path, rows=8, columns={"environment": ["plain", "scored"] * 4},  # prompts 0 and 1 make the batch
        environment_factory={"plain": CalculatorEnvironment, "scored": ScoredCalculatorEnvironment},
    )  # fmt: skip
    assert trainer.reward_func_names == ["FinalAnswerReward", "ScoredCalculatorEnvironment"]
    captured, capture = _capture_outputs(trainer)
    policy = ScriptedToolPolicy(tool_tokenizer, CLIFF_SCRIPTS + CLIFF_SCRIPTS)
    with patch.object(trainer.model, "generate", side_effect=policy), capture:
        trainer.train()
    output = captured[0]
    assert trainer.cliff_last_outcome.first_mistake == CLIFF_FIRST_MISTAKES * 2
    assert trainer.cliff_last_outcome.group_modes == ["cliff"] * 8
    # Group "plain": correctness [1, 0, 0, 0], no environment reward (None: ignored). Group "scored": correctness +
    # the environment's [1, 0, 1, 1] ("divide" never reached the calculator) = [2, 0, 1, 1].
    for rows, rewards in ((slice(0, 4), [1.0, 0.0, 0.0, 0.0]), (slice(4, 8), [2.0, 0.0, 1.0, 1.0])):
        group = {k: v[rows] for k, v in output.items() if torch.is_tensor(v) and v.dim() >= 1 and len(v) == 8}
        expected = _expected_cliff(group, rewards, _first_mistake_tokens(group))
        torch.testing.assert_close(group["advantages"], expected, atol=1e-5, rtol=1e-5)
    assert output["advantages"][output["tool_mask"] == 0].eq(0).all()


MEDS_SCRIPTS = [
    [tool_call_text("add", a=7, b=5), "7 + 5 = 12. " + tool_call_text("multiply", a=12, b=3), _answer(36)],
    ["Maybe \\boxed{30} is it. " + tool_call_text("add", a=7, b=5), "I give up."],  # a box only in an earlier turn
    [tool_call_text("add", a=7, b=5), "I give up."],  # no answer at all
    [tool_call_text("add", a=7, b=5), "Maybe \\boxed{30}. " + tool_call_text("multiply", a=12, b=4), _answer(48)],
]


def test_meds_finds_the_answer_token_in_the_final_turn(tool_tokenizer, tmp_path):
    from datasets import Dataset

    from hf_meds_cliff.meds import MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.toy.agentic import FinalAnswerReward, ScriptedToolPolicy, add, multiply, tiny_tool_policy

    args = MEDSConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1, report_to="none",
        use_cpu=True, bf16=False, max_completion_length=256, logging_steps=1, learning_rate=0.1, save_strategy="no",
    )  # fmt: skip
    trainer = MEDSGRPOTrainer(
        model=tiny_tool_policy(tool_tokenizer), processing_class=tool_tokenizer, reward_funcs=[FinalAnswerReward()],
        args=args, tools=[add, multiply],
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": QUESTION}]] * 4, "answer": ["36"] * 4}),
    )  # fmt: skip
    captured, capture = _capture_outputs(trainer)
    with patch.object(trainer.model, "generate", side_effect=ScriptedToolPolicy(tool_tokenizer, MEDS_SCRIPTS)), capture:
        trainer.train()
    output = captured[0]
    locations = trainer._meds_locations
    assert [loc is not None for loc in locations] == [True, False, False, True]
    for row in (0, 3):
        final_start, final_end = final_assistant_run(output["tool_mask"][row].tolist(), int(output["completion_mask"][row].sum()))
        assert final_start <= locations[row].target_index < final_end  # in the final assistant turn
        target = tool_tokenizer.decode([locations[row].target_id])
        assert target == {0: "3", 3: "4"}[row]  # 36 and 48, not the earlier turn's 30
    logs = trainer.state.log_history[-2]
    assert logs["meds/agentic_no_answer"] == 1.0 and logs["meds/agentic_answer_outside_final_turn"] == 1.0
    # Advantages: TRL's group normalisation of correctness + the MEDS penalty column, by hand.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0]) + torch.from_numpy(trainer.meds_last_penalties)
    expected = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    torch.testing.assert_close(output["advantages"], expected, atol=1e-5, rtol=1e-5)
    assert (output["tool_mask"] == 0).any()  # tool output stays out of the loss (TRL's mask)
