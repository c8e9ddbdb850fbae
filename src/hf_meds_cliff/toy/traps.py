"""Systematic traps for the toy task: the mechanism world of ``docs/mechanism_study.md``.

A trap is a deterministic, human-like mistake at one step of a chain. The warm-up of the mechanism world writes
the trapped solution for a share of the problems that have a trap-eligible step, so the policy learns the trap
as a minority mode: on such a problem its wrong answers concentrate on one value (the setting in which MEDS's
error collapse can happen), and the first mistake is a located step after a correct prefix (Cliff's setting).

Traps (the first eligible step of a chain is trapped, later steps are then computed correctly from the wrong
value, as a student who made one slip would):

* ``carry``: ``a + b`` with non-negative operands whose units digits sum to 10 or more, added digit by digit
  without the carry: ``17 + 25 = 32``.
* ``sign``: ``a - b`` with a negative result, written without its sign: ``5 - 12 = 7``.
* ``bracket``: ``x * m`` right after a ``+``/``-`` step, i.e. the question's brackets ignored (the Cliff paper's
  ``1 − (2 + 3) × 4`` kind of slip): for ``(6 + 2) * 3`` the step reads ``8 * 3 = 12`` (6 + 2 · 3).

>>> p = ToyProblem.from_operations(6, (("+", 2), ("*", 3), ("-", 4)))
>>> trapped_solution(p)
('6 + 2 = 8. 8 * 3 = 12. 12 - 4 = 8. The answer is \\\\boxed{8}.', 8, 1)
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .task import ToyProblem, ToyTaskConfig, answer_sentence, apply_operation, iter_problems

TRAPS = ("carry", "sign", "bracket")


def _add_without_carry(left: int, right: int) -> int:
    digits, place = 0, 1
    while left or right:
        digits += ((left % 10 + right % 10) % 10) * place
        left, right, place = left // 10, right // 10, place * 10
    return digits


def trap_value(problem: ToyProblem, index: int, traps: tuple[str, ...] = TRAPS) -> int | None:
    """The trapped result of step ``index`` of ``problem`` (correct left operand), or None if no trap applies."""
    step = problem.steps[index]
    if "carry" in traps and step.op == "+" and step.left >= 0 and (step.left % 10 + step.right % 10) >= 10:
        return _add_without_carry(step.left, step.right)
    if "sign" in traps and step.op == "-" and step.result < 0:
        return -step.result
    if "bracket" in traps and step.op == "*" and index > 0:
        previous = problem.steps[index - 1]
        if previous.op in ("+", "-"):
            return apply_operation(previous.left, previous.op, previous.right * step.right)
    return None


def first_trap_index(problem: ToyProblem, traps: tuple[str, ...] = TRAPS) -> int | None:
    """Index of the first trap-eligible step, or None."""
    for index in range(len(problem.steps)):
        value = trap_value(problem, index, traps)
        if value is not None and value != problem.steps[index].result:
            return index
    return None


def trapped_solution(problem: ToyProblem, traps: tuple[str, ...] = TRAPS) -> tuple[str, int, int] | None:
    """``(solution text, wrong answer, index of the trapped step)`` of the first trap, or None."""
    index = first_trap_index(problem, traps)
    if index is None:
        return None
    sentences = [step.sentence for step in problem.steps[:index]]
    step = problem.steps[index]
    value = trap_value(problem, index, traps)
    sentences.append(f"{step.left} {step.op} {step.right} = {value}.")
    for op, right in problem.operations[index + 1 :]:
        result = apply_operation(value, op, right)
        sentences.append(f"{value} {op} {right} = {result}.")
        value = result
    sentences.append(answer_sentence(value))
    return " ".join(sentences), value, index


def iter_trapped_training_problems(
    seed: int,
    config: ToyTaskConfig,
    trap_rate: float,
    traps: tuple[str, ...] = TRAPS,
    exclude: frozenset[str] = frozenset(),
    stream_name: str = "warmup",
) -> Iterator[ToyProblem]:
    """The warm-up's training stream with the trapped solution on a ``trap_rate`` share of eligible problems."""
    if not 0.0 <= trap_rate <= 1.0:
        raise ValueError(f"trap_rate must be in [0, 1], got {trap_rate}.")
    rng = random.Random(f"hf_meds_cliff.toy.traps:{seed}:{stream_name}")
    for problem in iter_problems("train", seed, config, exclude=exclude, stream_name=stream_name):
        trapped = trapped_solution(problem, traps)
        if trapped is not None and rng.random() < trap_rate:
            problem = ToyProblem(
                problem.question, trapped[0], problem.answer, problem.first_operand, problem.operations
            )
        yield problem


def trap_problems(
    split: str,
    num_rows: int,
    seed: int = 0,
    config: ToyTaskConfig | None = None,
    traps: tuple[str, ...] = TRAPS,
    stream_name: str = "",
) -> list[ToyProblem]:
    """``num_rows`` distinct problems of ``split`` that have a trap-eligible step."""
    stream = iter_problems(split, seed, config, unique=True, stream_name=stream_name)
    problems: list[ToyProblem] = []
    while len(problems) < num_rows:
        problem = next(stream)
        if first_trap_index(problem, traps) is not None:
            problems.append(problem)
    return problems
