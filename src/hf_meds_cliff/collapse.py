"""Error-collapse monitor for any TRL GRPO run: does the policy keep giving the same wrong answer?

MEDS's premise ("error collapse", ``shared/spec/meds.md``) is that RLVR training narrows a policy's wrong answers to a
few repeated ones. :class:`ErrorCollapseCallback` measures it on a run, MEDS or not, so a user can see whether their
run collapses before adopting MEDS. Per generation batch, over the prompts with at least one wrong rollout:

- ``collapse/distinct_wrong_answers``: distinct wrong final answers per prompt (mean over prompts);
- ``collapse/top_wrong_share``: share of a prompt's wrong rollouts that give its most frequent wrong answer (mean);
- ``collapse/wrong_answer_entropy``: entropy, in nats, of a prompt's wrong-answer distribution (mean);
- ``collapse/prompts_with_wrong`` and ``collapse/wrong_rollouts``: how many prompts and rollouts these cover;

and the same three over a window of the last ``window`` training batches, pooled per prompt
(``collapse/window/...``; ``collapse/window/batches`` says how many batches the window holds). A wrong rollout without
a ``\\boxed{}`` answer counts under one answer, ``<no answer>``. Answers are compared as strings after
:func:`~hf_meds_cliff.rewards.extraction.extract_final_answer` (``1/2`` and ``0.5`` are two answers). A decrease of
distinct answers is expected when problems become solved (fewer wrong rollouts, fewer chances to differ): read
``distinct_wrong_answers`` next to ``wrong_rollouts``, and ``top_wrong_share`` / ``wrong_answer_entropy``, which are
shares, before calling a run collapsed. ``MEDSGRPOTrainer`` also logs ``collapse/cluster_concentration``: per prompt
of the batch with at least 2 stored wrong completions, the share of them in the prompt's largest cluster of its error
memory (HDBSCAN noise points count as clusters of one), averaged.

How it sees the rollouts (TRL 1.16): a ``TrainerCallback`` is never handed the trainer, the completions or the
rewards, and TRL's completions buffer (``GRPOTrainer._logs``) is private and overwritten each generation. The public
place where completions and correctness meet is a reward function: TRL calls each one on every process with the
prompts, the completions and a ``log_metric`` hook whose values go into the trainer's metrics (so into the logs,
``metrics.jsonl`` and the report). So :meth:`ErrorCollapseCallback.wrap` wraps the correctness reward; the wrapper
returns the reward's values unchanged, gathers the rows of all processes (a group may span processes) and logs the
metrics. Registering the object as a callback as well (``callbacks=[monitor]``) lets it tell training batches from
evaluation ones (only training batches enter the window; evaluation ones are logged as ``eval_collapse/...``) and
warn when no rollout reached it after a training step (the reward was not wrapped)::

    monitor = ErrorCollapseCallback(window=10)
    trainer = GRPOTrainer(model, reward_funcs=[monitor.wrap(correctness)], args=args, train_dataset=data,
                          callbacks=[monitor])

A failure inside the monitor (an answer it cannot read) never stops training: that batch's rows count as
``<no answer>``, ``collapse/monitor_failures`` counts it and a warning is logged. The window is not saved in
checkpoints: after a resume it refills from empty (the per-batch metrics are unaffected).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from transformers import TrainerCallback

from .data import prompt_keys
from .rewards.extraction import extract_final_answer
from .text import completion_text

logger = logging.getLogger(__name__)

__all__ = [
    "NO_ANSWER",
    "CollapseRecordingReward",
    "ErrorCollapseCallback",
    "cluster_concentration",
    "collapse_stats",
    "merge_counts",
    "wrong_answer_agreement",
    "wrong_answer_counts",
]

NO_ANSWER = "<no answer>"
"""The answer of a wrong rollout without a final answer."""


def wrong_answer_counts(
    answers: Sequence[str | None], is_correct: Sequence[bool | None], group_keys: Sequence[str]
) -> dict[str, Counter]:
    """Per prompt, how often each wrong answer was given.

    Args:
        answers: final answer per rollout (``None``: no answer, counted as :data:`NO_ANSWER`).
        is_correct: per rollout True / False / None (ungraded: left out).
        group_keys: prompt identity per rollout.

    Returns:
        ``{prompt key: Counter(wrong answer -> rollouts)}``, only prompts with at least one wrong rollout.

    >>> wrong_answer_counts(["3", "4", None, "3"], [False, True, False, False], ["a", "a", "a", "b"])
    {'a': Counter({'3': 1, '<no answer>': 1}), 'b': Counter({'3': 1})}
    """
    if not len(answers) == len(is_correct) == len(group_keys):
        raise ValueError(
            f"Got {len(answers)} answers, {len(is_correct)} correctness values and {len(group_keys)} prompt keys; "
            "give one of each per rollout."
        )
    counts: dict[str, Counter] = {}
    for answer, correct, key in zip(answers, is_correct, group_keys):
        if correct is None or correct:
            continue
        counts.setdefault(key, Counter())[NO_ANSWER if answer is None else str(answer)] += 1
    return counts


def merge_counts(batches: Iterable[Mapping[str, Counter]]) -> dict[str, Counter]:
    """Pool several batches' :func:`wrong_answer_counts` per prompt (the window).

    >>> merge_counts([{"a": Counter({"3": 2})}, {"a": Counter({"3": 1, "5": 1}), "b": Counter({"1": 1})}])
    {'a': Counter({'3': 3, '5': 1}), 'b': Counter({'1': 1})}
    """
    merged: dict[str, Counter] = {}
    for batch in batches:
        for key, counter in batch.items():
            merged.setdefault(key, Counter()).update(counter)
    return merged


def _entropy(counter: Counter) -> float:
    total = sum(counter.values())
    return -sum((n / total) * math.log(n / total) for n in counter.values() if n)


def collapse_stats(counts: Mapping[str, Counter]) -> dict[str, float]:
    """The collapse metrics of per-prompt wrong-answer counts (means over the prompts; NaN when there are none).

    Returns ``distinct_wrong_answers``, ``top_wrong_share``, ``wrong_answer_entropy`` (nats), ``prompts_with_wrong``
    and ``wrong_rollouts``.

    Example: prompt a's wrong answers 3, 3, 3, 5 (2 distinct, top share 3/4, entropy -(3/4 ln 3/4 + 1/4 ln 1/4) =
    0.5623) and prompt b's 7, 8 (2 distinct, 1/2, ln 2 = 0.6931):

    >>> stats = collapse_stats({"a": Counter({"3": 3, "5": 1}), "b": Counter({"7": 1, "8": 1})})
    >>> {k: round(v, 4) for k, v in stats.items()}  # doctest: +NORMALIZE_WHITESPACE
    {'distinct_wrong_answers': 2.0, 'top_wrong_share': 0.625, 'wrong_answer_entropy': 0.6277,
     'prompts_with_wrong': 2.0, 'wrong_rollouts': 6.0}
    """
    counters = [c for c in counts.values() if sum(c.values()) > 0]
    if not counters:
        nan = math.nan
        return {
            "distinct_wrong_answers": nan,
            "top_wrong_share": nan,
            "wrong_answer_entropy": nan,
            "prompts_with_wrong": 0.0,
            "wrong_rollouts": 0.0,
        }
    return {
        "distinct_wrong_answers": sum(len(c) for c in counters) / len(counters),
        "top_wrong_share": sum(max(c.values()) / sum(c.values()) for c in counters) / len(counters),
        "wrong_answer_entropy": sum(_entropy(c) for c in counters) / len(counters),
        "prompts_with_wrong": float(len(counters)),
        "wrong_rollouts": float(sum(sum(c.values()) for c in counters)),
    }


def wrong_answer_agreement(counter: Counter) -> float:
    """Probability that two different wrong rollouts of a prompt give the same answer (Simpson's index, unbiased):
    ``Σ n_a (n_a − 1) / (n (n − 1))``; NaN below 2 wrong rollouts.

    Unlike the number of distinct answers, its expectation does not depend on how many wrong rollouts there are, so
    it does not fall just because a policy solves more problems (the SmolLM2 study's collapse measure).

    >>> wrong_answer_agreement(Counter({"5": 3, "6": 1}))  # (3·2 + 0) / (4·3)
    0.5
    >>> wrong_answer_agreement(Counter({"5": 1}))
    nan
    """
    total = sum(counter.values())
    if total < 2:
        return math.nan
    return sum(n * (n - 1) for n in counter.values()) / (total * (total - 1))


def cluster_concentration(labels: Sequence[int]) -> float:
    """Share of a prompt's stored wrong completions in its largest error-memory cluster (noise ``-1``: singletons).

    >>> cluster_concentration([0, 0, 0, 1, -1])  # largest cluster 3 of 5
    0.6
    >>> cluster_concentration([-1, -1])  # all noise: two clusters of one
    0.5
    """
    labels = [int(label) for label in labels]
    if not labels:
        raise ValueError("cluster_concentration needs at least one label.")
    sizes = Counter(label for label in labels if label != -1)
    largest = max(sizes.values(), default=0)
    return max(largest, 1) / len(labels)


class ErrorCollapseCallback(TrainerCallback):
    """Measures error collapse on any TRL GRPO run (plain ``GRPOTrainer`` included); see the module docstring.

    Args:
        window: how many training batches the ``collapse/window/...`` metrics pool (>= 1).
        correctness_threshold: a rollout is correct when the wrapped reward is >= this (None: ungraded).
        answer_extractor: ``text -> answer or None``; defaults to
            :func:`~hf_meds_cliff.rewards.extraction.extract_final_answer` (the last ``\\boxed{}``).
    """

    def __init__(
        self,
        window: int = 10,
        correctness_threshold: float = 1.0,
        answer_extractor: Callable[[str], str | None] | None = None,
    ):
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window={window!r} must be a positive integer (training batches to pool).")
        if not isinstance(correctness_threshold, (int, float)) or isinstance(correctness_threshold, bool):
            raise TypeError(f"correctness_threshold={correctness_threshold!r} must be a number.")
        self.window = window
        self.correctness_threshold = float(correctness_threshold)
        self.answer_extractor = answer_extractor if answer_extractor is not None else extract_final_answer
        self.batches: deque[dict[str, Counter]] = deque(maxlen=window)
        self.last_stats: dict[str, float] = {}
        self.observed = 0  # batches seen
        self.failures = 0
        self._phase: str | None = None  # None: not registered as a callback; "train" inside a training step
        self._warned_unwired = False

    # -- feeding it ----------------------------------------------------------------------------------------------

    def wrap(self, reward_func: Callable[..., Sequence[float | None]]) -> CollapseRecordingReward:
        """A reward function returning ``reward_func``'s values unchanged that shows every batch to this monitor."""
        return CollapseRecordingReward(reward_func, self)

    def observe(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        rewards: Sequence[float | None],
        log_metric: Callable[[str, float], None] | None = None,
    ) -> dict[str, float]:
        """Record one batch (this process's rows; gathered across processes when there are several), log its
        metrics through ``log_metric`` (TRL's reward-function hook) and return them."""
        if not len(prompts) == len(completions) == len(rewards):
            raise ValueError(
                f"Got {len(prompts)} prompts, {len(completions)} completions and {len(rewards)} rewards; give one "
                "of each per rollout."
            )
        try:
            keys = prompt_keys(list(prompts))
            answers = [self.answer_extractor(completion_text(c)) for c in completions]
            failed = 0
        except Exception as error:  # noqa: BLE001 -- a monitor never stops training
            logger.warning("ErrorCollapseCallback could not read this batch (%s: %s)", type(error).__name__, error)
            keys, answers, failed = [str(i) for i in range(len(prompts))], [None] * len(prompts), 1
        is_correct = [
            None if r is None or (isinstance(r, float) and math.isnan(r)) else float(r) >= self.correctness_threshold
            for r in rewards
        ]
        rows = list(zip(keys, answers, is_correct))
        rows, failed = _gather_rows(rows, failed)
        counts = wrong_answer_counts([r[1] for r in rows], [r[2] for r in rows], [r[0] for r in rows])
        stats = collapse_stats(counts)
        self.observed += 1
        self.failures += failed
        metrics = dict(stats)
        if self._phase != "outside":  # training batches (or any batch when not registered) enter the window
            self.batches.append(counts)
            for name, value in collapse_stats(merge_counts(self.batches)).items():
                if name in ("distinct_wrong_answers", "top_wrong_share", "wrong_answer_entropy"):
                    metrics[f"window/{name}"] = value
            metrics["window/batches"] = float(len(self.batches))
        metrics["monitor_failures"] = float(failed)
        self.last_stats = metrics
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(f"collapse/{name}", value)
        return metrics

    # -- TrainerCallback ---------------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self._phase = "outside"

    def on_step_begin(self, args, state, control, **kwargs):
        self._phase = "train"

    def on_step_end(self, args, state, control, **kwargs):
        self._phase = "outside"
        if self.observed == 0 and not self._warned_unwired:
            self._warned_unwired = True
            logger.warning(
                "ErrorCollapseCallback saw no rollout in training step %d: wrap the correctness reward with it, "
                "reward_funcs=[monitor.wrap(correctness_reward)], and keep callbacks=[monitor].",
                state.global_step,
            )


class CollapseRecordingReward:
    """A reward function that returns ``reward_func``'s values unchanged and shows each batch to ``monitor``.

    TRL names the reward column after ``__name__``, so the wrapped reward keeps its name. Picklable when
    ``reward_func`` and the monitor's ``answer_extractor`` are.
    """

    def __init__(self, reward_func: Callable[..., Sequence[float | None]], monitor: ErrorCollapseCallback):
        if not callable(reward_func):
            raise TypeError(f"ErrorCollapseCallback.wrap needs a reward function, got {reward_func!r:.80}.")
        if inspect.iscoroutinefunction(reward_func) or inspect.iscoroutinefunction(
            getattr(reward_func, "__call__", None)
        ):
            raise TypeError(
                f"ErrorCollapseCallback.wrap takes a synchronous reward function; {reward_func!r:.80} is async."
            )
        self.reward_func = reward_func
        self.monitor = monitor
        self.__name__ = getattr(reward_func, "__name__", type(reward_func).__name__)

    def __call__(self, prompts, completions, **kwargs) -> list[float | None]:
        rewards = list(self.reward_func(prompts=prompts, completions=completions, **kwargs))
        self.monitor.observe(prompts, completions, rewards, log_metric=kwargs.get("log_metric"))
        return rewards


def _gather_rows(rows: list[tuple], failed: int) -> tuple[list[tuple], int]:
    """All processes' rows in rank order (a group may span processes) and their failures; one process: as is."""
    from accelerate import PartialState

    if PartialState().num_processes == 1:
        return rows, failed
    from accelerate.utils import gather_object

    gathered = gather_object([(rows, failed)])
    return [row for part, _ in gathered for row in part], sum(count for _, count in gathered)
