"""The warm-up engine: what the toy, code and Qwen-tokenizer worlds' supervised warm-ups share.

Each world (:mod:`.warmup`, :mod:`.code_world`, :mod:`.qwen_world`) owns its task, tokenizer, model and evaluation;
this module owns the rest, once:

- the schedule settings every world has (:class:`WarmupSchedule`, a frozen dataclass each world's settings
  subclass, changing only its defaults) and the cache key over them (:func:`settings_cache_key`);
- the on-disk cache under ``$HF_MEDS_CLIFF_CACHE/<world>/<key>``, built once under a file lock into a temporary
  sibling folder renamed into place (:func:`build_warmup`, :func:`build_cached`);
- the training loop with its stop rule on held-out greedy accuracy (:func:`supervised_warmup_loop`);
- the end of a run: the test-split evaluation, the warning when the stop rule did not fire, ``warmup_metrics.json``
  and the saved model and tokenizer (:func:`finish_warmup`).

Nothing here draws random numbers outside what the worlds did before it existed, so their cache keys and policies
are the ones they had (``tests/test_warmup_engine.py`` pins both).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..estimators import pass_at_k

logger = logging.getLogger(__name__)

METRICS_FILE = "warmup_metrics.json"
CACHE_ENV_VARIABLE = "HF_MEDS_CLIFF_CACHE"

POSITIVE_SETTINGS = (
    "batch_size",
    "max_steps",
    "eval_every_steps",
    "num_validation_problems",
    "num_test_problems",
    "num_samples",
    "max_new_tokens",
)
"""The whole-number settings of every world's warm-up that must be >= 1."""


@dataclass(frozen=True)
class WarmupSchedule:
    """The settings every world's warm-up has: the seed, the optimiser and its schedule, the stop rule and the
    evaluation sizes (the toy world's defaults). A world's settings subclass it and add their own fields; a
    subclass changes a default with ``defaults={name: value}`` or ``{name: (value, help)}`` in its class line, and
    the field keeps its place, type and (unless given) help::

        @dataclass(frozen=True)
        class CodeWarmupSettings(WarmupSchedule, defaults={"max_steps": 2000}): ...

    Everything but ``time_budget_s`` enters the cache key (:func:`settings_cache_key`).
    """

    POSITIVE: ClassVar[tuple[str, ...]] = POSITIVE_SETTINGS
    RECORDED_SAMPLING: ClassVar[tuple[str, ...]] = ("num_samples", "temperature")
    """Sampling settings copied into ``warmup_metrics.json``'s ``test_split`` (those the world's settings have)."""

    seed: int = field(
        default=0, metadata={"help": "Seed of the weights, the data streams and the evaluation."}
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
    max_new_tokens: int = field(
        default=64,
        metadata={
            "help": "Generation length cap of the evaluations (default-task solutions take <= 54 tokens "
            "with eos; raise it with more steps)."
        },
    )

    def evaluation_settings(self) -> dict[str, Any]:
        """Keyword arguments of a world's test-split evaluation: ``num_samples``, ``seed``, ``max_new_tokens`` and,
        where the world samples at a set temperature, ``temperature``."""
        values = {"num_samples": self.num_samples, "seed": self.seed, "max_new_tokens": self.max_new_tokens}
        if hasattr(self, "temperature"):
            values["temperature"] = self.temperature
        return values

    def __init_subclass__(cls, defaults: dict[str, Any] | None = None, **kwargs: Any) -> None:
        # Runs before @dataclass reads the subclass: a redeclared field keeps its place among the inherited ones.
        super().__init_subclass__(**kwargs)
        annotations = dict(inspect.get_annotations(cls))
        for name, value in (defaults or {}).items():
            inherited = WarmupSchedule.__dataclass_fields__.get(name)
            if inherited is None:
                raise TypeError(f"defaults: {name!r} is not a field of WarmupSchedule.")
            default, help_text = value if isinstance(value, tuple) else (value, inherited.metadata["help"])
            annotations[name] = inherited.type
            setattr(cls, name, field(default=default, metadata={"help": help_text}))
        cls.__annotations__ = annotations

    def __post_init__(self) -> None:
        require_positive(self, self.POSITIVE)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
        if not self.time_budget_s > 0:
            raise ValueError(f"time_budget_s must be > 0 seconds, got {self.time_budget_s}.")
        if not 0.0 <= self.target_greedy_accuracy <= 1.0:
            raise ValueError(f"target_greedy_accuracy must be in [0, 1], got {self.target_greedy_accuracy}.")
        temperature = getattr(self, "temperature", 1.0)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")


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
# Training.


def _learning_rate_factor(step: int, settings: WarmupSchedule) -> float:
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
    settings: WarmupSchedule,
    next_batch: Callable[[], dict[str, Any]],
    validation_accuracy: Callable[[], float],
    progress: Any,
    loss: Callable[[Any, dict[str, Any]], Any] | None = None,
) -> WarmupLoopResult:
    """The warm-up's training loop, shared by the three worlds.

    AdamW (0.9/0.98) with linear warm-up then cosine decay, gradient clipping, one ``next_batch()`` per step
    (``input_ids``, ``attention_mask``, ``labels`` with -100 off the solution and eos tokens) and its ``loss(model,
    batch)`` (default: the model's own, ``model(**batch).loss``), under ``torch.manual_seed(settings.seed)`` in a
    forked RNG. From ``settings.eval_start_step`` on, every ``settings.eval_every_steps`` steps
    ``validation_accuracy()`` (held-out greedy accuracy) is checked and training stops once it reaches
    ``settings.target_greedy_accuracy``; ``settings.max_steps`` and ``settings.time_budget_s`` cap it.
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
            batch = next_batch()
            step_loss = model(**batch).loss if loss is None else loss(model, batch)
            step_loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            loss_value = step_loss.item()
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


def run_warmup(
    settings: WarmupSchedule,
    key: str,
    folder: Path,
    *,
    world: str,
    code_version: int,
    model,
    tokenizer,
    next_batch: Callable[[], dict[str, Any]],
    validation_accuracy: Callable[[], float],
    test_problems: Callable[[], Sequence[Any]],
    evaluate: Callable[..., dict[str, float]],
    loss: Callable[[Any, dict[str, Any]], Any] | None = None,
    saved_model: Callable[[], Any] | None = None,
    test_split: dict[str, Any] | None = None,
    extra_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One world's warm-up from its configured parts, into ``folder`` (the staging folder of :func:`build_warmup`).

    Trains with :func:`supervised_warmup_loop` (``next_batch``, ``validation_accuracy``, ``loss``) under a progress
    bar, then evaluates ``evaluate(model, tokenizer, test_problems(), **settings.evaluation_settings())`` (the
    test-split metrics: ``greedy_accuracy``, ``pass@1``, ...), warns when the stop rule did not fire, and writes
    ``saved_model()`` (default ``model``), the tokenizer and ``warmup_metrics.json``: the cache key, the loop's
    steps, stop reason, timings and stop-rule history, the test-split metrics (after ``seed``, ``num_problems``, the
    settings of ``RECORDED_SAMPLING`` and the world's ``test_split`` fields), the settings, the library versions and
    the world's ``extra_metrics``. ``world`` names it in logs (``"Toy"``, ``"Code-world"``). Returns the metrics.
    """
    import torch
    import transformers

    progress = _warmup_progress_bar(settings.max_steps, settings.eval_start_step, f"{world} policy warm-up")
    loop = supervised_warmup_loop(model, settings, next_batch, validation_accuracy, progress, loss)
    problems = test_problems()
    eval_start = time.perf_counter()
    with progress:
        progress.set_description(
            f"{world} warm-up: {loop.stop_reason} at step {loop.steps}; evaluating pass@k on the test split"
        )
        test_metrics = evaluate(model, tokenizer, problems, **settings.evaluation_settings())
        progress.set_description(f"{world} warm-up done ({loop.stop_reason} at step {loop.steps})")
        held_out = (
            f"held-out greedy accuracy {loop.history[-1]['validation_greedy_accuracy']:.2f}, "
            if loop.history
            else ""
        )
        progress.set_postfix_str(f"{held_out}test pass@1 {test_metrics['pass@1']:.2f}", refresh=False)
    final_eval_seconds = time.perf_counter() - eval_start
    if loop.stop_reason != "target_greedy_accuracy":
        logger.warning(
            "%s warm-up stopped by %s at step %d before reaching validation greedy accuracy %.2f; the policy may be "
            "weaker than intended (test pass@1 %.3f).",
            world,
            loop.stop_reason,
            loop.steps,
            settings.target_greedy_accuracy,
            test_metrics["pass@1"],
        )
    final = model if saved_model is None else saved_model()
    metrics = {
        "cache_key": key,
        "code_version": code_version,
        "steps": loop.steps,
        "stop_reason": loop.stop_reason,
        "train_seconds": round(loop.train_seconds, 2),
        "stop_rule_eval_seconds": round(loop.stop_rule_eval_seconds, 2),
        "final_eval_seconds": round(final_eval_seconds, 2),
        "final_loss": loop.final_loss,
        "torch_threads": torch.get_num_threads(),
        "num_parameters": sum(p.numel() for p in final.parameters()),
        **(extra_metrics or {}),
        "test_split": {
            "seed": settings.seed,
            "num_problems": len(problems),
            **{name: getattr(settings, name) for name in settings.RECORDED_SAMPLING},
            **(test_split or {}),
            **test_metrics,
        },
        "validation_history": loop.history,
        "settings": settings.to_dict(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    logger.info(
        "%s warm-up done: %s",
        world,
        {k: metrics[k] for k in ("steps", "stop_reason", "train_seconds")} | test_metrics,
    )
    final.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def draw(stream: Iterator[Any], count: int) -> list[Any]:
    """The next ``count`` items of ``stream`` (a world's problem stream)."""
    return [next(stream) for _ in range(count)]


def sampled_pass_metrics(
    greedy_correct: Sequence[bool], correct_counts: Sequence[int], num_samples: int
) -> dict[str, float]:
    """The test-split metrics every world reports: greedy accuracy, sampled pass@1 and pass@``num_samples``
    (:func:`~hf_meds_cliff.estimators.pass_at_k`) and the share of problems whose samples are mixed (some right,
    some wrong), from each problem's greedy verdict and its number of correct samples.

    >>> sampled_pass_metrics([True, False], [2, 1], 2)
    {'greedy_accuracy': 0.5, 'pass@1': 0.75, 'pass@2': 1.0, 'mixed_group_fraction': 0.5}
    """
    n = len(correct_counts)
    return {
        "greedy_accuracy": sum(greedy_correct) / n,
        "pass@1": sum(pass_at_k(num_samples, c, 1) for c in correct_counts) / n,
        f"pass@{num_samples}": sum(pass_at_k(num_samples, c, num_samples) for c in correct_counts) / n,
        "mixed_group_fraction": sum(0 < c < num_samples for c in correct_counts) / n,
    }


def warmup_main(
    argv: Sequence[str] | None,
    description: str,
    warm_up: Callable[..., Path],
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    settings_of: Callable[[argparse.Namespace], dict[str, Any]] | None = None,
) -> Path:
    """A world's command line (``python -m hf_meds_cliff.toy.<world> --output_dir DIR``): ``--output_dir``,
    ``--seed``, ``--num_threads`` and the world's own options (``add_arguments``, read back by ``settings_of``),
    then ``warm_up(output_dir, seed=..., num_threads=..., **settings)``; logs the folder and its test-split metrics."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output_dir", default=None, help="Destination folder (default: the cache folder).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_threads", type=int, default=None)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_of(args) if settings_of is not None else {}
    path = warm_up(args.output_dir, seed=args.seed, num_threads=args.num_threads, **settings)
    logger.info(
        "Policy in %s; test split: %s", path, json.loads((path / METRICS_FILE).read_text())["test_split"]
    )
    return path
