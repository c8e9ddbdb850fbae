"""Step time of Cliff (rule-based teacher) relative to plain GRPO on the toy world, measured in the same run.

    python benchmarks/bench_cliff_step.py                 # warmed-up toy policy (cached), 6 steps x 2 repeats
    python benchmarks/bench_cliff_step.py --steps 8 --repeats 3 --batch 64

Both trainers start from the same warmed-up policy, data order and seed, generate with the same settings, and
run alternately (GRPO, Cliff, GRPO, Cliff, ...) so machine load drifts hit both. Reported: the median of TRL's
``step_time`` over all steps but the first of each run (the first pays for lazy initialisation), the ratio
Cliff / GRPO, and the part of Cliff's step spent in the protocol (``cliff/judge_wall_time``: reference filter,
judging, caches; the token-advantage mapping is outside it). With the rule-based teacher the judge itself is
free, so the ratio measures the trainer's own overhead; an LLM teacher adds its latency on top (see the teacher
engineer's judging benchmark for concurrent vs sequential calls).
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
        "gradient_checkpointing": False,
        "seed": 0,
    }
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    common = {
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
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step of each run is not timed)")
    logging.basicConfig(level=logging.WARNING)
    import torch

    from hf_meds_cliff.toy import warmup_toy_model

    policy = args.policy or str(warmup_toy_model(seed=0))
    results = {"grpo": [], "cliff": []}
    for _ in range(args.repeats):
        for method in ("grpo", "cliff"):
            results[method].append(run_once(method, policy, args))

    grpo_steps = [t for r in results["grpo"] for t in r["step_times"]]
    cliff_steps = [t for r in results["cliff"] for t in r["step_times"]]
    judge = [t for r in results["cliff"] for t in r["judge_times"]]
    grpo, cliff = statistics.median(grpo_steps), statistics.median(cliff_steps)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, policy {policy}")
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
