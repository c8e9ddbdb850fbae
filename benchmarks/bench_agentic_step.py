"""Step time of Cliff and MEDS relative to GRPO on tool-calling rollouts, against the same ratios on single-turn ones.

    python benchmarks/bench_agentic_step.py --output docs/agents_results/bench_agentic_step.json
    python benchmarks/bench_agentic_step.py --quick      # a smaller run (CI smoke, under a minute)

The question is whether Cliff's and MEDS's work per step grows on multi-turn rollouts more than GRPO's does (the
unit split of every rollout, the tool mask, the final-turn answer search). Every trainer (GRPO, Cliff with the
rule teacher, MEDS) runs on the calculator world of :mod:`hf_meds_cliff.toy.agentic` with scripted generation
(``model.generate`` patched, as in TRL's tool tests): **multi-turn**, where each rollout calls the calculator's tools
(a group: a correct rollout, a wrong tool, a sentence misreading a tool result, wrong arguments), and
**single-turn**, the same group written out as prose without tools. Generation costs almost nothing, so the ratios
are upper bounds of the methods' relative overhead. Cliff's caches are off, so every step judges afresh.

Like for like: the single-turn prompt carries the multi-turn prompt's tool descriptions as its system message, so
both settings have prompts of the same length. The policy is a tiny Qwen3 over a small byte-level BPE tokenizer
trained here on the benchmark's own texts, with Qwen3's tool-calling chat template (on Qwen's 151k-token vocabulary
the LM head's loss over the vocabulary is all a step costs on CPU, and every ratio is 1 by construction).

Runs alternate (setting x method, repeated) so machine load drifts hit all; reported per setting and method, for
the process CPU time of each step (``cpu_time``: this run's own work, robust to other load on a shared machine) and
for TRL's wall-clock ``step_time`` (``wall_time``): the median over all steps but the first of each run; ``ratio`` = method / GRPO in the same
setting; ``overhead_s`` = method - GRPO in seconds; and ``multi_over_single`` = multi-turn ratio / single-turn ratio
(1.0: the same relative cost on agents as on single-turn rollouts).
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


def small_tool_tokenizer():
    """A byte-level BPE tokenizer (a few hundred tokens) trained on the benchmark's texts, with Qwen's special and
    tool tokens, Qwen3's tool-calling chat template and TRL's Qwen3 response template. Returns it and the system
    text of the multi-turn prompt (its tool descriptions)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import add_response_schema, qwen3_chat_template

    from hf_meds_cliff.toy.agentic import add, multiply, tool_tokenizer

    qwen = tool_tokenizer()
    user = [{"role": "user", "content": QUESTION}]
    with_tools = qwen.apply_chat_template(user, tools=[add, multiply], tokenize=False, add_generation_prompt=True)
    system = with_tools.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
    reply = [*user, {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {}}}]}, {"role": "tool", "name": "add", "content": "12"}]
    corpus = [with_tools, qwen.apply_chat_template(reply, tokenize=False, add_generation_prompt=True)]
    corpus += [turn for group in (scripts("multi"), scripts("single")) for turns in group for turn in turns]
    model = Tokenizer(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.ByteLevel()
    model.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    ))  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"])
    tokenizer.padding_side = "left"
    tokenizer.chat_template = qwen3_chat_template
    return add_response_schema(tokenizer), system


def build(method: str, setting: str, tokenizer, output_dir: str, args: argparse.Namespace):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from hf_meds_cliff.cliff import CliffConfig, CliffGRPOTrainer
    from hf_meds_cliff.meds import MEDSConfig, MEDSGRPOTrainer
    from hf_meds_cliff.toy.agentic import FinalAnswerReward, add, multiply, tiny_tool_policy

    rows = args.batch * (args.steps + 1)
    prompt = [{"role": "user", "content": QUESTION}]
    if setting == "single":  # the same length as the multi-turn prompt, whose system message lists the tools
        prompt = [{"role": "system", "content": args.system}, *prompt]
    dataset = Dataset.from_dict({"prompt": [prompt] * rows, "answer": ["36"] * rows})
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


class CpuStepTimes:
    """A ``TrainerCallback`` recording each step's process CPU time (all threads): on a shared machine, wall time
    also counts the time other processes held the cores; CPU time counts only this run's own work."""

    def __init__(self):
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.process_time()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.process_time() - self._start)

    def __getattr__(self, name):  # every other TrainerCallback event: nothing to do
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def run_once(method: str, setting: str, tokenizer, args: argparse.Namespace) -> tuple[list[float], list[float]]:
    from hf_meds_cliff.toy.agentic import ScriptedToolPolicy

    group = scripts(setting)
    policy = ScriptedToolPolicy(tokenizer, [turns for _ in range(args.batch // 4) for turns in group])
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = build(method, setting, tokenizer, output_dir, args)
        cpu = CpuStepTimes()
        trainer.add_callback(cpu)
        with patch.object(trainer.model, "generate", side_effect=policy):
            trainer.train()
        if method == "cliff":
            trainer.close_teacher()
    return [r["step_time"] for r in trainer.state.log_history if "step_time" in r][1:], cpu.times[1:]


def machine() -> dict:
    from hf_meds_cliff.machine import cpu_model_and_flags

    flags = sorted(cpu_model_and_flags()[1])
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


def summarise(times: dict, methods: tuple, settings: tuple) -> dict:
    """Per setting and method the median step time and its spread; ratios and overheads against GRPO."""
    medians = {s: {m: statistics.median(times[s][m]) for m in methods} for s in settings}
    ratios = {s: {m: medians[s][m] / medians[s]["grpo"] for m in ("cliff", "meds")} for s in settings}
    return {
        "step_s": {s: {m: {"median": medians[s][m], "n": len(times[s][m]), "min": min(times[s][m]),
                           "max": max(times[s][m])} for m in methods} for s in settings},  # fmt: skip
        "ratio_vs_grpo": ratios,
        "overhead_s": {s: {m: medians[s][m] - medians[s]["grpo"] for m in ("cliff", "meds")} for s in settings},
        "multi_over_single": {m: ratios["multi"][m] / ratios["single"][m] for m in ("cliff", "meds")},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="steps per run (the first is not timed)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="rollouts per step, a multiple of 4 (groups of 4)")
    parser.add_argument("--quick", action="store_true", help="3 steps, 1 repeat, batch 4")
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.batch = 3, 1, 4
    if args.steps < 2 or args.batch % 4:
        parser.error("--steps must be >= 2 and --batch a multiple of 4")
    tokenizer, args.system = small_tool_tokenizer()
    methods, settings = ("grpo", "cliff", "meds"), ("single", "multi")
    wall: dict[str, dict[str, list[float]]] = {s: {m: [] for m in methods} for s in settings}
    cpu: dict[str, dict[str, list[float]]] = {s: {m: [] for m in methods} for s in settings}
    start = time.perf_counter()
    for _ in range(args.repeats):
        for setting in settings:
            for method in methods:
                wall_times, cpu_times = run_once(method, setting, tokenizer, args)
                wall[setting][method].extend(wall_times)
                cpu[setting][method].extend(cpu_times)
    result = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": machine(),
        "setup": {"tokenizer": f"byte-level BPE, {len(tokenizer)} tokens", "batch": args.batch, "num_generations": 4, "steps": args.steps, "repeats": args.repeats,
                  "timed": "medians over steps 2..steps of every run (process CPU time; TRL's step_time)"},  # fmt: skip
        "cpu_time": summarise(cpu, methods, settings),
        "wall_time": summarise(wall, methods, settings),
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
