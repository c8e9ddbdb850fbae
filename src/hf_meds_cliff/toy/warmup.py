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
``~/.cache/hf_meds_cliff``), the key hashing every setting and :data:`WARMUP_CODE_VERSION`. It is written
into a temporary sibling folder and renamed into place, under a file lock, so a crash never leaves a half
cache and concurrent callers build it once. The folder holds the model, the tokenizer, a
``generation_config.json`` with ``do_sample: true`` and ``warmup_metrics.json`` (steps, seconds, stop
reason, greedy accuracy, sampled pass@1 and pass@8 on the test split).

CLI::

    python -m hf_meds_cliff.toy.warmup --output_dir runs/toy-policy
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..estimators import pass_at_k
from .model import ToyModelConfig, build_toy_model, toy_generation_config
from .task import ToyProblem, ToyTaskConfig, iter_problems
from .tokenizer import TOKENIZER_VERSION, build_toy_tokenizer
from .traps import TRAPS, iter_trapped_training_problems

logger = logging.getLogger(__name__)

WARMUP_CODE_VERSION = 1
"""Bumped whenever the warm-up's code changes its result (part of the cache key)."""

METRICS_FILE = "warmup_metrics.json"
CACHE_ENV_VARIABLE = "HF_MEDS_CLIFF_CACHE"
POLICY_ENV_VARIABLE = "HF_MEDS_CLIFF_TOY_POLICY"


POSITIVE_SETTINGS = (
    "batch_size",
    "max_steps",
    "eval_every_steps",
    "num_validation_problems",
    "num_test_problems",
    "num_samples",
    "max_new_tokens",
)
"""The whole-number settings of the toy and code worlds' warm-ups that must be >= 1."""


@dataclass(frozen=True)
class WarmupSettings:
    """Everything that determines a warm-up's result (hashed into its cache key, except the time cap)."""

    seed: int = field(
        default=0, metadata={"help": "Seed of the weights, the data streams and the evaluation."}
    )
    task: ToyTaskConfig = field(default_factory=ToyTaskConfig, metadata={"help": "Task difficulty."})
    model: ToyModelConfig = field(default_factory=ToyModelConfig, metadata={"help": "Model shape."})
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
        default=1500, metadata={"help": "Step cap (also the length of the cosine schedule)."}
    )
    time_budget_s: float = field(
        default=900.0,
        metadata={
            "help": "Wall-clock safety cap on training, in seconds (an idle 2-core machine stops on the "
            "accuracy target in about 2-3 minutes); a run stopped by it is not reused from the cache."
        },
    )
    target_greedy_accuracy: float = field(
        default=0.5, metadata={"help": "Stop once greedy accuracy on the validation draw reaches this."}
    )
    eval_start_step: int = field(
        default=200, metadata={"help": "First step at which the stop rule is checked."}
    )
    eval_every_steps: int = field(default=25, metadata={"help": "Steps between stop-rule checks."})
    num_validation_problems: int = field(
        default=128, metadata={"help": "Validation problems for the stop rule."}
    )
    num_test_problems: int = field(
        default=200, metadata={"help": "Test-split problems for the final metrics."}
    )
    num_samples: int = field(default=8, metadata={"help": "Samples per test problem for pass@1 / pass@k."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the final metrics."})
    max_new_tokens: int = field(
        default=64,
        metadata={
            "help": "Generation length cap of the evaluations (default-task solutions take <= 54 tokens "
            "with eos; raise it with more steps)."
        },
    )

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
        require_positive(self, POSITIVE_SETTINGS)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
        if not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s must be > 0 seconds, got {self.time_budget_s}.")
        if not 0.0 <= self.target_greedy_accuracy <= 1.0:
            raise ValueError(f"target_greedy_accuracy must be in [0, 1], got {self.target_greedy_accuracy}.")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}.")

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


def settings_cache_key(settings: dict[str, Any], code: Any, tokenizer: Any) -> str:
    """The cache key of a warm-up (toy, code or Qwen-tokenizer world): a hash of its ``settings`` (``to_dict()``)
    less ``time_budget_s`` (runs stopped by it are never reused, so it cannot change a cached result), the world's
    ``code`` version and its ``tokenizer`` version or fingerprint."""
    settings = dict(settings)
    del settings["time_budget_s"]
    payload = {"settings": settings, "code": code, "tokenizer": tokenizer}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=8).hexdigest()


def check_settings_names(settings_class: type, settings: dict[str, Any], what: str) -> None:
    """``TypeError`` naming the keys of ``settings`` that are not fields of the dataclass ``settings_class``."""
    valid = settings_class.__dataclass_fields__
    unknown = set(settings) - set(valid)
    if unknown:
        raise TypeError(f"Unknown {what} setting(s) {sorted(unknown)}; valid ones: {sorted(valid)}.")


def require_positive(settings: Any, names: Sequence[str]) -> None:
    """``ValueError`` for the first of the fields ``names`` of ``settings`` that is below 1."""
    for name in names:
        if getattr(settings, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(settings, name)}.")


def default_cache_root() -> Path:
    """``$HF_MEDS_CLIFF_CACHE`` or ``~/.cache/hf_meds_cliff``."""
    root = os.environ.get(CACHE_ENV_VARIABLE)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "hf_meds_cliff"


def toy_policy(seed: int = 0) -> Path:
    """The folder the model name ``toy`` stands for: ``$HF_MEDS_CLIFF_TOY_POLICY`` when set (a warm-up written with
    ``--output_dir``, e.g. from another seed or on another machine; ``seed`` is then not used), else the cached
    warm-up of ``seed`` (:func:`warmup_toy_model`, built on first use).

    Where the warm-up stops differs between machines, so pointing the variable at another warm-up runs the scripts
    and the test suite against another toy policy.
    """
    chosen = os.environ.get(POLICY_ENV_VARIABLE)
    if not chosen:
        return warmup_toy_model(seed=seed)
    path = Path(chosen).expanduser()
    if not (path / METRICS_FILE).is_file():
        raise ValueError(
            f"{POLICY_ENV_VARIABLE}={chosen!r} is not a warmed-up toy policy (no {METRICS_FILE} in it); write one with "
            f"`python -m hf_meds_cliff.toy.warmup --output_dir {chosen} --seed 1`, or unset the variable."
        )
    return path


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
    chosen = os.environ.get(VLLM_POLICY_ENV_VARIABLE)
    if not chosen:
        return warmup_toy_model(seed=seed, model_config=VLLM_TOY_MODEL, **VLLM_TOY_WARMUP)
    path = Path(chosen).expanduser()
    if not (path / METRICS_FILE).is_file():
        raise ValueError(
            f"{VLLM_POLICY_ENV_VARIABLE}={chosen!r} is not a warmed-up toy policy (no {METRICS_FILE} in it); write "
            f"one with `python -m hf_meds_cliff.toy.warmup --vllm --output_dir {chosen}`, or unset the variable."
        )
    return path


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


def build_warmup(
    config: Any,
    output_dir: str | Path | None,
    cache_folder: str,
    train_and_save: Callable[[Any, str, Path], None],
    *,
    num_threads: int | None,
    what: str,
) -> Path:
    """The folder of the warm-up ``config`` (with ``cache_key()``), built by ``train_and_save(config, key, staging)``
    with ``num_threads`` torch threads unless :func:`build_cached` finds it: in ``output_dir``, or in
    ``<cache root>/<cache_folder>/<key>`` when that is None."""
    key = config.cache_key()
    target = Path(output_dir) if output_dir is not None else default_cache_root() / cache_folder / key

    def build(staging: Path) -> None:
        with _torch_threads(num_threads):
            train_and_save(config, key, staging)

    return build_cached(target, key, build, what=what)


def build_cached(target: Path, key: str, build: Callable[[Path], None], what: str = "warm-up") -> Path:
    """Return ``target`` holding a finished build with cache ``key``, running ``build(staging)`` if needed.

    The cache machinery of the warm-ups (toy world and Qwen-tokenizer world): under a file lock beside
    ``target``, a folder whose ``warmup_metrics.json`` has this ``cache_key`` (and a ``stop_reason`` other than
    ``time_budget``) is reused; otherwise ``build`` writes into a temporary sibling folder, which is renamed into
    place, so a crash never leaves a half cache and concurrent callers build once. ``build`` must write
    ``warmup_metrics.json`` with ``cache_key`` (and ``stop_reason``). A non-empty ``target`` holding something else
    is an error.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{target.name}.lock"):
        if _is_complete(target, key):
            logger.info("Reusing the %s in %s", what, target)
            return target
        if target.exists() and _read_cache_key(target) == key:  # the same warm-up, cut short by the time cap
            logger.warning("Redoing the %s in %s: the previous run hit its time budget.", what, target)
            shutil.rmtree(target)
        if target.exists() and any(target.iterdir()):
            raise ValueError(
                f"{target} is not empty and holds no {what} with these settings (key {key}); "
                "pass an empty or new output_dir, or delete that folder."
            )
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # left by a killed run; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        staging.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model folder
        try:
            build(staging)
            if target.exists():
                target.rmdir()  # empty (checked above)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _read_cache_key(folder: Path) -> str | None:
    try:
        return json.loads((folder / METRICS_FILE).read_text()).get("cache_key")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def _is_complete(folder: Path, key: str) -> bool:
    """A finished warm-up with this key that did not stop on the wall-clock cap (a run cut short by a busy
    machine is redone rather than reused, since its policy may have learnt nothing yet)."""
    metrics_path = folder / METRICS_FILE
    if not metrics_path.is_file():
        return False
    try:
        metrics = json.loads(metrics_path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return metrics.get("cache_key") == key and metrics.get("stop_reason") != "time_budget"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock (POSIX); a no-op where ``fcntl`` is unavailable."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _torch_threads(num_threads: int | None) -> Iterator[None]:
    import torch

    previous = torch.get_num_threads()
    if num_threads is None:
        # The toy model's matrices are tiny: a second thread gains little on an idle machine, and on a busy one
        # (tests running beside other work) threads waiting for each other made steps 2-5x slower than one.
        num_threads = 1
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}.")
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


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
    questions = [p.question for p in problems]
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
    greedy_correct = [boxed_integer(g[0]) == p.answer for g, p in zip(greedy, problems)]
    sample_answers = [[boxed_integer(s) for s in group] for group in samples]
    correct_counts = [sum(a == p.answer for a in answers) for answers, p in zip(sample_answers, problems)]
    boxed = sum(a is not None for answers in sample_answers for a in answers)
    n = len(problems)
    return {
        "greedy_accuracy": sum(greedy_correct) / n,
        "pass@1": sum(pass_at_k(num_samples, c, 1) for c in correct_counts) / n,
        f"pass@{num_samples}": sum(pass_at_k(num_samples, c, num_samples) for c in correct_counts) / n,
        "mixed_group_fraction": sum(0 < c < num_samples for c in correct_counts) / n,
        "boxed_fraction": boxed / (n * num_samples),
    }


def greedy_accuracy(model, tokenizer, problems: Sequence[ToyProblem], max_new_tokens: int = 96) -> float:
    completions = generate_completions(
        model, tokenizer, [p.question for p in problems], max_new_tokens=max_new_tokens
    )
    return sum(boxed_integer(c[0]) == p.answer for c, p in zip(completions, problems)) / len(problems)


# ---------------------------------------------------------------------------------------------------
# Training.


def _learning_rate_factor(step: int, settings: WarmupSettings) -> float:
    """Linear warm-up over ``lr_warmup_steps``, then cosine decay to ``min_lr_ratio`` at ``max_steps`` (also the
    Qwen-tokenizer world's schedule: any settings with those three fields)."""
    if step < settings.lr_warmup_steps:
        return (step + 1) / settings.lr_warmup_steps
    progress = min(
        1.0, (step - settings.lr_warmup_steps) / max(1, settings.max_steps - settings.lr_warmup_steps)
    )
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return settings.min_lr_ratio + (1.0 - settings.min_lr_ratio) * cosine


@dataclass
class WarmupLoopResult:
    """What :func:`supervised_warmup_loop` did: steps taken, why it stopped, the stop-rule checks, timings."""

    steps: int
    stop_reason: str
    history: list[dict[str, float]]
    final_loss: float
    train_seconds: float
    stop_rule_eval_seconds: float


def _warmup_progress_bar(max_steps: int, eval_start_step: int, what: str):
    from tqdm.auto import tqdm

    # Minutes of work on a first run, before any logging is configured: show it. The bar draws no random numbers,
    # so the result (and the cache key) is the same with or without it.
    progress = tqdm(
        total=max_steps,
        desc=f"{what} (first run only, then cached)",
        unit="step",
        mininterval=1.0,
        dynamic_ncols=True,
    )
    progress.set_postfix_str(f"held-out greedy accuracy: first check at step {eval_start_step}")
    return progress


def supervised_warmup_loop(
    model,
    tokenizer,
    settings: Any,
    training_stream: Iterator[Any],
    validation_accuracy: Callable[[], float],
    progress: Any,
) -> WarmupLoopResult:
    """The warm-up's training loop, shared by the toy and code worlds.

    AdamW (0.9/0.98) with linear warm-up then cosine decay, gradient clipping, loss on the solution and eos tokens
    of a fresh batch of ``settings.batch_size`` problems (objects with ``question`` and ``solution``) per step, under
    ``torch.manual_seed(settings.seed)`` in a forked RNG. From ``settings.eval_start_step`` on, every
    ``settings.eval_every_steps`` steps ``validation_accuracy()`` (held-out greedy accuracy) is checked and training
    stops once it reaches ``settings.target_greedy_accuracy``; ``settings.max_steps`` and ``settings.time_budget_s``
    cap it. ``settings`` has the fields of :class:`WarmupSettings` that are read here.
    """
    import torch

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.learning_rate, betas=(0.9, 0.98), weight_decay=settings.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _learning_rate_factor(step, settings)
    )
    model.train()
    start = time.perf_counter()
    eval_seconds = 0.0
    stop_reason = "max_steps"
    history: list[dict[str, float]] = []
    loss_value = float("nan")
    step = 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        while step < settings.max_steps:
            batch = supervised_batch(tokenizer, [next(training_stream) for _ in range(settings.batch_size)])
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            loss_value = loss.item()
            step += 1
            progress.update(1)
            if (
                step >= settings.eval_start_step
                and (step - settings.eval_start_step) % settings.eval_every_steps == 0
            ):
                eval_start = time.perf_counter()
                accuracy = validation_accuracy()
                eval_seconds += time.perf_counter() - eval_start
                history.append({"step": step, "loss": loss_value, "validation_greedy_accuracy": accuracy})
                logger.info("step %d loss %.4f validation greedy accuracy %.3f", step, loss_value, accuracy)
                progress.set_postfix_str(
                    f"loss {loss_value:.3f}, held-out greedy accuracy {accuracy:.2f} "
                    f"(stops at {settings.target_greedy_accuracy:.2f})"
                )
                if accuracy >= settings.target_greedy_accuracy:
                    stop_reason = "target_greedy_accuracy"
                    break
            if time.perf_counter() - start > settings.time_budget_s:
                stop_reason = "time_budget"
                break
    train_seconds = time.perf_counter() - start
    model.eval()
    return WarmupLoopResult(step, stop_reason, history, loss_value, train_seconds, eval_seconds)


def warmup_metrics(
    settings: Any,
    key: str,
    code_version: int,
    loop: WarmupLoopResult,
    final_eval_seconds: float,
    model,
    test_problems: Sequence[Any],
    test_metrics: dict[str, float],
    **test_split: Any,
) -> dict[str, Any]:
    """What the toy and code worlds' warm-ups write to ``warmup_metrics.json``: the cache key, the loop's steps,
    stop reason, timings and stop-rule history, the test-split metrics (after the extra ``test_split`` fields),
    the settings and the library versions."""
    import torch
    import transformers

    return {
        "cache_key": key,
        "code_version": code_version,
        "steps": loop.steps,
        "stop_reason": loop.stop_reason,
        "train_seconds": round(loop.train_seconds, 2),
        "stop_rule_eval_seconds": round(loop.stop_rule_eval_seconds, 2),
        "final_eval_seconds": round(final_eval_seconds, 2),
        "final_loss": loop.final_loss,
        "torch_threads": torch.get_num_threads(),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "test_split": {
            "seed": settings.seed,
            "num_problems": len(test_problems),
            "num_samples": settings.num_samples,
            "temperature": settings.temperature,
            **test_split,
            **test_metrics,
        },
        "validation_history": loop.history,
        "settings": settings.to_dict(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def _train_and_save(settings: WarmupSettings, key: str, folder: Path) -> None:
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, seed=settings.seed, config=settings.model)
    validation_stream = iter_problems(
        "train", settings.seed, settings.task, unique=True, stream_name="warmup-validation"
    )
    validation = [next(validation_stream) for _ in range(settings.num_validation_problems)]
    training_stream = iter_trapped_training_problems(
        settings.seed,
        settings.task,
        settings.trap_rate,
        settings.traps,
        exclude=frozenset(p.question for p in validation),
        stream_name="warmup",
    )
    logger.info("Toy warm-up: %d parameters, settings %s", sum(p.numel() for p in model.parameters()), key)
    progress = _warmup_progress_bar(settings.max_steps, settings.eval_start_step, "Toy policy warm-up")
    loop = supervised_warmup_loop(
        model,
        tokenizer,
        settings,
        training_stream,
        lambda: greedy_accuracy(model, tokenizer, validation, settings.max_new_tokens),
        progress,
    )
    step, stop_reason, history = loop.steps, loop.stop_reason, loop.history

    test_stream = iter_problems("test", settings.seed, settings.task)
    test_problems = [next(test_stream) for _ in range(settings.num_test_problems)]
    eval_start = time.perf_counter()
    progress.set_description(
        f"Toy policy warm-up: {stop_reason} at step {step}; evaluating pass@k on the test split"
    )
    with progress:
        test_metrics = evaluate_policy(
            model,
            tokenizer,
            test_problems,
            num_samples=settings.num_samples,
            temperature=settings.temperature,
            seed=settings.seed,
            max_new_tokens=settings.max_new_tokens,
        )
        progress.set_description(f"Toy policy warm-up done ({stop_reason} at step {step})")
        held_out = (
            f"held-out greedy accuracy {history[-1]['validation_greedy_accuracy']:.2f}, " if history else ""
        )
        progress.set_postfix_str(f"{held_out}test pass@1 {test_metrics['pass@1']:.2f}", refresh=False)
    final_eval_seconds = time.perf_counter() - eval_start
    if stop_reason != "target_greedy_accuracy":
        logger.warning(
            "Toy warm-up stopped by %s at step %d before reaching validation greedy accuracy %.2f; the policy may be "
            "weaker than intended (test pass@1 %.3f).",
            stop_reason,
            step,
            settings.target_greedy_accuracy,
            test_metrics["pass@1"],
        )
    metrics = warmup_metrics(
        settings, key, WARMUP_CODE_VERSION, loop, final_eval_seconds, model, test_problems, test_metrics
    )
    logger.info(
        "Toy warm-up done: %s",
        {k: metrics[k] for k in ("steps", "stop_reason", "train_seconds")} | test_metrics,
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description="Warm up (or reuse from the cache) the toy policy.")
    parser.add_argument("--output_dir", default=None, help="Destination folder (default: the cache folder).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_steps", type=int, default=1500)
    parser.add_argument("--time_budget_s", type=float, default=900.0)
    parser.add_argument("--target_greedy_accuracy", type=float, default=0.5)
    parser.add_argument("--num_test_problems", type=int, default=200)
    parser.add_argument("--num_threads", type=int, default=None)
    parser.add_argument(
        "--vllm",
        action="store_true",
        help="The variant vLLM can load (head_dim 32, a short warm-up: max_steps 400, target greedy accuracy "
        "0.2); --max_steps and --target_greedy_accuracy are then ignored.",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    schedule = {"max_steps": args.max_steps, "target_greedy_accuracy": args.target_greedy_accuracy}
    path = warmup_toy_model(
        args.output_dir,
        seed=args.seed,
        model_config=VLLM_TOY_MODEL if args.vllm else None,
        time_budget_s=args.time_budget_s,
        num_test_problems=args.num_test_problems,
        num_threads=args.num_threads,
        **(VLLM_TOY_WARMUP if args.vllm else schedule),
    )
    metrics = json.loads((path / METRICS_FILE).read_text())
    logger.info("Policy in %s; test split: %s", path, metrics["test_split"])
    return path


if __name__ == "__main__":
    main()
