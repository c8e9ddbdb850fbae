"""What the studies share: the methods' configs, trainers and rewards, answer statistics, pass@k and the statistics
of their reports. Used by ``toy_study.py``, ``mechanism_study.py`` (+ ``mechanism_report.py``) and
``learning_study.py`` in this folder (each adds this folder to ``sys.path``).

Every method gets the same budget in a study: ``shared_training_kwargs`` holds everything the methods share, and
``method_config`` adds only what defines the method.
"""

from __future__ import annotations

import datetime
import itertools
import math
import statistics
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

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
MEDS_EARLIER_DEFAULT = {"meds_shape_uniform_groups": True}
"""What the toy study, the mechanism study and the learning study's stages 1-2 ran with: MEDS shaped groups whose
correctness has no variance (the library's earlier default). Passed to those runs so that their results stay
reproducible; the learning study's stage 3 runs the library's default (no shaping of such groups)."""


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
    method: str,
    shared: dict,
    *,
    dapo_extra: dict | None = None,
    meds_extra: dict | None = None,
    extra: dict | None = None,
):
    """The config of ``method`` on top of ``shared`` (:func:`shared_training_kwargs`).

    ``dapo_extra`` is added to the DAPO-based methods (dapo, meds, meds_strong), e.g. dynamic sampling;
    ``meds_extra`` to the MEDS methods (e.g. ``meds_memory_scope``); ``extra`` to any method (an ablation's fields,
    e.g. ``cliff_recentre``), last, so it overrides the method's own settings.
    """
    config_class, values = _method_config_values(method, shared, dapo_extra, meds_extra)
    return config_class(**{**values, **(extra or {})})


def _method_config_values(method, shared, dapo_extra, meds_extra):
    from hf_meds_cliff import CliffConfig, MEDSConfig
    from hf_meds_cliff.dapo import DAPOConfig

    dapo = {**DAPO_LOSS, **(dapo_extra or {})}
    if method == "grpo":
        return DAPOConfig, {**shared, **GRPO_LOSS}
    if method == "dapo":
        return DAPOConfig, {**shared, **dapo}
    if method in MEDS_SETTINGS:
        return MEDSConfig, {**shared, **dapo, **MEDS_SETTINGS[method], **(meds_extra or {})}
    if method == "cliff":
        return CliffConfig, {**shared, **GRPO_LOSS, "cliff_teacher": "rule", "cliff_lam": 0.0}
    if method == "grpo_teacher":  # stage 2's ablation: same teacher protocol, no split of the credit (b still subtracted)
        return CliffConfig, {
            **shared, **GRPO_LOSS, "cliff_teacher": "rule", "cliff_lam": 0.0, "cliff_split_credit": False
        }
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


def reward_functions(method: str, max_completion_length: int, overlong: bool | None = None) -> list:
    """0/1 correctness first (it decides correctness for MEDS and Cliff); DAPO's soft overlong penalty for the
    DAPO-based methods, or where ``overlong`` says (``None``: the method's default)."""
    from hf_meds_cliff.rewards import MathAnswerReward, OverlongPenaltyReward

    rewards = [MathAnswerReward()]
    if overlong is None:
        overlong = method in ("dapo", *MEDS_SETTINGS)
    if overlong:
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
    from hf_meds_cliff.estimators import pass_at_k

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


def pass_at_k_matrix(correct: Sequence[Sequence[int]], n: int, k: int):
    """(S, P) float64: the unbiased pass@k of every problem (columns) in every run (rows) from its correct count.

    >>> pass_at_k_matrix([[0, 1, 4], [2, 2, 2]], n=4, k=2).round(4).tolist()  # 1 - C(4-c, 2) / C(4, 2)
    [[0.0, 0.5, 1.0], [0.8333, 0.8333, 0.8333]]
    """
    import numpy as np

    from hf_meds_cliff.estimators import pass_at_k

    return np.array([[pass_at_k(n, int(c), k) for c in row] for row in correct], dtype=np.float64)


def bootstrap_difference(
    arm, baseline, resamples: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> dict[str, float]:
    """Difference ``mean(arm) − mean(baseline)`` of two (S, P) matrices (runs paired by seed index, the same problems),
    with a percentile bootstrap CI and a two-sided bootstrap p that resample seeds and problems together.

    Each resample draws S seed indices and P problem indices with replacement (the same ones for both arms) and takes
    the mean of the paired differences over them; the p-value is ``min(1, 2 min(#{Δ* <= 0} + 1, #{Δ* >= 0} + 1) /
    (B + 1))``.

    >>> result = bootstrap_difference([[0.5, 0.7]], [[0.5, 0.5]], resamples=999)
    >>> [round(result[key], 6) for key in ("difference", "ci_low", "ci_high")]  # 1 seed; problem diffs 0, 0.2
    [0.1, 0.0, 0.2]
    """
    import numpy as np

    arm, baseline = np.asarray(arm, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if arm.ndim != 2 or arm.shape != baseline.shape or 0 in arm.shape:
        raise ValueError(
            f"arm {arm.shape} and baseline {baseline.shape} must be the same non-empty (seeds, problems) shape; pair "
            "the runs by seed and evaluate both on the same problems."
        )
    if resamples < 1 or not 0 < confidence < 1:
        raise ValueError(f"resamples={resamples} must be >= 1 and confidence={confidence} in (0, 1).")
    differences = arm - baseline
    num_seeds, num_problems = differences.shape
    rng = np.random.default_rng(seed)
    # Resampling with replacement = multinomial weights; the resampled mean is w_seeds · D · w_problems / (S P).
    seed_weights = rng.multinomial(num_seeds, np.full(num_seeds, 1 / num_seeds), size=resamples)
    problem_weights = rng.multinomial(num_problems, np.full(num_problems, 1 / num_problems), size=resamples)
    samples = np.einsum("bs,sp,bp->b", seed_weights, differences, problem_weights) / (num_seeds * num_problems)
    tail = (1 - confidence) / 2
    below, above = int((samples <= 1e-12).sum()), int((samples >= -1e-12).sum())
    return {
        "difference": float(differences.mean()),
        "ci_low": float(np.quantile(samples, tail)),
        "ci_high": float(np.quantile(samples, 1 - tail)),
        "p": min(1.0, 2 * min(below + 1, above + 1) / (resamples + 1)),
        "resamples": resamples,
    }


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (NaN stays NaN and is not counted).

    Sorted ascending, the i-th smallest of m gets ``max over j <= i of min(1, (m − j + 1) p_(j))``.

    >>> holm([0.01, 0.04, 0.03])  # 3 * 0.01; 2 * 0.03; max(0.06, 1 * 0.04)
    [0.03, 0.06, 0.06]
    """
    indexed = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (len(indexed) - rank) * p))
        adjusted[i] = round(running, 12)
    return adjusted


CODE_PATHS = ("src", "studies", "pyproject.toml")
"""What a study run executes: the library, the studies and the pinned dependencies (not docs, tests or results)."""


def code_version() -> dict:
    """``commit`` (HEAD of this checkout) and ``dirty`` (local changes to tracked files); ``code_commit`` (the newest
    commit that changed :data:`CODE_PATHS`) and ``code_dirty`` (local changes there), so that runs of one study that
    started before and after a commit of results or docs show the same code; ``None`` without git."""
    root = Path(__file__).resolve().parent.parent

    def git(*arguments: str) -> str | None:
        try:
            return subprocess.run(
                ["git", *arguments], cwd=root, capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    code_commit = git("log", "-1", "--format=%H", "--", *CODE_PATHS)
    code_status = git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)
    return {
        "commit": commit,
        "dirty": None if status is None else bool(status),
        "code_commit": code_commit,
        "code_dirty": None if code_status is None else bool(code_status),
    }


def utc_now() -> str:
    """The current UTC time, to the second, in ISO format."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
