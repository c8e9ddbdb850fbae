"""The learning probe on a real pretrained model: does GRPO raise SmolLM2-135M-Instruct's held-out pass@1
on the real-model world within a CPU budget?

    python studies/smollm2_probe.py                      # the pre-registered probe (docs/real_model.md)
    python studies/smollm2_probe.py --max_steps 2 --test_problems 4 --num_samples 2 --output_dir /tmp/probe   # smoke

The rule, the settings and the verdict's statistics were written into ``docs/real_model.md`` ("The learning probe")
and committed before the first run. Steps, each resumable (a finished step is skipped when its output is there):

1. the data: ``real_world`` at ``DEFAULT_LEVEL``, 256 training problems; test problems ``--skip_test`` onwards of
   the test split (the first 16 chose the level, so they are left out);
2. the base model's samples on the test problems (``hf-meds-cliff eval``);
3. GRPO training (``hf-meds-cliff grpo``, TRL's defaults except the settings named here);
4. the trained model's samples, with the same evaluation seed and settings;
5. the result (``--result``): pass@1 and pass@8 of both, their difference with a 95 % percentile bootstrap CI over
   problems (paired), the verdict, the training curve (mean reward per step), the commit and the times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from study_common import bootstrap_difference, code_version, pass_at_k_matrix, utc_now

from hf_meds_cliff.real_world import DEFAULT_LEVEL, real_world_rows

PROMPT_FLAGS = [
    "--problem_column", "problem", "--answer_column", "answer", "--prompt_template", "one_shot_boxed",
]  # fmt: skip


def write_data(folder: Path, args) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    train = real_world_rows("train", args.train_problems, DEFAULT_LEVEL, seed=0)
    test = real_world_rows("test", args.skip_test + args.test_problems, DEFAULT_LEVEL, seed=0)[
        args.skip_test :
    ]
    paths = folder / "train.jsonl", folder / "test.jsonl"
    for path, rows in zip(paths, (train, test)):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return paths


def run(command: list[str], log: Path) -> None:
    print("+", " ".join(command), flush=True)
    with log.open("a") as handle:
        subprocess.run(command, check=True, stdout=handle, stderr=subprocess.STDOUT)


def evaluate(model: str, test: Path, folder: Path, args) -> Path:
    if not (folder / "summary.json").exists():
        run(
            [sys.executable, "-m", "hf_meds_cliff.cli", "eval", "--model_name_or_path", model, "--benchmarks", str(test),
             *PROMPT_FLAGS, "--id_column", "problem_id", "--num_samples", str(args.num_samples),
             "--temperature", "0.7", "--top_p", "1.0", "--max_new_tokens", "48", "--seed", str(args.eval_seed),
             "--output_dir", str(folder)],
            folder.parent / f"{folder.name}.log",
        )  # fmt: skip
    return folder / "samples.jsonl"


def correct_counts(samples: Path, num_samples: int) -> dict[str, int]:
    """Each problem's number of correct samples in an eval's ``samples.jsonl``; every problem must have ``num_samples``."""
    counts: dict[str, list[int]] = {}
    for line in samples.read_text().splitlines():
        record = json.loads(line)
        entry = counts.setdefault(str(record["problem_id"]), [0, 0])
        entry[0] += 1
        entry[1] += bool(record["correct"])
    short = {key: n for key, (n, _) in counts.items() if n != num_samples}
    if short:
        raise SystemExit(f"{samples}: problems without {num_samples} samples: {short}")
    return {key: correct for key, (_, correct) in counts.items()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output_dir", default="outputs/smollm2_probe")
    parser.add_argument("--result", default="docs/real_model_results/probe.json")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--train_problems", type=int, default=256)
    parser.add_argument("--skip_test", type=int, default=16)
    parser.add_argument("--test_problems", type=int, default=32)
    parser.add_argument("--num_samples", type=int, default=8)
    parser.add_argument("--eval_seed", type=int, default=0)
    parser.add_argument("--max_steps", type=int, default=30)
    parser.add_argument("--learning_rate", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    started = utc_now()
    out = Path(args.output_dir)
    train, test = write_data(out / "data", args)
    base_samples = evaluate(args.model, test, out / "eval-base", args)

    trained = out / "grpo"
    if not (trained / "model.safetensors").exists():
        run(
            [sys.executable, "-m", "hf_meds_cliff.cli", "grpo", "--model_name_or_path", args.model,
             "--dataset_name", str(train), *PROMPT_FLAGS, "--use_cpu", "true", "--bf16", "false",
             "--temperature", "0.7", "--per_device_train_batch_size", "16", "--num_generations", "8",
             "--max_completion_length", "48", "--beta", "0.0", "--learning_rate", str(args.learning_rate),
             "--max_steps", str(args.max_steps), "--seed", str(args.seed),
             "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none", "--output_dir", str(trained)],
            out / "grpo.log",
        )  # fmt: skip
    trained_samples = evaluate(str(trained), test, out / "eval-grpo", args)

    base = correct_counts(base_samples, args.num_samples)
    after = correct_counts(trained_samples, args.num_samples)
    if set(base) != set(after):
        raise SystemExit(f"The two evaluations cover different problems: {sorted(set(base) ^ set(after))}")
    problems = sorted(base)
    result: dict = {"probe": "smollm2-grpo", "level": DEFAULT_LEVEL, "settings": vars(args), **code_version()}
    for k in (1, args.num_samples):
        rows = [
            pass_at_k_matrix([[counts[p] for p in problems]], args.num_samples, k) for counts in (base, after)
        ]
        result[f"pass@{k}"] = {
            "base": float(rows[0].mean()),
            "grpo": float(rows[1].mean()),
            **bootstrap_difference(rows[1], rows[0]),
        }
    difference = result["pass@1"]
    result["verdict"] = (
        "raised" if difference["ci_low"] > 0 else "lowered" if difference["ci_high"] < 0 else "not shown"
    )
    metrics = trained / "metrics.jsonl"
    if metrics.exists():
        curve = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        result["training_reward"] = [row["reward"] for row in curve if "reward" in row]
        result["training_step_time_s"] = [row["step_time"] for row in curve if "step_time" in row]
    result["per_problem"] = {
        p: {"base": (args.num_samples, base[p]), "grpo": (args.num_samples, after[p])} for p in problems
    }
    result["started"], result["finished"] = started, utc_now()
    Path(args.result).parent.mkdir(parents=True, exist_ok=True)
    Path(args.result).write_text(json.dumps(result, indent=2) + "\n")
    print(
        json.dumps({key: result[key] for key in ("pass@1", f"pass@{args.num_samples}", "verdict")}, indent=2)
    )
    return result


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
