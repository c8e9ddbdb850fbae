"""``hf-meds-cliff preflight``: can MEDS or Cliff act in a run you are about to launch? No model is loaded.

Reads a recipe (``--config``, with any training flag after it, exactly as the training command would) and its
training dataset, and prints per method whether it can act and why:

- MEDS: how often each prompt is memorised again and how many wrong rollouts it holds then
  (:func:`hf_meds_cliff.meds.preflight.estimate_meds_visits`), the same estimate the trainer logs as
  ``meds/preflight/*`` when training starts;
- Cliff: whether TRL's options keep its split per token (:func:`hf_meds_cliff.cliff.splits.sequence_level_warning`),
  and what it asks of the teacher per generation batch and per optimizer step: judge calls and tokens
  (:func:`hf_meds_cliff.cliff.splits.cliff_teacher_load`).

::

    hf-meds-cliff preflight meds --config recipes/meds_qwen3_1.7b.yaml --num_processes 8
    hf-meds-cliff preflight cliff --config recipes/cliff_qwen3_4b.yaml --num_processes 6 --mixed_fraction 0.4
    hf-meds-cliff preflight meds                       # the toy recipe

What cannot be known before generating (the share of groups with both right and wrong rollouts, their pass rate)
is an assumption with a flag (``--mixed_fraction``, ``--pass_rate``); ``--json`` prints the numbers.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import PROG, UsageError, run_reporting_errors

METHODS = ("meds", "cliff", "grpo")

# These change nothing in the batch arithmetic; forcing them lets a GPU recipe be read on a laptop.
_READ_ANYWHERE = ["--bf16", "false", "--fp16", "false", "--use_cpu", "true", "--use_vllm", "false"]


def _explicit_keys(argv: Sequence[str]) -> set[str]:
    """Option names given in ``argv`` or in its ``--config`` YAML file."""
    import yaml

    keys = {item.split("=")[0].lstrip("-") for item in argv if item.startswith("--")}
    if "--config" in argv:
        path = argv[list(argv).index("--config") + 1]
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        keys |= set(loaded) if isinstance(loaded, dict) else set()
    return keys


def run_shape(training_args, explicit: set[str], num_processes: int, pool_size: int) -> dict[str, int]:
    """The run's batch arithmetic at ``num_processes``: prompts per generation batch, generation batches, optimizer
    steps, and optimizer steps per generation batch (as TRL's ``GRPOConfig`` derives them)."""
    from ..meds.preflight import training_generations

    per_device = training_args.per_device_train_batch_size
    num_generations = training_args.num_generations
    if "generation_batch_size" in explicit and training_args.generation_batch_size:
        generation_batch = training_args.generation_batch_size  # global, as given
        steps_per_generation = max(1, generation_batch // (per_device * num_processes))
    else:
        steps_per_generation = training_args.steps_per_generation or training_args.gradient_accumulation_steps
        generation_batch = per_device * num_processes * steps_per_generation
    prompts = max(1, generation_batch // num_generations)
    iterations = getattr(training_args, "num_iterations", 1)
    micro_per_generation = steps_per_generation * iterations
    if training_args.max_steps and training_args.max_steps > 0:
        steps = training_args.max_steps
    else:  # epochs: every prompt once per epoch
        generations_per_epoch = math.ceil(pool_size / prompts)
        steps = math.ceil(
            training_args.num_train_epochs * generations_per_epoch * micro_per_generation
            / training_args.gradient_accumulation_steps
        )
    generations = training_generations(
        steps, training_args.gradient_accumulation_steps, steps_per_generation, iterations
    )
    return {
        "prompts_per_generation": prompts,
        "generations": generations,
        "steps": steps,
        "steps_per_generation_batch": micro_per_generation / training_args.gradient_accumulation_steps,
    }


def _pool_size(dataset, column: str | None) -> int:
    if column is not None and column in (getattr(dataset, "column_names", None) or ()):
        return len(set(dataset[column]))
    return len(dataset)


def _mean_problem_chars(dataset, rows: int = 256) -> float:
    from ..data import problem_text

    sample = [problem_text(dataset[i]["prompt"]) for i in range(min(rows, len(dataset)))]
    return sum(map(len, sample)) / len(sample) if sample else 0.0


def meds_report(training_args, shape: dict[str, int], pool_size: int, options) -> dict[str, Any]:
    from ..meds.preflight import estimate_meds_visits, meds_can_act, meds_preflight_message

    estimate = estimate_meds_visits(
        pool_size,
        shape["prompts_per_generation"],
        shape["generations"],
        training_args.num_generations,
        dynamic_sampling=bool(getattr(training_args, "dynamic_sampling", False)),
        mixed_fraction=options.mixed_fraction,
        pass_rate=options.pass_rate,
        min_cluster_size=getattr(training_args, "meds_min_cluster_size", 2),
        max_rows_per_key=getattr(training_args, "meds_max_rows_per_key", None),
    )
    return {
        "can_act": meds_can_act(estimate),
        "why": meds_preflight_message(estimate, steps=shape["steps"]),
        "estimate": asdict(estimate),
    }


def cliff_report(training_args, shape: dict[str, int], dataset, options) -> dict[str, Any]:
    from ..cliff.judging import build_judge_messages
    from ..cliff.splits import CHARS_PER_TOKEN, cliff_teacher_load, sequence_level_warning

    template_chars = sum(len(m["content"]) for m in build_judge_messages("", "", ["."]))
    judge_prompt_tokens = (template_chars + _mean_problem_chars(dataset)) / CHARS_PER_TOKEN
    teacher_outcome = getattr(training_args, "cliff_outcome", "split") == "teacher"
    load = cliff_teacher_load(
        shape["prompts_per_generation"],
        training_args.num_generations,
        mixed_fraction=options.mixed_fraction if options.mixed_fraction is not None else 0.5,
        pass_rate=options.pass_rate,
        self_consistency=getattr(training_args, "cliff_self_consistency", 1),
        judge_every_rollout=teacher_outcome,
        judge_prompt_tokens=judge_prompt_tokens,
        max_completion_length=training_args.max_completion_length,
        teacher_max_tokens=getattr(training_args, "cliff_teacher_max_tokens", 2048),
    )
    per_step = {key: value / shape["steps_per_generation_batch"] for key, value in load.items()}
    averaged = sequence_level_warning(training_args.importance_sampling_level, training_args.loss_type)
    split_credit = getattr(training_args, "cliff_split_credit", True)
    if teacher_outcome or not split_credit:
        why = (
            "This run asks the teacher for verdicts only (cliff_outcome='teacher' or cliff_split_credit=false): no "
            "prefix/suffix split reaches the loss, by design (the paper's GRPO-with-Teacher ablation)."
        )
    elif averaged is not None:
        why = averaged
    else:
        why = (
            "TRL's options keep Cliff's token advantages per token. Whether a split falls after token 0 depends on "
            "the rollouts: answers of one sentence always split at token 0 (watch cliff/split_at_token0_fraction; "
            "the trainer warns when nearly all do)."
        )
    return {
        "can_act": not teacher_outcome and split_credit and averaged is None,
        "why": why,
        "judge_prompt_tokens_estimate": judge_prompt_tokens,
        "per_generation_batch": load,
        "per_optimizer_step": per_step,
    }


def _print_report(shape, pool_size: int, num_processes: int, options, reports: dict) -> None:
    print(
        f"Run: {pool_size:,} prompts, {num_processes} process(es), {shape['prompts_per_generation']:,} prompts per "
        f"generation batch, {shape['generations']:,} generation batches over {shape['steps']:,} optimizer steps "
        f"(a generation batch every {shape['steps_per_generation_batch']:g} steps)."
    )
    if "meds" in reports:
        meds = reports["meds"]
        estimate = meds["estimate"]
        print(f"\nMEDS: {'can act' if meds['can_act'] else 'can barely act'}")
        print(f"  memorised visits per prompt   {estimate['visits_per_prompt']:.2f}")
        print(f"  prompts memorised twice+      {estimate['revisited_prompts']:.1f} of {pool_size:,}")
        print(f"  revisits among visits         {estimate['revisit_share']:.0%}")
        print(f"  wrong rollouts per visit      {estimate['wrong_rows_per_visit']:g}")
        print(f"  stored wrong rows at revisit  {estimate['rows_at_revisit']:.1f} (HDBSCAN needs {estimate['rows_to_split']})")
        print(f"  {meds['why']}")
    if "cliff" in reports:
        cliff = reports["cliff"]
        step = cliff["per_optimizer_step"]
        print(f"\nCliff: {'can act' if cliff['can_act'] else 'cannot split per token'}")
        print(f"  judge calls per step          {step['judge_calls']:,.0f}")
        print(f"  solve calls per step, at most {step['solve_calls_at_most']:,.0f} (fewer once references are cached)")
        print(
            f"  teacher tokens per step       at most {step['judge_prompt_tokens_at_most']:,.0f} in, "
            f"{step['judge_completion_tokens_at_most']:,.0f} out (judging)"
        )
        print(f"  {cliff['why']}")
    print(
        f"\nAssumed: {'every group mixed (an upper bound)' if options.mixed_fraction is None else f'{options.mixed_fraction:.0%} of groups mixed'}"
        f" for MEDS without dynamic sampling, {options.mixed_fraction or 0.5:.0%} for Cliff; {options.pass_rate:.0%} "
        "right in a mixed group; tokens as characters / 4."
    )


def run(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog or f"{PROG} preflight",
        description="Before launching: can MEDS or Cliff act in this recipe's run? Reads the recipe and its "
        "dataset, loads no model. Training flags after --config override the recipe, as in training.",
        allow_abbrev=False,
    )
    parser.add_argument("method", choices=METHODS, help="The training command the recipe is for (grpo: both methods).")
    parser.add_argument(
        "--num_processes", type=int, default=1, help="Processes of the launch (accelerate's --num_processes)."
    )
    parser.add_argument(
        "--mixed_fraction",
        type=float,
        default=None,
        help="Assumed share of groups with both right and wrong rollouts (default: MEDS without dynamic sampling "
        "takes 1.0, an upper bound; Cliff 0.5).",
    )
    parser.add_argument(
        "--pass_rate", type=float, default=0.5, help="Assumed share of right rollouts in a mixed group."
    )
    parser.add_argument("--json", action="store_true", help="Print the numbers as JSON.")
    options, training_argv = parser.parse_known_args(list(argv) if argv is not None else None)

    def body() -> int:
        if options.num_processes < 1:
            raise UsageError(f"--num_processes {options.num_processes} must be >= 1.")
        from ..script_utils import build_parser, load_train_dataset, with_toy_recipe

        if options.method == "cliff":
            from ..cliff.config import CliffConfig as config_cls
        else:  # MEDS's config reads GRPO and DAPO recipes too (a subclass of DAPOConfig)
            from ..meds.config import MEDSConfig as config_cls
        args = with_toy_recipe(training_argv, options.method)
        try:
            script_args, training_args, _ = build_parser(config_cls).parse_args_and_config(
                args=[*args, *_READ_ANYWHERE]
            )[:3]
        except ValueError as error:
            raise UsageError(str(error)) from error
        dataset = load_train_dataset(script_args)
        pool_size = _pool_size(dataset, getattr(training_args, "meds_prompt_id_column", "problem_id"))
        if pool_size < 1:
            raise UsageError("The training dataset is empty.")
        shape = run_shape(training_args, _explicit_keys(args), options.num_processes, pool_size)
        reports = {}
        if options.method in ("meds", "grpo"):
            reports["meds"] = meds_report(training_args, shape, pool_size, options)
        if options.method in ("cliff", "grpo"):
            reports["cliff"] = cliff_report(training_args, shape, dataset, options)
        if options.json:
            print(json.dumps({"pool_size": pool_size, "num_processes": options.num_processes, **shape, **reports}))
        else:
            _print_report(shape, pool_size, options.num_processes, options, reports)
        return 0

    return run_reporting_errors("preflight", body, usage=parser.format_usage)


if __name__ == "__main__":
    raise SystemExit(run())
