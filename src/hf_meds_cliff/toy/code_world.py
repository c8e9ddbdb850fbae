"""The code world: a tiny Qwen3 warmed up to write the code task's programs (Cliff on code, offline, on CPU).

The task is :mod:`hf_meds_cliff.toy.code_task` (toy chains as stdin programs), the tokenizer the toy world's
character tokenizer with code word tokens (:data:`CODE_WORD_TOKENS`; none spans a line break, so no token straddles
two code units), the model the toy world's tiny Qwen3 (:class:`~hf_meds_cliff.toy.ToyModelConfig`; prompts take <= 35 tokens,
reference completions <= 58), the warm-up the engine's (:mod:`hf_meds_cliff.toy.warmup_engine`: the toy world's loop,
stop rule and cache, folder ``$HF_MEDS_CLIFF_CACHE/code_world/<key>``).

The stop rule checks held-out greedy accuracy with the checker's pure evaluation
(:func:`program_passes`: the program's output on every test equals the expected one; a program the evaluation
cannot decide counts as wrong), which never executes model output; the final test-split metrics run every sampled
program through the sandbox of :mod:`hf_meds_cliff.code` (the reward's own check) and also record how often the
pure evaluation agreed with it.

Measured (seed 0, one torch thread, a 2-core machine shared with other jobs, load 9-12): validation greedy accuracy
climbs slowly to ~35 % by step 400, then leaps (to 92 % by step 425 in a run checked every 25 steps), so the stop
rule checks every 5 steps from step 300; it stopped at step 405 (52 %) after 317 s of training (47 s of it stop-rule
checks; 144 s in a run on a less loaded machine, same stop step) plus 132 s for the final evaluation. Test split,
100 problems x 8 samples, judged in the sandbox: greedy 50 %, pass@1 28.5 %, pass@8 83 %, 82 % of the groups
mixed, every sample a fenced program, and the pure evaluation agreed with the sandbox on all 800 samples.

CLI::

    python -m hf_meds_cliff.toy.code_world --output_dir runs/code-world
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .code_checker import UndecidableProgram, trace_program
from .code_task import CodeProblem, CodeWorldConfig, iter_code_problems
from .model import ToyModelConfig
from .tokenizer import TOKENIZER_VERSION, build_toy_tokenizer
from .warmup import generate_completions, greedy_and_sampled, run_stream_warmup
from .warmup_engine import (
    WarmupSchedule,
    build_warmup,
    check_settings_names,
    sampled_pass_metrics,
    settings_cache_key,
    warmup_main,
)

logger = logging.getLogger(__name__)

CODE_WORLD_CODE_VERSION = 1
"""Bumped whenever this module's code changes its result (part of the cache key)."""

CODE_WORD_TOKENS = (
    "user",
    "assistant",
    "system",
    "Read ",
    "an integer ",
    "integers ",
    " from one line of standard input and print ",
    " from standard input and print ",
    ", then apply ",
    " operations.",
    "```python",
    "```",
    " = int(input())",
    " = map(int, input().split())",
    "print(",
    "input()",
    "int(",
    "map(",
    ".split()",
)
"""Multi-character tokens of the code world's tokenizer (none holds a line break)."""


def build_code_tokenizer(save_directory: str | Path | None = None):
    """The toy character tokenizer with :data:`CODE_WORD_TOKENS` (decoding is exact, as in the toy world).

    >>> tok = build_code_tokenizer()
    >>> text = "Read a.\\n```python\\na = int(input())\\nprint(a)\\n```"
    >>> tok.decode(tok(text)["input_ids"]) == text
    True
    """
    return build_toy_tokenizer(save_directory, word_tokens=CODE_WORD_TOKENS)


@dataclass(frozen=True)
class CodeWarmupSettings(
    WarmupSchedule,
    defaults={
        "max_steps": 2000,
        "time_budget_s": (
            1200.0,
            "Wall-clock cap on training in seconds; a run stopped by it is not reused from the cache.",
        ),
        "eval_start_step": 300,
        "eval_every_steps": (
            5,
            (
                "Steps between stop-rule checks (accuracy leaps from ~35 %% to ~90 %% within 25 steps, so check "
                "often to stop in the half-solved range)."
            ),
        ),
        "num_test_problems": 100,
        "max_new_tokens": (
            72,
            "Generation cap of the evaluations (reference completions take <= 58 tokens with eos).",
        ),
    },
):
    """Everything that determines the code world's warm-up (hashed into its cache key, except the time cap): the
    engine's schedule (:class:`~hf_meds_cliff.toy.warmup_engine.WarmupSchedule`, with the defaults above), the code
    task and the model."""

    world: CodeWorldConfig = field(default_factory=CodeWorldConfig, metadata={"help": "The code task."})
    model: ToyModelConfig = field(
        default_factory=ToyModelConfig, metadata={"help": "Model shape (the toy world's)."}
    )
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the final metrics."})

    CODE_VERSION: ClassVar[int] = CODE_WORLD_CODE_VERSION

    def problems(self, split: str, **stream: Any) -> Iterator[CodeProblem]:
        """This world's problem stream of ``split`` (:func:`~hf_meds_cliff.toy.code_task.iter_code_problems`)."""
        return iter_code_problems(split, self.seed, self.world, **stream)

    def training_problems(self, excluded: frozenset[str]) -> Iterator[CodeProblem]:
        """The warm-up's training stream: fresh train problems, never an ``excluded`` question."""
        return iter_code_problems("train", self.seed, self.world, exclude=excluded, stream_name="warmup")

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["world"] = self.world.to_dict()
        values["model"] = self.model.to_dict()
        return values

    def cache_key(self) -> str:
        return settings_cache_key(
            self.to_dict(), CODE_WORLD_CODE_VERSION, [TOKENIZER_VERSION, list(CODE_WORD_TOKENS)]
        )


def warmup_code_world(
    output_dir: str | Path | None = None, *, num_threads: int | None = None, **settings: Any
) -> Path:
    """Warm up the code world's policy (or reuse the cached one) and return its folder.

    Args:
        output_dir: destination; None = ``<cache root>/code_world/<key>``.
        num_threads: torch CPU threads while training (default 1; not part of the cache key).
        **settings: fields of :class:`CodeWarmupSettings`.

    Returns:
        A folder loadable with ``AutoModelForCausalLM`` / ``AutoTokenizer`` (set ``padding_side="left"`` after
        loading), with ``warmup_metrics.json``.
    """
    check_settings_names(CodeWarmupSettings, settings, "code-world warm-up")
    config = CodeWarmupSettings(**settings)
    return build_warmup(
        config, output_dir, "code_world", _train_and_save, num_threads=num_threads, what="code-world warm-up"
    )


# ---------------------------------------------------------------------------------------------------
# Checking completions.


def completion_program(completion: str) -> str | None:
    """The program of a completion, as the code reward reads it (:func:`hf_meds_cliff.code.extract_program`)."""
    from ..code import extract_program

    return extract_program(completion)


def program_passes(problem: CodeProblem, completion: str) -> bool:
    """Whether the completion's program prints the expected output on every test, by the checker's pure
    evaluation (never executed; a program outside the checker's vocabulary counts as failing).

    >>> from hf_meds_cliff.toy.code_task import parse_code_question
    >>> p = parse_code_question("Read an integer a from standard input and print a + 2.")
    >>> program_passes(p, p.solution), program_passes(p, p.solution.replace("a + 2", "a + 3"))
    (True, False)
    """
    program = completion_program(completion)
    if program is None:
        return False
    for stdin, expected in problem.tests:
        trace = trace_program(program, stdin)
        if (
            trace.error is not None
            or trace.unsupported is not None
            or trace.output.split() != expected.split()
        ):
            return False
    return True


def greedy_code_accuracy(
    model, tokenizer, problems: Sequence[CodeProblem], max_new_tokens: int = 72
) -> float:
    completions = generate_completions(
        model, tokenizer, [p.question for p in problems], max_new_tokens=max_new_tokens
    )
    return sum(program_passes(p, c[0]) for p, c in zip(problems, completions)) / len(problems)


def sandbox_passes(problems: Sequence[CodeProblem], completions: Sequence[str]) -> list[bool]:
    """Whether each completion passes its problem's tests in the sandbox of :mod:`hf_meds_cliff.code`."""
    from ..code import extract_program, run_tests_batch

    jobs = [(extract_program(c), p.tests_column()) for p, c in zip(problems, completions)]
    return [result.passed for result in run_tests_batch(jobs)]


CODE_EVALUATION_DEFAULTS = {"num_samples": 8, "temperature": 1.0, "seed": 0, "max_new_tokens": 72}
"""The sampling of :func:`evaluate_code_policy` unless given (reference completions take <= 58 tokens with eos)."""


def evaluate_code_policy(
    model, tokenizer, problems: Sequence[CodeProblem], *, use_sandbox: bool = True, **sampling: Any
) -> dict[str, float]:
    """Greedy accuracy, sampled pass@1 / pass@``num_samples``, the share of mixed groups and the fenced-program
    rate, judged by the sandbox (``use_sandbox``, the reward's check) or the checker's pure evaluation; with the
    sandbox, ``static_agreement`` is the share of samples where the pure evaluation agreed with it.

    ``sampling``: ``num_samples``, ``temperature``, ``seed``, ``max_new_tokens`` of
    :func:`~hf_meds_cliff.toy.warmup.greedy_and_sampled` (defaults :data:`CODE_EVALUATION_DEFAULTS`)."""
    sampling = {**CODE_EVALUATION_DEFAULTS, **sampling}
    num_samples = sampling["num_samples"]
    greedy, samples = greedy_and_sampled(model, tokenizer, [p.question for p in problems], **sampling)
    flat_problems = [p for p in problems for _ in range(num_samples)]
    flat_samples = [s for group in samples for s in group]
    static = [program_passes(p, s) for p, s in zip(flat_problems, flat_samples)]
    metrics: dict[str, float] = {}
    if use_sandbox:
        sandbox = sandbox_passes([*problems, *flat_problems], [*greedy, *flat_samples])
        greedy_correct, sample_correct = sandbox[: len(problems)], sandbox[len(problems) :]
        metrics["static_agreement"] = sum(a == b for a, b in zip(static, sample_correct)) / len(static)
    else:
        greedy_correct = [program_passes(p, g) for p, g in zip(problems, greedy)]
        sample_correct = static
    counts = [sum(sample_correct[i * num_samples : (i + 1) * num_samples]) for i in range(len(problems))]
    return {
        **sampled_pass_metrics(greedy_correct, counts, num_samples),
        "program_fraction": sum(completion_program(s) is not None for s in flat_samples) / len(flat_samples),
        **metrics,
    }


# ---------------------------------------------------------------------------------------------------
# Training.


def _train_and_save(settings: CodeWarmupSettings, key: str, folder: Path) -> None:
    tokenizer = build_code_tokenizer()
    sandboxed = {"judged_by": "sandbox"}  # the test split is judged in the sandbox, as the reward judges
    run_stream_warmup(
        settings,
        key,
        folder,
        "Code-world",
        tokenizer,
        greedy_code_accuracy,
        evaluate_code_policy,
        test_split=sandboxed,
    )


def main(argv: Sequence[str] | None = None) -> Path:
    return warmup_main(argv, "Warm up (or reuse from the cache) the code world's policy.", warmup_code_world)


__all__ = [
    "CODE_WORD_TOKENS",
    "CodeWarmupSettings",
    "UndecidableProgram",
    "build_code_tokenizer",
    "completion_program",
    "evaluate_code_policy",
    "program_passes",
    "warmup_code_world",
]

if __name__ == "__main__":
    main()
