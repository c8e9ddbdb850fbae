"""Mechanism study: a toy world built so the papers' premises can hold, then GRPO/DAPO/MEDS/Cliff compared in it.

    python studies/mechanism_study.py                      # the full study (resumable), results in outputs/
    python studies/mechanism_study.py --report docs/mechanism_study.md   # also the report, plots and results
    python studies/mechanism_study.py --quick              # every method for one step (a smoke run, used by a test)

The world (``hf_meds_cliff.toy.traps``): the toy arithmetic task, whose warm-up taught a trapped solution (a carry
dropped, a sign dropped, brackets ignored) on 30 % of the problems that have a trap-eligible step, so the warm-up
policy holds each trap as a minority mode; a 6-layer toy Qwen3 (MEDS keeps the last 3 layers: 3-dimensional
features); a training pool of trap-eligible prompts small enough that each recurs ``steps * prompts_per_step /
pool_size`` times; and step-by-step solutions whose first mistake the exact rule-based teacher locates.

Premises are measured first, on the GRPO runs: over training, do the distinct wrong answers per prompt fall, does
the share of the most common wrong answer (and of the trap answer) rise, does the top-1 eigen ratio of the
answer-token features rise?

Methods, all with the same steps, prompts per step, rollouts per prompt, learning rate and schedule:

- ``grpo``: TRL's GRPO loss (symmetric clip 0.2), 0/1 correctness reward.
- ``dapo``: token-mean loss, clip-higher 0.28, soft overlong penalty; no dynamic sampling (it would give DAPO and
  MEDS more rollouts per step than the others, and on a small pool the policy solves it runs out of mixed groups).
- ``meds``: MEDS on the DAPO settings with the paper's alpha 0.1 / beta 0.2.
- ``meds_strong``: MEDS alpha 0.2 / beta 1.0 (chosen before any run from the saturation argument: with 0.1/0.2 the
  cap is reached at cluster size 7, so penalties of a large memory become equal and cancel under group scaling;
  beta 1.0 moves the cap beyond any cluster size this study can reach).
- ``cliff``: Cliff on the GRPO settings, exact rule teacher, lambda 0.
- ``grpo_teacher``: meant as the Cliff paper's "GRPO with Teacher" ablation: the same teacher protocol and group
  baseline, but every token of an incorrect rollout gets the same advantage (``cliff_split_credit=False``). Erratum
 : that ignores the teacher's output (GRPO minus the group's token mean b); the paper's ablation is
  ``CliffConfig(cliff_outcome="teacher")``.

Each run writes ``<output_dir>/runs/<method>-seed<seed>.json`` as soon as it ends (a ``seed`` field included), so an
interrupted study resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_common  # this folder's shared module
from study_common import (
    ALL_METHODS,
    answer_statistics,
    pass_at_k_table,
    shared_training_kwargs,
    trainer_class,
)

logger = logging.getLogger("mechanism_study")

METHODS = ALL_METHODS
KS = tuple(range(1, 17))


@dataclass
class StudySettings:
    steps: int = 30
    prompts_per_step: int = 8
    num_generations: int = 8
    learning_rate: float = 5e-4
    max_completion_length: int = 64
    pool_size: int = 24  # 30 steps x 8 prompts / 24 = each training prompt recurs 10 times
    probe_samples: int = 8
    probe_every: int = 10
    eval_problems: int = 64
    eval_samples: int = 16
    warmup: dict = field(
        default_factory=lambda: {
            "num_hidden_layers": 6,
            "trap_rate": 0.3,
            "max_steps": 2000,
            "time_budget_s": 3000.0,
        }
    )


QUICK = StudySettings(
    steps=1,
    prompts_per_step=2,
    num_generations=4,
    pool_size=4,
    probe_samples=2,
    probe_every=1,
    eval_problems=4,
    eval_samples=4,
    warmup={
        "num_hidden_layers": 6,
        "trap_rate": 0.3,
        "max_steps": 20,
        "time_budget_s": 600.0,
        "num_test_problems": 4,
        "num_samples": 2,
        "num_validation_problems": 4,
    },
)


def world_policy(settings: StudySettings) -> str:
    """The warmed-up policy of the mechanism world (cached by its settings, like the toy warm-up)."""
    from hf_meds_cliff.toy import ToyModelConfig, warmup_toy_model

    warmup = dict(settings.warmup)
    layers = warmup.pop("num_hidden_layers")
    return str(
        warmup_toy_model(model_config=ToyModelConfig(num_hidden_layers=layers), num_threads=1, **warmup)
    )


def world_rows(problems) -> dict:
    from hf_meds_cliff.toy.task import toy_rows
    from hf_meds_cliff.toy.traps import trapped_solution

    rows = toy_rows(problems)
    rows["trap_answer"] = [str(trapped_solution(p)[1]) for p in problems]
    return rows


def pool_and_test(settings: StudySettings):
    from hf_meds_cliff.toy.traps import trap_problems

    pool = trap_problems("train", settings.pool_size, seed=0, stream_name="mechanism-pool")
    test = trap_problems("test", settings.eval_problems, seed=0)
    return pool, test


# --------------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------------


def method_config(method: str, settings: StudySettings, seed: int, output_dir: str):
    """The config of ``method``; everything not named here is shared by all methods. DAPO without dynamic sampling:
    every method draws the same rollouts per step, and on a small pool that the policy learns to solve, dynamic
    sampling runs out of mixed groups."""
    shared = shared_training_kwargs(
        output_dir=output_dir,
        seed=seed,
        steps=settings.steps,
        learning_rate=settings.learning_rate,
        prompts_per_step=settings.prompts_per_step,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        warmup_steps=min(2, settings.steps),
    )
    # docs/mechanism_study.md was measured when MEDS shaped zero-variance groups (the old default): keep that.
    return study_common.method_config(method, shared, meds_extra=study_common.MEDS_EARLIER_DEFAULT)


def reward_functions(method: str, settings: StudySettings):
    return study_common.reward_functions(method, settings.max_completion_length)


# --------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------


@torch.no_grad()
def probe(model, tokenizer, problems, samples: int, max_new_tokens: int, seed: int) -> dict:
    """Sample ``samples`` completions per pool problem: reward, wrong-answer diversity, eigen ratios."""
    from hf_meds_cliff.meds.features import answer_logit_features, locate_answer_tokens, resolve_decoder
    from hf_meds_cliff.meds.shaping import top1_eigen_ratio
    from hf_meds_cliff.toy.traps import trapped_solution
    from hf_meds_cliff.toy.warmup import boxed_integer, chat_prompts, generate_completions

    was_training = model.training
    texts = generate_completions(
        model,
        tokenizer,
        [p.question for p in problems],
        num_samples=samples,
        do_sample=True,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    answers = [[boxed_integer(t) for t in group] for group in texts]
    truths = [p.answer for p in problems]
    traps = [trapped_solution(p)[1] for p in problems]
    prompt_ids = tokenizer(chat_prompts(tokenizer, [p.question for p in problems]), add_special_tokens=False)[
        "input_ids"
    ]
    flat_prompts = [prompt_ids[i] for i in range(len(problems)) for _ in range(samples)]
    flat_completions = [
        tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for g in texts
        for t in g
    ]
    wrong = torch.tensor([a != truths[i // samples] for i, a in enumerate(a for g in answers for a in g)])
    locations = locate_answer_tokens(flat_completions, tokenizer)
    num_layers = len(resolve_decoder(model).layers)
    features, has_feature, _ = answer_logit_features(
        model,
        flat_prompts,
        flat_completions,
        locations,
        layer_indices=list(range(num_layers)),
        pad_token_id=tokenizer.pad_token_id,
    )
    model.train(was_training)
    meds_layers = num_layers - num_layers // 2  # MEDS's default: the last half of the layers

    def eigen(rows, first_layer=0):
        usable = features[rows & has_feature][:, first_layer:]
        if len(usable) < 2:
            return math.nan
        usable = usable / usable.norm(dim=1, keepdim=True).clamp(
            min=1e-12
        )  # MEDS clusters L2-normalised rows
        return top1_eigen_ratio(usable)

    everything = torch.ones_like(wrong)
    return {
        "reward": sum(a == t for g, t in zip(answers, truths) for a in g) / (len(problems) * samples),
        **answer_statistics(answers, truths, traps),
        "eigen_ratio": eigen(everything),
        "eigen_ratio_wrong": eigen(wrong),
        "eigen_ratio_wrong_meds_layers": eigen(wrong, meds_layers),
        "feature_fraction": float(has_feature.float().mean()),
        # every prompt's wrong answers (None = no boxed answer), for the rarefaction null of the report
        "wrong_answers": [[a for a in g if a != t] for g, t in zip(answers, truths)],
    }


class ProbeCallback(TrainerCallback):
    """Probes the policy on the training pool at step 0 and every ``every`` steps."""

    def __init__(self, tokenizer, problems, settings: StudySettings, seed: int):
        self.tokenizer, self.problems, self.settings, self.seed = tokenizer, problems, settings, seed
        self.records: list[dict] = []

    def _probe(self, model, step: int) -> None:
        s = self.settings
        record = probe(
            model, self.tokenizer, self.problems, s.probe_samples, s.max_completion_length, self.seed
        )
        self.records.append({"step": step, **record})

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._probe(model, 0)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.settings.probe_every == 0 or state.global_step == state.max_steps:
            self._probe(model, state.global_step)


def evaluate(model, tokenizer, problems, settings: StudySettings, seed: int) -> dict:
    """pass@1..16 (unbiased estimator) and wrong-answer diversity on the held-out trap problems."""
    from hf_meds_cliff.toy.traps import trapped_solution
    from hf_meds_cliff.toy.warmup import boxed_integer, generate_completions

    texts = generate_completions(
        model,
        tokenizer,
        [p.question for p in problems],
        num_samples=settings.eval_samples,
        do_sample=True,
        max_new_tokens=settings.max_completion_length,
        seed=10_000 + seed,
    )
    answers = [[boxed_integer(t) for t in group] for group in texts]
    truths = [p.answer for p in problems]
    correct = [sum(a == t for a in group) for group, t in zip(answers, truths)]
    return {
        "pass@k": pass_at_k_table(correct, settings.eval_samples, KS),
        **answer_statistics(answers, truths, [trapped_solution(p)[1] for p in problems]),
    }


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------


def train_one(method: str, seed: int, settings: StudySettings, policy: str, output_dir: Path) -> dict:
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    pool, test = pool_and_test(settings)
    train = datasets.Dataset.from_dict(world_rows(pool))
    run_dir = output_dir / "work" / f"{method}-seed{seed}"
    callback = ProbeCallback(tokenizer, pool, settings, seed)
    trainer = trainer_class(method)(
        model=AutoModelForCausalLM.from_pretrained(policy),
        reward_funcs=reward_functions(method, settings),
        args=method_config(method, settings, seed, str(run_dir)),
        train_dataset=train,
        processing_class=tokenizer,
        callbacks=[callback],
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    if hasattr(trainer, "close_teacher"):
        trainer.close_teacher()
    history = [
        {
            k: v
            for k, v in record.items()
            if k in ("step", "reward") or k.startswith(("meds/", "cliff/", "dynamic_sampling/"))
        }
        for record in trainer.state.log_history
        if "reward" in record
    ]
    evaluation = evaluate(trainer.model, tokenizer, test, settings, seed)
    return {
        "method": method,
        "seed": seed,
        "train_seconds": seconds,
        "probe": callback.records,
        "history": history,
        "eval": evaluation,
    }


def initial_record(settings: StudySettings, policy: str, seed: int = 0) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(policy)
    pool, test = pool_and_test(settings)
    return {
        "method": "warm-up",
        "seed": seed,
        "probe": [
            {
                "step": 0,
                **probe(model, tokenizer, pool, settings.probe_samples, settings.max_completion_length, seed),
            }
        ],
        "eval": evaluate(model, tokenizer, test, settings, seed),
    }


def premise_check(settings: StudySettings, policy: str, output_dir: Path, seeds, reference_samples: int = 32):
    """GRPO runs whose probes keep every wrong answer, and a large warm-up sample as the no-collapse reference.

    Fewer wrong rollouts alone give fewer distinct wrong answers; the report compares each probe's distinct
    wrong answers with the number expected when the same number of wrong answers per prompt is drawn from the
    warm-up's own wrong answers (rarefaction). Fewer than that is error collapse.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = output_dir / "premise"
    folder.mkdir(parents=True, exist_ok=True)
    reference_path = folder / "warm-up-reference.json"
    if not reference_path.exists():
        tokenizer = AutoTokenizer.from_pretrained(policy)
        tokenizer.padding_side = "left"
        pool, _ = pool_and_test(settings)
        model = AutoModelForCausalLM.from_pretrained(policy)
        record = probe(model, tokenizer, pool, reference_samples, settings.max_completion_length, seed=12_345)
        reference_path.write_text(json.dumps({"samples": reference_samples, **record}, indent=1))
    for seed in seeds:
        path = folder / f"grpo-seed{seed}.json"
        if not path.exists():
            logger.info("premise check: GRPO seed %d with every wrong answer kept", seed)
            run = train_one("grpo", seed, settings, policy, folder)
            path.write_text(json.dumps({**run, "settings": asdict(settings)}, indent=1))


def load_runs(output_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((output_dir / "runs").glob("*.json"))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="One step per method (a smoke run).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--output_dir", default="outputs/mechanism_study")
    parser.add_argument(
        "--report", default=None, help="Write the markdown report here (docs/mechanism_study.md)."
    )
    parser.add_argument(
        "--report_only", action="store_true", help="Only (re)write the report from saved runs."
    )
    parser.add_argument(
        "--premise_check",
        type=int,
        nargs="*",
        default=None,
        help="Only run the premise check (GRPO with every wrong answer kept) for these seeds.",
    )
    parser.add_argument(
        "--policy",
        default=None,
        help="Start from this policy folder instead of the world's warm-up (smoke tests).",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is fastest on a shared box)."
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    settings = QUICK if args.quick else StudySettings()
    seeds = args.seeds[:1] if args.quick else args.seeds
    output_dir = Path(args.output_dir)
    (output_dir / "runs").mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    settings_path = output_dir / "settings.json"
    if settings_path.exists() and json.loads(settings_path.read_text()) != asdict(settings):
        raise ValueError(
            f"{output_dir} holds runs of other settings ({settings_path}); use another --output_dir."
        )
    settings_path.write_text(json.dumps(asdict(settings), indent=1))

    if args.premise_check is not None:
        premise_check(settings, args.policy or world_policy(settings), output_dir, args.premise_check)
    elif not args.report_only:
        policy = args.policy or world_policy(settings)
        initial_path = output_dir / "runs" / "warm-up-seed0.json"
        if not initial_path.exists():
            initial_path.write_text(json.dumps(initial_record(settings, policy), indent=1))
        for seed in seeds:  # seed-major: every finished seed gives a paired comparison of all methods
            for method in args.methods:
                path = output_dir / "runs" / f"{method}-seed{seed}.json"
                if path.exists():
                    logger.info("skipping %s seed %d (%s exists)", method, seed, path)
                    continue
                logger.info("training %s seed %d", method, seed)
                run = train_one(method, seed, settings, policy, output_dir)
                run["settings"] = asdict(settings)
                path.write_text(json.dumps(run, indent=1))
    if args.report:
        from mechanism_report import write_report

        premise = [json.loads(p.read_text()) for p in sorted((output_dir / "premise").glob("*.json"))]
        write_report(load_runs(output_dir), asdict(settings), Path(args.report), premise)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
