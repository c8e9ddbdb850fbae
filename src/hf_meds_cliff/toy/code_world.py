"""The code world: a tiny Qwen3 warmed up to write the code task's programs (Cliff on code, offline, on CPU).

The task is :mod:`hf_meds_cliff.toy.code_task` (toy chains as stdin programs), the tokenizer the toy world's
character tokenizer with code word tokens (:data:`CODE_WORD_TOKENS`; none spans a line break, so no token straddles
two code units), the model the toy world's tiny Qwen3 (:class:`~hf_meds_cliff.toy.ToyModelConfig`; prompts take <= 35 tokens,
reference completions <= 58), the warm-up the toy world's loop (:func:`hf_meds_cliff.toy.warmup.supervised_warmup_loop`)
and cache (:func:`hf_meds_cliff.toy.warmup.build_cached`, folder ``$HF_MEDS_CLIFF_CACHE/code_world/<key>``).

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

import argparse
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..estimators import pass_at_k
from .code_checker import UndecidableProgram, trace_program
from .code_task import CodeProblem, CodeWorldConfig, iter_code_problems
from .model import ToyModelConfig, build_toy_model
from .tokenizer import TOKENIZER_VERSION, build_toy_tokenizer
from .warmup import (
    METRICS_FILE,
    POSITIVE_SETTINGS,
    _warmup_progress_bar,
    build_warmup,
    check_settings_names,
    generate_completions,
    require_positive,
    settings_cache_key,
    supervised_warmup_loop,
    warmup_metrics,
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
class CodeWarmupSettings:
    """Everything that determines the code world's warm-up (hashed into its cache key, except the time cap)."""

    seed: int = field(
        default=0, metadata={"help": "Seed of the weights, the data streams and the evaluation."}
    )
    world: CodeWorldConfig = field(default_factory=CodeWorldConfig, metadata={"help": "The code task."})
    model: ToyModelConfig = field(
        default_factory=ToyModelConfig, metadata={"help": "Model shape (the toy world's)."}
    )
    batch_size: int = field(default=32, metadata={"help": "Problems per optimizer step (fresh each step)."})
    learning_rate: float = field(default=3e-3, metadata={"help": "Peak AdamW learning rate."})
    lr_warmup_steps: int = field(
        default=30, metadata={"help": "Linear warm-up steps before the cosine decay."}
    )
    min_lr_ratio: float = field(
        default=0.1, metadata={"help": "Cosine floor as a fraction of the peak rate."}
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm."})
    max_steps: int = field(
        default=2000, metadata={"help": "Step cap (also the length of the cosine schedule)."}
    )
    time_budget_s: float = field(
        default=1200.0,
        metadata={
            "help": "Wall-clock cap on training in seconds; a run stopped by it is not reused from the cache."
        },
    )
    target_greedy_accuracy: float = field(
        default=0.5, metadata={"help": "Stop once greedy accuracy on the validation draw reaches this."}
    )
    eval_start_step: int = field(
        default=300, metadata={"help": "First step at which the stop rule is checked."}
    )
    eval_every_steps: int = field(
        default=5,
        metadata={
            "help": "Steps between stop-rule checks (accuracy leaps from ~35 %% to ~90 %% within 25 steps, so check "
            "often to stop in the half-solved range)."
        },
    )
    num_validation_problems: int = field(
        default=128, metadata={"help": "Validation problems for the stop rule."}
    )
    num_test_problems: int = field(
        default=100, metadata={"help": "Test-split problems for the final metrics."}
    )
    num_samples: int = field(default=8, metadata={"help": "Samples per test problem for pass@1 / pass@k."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the final metrics."})
    max_new_tokens: int = field(
        default=72,
        metadata={
            "help": "Generation cap of the evaluations (reference completions take <= 58 tokens with eos)."
        },
    )

    def __post_init__(self) -> None:
        require_positive(self, POSITIVE_SETTINGS)
        if not self.learning_rate > 0 or not self.time_budget_s > 0 or not self.temperature > 0:
            raise ValueError(
                f"learning_rate ({self.learning_rate}), time_budget_s ({self.time_budget_s}) and temperature "
                f"({self.temperature}) must be > 0."
            )
        if not 0.0 <= self.target_greedy_accuracy <= 1.0:
            raise ValueError(f"target_greedy_accuracy must be in [0, 1], got {self.target_greedy_accuracy}.")

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


def evaluate_code_policy(
    model,
    tokenizer,
    problems: Sequence[CodeProblem],
    *,
    num_samples: int = 8,
    temperature: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = 72,
    use_sandbox: bool = True,
) -> dict[str, float]:
    """Greedy accuracy, sampled pass@1 / pass@``num_samples``, the share of mixed groups and the fenced-program
    rate, judged by the sandbox (``use_sandbox``, the reward's check) or the checker's pure evaluation; with the
    sandbox, ``static_agreement`` is the share of samples where the pure evaluation agreed with it."""
    questions = [p.question for p in problems]
    greedy = [
        g[0]
        for g in generate_completions(model, tokenizer, questions, seed=seed, max_new_tokens=max_new_tokens)
    ]
    samples = generate_completions(
        model,
        tokenizer,
        questions,
        num_samples=num_samples,
        do_sample=True,
        temperature=temperature,
        seed=seed,
        max_new_tokens=max_new_tokens,
    )
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
    n = len(problems)
    return {
        "greedy_accuracy": sum(greedy_correct) / n,
        "pass@1": sum(pass_at_k(num_samples, c, 1) for c in counts) / n,
        f"pass@{num_samples}": sum(pass_at_k(num_samples, c, num_samples) for c in counts) / n,
        "mixed_group_fraction": sum(0 < c < num_samples for c in counts) / n,
        "program_fraction": sum(completion_program(s) is not None for s in flat_samples) / len(flat_samples),
        **metrics,
    }


# ---------------------------------------------------------------------------------------------------
# Training.


def _train_and_save(settings: CodeWarmupSettings, key: str, folder: Path) -> None:
    tokenizer = build_code_tokenizer()
    model = build_toy_model(tokenizer, seed=settings.seed, config=settings.model)
    validation_stream = iter_code_problems(
        "train", settings.seed, settings.world, unique=True, stream_name="warmup-validation"
    )
    validation = [next(validation_stream) for _ in range(settings.num_validation_problems)]
    training_stream = iter_code_problems(
        "train",
        settings.seed,
        settings.world,
        exclude=frozenset(p.question for p in validation),
        stream_name="warmup",
    )
    logger.info(
        "Code-world warm-up: %d parameters, settings %s", sum(p.numel() for p in model.parameters()), key
    )
    progress = _warmup_progress_bar(settings.max_steps, settings.eval_start_step, "Code-world policy warm-up")
    loop = supervised_warmup_loop(
        model,
        tokenizer,
        settings,
        training_stream,
        lambda: greedy_code_accuracy(model, tokenizer, validation, settings.max_new_tokens),
        progress,
    )
    test_stream = iter_code_problems("test", settings.seed, settings.world)
    test_problems = [next(test_stream) for _ in range(settings.num_test_problems)]
    eval_start = time.perf_counter()
    with progress:
        progress.set_description(
            f"Code-world warm-up: {loop.stop_reason} at step {loop.steps}; evaluating pass@k on the test split"
        )
        test_metrics = evaluate_code_policy(
            model,
            tokenizer,
            test_problems,
            num_samples=settings.num_samples,
            temperature=settings.temperature,
            seed=settings.seed,
            max_new_tokens=settings.max_new_tokens,
        )
        progress.set_description(f"Code-world warm-up done ({loop.stop_reason} at step {loop.steps})")
        progress.set_postfix_str(f"test pass@1 {test_metrics['pass@1']:.2f}", refresh=False)
    final_eval_seconds = time.perf_counter() - eval_start
    if loop.stop_reason != "target_greedy_accuracy":
        logger.warning(
            "Code-world warm-up stopped by %s at step %d before reaching validation greedy accuracy %.2f "
            "(test pass@1 %.3f).",
            loop.stop_reason,
            loop.steps,
            settings.target_greedy_accuracy,
            test_metrics["pass@1"],
        )
    metrics = warmup_metrics(
        settings,
        key,
        CODE_WORLD_CODE_VERSION,
        loop,
        final_eval_seconds,
        model,
        test_problems,
        test_metrics,
        judged_by="sandbox",
    )
    logger.info(
        "Code-world warm-up done: %s",
        {k: metrics[k] for k in ("steps", "stop_reason", "train_seconds")} | test_metrics,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description="Warm up (or reuse from the cache) the code world's policy.")
    parser.add_argument("--output_dir", default=None, help="Destination folder (default: the cache folder).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_threads", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = warmup_code_world(args.output_dir, seed=args.seed, num_threads=args.num_threads)
    logger.info(
        "Policy in %s; test split: %s", path, json.loads((path / METRICS_FILE).read_text())["test_split"]
    )
    return path


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
