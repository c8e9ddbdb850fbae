"""The SmolLM2 mechanism study (rules in ``docs/smollm2_mechanism_study.md``, committed before any study run).

    python studies/smollm2_mechanism.py --screen              # extend the pilot's pool screen until 16 qualify
    python studies/smollm2_mechanism.py --power               # detectable differences, from the screens only
    python studies/smollm2_mechanism.py --step_times          # one step of every arm, nothing else running
    python studies/smollm2_mechanism.py --run &  python studies/smollm2_mechanism.py --run &   # two workers
    python studies/smollm2_mechanism.py --report docs/smollm2_mechanism_report.md
    python studies/smollm2_mechanism.py --run --tiny --results_dir /tmp/r --output_dir /tmp/w   # toy smoke run

What it runs (each constant of :data:`STUDY` is the rules'; ``--tiny`` is a test-only toy-world configuration that
never writes into ``docs/``):

- the training pool: the first 16 problems of the pilot design ``easy_then_add``'s training order whose base pass
  rate (16 samples at T 1.0, 64 new tokens) lies in [0.15, 0.75], read from the pilot's screen of problems 1-32 and
  this study's extension of it (``--screen``, problems 33 on, 16 at a time until 16 qualify);
- the held-out set: the first 64 problems of the held-out order (seed 1) that are not pool problems;
- per seed, in this order: the base model's evaluation, then the arms of :data:`ARMS` (seed-major). Each run trains 40
  steps of 2 prompts x 16 generations from SmolLM2-135M-Instruct and is evaluated on the pool and the held-out set, 16
  samples a problem at T 1.0, evaluation seed = run seed.

Runs are claimed one at a time from that order, so two ``--run`` processes (one torch thread each) share the work; a
claim of a process that is gone (or of an earlier boot of the machine) is taken over. A run writes
``<results_dir>/<name>.json`` atomically when training and evaluation are done, and is never run again; training
checkpoints every 10 steps into ``<output_dir>/<name>/`` and resumes from the newest complete checkpoint
(``smollm2_study.train_resumable``); a run that fails twice writes ``<name>.failed.json``.

The report (``--report``) is recomputed from the results files only, mechanisms first: what MEDS, dynamic sampling,
Cliff's split and the teacher did in every run (from the logged metrics), then the primary hypotheses (paired
bootstrap over seeds and problems, Holm over 4), then pass@k beside the detectable difference of ``power.json``,
then which prompts each resumed training drew against an uninterrupted run (``smollm2_resume_order``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import socket
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smollm2_pilot  # noqa: E402  (this folder's modules)
import smollm2_resume_order  # noqa: E402
import smollm2_study  # noqa: E402
import study_common  # noqa: E402
from learning_report import verdict  # noqa: E402
from study_common import bootstrap_difference, holm, utc_now  # noqa: E402

from hf_meds_cliff.meds.idle import NO_EFFECT_SHIFT  # noqa: E402

logger = logging.getLogger("smollm2_mechanism")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "real_model_results" / "mechanism_study"
ARMS = ("grpo", "dapo_ds", "meds_ds", "cliff", "grpo_teacher")
"""The arms, in the rules' table order (and the run's)."""
ARM_METHOD = {"grpo": "grpo", "dapo_ds": "dapo", "meds_ds": "meds", "cliff": "cliff", "grpo_teacher": "cliff"}
SEEDS = (0, 1, 2)
BASE = "base"
SPLITS = ("pool", "heldout")
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
PASS_RANGE = smollm2_pilot.POOL_PASS_RANGE
PILOT_SCREEN = smollm2_pilot.RESULTS / "screen-easy_then_add-32.json"
SCREEN_CHUNK = 16


@dataclass(frozen=True)
class Settings:
    """What every run shares. :data:`STUDY` is the rules'; :data:`TINY` a test-only toy configuration."""

    world: str = "smollm2"  # "smollm2": the pilot's design on SmolLM2-135M-Instruct; "toy": the toy world
    design: str = "easy_then_add"
    pool_size: int = 16
    heldout_problems: int = 64
    steps: int = 40
    prompts_per_step: int = 2
    num_generations: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    learning_rate: float = 1e-5
    lr_scheduler_type: str = "linear"
    save_steps: int = 10
    dynamic_sampling_max_rounds: int = 40
    meds_alpha: float = 0.1
    meds_beta: float = 0.2
    monitor_window: int = 10
    samples: int = 16
    torch_threads: int = 1


STUDY = Settings()
TINY = Settings(
    world="toy", design="toy", pool_size=8, heldout_problems=3, steps=2, prompts_per_step=1, num_generations=4,
    save_steps=1, dynamic_sampling_max_rounds=10, monitor_window=2, samples=8,
)  # fmt: skip


@dataclass(frozen=True)
class Hypothesis:
    name: str
    arm: str
    baseline: str
    metric: str  # "agreement", "pass@1" or "pass@8"
    split: str  # "pool" or "heldout"
    direction: int  # +1: predicted arm > baseline, -1: arm < baseline, 0: two-sided


PRIMARY = (
    Hypothesis("M1", "meds_ds", "dapo_ds", "agreement", "pool", -1),
    Hypothesis("M2", "meds_ds", "dapo_ds", "agreement", "heldout", -1),
    Hypothesis("C1", "cliff", "grpo", "agreement", "heldout", 0),
    Hypothesis("T1", "cliff", "grpo_teacher", "pass@1", "heldout", +1),
)
"""The family of Holm's correction (m = 4)."""
SECONDARY = tuple(
    Hypothesis(f"{arm}−{base} {metric}", arm, base, metric, "heldout", +1)
    for arm, base in (("meds_ds", "dapo_ds"), ("cliff", "grpo"))
    for metric in ("pass@1", "pass@8")
)
"""Reported beside the detectable difference, not in the family."""


# --------------------------------------------------------------------------------------------
# problems
# --------------------------------------------------------------------------------------------


def design() -> smollm2_pilot.Design:
    return smollm2_pilot.DESIGNS[STUDY.design]


def screened_problems(results: Path = RESULTS) -> list[dict]:
    """Every screened problem of the training order, in order: the pilot's screen (1-32), then the extension."""
    rows = list(json.loads(PILOT_SCREEN.read_text())["problems"])
    extension = results / "screen-extension.json"
    if extension.exists():
        record = json.loads(extension.read_text())
        if record["first_problem"] != len(rows) + 1:
            raise ValueError(f"{extension} starts at problem {record['first_problem']}, not {len(rows) + 1}.")
        rows += record["problems"]
    return rows


def qualifies(problem: dict, samples: int) -> bool:
    low, high = PASS_RANGE
    return low <= problem["right"] / samples <= high


def study_problems(settings: Settings, results: Path = RESULTS) -> dict[str, list[dict]]:
    """``{"pool", "heldout"}``: rows with ``problem``, ``answer``, ``problem_id``."""
    if settings.world == "toy":
        rows = smollm2_study.study_problems(smollm2_study.TINY)
        return {"pool": rows["train"][: settings.pool_size], "heldout": rows["test"][: settings.heldout_problems]}
    screened = screened_problems(results)
    pool = [p for p in screened if qualifies(p, settings.samples)][: settings.pool_size]
    if len(pool) < settings.pool_size:
        raise SystemExit(
            f"The screens hold {len(pool)} of the {settings.pool_size} pool problems; run --screen first."
        )
    keys = ("problem", "answer", "problem_id")
    pool = [{key: p[key] for key in keys} for p in pool]
    taken = {p["problem"] for p in pool}
    candidates = smollm2_pilot.design_problems(design(), settings.heldout_problems + len(pool), seed=1)
    heldout = [row for row in candidates if row["problem"] not in taken][: settings.heldout_problems]
    return {"pool": pool, "heldout": heldout}


def chat_prompt(settings: Settings, problem: str) -> list[dict[str, str]]:
    if settings.world == "toy":
        return [{"role": "user", "content": problem}]
    return smollm2_pilot.chat_prompt(design(), problem)


def model_path(settings: Settings) -> str:
    return smollm2_study.model_path(smollm2_study.TINY if settings.world == "toy" else smollm2_study.STUDY)


# --------------------------------------------------------------------------------------------
# the stages before the runs: the pool screen's extension and the power analysis
# --------------------------------------------------------------------------------------------


def extend_screen(results: Path, threads: int) -> dict:
    """Screen problems 33 on, ``SCREEN_CHUNK`` at a time, until the pool has its problems; write the extension."""
    from hf_meds_cliff.checkpointing import write_json_atomically

    results.mkdir(parents=True, exist_ok=True)
    path = results / "screen-extension.json"
    started, origin = utc_now(), smollm2_study.provenance(None)  # the code that runs, recorded before it runs
    chunks = []
    while sum(qualifies(p, STUDY.samples) for p in screened_problems(results)) < STUDY.pool_size:
        start = len(screened_problems(results))
        chunk = smollm2_pilot.screen(design(), SCREEN_CHUNK, STUDY.samples, STUDY.max_new_tokens, threads, start)
        chunks.append({key: chunk[key] for key in ("first_problem", "seconds", "started", "finished")})
        record = json.loads(path.read_text()) if path.exists() else {"first_problem": start + 1, "problems": []}
        record.update(
            stage="screen extension", design=chunk["design"], samples=STUDY.samples,
            max_new_tokens=STUDY.max_new_tokens, torch_threads=threads, chunks=record.get("chunks", []) + chunks[-1:],
            problems=record["problems"] + chunk["problems"], started=record.get("started", started),
            finished=utc_now(), **origin,
        )  # fmt: skip
        write_json_atomically(path, record, indent=1)
    return json.loads(path.read_text()) if path.exists() else {}


def power_analysis(results: Path, studies: int, resamples: int) -> dict:
    """The detectable difference (80 % power) of held-out pass@1 and pass@8, by the earlier study's method
    (``smollm2_power``: the normal approximation, checked by simulating the study's own bootstrap test), with the
    per-problem noise of a difference between two arms drawn from the screens' base pass rates: each problem's pass
    rate is a screened problem's, and both arms' 16 samples are drawn at that rate (no true difference)."""
    import numpy as np
    import smollm2_power

    from hf_meds_cliff.estimators import pass_at_k

    screened = screened_problems(results)
    rates = [p["right"] / STUDY.samples for p in screened]
    rng = np.random.default_rng(0)
    draws = 20_000
    chosen = rng.choice(np.asarray(rates), size=draws)
    arm, base = rng.binomial(STUDY.samples, chosen), rng.binomial(STUDY.samples, chosen)
    out = {"inputs": {"screened_problems": len(screened), "samples": STUDY.samples, "draws": draws},
           "heldout_problems": STUDY.heldout_problems, "seeds": len(SEEDS), "alpha": smollm2_power.ALPHA,
           "power": smollm2_power.POWER, "seed_sds": list(smollm2_power.SEED_SDS),
           "planned_seed_sd": smollm2_power.PLANNED_SEED_SD, "metrics": {}}  # fmt: skip
    for k in (1, 8):
        differences = [pass_at_k(STUDY.samples, int(a), k) - pass_at_k(STUDY.samples, int(b), k)
                       for a, b in zip(arm, base)]  # fmt: skip
        sigma = statistics.stdev(differences)
        table = {str(sd): smollm2_power.mde(sigma, sd, len(SEEDS), STUDY.heldout_problems, smollm2_power.ALPHA)
                 for sd in smollm2_power.SEED_SDS}  # fmt: skip
        analytic = table[str(smollm2_power.PLANNED_SEED_SD)]
        grid = []
        for factor in smollm2_power.SIMULATED_FACTORS:
            power = smollm2_power.simulated_power(
                differences, analytic * factor, smollm2_power.PLANNED_SEED_SD, len(SEEDS), STUDY.heldout_problems,
                smollm2_power.ALPHA, studies, resamples,
            )  # fmt: skip
            grid.append({"shift": analytic * factor, "simulated_power": power})
        reached = [point["shift"] for point in grid if point["simulated_power"] >= smollm2_power.POWER]
        out["metrics"][f"pass@{k}"] = {
            "sigma_problem": sigma, "analytic_mde_by_seed_sd": table, "simulation": grid,
            "simulated_mde": min(reached) if reached else None, "studies": studies, "resamples": resamples,
        }  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------
# one run
# --------------------------------------------------------------------------------------------


def arm_config(arm: str, settings: Settings, seed: int, output_dir: str):
    """The arm's trainer config: the shared settings plus only what defines the arm."""
    if arm not in ARMS:
        raise ValueError(f"Unknown arm {arm!r}; choose from {ARMS}.")
    shared = study_common.shared_training_kwargs(
        output_dir=output_dir, seed=seed, steps=settings.steps, learning_rate=settings.learning_rate,
        prompts_per_step=settings.prompts_per_step, num_generations=settings.num_generations,
        max_completion_length=settings.max_new_tokens, warmup_steps=0, lr_scheduler_type=settings.lr_scheduler_type,
    )  # fmt: skip
    shared.update(
        temperature=settings.temperature, top_p=settings.top_p, save_strategy="steps", save_steps=settings.save_steps,
        save_total_limit=2,  # the newest complete checkpoint survives a stop during the next save
    )  # fmt: skip
    dynamic = {"dynamic_sampling": True, "dynamic_sampling_max_rounds": settings.dynamic_sampling_max_rounds}
    return study_common.method_config(
        ARM_METHOD[arm], shared, dapo_extra=dynamic if arm in ("dapo_ds", "meds_ds") else None,
        meds_extra={"meds_alpha": settings.meds_alpha, "meds_beta": settings.meds_beta},
        extra={"cliff_outcome": "teacher"} if arm == "grpo_teacher" else None,
    )  # fmt: skip


def train(arm: str, seed: int, settings: Settings, work: Path, results: Path, stop_after_step=None) -> dict:
    def describe(trainer) -> dict:
        teacher = getattr(trainer, "teacher", None)
        return {"teacher": None if teacher is None else {"kind": "exact rule teacher", "name": repr(teacher)}}

    return smollm2_study.train_resumable(
        work, settings, policy=model_path(settings), rows=study_problems(settings, results)["pool"],
        prompt=lambda problem: chat_prompt(settings, problem), config=arm_config(arm, settings, seed, str(work)),
        method=ARM_METHOD[arm], describe=describe, stop_after_step=stop_after_step,
    )  # fmt: skip


def evaluations(model: str, settings: Settings, seed: int, results: Path) -> dict:
    problems = study_problems(settings, results)
    return {
        split: smollm2_study.evaluate(
            model, settings, problems[split], split, seed, prompt=lambda problem: chat_prompt(settings, problem)
        )
        for split in SPLITS
    }


def run_one(name: str, settings: Settings, results: Path, output: Path, command, stop_after_step=None) -> Path:
    """Train (unless ``base``) and evaluate one run; write ``<name>.json`` atomically at the end."""
    from hf_meds_cliff.checkpointing import write_json_atomically

    arm, seed = name.rsplit("-seed", 1)[0], int(name.rsplit("-seed", 1)[1])
    path = results / f"{name}.json"
    if path.exists():
        return path
    origin = smollm2_study.provenance(command)  # the code that runs, recorded before it runs
    work = output / name
    work.mkdir(parents=True, exist_ok=True)
    started_path = work / "started.txt"
    if not started_path.exists():
        started_path.write_text(utc_now())
    record: dict = {"arm": arm, "seed": seed, "eval_seed": seed, "settings": asdict(settings)}
    if arm == BASE:
        model = model_path(settings)
        record["model"] = model
    else:
        record.update(method=ARM_METHOD[arm], **train(arm, seed, settings, work, results, stop_after_step))
        model = str(work / "final")
    start = time.perf_counter()
    record.update(evaluations(model, settings, seed, results))
    record.update(eval_seconds=time.perf_counter() - start, **origin, started=started_path.read_text().strip(),
                  finished=utc_now())  # fmt: skip
    write_json_atomically(path, record, indent=1)
    for checkpoint in work.glob("checkpoint-*"):  # 1.6 GB each for SmolLM2; final/ stays for audit
        shutil.rmtree(checkpoint, ignore_errors=True)
    return path


# --------------------------------------------------------------------------------------------
# the queue: seed-major, claimed one run at a time
# --------------------------------------------------------------------------------------------


def run_order(arms=ARMS, seeds=SEEDS) -> list[str]:
    """Per seed: the base model's evaluation, then the arms in the table's order."""
    return [f"{arm}-seed{seed}" for seed in seeds for arm in (BASE, *arms)]


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(output: Path, name: str) -> bool:
    """Take ``name`` for this process; ``False`` when a live process of this boot holds it."""
    path = output / "claims" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "boot_id": boot_id(), "host": socket.gethostname(), "since": utc_now()}
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = json.loads(path.read_text())
            except (OSError, ValueError):  # being written by its holder this instant, or gone
                return False
            if holder.get("boot_id") == me["boot_id"] and _alive(int(holder.get("pid", -1))):
                return False
            path.unlink(missing_ok=True)  # the holder is gone (stopped, or an earlier boot)
            continue
        with os.fdopen(descriptor, "w") as handle:
            json.dump(me, handle)
        return True
    return False


def release(output: Path, name: str) -> None:
    (output / "claims" / f"{name}.json").unlink(missing_ok=True)


def run_study(
    settings: Settings, results: Path, output: Path, arms=ARMS, seeds=SEEDS, command=None, stop_after_step=None
) -> None:
    """Claim and run every unfinished run in :func:`run_order`; a run that fails is run again once, a second failure
    is written to ``<name>.failed.json`` and not tried again."""
    import torch

    from hf_meds_cliff.checkpointing import write_json_atomically

    torch.set_num_threads(settings.torch_threads)  # one torch thread per run, the evaluations too
    results.mkdir(parents=True, exist_ok=True)
    for name in run_order(arms, seeds):
        failed_path = results / f"{name}.failed.json"
        if (results / f"{name}.json").exists() or failed_path.exists() or not claim(output, name):
            continue
        try:
            errors = []
            for attempt in (1, 2):
                logger.info("%s (attempt %d)", name, attempt)
                try:
                    run_one(name, settings, results, output, command, stop_after_step)
                    break
                except Exception as error:  # noqa: BLE001 -- the rule: run again once, then report the failure
                    logger.exception("%s failed", name)
                    errors.append({"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()})
            else:
                write_json_atomically(failed_path, {"name": name, "errors": errors,
                                                    **smollm2_study.provenance(command), "finished": utc_now()},
                                      indent=1)  # fmt: skip
        finally:
            release(output, name)


def step_times(settings: Settings, results: Path, output: Path, arms=ARMS) -> dict:
    """One training step of every arm (seed 0, from the base model; nothing saved), in this process one after the
    other: the wall time of ``train()`` and TRL's logged ``step_time``."""
    origin = smollm2_study.provenance(None)
    one_step = replace(settings, steps=1)
    rows = {}
    for arm in arms:
        work = output / "step_times" / arm
        shutil.rmtree(work, ignore_errors=True)
        record = train(arm, 0, one_step, work, results)
        step = [h for h in record["history"] if "step_time" in h]
        rows[arm] = {"train_seconds": record["train_seconds_last_segment"],
                     "step_time": step[0]["step_time"] if step else None,
                     "dynamic_sampling_rounds": step[0].get("dynamic_sampling/rounds") if step else None}  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    return {"stage": "step times", "torch_threads": settings.torch_threads, "arms": rows, **origin,
            "finished": utc_now()}  # fmt: skip


# --------------------------------------------------------------------------------------------
# analysis and report
# --------------------------------------------------------------------------------------------


def load_results(results: Path) -> tuple[dict[str, dict[int, dict]], dict[str, dict]]:
    """``(runs, failed)``: ``runs[arm][seed]`` (``arm`` includes ``base``) and the failure records by name."""
    runs: dict[str, dict[int, dict]] = {}
    failed: dict[str, dict] = {}
    for path in sorted(results.glob("*-seed*.json")):
        record = json.loads(path.read_text())
        if path.name.endswith(".failed.json"):
            failed[record["name"]] = record
        else:
            runs.setdefault(record["arm"], {})[int(record["seed"])] = record
    return runs, failed


def complete_seeds(runs) -> list[int]:
    """Seeds whose base evaluation and every arm are complete: the only ones analysed."""
    seeds = set(runs.get(BASE, {}))
    for arm in ARMS:
        seeds &= set(runs.get(arm, {}))
    return sorted(seeds)


def _steps(record: dict) -> list[dict]:
    return [h for h in record.get("history", []) if "loss" in h]


def _per_step_total(row: dict, key: str) -> float:
    """A count of one training step: TRL logs the mean over the step's generation calls, and dynamic sampling makes
    one call per round (one call a step without it)."""
    value = row.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0.0
    return value * row.get("dynamic_sampling/rounds", 1.0)


def mechanism(record: dict) -> dict:
    """What the run's method did, from its logged metrics (sums over the steps of per-step counts)."""
    steps = _steps(record)
    out: dict = {"steps": len(steps)}
    if not steps:
        return out
    if any("dynamic_sampling/rounds" in h for h in steps):
        rounds = [h["dynamic_sampling/rounds"] for h in steps]
        out.update(ds_rounds_mean=statistics.mean(rounds), ds_rounds_max=max(rounds))
    if any("meds/groups_mixed" in h for h in steps):
        for name in ("groups_mixed", "groups_revisited", "groups_differentiated", "rollouts_shaped",
                     "rollouts_penalised"):  # fmt: skip
            out[name] = round(sum(_per_step_total(h, f"meds/{name}") for h in steps))
        shifts = [h["meds/advantage_shift"] for h in steps if h.get("meds/advantage_shift") is not None]
        out["advantage_shift_mean"] = statistics.mean(shifts) if shifts else None
        out["advantage_shift_max"] = max(shifts) if shifts else None
        out["first_differentiating_step"] = next(
            (h["step"] for h in steps if _per_step_total(h, "meds/groups_differentiated") > 0), None
        )
        out["steps_shift_above_idle"] = sum(shift > NO_EFFECT_SHIFT for shift in shifts)
        config = record.get("config") or {}
        if "generation_batch_size" in config and any("meds/frac_groups_differentiated" in h for h in steps):
            groups_per_call = int(config["generation_batch_size"]) // int(config["num_generations"])
            out["groups_unequal_penalties"] = round(
                sum(_per_step_total(h, "meds/frac_groups_differentiated") * groups_per_call for h in steps)
            )
    if any("cliff/split_rollouts" in h for h in steps):
        split = [(h["cliff/split_rollouts"], h["cliff/split_at_token0_fraction"], h["cliff/split_token_mean"])
                 for h in steps if h.get("cliff/split_rollouts")]  # fmt: skip
        total = sum(n for n, _, _ in split)
        out["split_rollouts"] = round(total)
        out["split_after_token0"] = round(sum(n * (1 - share) for n, share, _ in split))
        out["split_token_mean"] = sum(n * mean for n, _, mean in split) / total if total else None
        for key, name in (("cliff/prefix_fraction", "prefix_fraction_mean"), ("cliff/agreement", "mistake_found_mean"),
                          ("cliff/teacher_verifier_agreement", "teacher_verifier_agreement_mean")):  # fmt: skip
            values = [h[key] for h in steps if h.get(key) is not None and not math.isnan(h[key])]
            out[name] = statistics.mean(values) if values else None
        if any("cliff/teacher_says_wrong_verifier_right" in h for h in steps):
            for direction in ("teacher_says_wrong_verifier_right", "teacher_says_right_verifier_wrong"):
                out[direction] = round(sum(h.get(f"cliff/{direction}") or 0.0 for h in steps))
    return out


def compute_hypotheses(hypotheses, runs, seeds, resamples: int) -> list[dict]:
    rows = []
    for h in hypotheses:
        row = {**asdict(h), "seeds": seeds, "problems": 0, "difference": math.nan, "ci_low": math.nan,
               "ci_high": math.nan, "p": 1.0, "arm_mean": math.nan, "baseline_mean": math.nan}  # fmt: skip
        if seeds:
            arm_m, base_m, entering = smollm2_study.hypothesis_matrices(h, runs, seeds, h.split)
            row["problems"] = entering
            if entering:
                row.update(bootstrap_difference(arm_m, base_m, resamples=resamples, seed=BOOTSTRAP_SEED))
                row["arm_mean"], row["baseline_mean"] = float(arm_m.mean()), float(base_m.mean())
        rows.append(row)
    return rows


def _verdict(row: dict, adjusted_p: float) -> str:
    if math.isnan(row["difference"]):
        return "not shown"
    if row["direction"]:
        return verdict(row["difference"], adjusted_p, row["direction"])
    shown = verdict(row["difference"], adjusted_p, +1) != "not shown"
    return ("higher" if row["difference"] > 0 else "lower") if shown else "not shown"


def analyse(results: Path, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """Mechanisms per run, the primary family with Holm (a hypothesis that cannot be computed keeps its place with
    p = 1 and is *not shown*), and the secondary comparisons (unadjusted), from the results files only."""
    runs, failed = load_results(results)
    seeds = complete_seeds(runs)
    primary = compute_hypotheses(PRIMARY, runs, seeds, resamples)
    for row, adjusted in zip(primary, holm([row["p"] for row in primary])):
        row["holm_p"] = adjusted
        row["verdict"] = _verdict(row, adjusted)
    secondary = compute_hypotheses(SECONDARY, runs, seeds, resamples)
    for row in secondary:
        row["verdict"] = _verdict(row, row["p"])
    incomplete = sorted({s for by_seed in runs.values() for s in by_seed} - set(seeds))
    return {
        "seeds": seeds,
        "incomplete_seeds": incomplete,
        "mechanisms": {arm: {str(s): mechanism(r) for s, r in sorted(by_seed.items())}
                       for arm, by_seed in runs.items() if arm != BASE},  # fmt: skip
        "primary": primary,
        "secondary": secondary,
        "failed": {name: [e["error"] for e in r["errors"]] for name, r in failed.items()},
    }


def _fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _points(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.1f}"


def mechanism_lines(analysis: dict) -> list[str]:
    lines = ["## What each mechanism did (per run, from the logged metrics)", ""]
    meds = [(arm, s, m) for arm in ("meds_ds",) for s, m in analysis["mechanisms"].get(arm, {}).items()]
    if meds:
        lines += ["MEDS acts on the rollouts it shapes: graded, with an answer token (its features are read there), "
                  "in a group that dynamic sampling keeps. Mixed: groups with a right and a wrong shaped rollout; "
                  "revisited: those whose prompt had stored wrong rollouts; differentiated: those whose shaped wrong "
                  "rollouts got different penalties (the pilot's check is differentiated over revisited); shaped and "
                  "penalised rollouts. Beside them, from the advantage diagnostics over every row of a round: groups "
                  "whose wrong rollouts got different penalties counting those MEDS did not shape (a wrong rollout "
                  "without an answer token keeps penalty 0 beside penalised ones), and `meds/advantage_shift`, the "
                  "mean over a round's rows of |advantage with the penalty − advantage without it|, logged per step "
                  f"as the mean over its rounds: its mean over the steps, its largest value, and the steps above the "
                  f"library's idle threshold ({NO_EFFECT_SHIFT:g}).", "",
                  "| run | mixed | revisited | differentiated | share of revisited | first step | shaped | "
                  "penalised | different penalties, all rows | advantage shift, mean (max) | steps above "
                  f"{NO_EFFECT_SHIFT:g} | DS rounds, mean (max) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for arm, s, m in meds:
            share = m["groups_differentiated"] / m["groups_revisited"] if m.get("groups_revisited") else None
            lines.append(
                f"| `{arm}` seed {s} | {_fmt(m.get('groups_mixed'))} | {_fmt(m.get('groups_revisited'))} | "
                f"{_fmt(m.get('groups_differentiated'))} | {_fmt(share, 2)} | "
                f"{_fmt(m.get('first_differentiating_step'))} | {_fmt(m.get('rollouts_shaped'))} | "
                f"{_fmt(m.get('rollouts_penalised'))} | {_fmt(m.get('groups_unequal_penalties'))} | "
                f"{_fmt(m.get('advantage_shift_mean'), 4)} ({_fmt(m.get('advantage_shift_max'), 4)}) | "
                f"{_fmt(m.get('steps_shift_above_idle'))} of {m['steps']} | {_fmt(m.get('ds_rounds_mean'), 2)} "
                f"({_fmt(m.get('ds_rounds_max'), 0)}) |"
            )
        lines.append("")
    dapo = [(s, m) for s, m in analysis["mechanisms"].get("dapo_ds", {}).items()]
    if dapo:
        per_seed = [f"seed {s}: {_fmt(m.get('ds_rounds_mean'), 2)} rounds a step on average (max "
                    f"{_fmt(m.get('ds_rounds_max'), 0)})" for s, m in dapo]  # fmt: skip
        lines += ["Dynamic sampling without MEDS: " + "; ".join(per_seed) + ".", ""]
    by_arm = analysis["mechanisms"]
    cliff = [(arm, s, m) for arm in ("cliff", "grpo_teacher") for s, m in by_arm.get(arm, {}).items()]
    if cliff:
        lines += ["Cliff's split over the wrong rollouts of its groups (judged, cached or truncated). `grpo_teacher` "
                  "computes the same split but gives every token of a rollout one advantage, so its split is logged, "
                  "not used. The exact teacher: the share of the verifier-wrong rollouts it judged in which it found "
                  "a mistake (`cliff/agreement`, mean over the steps); for `grpo_teacher`, whose outcome is the "
                  "teacher's verdict on every rollout, the share of judged rollouts where that verdict equals the "
                  "verifier's (`cliff/teacher_verifier_agreement`, mean over the steps) and the rollouts the teacher "
                  "called wrong and the verifier right, and the reverse (sums).", "",
                  "| run | wrong rollouts split | after token 0 | share | mean split token | prefix fraction, mean | "
                  "mistake found in verifier-wrong, mean | teacher = verifier, mean | teacher wrong, verifier right | "
                  "teacher right, verifier wrong |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for arm, s, m in cliff:
            total = m.get("split_rollouts")
            share = m["split_after_token0"] / total if total else None
            lines.append(
                f"| `{arm}` seed {s} | {_fmt(total)} | {_fmt(m.get('split_after_token0'))} | {_fmt(share, 2)} | "
                f"{_fmt(m.get('split_token_mean'), 1)} | {_fmt(m.get('prefix_fraction_mean'))} | "
                f"{_fmt(m.get('mistake_found_mean'))} | {_fmt(m.get('teacher_verifier_agreement_mean'))} | "
                f"{_fmt(m.get('teacher_says_wrong_verifier_right'))} | "
                f"{_fmt(m.get('teacher_says_right_verifier_wrong'))} |"
            )
        lines.append("")
    lines += RECOMPUTE
    return lines


RECOMPUTE = [
    "To recompute a row from its results file (`<arm>-seed<s>.json`): take the entries of `history` that have a "
    "`loss` (one per training step). TRL logs each count as the mean over the step's generation calls, and dynamic "
    "sampling makes one call per round, so a step's count is the logged value times `dynamic_sampling/rounds` (1 "
    "without dynamic sampling); a row's count is the sum over the steps, rounded. MEDS: `meds/groups_mixed`, "
    "`meds/groups_revisited`, `meds/groups_differentiated`, `meds/rollouts_shaped`, `meds/rollouts_penalised`; the "
    "first step is the first whose `meds/groups_differentiated` is above 0. Cliff: the sum of `cliff/split_rollouts`; "
    "after token 0, the sum of `cliff/split_rollouts` × (1 − `cliff/split_at_token0_fraction`); the mean split token, "
    "the sum of `cliff/split_rollouts` × `cliff/split_token_mean` over the total. Different penalties, all rows: the "
    "sum of `meds/frac_groups_differentiated` × rounds × 2 (groups a round: `generation_batch_size` / "
    "`num_generations` of the file's `config`). Means (advantage shift, prefix fraction, the teacher's shares) are "
    "over the steps where the value is not NaN. For example, in Python: "
    "`h = [r for r in json.load(open(f))['history'] if 'loss' in r]; "
    "round(sum(r['meds/groups_differentiated'] * r.get('dynamic_sampling/rounds', 1) for r in h))`.",
    "",
]
"""How to recompute the mechanism tables by hand (``mechanism`` is the code)."""


def hypothesis_table(rows: list[dict], adjusted: bool) -> list[str]:
    header = ("| | comparison | split | metric | predicted | seeds | problems | arm | baseline | difference | 95 % CI "
              "| p |")
    header += " Holm p | verdict |" if adjusted else " verdict |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for row in rows:
        predicted = {1: "> 0", -1: "< 0", 0: "≠ 0"}[row["direction"]]
        cells = [row["name"], f"`{row['arm']}` − `{row['baseline']}`", row["split"], row["metric"], predicted,
                 str(len(row["seeds"])), str(row["problems"]), _fmt(100 * row["arm_mean"], 1),
                 _fmt(100 * row["baseline_mean"], 1), _points(row["difference"]),
                 f"[{_points(row['ci_low'])}, {_points(row['ci_high'])}]", f"{row['p']:.4g}"]  # fmt: skip
        if adjusted:
            cells.append(f"{row['holm_p']:.4g}")
        cells.append(f"*{row['verdict']}*")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _share_text(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.0f} %)" if whole else f"{part} of 0"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def mechanism_reading(mechanisms: dict) -> list[str]:
    """The pilot's two manipulation checks on every study run (``smollm2_pilot.MEDS_CHECK``, ``CLIFF_CHECK``)."""
    lines = []
    meds = mechanisms.get("meds_ds", {})
    if meds:
        parts, met = [], 0
        for s, m in meds.items():
            revisited, differentiated = m.get("groups_revisited") or 0, m.get("groups_differentiated") or 0
            met += bool(revisited) and differentiated / revisited >= smollm2_pilot.MEDS_CHECK
            parts.append(f"seed {s}: {_share_text(differentiated, revisited)}")
        shift = max((m.get("advantage_shift_max") or 0.0) for m in meds.values())
        moved = _and([_fmt(m.get("steps_shift_above_idle")) for m in meds.values()])
        steps = sorted({m["steps"] for m in meds.values()})
        lines.append(
            f"- MEDS acted in {met} of {len(meds)} `meds_ds` runs by the pilot's check (at least "
            f"{100 * smollm2_pilot.MEDS_CHECK:.0f} % of the mixed groups that met their prompt's stored wrong rollouts "
            f"were differentiated): {'; '.join(parts)}. Its penalty moved the advantages (`meds/advantage_shift` "
            f"above {NO_EFFECT_SHIFT:g}) in {moved} of {'/'.join(map(str, steps))} steps; the largest per-step value "
            f"was {shift:.4f}."
        )
    for arm, use in (("cliff", "used for the token advantages"), ("grpo_teacher", "logged, not used")):
        runs = mechanisms.get(arm, {})
        if not runs:
            continue
        parts, met = [], 0
        for s, m in runs.items():
            total, after = m.get("split_rollouts") or 0, m.get("split_after_token0") or 0
            met += bool(total) and after / total >= smollm2_pilot.CLIFF_CHECK
            mean = _fmt(m.get("split_token_mean"), 1)
            parts.append(f"seed {s}: {_share_text(after, total)}, mean split token {mean}")
        lines.append(
            f"- Cliff's split ({use}) fell after token 0 in at least {100 * smollm2_pilot.CLIFF_CHECK:.0f} % of the "
            f"split wrong rollouts (the pilot's check) in {met} of {len(runs)} `{arm}` runs: {'; '.join(parts)}."
        )
    teacher = mechanisms.get("grpo_teacher", {})
    if teacher and all("teacher_says_wrong_verifier_right" in m for m in teacher.values()):
        wrong_right = _and([str(m["teacher_says_wrong_verifier_right"]) for m in teacher.values()])
        right_wrong = _and([str(m["teacher_says_right_verifier_wrong"]) for m in teacher.values()])
        lines.append(
            f"- In `grpo_teacher` the outcome is the exact teacher's verdict. It called {wrong_right} rollouts wrong "
            f"that the verifier graded right, and {right_wrong} right that the verifier graded wrong (seeds "
            f"{_and(list(teacher))})."
        )
    return lines


def _what(row: dict) -> str:
    metric = "wrong-answer agreement" if row["metric"] == "agreement" else row["metric"]
    split = "the training pool" if row["split"] == "pool" else "the held-out set"
    return f"`{row['arm']}` − `{row['baseline']}`, {metric} on {split}"


def hypothesis_reading(row: dict, adjusted: bool, detectable: str = "") -> str:
    """One sentence that claims exactly what the row's verdict supports."""
    if not row["seeds"]:
        return f"- {row['name']}: not shown; it could not be computed (no seed has the base model and every arm)."
    if not row["problems"]:
        return (f"- {row['name']}: not shown; it could not be computed ({_what(row)}): no problem had at least 2 wrong "
                f"samples in every run of both arms, so none entered.")  # fmt: skip
    p = f"Holm p {row['holm_p']:.3g}" if adjusted else f"p {row['p']:.3g}, unadjusted"
    numbers = (f"{_what(row)}: {_points(row['difference'])} points, 95 % CI [{_points(row['ci_low'])}, "
               f"{_points(row['ci_high'])}], {p}")  # fmt: skip
    if row["verdict"] == "not shown":
        return (f"- {row['name']}: not shown ({numbers}). This is not a claim that the two are equal: the study could "
                f"not tell them apart.{detectable}")  # fmt: skip
    if row["direction"]:
        claim = "holds, as predicted" if row["verdict"] == "holds" else "reversed, against the prediction"
    else:
        claim = f"{row['verdict']} in `{row['arm']}` (two-sided)"
    return (f"- {row['name']}: {claim} ({numbers}), on SmolLM2-135M-Instruct and this problem family, over "
            f"{len(row['seeds'])} seed(s) and {row['problems']} problems.")  # fmt: skip


def machine_reading(runs: dict, hypotheses) -> list[str]:
    """Which CPUs made the files, and whether any compared pair (one seed, arm and baseline) spans two machines."""
    cpus: dict[str, list[str]] = {}
    for arm, by_seed in runs.items():
        for s, r in sorted(by_seed.items()):
            cpus.setdefault(str((r.get("machine") or {}).get("cpu")), []).append(f"{arm}-seed{s}")
    line = "- The files come from " + "; ".join(
        f"{cpu} ({len(names)} file{'s' if len(names) != 1 else ''})" for cpu, names in cpus.items()
    ) + "."
    crossing = sorted({
        f"{h.name} seed {s}"
        for h in hypotheses
        for s in set(runs.get(h.arm, {})) & set(runs.get(h.baseline, {}))
        if json.dumps(runs[h.arm][s].get("machine"), sort_keys=True)
        != json.dumps(runs[h.baseline][s].get("machine"), sort_keys=True)
    })
    if len(cpus) > 1:
        line += (" In every compared pair (one seed, the arm and its baseline) both runs come from the same machine "
                 "record." if not crossing else f" Pairs whose two runs come from different machine records: "
                 f"{', '.join(crossing)}.")  # fmt: skip
        line += " The study did not test whether the machine changes a run's numbers."
    return [line]


def resume_reading(recomputed: dict) -> list[str]:
    files = recomputed["files"]
    resumed = [name for name, f in files.items() if f["resumed_from_steps"]]
    if not resumed:
        return []
    other = [name for name in resumed if files[name]["steps_with_other_prompts"]]
    return [
        f"- {len(resumed)} of {len(files)} trainings resumed from a checkpoint ({', '.join(f'`{n}`' for n in resumed)}"
        f"); {len(other)} of them trained on other prompts from the resume on than an uninterrupted run would "
        "(\"Prompts after a resume\"). The comparisons above take every run as it ran."
    ]


def _wrong_problems(evaluation: dict) -> int:
    return sum(smollm2_study.enters_agreement(evaluation, i) for i in range(len(evaluation["wrong_answers"])))


def reading_lines(analysis: dict, runs: dict, recomputed: dict, power: dict | None, settings: "Settings") -> list[str]:
    """The report's reading, generated from the numbers above it: mechanisms first, then each hypothesis."""
    lines = ["## Reading (generated; each line claims what its count or verdict supports, no more)", ""]
    lines += mechanism_reading(analysis["mechanisms"])
    for row in analysis["primary"]:
        lines.append(hypothesis_reading(row, adjusted=True))
        if row["seeds"] and not row["problems"] and row["metric"] == "agreement":
            lines[-1] += " Problems with at least 2 wrong samples, per run: " + "; ".join(
                f"`{arm}` seed {s} {_wrong_problems(runs[arm][s][row['split']])} of "
                f"{len(runs[arm][s][row['split']]['wrong_answers'])}"
                for arm in (row["arm"], row["baseline"])
                for s in row["seeds"]
            ) + "."
    for row in analysis["secondary"]:
        m = (power or {}).get("metrics", {}).get(row["metric"])
        detectable = ""
        if m:
            simulated = f"{100 * m['simulated_mde']:.1f}" if m["simulated_mde"] else "beyond the grid"
            detectable = (f" At 80 % power it could detect a difference of about {simulated} points (simulated; "
                          f"{100 * m['analytic_mde_by_seed_sd']['0.02']:.1f} analytic), `power.json`.")  # fmt: skip
        lines.append(hypothesis_reading(row, adjusted=False, detectable=detectable))
    lines += resume_reading(recomputed)
    lines += machine_reading(runs, (*PRIMARY, *SECONDARY))
    lines += [
        f"- Scope: SmolLM2-135M-Instruct in float32 on CPU, one problem family (`{settings.design}`), "
        f"{settings.pool_size} training prompts, {settings.steps} steps, seeds {analysis['seeds']}. Nothing here "
        "is evidence about Qwen-class models or the papers' settings.",
        "",
    ]
    return lines


def write_report(results: Path, report: Path, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    analysis = analyse(results, resamples)
    runs, _ = load_results(results)
    records = [r for by_seed in runs.values() for r in by_seed.values()]
    commits = sorted({str(r.get("code_commit")) for r in records})
    dirty = sorted({str(r.get("code_dirty")) for r in records})
    power_path = results / "power.json"
    power = json.loads(power_path.read_text()) if power_path.exists() else None
    shown = results.resolve().relative_to(ROOT) if results.resolve().is_relative_to(ROOT) else results
    lines = [
        "# SmolLM2 mechanism study: results (generated by `python studies/smollm2_mechanism.py --report`)", "",
        f"Recomputed from the files in `{shown}`. Seeds analysed (base and every arm complete): "
        f"{analysis['seeds'] or 'none'}; incomplete seeds (not analysed): {analysis['incomplete_seeds'] or 'none'}. "
        f"Code of the runs (the newest commit that changed `src/`, `studies/` or `pyproject.toml`): {commits}; "
        f"local changes there: {dirty}. The rules are in `docs/smollm2_mechanism_study.md`.",
        "",
        *(["**The runs do not all come from one version of the code without local changes, as the rules require.**",
           ""]
          if len(commits) > 1 or dirty not in ([], ["False"]) else []),
        *mechanism_lines(analysis),
        "## Primary hypotheses (Holm over 4)", "",
        f"Paired bootstrap over seeds and problems together ({resamples:,} resamples, seed {BOOTSTRAP_SEED}); "
        "differences in points (×100). Agreement enters a problem only where every run of both arms has at least 2 "
        "wrong samples.", "",
        *hypothesis_table(analysis["primary"], adjusted=True), "",
        "## pass@k on the held-out set (secondary, not in the family)", "",
        *hypothesis_table(analysis["secondary"], adjusted=False), "",
    ]  # fmt: skip
    if power:
        lines += ["Detectable difference at 80 % power (α 0.05, 3 seeds, 64 problems, seed SD 0.02; `power.json`): " +
                  "; ".join(f"{k} {_fmt(100 * m['simulated_mde'], 1) if m['simulated_mde'] else 'beyond the grid'} "
                            f"points (simulated), {100 * m['analytic_mde_by_seed_sd']['0.02']:.1f} (analytic)"
                            for k, m in power["metrics"].items()) + ".", ""]  # fmt: skip
    if analysis["failed"]:
        lines += ["## Failed runs (run twice, reported, not replaced)", ""]
        lines += [f"- `{name}`: {errors}" for name, errors in analysis["failed"].items()]
        lines.append("")
    recomputed = smollm2_resume_order.recompute(runs)
    lines += reading_lines(analysis, runs, recomputed, power, STUDY)
    lines += smollm2_resume_order.report_lines(recomputed)
    lines += smollm2_study.provenance_lines(runs, (BASE, *ARMS))
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n")
    return analysis


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--screen", action="store_true", help="Extend the pool screen until the pool is full.")
    parser.add_argument("--power", action="store_true", help="Write power.json from the screens.")
    parser.add_argument("--step_times", action="store_true", help="One step of every arm; writes step_times.json.")
    parser.add_argument("--run", action="store_true", help="Run (or resume) the study; start two for two workers.")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--threads", type=int, default=2, help="torch threads of --screen")
    parser.add_argument("--results_dir", default=None, help=f"default {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--output_dir", default="outputs/smollm2_mechanism", help="work folders (checkpoints)")
    parser.add_argument("--report", default=None, help="write the markdown report here")
    parser.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES)
    parser.add_argument("--studies", type=int, default=400, help="simulated studies per power check")
    parser.add_argument("--tiny", action="store_true", help="test-only toy-world configuration (never into docs/)")
    parser.add_argument("--stop_after_step", type=int, default=None, help="test hook: stop after that checkpoint")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from hf_meds_cliff.checkpointing import write_json_atomically

    settings = TINY if args.tiny else STUDY
    if args.results_dir is None:
        if args.tiny:
            parser.error("--tiny needs --results_dir (the tiny configuration never writes into docs/).")
        args.results_dir = str(RESULTS)
    results = Path(args.results_dir)
    if args.tiny and results.resolve().is_relative_to((ROOT / "docs").resolve()):
        parser.error("--tiny must not write into docs/.")
    command = ["python", "studies/smollm2_mechanism.py", *(argv if argv is not None else sys.argv[1:])]
    output = Path(args.output_dir)
    if args.screen:
        record = extend_screen(results, args.threads)
        print(json.dumps({"screened": len(screened_problems(results)), "extension": len(record.get("problems", []))}))
    results.mkdir(parents=True, exist_ok=True)
    if args.power:
        record = power_analysis(results, args.studies, 2000)
        record.update(smollm2_study.provenance(command), written=utc_now())
        write_json_atomically(results / "power.json", record, indent=1)
        print(json.dumps({k: m["simulated_mde"] for k, m in record["metrics"].items()}))
    if args.step_times:  # one file per arm, so that two processes can share the arms
        record = step_times(settings, results, output, args.arms)
        (results / "step_times").mkdir(parents=True, exist_ok=True)
        for arm, row in record.pop("arms").items():
            write_json_atomically(results / "step_times" / f"{arm}.json", {"arm": arm, **row, **record}, indent=1)
            print(arm, json.dumps(row))
    if args.run:
        run_study(settings, results, output, args.arms, args.seeds, command, args.stop_after_step)
    if args.report:
        write_report(results, Path(args.report), args.resamples)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
