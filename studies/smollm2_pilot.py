"""The SmolLM2 pilot: a design in which MEDS and Cliff can act, checked before the study spends its compute.

Not a result: the pilot chooses the design (problem family, prompt, temperature, pool) by two manipulation checks,
on training-split problems only, and reports nothing about accuracy.

- **Cliff check**: at least 25 % of the judged wrong rollouts of mixed groups split after token 0 (their first
  mistake lies after the first sentence, so the correct prefix is not empty).
- **MEDS check**: MEDS differentiates (gives the wrong rollouts of one group different penalties) at least 5 % of the
  mixed groups that meet their prompt's stored wrong rollouts (their second visit on).

Stages (each writes one JSON file under ``docs/real_model_results/pilot/`` with its commit, machine and command):

    python studies/smollm2_pilot.py --screen DESIGN --problems 32      # base model, 16 samples a problem
    python studies/smollm2_pilot.py --train meds_ds --design DESIGN --steps 40
    python studies/smollm2_pilot.py --train cliff --design DESIGN --steps 12
    python studies/smollm2_pilot.py --summary                              # the checks, from the files

``--screen`` samples ``--samples`` completions per problem from SmolLM2-135M-Instruct (the design's temperature and
prompt) and records per problem its right count, and per wrong rollout its sentence count, its first mistake (the
exact rule teacher, :func:`hf_meds_cliff.toy.checker.first_mistake_index`) and the token where Cliff's suffix would
start. The pool of the training stages is the first ``--pool`` screened problems whose pass rate lies in
:data:`POOL_PASS_RANGE`. ``--train`` runs MEDS on DAPO with dynamic sampling (``meds_ds``) or Cliff with the exact rule
teacher (``cliff``) on that pool and records the mechanism's counts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_common  # noqa: E402  (this folder's modules)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "real_model_results" / "pilot"
POOL_PASS_RANGE = (0.15, 0.75)
CLIFF_CHECK = 0.25
MEDS_CHECK = 0.05


@dataclass(frozen=True)
class Design:
    """A problem family, its prompt and the sampling temperature."""

    name: str
    first: tuple[int, int]  # range of the first operand and of the first step's operand
    second: tuple[int, int]  # range of the second step's operand
    operators: tuple[str, ...]  # of the second step (the first is always +)
    shots: tuple[tuple[str, str], ...]
    temperature: float


TWO_STEP_SHOTS = (
    ("Compute (3 + 2) + 14.", "3 + 2 = 5. 5 + 14 = 19. The answer is \\boxed{19}."),
    ("Compute (1 + 4) + 23.", "1 + 4 = 5. 5 + 23 = 28. The answer is \\boxed{28}."),
)

DESIGNS = {
    design.name: design
    for design in (
        # an easy first step, a harder second one: first mistakes should fall on sentence 1 as often as on 0
        Design("easy_then_add", (1, 5), (10, 29), ("+",), TWO_STEP_SHOTS, 1.0),
        Design("easy_then_add_t07", (1, 5), (10, 29), ("+",), TWO_STEP_SHOTS, 0.7),
        Design("easy_then_addsub", (1, 5), (10, 29), ("+", "-"), TWO_STEP_SHOTS, 1.0),
    )
}


def design_problems(design: Design, count: int, seed: int = 0) -> list[dict]:
    """``count`` distinct training problems of the design ("Compute (a + b) op c."), in a seeded order, none of them
    a shot's question."""
    from hf_meds_cliff.toy.task import parse_question, problem_id

    rng = random.Random(f"{design.name}:{seed}")
    excluded = {question for question, _ in design.shots}
    seen, rows = set(), []
    while len(rows) < count:
        a, b = rng.randint(*design.first), rng.randint(*design.first)
        op, c = rng.choice(design.operators), rng.randint(*design.second)
        question = f"Compute ({a} + {b}) {op} {c}."
        if question in seen or question in excluded:
            continue
        seen.add(question)
        problem = parse_question(question)
        rows.append({"problem": question, "answer": str(problem.answer), "problem_id": problem_id(question)})
    return rows


def chat_prompt(design: Design, problem: str) -> list[dict[str, str]]:
    from hf_meds_cliff.data import BOX_INSTRUCTION

    messages = []
    for question, solution in design.shots:
        messages += [
            {"role": "user", "content": f"{question} {BOX_INSTRUCTION}"},
            {"role": "assistant", "content": solution},
        ]
    return messages + [{"role": "user", "content": f"{problem} {BOX_INSTRUCTION}"}]


def provenance() -> dict:
    from smollm2_study import machine

    return {**study_common.code_version(), "machine": machine(), "command": " ".join(["python", *sys.argv])}


def write(path: Path, record: dict) -> None:
    from hf_meds_cliff.checkpointing import write_json_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, record, indent=1)


# --------------------------------------------------------------------------------------------
# screening
# --------------------------------------------------------------------------------------------


def screen(design: Design, problems: int, samples: int, max_new_tokens: int, threads: int, start: int = 0) -> dict:
    """The base model on problems ``start + 1`` to ``start + problems`` of the design's training order (problem *i*
    sampled with seed *i - 1*)."""
    import torch

    from hf_meds_cliff.cliff.advantages import first_mistake_token_positions
    from hf_meds_cliff.evaluation.generation import TransformersBackend
    from hf_meds_cliff.evaluation.sampling import SamplingSettings
    from hf_meds_cliff.real_models import smollm2_135m
    from hf_meds_cliff.rewards import MathAnswerReward
    from hf_meds_cliff.sentences import split_sentences
    from hf_meds_cliff.toy.checker import first_mistake_index

    torch.set_num_threads(threads)
    started, origin = study_common.utc_now(), provenance()  # the code that runs, recorded before it runs
    model = str(smollm2_135m())
    backend = TransformersBackend(model, device="cpu", dtype="float32", batch_size=64)
    tokenizer = backend.tokenizer
    sampling = SamplingSettings(samples, design.temperature, 1.0, max_new_tokens)
    grade = MathAnswerReward()
    rows = design_problems(design, start + problems)[start:]
    per_problem = []
    clock = time.perf_counter()
    per_call = backend.problems_per_call(samples)
    for offset in range(0, len(rows), per_call):
        chunk = rows[offset : offset + per_call]
        seeds = [start + offset + i for i in range(len(chunk))]  # problem i of the order: seed i - 1
        outputs = backend.generate([chat_prompt(design, r["problem"]) for r in chunk], seeds, sampling)
        for row, group in zip(chunk, outputs):
            texts = [s.text for s in group]
            scores = grade(texts, answer=[row["answer"]] * len(texts))
            wrong = [(s, t) for s, t, score in zip(group, texts, scores) if score < 1.0]
            mistakes = [first_mistake_index(row["problem"], t) for _, t in wrong]
            ids = [tokenizer.encode(t, add_special_tokens=False) for _, t in wrong]
            tokens = first_mistake_token_positions(tokenizer, ids, [t for _, t in wrong], mistakes)
            per_problem.append(
                {
                    **row,
                    "right": sum(score >= 1.0 for score in scores),
                    "wrong": [
                        {"sentences": len(split_sentences(t)), "first_mistake": m, "split_token": int(k),
                         "truncated": bool(s.truncated)}
                        for (s, t), m, k in zip(wrong, mistakes, tokens)
                    ],  # fmt: skip
                    "example": texts[0][:200],
                }
            )
    return {
        "stage": "screen",
        "design": asdict(design),
        "first_problem": start + 1,
        "samples": samples,
        "max_new_tokens": max_new_tokens,
        "torch_threads": threads,
        "seconds": time.perf_counter() - clock,
        "started": started,
        "finished": study_common.utc_now(),
        "problems": per_problem,
        **origin,
    }


def screen_summary(record: dict) -> dict:
    """Pass rates, the pool, and the Cliff check on the base model's mixed groups."""
    samples = record["samples"]
    low, high = POOL_PASS_RANGE
    in_range = [p for p in record["problems"] if low <= p["right"] / samples <= high]
    mixed = [p for p in record["problems"] if 0 < p["right"] < samples]
    wrong = [w for p in mixed for w in p["wrong"] if not w["truncated"]]
    after = sum(w["split_token"] > 0 for w in wrong)
    return {
        "problems": len(record["problems"]),
        "in_pass_range": len(in_range),
        "mixed": len(mixed),
        "judged_wrong_rollouts_of_mixed_groups": len(wrong),
        "split_after_token0": after,
        "split_after_token0_share": after / len(wrong) if wrong else None,
        "first_mistake_sentences": dict(sorted(Counter(str(w["first_mistake"]) for w in wrong).items())),
        "sentences_per_wrong_rollout": dict(sorted(Counter(str(w["sentences"]) for w in wrong).items())),
    }


# --------------------------------------------------------------------------------------------
# pilot training
# --------------------------------------------------------------------------------------------


def pool(design_name: str, size: int) -> list[dict]:
    screens = [json.loads(path.read_text()) for path in RESULTS.glob(f"screen-{design_name}-*.json")]
    if not screens:
        raise SystemExit(f"no screen of {design_name}: run --screen {design_name} first")
    record = max(screens, key=lambda r: len(r["problems"]))  # the largest screen of the design
    low, high = POOL_PASS_RANGE
    chosen = [p for p in record["problems"] if low <= p["right"] / record["samples"] <= high][:size]
    if len(chosen) < size:
        raise SystemExit(f"the screen of {design_name} has only {len(chosen)} problems in {POOL_PASS_RANGE}; screen more")
    return chosen


def train(arm: str, design: Design, pool_size: int, steps: int, num_generations: int, threads: int, seed: int) -> dict:
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.real_models import smollm2_135m

    torch.set_num_threads(threads)
    origin = provenance()  # the code that runs, recorded before it runs
    rows = pool(design.name, pool_size)
    policy = str(smollm2_135m())
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    dataset = datasets.Dataset.from_dict(
        {
            "prompt": [chat_prompt(design, r["problem"]) for r in rows],
            "answer": [r["answer"] for r in rows],
            "problem_id": [r["problem_id"] for r in rows],
        }
    )
    output_dir = ROOT / "outputs" / "pilot" / f"{arm}-{design.name}"
    shared = study_common.shared_training_kwargs(
        output_dir=str(output_dir), seed=seed, steps=steps, learning_rate=1e-5, prompts_per_step=2,
        num_generations=num_generations, max_completion_length=64, warmup_steps=0, lr_scheduler_type="linear",
    )  # fmt: skip
    shared.update(temperature=design.temperature, top_p=1.0)
    method = "meds" if arm == "meds_ds" else "cliff"
    config = study_common.method_config(
        method, shared, dapo_extra={"dynamic_sampling": True, "dynamic_sampling_max_rounds": 40},
        meds_extra={"meds_alpha": 0.1, "meds_beta": 0.2},
    )  # fmt: skip
    trainer = study_common.trainer_class(method)(
        model=AutoModelForCausalLM.from_pretrained(policy, dtype=torch.float32),
        reward_funcs=study_common.reward_functions(method, 64, overlong=False), args=config, train_dataset=dataset,
        processing_class=tokenizer,
    )  # fmt: skip
    started, start = study_common.utc_now(), time.perf_counter()
    try:
        trainer.train()
    finally:
        if hasattr(trainer, "close_teacher"):
            trainer.close_teacher()
    record = {
        "stage": "train",
        "arm": arm,
        "design": asdict(design),
        "pool": [r["problem_id"] for r in rows],
        "steps": steps,
        "num_generations": num_generations,
        "seed": seed,
        "torch_threads": threads,
        "train_seconds": time.perf_counter() - start,
        "started": started,
        "finished": study_common.utc_now(),
        "history": [json.loads(json.dumps(r, default=str)) for r in trainer.state.log_history],
        **origin,
    }
    if arm == "meds_ds":
        record["meds_totals"] = dict(trainer.meds_totals)
        record["meds_preflight"] = asdict(trainer.meds_preflight) if trainer.meds_preflight else None
    return record


def train_summary(record: dict) -> dict:
    """The manipulation check of a training run, from its logged metrics (per-call means times calls per step)."""
    history = [r for r in record["history"] if "loss" in r]
    if record["arm"] == "meds_ds":
        totals = record["meds_totals"]
        revisited = totals.get("groups_revisited", 0)
        share = totals.get("groups_differentiated", 0) / revisited if revisited else None
        return {
            "check": "MEDS differentiates >= 5% of mixed groups from their second visit on",
            "groups_mixed": totals.get("groups_mixed", 0),
            "groups_revisited": revisited,
            "groups_differentiated": totals.get("groups_differentiated", 0),
            "differentiated_share_of_revisited": share,
            "met": share is not None and share >= MEDS_CHECK,
        }
    split = [(r["cliff/split_rollouts"], r["cliff/split_at_token0_fraction"]) for r in history
             if r.get("cliff/split_rollouts")]  # fmt: skip
    total = sum(n for n, _ in split)
    after = sum(n * (1.0 - share) for n, share in split)
    return {
        "check": "Cliff splits >= 25% of judged wrong rollouts after token 0",
        "wrong_rollouts_of_cliff_groups": total,
        "split_after_token0": round(after),
        "split_after_token0_share": after / total if total else None,
        "met": bool(total) and after / total >= CLIFF_CHECK,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screen", choices=sorted(DESIGNS))
    parser.add_argument("--train", choices=("meds_ds", "cliff"))
    parser.add_argument("--design", choices=sorted(DESIGNS))
    parser.add_argument("--summary", action="store_true")
    parser.add_argument("--problems", type=int, default=96)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--pool", type=int, default=48)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--num_generations", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.screen:
        record = screen(DESIGNS[args.screen], args.problems, args.samples, args.max_new_tokens, args.threads)
        record["summary"] = screen_summary(record)
        write(RESULTS / f"screen-{args.screen}-{args.problems}.json", record)
        print(json.dumps(record["summary"], indent=1))
    if args.train:
        record = train(args.train, DESIGNS[args.design], args.pool, args.steps, args.num_generations, args.threads,
                       args.seed)  # fmt: skip
        record["summary"] = train_summary(record)
        write(RESULTS / f"{args.train}-{args.design}.json", record)
        print(json.dumps(record["summary"], indent=1))
    if args.summary:
        for path in sorted(RESULTS.glob("*.json")):
            record = json.loads(path.read_text())
            print(path.name, json.dumps(record.get("summary"), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
