"""What the studies share: the methods' configs, trainers and rewards, answer statistics, pass@k and the statistics
of their reports. Used by ``toy_study.py``, ``mechanism_study.py`` (+ ``mechanism_report.py``) and
``learning_study.py`` in this folder (each adds this folder to ``sys.path``).

Every method gets the same budget in a study: ``shared_training_kwargs`` holds everything the methods share, and
``method_config`` adds only what defines the method.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Sequence

ALL_METHODS = ("grpo", "dapo", "meds", "meds_strong", "cliff", "grpo_teacher")
GRPO_LOSS = {"loss_type": "grpo", "epsilon": 0.2, "epsilon_high": 0.2}
"""TRL's GRPO loss with the symmetric clip 0.2."""
DAPO_LOSS = {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28}
"""DAPO's token-mean loss with clip-higher 0.28 (dynamic sampling is a separate switch)."""
MEDS_SETTINGS = {
    "meds": {"meds_alpha": 0.1, "meds_beta": 0.2},
    "meds_strong": {"meds_alpha": 0.2, "meds_beta": 1.0},
}
"""The MEDS paper's alpha/beta, and the stronger setting fixed before the mechanism study's runs (the cap of
0.1/0.2 is reached at cluster size 7; beta 1.0 moves it beyond any cluster size these studies reach)."""


def shared_training_kwargs(
    *,
    output_dir: str,
    seed: int,
    steps: int,
    learning_rate: float,
    prompts_per_step: int,
    num_generations: int,
    max_completion_length: int,
    warmup_steps: int = 2,
    lr_scheduler_type: str = "constant_with_warmup",
) -> dict:
    """The ``GRPOConfig`` arguments every method of a study shares (CPU, no KL, logging every step, no saves)."""
    return {
        "output_dir": output_dir,
        "use_cpu": True,
        "bf16": False,
        "seed": seed,
        "max_steps": steps,
        "learning_rate": learning_rate,
        "lr_scheduler_type": lr_scheduler_type,
        "warmup_steps": warmup_steps,
        "per_device_train_batch_size": prompts_per_step * num_generations,
        "num_generations": num_generations,
        "max_completion_length": max_completion_length,
        "temperature": 1.0,
        "beta": 0.0,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "dataloader_num_workers": 0,
    }


def method_config(
    method: str, shared: dict, *, dapo_extra: dict | None = None, meds_extra: dict | None = None
):
    """The config of ``method`` on top of ``shared`` (:func:`shared_training_kwargs`).

    ``dapo_extra`` is added to the DAPO-based methods (dapo, meds, meds_strong), e.g. dynamic sampling;
    ``meds_extra`` to the MEDS methods (e.g. ``meds_memory_scope``).
    """
    from hf_meds_cliff import CliffConfig, MEDSConfig
    from hf_meds_cliff.dapo import DAPOConfig

    dapo = {**DAPO_LOSS, **(dapo_extra or {})}
    if method == "grpo":
        return DAPOConfig(**shared, **GRPO_LOSS)
    if method == "dapo":
        return DAPOConfig(**shared, **dapo)
    if method in MEDS_SETTINGS:
        return MEDSConfig(**shared, **dapo, **MEDS_SETTINGS[method], **(meds_extra or {}))
    if method == "cliff":
        return CliffConfig(**shared, **GRPO_LOSS, cliff_teacher="rule", cliff_lam=0.0)
    if method == "grpo_teacher":  # the Cliff paper's ablation: same teacher protocol, no split of the credit
        return CliffConfig(
            **shared, **GRPO_LOSS, cliff_teacher="rule", cliff_lam=0.0, cliff_split_credit=False
        )
    raise ValueError(f"Unknown method {method!r}; choose from {ALL_METHODS}.")


def trainer_class(method: str):
    from hf_meds_cliff import CliffGRPOTrainer, MEDSGRPOTrainer
    from hf_meds_cliff.dapo import DAPOTrainer

    if method in MEDS_SETTINGS:
        return MEDSGRPOTrainer
    if method in ("cliff", "grpo_teacher"):
        return CliffGRPOTrainer
    if method in ("grpo", "dapo"):
        return DAPOTrainer
    raise ValueError(f"Unknown method {method!r}; choose from {ALL_METHODS}.")


def reward_functions(method: str, max_completion_length: int) -> list:
    """0/1 correctness first (it decides correctness for MEDS and Cliff); DAPO's soft overlong penalty for the
    DAPO-based methods."""
    from hf_meds_cliff.rewards import MathAnswerReward, OverlongPenaltyReward

    rewards = [MathAnswerReward()]
    if method in ("dapo", *MEDS_SETTINGS):
        buffer = max(4, max_completion_length // 4)
        rewards.append(OverlongPenaltyReward(max_completion_length, buffer_length=buffer, penalty_factor=1.0))
    return rewards


def answer_statistics(answers_per_problem, truths, traps=None) -> dict:
    """Diversity of the wrong answers: distinct per problem, share of the most common one, share of the trap
    (``traps``: each problem's trapped answer, or None). None (no boxed answer) counts as one kind of wrong answer."""
    traps = traps if traps is not None else [None] * len(truths)
    distinct, top_share, trap_share, wrong_total, trap_total = [], [], [], 0, 0
    for answers, truth, trap in zip(answers_per_problem, truths, traps):
        wrong = [a for a in answers if a != truth]
        distinct.append(len(set(wrong)))
        if wrong:
            top_share.append(Counter(wrong).most_common(1)[0][1] / len(wrong))
            trap_share.append(sum(a == trap for a in wrong) / len(wrong))
        wrong_total += len(wrong)
        trap_total += sum(a == trap for a in wrong)
    return {
        "distinct_wrong_answers": statistics.mean(distinct),
        "wrong_answer_top_share": statistics.mean(top_share) if top_share else math.nan,
        "trap_share_of_wrong": trap_total / wrong_total if wrong_total else math.nan,
    }


def pass_at_k_table(correct_counts: Sequence[int], n: int, ks: Sequence[int]) -> dict[str, float]:
    """Mean unbiased pass@k over problems, for every ``k <= n`` in ``ks`` (keys are strings, as in JSON)."""
    from hf_meds_cliff.evaluation.estimators import pass_at_k

    return {str(k): statistics.mean(pass_at_k(n, c, k) for c in correct_counts) for k in ks if k <= n}


# --------------------------------------------------------------------------------------------
# report statistics
# --------------------------------------------------------------------------------------------


def finite(values) -> list:
    return [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


def mean_std(values, scale: float = 1.0, digits: int = 1) -> str:
    values = finite(values)
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{scale * values[0]:.{digits}f}"
    return f"{scale * statistics.mean(values):.{digits}f} ± {scale * statistics.stdev(values):.{digits}f}"


def paired_test(differences: list[float]) -> dict:
    """Mean paired difference, paired t-test p and the exact sign-flip (permutation) p, both two-sided.

    >>> paired_test([1.0, 1.0, 1.0])["sign_flip_p"]  # of the 8 sign patterns, only all-plus and all-minus reach 3
    0.25
    """
    n = len(differences)
    result = {
        "n": n,
        "mean": statistics.mean(differences) if n else math.nan,
        "t_p": math.nan,
        "sign_flip_p": math.nan,
    }
    if n < 2:
        return result
    from scipy import stats

    if statistics.pstdev(differences) > 0:
        result["t_p"] = float(stats.ttest_1samp(differences, 0.0).pvalue)
    observed = abs(sum(differences))
    flips = [
        abs(sum(s * d for s, d in zip(signs, differences))) for signs in itertools.product((1, -1), repeat=n)
    ]
    result["sign_flip_p"] = sum(f >= observed - 1e-12 for f in flips) / len(flips)
    return result


def expected_distinct(reference: list, draws: int) -> float:
    """Expected number of distinct values among ``draws`` values drawn without replacement from ``reference``.

    >>> round(expected_distinct([1, 1, 2, 3], 2), 6)  # of the 6 pairs only {1, 1} has one value: (1 + 5 * 2) / 6
    1.833333
    """
    n = len(reference)
    if draws <= 0:
        return 0.0
    if draws >= n:
        return float(len(set(reference)))
    total = math.comb(n, draws)
    return sum(1.0 - math.comb(n - count, draws) / total for count in Counter(reference).values())
