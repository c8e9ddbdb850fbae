"""The learning study's design, fixed before its runs: the stage-1 regimes and rule and stage 3's arms,
hypotheses and statistics. ``learning_study.py`` runs it and ``learning_report.py`` reports it; both import
this module and neither imports the other.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

KS = tuple(range(1, 17))
STAGE1_SEEDS = (0, 1, 2, 3, 4)
STAGE2_SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)
MIN_PASS1_GAIN = 0.05
MIN_SEEDS_WITH_GAIN = 4
NOISE_SDS = 2.0
MAX_RUN_MINUTES = 8.0

TRAP_WARMUP = {"num_hidden_layers": 6, "trap_rate": 0.3, "max_steps": 2000, "time_budget_s": 3000.0}
"""The mechanism study's world (same settings, so the same cached warm-up): traps taught as a minority mode."""


@dataclass(frozen=True)
class Regime:
    """One training regime: the world, the prompt pool and the optimisation; everything else is shared."""

    name: str
    world: str  # "trap" (the mechanism world's 6-layer warm-up) or "toy" (the default 2-layer toy warm-up)
    steps: int
    pool_size: int  # distinct training prompts; each recurs steps * prompts_per_step / pool_size times
    learning_rate: float
    lr_scheduler_type: str = "constant_with_warmup"
    prompts_per_step: int = 8
    num_generations: int = 8
    max_completion_length: int = 64
    heldout_problems: int = 128
    heldout_samples: int = 16
    curve_every: int = 10  # held-out pass@1 on a subset every this many steps (the learning curve)
    curve_problems: int = 64
    curve_samples: int = 4
    probe_samples: int = 8  # diversity probe on the first 24 pool prompts
    probe_prompts: int = 24
    why: str = ""  # the reason this candidate was listed (written before any run)

    @property
    def visits_per_prompt(self) -> float:
        return self.steps * self.prompts_per_step / self.pool_size


CANDIDATES = (
    Regime(
        "trap-lr2e-4", world="trap", steps=60, pool_size=120, learning_rate=2e-4,
        why="each prompt recurs 4 times (about what the MEDS paper's data and batch sizes give) at a lower learning "
        "rate than the mechanism study's 5e-4, with which every RL run lowered held-out accuracy on a 24-prompt pool; "
        "the trap world, because a taught trap is a behaviour RL can unlearn across prompts",
    ),
    Regime(
        "trap-lr5e-4-cosine", world="trap", steps=60, pool_size=120, learning_rate=5e-4, lr_scheduler_type="cosine",
        why="the same pool with the mechanism study's learning rate, decayed to 0 instead of constant",
    ),
    Regime(
        "trap-lr1e-4-long", world="trap", steps=120, pool_size=240, learning_rate=1e-4,
        why="twice the steps and the pool at half the learning rate (the same 4 visits per prompt)",
    ),
    Regime(
        "toy-lr1e-4-long", world="toy", steps=120, pool_size=240, learning_rate=1e-4,
        why="the plain toy world (no trap to unlearn; RL on it has not generalised so far), as a control",
    ),
)  # fmt: skip

QUICK = Regime(
    "quick", world="toy", steps=2, pool_size=8, learning_rate=1e-4, prompts_per_step=2, num_generations=4,
    heldout_problems=4, heldout_samples=4, curve_every=1, curve_problems=2, curve_samples=2, probe_samples=2,
    probe_prompts=2,
)  # fmt: skip


def decide(results: Path, candidates) -> dict:
    """Apply the pre-registered stage-1 rule (module docstring) to the results files."""
    rows = []
    for regime in candidates:
        runs = [json.loads(p.read_text()) for p in sorted(results.glob(f"stage1-{regime.name}-seed*.json"))]
        warmup_path = results / f"warmup-{regime.world}.json"
        if not runs or not warmup_path.exists():
            rows.append({"candidate": regime.name, "complete": False, "passes": False})
            continue
        warmup = json.loads(warmup_path.read_text())
        per_seed = warmup["heldout_per_eval_seed"]
        gains = [
            run["heldout"]["pass@1"] - per_seed[str(run["seed"])]["pass@1"]
            for run in runs
            if str(run["seed"]) in per_seed
        ]
        warm16 = [v["pass@16"] for v in per_seed.values() if "pass@16" in v]
        noise = statistics.stdev(warm16) if len(warm16) > 1 else 0.0
        mean16 = statistics.mean(run["heldout"].get("pass@16", math.nan) for run in runs)
        minutes = statistics.median(run["train_cpu_seconds"] for run in runs) / 60
        row = {
            "candidate": regime.name,
            "config": asdict(regime),
            "complete": len(runs) == len(STAGE1_SEEDS),
            "seeds": [run["seed"] for run in runs],
            "pass1_gains": gains,
            "seeds_with_gain": sum(g >= MIN_PASS1_GAIN - 1e-9 for g in gains),  # 0.35 - 0.30 is 0.04999...
            "mean_pass1_gain": statistics.mean(gains) if gains else math.nan,
            "warmup_pass16": statistics.mean(warm16) if warm16 else math.nan,
            "warmup_pass16_sd": noise,
            "mean_pass16": mean16,
            "median_train_cpu_minutes": minutes,
        }
        row["rule"] = {
            "pass1": row["seeds_with_gain"] >= MIN_SEEDS_WITH_GAIN,
            "pass16": mean16 >= row["warmup_pass16"] - NOISE_SDS * noise,
            "budget": minutes <= MAX_RUN_MINUTES,
        }
        row["passes"] = row["complete"] and all(row["rule"].values())
        rows.append(row)
    complete = all(r["complete"] for r in rows)
    passing = [r for r in rows if r["passes"]]
    chosen = None
    if (
        passing and complete
    ):  # no choice before every candidate has all its seeds  # the largest mean gain; within 1 point of it, the fewest steps (then the larger gain)
        best = max(r["mean_pass1_gain"] for r in passing)
        near = [r for r in passing if r["mean_pass1_gain"] >= best - 0.01 - 1e-9]
        chosen = min(near, key=lambda r: (r["config"]["steps"], -r["mean_pass1_gain"]))["candidate"]
    return {
        "rule": {
            "min_pass1_gain": MIN_PASS1_GAIN,
            "min_seeds_with_gain": MIN_SEEDS_WITH_GAIN,
            "noise_sds": NOISE_SDS,
            "max_run_minutes": MAX_RUN_MINUTES,
        },
        "candidates": rows,
        "complete": complete,
        "chosen": chosen,
    }


# --------------------------------------------------------------------------------------------
# stage 3: the open questions of stage 2 as pre-registered ablations
# --------------------------------------------------------------------------------------------

STAGE3_REGIME = "trap-lr1e-4-long"
"""Stage 1's chosen regime (the same regime and budget as stage 2)."""
STAGE3_SEEDS = tuple(range(100, 108))
"""Fresh training seeds (stage 1 and 2 used 0-7): no run of an earlier stage is reused; run seed s is evaluated with
evaluation seed s, as before."""
STAGE3_TEST_STREAM = "learning-stage3-test"
"""The stage-3 test problems: a fresh draw of the test split that excludes every validation problem."""
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
FAMILY_ALPHA = 0.05


@dataclass(frozen=True)
class Arm:
    """One stage-3 arm: a study method (``study_common.method_config``) plus the config fields that define the arm."""

    name: str
    method: str  # grpo, dapo, meds or cliff (study_common's methods)
    overlong: bool  # DAPO's soft overlong penalty as a second reward (stage 2: on for DAPO and MEDS, off otherwise)
    overrides: tuple[tuple[str, object], ...] = ()  # config fields on top of the method's (frozen: a tuple of pairs)
    why: str = ""

    @property
    def config_overrides(self) -> dict:
        return dict(self.overrides)


STAGE3_ARMS = (
    Arm("grpo", "grpo", False, why="baseline: GRPO's loss, no overlong penalty (as in stage 2)"),
    Arm("dapo", "dapo", True, why="baseline: DAPO's loss and overlong penalty, no dynamic sampling (as in stage 2)"),
    Arm("dapo_no_overlong", "dapo", False, why="DAPO without the overlong penalty (stage 2's confound)"),
    Arm("dapo_ds", "dapo", True, (("dynamic_sampling", True),), why="DAPO with dynamic sampling on accuracy"),
    Arm(
        "meds_ds", "meds", True, (("dynamic_sampling", True),),
        why="MEDS with dynamic sampling on accuracy and the overlong penalty: the reference recipe (run_meds.sh)",
    ),
    Arm("meds", "meds", True, why="MEDS with the library's default on zero-variance groups, no dynamic sampling"),
    Arm(
        "meds_answer", "meds", True, (("meds_cluster_by", "answer"),),
        why="MEDS with answer-oracle clusters (exact final answer): the idea without the features",
    ),
    Arm(
        "meds_noise_free", "meds", True, (("meds_noise_policy", "ignore"),),
        why="MEDS whose rows voted into HDBSCAN noise are not penalised (the paper's wording)",
    ),
    Arm("cliff", "cliff", False, why="baseline: Cliff as in stage 2 (exact rule teacher, λ = 0, re-centred by b)"),
    Arm("cliff_b0", "cliff", False, (("cliff_recentre", False),), why="Cliff without re-centring (b = 0)"),
    Arm(
        "grpo_teacher_paper", "cliff", False, (("cliff_split_credit", False), ("cliff_recentre", False)),
        why="GRPO with Teacher as the paper describes it: one advantage per rollout, no b (stage 2's grpo_teacher "
        "subtracted b and ignored the teacher's output)",
    ),
)  # fmt: skip


@dataclass(frozen=True)
class Hypothesis:
    """A pre-registered comparison ``arm − baseline`` on held-out pass@1 with the predicted sign of the difference."""

    name: str
    arm: str
    baseline: str
    direction: int  # +1: arm above baseline; -1: below
    statement: str


STAGE3_HYPOTHESES = (
    Hypothesis("H1", "meds", "dapo", +1,
               "MEDS with zero-variance groups left unshaped beats DAPO (the paper's claim, without stage 2's "
               "shaping of all-wrong groups)"),
    Hypothesis("H2", "meds_ds", "dapo_ds", +1, "In the reference recipe (dynamic sampling) MEDS beats DAPO"),
    Hypothesis("H3", "dapo_ds", "dapo", +1, "Dynamic sampling raises DAPO's pass@1 at the same number of steps"),
    Hypothesis("H4", "meds_answer", "meds", +1,
               "Clustering by the exact answer beats clustering by the features (the features are the weak part)"),
    Hypothesis("H5", "meds_noise_free", "meds", +1,
               "Not penalising noise rows beats penalising them by the noise count"),
    Hypothesis("H6", "dapo_no_overlong", "dapo", +1,
               "The overlong penalty costs DAPO pass@1 here (10-13 % of correct solutions exceed the buffer's start)"),
    Hypothesis("H7", "dapo_no_overlong", "grpo", -1,
               "Without the overlong penalty, DAPO's loss is still below GRPO's (stage 2's reading, confound removed)"),
    Hypothesis("H8", "cliff_b0", "cliff", +1,
               "Cliff without re-centring beats Cliff (stage 2: subtracting b cost GRPO 1.5 points)"),
    Hypothesis("H9", "cliff", "grpo_teacher_paper", +1,
               "Cliff beats GRPO with Teacher as the paper describes it (the paper's ablation)"),
)  # fmt: skip
"""The family over which Holm's correction runs (pass@1, the primary metric; pass@16 is a second family)."""

STAGE3_CHECKS = (("grpo_teacher_paper", "grpo"),)
"""Reported, not tested: with an exact teacher that never disagrees with the verifier (0 disagreements in all 16
stage-2 Cliff runs) the paper's GRPO with Teacher gives GRPO's advantages, so any difference is a defect."""
