"""Report of ``studies/mechanism_study.py``: tables, paired significance, plots; keeps a hand-written reading.

python studies/mechanism_study.py --report_only --report docs/mechanism_study.md
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_common import ALL_METHODS, expected_distinct, mean_std, paired_test
from study_common import finite as _finite

METHODS = ALL_METHODS
PAIRS = (  # (method, its baseline): the comparisons the study is about
    ("dapo", "grpo"),
    ("meds", "dapo"),
    ("meds_strong", "dapo"),
    ("cliff", "grpo"),
    ("grpo_teacher", "grpo"),
    ("cliff", "grpo_teacher"),
)
PROBE_KEYS = (
    ("reward", "probe reward (training pool)"),
    ("distinct_wrong_answers", "distinct wrong answers / prompt"),
    ("distinct_per_wrong", "distinct wrong answers / wrong rollout"),
    ("wrong_answer_top_share", "share of the top wrong answer"),
    ("trap_share_of_wrong", "trap share of wrong answers"),
    ("eigen_ratio_wrong", "top-1 eigen ratio, wrong answers"),
)
READING_START, READING_END = "<!-- reading:start -->", "<!-- reading:end -->"


def add_derived_probe_metrics(runs: list[dict], probe_samples: int) -> None:
    """``distinct_per_wrong``: distinct wrong answers per prompt over the mean number of wrong rollouts per prompt.

    Fewer wrong rollouts alone mean fewer distinct wrong answers and a larger top share; this ratio (an
    approximation: a ratio of means over the pool) separates a collapse of the errors from a rise in accuracy.
    """
    for run in runs:
        for record in run["probe"]:
            wrong = probe_samples * (1.0 - record["reward"])
            record["distinct_per_wrong"] = record["distinct_wrong_answers"] / wrong if wrong > 0 else math.nan


def rarefaction_rows(premise: list[dict]) -> list[dict]:
    """Per premise run and probe step: observed distinct wrong answers per prompt vs the no-collapse expectation.

    The expectation draws, for every prompt, as many wrong answers as the probe saw from the warm-up's own wrong
    answers on that prompt (a large warm-up sample): what the diversity would be if training had only removed
    wrong rollouts at random. Prompts whose probe saw more wrong answers than the reference holds are capped.
    """
    reference = next((r for r in premise if r.get("method") is None and "wrong_answers" in r), None)
    if reference is None:
        return []
    rows = []
    for run in premise:
        if run.get("method") != "grpo":
            continue
        for record in run["probe"]:
            observed, expected, capped = [], [], 0
            for wrong, ref in zip(record["wrong_answers"], reference["wrong_answers"]):
                capped += len(wrong) > len(ref)
                observed.append(len(set(wrong)))
                expected.append(expected_distinct(ref, len(wrong)))
            rows.append(
                {
                    "seed": run["seed"],
                    "step": record["step"],
                    "wrong_per_prompt": statistics.mean(len(w) for w in record["wrong_answers"]),
                    "observed": statistics.mean(observed),
                    "expected": statistics.mean(expected),
                    "capped": capped,
                    "trap_share": record["trap_share_of_wrong"],
                }
            )
    return rows


def probe_curve(runs: list[dict], key: str) -> tuple[list[int], list[float]]:
    steps = sorted({p["step"] for r in runs for p in r["probe"]})
    values = []
    for step in steps:
        at_step = _finite([p.get(key) for r in runs for p in r["probe"] if p["step"] == step])
        values.append(statistics.mean(at_step) if at_step else math.nan)
    return steps, values


def history_curve(runs: list[dict], key: str) -> tuple[list[int], list[float]]:
    steps = sorted({h["step"] for r in runs for h in r["history"] if key in h})
    values = [
        statistics.mean(
            _finite([h[key] for r in runs for h in r["history"] if h["step"] == s and key in h]) or [math.nan]
        )
        for s in steps
    ]
    return steps, values


def write_report(
    runs: list[dict], settings: dict, report_path: Path, premise: list[dict] | None = None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    report_path.parent.mkdir(parents=True, exist_ok=True)
    figures = report_path.parent / "figures"
    figures.mkdir(exist_ok=True)
    results_dir = report_path.parent / f"{report_path.stem}_results"
    results_dir.mkdir(exist_ok=True)
    for run in runs:
        (results_dir / f"{run['method']}-seed{run['seed']}.json").write_text(json.dumps(run, indent=1))
    for run in premise or []:
        name = (
            f"premise-grpo-seed{run['seed']}" if run.get("method") == "grpo" else "premise-warm-up-reference"
        )
        (results_dir / f"{name}.json").write_text(json.dumps(run, indent=1))

    add_derived_probe_metrics(runs, settings["probe_samples"])
    initial = next((r for r in runs if r["method"] == "warm-up"), None)
    by_method = {m: sorted((r for r in runs if r["method"] == m), key=lambda r: r["seed"]) for m in METHODS}
    methods = [m for m in METHODS if by_method[m]]
    seeds = sorted({r["seed"] for m in methods for r in by_method[m]})
    ks = [int(k) for k in (initial or by_method[methods[0]][0])["eval"]["pass@k"]]
    shown_ks = [k for k in (1, 2, 4, 8, 16) if k in ks]

    # premise figure: GRPO's probe over training
    grpo = by_method.get("grpo", [])
    fig, axes = plt.subplots(1, len(PROBE_KEYS), figsize=(3.2 * len(PROBE_KEYS), 3.2))
    for ax, (key, label) in zip(axes, PROBE_KEYS):
        for run in grpo:
            ax.plot([p["step"] for p in run["probe"]], [p[key] for p in run["probe"]], color="C0", alpha=0.3)
        if grpo:
            ax.plot(*probe_curve(grpo, key), color="C0", marker="o", label="GRPO, mean")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figures / "mechanism_premise_grpo.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    if initial:
        ax.plot(ks, [initial["eval"]["pass@k"][str(k)] for k in ks], "k--", label="warm-up")
    for method in methods:
        ax.plot(
            ks,
            [statistics.mean(r["eval"]["pass@k"][str(k)] for r in by_method[method]) for k in ks],
            marker=".",
            label=method,
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (held-out trap problems)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figures / "mechanism_passk.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(PROBE_KEYS), figsize=(3.2 * len(PROBE_KEYS), 3.2))
    for ax, (key, label) in zip(axes, PROBE_KEYS):
        for method in methods:
            ax.plot(*probe_curve(by_method[method], key), marker=".", label=method)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(figures / "mechanism_diversity.png", dpi=110)
    plt.close(fig)

    meds_methods = [m for m in methods if m.startswith("meds")]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, key in zip(
        axes, ("meds/advantage_shift", "meds/frac_groups_differentiated", "meds/frac_penalized")
    ):
        for method in meds_methods:
            ax.plot(*history_curve(by_method[method], key), marker=".", label=method)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if meds_methods:
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figures / "mechanism_advantage_shift.png", dpi=110)
    plt.close(fig)

    # tables
    header = (
        "| method | "
        + " | ".join(f"pass@{k}" for k in shown_ks)
        + " | distinct wrong / problem | trap share of wrong |"
    )
    table = [header, "|---|" + "---|" * (len(shown_ks) + 2)]
    if initial:
        e = initial["eval"]
        table.append(
            "| warm-up (start) | "
            + " | ".join(mean_std([e["pass@k"][str(k)]], 100) for k in shown_ks)
            + f" | {e['distinct_wrong_answers']:.2f} | {100 * e['trap_share_of_wrong']:.1f} |"
        )
    for method in methods:
        rs = by_method[method]
        table.append(
            f"| {method} (n={len(rs)}) | "
            + " | ".join(mean_std([r["eval"]["pass@k"][str(k)] for r in rs], 100) for k in shown_ks)
            + f" | {mean_std([r['eval']['distinct_wrong_answers'] for r in rs], 1, 2)}"
            + f" | {mean_std([r['eval']['trap_share_of_wrong'] for r in rs], 100)} |"
        )

    probe_table = [
        "| method | " + " | ".join(label for _, label in PROBE_KEYS) + " |",
        "|---|" + "---|" * len(PROBE_KEYS),
    ]
    if initial:
        p0 = initial["probe"][0]
        probe_table.append("| warm-up (step 0) | " + " | ".join(f"{p0[k]:.3f}" for k, _ in PROBE_KEYS) + " |")
    for method in methods:
        last = [r["probe"][-1] for r in by_method[method]]
        probe_table.append(
            f"| {method} (final) | "
            + " | ".join(mean_std([p[k] for p in last], 1, 3) for k, _ in PROBE_KEYS)
            + " |"
        )

    mechanism_table = [
        "| method | mean meds/advantage_shift | mean meds/frac_groups_differentiated | mean meds/frac_penalized | mean cliff/prefix_fraction | train minutes |",
        "|---|---|---|---|---|---|",
    ]
    for method in methods:
        rs = by_method[method]

        def run_mean(key, rs=rs):
            per_run = [statistics.mean(_finite([h.get(key) for h in r["history"]]) or [math.nan]) for r in rs]
            return mean_std(per_run, 1, 3) if _finite(per_run) else "–"

        mechanism_table.append(
            f"| {method} | {run_mean('meds/advantage_shift')} | {run_mean('meds/frac_groups_differentiated')} | "
            f"{run_mean('meds/frac_penalized')} | {run_mean('cliff/prefix_fraction')} | "
            f"{mean_std([r['train_seconds'] / 60 for r in rs], 1, 1)} |"
        )

    significance = [
        "| comparison | seeds | Δ pass@1 (points) | p (t / sign-flip) | Δ pass@16 (points) | p (t / sign-flip) | Δ distinct wrong | p (t / sign-flip) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, baseline in PAIRS:
        a = {r["seed"]: r for r in by_method.get(method, [])}
        b = {r["seed"]: r for r in by_method.get(baseline, [])}
        common = sorted(set(a) & set(b))
        if not common:
            continue
        cells = []
        for getter, scale, digits in (
            (lambda r: r["eval"]["pass@k"]["1"], 100, 1),
            (lambda r: r["eval"]["pass@k"][str(max(ks))], 100, 1),
            (lambda r: r["eval"]["distinct_wrong_answers"], 1, 2),
        ):
            test = paired_test([getter(a[s]) - getter(b[s]) for s in common])
            cells.append(f"{scale * test['mean']:+.{digits}f}")
            cells.append(f"{test['t_p']:.2f} / {test['sign_flip_p']:.2f}")
        significance.append(f"| {method} − {baseline} | {len(common)} | " + " | ".join(cells) + " |")

    premise = premise or []
    reference = next((r for r in premise if r.get("method") is None and "wrong_answers" in r), None)
    rarefaction = rarefaction_rows(premise)
    rarefaction_table = []
    if rarefaction:
        rarefaction_table = [
            (
                f"Premise check: GRPO re-run with every wrong answer kept (seeds {sorted({r['seed'] for r in rarefaction})}); "
                f"reference: the warm-up, {reference['samples']} samples per pool prompt "
                f"({statistics.mean(len(w) for w in reference['wrong_answers']):.1f} wrong answers per prompt, trap share "
                f'{100 * reference["trap_share_of_wrong"]:.1f} %). "no collapse" = the distinct wrong answers expected when '
                "each prompt's probe count of wrong answers is drawn from the warm-up's own wrong answers on that prompt."
            ),
            "",
            (
                "| step | wrong rollouts / prompt | distinct wrong / prompt (observed) | no-collapse expectation | "
                "observed / expected | trap share of wrong (%) |"
            ),
            "|---|---|---|---|---|---|",
        ]
        for step in sorted({r["step"] for r in rarefaction}):
            at = [r for r in rarefaction if r["step"] == step]
            ratio = [r["observed"] / r["expected"] for r in at if r["expected"] > 0]
            rarefaction_table.append(
                f"| {step} | {mean_std([r['wrong_per_prompt'] for r in at], 1, 2)} | "
                f"{mean_std([r['observed'] for r in at], 1, 2)} | {mean_std([r['expected'] for r in at], 1, 2)} | "
                f"{mean_std(ratio, 1, 3)} | {mean_std([r['trap_share'] for r in at], 100)} |"
            )
        last = [r for r in rarefaction if r["step"] == max(r["step"] for r in rarefaction)]
        last_test = paired_test([r["observed"] - r["expected"] for r in last])
        rarefaction_table.append("")
        per_seed = ", ".join(
            f"{r['observed'] - r['expected']:+.2f}" for r in sorted(last, key=lambda r: r["seed"])
        )
        rarefaction_table.append(
            f"Last probe (step {last[0]['step']}), observed − expected per seed: {per_seed}; "
            f"paired t-test p = {last_test['t_p']:.3f}, sign-flip p = {last_test['sign_flip_p']:.3f}."
        )
        capped = sum(r["capped"] for r in rarefaction)
        rarefaction_table.append("")
        rarefaction_table.append(
            f"Prompt-probes capped (more wrong answers than the reference holds): {capped}."
        )
    reading = "_Not written yet._"
    if report_path.exists():
        text = report_path.read_text()
        if READING_START in text and READING_END in text:
            reading = text.split(READING_START, 1)[1].split(READING_END, 1)[0].strip()
    s = settings
    w = s["warmup"]
    report_path.write_text(f"""# Mechanism study: does error collapse happen, and what do MEDS and Cliff do about it?

Reproduce (resumable; each run is written to `outputs/mechanism_study/runs/` as it ends):

```bash
python studies/mechanism_study.py --report docs/mechanism_study.md
```

## Setup
- **World** (`hf_meds_cliff.toy.traps`): the toy arithmetic task (2–3 steps, one operation per sentence). The warm-up
  (supervised, from random weights, stopped on held-out greedy accuracy as the toy warm-up) taught the *trapped*
  solution on {100 * w["trap_rate"]:.0f} % of the problems that have a trap-eligible step: a dropped carry
  (`17 + 25 = 32`), a dropped sign (`5 - 12 = 7`) or ignored brackets (`(6 + 2) * 3` → `8 * 3 = 12`); the rest of the
  solution is computed correctly from the wrong value. So every trap is a minority mode of the warm-up policy, and
  its first mistake is a located step after a correct prefix.
- **Model**: toy Qwen3 with {w["num_hidden_layers"]} layers (hidden 64): MEDS keeps the last
  {w["num_hidden_layers"] - w["num_hidden_layers"] // 2} layers, i.e. {w["num_hidden_layers"] - w["num_hidden_layers"] // 2}-dimensional features.
- **Training pool**: {s["pool_size"]} trap-eligible training prompts; {s["steps"]} steps × {s["prompts_per_step"]} prompts
  × {s["num_generations"]} rollouts: each prompt recurs {s["steps"] * s["prompts_per_step"] / s["pool_size"]:.0f} times.
  Learning rate {s["learning_rate"]} (constant after 2 warm-up steps), max
  {s["max_completion_length"]} completion tokens, temperature 1.0; seeds {seeds}.
- **Evaluation**: {s["eval_problems"]} held-out trap-eligible test problems × {s["eval_samples"]} samples, pass@k by the
  unbiased estimator. **Probe**: every {s["probe_every"]} steps, {s["probe_samples"]} samples on every pool prompt:
  reward, distinct wrong answers per prompt (no boxed answer counts as one wrong answer), share of the most common
  wrong answer and of the trap answer, and the top-1 eigen ratio of the L2-normalised answer-token layer-logit
  features of the wrong rollouts (all layers; lower = more diverse).
- **Methods** (same budget): `grpo` (GRPO loss, clip 0.2); `dapo` (token-mean loss, clip-higher 0.28, overlong
  penalty; no dynamic sampling, so that every method draws the same rollouts per step); `meds` (DAPO + MEDS α 0.1, β 0.2, the paper's);
  `meds_strong` (DAPO + MEDS α 0.2, β 1.0); `cliff` (GRPO settings, exact rule teacher, λ 0); `grpo_teacher` (the
  Cliff paper's ablation: same teacher, every token of an incorrect rollout gets the same advantage).
  *Erratum: `grpo_teacher` is not the paper's ablation. With `cliff_split_credit=False` the teacher's
  output is not used (the verifier decides right or wrong), so it is GRPO minus the group's token mean b; the paper's
  GRPO with Teacher, where the teacher's verdict decides, is `cliff_outcome="teacher"`.*
- **Choices**: the learning rate, trap rate, pool size and MEDS' stronger setting were fixed before any run (see
  "How the settings were chosen"); nothing was tuned on results.

### How the settings were chosen
All fixed before the first RL run, none revisited after seeing results:
- **trap rate 30 %**: a minority mode (70 % of the trap-eligible warm-up examples keep the correct solution) that
  is still frequent enough to be a visible share of the wrong answers at the start;
- **6 layers**: the smallest depth giving MEDS more than 2 feature dimensions (3) at the toy width;
- **pool and steps**: the smallest pool for which each prompt recurs 10 times in the number of steps that fits the
  CPU budget of the study (estimated beforehand at about 5 minutes per run on the shared 2-core machine; measured
  1–3 minutes);
- **learning rate 5e-4**: 5× the toy study's 1e-4, with which 40 steps barely moved the policy (docs/toy_study.md);
- **`meds_strong` (α 0.2, β 1.0)**: the paper's 0.1/0.2 caps the penalty at cluster size 7, after which the
  penalties of a group's wrong rollouts are equal and cancel under group normalisation; β 1.0 puts the cap beyond
  any cluster this study can form (e^5 − 1 ≈ 147 rows), α 0.2 doubles the slope;
- **no dynamic sampling for DAPO/MEDS**: every method draws exactly the same number of rollouts per step.
- **Added after the first results** (an analysis, not a setting): the premise check below. The first GRPO runs
  showed the distinct wrong answers falling about as fast as the wrong rollouts themselves, so a raw count could
  not tell collapse from a rise in accuracy; GRPO was re-run (bit-identical runs) keeping every wrong answer.

## 1. Premises: does error collapse happen under plain GRPO?

![premise](figures/mechanism_premise_grpo.png)

{chr(10).join(rarefaction_table)}

Probe on the training pool, every method (mean ± std over seeds):

{chr(10).join(probe_table)}

## 2. Results (held-out test problems, mean ± std over seeds, %)

{chr(10).join(table)}

![pass@k](figures/mechanism_passk.png)

### Diversity over training (probe, mean over seeds)

![diversity](figures/mechanism_diversity.png)

### Do the mechanisms act?

{chr(10).join(mechanism_table)}

![advantage shift](figures/mechanism_advantage_shift.png)

### Paired comparisons (same seed = same shuffling and sampling seed; differences averaged over seeds)

{chr(10).join(significance)}

p-values: paired t-test and the exact two-sided sign-flip test over seeds (with 5 seeds the smallest possible
sign-flip p is 0.06); no correction for the {len(PAIRS)} comparisons.

## Reading
{READING_START}
{reading}
{READING_END}
""")
