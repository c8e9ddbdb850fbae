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
from study_common import ALL_METHODS, expected_distinct, finite, mean_std, paired_test

READING_START, READING_END = "<!-- reading:start -->", "<!-- reading:end -->"
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
        if path.name.startswith("stage1-"):
            continue
        run = json.loads(path.read_text())
        runs.setdefault(run["method"], []).append(run)
    return runs


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

        def metric(run, key):
            values = finite(h.get(key) for h in run["history"])
            return statistics.mean(values) if values else math.nan

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
            f"| {mean_std([metric(r, 'meds/advantage_shift') for r in group], 1, 3)} "
            f"| {mean_std([metric(r, 'cliff/prefix_fraction') for r in group], 1, 2)} "
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
        "Issue 28's audit left five points open: MEDS shaped all-wrong groups (the reference recipe filters them "
        "out), stage 2's \"GRPO with Teacher\" measured Cliff's re-centring b rather than a teacher, the DAPO arms "
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
        "(issue 28: no shaping there, as in the reference, where such groups never reach the loss); the results "
        "files record every `meds_*` field, so the report shows which code ran.",
        "- **Failures:** a run that fails is rerun with the same seed; no arm or seed is dropped after the fact. An "
        "arm that cannot finish is reported as failed, with its error.",
        "",
        "| arm | method | config on top of the method | overlong penalty | why |",
        "|---|---|---|---|---|",
    ]
    for arm in STAGE3_ARMS:
        overrides = ", ".join(f"`{k}={v!r}`" for k, v in arm.overrides) or "–"
        overlong = "on" if arm.overlong else "off"
        lines.append(f"| `{arm.name}` | {arm.method} | {overrides} | {overlong} | {arm.why} |")
    lines += ["", "Hypotheses (held-out pass@1 on the test set; the family of Holm's correction):", ""]
    lines += ["| | comparison | predicted | hypothesis |", "|---|---|---|---|"]
    for h in STAGE3_HYPOTHESES:
        sign = "arm > baseline" if h.direction > 0 else "arm < baseline"
        lines.append(f"| {h.name} | `{h.arm}` − `{h.baseline}` | {sign} | {h.statement}. |")
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
            "## Reading",
            "",
            reading,
            "",
        ]
    )
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(text)
