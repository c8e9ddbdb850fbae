"""Learning study (issue 22): first a regime in which GRPO itself generalises, then the methods in it.

    python studies/learning_study.py --stage 1                  # GRPO in every pre-registered candidate, 5 seeds
    python studies/learning_study.py --decide                   # apply the stage-1 rule (writes stage1_decision.json)
    python studies/learning_study.py --stage 2                  # the methods in the chosen regime, 8 seeds
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

Every run writes its JSON into ``--results_dir`` (default ``docs/learning_study_results/``) as soon as it ends, and
a re-run skips the runs whose file exists, so the study runs in parts. Work folders go to ``--output_dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_common  # this folder's shared module
from study_common import ALL_METHODS, answer_statistics, expected_distinct, pass_at_k_table, trainer_class

logger = logging.getLogger("learning_study")

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
    answers = sample_answers(
        model, tokenizer, problems, regime.heldout_samples, regime.max_completion_length, 10_000 + eval_seed
    )
    truths = [p.answer for p in problems]
    correct = [sum(a == t for a in group) for group, t in zip(answers, truths)]
    table = pass_at_k_table(correct, regime.heldout_samples, KS)
    return {
        **{f"pass@{k}": value for k, value in table.items()},
        **answer_statistics(answers, truths, traps_of(problems, world)),
    }


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


def method_config(method: str, regime: Regime, seed: int, output_dir: str):
    """Same budget for every method; DAPO without dynamic sampling (every method draws the same rollouts)."""
    shared = study_common.shared_training_kwargs(
        output_dir=output_dir, seed=seed, steps=regime.steps, learning_rate=regime.learning_rate,
        prompts_per_step=regime.prompts_per_step, num_generations=regime.num_generations,
        max_completion_length=regime.max_completion_length, warmup_steps=min(2, regime.steps),
        lr_scheduler_type=regime.lr_scheduler_type,
    )  # fmt: skip
    return study_common.method_config(method, shared)


def train_one(method: str, seed: int, regime: Regime, policy: str, work_dir: Path) -> dict:
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.toy.task import toy_rows

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    pool, heldout_problems = world_problems(regime)
    callback = CurveCallback(tokenizer, heldout_problems, pool, regime, seed, regime.world)
    trainer = trainer_class(method)(
        model=AutoModelForCausalLM.from_pretrained(policy),
        reward_funcs=study_common.reward_functions(method, regime.max_completion_length),
        args=method_config(method, regime, seed, str(work_dir / f"{regime.name}-{method}-seed{seed}")),
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
    return {
        "method": method,
        "seed": seed,
        "config": asdict(regime),
        "heldout": heldout(trainer.model, tokenizer, heldout_problems, regime, seed, regime.world),
        "curve": callback.curve,
        "probe": callback.probe,
        "history": history,
        "train_seconds": seconds,
        "train_cpu_seconds": cpu_seconds,
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stage", type=int, choices=(1, 2), default=None)
    parser.add_argument("--decide", action="store_true", help="Apply the stage-1 rule to the results.")
    parser.add_argument("--candidates", nargs="+", default=None, help="Stage 1: only these candidates.")
    parser.add_argument("--methods", nargs="+", choices=ALL_METHODS, default=list(ALL_METHODS))
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=list(STAGE2_SEEDS),
        help="Stage 2: these seeds, in this order (two processes can split them, e.g. 0 1 2 3 and 7 6 5 4).",
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
        run_stage2(results, work, args.quick, args.methods, args.seeds)
    if args.report:
        from learning_report import write_report

        write_report(results, Path(args.report), (QUICK,) if args.quick else CANDIDATES)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
