"""Report of ``studies/learning_study.py``: the pre-registered rule, stage 1's candidates, stage 2's methods with
paired comparisons, learning curves and the no-collapse probe; keeps a hand-written reading between markers.

python studies/learning_study.py --report docs/learning_study.md
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_design import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CANDIDATES,
    FAMILY_ALPHA,
    MAX_RUN_MINUTES,
    MIN_PASS1_GAIN,
    MIN_SEEDS_WITH_GAIN,
    NOISE_SDS,
    STAGE3_ARMS,
    STAGE3_CHECKS,
    STAGE3_HYPOTHESES,
    STAGE3_REGIME,
    STAGE3_SEEDS,
    STAGE3_TEST_STREAM,
    decide,
)
from study_common import (
    ALL_METHODS,
    bootstrap_difference,
    expected_distinct,
    finite,
    holm,
    mean_std,
    paired_test,
    pass_at_k_matrix,
)

READING_START, READING_END = "<!-- reading:start -->", "<!-- reading:end -->"

STAGE3_ERRATA = {
    "grpo_teacher_paper": (
        "**Erratum (written after the runs; the pre-registered text above is left as committed).** "
        "`grpo_teacher_paper` was not GRPO with Teacher as the paper describes it: it was GRPO by construction. "
        "`cliff_split_credit=False, cliff_recentre=False` gives every rollout the verifier's sequence advantage, so "
        "the teacher's output was thrown away, and a teacher that disagreed with the verifier would have been "
        "overruled. In the paper's ablation the teacher's verdict decides right or wrong, one advantage per rollout "
        "(the library now has it: `CliffConfig(cliff_outcome=\"teacher\")`). So the arm's data stand as GRPO's (the "
        "check below found it identical to `grpo` in all 8 seeds), H9 tested Cliff − GRPO, and stage 3 says nothing "
        "about the paper's GRPO with Teacher. Whether that would have differed here is not known: the exact rule "
        "teacher agrees with the verifier on every wrong rollout, but the paper's mode also asks it about "
        "verifier-right rollouts, where it can find a wrong step before a right final answer."
    ),
}
"""Errata to stage 3's pre-registered arms, shown beside them (the pre-registered text itself is not changed)."""
PAIRS = (
    ("dapo", "grpo"),
    ("meds", "dapo"),
    ("meds_strong", "dapo"),
    ("cliff", "grpo"),
    ("grpo_teacher", "grpo"),
    ("cliff", "grpo_teacher"),
)


def _pct(value) -> str:
    return (
        "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"
    )


def stage1_section(results: Path, candidates=CANDIDATES) -> str:
    decision = decide(results, candidates)
    lines = [
        "## Stage 1: does GRPO generalise? (rule written before any run)",
        "",
        (
            f"A candidate passes when (1) held-out pass@1 rises over the warm-up by at least {100 * MIN_PASS1_GAIN:.0f} "
            f"points in at least {MIN_SEEDS_WITH_GAIN} of 5 seeds (run seed s against the warm-up evaluated with "
            f"evaluation seed s); (2) the mean held-out pass@16 is not below the warm-up's minus {NOISE_SDS:g} standard "
            "deviations of the warm-up's pass@16 over the 5 evaluation seeds; (3) the median run's training takes at "
            f"most {MAX_RUN_MINUTES:g} CPU minutes (one thread; CPU time, which a shared machine does not inflate). "
            "Among passing candidates the largest mean pass@1 "
            "gain wins; within 1 point, fewer steps. No candidate passing stops the study here."
        ),
        "",
        (
            "| candidate | world | steps | pool | visits/prompt | lr (schedule) | seeds done | pass@1 gain per seed "
            "| seeds ≥ +5 | mean pass@16 (warm-up ± sd) | median CPU min | passes |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_name = {c.name: c for c in candidates}
    for row in decision["candidates"]:
        regime = by_name[row["candidate"]]
        head = (
            f"| {regime.name} | {regime.world} | {regime.steps} | {regime.pool_size} | {regime.visits_per_prompt:g} "
            f"| {regime.learning_rate:g} ({regime.lr_scheduler_type}) "
        )
        if "pass1_gains" not in row:
            lines.append(head + "| 0 | not run yet | | | | | |")
            continue
        gains = ", ".join(f"{100 * g:+.1f}" for g in row["pass1_gains"])
        lines.append(
            head + f"| {len(row['seeds'])} | {gains} | {row['seeds_with_gain']} | {_pct(row['mean_pass16'])} "
            f"({_pct(row['warmup_pass16'])} ± {_pct(row['warmup_pass16_sd'])}) | {row['median_train_cpu_minutes']:.1f} "
            f"| {'yes' if row['passes'] else ('no' if row['complete'] else 'incomplete')} |"
        )
    lines += ["", "Why each candidate was listed (before any run):", ""]
    lines += [f"- `{c.name}`: {c.why}." for c in candidates if c.why]
    chosen = decision["chosen"]
    if not decision["complete"]:
        verdict = "Stage 1 is not complete yet: no decision."
    elif chosen is None:
        verdict = (
            "**No candidate meets the rule: stage 2 does not run** (the rule is not loosened afterwards)."
        )
    else:
        verdict = f"**Chosen regime: `{chosen}`.**"
    return "\n".join([*lines, "", verdict, ""])


def _runs(results: Path) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for path in sorted(results.glob("*-seed*.json")):
        if path.name.startswith(("stage1-", "stage3-")):
            continue
        run = json.loads(path.read_text())
        runs.setdefault(run["method"], []).append(run)
    return runs


def history_mean(run: dict, key: str) -> float:
    """Mean of a trainer metric over a run's logged steps (NaN where it was never logged).

    >>> history_mean({"history": [{"a": 1.0}, {"a": 3.0}, {}]}, "a"), history_mean({"history": [{}]}, "a")
    (2.0, nan)
    """
    values = finite(h.get(key) for h in run.get("history", []))
    return statistics.mean(values) if values else math.nan


def stage2_section(results: Path, figures: Path) -> str:
    runs = _runs(results)
    if not runs:
        return "## Stage 2: the methods\n\nNot run yet (it needs stage 1's chosen regime).\n"
    warmup_path = results / "warmup.json"
    warmup = json.loads(warmup_path.read_text()) if warmup_path.exists() else None
    lines = [
        "## Stage 2: the methods in the chosen regime",
        "",
        (
            "Held-out pass@k (%, unbiased estimator, mean ± sd over seeds); advantage shift and prefix share from the "
            "trainers' own metrics (mean over steps); no-collapse ratio = distinct wrong answers per prompt on the pool "
            "at the last probe over the number expected from the warm-up's own wrong answers (< 1: error collapse)."
        ),
        "",
        (
            "| method | seeds | pass@1 | pass@4 | pass@16 | steps to GRPO's final curve accuracy | MEDS advantage shift "
            "| Cliff prefix share | no-collapse ratio |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if warmup is not None:
        held = warmup["heldout"]
        lines.append(
            f"| warm-up | – | {_pct(held.get('pass@1'))} | {_pct(held.get('pass@4'))} | {_pct(held.get('pass@16'))} | | | | 1 |"
        )
    grpo_curve = mean_curve(runs.get("grpo", []))
    grpo_final = grpo_curve[-1][1] if grpo_curve else None
    for method in ALL_METHODS:
        group = runs.get(method, [])
        if not group:
            continue

        collapse = (
            [no_collapse_ratio(run, warmup)[-1]["ratio"] for run in group]
            if warmup is not None
            else [math.nan]
        )
        lines.append(
            f"| {method} | {len(group)} | {mean_std([r['heldout'].get('pass@1') for r in group], 100)} "
            f"| {mean_std([r['heldout'].get('pass@4') for r in group], 100)} "
            f"| {mean_std([r['heldout'].get('pass@16') for r in group], 100)} "
            f"| {steps_to_reach(mean_curve(group), grpo_final)} "
            f"| {mean_std([history_mean(r, 'meds/advantage_shift') for r in group], 1, 3)} "
            f"| {mean_std([history_mean(r, 'cliff/prefix_fraction') for r in group], 1, 2)} "
            f"| {mean_std(collapse, 1, 2)} |"
        )
    lines += [
        "",
        "Paired comparisons over seeds (difference in points; paired t-test and exact sign-flip p):",
        "",
    ]
    lines += ["| comparison | n | Δ pass@1 | p (t) | p (sign-flip) | Δ pass@16 | p (t) | p (sign-flip) |"]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for method, baseline in PAIRS:
        a = {r["seed"]: r for r in runs.get(method, [])}
        b = {r["seed"]: r for r in runs.get(baseline, [])}
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            continue
        cells = []
        for key in ("pass@1", "pass@16"):
            if not all(key in a[s]["heldout"] and key in b[s]["heldout"] for s in seeds):
                cells.append("n/a | | ")
                continue
            test = paired_test([a[s]["heldout"][key] - b[s]["heldout"][key] for s in seeds])
            cells.append(f"{100 * test['mean']:+.1f} | {test['t_p']:.3f} | {test['sign_flip_p']:.3f}")
        lines.append(f"| {method} − {baseline} | {len(seeds)} | " + " | ".join(cells) + " |")
    lines.append("")
    figure = plot_curves(runs, warmup, figures)
    if figure is not None:
        lines += [f"![held-out pass@1 during training]({figure})", ""]
    return "\n".join(lines)


def no_collapse_ratio(run: dict, warmup: dict) -> list[dict]:
    """Per probe step: observed distinct wrong answers per prompt over the number expected when the same number
    of wrong answers is drawn from the warm-up's own wrong answers (rarefaction): < 1 is error collapse."""
    reference = warmup["diversity_reference"]["wrong_answers"]
    rows = []
    for record in run["probe"]:
        observed, expected = [], []
        for wrong, pool in zip(record["wrong_answers"], reference):
            if wrong and pool:
                observed.append(len(set(wrong)))
                expected.append(expected_distinct(pool, len(wrong)))
        ratio = sum(observed) / sum(expected) if expected and sum(expected) > 0 else math.nan
        rows.append({"step": record["step"], "ratio": ratio})
    return rows


def stage3_rules_section() -> str:
    """The stage-3 rules, arms and hypotheses, rendered from ``learning_design.py`` (committed before any run)."""
    seeds = f"{STAGE3_SEEDS[0]}-{STAGE3_SEEDS[-1]}"
    lines = [
        "## Stage 3: the open questions as pre-registered ablations (rules written before any run)",
        "",
        "An audit of stages 1 and 2 left five points open: MEDS shaped all-wrong groups (the reference recipe "
        "filters them out), stage 2's \"GRPO with Teacher\" measured Cliff's re-centring b rather than a teacher, the DAPO arms "
        "carried the overlong penalty and GRPO did not, the protocol had gaps, and MEDS's features may not track "
        "the answers. Stage 3 tests each as a separate arm, with these rules:",
        "",
        f"- **Regime and budget:** `{STAGE3_REGIME}` (stage 1's choice), with stage 2's steps, pool, prompts per step, "
        "rollouts, learning rate and schedule. The dynamic-sampling arms keep the number of steps and the batch "
        "size; their batch is filled from extra generation rounds (at most 10, as in the reference), so they draw "
        "more rollouts per step: that is part of the recipe being tested.",
        f"- **Seeds:** {len(STAGE3_SEEDS)} per arm, training seeds {seeds} (stages 1 and 2 used 0-7); every arm is "
        "trained in stage 3, no earlier run is reused. Run seed s is evaluated with evaluation seed s.",
        "- **Problems:** the hypotheses are tested on a *test set* of 128 trap problems of the test split drawn "
        f"fresh (stream `{STAGE3_TEST_STREAM}`), which excludes the 128 held-out problems of stages 1 and 2. Those "
        "(on which the regime was chosen) are the *validation set*: stage 3 makes no choice, and any that turned "
        "out to be needed would be made on the validation set only. Both sets are evaluated (16 samples each).",
        "- **Saved per run** (`docs/learning_study_results/stage3-<arm>-seed<k>.json`): `stage: 3`, the arm, its "
        "method and config fields, the seed, held-out pass@1..16 on both sets, each problem's number of correct "
        "samples out of 16 (`heldout_correct`, `validation_correct`), the commit of the code (and whether the "
        "working tree had local changes) and the start and end time (UTC).",
        "- **Statistics:** for each comparison arm − baseline, the difference in mean pass@k over seeds and "
        "problems (unbiased estimator per problem and seed). 95 % confidence interval: percentile bootstrap with "
        f"{BOOTSTRAP_RESAMPLES:,} resamples, resampling seeds (paired: the same seed indices for both arms) and "
        "problems (the same problems for both arms) with replacement. p-value: two-sided, from the same bootstrap, "
        "p = min(1, 2 min(#{Δ* ≤ 0} + 1, #{Δ* ≥ 0} + 1) / (B + 1)). Holm's correction runs over the "
        f"{len(STAGE3_HYPOTHESES)} hypotheses below on pass@1 (the primary metric, family-wise α = {FAMILY_ALPHA:g}); "
        "pass@16 is a second family with the same procedure. The paired t-test over seeds is shown beside, not used "
        "for the verdicts.",
        f"- **Verdicts:** *holds* when the Holm-adjusted p is below {FAMILY_ALPHA:g} and the difference has the "
        "predicted sign; *reversed* when it is below with the other sign; otherwise *not shown* (which is not a "
        "claim of equality).",
        "- **MEDS's default:** the MEDS arms use `MEDSConfig`'s default on groups whose correctness has no variance "
        "(no shaping there, as in the reference, where such groups never reach the loss); the results "
        "files record every `meds_*` field and the commit, so which code ran can be checked for every run.",
        "- **Failures:** a run that fails is rerun with the same seed; no arm or seed is dropped after the fact. An "
        "arm that cannot finish is reported as failed, with its error.",
        "",
        "| arm | method | config on top of the method | overlong penalty | why |",
        "|---|---|---|---|---|",
    ]
    for arm in STAGE3_ARMS:
        overrides = ", ".join(f"`{k}={v!r}`" for k, v in arm.overrides) or "–"
        overlong = "on" if arm.overlong else "off"
        erratum = " *(see the erratum below the table)*" if arm.name in STAGE3_ERRATA else ""
        lines.append(f"| `{arm.name}` | {arm.method} | {overrides} | {overlong} | {arm.why}{erratum} |")
    lines += [""] + [STAGE3_ERRATA[arm.name] for arm in STAGE3_ARMS if arm.name in STAGE3_ERRATA]
    lines += ["", "Hypotheses (held-out pass@1 on the test set; the family of Holm's correction):", ""]
    lines += ["| | comparison | predicted | hypothesis |", "|---|---|---|---|"]
    for h in STAGE3_HYPOTHESES:
        sign = "arm > baseline" if h.direction > 0 else "arm < baseline"
        erratum = (
            " *(erratum above: the arm was GRPO)*" if STAGE3_ERRATA.keys() & {h.arm, h.baseline} else ""
        )
        lines.append(f"| {h.name} | `{h.arm}` − `{h.baseline}` | {sign} | {h.statement}.{erratum} |")
    checks = ", ".join(f"`{a}` − `{b}`" for a, b in STAGE3_CHECKS)
    lines += [
        "",
        f"Check, not a hypothesis ({checks}): with an exact teacher that never disagrees with the verifier (0 "
        "disagreements in all 16 stage-2 Cliff runs), the paper's GRPO with Teacher gives GRPO's advantages, so the "
        "two arms should differ by nothing but chance; a difference would be a defect.",
        "",
        "Run: `python studies/learning_study.py --stage 3` (all arms, seed-major; two processes split the seeds with "
        "`--seeds 100 101 102 103` and `--seeds 107 106 105 104`), then `--report docs/learning_study.md`.",
        "",
    ]
    return "\n".join(lines)


def stage3_runs(results: Path) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: run}}`` of the stage-3 results files (the warm-up's file excluded)."""
    runs: dict[str, dict[int, dict]] = {}
    for path in sorted(results.glob("stage3-*-seed*.json")):
        run = json.loads(path.read_text())
        runs.setdefault(run["arm"], {})[run["seed"]] = run
    return runs


def stage3_comparison(arm_runs: dict[int, dict], baseline_runs: dict[int, dict], k: int) -> dict | None:
    """Bootstrap difference of held-out pass@k (test set) between two arms over their common seeds, with the paired
    t-test over seeds beside it; None with fewer than 2 common seeds or fewer than ``k`` samples per problem."""
    seeds = sorted(set(arm_runs) & set(baseline_runs))
    if len(seeds) < 2:
        return None
    n = arm_runs[seeds[0]]["samples_per_problem"]
    if k > n:
        return None
    arm = pass_at_k_matrix([arm_runs[s]["heldout_correct"] for s in seeds], n, k)
    baseline = pass_at_k_matrix([baseline_runs[s]["heldout_correct"] for s in seeds], n, k)
    result = bootstrap_difference(arm, baseline, resamples=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED)
    result["t_p"] = paired_test(list(arm.mean(axis=1) - baseline.mean(axis=1)))["t_p"]
    result["seeds"] = len(seeds)
    return result


def verdict(difference: float, adjusted_p: float, direction: int) -> str:
    """*holds* / *reversed* / *not shown* by the pre-registered rule (Holm-adjusted p below the family's α).

    >>> verdict(0.02, 0.01, +1), verdict(-0.02, 0.01, +1), verdict(0.02, 0.2, +1), verdict(-0.02, 0.01, -1)
    ('holds', 'reversed', 'not shown', 'holds')
    """
    if math.isnan(adjusted_p) or adjusted_p >= FAMILY_ALPHA:
        return "not shown"
    return "holds" if difference * direction > 0 else "reversed"


def stage3_results_section(results: Path) -> str:
    runs = stage3_runs(results)
    if not runs:
        return "### Stage 3 results\n\nNot run yet.\n"
    expected = {(arm.name, seed) for arm in STAGE3_ARMS for seed in STAGE3_SEEDS}
    done = {(arm, seed) for arm, group in runs.items() for seed in group} & expected
    complete = done == expected
    lines = ["### Stage 3 results", ""]
    if not complete:
        lines += [
            f"**Incomplete: {len(done)} of {len(expected)} pre-registered runs.** Every comparison below is interim: it "
            "uses the seeds both arms have so far, Holm's correction runs over the hypotheses that have a pair of runs, "
            "and each verdict is marked *interim*. None is a result of the study until every arm has its "
            f"{len(STAGE3_SEEDS)} seeds.",
            "",
        ]
    lines += [
        "Held-out pass@k (%, mean ± sd over seeds) on the stage-3 test set, and pass@1 on the validation set; the "
        "code each arm's runs came from.",
        "",
        "| arm | seeds | pass@1 | pass@4 | pass@16 | validation pass@1 | commits |",
        "|---|---|---|---|---|---|---|",
    ]
    warmup_path = results / "stage3-warmup.json"
    if warmup_path.exists():
        per_seed = json.loads(warmup_path.read_text())["per_eval_seed"].values()
        cells = " | ".join(mean_std([v["heldout"].get(f"pass@{k}") for v in per_seed], 100) for k in (1, 4, 16))
        lines.append(f"| warm-up | – | {cells} | {mean_std([v['validation']['pass@1'] for v in per_seed], 100)} | |")
    for arm in [a.name for a in STAGE3_ARMS if a.name in runs] + sorted(set(runs) - {a.name for a in STAGE3_ARMS}):
        group = list(runs[arm].values())
        commits = sorted({(r.get("commit") or "unknown")[:8] + ("+dirty" if r.get("dirty") else "") for r in group})
        cells = " | ".join(mean_std([r["heldout"].get(f"pass@{k}") for r in group], 100) for k in (1, 4, 16))
        lines.append(
            f"| `{arm}` | {len(group)} | {cells} | {mean_std([r['validation']['pass@1'] for r in group], 100)} "
            f"| {', '.join(commits)} |"
        )
    for k, family in ((1, "primary"), (16, "secondary")):
        lines += [
            "",
            f"Pre-registered comparisons, held-out pass@{k} ({family} family): difference in points with its 95 % "
            f"bootstrap CI over problems and seeds ({BOOTSTRAP_RESAMPLES:,} resamples), bootstrap p, Holm-adjusted "
            "p over the family, and the paired t-test over seeds (not used for the verdict).",
            "",
            "| | comparison | predicted | seeds | Δ (95 % CI) | p | p (Holm) | p (t, seeds) | verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        compared = [
            (h, stage3_comparison(runs.get(h.arm, {}), runs.get(h.baseline, {}), k)) for h in STAGE3_HYPOTHESES
        ]
        adjusted = holm([c["p"] if c is not None else math.nan for _, c in compared])
        for (h, c), p_holm in zip(compared, adjusted):
            sign = ">" if h.direction > 0 else "<"
            if c is None:
                lines.append(f"| {h.name} | `{h.arm}` − `{h.baseline}` | {sign} | – | no pair of runs yet | | | | |")
                continue
            lines.append(
                f"| {h.name} | `{h.arm}` − `{h.baseline}` | {sign} | {c['seeds']} | {100 * c['difference']:+.1f} "
                f"({100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}) | {c['p']:.4f} | {p_holm:.4f} "
                f"| {c['t_p']:.3f} | {'' if complete else 'interim: '}{verdict(c['difference'], p_holm, h.direction)} |"
            )
        for arm, baseline in STAGE3_CHECKS:
            c = stage3_comparison(runs.get(arm, {}), runs.get(baseline, {}), k)
            if c is not None:
                lines.append(
                    f"| check | `{arm}` − `{baseline}` | = | {c['seeds']} | {100 * c['difference']:+.1f} "
                    f"({100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}) | {c['p']:.4f} | – | {c['t_p']:.3f} | – |"
                )
    return "\n".join([*lines, *stage3_mechanism_lines(runs), ""])


STAGE3_MECHANISM_METRICS = (
    ("meds/frac_penalized", "MEDS rows penalised", 100, 1),
    ("meds/advantage_shift", "MEDS advantage shift", 1, 4),
    ("meds/frac_groups_differentiated", "groups MEDS differentiates (%)", 100, 1),
    ("cliff/prefix_fraction", "Cliff prefix share", 1, 2),
)


def stage3_mechanism_lines(runs: dict[str, dict[int, dict]]) -> list[str]:
    """What each arm's mechanism did, from the trainers' own metrics (mean over steps, then mean ± sd over seeds),
    and its training CPU time: a description of the runs, not a pre-registered comparison."""

    lines = [
        "",
        (
            "What each arm's mechanism did (descriptive, not a pre-registered comparison): the trainers' own metrics, "
            "mean over the logged steps, then mean ± sd over seeds (rows penalised in %; advantage shift = mean "
            "|A_MEDS − A_without penalty| per row; n/a: the arm has no such mechanism), and the training CPU time "
            "per run (one thread, median)."
        ),
        "",
        "| arm | seeds | " + " | ".join(label for _, label, _, _ in STAGE3_MECHANISM_METRICS) + " | training CPU s |",
        "|---|---|" + "---|" * len(STAGE3_MECHANISM_METRICS) + "---|",
    ]
    for arm in [a.name for a in STAGE3_ARMS if a.name in runs]:
        group = list(runs[arm].values())
        cells = [mean_std([history_mean(r, k) for r in group], scale, digits) for k, _, scale, digits in STAGE3_MECHANISM_METRICS]
        cpu = finite(r.get("train_cpu_seconds") for r in group)
        median_cpu = f"{statistics.median(cpu):.0f}" if cpu else "n/a"
        lines.append(f"| `{arm}` | {len(group)} | {' | '.join(cells)} | {median_cpu} |")
    return lines


def mean_curve(group: list[dict]) -> list[tuple[int, float]]:
    """``(step, mean held-out pass@1 on the curve subset)`` over the runs of one method."""
    steps = sorted({point["step"] for run in group for point in run["curve"]})
    return [
        (
            step,
            statistics.mean(p["heldout_pass@1"] for run in group for p in run["curve"] if p["step"] == step),
        )
        for step in steps
    ]


def steps_to_reach(curve: list[tuple[int, float]], target: float | None) -> str:
    """The first step at which ``curve`` reaches ``target`` (Cliff's claim of better credit assignment is speed).

    >>> steps_to_reach([(0, 0.2), (10, 0.3), (20, 0.5)], 0.3)
    '10'
    """
    if target is None:
        return "n/a"
    return next((str(step) for step, value in curve if value >= target - 1e-9), "not reached")


def plot_curves(runs: dict[str, list[dict]], warmup: dict | None, figures: Path) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures.mkdir(parents=True, exist_ok=True)
    figure, axis = plt.subplots(figsize=(6, 4))
    for method, group in runs.items():
        curve = mean_curve(group)
        axis.plot([s for s, _ in curve], [100 * v for _, v in curve], marker="o", markersize=3, label=method)
    if warmup is not None:
        axis.axhline(100 * warmup["heldout"]["pass@1"], color="grey", linestyle="--", label="warm-up")
    axis.set_xlabel("step")
    axis.set_ylabel("held-out pass@1 on the curve subset (%)")
    axis.legend(fontsize=8)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    path = figures / "learning_curves.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return f"{figures.name}/{path.name}"


def write_report(results: Path, report_path: Path, candidates=CANDIDATES) -> None:
    """Write the report; a hand-written reading between the markers of an existing report is kept."""
    reading = f"{READING_START}\n_The reading is written from the results once they exist._\n{READING_END}"
    if report_path.exists():
        old = report_path.read_text()
        if READING_START in old and READING_END in old:
            reading = old[old.index(READING_START) : old.index(READING_END) + len(READING_END)]
    figures = report_path.parent / "figures"
    text = "\n".join(
        [
            "# Learning study: a regime where RL generalises, then the methods in it",
            "",
            (
                "Produced by `python studies/learning_study.py --report docs/learning_study.md` from the results files "
                "in `docs/learning_study_results/` (one JSON per run, written as each run ends; the study resumes "
                "where it stopped). Every configuration tried is listed, not only the chosen one."
            ),
            "",
            stage1_section(results, candidates),
            stage2_section(results, figures),
            stage3_rules_section(),
            stage3_results_section(results),
            "## Reading",
            "",
            reading,
            "",
        ]
    )
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(text)
