"""The pre-registered SmolLM2 study (rules in ``docs/real_model_study.md``, committed before any run).

    python studies/smollm2_study.py --run                         # everything, seed-major, resumable
    python studies/smollm2_study.py --run --seeds 1               # one seed (two processes can split the seeds)
    python studies/smollm2_study.py --report docs/real_model_study_report.md   # tables from the committed files
    python studies/smollm2_study.py --run --tiny --results_dir /tmp/r --output_dir /tmp/w   # toy-world smoke run

What it runs (each constant below is the pre-registration's; ``--tiny`` is a test-only configuration on the toy world
that never writes into ``docs/``):

- the base model's evaluation once per evaluation seed, then the six arms of :data:`ARMS` for seed 0, then for seed 1
  (seed-major, in the table's order), each from SmolLM2-135M-Instruct (``real_models.smollm2_135m``);
- every arm: 60 steps of 2 prompts x 8 generations, temperature 0.7, top-p 1.0, 48 new tokens, ``beta`` 0, learning
  rate 1e-5 with linear decay, fp32 on CPU, one torch thread, checkpoints every 10 steps, training seed = run seed;
  :class:`hf_meds_cliff.ErrorCollapseCallback` (window 10) on the correctness reward of every arm;
- the simulated teacher of ``cliff_sim`` and ``grpo_teacher_sim``: the exact rule teacher flipped by
  :class:`~hf_meds_cliff.cliff.teachers.NoisyTeacher` (false negatives 0.14, false positives 0.02, seeded by the run
  seed);
- evaluation of every trained model (and the base model) on the validation set (test-split problems 49-80) and the
  test set (81-208), 8 samples per problem, temperature 0.7, top-p 1.0, 48 new tokens, evaluation seed = run seed:
  each problem's correct count and its wrong answers with their counts.

Resumability: a run writes ``<results_dir>/<arm>-seed<s>.json`` atomically when training and both evaluations are
done, and a run with that file is never run again. Training saves a checkpoint every 10 steps into
``<output_dir>/<arm>-seed<s>/`` and resumes from the newest complete one (a machine stop loses at most 10 steps); a
finished training leaves ``final/`` and ``train_record.json``; an interrupted evaluation runs again from the start. A
run that fails with an error is run again once (from its checkpoint); a second failure writes
``<arm>-seed<s>.failed.json`` with both errors, and the run is not tried again.

The report (``--report``) is recomputed from the results files only (:func:`analyse`): the seeds whose base
evaluation and six arms are all complete, each hypothesis's difference, 95 % bootstrap CI and p over seeds and problems
(``study_common.bootstrap_difference``, 10,000 resamples), Holm over the 7 p-values and the verdicts of
``learning_report.verdict``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import platform
import statistics
import sys
import shutil
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_common  # this folder's modules
from learning_design import FAMILY_ALPHA
from learning_report import verdict
from study_common import bootstrap_difference, code_version, holm, paired_test, pass_at_k_matrix, utc_now

logger = logging.getLogger("smollm2_study")

ARMS = ("grpo", "dapo_ds", "meds_ds", "cliff", "cliff_sim", "grpo_teacher_sim")
"""The pre-registered arms, in the table's (and the run's) order."""
ARM_METHOD = {
    "grpo": "grpo",
    "dapo_ds": "dapo",
    "meds_ds": "meds",
    "cliff": "cliff",
    "cliff_sim": "cliff",
    "grpo_teacher_sim": "cliff",
}
"""The ``study_common`` method each arm is built from (its loss, trainer and method fields)."""
SIMULATED_ARMS = ("cliff_sim", "grpo_teacher_sim")
SIMULATED_TEACHER = {"false_negative_rate": 0.14, "false_positive_rate": 0.02}
"""The simulated teacher's error profile (the Cliff paper's 7 of 50 false negatives, 1 of 50 false positives)."""
SEEDS = (0, 1)
KS = tuple(range(1, 9))
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
BASE = "base"
MEDS_LOGGED = ("collapse/cluster_concentration", "meds/idle", "meds/frac_groups_uniform")


@dataclass(frozen=True)
class Hypothesis:
    name: str
    arm: str
    baseline: str
    metric: str  # "agreement", "pass@1" or "pass@8"
    direction: int  # +1: predicted arm > baseline


HYPOTHESES = (
    Hypothesis("P1", "grpo", BASE, "agreement", +1),
    Hypothesis("M1", "meds_ds", "dapo_ds", "agreement", -1),
    Hypothesis("O1", "meds_ds", "dapo_ds", "pass@1", +1),
    Hypothesis("O2", "meds_ds", "dapo_ds", "pass@8", +1),
    Hypothesis("O3", "cliff", "grpo", "pass@1", +1),
    Hypothesis("O4", "cliff", "grpo", "pass@8", +1),
    Hypothesis("T1", "cliff_sim", "grpo_teacher_sim", "pass@1", +1),
)
"""The family of Holm's correction (m = 7), as pre-registered."""


@dataclass(frozen=True)
class Settings:
    """Everything the arms share. :data:`STUDY` is the pre-registration; :data:`TINY` a test-only toy configuration."""

    world: str = "smollm2"  # "smollm2": real_world at level with the one_shot_boxed prompt; "toy": the toy world
    model: str = "smollm2-135m"
    level: str = "addsub99"
    prompt_template: str = "one_shot_boxed"
    train_problems: int = 512
    validation: tuple[int, int] = (48, 80)  # slice of the test split: problems 49-80
    test: tuple[int, int] = (80, 208)  # problems 81-208
    steps: int = 60
    prompts_per_step: int = 2
    num_generations: int = 8
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 48
    learning_rate: float = 1e-5
    lr_scheduler_type: str = "linear"
    save_steps: int = 10
    dynamic_sampling_max_rounds: int = 40
    meds_alpha: float = 0.1
    meds_beta: float = 0.2
    monitor_window: int = 10
    samples: int = 8
    torch_threads: int = 1


STUDY = Settings()
TINY = Settings(
    world="toy", model="toy", level="toy", prompt_template="toy", train_problems=8, validation=(0, 2), test=(2, 5),
    steps=2, prompts_per_step=1, num_generations=4, max_new_tokens=64, save_steps=1, dynamic_sampling_max_rounds=10,
    monitor_window=2, samples=8,
)  # fmt: skip


class SimulatedStop(BaseException):
    """Raised by the ``--stop_after_step`` test hook after a checkpoint was saved (a simulated machine stop)."""


# --------------------------------------------------------------------------------------------
# problems and the model
# --------------------------------------------------------------------------------------------


def test_split_rows(settings: Settings, stop: int) -> list[dict]:
    if settings.world == "toy":
        from hf_meds_cliff.toy.task import iter_problems, problem_id

        stream = iter_problems("test", 0, unique=True)
        return [
            {"problem": p.question, "answer": str(p.answer), "problem_id": problem_id(p.question)}
            for p in (next(stream) for _ in range(stop))
        ]
    from hf_meds_cliff.real_world import real_world_rows

    return real_world_rows("test", stop, settings.level, seed=0)


def study_problems(settings: Settings) -> dict[str, list[dict]]:
    """``{"train", "validation", "test"}``: rows with ``problem``, ``answer``, ``problem_id``."""
    if settings.world == "toy":
        from hf_meds_cliff.toy.task import iter_problems, problem_id

        stream = iter_problems("train", 0, unique=True)
        train = [
            {"problem": p.question, "answer": str(p.answer), "problem_id": problem_id(p.question)}
            for p in (next(stream) for _ in range(settings.train_problems))
        ]
    else:
        from hf_meds_cliff.real_world import real_world_rows

        train = real_world_rows("train", settings.train_problems, settings.level, seed=0)
    rows = test_split_rows(settings, max(settings.validation[1], settings.test[1]))
    return {
        "train": train,
        "validation": rows[settings.validation[0] : settings.validation[1]],
        "test": rows[settings.test[0] : settings.test[1]],
    }


def chat_prompt(settings: Settings, problem: str) -> list[dict[str, str]]:
    if settings.world == "toy":
        return [{"role": "user", "content": problem}]
    from hf_meds_cliff.data import build_prompt

    return build_prompt(problem, settings.prompt_template)


def model_path(settings: Settings) -> str:
    if settings.world == "toy":
        from hf_meds_cliff.toy import toy_policy

        return str(toy_policy())
    from hf_meds_cliff.real_models import real_model_path

    return str(real_model_path(settings.model))


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------


def problem_seed(eval_seed: int, split: str, problem_id: str) -> int:
    digest = hashlib.blake2b(f"{eval_seed}:{split}:{problem_id}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def evaluate(
    model_dir: str, settings: Settings, rows: list[dict], split: str, eval_seed: int, prompt=None
) -> dict:
    """``settings.samples`` samples per problem: pass@1..8, each problem's correct count and wrong answers.
    ``prompt(problem)`` builds a problem's chat messages (default: :func:`chat_prompt` of ``settings``)."""
    from hf_meds_cliff.collapse import NO_ANSWER
    from hf_meds_cliff.evaluation.generation import TransformersBackend
    from hf_meds_cliff.evaluation.sampling import SamplingSettings
    from hf_meds_cliff.rewards import MathAnswerReward
    from hf_meds_cliff.rewards.extraction import extract_final_answer

    prompt = prompt or (lambda problem: chat_prompt(settings, problem))
    backend = TransformersBackend(model_dir, device="cpu", dtype="float32", batch_size=64)
    sampling = SamplingSettings(settings.samples, settings.temperature, settings.top_p, settings.max_new_tokens)
    grade = MathAnswerReward()
    correct, wrong, truncated = [], [], 0
    per_call = backend.problems_per_call(settings.samples)
    for start in range(0, len(rows), per_call):
        chunk = rows[start : start + per_call]
        samples = backend.generate(
            [prompt(r["problem"]) for r in chunk],
            [problem_seed(eval_seed, split, r["problem_id"]) for r in chunk],
            sampling,
        )
        for row, group in zip(chunk, samples):
            texts = [s.text for s in group]
            scores = grade(texts, answer=[row["answer"]] * len(texts))
            correct.append(sum(score >= 1.0 for score in scores))
            answers = Counter(
                NO_ANSWER if (a := extract_final_answer(t)) is None else str(a)
                for t, score in zip(texts, scores)
                if score < 1.0
            )
            wrong.append(dict(answers))
            truncated += sum(bool(s.truncated) for s in group)
    table = study_common.pass_at_k_table(correct, settings.samples, KS)
    return {
        "split": split,
        "eval_seed": eval_seed,
        "samples_per_problem": settings.samples,
        "problem_ids": [r["problem_id"] for r in rows],
        "correct": correct,
        "wrong_answers": wrong,
        **{f"pass@{k}": value for k, value in table.items()},
        "truncated_samples": truncated,
    }


# --------------------------------------------------------------------------------------------
# training
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
    meds = {"meds_alpha": settings.meds_alpha, "meds_beta": settings.meds_beta}
    extra = {"cliff_outcome": "teacher"} if arm == "grpo_teacher_sim" else None
    return study_common.method_config(
        ARM_METHOD[arm], shared, dapo_extra=dynamic if arm in ("dapo_ds", "meds_ds") else None, meds_extra=meds,
        extra=extra,
    )  # fmt: skip


class StopAfterStep(TrainerCallback):
    """Test hook: raise :class:`SimulatedStop` once the checkpoint of step ``step`` is saved (``on_save`` runs after
    ``Trainer._save_checkpoint`` wrote it)."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            raise SimulatedStop(f"simulated stop after the checkpoint of step {state.global_step}")


def train(arm: str, seed: int, settings: Settings, work: Path, stop_after_step: int | None = None) -> dict:
    """Train ``arm`` (resuming from the newest complete checkpoint); save ``final/`` and ``train_record.json``."""
    teacher = None
    if arm in SIMULATED_ARMS:
        from hf_meds_cliff.cliff.teachers import NoisyTeacher, build_teacher

        teacher = NoisyTeacher(build_teacher("rule"), seed=seed, **SIMULATED_TEACHER)

    def describe(trainer) -> dict:
        if teacher is not None:
            return {"teacher": {"kind": "simulated", "name": teacher.name, **SIMULATED_TEACHER, "seed": seed,
                                "counters_last_segment": dict(teacher.counters)}}  # fmt: skip
        return {"teacher": {"kind": "exact rule teacher", "name": repr(trainer.teacher)} if arm == "cliff" else None}

    return train_resumable(
        work, settings, policy=model_path(settings), rows=study_problems(settings)["train"],
        prompt=lambda problem: chat_prompt(settings, problem), config=arm_config(arm, settings, seed, str(work)),
        method=ARM_METHOD[arm], teacher=teacher, describe=describe, stop_after_step=stop_after_step,
    )  # fmt: skip


def train_resumable(
    work: Path, settings, *, policy: str, rows: list[dict], prompt, config, method: str, teacher=None,
    describe=None, callbacks=(), stop_after_step: int | None = None,
) -> dict:  # fmt: skip
    """Train ``method`` with ``config`` on ``rows`` (each ``prompt(problem)`` a chat), resuming from the newest
    complete checkpoint in ``work``; save ``final/`` and ``train_record.json`` (returned; a finished training is not
    run again). ``describe(trainer)`` adds fields to the record; ``callbacks`` are the caller's trainer callbacks,
    each may take the trainer (``bind(trainer, checkpoint)``) before training starts."""
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff import ErrorCollapseCallback
    from hf_meds_cliff.checkpointing import latest_complete_checkpoint, write_json_atomically

    record_path = work / "train_record.json"
    if record_path.exists() and (work / "final").is_dir():
        return json.loads(record_path.read_text())
    torch.set_num_threads(settings.torch_threads)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    dataset = datasets.Dataset.from_dict(
        {
            "prompt": [prompt(r["problem"]) for r in rows],
            "answer": [r["answer"] for r in rows],
            "problem_id": [r["problem_id"] for r in rows],
        }
    )
    monitor = ErrorCollapseCallback(window=settings.monitor_window)
    rewards = study_common.reward_functions(method, settings.max_new_tokens, overlong=False)
    rewards[0] = monitor.wrap(rewards[0])
    callbacks = [monitor, *callbacks] + ([StopAfterStep(stop_after_step)] if stop_after_step is not None else [])
    trainer = study_common.trainer_class(method)(
        model=AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32),
        reward_funcs=rewards, args=config, train_dataset=dataset, processing_class=tokenizer, callbacks=callbacks,
        **({"teacher": teacher} if teacher is not None else {}),
    )  # fmt: skip
    checkpoint = latest_complete_checkpoint(work)
    for callback in callbacks:
        if hasattr(callback, "bind"):
            callback.bind(trainer, checkpoint)
    segments_path = work / "segments.json"  # the checkpoint each training segment started from (None: step 0)
    segments = json.loads(segments_path.read_text()) if segments_path.exists() else []
    segments.append({"resumed_from": None if checkpoint is None else checkpoint.name, "started": utc_now()})
    write_json_atomically(segments_path, segments)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    finally:
        if hasattr(trainer, "close_teacher"):
            trainer.close_teacher()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    staging, final = work / "final.tmp", work / "final"
    for folder in (staging, final):  # leftovers of a stop between saving the model and writing the record
        shutil.rmtree(folder, ignore_errors=True)
    trainer.save_model(str(staging))
    tokenizer.save_pretrained(str(staging))
    staging.replace(final)
    record = {
        "config": json.loads(json.dumps(trainer.args.to_dict(), default=str)),
        "trainer": type(trainer).__name__,
        **(describe(trainer) if describe is not None else {}),
        "history": [json.loads(json.dumps(r, default=str)) for r in trainer.state.log_history],
        "training_segments": segments,
        "train_seconds_last_segment": seconds,
        "train_cpu_seconds_last_segment": cpu_seconds,
        "collapse_monitor_failures_last_segment": monitor.failures,
    }
    write_json_atomically(record_path, record, indent=1)
    return record


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------


def machine() -> dict:
    import torch
    import transformers
    import trl

    from hf_meds_cliff.machine import cpu_model_and_flags

    cpu, flags = cpu_model_and_flags()
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpu_flags": flags,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "trl": trl.__version__,
        "transformers": transformers.__version__,
    }


def provenance(command: list[str] | None) -> dict:
    return {**code_version(), "machine": machine(), "command": " ".join(command or sys.argv)}


def run_base(seed: int, settings: Settings, results: Path, command) -> Path:
    from hf_meds_cliff.checkpointing import write_json_atomically

    path = results / f"{BASE}-seed{seed}.json"
    if path.exists():
        return path
    started = utc_now()
    problems = study_problems(settings)
    policy = model_path(settings)
    record = {
        "arm": BASE,
        "seed": seed,
        "eval_seed": seed,
        "settings": asdict(settings),
        "model": policy,
        "validation": evaluate(policy, settings, problems["validation"], "validation", seed),
        "test": evaluate(policy, settings, problems["test"], "test", seed),
        **provenance(command),
        "started": started,
        "finished": utc_now(),
    }
    write_json_atomically(path, record, indent=1)
    return path


def run_arm(
    arm: str, seed: int, settings: Settings, results: Path, output: Path, command=None, stop_after_step=None
) -> Path:
    """Train and evaluate one run; writes ``<arm>-seed<seed>.json`` atomically at the end (skipped if it exists)."""
    from hf_meds_cliff.checkpointing import write_json_atomically

    path = results / f"{arm}-seed{seed}.json"
    if path.exists():
        return path
    work = output / f"{arm}-seed{seed}"
    work.mkdir(parents=True, exist_ok=True)
    started_path = work / "started.txt"
    if not started_path.exists():
        started_path.write_text(utc_now())
    train_record = train(arm, seed, settings, work, stop_after_step=stop_after_step)
    problems = study_problems(settings)
    final = str(work / "final")
    record = {
        "arm": arm,
        "seed": seed,
        "eval_seed": seed,
        "method": ARM_METHOD[arm],
        "settings": asdict(settings),
        **train_record,
        "validation": evaluate(final, settings, problems["validation"], "validation", seed),
        "test": evaluate(final, settings, problems["test"], "test", seed),
        **provenance(command),
        "started": started_path.read_text().strip(),
        "finished": utc_now(),
    }
    write_json_atomically(path, record, indent=1)
    for checkpoint in work.glob("checkpoint-*"):  # 1.6 GB each for SmolLM2; final/ stays for audit
        shutil.rmtree(checkpoint, ignore_errors=True)
    return path


def run_study(
    settings: Settings, results: Path, output: Path, arms=ARMS, seeds=SEEDS, command=None, stop_after_step=None
) -> None:
    """Seed-major: the base evaluations of ``seeds`` first, then every arm of seed 0, then seed 1, ... A failing run
    is run again once; a second failure is written to ``<arm>-seed<s>.failed.json`` and not tried again."""
    from hf_meds_cliff.checkpointing import write_json_atomically

    import torch

    torch.set_num_threads(settings.torch_threads)  # one torch thread per run (the evaluations too)
    results.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        run_base(seed, settings, results, command)
    for seed in seeds:
        for arm in arms:
            failed_path = results / f"{arm}-seed{seed}.failed.json"
            if (results / f"{arm}-seed{seed}.json").exists() or failed_path.exists():
                continue
            errors = []
            for attempt in (1, 2):
                logger.info("%s seed %d (attempt %d)", arm, seed, attempt)
                try:
                    run_arm(arm, seed, settings, results, output, command, stop_after_step)
                    break
                except Exception as error:  # noqa: BLE001 -- the rule: run again once, then report the failure
                    logger.exception("%s seed %d failed", arm, seed)
                    errors.append({"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()})
            else:
                write_json_atomically(
                    failed_path, {"arm": arm, "seed": seed, "errors": errors, **provenance(command),
                                  "finished": utc_now()}, indent=1,
                )  # fmt: skip


# --------------------------------------------------------------------------------------------
# analysis and report
# --------------------------------------------------------------------------------------------


def load_results(results: Path) -> tuple[dict[str, dict[int, dict]], dict[str, dict[int, dict]]]:
    """``(runs, failed)``: ``runs[arm][seed]`` (``arm`` includes ``base``) and the failure records."""
    runs: dict[str, dict[int, dict]] = {}
    failed: dict[str, dict[int, dict]] = {}
    for path in sorted(results.glob("*-seed*.json")):
        record = json.loads(path.read_text())
        target = failed if path.name.endswith(".failed.json") else runs
        target.setdefault(record["arm"], {})[int(record["seed"])] = record
    return runs, failed


def complete_seeds(runs: dict[str, dict[int, dict]]) -> list[int]:
    """Seeds whose base evaluation and six arms are all complete (the only ones analysed)."""
    seeds = set(runs.get(BASE, {}))
    for arm in ARMS:
        seeds &= set(runs.get(arm, {}))
    return sorted(seeds)


def agreement(wrong: dict) -> float:
    from hf_meds_cliff.collapse import wrong_answer_agreement

    return wrong_answer_agreement(Counter(wrong))


def enters_agreement(evaluation: dict, problem: int) -> bool:
    """A problem's wrong-answer agreement needs at least 2 wrong samples (it enters a comparison only where every run
    of both arms has them)."""
    return sum(evaluation["wrong_answers"][problem].values()) >= 2


def hypothesis_matrices(h: Hypothesis, runs, seeds, split: str = "test"):
    """``(arm matrix, baseline matrix, problems entering)`` of shape (seeds, problems) for hypothesis ``h``."""
    import numpy as np

    def evals(arm):
        return [runs[arm][s][split] for s in seeds]

    arm_evals, base_evals = evals(h.arm), evals(h.baseline)
    ids = arm_evals[0]["problem_ids"]
    for e in arm_evals + base_evals:
        if e["problem_ids"] != ids:
            raise ValueError(f"{h.name}: the runs were evaluated on different {split} problems; pair them first.")
    n = arm_evals[0]["samples_per_problem"]
    if h.metric == "agreement":
        keep = [
            i for i in range(len(ids))
            if all(enters_agreement(e, i) for e in arm_evals + base_evals)
        ]  # fmt: skip

        def matrix(es):
            return np.array([[agreement(e["wrong_answers"][i]) for i in keep] for e in es], dtype=np.float64)

        return matrix(arm_evals), matrix(base_evals), len(keep)
    k = int(h.metric.split("@")[1])
    return (
        pass_at_k_matrix([e["correct"] for e in arm_evals], n, k),
        pass_at_k_matrix([e["correct"] for e in base_evals], n, k),
        len(ids),
    )


def analyse(results: Path, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """Every hypothesis's difference, CI, p, Holm-adjusted p (m = 7) and verdict, from the results files only.

    A hypothesis that cannot be computed (no complete seed, or no problem enters) keeps its place in the family with
    p = 1 (Holm's m stays 7) and is *not shown*.
    """
    runs, failed = load_results(results)
    seeds = complete_seeds(runs)
    rows = []
    for h in HYPOTHESES:
        row = {**asdict(h), "seeds": seeds, "problems": 0, "difference": math.nan, "ci_low": math.nan,
               "ci_high": math.nan, "p": 1.0, "arm_mean": math.nan, "baseline_mean": math.nan}  # fmt: skip
        if seeds:
            arm_m, base_m, entering = hypothesis_matrices(h, runs, seeds)
            row["problems"] = entering
            if entering:
                row.update(bootstrap_difference(arm_m, base_m, resamples=resamples, seed=BOOTSTRAP_SEED))
                row["arm_mean"], row["baseline_mean"] = float(arm_m.mean()), float(base_m.mean())
                row["seed_t_test"] = paired_test(list((arm_m - base_m).mean(axis=1)))
        rows.append(row)
    adjusted = holm([row["p"] for row in rows])
    for row, p in zip(rows, adjusted):
        row["holm_p"] = p
        computed = not math.isnan(row["difference"])
        row["verdict"] = verdict(row["difference"], p, row["direction"]) if computed else "not shown"
    incomplete = sorted({s for arm in (BASE, *ARMS) for s in runs.get(arm, {})} - set(seeds))
    return {"seeds": seeds, "incomplete_seeds": incomplete, "hypotheses": rows, "failed": {
        arm: {str(s): [e["error"] for e in r["errors"]] for s, r in by_seed.items()} for arm, by_seed in failed.items()
    }}  # fmt: skip


def _pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def _points(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.1f}"


def reading(row: dict) -> str:
    """One sentence that claims exactly what the rule supports."""
    comparison = f"`{row['arm']}` − `{row['baseline']}`, {row['metric']}"
    if row["metric"] == "agreement":
        comparison = f"`{row['arm']}` − `{row['baseline']}`, wrong-answer agreement"
    label = " (simulated teacher)" if row["name"] == "T1" else ""
    if not row["problems"]:
        return f"{row['name']}{label}: not shown; it could not be computed (no complete seed or no problem entered)."
    if row["verdict"] == "not shown":
        return (
            f"{row['name']}{label}: not shown ({comparison}: {_points(row['difference'])} points, Holm p "
            f"{row['holm_p']:.3g}). This is not a claim that the two are equal: the study could not tell them apart."
        )
    sign = "as predicted" if row["verdict"] == "holds" else "against the prediction"
    return (
        f"{row['name']}{label}: {row['verdict']} ({comparison}: {_points(row['difference'])} points, 95 % CI "
        f"[{_points(row['ci_low'])}, {_points(row['ci_high'])}], Holm p {row['holm_p']:.3g}, {sign}), on this "
        f"model, world and test set, over {len(row['seeds'])} seed(s) and {row['problems']} problems."
    )


def beside(runs, seeds) -> list[str]:
    """The numbers reported beside the hypotheses (not tested): validation and test pass@k per arm, the training
    reward and the monitor's curves (first and last window of steps), the MEDS and Cliff logs."""
    lines = ["## Reported beside, not tested", "",
             "| arm | seeds | validation pass@1 | validation pass@8 | test pass@1 | test pass@8 | test distinct wrong "
             "answers per problem | test top wrong share |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for arm in (BASE, *ARMS):
        records = [runs[arm][s] for s in seeds if s in runs.get(arm, {})]
        if not records:
            continue
        cells = []
        for split in ("validation", "test"):
            for k in ("pass@1", "pass@8"):
                cells.append(study_common.mean_std([r[split].get(k) for r in records], 100))
        distinct, top = [], []
        for r in records:
            for wrong in r["test"]["wrong_answers"]:
                if wrong:
                    distinct.append(len(wrong))
                    top.append(max(wrong.values()) / sum(wrong.values()))
        lines.append(f"| `{arm}` | {len(records)} | {' | '.join(cells)} | "
                     f"{statistics.mean(distinct) if distinct else math.nan:.2f} | "
                     f"{100 * statistics.mean(top) if top else math.nan:.1f} % |")  # fmt: skip
    keys = ("reward", "collapse/top_wrong_share", "collapse/wrong_answer_entropy", "collapse/distinct_wrong_answers",
            "collapse/window/top_wrong_share", *MEDS_LOGGED, "dynamic_sampling/rounds",
            "cliff/teacher_verifier_agreement", "cliff/agreement", "cliff/prefix_fraction")  # fmt: skip
    lines += ["", "Training logs (mean over seeds of the mean over the first and the last 10 logged steps; the "
              "monitor's "
              "curves are read against the reward):", "", "| arm | metric | first 10 steps | last 10 steps |",
              "|---|---|---|---|"]  # fmt: skip
    for arm in ARMS:
        records = [runs[arm][s] for s in seeds if s in runs.get(arm, {})]
        for key in keys:
            first, last = [], []
            for r in records:
                values = [h[key] for h in r.get("history", []) if key in h and h[key] is not None]
                values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
                if values:
                    first.append(statistics.mean(values[:10]))
                    last.append(statistics.mean(values[-10:]))
            if first:
                lines.append(f"| `{arm}` | `{key}` | {statistics.mean(first):.3f} | {statistics.mean(last):.3f} |")
    return lines


def provenance_lines(runs, arms=(BASE, *ARMS)) -> list[str]:
    """Where and how each results file was made, read from the files: the machine records (one line per distinct
    record, CPU flags compared whole), the commands, each run's start, end and training minutes, and where each of its
    training segments started (step 0, or the checkpoint it resumed from)."""
    records = [(arm, s, r) for arm in arms for s, r in sorted(runs.get(arm, {}).items())]
    machines: dict[str, list[str]] = {}
    for arm, s, r in records:
        machines.setdefault(json.dumps(r.get("machine"), sort_keys=True), []).append(f"{arm}-seed{s}")
    lines = ["## Provenance (read from the results files)", ""]
    if len(machines) > 1:
        lines += [f"**The runs come from {len(machines)} different machine records.**", ""]
    for key, names in machines.items():
        m = json.loads(key)
        if not m:
            lines.append(f"- Machine not recorded: {', '.join(names)}.")
            continue
        lines.append(
            f"- Machine of {len(names)} file(s): {m.get('cpu')}, {m.get('cpu_count')} cores "
            f"({len(m.get('cpu_flags') or [])} CPU flags, identical across these files), {m.get('platform')}; Python "
            f"{m.get('python')}, torch {m.get('torch')} ({m.get('torch_threads')} thread), trl {m.get('trl')}, "
            f"transformers {m.get('transformers')}."
        )
    header = ("| file | command | started (UTC) | finished (UTC) | training minutes (last segment) | training segments "
              "(where each started) |")
    lines += ["", header, "|---|---|---|---|---|---|"]
    for arm, s, r in records:
        seconds = r.get("train_seconds_last_segment")
        minutes = f"{seconds / 60:.1f}" if isinstance(seconds, (int, float)) else "–"
        starts = ["step 0" if g.get("resumed_from") is None else f"`{g['resumed_from']}`"
                  for g in r.get("training_segments") or []]  # fmt: skip
        segments = f"{len(starts)}: {', '.join(starts)}" if starts else "–"
        command = r.get("command", "not recorded")
        lines.append(
            f"| `{arm}-seed{s}.json` | `{command}` | {r.get('started', '–')} | {r.get('finished', '–')} | "
            f"{minutes} | {segments} |"
        )
    return lines


def write_report(results: Path, report: Path, resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    analysis = analyse(results, resamples)
    runs, _ = load_results(results)
    seeds = analysis["seeds"]
    commits = sorted({str(r.get("commit")) for by_seed in runs.values() for r in by_seed.values()})
    dirty = sorted({str(r.get("dirty")) for by_seed in runs.values() for r in by_seed.values()})
    lines = [
        "# SmolLM2 study: results (generated by `python studies/smollm2_study.py --report`)", "",
        f"Recomputed from the files in `{results}`. Seeds analysed (base and all six arms complete): "
        f"{seeds or 'none'}; "
        f"incomplete seeds (not analysed): {analysis['incomplete_seeds'] or 'none'}. Commits of the runs: {commits}; "
        f"dirty trees: {dirty}. The rules are in `docs/real_model_study.md`; `cliff_sim` and `grpo_teacher_sim` use "
        "a **simulated** teacher (the exact rule teacher flipped at false-negative rate 0.14 and false-positive rate "
        "0.02).", "",
        *(["**The runs do not all come from one commit with a clean tree, as the pre-registration requires.**", ""]
          if len(commits) > 1 or dirty != ["False"] else []),
        f"Bootstrap: {resamples:,} resamples over seeds (paired) and problems together, seed {BOOTSTRAP_SEED}; "
        "Holm over "
        f"the {len(HYPOTHESES)} hypotheses, family-wise α {FAMILY_ALPHA}. Differences in points (×100).", "",
        "| | comparison | metric | predicted | seeds | problems | arm | baseline | difference | 95 % CI | p | Holm p | "
        "verdict |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for row in analysis["hypotheses"]:
        lines.append(
            f"| {row['name']} | `{row['arm']}` − `{row['baseline']}` | {row['metric']} | "
            f"{'>' if row['direction'] > 0 else '<'} 0 | {len(row['seeds'])} | {row['problems']} | "
            f"{_pct(row['arm_mean'])} | {_pct(row['baseline_mean'])} | {_points(row['difference'])} | "
            f"[{_points(row['ci_low'])}, {_points(row['ci_high'])}] | {row['p']:.4g} | {row['holm_p']:.4g} | "
            f"*{row['verdict']}* |"
        )
    t_tests = "; ".join(
        f"{row['name']} p {row['seed_t_test']['t_p']:.3g}" for row in analysis["hypotheses"] if "seed_t_test" in row
    )
    lines += ["", f"Paired t-test over seeds of the per-seed mean differences (reported beside, not tested): {t_tests}."]
    lines += ["", "## Reading (each line claims what its verdict supports, no more)", ""]
    lines += [f"- {reading(row)}" for row in analysis["hypotheses"]]
    if analysis["failed"]:
        lines += ["", "## Failed runs (run twice, reported, not replaced)", ""]
        lines += [f"- `{arm}` seed {s}: {errors}" for arm, by in analysis["failed"].items() for s, errors in by.items()]
    lines += ["", *beside(runs, seeds)]
    lines += ["", *provenance_lines(runs)]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n")
    return analysis


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", action="store_true", help="Run (or resume) the study.")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--results_dir", default=None, help="default docs/real_model_results/study")
    parser.add_argument("--output_dir", default="outputs/smollm2_study", help="work folders (checkpoints)")
    parser.add_argument("--report", default=None, help="write the markdown report here")
    parser.add_argument("--resamples", type=int, default=BOOTSTRAP_RESAMPLES)
    parser.add_argument("--tiny", action="store_true", help="test-only toy-world configuration (never into docs/)")
    parser.add_argument("--stop_after_step", type=int, default=None, help="test hook: stop after that checkpoint")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = TINY if args.tiny else STUDY
    if args.results_dir is None:
        if args.tiny:
            parser.error("--tiny needs --results_dir (the tiny configuration never writes into docs/).")
        args.results_dir = "docs/real_model_results/study"
    results = Path(args.results_dir)
    if args.tiny and results.resolve().is_relative_to((Path(__file__).resolve().parent.parent / "docs").resolve()):
        parser.error("--tiny must not write into docs/.")
    command = ["python", "studies/smollm2_study.py", *(argv if argv is not None else sys.argv[1:])]
    if args.run:
        run_study(settings, results, Path(args.output_dir), args.arms, args.seeds, command, args.stop_after_step)
    if args.report:
        write_report(results, Path(args.report), args.resamples)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
