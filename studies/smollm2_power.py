"""Power analysis and compute budget of the pre-registered SmolLM2 study, from committed data only.

    python studies/smollm2_power.py --output docs/real_model_results/power.json

Inputs, all committed before this analysis (nothing here trains or generates):

- ``docs/real_model_results/probe.json``: the learning probe's per-problem correct counts (base and after 30 GRPO
  steps, 32 test problems x 8 samples), its 30 step times and its start and end time;
- ``docs/real_model_results/bench_step.json``: step times of GRPO, MEDS and Cliff at 256 tokens (the ratios to GRPO).

What it computes (each number in ``docs/real_model_study.md`` comes from the JSON this writes):

1. ``sigma_problem``: the standard deviation, over problems, of the paired per-problem pass@1 difference (trained −
   base) in the probe: the within-seed noise of an arm − baseline difference.
2. The minimum detectable difference (MDE) of mean pass@1 at 80 % power, two-sided, by the normal approximation:
   ``(z(1 − α/2) + z(0.8)) · sqrt(σ_p² / (S·P) + 2 σ_s² / S)`` for S seeds, P test problems and a seed-level standard
   deviation σ_s (not measurable from one probe run: 0.01, 0.02, 0.04 shown, 0.02 planned), at Holm's first step
   (α = 0.05 / m) and at its last (α = 0.05).
3. A check of (2) by simulation of the study's own test (the paired bootstrap over seeds and problems of
   ``study_common.bootstrap_difference``): per-problem differences drawn from the probe's (centred) and shifted by a
   multiple of the analytic MDE, plus a seed shift; the share of simulated studies whose bootstrap p is below α / m,
   and the smallest simulated shift that reaches 80 % (``simulated_mde``). The probe's differences are mostly 0
   with a few large ones, and the bootstrap over 2-4 seeds is itself noisy, so the simulated MDE is the one to plan
   with.
4. The share of mixed groups (8 rollouts, some right, some wrong) expected from the probe's base per-problem pass
   rates, hence the generation rounds dynamic sampling needs per step, and the cost of each arm and of one seed of
   every arm, from the probe's step and evaluation times (a loaded shared machine, so upper bounds).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

ALPHA = 0.05
POWER = 0.80
FAMILY = 7  # hypotheses of the primary family (docs/real_model_study.md)
SEED_SDS = (0.01, 0.02, 0.04)
PLANNED_SEED_SD = 0.02
SIMULATED_FACTORS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5)  # shifts simulated, as multiples of the analytic MDE
TEST_PROBLEMS = 128
VALIDATION_PROBLEMS = 32
SAMPLES = 8
STEPS = 60
NUM_GENERATIONS = 8
PROMPTS_PER_STEP = 2
BUDGET_HOURS = 40.0  # machine time of the 2-core machine (two single-threaded runs at a time: about 20 h of wall time)
ARMS = {  # arm -> uses dynamic sampling
    "grpo": False,
    "cliff": False,
    "cliff_sim": False,
    "grpo_teacher_sim": False,
    "dapo_ds": True,
    "meds_ds": True,
}


def z(quantile: float) -> float:
    return statistics.NormalDist().inv_cdf(quantile)


def mde(sigma_problem: float, sigma_seed: float, seeds: int, problems: int, alpha: float) -> float:
    """Minimum detectable difference of mean pass@1 (proportion) at 80 % power, two-sided test at ``alpha``."""
    variance = sigma_problem**2 / (seeds * problems) + 2 * sigma_seed**2 / seeds
    return (z(1 - alpha / 2) + z(POWER)) * math.sqrt(variance)


def mixed_share(rates: list[float], generations: int) -> float:
    """Expected share of groups of ``generations`` rollouts with both outcomes, for per-problem pass rates."""
    return sum(1 - (1 - p) ** generations - p**generations for p in rates) / len(rates)


def simulated_power(
    differences: list[float], shift: float, sigma_seed: float, seeds: int, problems: int, alpha: float,
    studies: int, resamples: int, seed: int = 0,
) -> float:  # fmt: skip
    """Share of simulated studies in which the paired bootstrap's p is below ``alpha``."""
    import numpy as np

    from study_common import bootstrap_difference

    rng = np.random.default_rng(seed)
    centred = np.asarray(differences) - np.mean(differences)
    rejected = 0
    for study in range(studies):
        cells = rng.choice(centred, size=(seeds, problems)) + shift
        cells += rng.normal(0.0, math.sqrt(2) * sigma_seed, size=(seeds, 1))
        result = bootstrap_difference(cells, np.zeros_like(cells), resamples=resamples, seed=study)
        rejected += result["p"] < alpha
    return rejected / studies


def machine() -> dict:
    import torch

    from hf_meds_cliff.machine import cpu_model_and_flags

    model, flags = cpu_model_and_flags()
    return {
        "cpu": model,
        "cpu_flags_bf16": sorted(f for f in flags if "bf16" in f or f.startswith(("amx", "avx512f", "avx2"))),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def analyse(probe: dict, bench: dict, studies: int, resamples: int) -> dict:
    per_problem = list(probe["per_problem"].values())
    base_rates = [counts["base"][1] / counts["base"][0] for counts in per_problem]
    differences = [
        counts["grpo"][1] / counts["grpo"][0] - counts["base"][1] / counts["base"][0] for counts in per_problem
    ]
    sigma_problem = statistics.stdev(differences)
    table = []
    for seeds in (2, 3, 4, 6, 8):
        for sigma_seed in SEED_SDS:
            table.append(
                {
                    "seeds": seeds,
                    "sigma_seed": sigma_seed,
                    "mde_first_holm_step": mde(sigma_problem, sigma_seed, seeds, TEST_PROBLEMS, ALPHA / FAMILY),
                    "mde_last_holm_step": mde(sigma_problem, sigma_seed, seeds, TEST_PROBLEMS, ALPHA),
                }
            )
    checks = []
    for seeds in (2, 3, 4):
        analytic = mde(sigma_problem, PLANNED_SEED_SD, seeds, TEST_PROBLEMS, ALPHA / FAMILY)
        grid = []
        for factor in SIMULATED_FACTORS:
            power = simulated_power(
                differences, analytic * factor, PLANNED_SEED_SD, seeds, TEST_PROBLEMS, ALPHA / FAMILY, studies,
                resamples,
            )  # fmt: skip
            grid.append({"shift": analytic * factor, "simulated_power": power})
        reached = [point["shift"] for point in grid if point["simulated_power"] >= POWER]
        checks.append(
            {
                "seeds": seeds,
                "analytic_mde": analytic,
                "grid": grid,
                "simulated_mde": min(reached) if reached else None,  # smallest shift of the grid with >= 80 %
                "studies": studies,
                "resamples": resamples,
            }
        )

    step_s = statistics.median(probe["training_step_time_s"])
    started = datetime.datetime.fromisoformat(probe["started"])
    finished = datetime.datetime.fromisoformat(probe["finished"])
    probe_eval_s = (finished - started).total_seconds() - sum(probe["training_step_time_s"])
    eval_s_per_problem = probe_eval_s / len(per_problem)
    share = mixed_share(base_rates, NUM_GENERATIONS)
    rounds = 1 / share  # generation rounds per step to fill the batch with mixed groups (expected)
    ratios = bench["ratios"]
    overhead = {"meds_ds": ratios["meds-forward/grpo"]["ratio_of_medians"], "cliff": 1.0}
    eval_s = (TEST_PROBLEMS + VALIDATION_PROBLEMS) * eval_s_per_problem
    costs = {}
    for arm, dynamic in ARMS.items():
        train_s = STEPS * step_s * (rounds if dynamic else 1.0) * overhead.get(arm, 1.0)
        costs[arm] = {"train_h": train_s / 3600, "eval_h": eval_s / 3600, "total_h": (train_s + eval_s) / 3600}
    base_eval_h = eval_s / 3600  # the base model's evaluation, once per evaluation seed (paired comparisons)
    per_seed_h = sum(c["total_h"] for c in costs.values()) + base_eval_h
    seeds_in_budget = int(BUDGET_HOURS // per_seed_h)
    return {
        "inputs": {
            "probe": "docs/real_model_results/probe.json",
            "bench_step": "docs/real_model_results/bench_step.json",
            "probe_problems": len(per_problem),
            "probe_samples": per_problem[0]["base"][0],
        },
        "sigma_problem": sigma_problem,
        "probe_mean_difference": statistics.mean(differences),
        "family": FAMILY,
        "alpha": ALPHA,
        "power": POWER,
        "test_problems": TEST_PROBLEMS,
        "planned_sigma_seed": PLANNED_SEED_SD,
        "mde_table": table,
        "simulation_checks": checks,
        "budget": {
            "budget_hours": BUDGET_HOURS,
            "probe_median_step_s": step_s,
            "probe_eval_s_per_problem": eval_s_per_problem,
            "base_mixed_group_share": share,
            "dynamic_sampling_rounds_per_step": rounds,
            "steps": STEPS,
            "arms": costs,
            "per_seed_h": per_seed_h,  # the six arms and the base model's evaluation
            "base_eval_h": base_eval_h,
            "seeds_in_budget": seeds_in_budget,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="docs/real_model_results/power.json")
    parser.add_argument("--studies", type=int, default=400, help="simulated studies per power check")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples per simulated study")
    args = parser.parse_args(argv)
    probe = json.loads((ROOT / "docs/real_model_results/probe.json").read_text())
    bench = json.loads((ROOT / "docs/real_model_results/bench_step.json").read_text())
    result = analyse(probe, bench, args.studies, args.resamples)
    from study_common import code_version, utc_now

    result.update(
        machine=machine(),
        command=" ".join(["python", "studies/smollm2_power.py", *(argv if argv is not None else sys.argv[1:])]),
        written=utc_now(),
        **code_version(),
    )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("sigma_problem", "simulation_checks")}, indent=1))
    print(json.dumps(result["budget"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
