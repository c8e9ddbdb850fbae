"""Supervised warm-up of the toy policy: random weights -> a policy that solves some but not all problems.

This mirrors the papers' setting (Cliff starts RL from an SFT warm-up) and leaves room for RL to help.
Accuracy on this task stays near zero for hundreds of steps and then climbs within a few hundred, at a
step that varies between runs and model sizes, so training stops on **held-out greedy accuracy** (a validation draw from the train split, never trained on)
as soon as it reaches ``target_greedy_accuracy``, with ``max_steps`` and ``time_budget_s`` as caps. The
stop decision is deterministic for a seed unless the time cap fires (then ``stop_reason`` says so, a
warning is logged, and the cache does not reuse that run). With the defaults (4-layer Qwen3, hidden 64)
validation greedy accuracy climbs from ~5 % at step 600 to 50 % at step 1125 (seed 0); measured: 392 s of
training plus 10 s of final evaluation with one thread on a 2-core machine shared with other jobs
(load ~3), test split greedy 39 %, sampled pass@1 27 %, pass@8 71 %.

The result is cached on disk under ``$HF_MEDS_CLIFF_CACHE/toy/<key>`` (default root
``~/.cache/hf_meds_cliff``), the key hashing every setting and :data:`WARMUP_CODE_VERSION`. The cache, the
training loop and the stop rule are the warm-up engine's (:mod:`hf_meds_cliff.toy.warmup_engine`), which the code
and Qwen-tokenizer worlds configure too; this module is the toy world's part: its settings, data and evaluation.
The folder holds the model, the tokenizer, a ``generation_config.json`` with ``do_sample: true`` and
``warmup_metrics.json`` (steps, seconds, stop reason, greedy accuracy, sampled pass@1 and pass@8 on the test
split).

CLI::

    python -m hf_meds_cliff.toy.warmup --output_dir runs/toy-policy
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .model import ToyModelConfig, build_toy_model, toy_generation_config
from .task import ToyProblem, ToyTaskConfig, iter_problems
from .tokenizer import TOKENIZER_VERSION, build_toy_tokenizer
from .traps import TRAPS, iter_trapped_training_problems

# The engine's names, importable from here as before the engine had its own module.
from .warmup_engine import (  # noqa: F401
    CACHE_ENV_VARIABLE,
    METRICS_FILE,
    POSITIVE_SETTINGS,
    WarmupLoopResult,
    WarmupSchedule,
    _learning_rate_factor,
    build_cached,
    build_warmup,
    check_settings_names,
    default_cache_root,
    draw,
    require_positive,
    run_warmup,
    sampled_pass_metrics,
    settings_cache_key,
    supervised_warmup_loop,
    warmup_main,
)

logger = logging.getLogger(__name__)

WARMUP_CODE_VERSION = 1
"""Bumped whenever the warm-up's code changes its result (part of the cache key)."""

POLICY_ENV_VARIABLE = "HF_MEDS_CLIFF_TOY_POLICY"


@dataclass(frozen=True)
class WarmupSettings(WarmupSchedule):
    """Everything that determines a toy warm-up's result (hashed into its cache key, except the time cap): the
    engine's schedule (:class:`~hf_meds_cliff.toy.warmup_engine.WarmupSchedule`, whose defaults are this world's),
    the task, the model and the traps."""

    task: ToyTaskConfig = field(default_factory=ToyTaskConfig, metadata={"help": "Task difficulty."})
    model: ToyModelConfig = field(default_factory=ToyModelConfig, metadata={"help": "Model shape."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the final metrics."})

    trap_rate: float = field(
        default=0.0,
        metadata={
            "help": "Share of trap-eligible training problems taught with a trapped solution (the mechanism world, "
            "see hf_meds_cliff.toy.traps); 0 = the plain toy world (then neither trap field enters the cache key)."
        },
    )
    traps: tuple[str, ...] = field(default=TRAPS, metadata={"help": "Trap kinds used when trap_rate > 0."})

    def __post_init__(self) -> None:
        object.__setattr__(self, "traps", tuple(self.traps))
        if not 0.0 <= self.trap_rate <= 1.0 or any(t not in TRAPS for t in self.traps):
            raise ValueError(
                f"Need trap_rate in [0, 1] and traps from {TRAPS}, got {self.trap_rate}, {self.traps}."
            )
        super().__post_init__()

    CODE_VERSION: ClassVar[int] = WARMUP_CODE_VERSION

    def problems(self, split: str, **stream: Any) -> Iterator[ToyProblem]:
        """This world's problem stream of ``split`` (:func:`~hf_meds_cliff.toy.iter_problems`)."""
        return iter_problems(split, self.seed, self.task, **stream)

    def training_problems(self, excluded: frozenset[str]) -> Iterator[ToyProblem]:
        """The warm-up's training stream: fresh train problems, trapped at ``trap_rate``, never an ``excluded``
        question."""
        return iter_trapped_training_problems(
            self.seed, self.task, self.trap_rate, self.traps, exclude=excluded, stream_name="warmup"
        )

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["task"] = self.task.to_dict()
        values["model"] = self.model.to_dict()
        values["traps"] = list(self.traps)
        if self.trap_rate == 0.0:  # the plain toy world keeps the cache key it had before traps existed
            del values["trap_rate"], values["traps"]
        return values

    def cache_key(self) -> str:
        return settings_cache_key(self.to_dict(), WARMUP_CODE_VERSION, TOKENIZER_VERSION)


def _policy_folder(variable: str, build: Callable[[], Path], cli_options: str) -> Path:
    """The warm-up folder named by the environment variable ``variable`` (checked: it must hold
    ``warmup_metrics.json``), else ``build()``."""
    chosen = os.environ.get(variable)
    if not chosen:
        return build()
    path = Path(chosen).expanduser()
    if not (path / METRICS_FILE).is_file():
        raise ValueError(
            f"{variable}={chosen!r} is not a warmed-up toy policy (no {METRICS_FILE} in it); write one with "
            f"`python -m hf_meds_cliff.toy.warmup {cli_options.format(folder=chosen)}`, or unset the variable."
        )
    return path


def toy_policy(seed: int = 0) -> Path:
    """The folder the model name ``toy`` stands for: ``$HF_MEDS_CLIFF_TOY_POLICY`` when set (a warm-up written with
    ``--output_dir``, e.g. from another seed or on another machine; ``seed`` is then not used), else the cached
    warm-up of ``seed`` (:func:`warmup_toy_model`, built on first use).

    Where the warm-up stops differs between machines, so pointing the variable at another warm-up runs the scripts
    and the test suite against another toy policy.
    """
    return _policy_folder(
        POLICY_ENV_VARIABLE, lambda: warmup_toy_model(seed=seed), "--output_dir {folder} --seed 1"
    )


VLLM_POLICY_ENV_VARIABLE = "HF_MEDS_CLIFF_VLLM_TOY_POLICY"

VLLM_TOY_MODEL = ToyModelConfig(head_dim=32)
"""The toy shape vLLM accepts: vLLM's CPU attention takes head sizes 32, 64, 80, ... (head_dim 16 fails with
``Unsupported CPU attention configuration``) and its GPU FlashAttention backend lists 32, 64, 96, 128, ... The
studies' policy keeps head_dim 16 (its results stay reproducible); this variant only widens the heads."""

VLLM_TOY_WARMUP = {"max_steps": 400, "target_greedy_accuracy": 0.2}
"""A short warm-up for the vLLM variant: the vLLM lane and ``scripts/gpu_smoke.py`` need a policy that emits
``\\boxed{}`` answers and gets some right (mixed groups), not the studies' 50 % greedy accuracy."""


def vllm_toy_policy(seed: int = 0) -> Path:
    """The folder of the toy policy with head_dim 32 (:data:`VLLM_TOY_MODEL`), which vLLM can load:
    ``$HF_MEDS_CLIFF_VLLM_TOY_POLICY`` when set, else the cached warm-up of ``seed`` (built on first use, a few
    CPU minutes, with :data:`VLLM_TOY_WARMUP`; cached beside the studies' policy under its own key)."""
    return _policy_folder(
        VLLM_POLICY_ENV_VARIABLE,
        lambda: warmup_toy_model(seed=seed, model_config=VLLM_TOY_MODEL, **VLLM_TOY_WARMUP),
        "--vllm --output_dir {folder}",
    )


def warmup_toy_model(
    output_dir: str | Path | None = None,
    *,
    seed: int = 0,
    task_config: ToyTaskConfig | None = None,
    model_config: ToyModelConfig | None = None,
    max_steps: int = 1500,
    time_budget_s: float = 900.0,
    target_greedy_accuracy: float = 0.5,
    batch_size: int = 32,
    learning_rate: float = 3e-3,
    num_test_problems: int = 200,
    num_samples: int = 8,
    num_threads: int | None = None,
    **settings: Any,
) -> Path:
    """Warm up the toy policy (or reuse a cached one) and return its folder.

    Args:
        output_dir: where to put the policy. None: the cache folder ``<cache root>/toy/<key>``. A folder that
            already holds a warm-up with the same settings is reused; any other non-empty folder is an error.
        seed, task_config, model_config, max_steps, time_budget_s, target_greedy_accuracy, batch_size,
        learning_rate, num_test_problems, num_samples, **settings: fields of :class:`WarmupSettings`.
        num_threads: torch CPU threads while training (restored afterwards); default 1 (see
            ``_torch_threads``). Not part of the cache key: losses were bit-identical with 1 and 2 threads.

    Returns:
        The folder, loadable with ``AutoModelForCausalLM.from_pretrained`` and
        ``AutoTokenizer.from_pretrained`` (set ``padding_side="left"`` after loading).
    """
    check_settings_names(WarmupSettings, settings, "warm-up")
    config = WarmupSettings(
        seed=seed,
        task=task_config or ToyTaskConfig(),
        model=model_config or ToyModelConfig(),
        max_steps=max_steps,
        time_budget_s=time_budget_s,
        target_greedy_accuracy=target_greedy_accuracy,
        batch_size=batch_size,
        learning_rate=learning_rate,
        num_test_problems=num_test_problems,
        num_samples=num_samples,
        **settings,
    )
    return build_warmup(
        config, output_dir, "toy", _train_and_save, num_threads=num_threads, what="toy warm-up"
    )


# ---------------------------------------------------------------------------------------------------
# Batching and evaluation.


def chat_prompts(tokenizer, questions: Sequence[str]) -> list[str]:
    """The chat-templated prompt text of each question (with the assistant generation prompt)."""
    conversations = [[{"role": "user", "content": q}] for q in questions]
    return tokenizer.apply_chat_template(conversations, tokenize=False, add_generation_prompt=True)


def supervised_batch(tokenizer, problems: Sequence[ToyProblem]) -> dict[str, Any]:
    """Right-padded ``input_ids``, ``attention_mask`` (B, T) and ``labels`` (B, T): -100 except on the
    solution tokens and the eos token that ends it."""
    import torch

    prompt_ids = tokenizer(chat_prompts(tokenizer, [p.question for p in problems]), add_special_tokens=False)[
        "input_ids"
    ]
    solution_ids = tokenizer([p.solution for p in problems], add_special_tokens=False)["input_ids"]
    sequences = [
        prompt + solution + [tokenizer.eos_token_id] for prompt, solution in zip(prompt_ids, solution_ids)
    ]
    length = max(len(s) for s in sequences)
    input_ids = torch.full((len(problems), length), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(problems), length), dtype=torch.long)
    labels = torch.full((len(problems), length), -100, dtype=torch.long)
    for row, (prompt, sequence) in enumerate(zip(prompt_ids, sequences)):
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention_mask[row, : len(sequence)] = 1
        labels[row, len(prompt) : len(sequence)] = input_ids[row, len(prompt) : len(sequence)]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


_BOXED_INTEGER = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def boxed_integer(text: str) -> int | None:
    """The integer in the last ``\\boxed{...}`` of ``text``, or None (toy answers are integers, so this
    agrees with the math-verify check of :mod:`hf_meds_cliff.rewards` on toy completions).

    >>> boxed_integer("1 + 2 = 3. The answer is \\\\boxed{3}.")
    3
    >>> boxed_integer("no answer") is None
    True
    """
    matches = _BOXED_INTEGER.findall(text)
    return int(matches[-1]) if matches else None


def generate_completions(
    model,
    tokenizer,
    questions: Sequence[str],
    *,
    num_samples: int = 1,
    do_sample: bool = False,
    temperature: float = 1.0,
    max_new_tokens: int = 96,
    batch_size: int = 512,
    seed: int = 0,
) -> list[list[str]]:
    """``num_samples`` decoded completions per question (greedy when ``do_sample`` is False)."""
    import torch

    tokenizer.padding_side = "left"
    generation_config = toy_generation_config(tokenizer, max_new_tokens=max_new_tokens)
    generation_config.do_sample = do_sample
    if do_sample:
        generation_config.temperature = temperature
    else:  # neutral values: unset ones would be filled from the model's sampling defaults (top_k=0) and warn
        generation_config.temperature, generation_config.top_k, generation_config.top_p = 1.0, 50, 1.0
    prompts = [prompt for prompt in chat_prompts(tokenizer, questions) for _ in range(num_samples)]
    texts: list[str] = []
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        torch.manual_seed(seed)
        for start in range(0, len(prompts), batch_size):
            encoded = tokenizer(
                prompts[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            )
            output = model.generate(**encoded, generation_config=generation_config)
            texts.extend(
                tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
            )
    model.train(was_training)
    return [texts[i * num_samples : (i + 1) * num_samples] for i in range(len(questions))]


def greedy_and_sampled(
    model,
    tokenizer,
    questions: Sequence[str],
    *,
    num_samples: int,
    temperature: float,
    seed: int,
    max_new_tokens: int,
) -> tuple[list[str], list[list[str]]]:
    """One greedy completion per question and ``num_samples`` sampled ones: what the toy and code worlds'
    evaluations judge."""
    greedy = generate_completions(model, tokenizer, questions, seed=seed, max_new_tokens=max_new_tokens)
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
    return [g[0] for g in greedy], samples


def evaluate_policy(
    model,
    tokenizer,
    problems: Sequence[ToyProblem],
    *,
    num_samples: int = 8,
    temperature: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = 96,
) -> dict[str, float]:
    """Greedy accuracy, sampled pass@1 and pass@``num_samples``, the share of problems whose samples are
    mixed (some right, some wrong) and the boxed-answer rate on ``problems``."""
    greedy, samples = greedy_and_sampled(
        model,
        tokenizer,
        [p.question for p in problems],
        num_samples=num_samples,
        temperature=temperature,
        seed=seed,
        max_new_tokens=max_new_tokens,
    )
    sample_answers = [[boxed_integer(s) for s in group] for group in samples]
    correct_counts = [sum(a == p.answer for a in answers) for answers, p in zip(sample_answers, problems)]
    boxed = sum(a is not None for answers in sample_answers for a in answers)
    return sampled_pass_metrics(
        [boxed_integer(g) == p.answer for g, p in zip(greedy, problems)], correct_counts, num_samples
    ) | {"boxed_fraction": boxed / (len(problems) * num_samples)}


def greedy_accuracy(model, tokenizer, problems: Sequence[ToyProblem], max_new_tokens: int = 96) -> float:
    completions = generate_completions(
        model, tokenizer, [p.question for p in problems], max_new_tokens=max_new_tokens
    )
    return sum(boxed_integer(c[0]) == p.answer for c, p in zip(completions, problems)) / len(problems)


# ---------------------------------------------------------------------------------------------------
# Training.


def stream_batches(tokenizer, stream: Iterator[Any], batch_size: int) -> Callable[[], dict[str, Any]]:
    """The warm-up's ``next_batch`` for a world of fresh problems: :func:`supervised_batch` of the next
    ``batch_size`` problems of ``stream`` at each call."""
    return lambda: supervised_batch(tokenizer, draw(stream, batch_size))


def run_stream_warmup(
    settings: Any,
    key: str,
    folder: Path,
    world: str,
    tokenizer,
    accuracy: Callable[..., float],
    evaluate: Callable[..., dict[str, float]],
    **parts: Any,
) -> None:
    """The toy and code worlds' warm-up: the toy model trained on fresh problems with :func:`run_warmup`.

    ``settings.problems(split, **stream_options)`` is the world's problem stream of a split; the validation draw is
    the first ``num_validation_problems`` distinct train problems of the stream ``"warmup-validation"``,
    ``settings.training_problems(excluded questions)`` the training stream without them, the test draw the first
    ``num_test_problems`` of the test split. ``accuracy(model, tokenizer, problems, max_new_tokens)`` is the stop
    rule's held-out greedy accuracy, ``evaluate`` the test-split evaluation; ``parts`` are the rest of
    :func:`run_warmup`'s keywords. The cache key's code version is ``settings.CODE_VERSION``."""
    model = build_toy_model(tokenizer, seed=settings.seed, config=settings.model)
    validation = draw(
        settings.problems("train", unique=True, stream_name="warmup-validation"),
        settings.num_validation_problems,
    )
    training_stream = settings.training_problems(frozenset(p.question for p in validation))
    logger.info(
        "%s warm-up: %d parameters, settings %s", world, sum(p.numel() for p in model.parameters()), key
    )
    run_warmup(
        settings,
        key,
        folder,
        world=world,
        model=model,
        tokenizer=tokenizer,
        next_batch=stream_batches(tokenizer, training_stream, settings.batch_size),
        validation_accuracy=lambda: accuracy(model, tokenizer, validation, settings.max_new_tokens),
        test_problems=lambda: draw(settings.problems("test"), settings.num_test_problems),
        evaluate=evaluate,
        code_version=settings.CODE_VERSION,
        **parts,
    )


def _train_and_save(settings: WarmupSettings, key: str, folder: Path) -> None:
    run_stream_warmup(settings, key, folder, "Toy", build_toy_tokenizer(), greedy_accuracy, evaluate_policy)


def _toy_arguments(parser) -> None:
    parser.add_argument("--max_steps", type=int, default=1500)
    parser.add_argument("--time_budget_s", type=float, default=900.0)
    parser.add_argument("--target_greedy_accuracy", type=float, default=0.5)
    parser.add_argument("--num_test_problems", type=int, default=200)
    parser.add_argument(
        "--vllm",
        action="store_true",
        help="The variant vLLM can load (head_dim 32, a short warm-up: max_steps 400, target greedy accuracy "
        "0.2); --max_steps and --target_greedy_accuracy are then ignored.",
    )


def _toy_settings(args) -> dict[str, Any]:
    schedule = {"max_steps": args.max_steps, "target_greedy_accuracy": args.target_greedy_accuracy}
    return {
        "model_config": VLLM_TOY_MODEL if args.vllm else None,
        "time_budget_s": args.time_budget_s,
        "num_test_problems": args.num_test_problems,
        **(VLLM_TOY_WARMUP if args.vllm else schedule),
    }


def main(argv: Sequence[str] | None = None) -> Path:
    return warmup_main(
        argv,
        "Warm up (or reuse from the cache) the toy policy.",
        warmup_toy_model,
        _toy_arguments,
        _toy_settings,
    )


if __name__ == "__main__":
    main()
