"""The evaluation problem, below both the math registry (:mod:`.benchmarks`) and the code one
(:mod:`.code_benchmarks`), which build it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EvalProblem"]


@dataclass(frozen=True)
class EvalProblem:
    """One evaluation problem.

    Attributes:
        benchmark: the benchmark's name (registry name, or the file stem of a local file).
        problem_id: stable id (the dataset's id column, else a hash of the problem text).
        prompt: chat messages given to the model.
        answer: the ground-truth answer (bare, e.g. ``"\\frac{1}{2}"``); empty for code problems.
        domain: ``"math"`` (scored by math-verify against ``answer``) or ``"code"`` (scored by running the
            completion's program against ``tests`` in the sandbox).
        statement: the problem's text as the dataset has it (before the prompt template), for matching a samples
            file's ``problem`` field; ``None`` where unknown.
        tests: code only: the parsed tests (:class:`hf_meds_cliff.code.CodeTests`).
        program_prefix: code only: text put before the extracted program (HumanEval's prompt imports).
        entry_point: code only: the function a completion must define (HumanEval); a code block that does not
            define it is taken as the body continuing ``continuation_prefix``.
        continuation_prefix: code only: the starter code a body-only completion continues (HumanEval's prompt).
    """

    benchmark: str
    problem_id: str
    prompt: list[dict[str, str]]
    answer: str
    domain: str = "math"
    statement: str | None = field(default=None, compare=False, repr=False)
    tests: Any = field(default=None, compare=False, repr=False)
    program_prefix: str | None = field(default=None, repr=False)
    entry_point: str | None = None
    continuation_prefix: str | None = field(default=None, repr=False)
