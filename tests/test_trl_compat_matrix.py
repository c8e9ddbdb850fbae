"""TRL compatibility matrix: GRPOTrainer (control), MEDSGRPOTrainer and CliffGRPOTrainer as a TRL user runs them.

Every cell is written the way a TRL user writes a GRPO script: their own ``datasets.Dataset`` with a chat
``prompt`` column and an ``answer`` column, their own plain reward function ``correct(completions, answer, **kw)``,
GRPOConfig-style arguments, and the trainer swapped by changing only the import and the config class (Cliff gets
an explicit teacher that understands the user's data: :class:`ChainTeacher`, a rule defined here). The policy is
the toy world's warmed-up tiny Qwen3 (``toy_policy_path``) so a cell takes seconds on a CPU.

Each cell asserts that parameters changed, that the method's metrics (``meds/*``, ``cliff/*``) were logged, and
for MEDS/Cliff that the method acted: a non-zero MEDS penalty, or Cliff groups whose token advantages differ from
GRPO's, and that TRL's loss received them: the ``advantages`` its ``_compute_loss`` gets are recorded, (B,) for
GRPO and MEDS, and for Cliff (B, T), row for row the token advantages Cliff produced (that rows split into a
correct prefix and a wrong suffix get there is shown with scripted rollouts in ``test_cliff_trainer.py``). Cells
run at least two generation rounds (the MEDS memory is empty in the first one).

Default run: the cells of ``FAST_CELLS`` (marked ``slow``), which include the loss types other than the clipped
GRPO family for MEDS and Cliff. The whole matrix (every TRL 1.16 loss type and every setting below, for all three
trainers) runs with ``HF_MEDS_CLIFF_MATRIX=full``:

    HF_MEDS_CLIFF_MATRIX=full python -m pytest -q tests/test_trl_compat_matrix.py

``HF_MEDS_CLIFF_MATRIX=rest`` runs only the cells the default run skips: CI's matrix lane, after the README's test
command has run the fast subset (``.ci/run``).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence

import pytest
import torch
from helpers import MixedGroupsReward, half_solved_toy_problems, measured_toy_accuracy

pytestmark = pytest.mark.slow

MATRIX_MODE = os.environ.get("HF_MEDS_CLIFF_MATRIX", "").lower()
if MATRIX_MODE not in ("", "fast", "full", "rest"):
    raise ValueError(
        f"HF_MEDS_CLIFF_MATRIX={MATRIX_MODE!r} is not one of fast (the default), full (every cell) or rest (only the "
        "cells the default run skips); unset it for the default."
    )

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
"""Every loss type of TRL 1.16 (``GRPOConfig.loss_type``)."""

PER_DEVICE = 8  # 2 prompts x 4 completions per optimizer step
BASE = {
    "use_cpu": True,
    "bf16": False,
    "seed": 0,
    "learning_rate": 1e-3,
    "per_device_train_batch_size": PER_DEVICE,
    "num_generations": 4,
    "max_completion_length": 72,
    "temperature": 1.0,
    "logging_steps": 1,
    "report_to": "none",
    "save_strategy": "no",
    "disable_tqdm": True,
}

# name -> GRPOConfig overrides (and "peft" / "two_rewards" / "resume" markers handled by the cell runner)
SETTINGS: dict[str, dict] = {
    **{
        f"loss_{loss}": {
            "loss_type": loss,
            **({"importance_sampling_level": "sequence"} if loss == "luspo" else {}),
        }
        for loss in LOSS_TYPES
    },
    "num_iterations_2": {"num_iterations": 2},
    "grad_accum_2": {"gradient_accumulation_steps": 2},  # TRL's default steps_per_generation = 2
    "generation_batch_4x": {"generation_batch_size": 4 * PER_DEVICE},
    "lora": {"peft": True, "learning_rate": 1e-2},
    "scale_rewards_batch": {"scale_rewards": "batch"},
    "scale_rewards_none": {"scale_rewards": "none"},
    # max_completion_length and the questions: see user_questions
    "mask_truncated": {"mask_truncated_completions": True, "shuffle_dataset": False},
    "two_rewards": {"two_rewards": True, "reward_weights": [1.0, 0.5]},
    "resume": {"resume": True, "save_strategy": "steps", "save_steps": 2},
}
TRAINERS = ("grpo", "meds", "cliff")
NON_CLIP_LOSSES = ("bnpo", "cispo", "sapo", "luspo", "vespo")
"""Loss types outside the grpo/dr_grpo/dapo family (dapo, the default, runs in the other fast cells): another
normalisation (bnpo), clipped or soft importance weights (cispo, sapo, vespo), a sequence-level ratio (luspo)."""
FAST_CELLS = {
    ("grpo", "grad_accum_2"),
    ("meds", "grad_accum_2"),  # the autocast crash once fixed here
    ("cliff", "grad_accum_2"),
    ("meds", "two_rewards"),
    ("meds", "resume"),
    ("meds", "mask_truncated"),
    *((kind, f"loss_{loss}") for loss in NON_CLIP_LOSSES for kind in ("meds", "cliff")),
}

# ------------------------------------------------------------------------------------------------
# What the user brings: data, reward functions, and (for Cliff) a teacher for their data.
# ------------------------------------------------------------------------------------------------

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def user_questions(policy, setting: dict) -> list[tuple[str, str]]:
    """The user's question(s) and answers, picked for this toy policy (the warm-up stops elsewhere on every machine).

    One question the policy is measured to solve about half of the time (``half_solved_toy_problems``): groups are
    mixed and it recurs every step, so the MEDS memory meets it again in the second generation round whatever
    order TRL's sampler draws. The ``mask_truncated`` cell takes a short question the policy often gets wrong and
    the question of the pool with the longest worked solution, alternating (``shuffle_dataset=False``), and cuts completions 2
    tokens before the long one's solution ends (after its ``\\boxed{``): every round has completions that finish
    (MEDS features) and completions truncated after their ``\\boxed{``.
    """
    if not setting.get("mask_truncated_completions"):
        (problem,) = half_solved_toy_problems(policy, 1)
        return [(problem.question, str(problem.answer))]
    lengths = _solution_lengths(policy)
    measured = measured_toy_accuracy(str(policy))
    # The shortest solution among the problems the policy gets wrong at least a quarter of the time (wrong rollouts
    # that finish, for MEDS's memory and Cliff's teacher), the longest of the pool.
    short = min((p for p, accuracy in measured if accuracy <= 0.75), key=lambda p: lengths[p.question])
    long = max((p for p, _ in measured), key=lambda p: lengths[p.question])
    return [(short.question, str(short.answer)), (long.question, str(long.answer))]


def _solution_lengths(policy) -> dict[str, int]:
    """Tokens of each pool problem's worked solution (without eos)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    problems = [p for p, _ in measured_toy_accuracy(str(policy))]
    return {p.question: len(tokenizer(p.solution, add_special_tokens=False)["input_ids"]) for p in problems}


def truncating_length(policy, questions: list[tuple[str, str]]) -> int:
    """``max_completion_length`` of the ``mask_truncated`` cell: 2 tokens short of the long question's solution,
    and at least 8 tokens of room after the short one's solution and eos."""
    lengths = _solution_lengths(policy)
    short, long = (lengths[q] for q, _ in questions)
    assert long - 2 >= short + 1 + 8, f"no room between the solutions' lengths {short} and {long}"
    return long - 2


def user_dataset(questions: list[tuple[str, str]]):
    """The question(s), repeated (alternating): enough rows for any generation batch of the matrix."""
    from datasets import Dataset

    rows = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in questions]
    return Dataset.from_list(rows * 64)


def _text(completion) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else completion


def correct(completions, answer, **kwargs):
    """1.0 when the last \\boxed{} holds the answer, else 0.0."""
    found = [BOXED.findall(_text(c)) for c in completions]
    return [1.0 if f and f[-1].strip() == a else 0.0 for f, a in zip(found, answer)]


def brevity(completions, **kwargs):
    """A second, graded reward: shorter is better."""
    return [-len(_text(c)) / 100 for c in completions]


def _chain(problem: str) -> list[str]:
    """The worked solution of "Compute a op b op c." evaluated left to right, one step per sentence."""
    tokens = re.findall(r"-?\d+|[+\-*]", problem.replace("(", " ").replace(")", " "))
    value, sentences = int(tokens[0]), []
    for op, operand in zip(tokens[1::2], tokens[2::2]):
        result = {"+": value + int(operand), "-": value - int(operand), "*": value * int(operand)}[op]
        sentences.append(f"{value} {op} {operand} = {result}.")
        value = result
    return [*sentences, f"The answer is \\boxed{{{value}}}."]


class ChainTeacher:
    """The user's own Cliff teacher: the exact step chain, and the first sentence that leaves it."""

    name = "chain-rule"

    def __init__(self):
        from collections import Counter

        self.counters = Counter()

    async def solve(self, problem: str) -> str | None:
        self.counters["solve_calls"] += 1
        return " ".join(_chain(problem))

    async def judge(self, problem: str, reference: str, sentences: Sequence[str]):
        from hf_meds_cliff.cliff.teachers.base import Judgment

        self.counters["judge_calls"] += 1
        chain = _chain(problem)
        for index, sentence in enumerate(sentences):
            if index >= len(chain) or sentence.strip() != chain[index]:
                return Judgment(index, False, "ok")
        return Judgment(None, True, "ok")

    async def aclose(self) -> None:
        return None


def test_chain_teacher_rule():
    assert _chain("Compute (9 - 4) * 3 + 6.") == [
        "9 - 4 = 5.", "5 * 3 = 15.", "15 + 6 = 21.", "The answer is \\boxed{21}."
    ]  # fmt: skip
    import asyncio

    judgment = asyncio.run(ChainTeacher().judge("Compute 17 - 8 + 15.", "", ["17 - 8 = 9.", "9 + 15 = 23."]))
    assert judgment.first_mistake == 1


# ------------------------------------------------------------------------------------------------
# One cell
# ------------------------------------------------------------------------------------------------


def _generations_per_run(config) -> int:
    return config.steps_per_generation * config.num_iterations


def _build(kind: str, policy, output_dir, setting: dict, max_steps: int | None = None):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    options = dict(setting)
    use_peft = options.pop("peft", False)
    two_rewards = options.pop("two_rewards", False)
    options.pop("resume", None)
    questions = user_questions(policy, setting)
    if setting.get("mask_truncated_completions"):
        options["max_completion_length"] = truncating_length(policy, questions)
    values = {**BASE, "output_dir": str(output_dir), **options}
    probe = GRPOConfig(**{**values, "max_steps": 1})
    # At least two generation rounds: MEDS's memory is empty in the first.
    values["max_steps"] = max_steps or 2 * _generations_per_run(probe)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(policy)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])
    # The user's reward, made to mix every group (tests/helpers.py): every cell has learning signal, and every round
    # a wrong rollout per group for MEDS's memory and Cliff's teacher, whatever this machine's warm-up samples.
    user_correct = MixedGroupsReward(correct, values["num_generations"])
    reward_funcs = [user_correct, brevity] if two_rewards else [user_correct]
    common = {
        "model": model,
        "reward_funcs": reward_funcs,
        "train_dataset": user_dataset(questions),
        "processing_class": tokenizer,
        "peft_config": lora if use_peft else None,
    }
    if kind == "grpo":
        return GRPOTrainer(args=GRPOConfig(**values), **common)
    if kind == "meds":
        from hf_meds_cliff import MEDSConfig, MEDSGRPOTrainer

        return MEDSGRPOTrainer(args=MEDSConfig(**values), **common)
    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer

    return CliffGRPOTrainer(args=CliffConfig(**values), teacher=ChainTeacher(), **common)


def _trainable(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def _assert_truncation_masked(kind: str, trainer) -> None:
    """Truncated completions were produced, and under MEDS none of them got a feature."""
    logs = [r for r in trainer.state.log_history if r.get("completions/clipped_ratio", 0) > 0]
    assert logs, "the mask_truncated cell produced no truncated completion"
    if kind == "meds":
        for record in logs:
            assert record["meds/frac_with_feature"] <= 1 - record["completions/clipped_ratio"] + 1e-6


def _record_loss_advantages(trainer) -> dict[str, list[torch.Tensor]]:
    """Recorded as the cell trains: ``produced``, the ``advantages`` of each generation round's output (what the
    trainer hands TRL's ``_prepare_inputs``), and ``loss``, those of every batch TRL's ``_compute_loss`` receives."""
    recorded: dict[str, list[torch.Tensor]] = {"produced": [], "loss": []}
    generate_and_score, compute_loss = trainer._generate_and_score_completions, trainer._compute_loss

    def recording_generation(inputs):
        output = generate_and_score(inputs)
        if trainer.model.training:
            recorded["produced"].append(output["advantages"].detach().cpu().clone())
        return output

    def recording_loss(model, inputs):
        assert inputs["advantages"].shape[0] == inputs["completion_mask"].shape[0]
        if inputs["advantages"].dim() == 2:
            assert inputs["advantages"].shape == inputs["completion_mask"].shape
        recorded["loss"].append(inputs["advantages"].detach().cpu().clone())
        return compute_loss(model, inputs)

    trainer._generate_and_score_completions = recording_generation
    trainer._compute_loss = recording_loss
    return recorded


def _rows(tensors: list[torch.Tensor]) -> Counter:
    return Counter(tuple(row.tolist()) for tensor in tensors for row in tensor.reshape(tensor.shape[0], -1))


def _assert_loss_advantages(kind: str, trainer) -> None:
    """GRPO and MEDS hand TRL's loss (B,) advantages. Cliff hands it (B, T) token advantages: every batch the loss
    receives is 2-D, and its rows are exactly the rows of Cliff's token advantages (TRL shuffles and splits them;
    each is used ``num_iterations`` times), so a correct prefix and a wrong suffix reach the loss unchanged."""
    produced, received = trainer.loss_advantages["produced"], trainer.loss_advantages["loss"]
    assert received, "TRL's loss never ran"
    if kind != "cliff":
        assert all(advantages.dim() == 1 for advantages in received), [tuple(a.shape) for a in received]
        return
    assert all(advantages.dim() == 2 for advantages in produced + received), [
        tuple(a.shape) for a in received
    ]
    expected = Counter({row: count * trainer.args.num_iterations for row, count in _rows(produced).items()})
    assert _rows(received) == expected, "the rows TRL's loss received are not Cliff's token advantages"


def _assert_cell(kind: str, trainer, before: dict[str, torch.Tensor]) -> None:
    _assert_loss_advantages(kind, trainer)
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(after[n].detach(), p) for n, p in before.items()), "no parameter changed"
    logs = trainer.state.log_history
    assert any("loss" in record for record in logs), "no training loss logged"
    if kind == "meds":
        penalised = [r["meds/frac_penalized"] for r in logs if "meds/frac_penalized" in r]
        assert penalised, "no meds/* metrics logged"
        assert max(penalised) > 0, f"MEDS never penalised a rollout: {penalised}"
        assert any(r.get("rewards/meds_penalty/mean", 0) < 0 for r in logs)
    elif kind == "cliff":
        groups = [r["cliff/groups_cliff"] for r in logs if "cliff/groups_cliff" in r]
        assert groups, "no cliff/* metrics logged"
        assert max(groups) > 0, f"Cliff never gave token advantages: {groups}"
        assert trainer.cliff_last_outcome is not None
    else:
        assert not any(k.startswith(("meds/", "cliff/")) for r in logs for k in r)


def run_cell(kind: str, setting_name: str, policy, tmp_path) -> None:
    setting = SETTINGS[setting_name]
    if setting.get("resume"):
        first = _build(kind, policy, tmp_path, setting, max_steps=2)
        first.train()
        assert (tmp_path / "checkpoint-2").is_dir()
        trainer = _build(kind, policy, tmp_path, setting, max_steps=4)
        trainer.loss_advantages = _record_loss_advantages(trainer)
        checkpoint = _trainable(first)
        trainer.train(resume_from_checkpoint=True)
        assert trainer.state.global_step == 4
        if kind == "meds":
            assert trainer.meds_memory.num_rows > first.meds_memory.num_rows  # restored, then grown
        _assert_cell(kind, trainer, checkpoint)
        return
    trainer = _build(kind, policy, tmp_path, setting)
    trainer.loss_advantages = _record_loss_advantages(trainer)
    before = _trainable(trainer)
    trainer.train()
    _assert_cell(kind, trainer, before)
    if setting.get("mask_truncated_completions"):
        _assert_truncation_masked(kind, trainer)


CELLS = [(kind, name) for name in SETTINGS for kind in TRAINERS]


@pytest.mark.parametrize(("kind", "setting_name"), CELLS, ids=[f"{k}-{s}" for k, s in CELLS])
def test_matrix_cell(kind, setting_name, toy_policy_path, tmp_path):
    fast = (kind, setting_name) in FAST_CELLS
    if not fast and MATRIX_MODE in ("", "fast"):
        pytest.skip("full TRL matrix: set HF_MEDS_CLIFF_MATRIX=full")
    if fast and MATRIX_MODE == "rest":
        pytest.skip("a fast cell: the default run has it (HF_MEDS_CLIFF_MATRIX=rest runs the others)")
    run_cell(kind, setting_name, toy_policy_path, tmp_path)
