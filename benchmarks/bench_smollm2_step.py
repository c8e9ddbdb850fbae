"""Step time of MEDS and Cliff relative to plain GRPO on SmolLM2-135M-Instruct with 256-token completions (CPU).

    PYTHONPATH=src python benchmarks/bench_smollm2_step.py [--steps 2] [--rounds 2] [--completion_length 256] [--output F]

Five runs in one process, in this order, each from the same converted checkpoint
(``hf_meds_cliff.real_models.smollm2_135m``), the same data of the real-model world (``one_shot_boxed`` prompts),
seed and settings (2 prompts x 4 generations, temperature 0.7, ``min_new_tokens`` = ``max_completion_length`` so every
completion is ``--completion_length`` tokens long, learning rate 0, so every run generates the same completions):

- ``grpo``: ``GRPOTrainer``;
- ``meds-forward``: ``MEDSGRPOTrainer``, features from MEDS' own no-grad forward (TRL runs no old-log-prob forward
  when ``gradient_accumulation_steps`` is a multiple of ``steps_per_generation``: the default);
- ``grpo-spg2`` and ``meds-captured``: the same with ``steps_per_generation=2``, where TRL runs its old-log-prob
  forward and MEDS captures the features with hooks during it (the baseline pays that forward too);
- ``cliff``: ``CliffGRPOTrainer`` with the rule-based teacher (exact, no LLM latency).

The five runs are repeated ``--rounds`` times, interleaved (round 1: grpo, meds-forward, ..., cliff; round 2: the
same again), so that a change of the machine's load during the benchmark falls on every method alike.

A *generation cycle* is what TRL does per generation: one optimizer step on 8 completions by default, two steps
on the 16 completions generated once with ``steps_per_generation=2`` (MEDS captures its features in the first,
generating, step). Each run makes ``--steps`` cycles, and the first, which pays for lazy initialisation, is not
counted. Reported: per method the median cycle time (the sum of TRL's ``step_time`` over the cycle's steps) over
every round's counted cycles; per pair the ratio of those medians and each round's own ratio; and what the step is made of
(MEDS' ``time_features_s``/``time_clustering_s``, Cliff's judge wall time). ``--output`` writes it all as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run(method: str, model_path: str, dataset, cli, output_root: str) -> dict:
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff import CliffConfig, CliffGRPOTrainer, MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.rewards import MathAnswerReward

    spg = 2 if method in ("grpo-spg2", "meds-captured") else None
    values = dict(  # noqa: C408 (keyword form reads as the config's fields)
        output_dir=os.path.join(output_root, method), use_cpu=True, bf16=False, seed=0,
        max_steps=cli.steps * (spg or 1),
        learning_rate=0.0, beta=0.0, temperature=0.7, per_device_train_batch_size=8, num_generations=4,
        max_completion_length=cli.completion_length, generation_kwargs={"min_new_tokens": cli.completion_length},
        logging_steps=1, report_to="none", save_strategy="no", dataloader_num_workers=0,
        gradient_checkpointing=False, steps_per_generation=spg,
    )  # fmt: skip
    trainer_class, config_class = {
        "grpo": (GRPOTrainer, GRPOConfig),
        "grpo-spg2": (GRPOTrainer, GRPOConfig),
        "meds-forward": (MEDSGRPOTrainer, MEDSConfig),
        "meds-captured": (MEDSGRPOTrainer, MEDSConfig),
        "cliff": (CliffGRPOTrainer, CliffConfig),
    }[method]
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    trainer = trainer_class(
        model=model_path, reward_funcs=[MathAnswerReward()], args=config_class(**values),
        train_dataset=dataset, processing_class=tokenizer,
    )  # fmt: skip
    trainer.train()
    if hasattr(trainer, "close_teacher"):
        trainer.close_teacher()
    logs = [r for r in trainer.state.log_history if "step_time" in r]
    per_cycle = spg or 1  # a generation cycle: TRL generates once, then takes `spg` optimizer steps on it
    cycles = [logs[i * per_cycle : (i + 1) * per_cycle] for i in range(len(logs) // per_cycle)]
    kept = cycles[1:]  # the first cycle pays for lazy initialisation
    cycle_times = [sum(r["step_time"] for r in cycle) for cycle in cycles]
    result = {"step_times": [round(r["step_time"], 2) for r in logs], "cycle_times": [round(s, 2) for s in cycle_times],
              "median_cycle_s": statistics.median(cycle_times[1:])}  # fmt: skip
    for key in ("meds/time_features_s", "meds/time_clustering_s", "cliff/judge_wall_time"):
        if any(key in r for cycle in kept for r in cycle):
            result[key] = statistics.median(sum(r.get(key, 0.0) for r in cycle) for cycle in kept)
    for key in ("meds/frac_with_feature", "completions/mean_length", "reward"):
        if key in kept[0][0]:
            result[key] = statistics.median(cycle[0][key] for cycle in kept)
    if method.startswith("meds"):
        result["feature_source"] = trainer._meds_last_feature_source
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=2,
        help="Generation cycles per run (the first is not counted); see above.",
    )
    parser.add_argument("--rounds", type=int, default=2, help="Interleaved repetitions of all the runs.")
    parser.add_argument("--completion_length", type=int, default=256)
    parser.add_argument(
        "--methods", nargs="+", default=["grpo", "meds-forward", "grpo-spg2", "meds-captured", "cliff"]
    )
    parser.add_argument("--output", default=None, help="Write the results as JSON here.")
    cli = parser.parse_args()
    if cli.steps < 2 or cli.rounds < 1:
        parser.error(
            f"--steps {cli.steps} must be >= 2 (the first step is not counted) and --rounds {cli.rounds} >= 1"
        )
    from datasets import Dataset

    from hf_meds_cliff.data import build_prompt
    from hf_meds_cliff.real_models import smollm2_135m
    from hf_meds_cliff.real_world import real_world_rows

    model_path = str(smollm2_135m())
    rows = real_world_rows("train", 64)
    dataset = Dataset.from_list(
        [{"prompt": build_prompt(r["problem"], "one_shot_boxed"), "answer": r["answer"],
          "problem_id": r["problem_id"]} for r in rows]
    )  # fmt: skip
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as output_root:
        for index in range(cli.rounds):
            results = {}
            for method in cli.methods:
                results[method] = run(method, model_path, dataset, cli, os.path.join(output_root, str(index)))
                print(f"round {index + 1}", method, json.dumps(results[method]), flush=True)
            rounds.append(results)
    methods = {
        method: {
            "median_cycle_s": statistics.median(s for r in rounds for s in r[method]["cycle_times"][1:]),
            **{key: statistics.median(r[method][key] for r in rounds) for key in rounds[0][method]
               if key not in ("step_times", "cycle_times", "median_cycle_s", "feature_source")},
            "feature_source": rounds[0][method].get("feature_source"),
        }
        for method in cli.methods
    }  # fmt: skip
    ratios = {}
    for method, baseline in (("meds-forward", "grpo"), ("cliff", "grpo"), ("meds-captured", "grpo-spg2")):
        if method in methods and baseline in methods:
            ratios[f"{method}/{baseline}"] = {
                "ratio_of_medians": methods[method]["median_cycle_s"] / methods[baseline]["median_cycle_s"],
                "per_round": [r[method]["median_cycle_s"] / r[baseline]["median_cycle_s"] for r in rounds],
            }
    report = {"methods": methods, "ratios": ratios, "rounds": rounds, "settings": vars(cli)}
    print(json.dumps({"methods": methods, "ratios": ratios}, indent=2))
    if cli.output:
        with open(cli.output, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
