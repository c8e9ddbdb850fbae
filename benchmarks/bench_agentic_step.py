"""Step time of Cliff and MEDS relative to GRPO on tool-calling rollouts, against the same ratios on single-turn ones.

    python benchmarks/bench_agentic_step.py --output docs/agents_results/bench_agentic_step.json
    python benchmarks/bench_agentic_step.py --quick      # a smaller run (CI smoke)

The question is whether Cliff's and MEDS's work per step grows on multi-turn rollouts more than GRPO's does (the
unit split of every rollout, the tool mask, the final-turn answer search). Every trainer (GRPO, Cliff with the
rule teacher, MEDS) runs on the calculator world of :mod:`hf_meds_cliff.toy.agentic` with scripted generation
(``model.generate`` patched, as in TRL's tool tests): **multi-turn**, where each rollout calls the calculator's tools
(a group: a correct rollout, a wrong tool, a sentence misreading a tool result, wrong arguments), and
**single-turn**, the same group written out as prose without tools. Generation costs almost nothing, so the ratios
are upper bounds of the methods' relative overhead. Cliff's caches are off, so every step judges afresh.

Runs alternate (setting x method, repeated) so machine load drifts hit all; reported per setting and method: the
median of TRL's ``step_time`` over all steps but the first of each run; ``ratio`` = method / GRPO in the same
setting; and ``multi_over_single`` = multi-turn ratio / single-turn ratio (1.0: no extra relative cost on agents).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from unittest.mock import patch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

QUESTION = "Compute (7 + 5) * 3."


def scripts(setting: str) -> list[list[str]]:
    """One group of four rollouts of :data:`QUESTION`, multi-turn (tool calls) or single-turn (prose)."""
    from hf_meds_cliff.toy.agentic import tool_call_text

    if setting == "single":
        return [
            ["7 + 5 = 12. 12 * 3 = 36. The answer is \\boxed{36}."],
            ["7 * 5 = 35. The answer is \\boxed{35}."],
            ["7 + 5 = 13. 13 * 3 = 39. The answer is \\boxed{39}."],
            ["7 + 5 = 12. 12 * 4 = 48. The answer is \\boxed{48}."],
        ]
    return [
        [tool_call_text("add", a=7, b=5), "7 + 5 = 12. " + tool_call_text("multiply", a=12, b=3),
         "The answer is \\boxed{36}."],
        [tool_call_text("divide", a=7, b=5), "The answer is \\boxed{1}."],
        [tool_call_text("add", a=7, b=5), "7 + 5 = 13. " + tool_call_text("multiply", a=13, b=3),
         "The answer is \\boxed{39}."],
        [tool_call_text("add", a=7, b=5), "7 + 5 = 12. " + tool_call_text("multiply", a=12, b=4),
         "The answer is \\boxed{48}."],
    ]  # fmt: skip


def build(method: str, setting: str, tokenizer, output_dir: str, args: argparse.Namespace):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff.cliff import CliffConfig, CliffGRPOTrainer
    from hf_meds_cliff.meds import MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.toy.agentic import FinalAnswerReward, add, multiply, tiny_tool_policy

    rows = args.batch * (args.steps + 1)
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": QUESTION}]] * rows, "answer": ["36"] * rows})
    common = dict(
        output_dir=output_dir, per_device_train_batch_size=args.batch, num_generations=4, max_steps=args.steps,
        report_to="none", use_cpu=True, bf16=False, max_completion_length=256, logging_steps=1, save_strategy="no",
        seed=0, disable_tqdm=True,
    )  # fmt: skip
    config, trainer_class = {
        "grpo": (GRPOConfig(**common), GRPOTrainer),
        "cliff": (CliffConfig(**common, cliff_teacher="rule", cliff_reference_cache=False,
                              cliff_judgment_cache=False), CliffGRPOTrainer),
        "meds": (MEDSConfig(**common), MEDSGRPOTrainer),
    }[method]  # fmt: skip
    tools = {"tools": [add, multiply]} if setting == "multi" else {}
    return trainer_class(
        model=tiny_tool_policy(tokenizer), processing_class=tokenizer, reward_funcs=[FinalAnswerReward()],
        args=config, train_dataset=dataset, **tools,
    )  # fmt: skip


def run_once(method: str, setting: str, tokenizer, args: argparse.Namespace) -> list[float]:
    from hf_meds_cliff.toy.agentic import ScriptedToolPolicy

    group = scripts(setting)
    policy = ScriptedToolPolicy(tokenizer, [turns for _ in range(args.batch // 4) for turns in group])
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = build(method, setting, tokenizer, output_dir, args)
        with patch.object(trainer.model, "generate", side_effect=policy):
            trainer.train()
        if method == "cliff":
            trainer.close_teacher()
    return [r["step_time"] for r in trainer.state.log_history if "step_time" in r][1:]


def machine() -> dict:
    flags = []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = sorted(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    import torch
    import transformers
    import trl

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_flags": [f for f in flags if f.startswith(("avx", "sse4", "fma", "amx"))],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "trl": trl.__version__,
        "transformers": transformers.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5, help="steps per run (the first is not timed)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8, help="rollouts per step, a multiple of 4 (groups of 4)")
    parser.add_argument("--quick", action="store_true", help="3 steps, 1 repeat, batch 4")
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.batch = 3, 1, 4
    if args.steps < 2 or args.batch % 4:
        parser.error("--steps must be >= 2 and --batch a multiple of 4")
    from hf_meds_cliff.toy.agentic import tool_tokenizer

    tokenizer = tool_tokenizer()
    methods, settings = ("grpo", "cliff", "meds"), ("single", "multi")
    times: dict[str, dict[str, list[float]]] = {s: {m: [] for m in methods} for s in settings}
    start = time.perf_counter()
    for _ in range(args.repeats):
        for setting in settings:
            for method in methods:
                times[setting][method].extend(run_once(method, setting, tokenizer, args))
    medians = {s: {m: statistics.median(times[s][m]) for m in methods} for s in settings}
    ratios = {s: {m: medians[s][m] / medians[s]["grpo"] for m in ("cliff", "meds")} for s in settings}
    result = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": machine(),
        "setup": {"batch": args.batch, "num_generations": 4, "steps": args.steps, "repeats": args.repeats,
                  "timed": "median of TRL's step_time over steps 2..steps of every run"},  # fmt: skip
        "step_time_s": {s: {m: {"median": medians[s][m], "n": len(times[s][m]), "min": min(times[s][m]),
                                "max": max(times[s][m])} for m in methods} for s in settings},  # fmt: skip
        "ratio_vs_grpo": ratios,
        "multi_over_single": {m: ratios["multi"][m] / ratios["single"][m] for m in ("cliff", "meds")},
        "wall_s": time.perf_counter() - start,
    }
    print(json.dumps(result, indent=2))
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
