"""Learning study: first a regime in which GRPO itself generalises, then the methods in it.

    python studies/learning_study.py --stage 1                  # GRPO in every pre-registered candidate, 5 seeds
    python studies/learning_study.py --decide                   # apply the stage-1 rule (writes stage1_decision.json)
    python studies/learning_study.py --stage 2                  # the methods in the chosen regime, 8 seeds
    python studies/learning_study.py --stage 3                  # the pre-registered arms, seeds 100-107
    python studies/learning_study.py --stage 3 --arms meds cliff_b0 --seeds 100 101   # a part of stage 3
    python studies/learning_study.py --report docs/learning_study.md   # tables and plots from the results files
    python studies/learning_study.py --quick --output_dir DIR   # a few steps of everything (a smoke run)

Stage 1 (the rule was written, in this file and in docs/learning_study.md, before any run): every candidate of
``CANDIDATES`` trains GRPO from its world's warm-up for seeds 0-4. A candidate *passes* when

1. held-out pass@1 rises over the warm-up by at least ``MIN_PASS1_GAIN`` (5 points) in at least 4 of the 5 seeds
   (run seed ``s`` is evaluated with evaluation seed ``s``, and so is the warm-up it is compared with);
2. the mean held-out pass@16 over the seeds is not below the warm-up's mean minus ``2 * sd``, where ``sd`` is the
   standard deviation of the warm-up's held-out pass@16 over the same 5 evaluation seeds (seed noise);
3. the median CPU time of its runs (training, one torch thread: ``time.process_time``, which a machine shared with
   other jobs does not inflate as it does wall time) is at most ``MAX_RUN_MINUTES``, so that stage 2 (6 methods x 8
   seeds) fits the issue's budget of about 6 CPU hours in all.

Among the passing candidates the one with the largest mean pass@1 gain is chosen; within 1 point, the one with
fewer training steps. If none passes, the study stops at stage 1 and says so with the numbers; the rule is not
loosened afterwards.

Stage 3 (its arms, hypotheses and statistics are in ``learning_design.py`` and were committed before any
run) trains every arm of ``STAGE3_ARMS`` in the chosen regime with fresh seeds, evaluates each run on a fresh test set
and on the validation set (stage 1 and 2's held-out problems), and saves each problem's correct count, the commit and
the time in ``stage3-<arm>-seed<k>.json``.

Every run writes its JSON into ``--results_dir`` (default ``docs/learning_study_results/``) as soon as it ends, and
a re-run skips the runs whose file exists, so the study runs in parts. Work folders go to ``--output_dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_design  # this folder's modules
import study_common
from learning_design import (  # noqa: F401  (re-exported: the study's design is read from here too)
    CANDIDATES,
    KS,
    MAX_RUN_MINUTES,
    MIN_PASS1_GAIN,
    MIN_SEEDS_WITH_GAIN,
    NOISE_SDS,
    QUICK,
    STAGE1_SEEDS,
    STAGE2_SEEDS,
    STAGE3_ARMS,
    STAGE3_REGIME,
    STAGE3_SEEDS,
    STAGE3_TEST_STREAM,
    TRAP_WARMUP,
    Arm,
    Regime,
    decide,
)
import learning_report
from learning_report import write_report
from study_common import ALL_METHODS, answer_statistics, code_version, pass_at_k_table, trainer_class, utc_now

logger = logging.getLogger("learning_study")

# --------------------------------------------------------------------------------------------
# the worlds
# --------------------------------------------------------------------------------------------


def world_policy(world: str, quick: bool = False) -> str:
    """The warmed-up policy folder of ``world`` (cached; the trap world's warm-up takes ~17 min once)."""
    from hf_meds_cliff.toy import ToyModelConfig, toy_policy, warmup_toy_model

    if world == "toy" or quick:
        return str(toy_policy())
    if world == "trap":
        settings = dict(TRAP_WARMUP)
        layers = settings.pop("num_hidden_layers")
        return str(
            warmup_toy_model(model_config=ToyModelConfig(num_hidden_layers=layers), num_threads=1, **settings)
        )
    raise ValueError(f"Unknown world {world!r}; use 'trap' or 'toy'.")


def world_problems(regime: Regime):
    """``(training pool, held-out problems)``: distinct problems; the held-out ones come from the test split."""
    if regime.world == "trap":
        from hf_meds_cliff.toy.traps import trap_problems

        pool = trap_problems("train", regime.pool_size, seed=0, stream_name="learning-pool")
        return pool, trap_problems("test", regime.heldout_problems, seed=0)
    from hf_meds_cliff.toy.task import iter_problems

    train = iter_problems("train", 0, unique=True, stream_name="learning-pool")
    test = iter_problems("test", 0)
    return [next(train) for _ in range(regime.pool_size)], [
        next(test) for _ in range(regime.heldout_problems)
    ]


def stage3_problems(regime: Regime):
    """``(training pool, validation problems, test problems)`` of stage 3: the pool and the validation set are stage 1
    and 2's pool and held-out problems; the test set is a fresh draw of the test split without any validation problem.
    """
    from hf_meds_cliff.toy.task import iter_problems
    from hf_meds_cliff.toy.traps import first_trap_index

    pool, validation = world_problems(regime)
    seen = {p.question for p in validation}
    stream = iter_problems("test", 0, unique=True, stream_name=STAGE3_TEST_STREAM)
    if regime.world == "trap":  # as trap_problems: only problems with a trap-eligible step
        stream = (p for p in stream if first_trap_index(p) is not None)
    test = []
    for problem in stream:
        if problem.question not in seen:
            test.append(problem)
        if len(test) == regime.heldout_problems:
            return pool, validation, test
    raise AssertionError("unreachable: the stream is endless")


def traps_of(problems, world: str):
    if world != "trap":
        return None
    from hf_meds_cliff.toy.traps import trapped_solution

    return [trapped_solution(p)[1] for p in problems]


# --------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------


def sample_answers(model, tokenizer, problems, samples: int, max_new_tokens: int, seed: int) -> list[list]:
    from hf_meds_cliff.toy.warmup import boxed_integer, generate_completions

    texts = generate_completions(
        model, tokenizer, [p.question for p in problems], num_samples=samples, do_sample=True,
        max_new_tokens=max_new_tokens, seed=seed,
    )  # fmt: skip
    return [[boxed_integer(t) for t in group] for group in texts]


def heldout(model, tokenizer, problems, regime: Regime, eval_seed: int, world: str) -> dict:
    """Held-out pass@1..16 (unbiased estimator over ``heldout_samples``) and wrong-answer diversity."""
    return heldout_with_counts(model, tokenizer, problems, regime, eval_seed, world)[0]


def heldout_with_counts(model, tokenizer, problems, regime: Regime, eval_seed: int, world: str) -> tuple[dict, list]:
    """:func:`heldout` and each problem's number of correct samples out of ``heldout_samples`` (in problem order)."""
    answers = sample_answers(
        model, tokenizer, problems, regime.heldout_samples, regime.max_completion_length, 10_000 + eval_seed
    )
    truths = [p.answer for p in problems]
    correct = [sum(a == t for a in group) for group, t in zip(answers, truths)]
    table = pass_at_k_table(correct, regime.heldout_samples, KS)
    measured = {
        **{f"pass@{k}": value for k, value in table.items()},
        **answer_statistics(answers, truths, traps_of(problems, world)),
    }
    return measured, correct


def diversity_probe(model, tokenizer, problems, regime: Regime, seed: int, world: str) -> dict:
    """Pool prompts: reward, distinct wrong answers, and each prompt's wrong answers (for the no-collapse
    expectation of the report)."""
    answers = sample_answers(
        model, tokenizer, problems, regime.probe_samples, regime.max_completion_length, seed
    )
    truths = [p.answer for p in problems]
    return {
        "reward": sum(a == t for g, t in zip(answers, truths) for a in g)
        / (len(problems) * regime.probe_samples),
        **answer_statistics(answers, truths, traps_of(problems, world)),
        "wrong_answers": [[a for a in g if a != t] for g, t in zip(answers, truths)],
    }


class CurveCallback(TrainerCallback):
    """Held-out pass@1 on a subset (the learning curve) and the pool's diversity probe, at step 0 and every
    ``curve_every`` steps."""

    def __init__(self, tokenizer, heldout_problems, pool, regime: Regime, seed: int, world: str):
        self.tokenizer, self.regime, self.seed, self.world = tokenizer, regime, seed, world
        self.curve_problems = heldout_problems[: regime.curve_problems]
        self.probe_problems = pool[: regime.probe_prompts]
        self.curve: list[dict] = []
        self.probe: list[dict] = []

    def _measure(self, model, step: int) -> None:
        r = self.regime
        answers = sample_answers(
            model,
            self.tokenizer,
            self.curve_problems,
            r.curve_samples,
            r.max_completion_length,
            20_000 + step,
        )
        truths = [p.answer for p in self.curve_problems]
        accuracy = sum(a == t for g, t in zip(answers, truths) for a in g) / (len(truths) * r.curve_samples)
        self.curve.append({"step": step, "heldout_pass@1": accuracy})
        probe = diversity_probe(model, self.tokenizer, self.probe_problems, r, 30_000 + self.seed, self.world)
        self.probe.append({"step": step, **probe})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._measure(model, 0)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.regime.curve_every == 0 or state.global_step == state.max_steps:
            self._measure(model, state.global_step)


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------


def method_config(
    method: str, regime: Regime, seed: int, output_dir: str, extra: dict | None = None, stage: int = 2
):
    """Same budget for every method; DAPO without dynamic sampling (every method draws the same rollouts) unless
    ``extra`` (a stage-3 arm's fields) says otherwise."""
    shared = study_common.shared_training_kwargs(
        output_dir=output_dir, seed=seed, steps=regime.steps, learning_rate=regime.learning_rate,
        prompts_per_step=regime.prompts_per_step, num_generations=regime.num_generations,
        max_completion_length=regime.max_completion_length, warmup_steps=min(2, regime.steps),
        lr_scheduler_type=regime.lr_scheduler_type,
    )  # fmt: skip
    # Stages 1-2 (no arm) ran before MEDS's default changed on zero-variance groups; stage 3 runs the default.
    legacy = study_common.MEDS_EARLIER_DEFAULT if stage < 3 else None
    return study_common.method_config(method, shared, meds_extra=legacy, extra=extra)


def train_one(method: str, seed: int, regime: Regime, policy: str, work_dir: Path, arm: Arm | None = None) -> dict:
    """Train ``method`` (stage 3: ``arm``) from ``policy`` and measure it; stage 3 adds the test and validation sets'
    per-problem counts, the arm's config fields, the commit and the time."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.toy.task import toy_rows

    started = utc_now()
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    if arm is None:
        pool, heldout_problems = world_problems(regime)
        curve_problems = heldout_problems
        run_name = f"{regime.name}-{method}-seed{seed}"
    else:  # the learning curve on the validation set: the test set is only measured at the end
        pool, curve_problems, heldout_problems = stage3_problems(regime)
        run_name = f"stage3-{regime.name}-{arm.name}-seed{seed}"
    callback = CurveCallback(tokenizer, curve_problems, pool, regime, seed, regime.world)
    extra = arm.config_overrides if arm is not None else None
    trainer = trainer_class(method)(
        model=AutoModelForCausalLM.from_pretrained(policy),
        reward_funcs=study_common.reward_functions(
            method, regime.max_completion_length, overlong=arm.overlong if arm is not None else None
        ),
        args=method_config(method, regime, seed, str(work_dir / run_name), extra=extra, stage=2 if arm is None else 3),
        train_dataset=datasets.Dataset.from_dict(toy_rows(pool)),
        processing_class=tokenizer,
        callbacks=[callback],
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    if hasattr(trainer, "close_teacher"):
        trainer.close_teacher()
    history = [
        {k: v for k, v in record.items() if k in ("step", "reward") or k.startswith(("meds/", "cliff/"))}
        for record in trainer.state.log_history
        if "reward" in record
    ]
    measured, correct = heldout_with_counts(trainer.model, tokenizer, heldout_problems, regime, seed, regime.world)
    record = {
        "method": method,
        "seed": seed,
        "config": asdict(regime),
        "heldout": measured,
        "curve": callback.curve,
        "probe": callback.probe,
        "history": history,
        "train_seconds": seconds,
        "train_cpu_seconds": cpu_seconds,
    }
    if arm is None:
        return record
    validation, validation_correct = heldout_with_counts(
        trainer.model, tokenizer, curve_problems, regime, seed, regime.world
    )
    return {
        "stage": 3,
        "arm": arm.name,
        **record,
        "arm_config": {**method_fields(trainer.args), "overlong_penalty": arm.overlong},
        "heldout_correct": correct,
        "validation": validation,
        "validation_correct": validation_correct,
        "samples_per_problem": regime.heldout_samples,
        **code_version(),
        "started_at": started,
        "finished_at": utc_now(),
    }


def method_fields(args) -> dict:
    """The config fields that define a method (loss, clipping, dynamic sampling, every meds_* and cliff_* field)."""
    prefixes = ("meds_", "cliff_", "dynamic_sampling")
    return {
        key: value
        for key, value in args.to_dict().items()
        if key.startswith(prefixes) or key in ("loss_type", "epsilon", "epsilon_high", "scale_rewards")
    }


def warmup_record(regime: Regime, policy: str, seeds) -> dict:
    """The warm-up's held-out pass@k per evaluation seed and their mean (the form of the runs' ``heldout``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(policy)
    pool, heldout_problems = world_problems(regime)
    per_seed = {str(s): heldout(model, tokenizer, heldout_problems, regime, s, regime.world) for s in seeds}
    mean = {key: statistics.mean(v[key] for v in per_seed.values()) for key in next(iter(per_seed.values()))}
    reference = diversity_probe(model, tokenizer, pool[: regime.probe_prompts], replace(regime, probe_samples=32),
                                12_345, regime.world)  # fmt: skip
    return {
        "method": "warmup",
        "world": regime.world,
        "policy": policy,
        "heldout": mean,
        "heldout_per_eval_seed": per_seed,
        "diversity_reference": {"samples": 32, **reference},
    }


def write_json(path: Path, value: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(value, indent=1))
    temporary.replace(path)


def run_stage1(results: Path, work: Path, quick: bool, candidates) -> None:
    for regime in candidates:
        policy = world_policy(regime.world, quick)
        warmup_path = results / f"warmup-{regime.world}.json"
        if not warmup_path.exists():
            logger.info("evaluating the %s warm-up", regime.world)
            write_json(
                warmup_path, warmup_record(regime, policy, STAGE1_SEEDS[:1] if quick else STAGE1_SEEDS)
            )
        for seed in STAGE1_SEEDS[:1] if quick else STAGE1_SEEDS:
            path = results / f"stage1-{regime.name}-seed{seed}.json"
            if path.exists():
                continue
            logger.info("stage 1: %s seed %d", regime.name, seed)
            write_json(path, {**train_one("grpo", seed, regime, policy, work), "stage": 1})


def run_stage2(results: Path, work: Path, quick: bool, methods, seeds=STAGE2_SEEDS) -> None:
    decision_path = results / "stage1_decision.json"
    if quick:
        regime = QUICK
    else:
        if not decision_path.exists():
            raise SystemExit("Stage 2 needs stage 1's decision: run --stage 1, then --decide.")
        decision = json.loads(decision_path.read_text())
        if decision["chosen"] is None:
            raise SystemExit("Stage 1 chose no regime (see stage1_decision.json): stage 2 does not run.")
        regime = next(c for c in CANDIDATES if c.name == decision["chosen"])
    policy = world_policy(regime.world, quick)
    warmup_path = results / "warmup.json"
    if not warmup_path.exists():
        source = results / f"warmup-{regime.world}.json"
        write_json(warmup_path, json.loads(source.read_text()) if source.exists() and not quick
                   else warmup_record(regime, policy, STAGE2_SEEDS[:1] if quick else STAGE1_SEEDS))  # fmt: skip
    # seed-major: every finished seed pairs all methods
    for seed in seeds[:1] if quick else seeds:
        for method in methods:
            path = results / f"{method}-seed{seed}.json"
            if path.exists():
                continue
            logger.info("stage 2: %s seed %d (%s)", method, seed, regime.name)
            write_json(path, {**train_one(method, seed, regime, policy, work), "stage": 2})


def stage3_regime(results: Path, quick: bool) -> Regime:
    if quick:
        return QUICK
    decision_path = results / "stage1_decision.json"
    chosen = json.loads(decision_path.read_text())["chosen"] if decision_path.exists() else None
    if chosen != STAGE3_REGIME:
        raise SystemExit(
            f"Stage 3 was registered for stage 1's choice {STAGE3_REGIME!r}, but {decision_path} says {chosen!r}."
        )
    return next(c for c in CANDIDATES if c.name == STAGE3_REGIME)


def stage3_warmup_record(regime: Regime, policy: str, seeds) -> dict:
    """The warm-up on stage 3's test and validation sets, per evaluation seed, with per-problem counts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(policy)
    _, validation, test = stage3_problems(regime)
    per_seed = {}
    for seed in seeds:
        measured, correct = heldout_with_counts(model, tokenizer, test, regime, seed, regime.world)
        checked, checked_correct = heldout_with_counts(model, tokenizer, validation, regime, seed, regime.world)
        per_seed[str(seed)] = {"heldout": measured, "heldout_correct": correct, "validation": checked,
                               "validation_correct": checked_correct}  # fmt: skip
    return {"stage": 3, "method": "warmup", "policy": policy, "per_eval_seed": per_seed,
            "samples_per_problem": regime.heldout_samples, **code_version(), "finished_at": utc_now()}  # fmt: skip


def run_stage3(results: Path, work: Path, quick: bool, arms, seeds=STAGE3_SEEDS) -> None:
    """Every arm of ``arms`` for every seed (seed-major, so every finished seed pairs all arms); resumable."""
    regime = stage3_regime(results, quick)
    policy = world_policy(regime.world, quick)
    seeds = tuple(seeds)[:1] if quick else tuple(seeds)
    warmup_path = results / "stage3-warmup.json"
    if not warmup_path.exists():
        logger.info("stage 3: evaluating the warm-up")
        write_json(warmup_path, stage3_warmup_record(regime, policy, seeds))
    by_name = {arm.name: arm for arm in STAGE3_ARMS}
    for seed in seeds:
        for name in arms:
            path = results / f"stage3-{name}-seed{seed}.json"
            if path.exists():
                continue
            arm = by_name[name]
            logger.info("stage 3: %s seed %d (%s)", name, seed, regime.name)
            write_json(path, train_one(arm.method, seed, regime, policy, work, arm=arm))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", type=int, choices=(1, 2, 3), default=None)
    parser.add_argument("--decide", action="store_true", help="Apply the stage-1 rule to the results.")
    parser.add_argument("--candidates", nargs="+", default=None, help="Stage 1: only these candidates.")
    parser.add_argument("--methods", nargs="+", choices=ALL_METHODS, default=list(ALL_METHODS))
    parser.add_argument(
        "--arms",
        nargs="+",
        choices=[arm.name for arm in STAGE3_ARMS],
        default=[arm.name for arm in STAGE3_ARMS],
        help="Stage 3: only these arms (default: all pre-registered arms).",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="Stages 2 and 3: these seeds, in this order (two processes can split them, e.g. 0 1 2 3 and 7 6 5 4); "
        f"default: stage 2 {list(STAGE2_SEEDS)}, stage 3 {list(STAGE3_SEEDS)}.",
    )
    parser.add_argument("--results_dir", default="docs/learning_study_results")
    parser.add_argument("--output_dir", default="outputs/learning_study", help="Work folders of the runs.")
    parser.add_argument("--report", default=None, help="Write the markdown report here.")
    parser.add_argument("--quick", action="store_true", help="A few steps of everything (a smoke run).")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest on a shared box)."
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    results, work = Path(args.results_dir), Path(args.output_dir)
    candidates = (QUICK,) if args.quick else CANDIDATES
    if args.candidates:
        known = {c.name: c for c in CANDIDATES}
        unknown = sorted(set(args.candidates) - set(known))
        if unknown:
            parser.error(f"unknown candidates {unknown}; known: {sorted(known)}")
        candidates = tuple(known[name] for name in args.candidates)
    if args.stage == 1:
        run_stage1(results, work, args.quick, candidates)
    if args.decide:
        decision = decide(results, (QUICK,) if args.quick else CANDIDATES)
        write_json(results / "stage1_decision.json", decision)
        logger.info("stage 1 decision: %s", decision["chosen"])
    if args.stage == 2:
        run_stage2(results, work, args.quick, args.methods, args.seeds or STAGE2_SEEDS)
    if args.stage == 3:
        run_stage3(results, work, args.quick, args.arms, args.seeds or STAGE3_SEEDS)
    if args.report:
        write_report(results, Path(args.report), (QUICK,) if args.quick else CANDIDATES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
