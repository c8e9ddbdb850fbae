"""Step time of Cliff (rule-based teacher) relative to plain GRPO on the toy world, measured in the same run.

    python benchmarks/bench_cliff_step.py                      # warmed-up toy policy (cached), real generation
    python benchmarks/bench_cliff_step.py --rollouts scripted  # any policy; generation replaced by scripted rollouts

Both trainers start from the same policy, data order and seed and run alternately (GRPO, Cliff, GRPO, Cliff, ...)
so machine load drifts hit both. Reported: the median of TRL's ``step_time`` over all steps but the first of each
run (the first pays for lazy initialisation), the ratio Cliff / GRPO, and the part of Cliff's step spent in the
protocol (``cliff/judge_wall_time``: reference filter, judging, caches; the token-advantage mapping is outside it).

``--rollouts scripted`` replaces generation by a deterministic ``rollout_func`` (the same for both trainers): each
group of a prompt mixes the worked solution with copies that go wrong at a random step, and some groups are all
correct, like a half-trained policy. Generation then costs almost nothing, so the ratio is an upper bound of
Cliff's relative overhead (real generation adds the same time to both). With the rule-based teacher the judge is
free; an LLM teacher adds its latency on top (``benchmarks/`` has the judging concurrency benchmark).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class ScriptedRollouts:
    """Deterministic rollouts: per group, the worked solution or a copy wrong from a random step (seeded by the
    question and the row), every fourth group all correct. Row ``r`` of the global batch is member
    ``r % num_generations`` of its group, so results do not depend on the number of processes."""

    def __init__(self, num_generations: int):
        self.num_generations = num_generations

    def completion(self, question: str, row: int) -> str:
        import random

        from hf_meds_cliff.toy import parse_question

        problem = parse_question(question)
        group, member = divmod(row, self.num_generations)
        rng = random.Random(f"{question}|{member}")
        if group % 4 == 3 or rng.random() < 0.5:
            return problem.solution
        wrong_step = rng.randrange(len(problem.operations))
        value, parts = problem.first_operand, []
        for index, (op, right) in enumerate(problem.operations):
            result = {"+": value + right, "-": value - right, "*": value * right}[op] + int(
                index == wrong_step
            )
            parts.append(f"{value} {op} {right} = {result}.")
            value = result
        return " ".join([*parts, f"The answer is \\boxed{{{value}}}."])

    def __call__(self, prompts, trainer):
        tokenizer = trainer.processing_class
        offset = trainer.accelerator.process_index * len(prompts)
        prompt_ids, completion_ids = [], []
        for index, prompt in enumerate(prompts):
            text = self.completion(prompt[-1]["content"], offset + index)
            prompt_ids.append(
                list(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"])
            )
            completion_ids.append(tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id])
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": [[0.0] * len(ids) for ids in completion_ids],
        }


def fresh_toy_policy(folder: str) -> str:
    """An untrained toy model + tokenizer saved to ``folder`` (enough when rollouts are scripted)."""
    from hf_meds_cliff.toy import build_toy_model, build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    build_toy_model(tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build(method: str, policy: str, output_dir: str, args: argparse.Namespace):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer
    from hf_meds_cliff.rewards import MathAnswerReward
    from hf_meds_cliff.toy import make_toy_dataset

    settings = {
        "output_dir": output_dir,
        "max_steps": args.steps,
        "per_device_train_batch_size": args.batch,
        "num_generations": args.num_generations,
        "max_completion_length": 64,
        "temperature": 1.0,
        "learning_rate": 1e-4,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": [],
        "bf16": False,
        "use_cpu": True,
        "activation_checkpointing": False,
        "seed": 0,
    }
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    scripted = {"rollout_func": ScriptedRollouts(args.num_generations)} if args.rollouts == "scripted" else {}
    common = {
        **scripted,
        "model": AutoModelForCausalLM.from_pretrained(policy),
        "reward_funcs": [MathAnswerReward()],
        "train_dataset": make_toy_dataset("train", 1024, seed=0),
        "processing_class": tokenizer,
    }
    if method == "grpo":
        return GRPOTrainer(args=GRPOConfig(**settings), **common)
    return CliffGRPOTrainer(args=CliffConfig(**settings, cliff_teacher="rule"), **common)


def run_once(method: str, policy: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = build(method, policy, output_dir, args)
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        if method == "cliff":
            trainer.close_teacher()
    history = trainer.state.log_history
    steps = [r["step_time"] for r in history if "step_time" in r][1:]
    judge = [r["cliff/judge_wall_time"] for r in history if r.get("cliff/judge_wall_time") is not None][1:]
    calls = sum(r.get("cliff/judge_calls", 0) for r in history)
    return {"step_times": steps, "judge_times": judge, "judge_calls": calls, "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--batch", type=int, default=32, help="rollouts per step (per_device_train_batch_size)"
    )
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument(
        "--policy", default=None, help="policy folder (default: the cached warmed-up toy policy)"
    )
    parser.add_argument(
        "--rollouts",
        choices=["generate", "scripted"],
        default="generate",
        help="generate with the policy, or use scripted rollouts (upper bound of the overhead; see above)",
    )
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step of each run is not timed)")
    logging.basicConfig(level=logging.WARNING)
    import torch

    from hf_meds_cliff.toy import warmup_toy_model

    if args.policy:
        policy = args.policy
    elif args.rollouts == "scripted":
        policy = fresh_toy_policy(tempfile.mkdtemp(prefix="cliff-bench-policy-"))
    else:
        policy = str(warmup_toy_model(seed=0))
    results = {"grpo": [], "cliff": []}
    for _ in range(args.repeats):
        for method in ("grpo", "cliff"):
            results[method].append(run_once(method, policy, args))

    grpo_steps = [t for r in results["grpo"] for t in r["step_times"]]
    cliff_steps = [t for r in results["cliff"] for t in r["step_times"]]
    judge = [t for r in results["cliff"] for t in r["judge_times"]]
    grpo, cliff = statistics.median(grpo_steps), statistics.median(cliff_steps)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, policy {policy}, rollouts {args.rollouts}"
    )
    print(f"setup: {args.batch} rollouts/step ({args.batch // args.num_generations} prompts x {args.num_generations}),"
          f" {args.steps} steps x {args.repeats} repeats, medians over steps 2..{args.steps}")  # fmt: skip
    print(
        f"GRPO  step time: median {grpo:.3f} s  (n={len(grpo_steps)}, min {min(grpo_steps):.3f}, max {max(grpo_steps):.3f})"
    )
    print(
        f"Cliff step time: median {cliff:.3f} s  (n={len(cliff_steps)}, min {min(cliff_steps):.3f}, max {max(cliff_steps):.3f})"
    )
    print(f"Cliff protocol (judge_wall_time): median {statistics.median(judge) * 1000:.1f} ms per step, "
          f"{sum(r['judge_calls'] for r in results['cliff']):.0f} judge calls in all runs")  # fmt: skip
    print(f"ratio Cliff / GRPO step time: {cliff / grpo:.3f}")


if __name__ == "__main__":
    main()
