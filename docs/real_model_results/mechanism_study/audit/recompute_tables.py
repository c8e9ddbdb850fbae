#!/usr/bin/env python3
"""Recompute the mechanism study's MEDS, Cliff and evaluation tables from the raw JSON files.

Standard library only.  Usage:

    python3 recompute_tables.py [RESULTS_DIR]

RESULTS_DIR defaults to the folder one level up from this script.  Only files named
``<arm>-seed<s>.json`` directly inside RESULTS_DIR are read (power.json,
screen-extension.json, resume_order.json and subfolders are not).  Tables go to
stdout as markdown; data checks (missing keys, nulls/NaNs, step numbering,
non-integer counts) go to stderr.

Recipe
------
* Training steps are the entries of ``history`` that have a ``loss`` key (one per
  training step).
* TRL logs each count as the mean over the step's generation calls and dynamic
  sampling makes one call per round, so a step's count is the logged value times
  ``dynamic_sampling/rounds`` (1 when absent, i.e. without dynamic sampling); a
  row's count is the sum over its steps, rounded to an integer (half up).
* Means (advantage shift, prefix fraction, the teacher's shares) are over the steps
  where the value is present, non-null and not NaN.
* Table A (meds_ds): groups mixed / revisited / differentiated, share
  differentiated/revisited, first step with a differentiated group, rollouts shaped
  / penalised; "different penalties, all rows" = round(sum over steps of
  ``meds/frac_groups_differentiated`` x rounds x G), G = groups a round =
  ``generation_batch_size`` / ``num_generations`` of the file's ``config``; mean and
  max of ``meds/advantage_shift``; "steps above 0.0001" = the number of steps whose
  ``meds/advantage_shift`` > 1e-4, printed "k of n" (n = number of steps); mean and
  max of ``dynamic_sampling/rounds``.
* Table B (cliff, grpo_teacher): over steps with a nonzero split count, the total
  split rollouts, those split after token 0 (split x (1 - split_at_token0_fraction)),
  their share, the split-weighted mean split token; the mean of
  ``cliff/prefix_fraction``; "mistake found in verifier-wrong, mean" = the mean of
  ``cliff/agreement`` (the share of the verifier-wrong rollouts the teacher judged
  in which it found a mistake); "teacher = verifier, mean" = the mean of
  ``cliff/teacher_verifier_agreement``; "teacher wrong, verifier right" and
  "teacher right, verifier wrong" = the counts (as above) of
  ``cliff/teacher_says_wrong_verifier_right`` and
  ``cliff/teacher_says_right_verifier_wrong``.  A column whose key no training step
  has (the teacher columns in cliff files) is printed as a dash.
* Table C (every file with pool and heldout): problems with at least 2 wrong samples
  (sum of the values of each ``wrong_answers`` dict) and ``pass@1``.
"""
import json
import math
import os
import re
import sys

NAME = re.compile(r"^(?P<arm>[A-Za-z0-9_]+)-seed(?P<seed>\d+)\.json$")
ARM_ORDER = ["base", "grpo", "dapo_ds", "meds_ds", "cliff", "grpo_teacher"]
ROUNDS = "dynamic_sampling/rounds"
DASH = "–"


def warn(msg):
    print("CHECK: " + msg, file=sys.stderr)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def round_half_up(x):
    return int(math.floor(x + 0.5))


def fmt(x, nd):
    return DASH if x is None else "{:.{}f}".format(x, nd)


def load_runs(folder):
    runs = []
    for name in os.listdir(folder):
        m = NAME.match(name)
        path = os.path.join(folder, name)
        if not m or not os.path.isfile(path):
            continue
        with open(path) as fh:
            data = json.load(fh)  # json accepts NaN/Infinity literals
        runs.append((m.group("arm"), int(m.group("seed")), name, data))
    rank = {a: i for i, a in enumerate(ARM_ORDER)}
    runs.sort(key=lambda r: (rank.get(r[0], len(ARM_ORDER)), r[0], r[1]))
    return runs


def training_steps(name, data):
    """History entries with a loss key, after checking their numbering."""
    hist = data.get("history")
    if not isinstance(hist, list):
        warn("%s: no history list" % name)
        return []
    steps = [e for e in hist if isinstance(e, dict) and "loss" in e]
    numbers = [e.get("step") for e in steps]
    if numbers != list(range(1, len(steps) + 1)):
        warn("%s: training steps are not numbered 1..%d: %s" % (name, len(steps), numbers))
    max_steps = (data.get("config") or {}).get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0 and len(steps) != max_steps:
        warn("%s: %d training steps but config.max_steps = %d" % (name, len(steps), max_steps))
    for e in steps:
        for k, v in e.items():
            if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
                warn("%s step %s: %s is %r" % (name, e.get("step"), k, v))
    return steps


def rounds_of(e):
    r = e.get(ROUNDS, 1)
    return r if is_number(r) else 1


def step_count(name, e, key, scale=1):
    """Per-step count: logged mean x rounds (x scale); None if the key is missing or not a number."""
    v = e.get(key)
    if not is_number(v):
        warn("%s step %s: %s is %r" % (name, e.get("step"), key, v))
        return None
    return v * rounds_of(e) * scale


def groups_per_round(name, data):
    """G = generation_batch_size / num_generations of the file's config; None if unusable."""
    cfg = data.get("config") or {}
    gbs, ng = cfg.get("generation_batch_size"), cfg.get("num_generations")
    if not is_number(gbs) or not is_number(ng) or ng <= 0:
        warn("%s: config generation_batch_size %r / num_generations %r unusable" % (name, gbs, ng))
        return None
    if gbs % ng:
        warn("%s: generation_batch_size %r not a multiple of num_generations %r" % (name, gbs, ng))
    return gbs / ng


def run_count(name, steps, key, scale=1):
    """Sum over steps of the per-step counts, rounded; None if no step has a number."""
    vals = [step_count(name, e, key, scale) for e in steps]
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    total = sum(vals)
    if abs(total - round(total)) > 1e-6:
        warn("%s: %s sums to %.6f, not an integer before rounding" % (name, key, total))
    return round_half_up(total)


def mean_max(name, steps, key):
    vals = []
    for e in steps:
        v = e.get(key)
        if is_number(v):
            vals.append(v)
        else:
            warn("%s step %s: %s is %r" % (name, e.get("step"), key, v))
    if not vals:
        return None, None
    return sum(vals) / len(vals), max(vals)


def table_a(runs):
    out = ["## Table A: MEDS (meds_ds)", "",
           "| run | mixed | revisited | differentiated | share of revisited | first step | shaped | penalised"
           " | different penalties, all rows | advantage shift mean | advantage shift max"
           " | steps above 0.0001 | DS rounds mean | DS rounds max |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, seed, name, data in runs:
        if arm != "meds_ds":
            continue
        steps = training_steps(name, data)
        mixed = run_count(name, steps, "meds/groups_mixed")
        revisited = run_count(name, steps, "meds/groups_revisited")
        diff = run_count(name, steps, "meds/groups_differentiated")
        shaped = run_count(name, steps, "meds/rollouts_shaped")
        penalised = run_count(name, steps, "meds/rollouts_penalised")
        share = diff / revisited if diff is not None and revisited else None
        first = None
        for e in steps:
            c = e.get("meds/groups_differentiated")
            if is_number(c) and c * rounds_of(e) > 0:
                first = e.get("step")
                break
        g = groups_per_round(name, data)
        diff_all = None
        if g is not None:
            diff_all = run_count(name, steps, "meds/frac_groups_differentiated", scale=g)
            for e in steps:  # the revisited groups are among all the round's groups
                f, c = e.get("meds/frac_groups_differentiated"), e.get("meds/groups_differentiated")
                if is_number(f) and is_number(c) and c > f * g + 1e-9:
                    warn("%s step %s: groups_differentiated %g > frac_groups_differentiated x G %g"
                         % (name, e.get("step"), c, f * g))
        shift_mean, shift_max = mean_max(name, steps, "meds/advantage_shift")
        above = sum(1 for e in steps
                    if is_number(e.get("meds/advantage_shift")) and e["meds/advantage_shift"] > 1e-4)
        if any(ROUNDS not in e for e in steps):
            warn("%s: %s missing on some steps (taken as 1)" % (name, ROUNDS))
        rounds = [rounds_of(e) for e in steps]
        r_mean = sum(rounds) / len(rounds) if rounds else None
        r_max = max(rounds) if rounds else None
        cells = [name[:-5],
                 DASH if mixed is None else str(mixed),
                 DASH if revisited is None else str(revisited),
                 DASH if diff is None else str(diff),
                 fmt(share, 2),
                 DASH if first is None else str(first),
                 DASH if shaped is None else str(shaped),
                 DASH if penalised is None else str(penalised),
                 DASH if diff_all is None else str(diff_all),
                 fmt(shift_mean, 4), fmt(shift_max, 4),
                 "%d of %d" % (above, len(steps)),
                 fmt(r_mean, 2),
                 DASH if r_max is None else ("%d" % r_max if float(r_max).is_integer() else "%g" % r_max)]
        out.append("| " + " | ".join(cells) + " |")
    return out


def never_present(steps, key):
    return not any(key in e for e in steps)


def nonnull_mean(name, steps, key):
    """Mean over steps where the value is non-null and not NaN; (None, 0) if no step has the key."""
    if never_present(steps, key):
        return None, 0
    vals = []
    for e in steps:
        if key not in e:
            warn("%s step %s: %s missing" % (name, e.get("step"), key))
            continue
        v = e[key]
        if is_number(v):
            vals.append(v)
    return sum(vals) / len(vals) if vals else None, len(vals)


def check_teacher_counts(name, steps):
    """Per step: teacher_verifier_agreement x judged + both disagreements = judged."""
    for e in steps:
        judged = e.get("cliff/teacher_judged_rollouts")
        tv = e.get("cliff/teacher_verifier_agreement")
        sw = e.get("cliff/teacher_says_wrong_verifier_right")
        sr = e.get("cliff/teacher_says_right_verifier_wrong")
        if not all(is_number(v) for v in (judged, sw, sr)):
            continue
        if judged == 0:
            if sw or sr or is_number(tv):
                warn("%s step %s: no judged rollouts but agreement %r, disagreements %g / %g"
                     % (name, e.get("step"), tv, sw, sr))
            continue
        if not is_number(tv) or abs(tv * judged + sw + sr - judged) > 1e-6:
            warn("%s step %s: teacher_verifier_agreement %r x judged %g + %g + %g != judged"
                 % (name, e.get("step"), tv, judged, sw, sr))


def table_b(runs):
    out = ["## Table B: Cliff splits (cliff, grpo_teacher)", "",
           "| run | wrong rollouts split | after token 0 | share | mean split token"
           " | prefix fraction mean | mistake found in verifier-wrong, mean | teacher = verifier, mean"
           " | teacher wrong, verifier right | teacher right, verifier wrong |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, seed, name, data in runs:
        if arm not in ("cliff", "grpo_teacher"):
            continue
        steps = training_steps(name, data)
        total = 0.0
        after = 0.0
        token_sum = 0.0
        for e in steps:
            split = step_count(name, e, "cliff/split_rollouts")
            if not split:
                continue
            t0 = e.get("cliff/split_at_token0_fraction")
            tok = e.get("cliff/split_token_mean")
            if not is_number(t0) or not is_number(tok):
                warn("%s step %s: split_rollouts %g but token0 fraction %r, token mean %r"
                     % (name, e.get("step"), split, t0, tok))
                continue
            total += split
            after += split * (1.0 - t0)
            token_sum += split * tok
        for e in steps:  # the null fields should be exactly the steps without splits
            split = e.get("cliff/split_rollouts")
            if split == 0 and any(is_number(e.get(k)) for k in
                                  ("cliff/split_at_token0_fraction", "cliff/split_token_mean",
                                   "cliff/prefix_fraction")):
                warn("%s step %s: no splits but split statistics are set" % (name, e.get("step")))
        if abs(total - round(total)) > 1e-6:
            warn("%s: split_rollouts sums to %.6f, not an integer" % (name, total))
        total_i = round_half_up(total)
        after_i = round_half_up(after)
        if abs(after - after_i) > 1e-6:
            warn("%s: split after token 0 sums to %.6f before rounding" % (name, after))
        share = after_i / total_i if total_i else None
        tok_mean = token_sum / total if total else None
        prefix, n_prefix = nonnull_mean(name, steps, "cliff/prefix_fraction")
        agree, n_agree = nonnull_mean(name, steps, "cliff/agreement")
        tv, n_tv = nonnull_mean(name, steps, "cliff/teacher_verifier_agreement")
        disagree = {}
        for key in ("cliff/teacher_says_wrong_verifier_right", "cliff/teacher_says_right_verifier_wrong"):
            disagree[key] = None if never_present(steps, key) else run_count(name, steps, key)
        check_teacher_counts(name, steps)
        cells = [name[:-5], str(total_i), str(after_i), fmt(share, 2), fmt(tok_mean, 1),
                 fmt(prefix, 3), fmt(agree, 3), fmt(tv, 3)]
        cells += [DASH if v is None else str(v) for v in disagree.values()]
        out.append("| " + " | ".join(cells) + " |")
    return out


def wrong_at_least_2(name, split):
    wa = split.get("wrong_answers")
    if not isinstance(wa, list):
        warn("%s: wrong_answers missing" % name)
        return None
    n = 0
    for d in wa:
        if not isinstance(d, dict):
            warn("%s: a wrong_answers entry is not a dict: %r" % (name, d))
            continue
        if sum(d.values()) >= 2:
            n += 1
    return n


def check_split(name, key, split):
    ids = split.get("problem_ids") or []
    correct = split.get("correct") or []
    wa = split.get("wrong_answers") or []
    k = split.get("samples_per_problem")
    if not (len(ids) == len(correct) == len(wa)):
        warn("%s %s: %d problem ids, %d correct counts, %d wrong_answers dicts"
             % (name, key, len(ids), len(correct), len(wa)))
    if isinstance(k, int) and correct:
        p1 = sum(correct) / (k * len(correct))
        if is_number(split.get("pass@1")) and abs(p1 - split["pass@1"]) > 1e-9:
            warn("%s %s: pass@1 %r but sum(correct)/(k*n) = %r" % (name, key, split["pass@1"], p1))
        for pid, c, d in zip(ids, correct, wa):
            w = sum(d.values()) if isinstance(d, dict) else 0
            if c + w > k:
                warn("%s %s %s: %d correct + %d wrong > %d samples" % (name, key, pid, c, w, k))


def table_c(runs):
    out = ["## Table C: problems with at least 2 wrong samples, and pass@1", "",
           "| file | pool: problems with ≥2 wrong | pool pass@1 | heldout: problems with ≥2 wrong | heldout pass@1 |",
           "|---|---:|---:|---:|---:|"]
    sizes = set()
    for arm, seed, name, data in runs:
        pool, held = data.get("pool"), data.get("heldout")
        if not isinstance(pool, dict) or not isinstance(held, dict):
            continue
        cells = [name[:-5]]
        for key, split in (("pool", pool), ("heldout", held)):
            check_split(name, key, split)
            sizes.add((key, len(split.get("wrong_answers") or [])))
            n = wrong_at_least_2(name, split)
            p1 = split.get("pass@1")
            cells += [DASH if n is None else str(n), fmt(p1 if is_number(p1) else None, 4)]
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("Problems per split: " + ", ".join("%s %d" % s for s in sorted(sizes)) + ".")
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here)
    runs = load_runs(folder)
    if not runs:
        sys.exit("no <arm>-seed<s>.json files in %s" % folder)
    lines = []
    for part in (table_a(runs), table_b(runs), table_c(runs)):
        lines += part + [""]
    print("\n".join(lines).rstrip())


if __name__ == "__main__":
    main()
