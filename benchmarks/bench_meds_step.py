"""Step time of MEDSGRPOTrainer against plain GRPOTrainer, same toy config, same run.

    python benchmarks/bench_meds_step.py [--steps 6] [--warmup 2] [--rounds 2]

Both trainers start from the same warmed-up toy policy with the same config and data; rounds
alternate GRPO and MEDS (fresh trainers each round) so machine-load drift hits both alike. The
per-step time is TRL's own ``step_time`` metric (generation, rewards, MEDS features and clustering,
loss and optimizer step), taken after ``--warmup`` steps; the medians over all rounds and their
ratio are printed, plus MEDS' own time split (``meds/time_features_s``, ``meds/time_clustering_s``).
With the default ``--learning_rate 0`` both runs generate identical completions, so the ratio is MEDS'
own overhead. The paper reports ≈ 1.06 (50 steps on GPUs); the target here is ≤ 1.05.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def exact_answer_reward(completions, answer, **kwargs):
    from hf_meds_cliff.data import completion_text
    from hf_meds_cliff.toy.warmup import boxed_integer

    return [1.0 if boxed_integer(completion_text(c)) == int(a) else 0.0 for c, a in zip(completions, answer)]


def run(method: str, policy, dataset, cli) -> tuple[list[float], dict[str, float]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff.meds.config import MEDSConfig
    from hf_meds_cliff.meds.trainer import MEDSGRPOTrainer

    values = {
        "output_dir": os.path.join(cli.output_dir, method),
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        "max_steps": cli.warmup + cli.steps,
        "learning_rate": cli.learning_rate,
        "per_device_train_batch_size": cli.batch_size,
        "num_generations": cli.num_generations,
        "max_completion_length": cli.max_completion_length,
        "beta": 0.0,
        "loss_type": "dapo",
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
    }
    tokenizer = AutoTokenizer.from_pretrained(policy)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(policy)
    if method == "meds":
        trainer_cls, args = MEDSGRPOTrainer, MEDSConfig(**values)
    else:
        trainer_cls, args = GRPOTrainer, GRPOConfig(**values)
    trainer = trainer_cls(
        model=model,
        reward_funcs=[exact_answer_reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    logs = [r for r in trainer.state.log_history if "step_time" in r]
    step_times = [r["step_time"] for r in logs[cli.warmup :]]
    parts = {}
    for key in (
        "meds/time_features_s",
        "meds/time_clustering_s",
        "meds/frac_penalized",
        "completions/mean_length",
    ):
        values_after = [r[key] for r in logs[cli.warmup :] if key in r]
        if values_after:
            parts[key] = statistics.mean(values_after)
    return step_times, parts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=6, help="timed steps per round and method")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of each run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating GRPO/MEDS rounds")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--num_generations", type=int, default=8)
    parser.add_argument("--max_completion_length", type=int, default=72)
    parser.add_argument(
        "--num_prompts",
        type=int,
        default=16,
        help="toy training prompts (16 = each recurs every 4 steps: memory hits)",
    )
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (default 1: on a busy 2-core box 2 OpenMP threads make the toy's tiny matmuls "
        "10-100x slower and the timings meaningless)",
    )  # fmt: skip
    parser.add_argument(
        "--learning_rate", type=float, default=0.0,
        help="0 (default) keeps both policies identical, so both trainers generate the very same completions and "
        "the ratio is MEDS' own overhead; with a positive rate the policies drift apart and completion lengths "
        "(hence generation time) differ between the methods",
    )  # fmt: skip
    parser.add_argument(
        "--policy", default=None, help="policy folder (default: the cached warmed-up toy policy)"
    )
    parser.add_argument("--output_dir", default="/tmp/bench_meds_step")
    cli = parser.parse_args()

    import torch

    from hf_meds_cliff.toy import make_toy_dataset, warmup_toy_model

    if cli.threads:
        torch.set_num_threads(cli.threads)
    policy = cli.policy or warmup_toy_model()
    dataset = make_toy_dataset("train", cli.num_prompts, seed=0)
    times: dict[str, list[float]] = {"grpo": [], "meds": []}
    lengths: dict[str, list[float]] = {"grpo": [], "meds": []}
    meds_parts: list[dict[str, float]] = []
    start = time.perf_counter()
    for round_index in range(cli.rounds):
        for method in ("grpo", "meds") if round_index % 2 == 0 else ("meds", "grpo"):
            step_times, parts = run(method, policy, dataset, cli)
            times[method].extend(step_times)
            lengths[method].append(parts.get("completions/mean_length", float("nan")))
            if method == "meds":
                meds_parts.append(parts)
            print(f"round {round_index} {method}: step times {[round(t, 3) for t in step_times]}", flush=True)
    grpo = statistics.median(times["grpo"])
    meds = statistics.median(times["meds"])
    print(
        f"\nconfig: batch {cli.batch_size} ({cli.batch_size // cli.num_generations} prompts x {cli.num_generations}), "
        f"max_completion_length {cli.max_completion_length}, {cli.rounds} rounds x {cli.steps} timed steps after "
        f"{cli.warmup} warm-up, learning rate {cli.learning_rate}, torch threads {torch.get_num_threads()}, "
        f"wall {time.perf_counter() - start:.0f} s"
    )
    print(f"mean completion length per round: grpo {lengths['grpo']}, meds {lengths['meds']}")
    print(f"GRPOTrainer median step time: {grpo:.3f} s  (n={len(times['grpo'])})")
    print(f"MEDSGRPOTrainer median step time: {meds:.3f} s  (n={len(times['meds'])})")
    for key in ("meds/time_features_s", "meds/time_clustering_s", "meds/frac_penalized"):
        values = [p[key] for p in meds_parts if key in p]
        if values:
            print(f"  {key}: mean {statistics.mean(values):.4f}")
    print(f"ratio MEDS / GRPO: {meds / grpo:.3f}")


if __name__ == "__main__":
    main()
