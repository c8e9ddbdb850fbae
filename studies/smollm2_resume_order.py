"""Which prompts each resumed training of the mechanism study drew, against an uninterrupted run.

    python studies/smollm2_resume_order.py      # writes docs/real_model_results/mechanism_study/resume_order.json

The study's code (878bb60) trained with TRL's ``RepeatSampler``, which a trainer built for a resume starts at the
first epoch's order, and with dynamic sampling's extra rounds, whose order checkpoints did not keep then (both continue
across a resume since; ``hf_meds_cliff.sampling``). Its pool has 16 prompts at 2 a step, so an epoch is 8 steps and
every checkpoint (10, 20, 30) lies in a later epoch: from its first resumed step on, a resumed training could generate
for other prompts than an uninterrupted one.

For every results file this recomputes the prompts of every generation round twice, from the file alone (its
config's seed and batch shape, its ``training_segments`` and its logged ``dynamic_sampling/rounds``): as trained, and
as an uninterrupted run. The orders come from TRL's own ``RepeatSampler`` and from the library's own
``DynamicSamplingMixin._next_prompt_batch`` (each step draws one extra batch per round, the last one unused), not
from a re-implementation. For dynamic sampling the uninterrupted run is given the same rounds per step as the trained
one: the rounds a different prompt order would have needed are unknown. ``tests/test_smollm2_resume_order.py`` checks
the recomputation against the prompts a real resumed training generated for.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "real_model_results" / "mechanism_study"
OUTPUT_NAME = "resume_order.json"


def resume_steps(segments: list[dict]) -> list[int]:
    """The checkpoint steps the final training resumed from, in order: those after its last start from step 0 (an
    earlier start from step 0 was discarded with everything it trained).

    >>> resume_steps([{"resumed_from": None}, {"resumed_from": None}, {"resumed_from": "checkpoint-20"}])
    [20]
    """
    resumes: list[int] = []
    for segment in segments:
        origin = segment.get("resumed_from")
        if origin is None:
            resumes = []
            continue
        match = re.fullmatch(r"checkpoint-(\d+)", str(origin))
        if match is None:
            raise ValueError(f"training segment resumed from {origin!r}, not a checkpoint-N folder")
        resumes.append(int(match.group(1)))
    return resumes


def _check_shape(config: dict) -> None:
    for key, expected in (("steps_per_generation", 1), ("num_iterations", 1), ("gradient_accumulation_steps", 1)):
        if config.get(key, expected) != expected:
            raise ValueError(f"{key}={config.get(key)}: the recomputation covers one generation per step only")


def _segments(steps: int, resumes: list[int]) -> list[tuple[int, int]]:
    """``(first trained step - 1, last trained step)`` of each segment of the final training."""
    starts = [0, *resumes]
    return [(start, starts[i + 1] if i + 1 < len(starts) else steps) for i, start in enumerate(starts)]


def main_sampler_prompts(config: dict, pool: int, steps: int, resumes: list[int]) -> dict[int, list[int]]:
    """Step (1-based) -> the prompts (pool positions) TRL's sampler gave it, each segment with a new sampler, as a
    trainer built for that segment had; transformers skips a resumed epoch's trained steps by position."""
    from trl.trainer.utils import RepeatSampler

    _check_shape(config)
    generations = config["num_generations"]
    rows_per_step = config["per_device_train_batch_size"]
    prompts: dict[int, list[int]] = {}
    for start, end in _segments(steps, resumes):
        sampler = RepeatSampler(
            range(pool), mini_repeat_count=generations, batch_size=config["generation_batch_size"] // generations,
            repeat_count=1, shuffle=config.get("shuffle_dataset", True), seed=config["seed"],
        )  # fmt: skip
        per_epoch = len(sampler) // rows_per_step
        epoch = start // per_epoch
        while epoch * per_epoch < end:
            rows = list(sampler)  # this sampler's next draw: the order the resumed trainer used for `epoch`
            for batch in range(per_epoch):
                step = epoch * per_epoch + batch + 1
                if start < step <= end:
                    chunk = rows[batch * rows_per_step : (batch + 1) * rows_per_step]
                    prompts[step] = chunk[::generations]
            epoch += 1
    return prompts


class _ExtraRounds:
    """The library's dynamic-sampling prompt order, drawn through its own method on a stand-in trainer (one
    process, the run's seed and pool)."""

    def __init__(self, seed: int, pool: int, generations: int):
        from hf_meds_cliff.dapo import DynamicSamplingMixin

        self._stand_in = type("StandIn", (DynamicSamplingMixin,), {})()
        self._stand_in.args = SimpleNamespace(seed=seed)
        self._stand_in.train_dataset = list(range(pool))
        self._stand_in.num_generations = generations
        self._stand_in.accelerator = SimpleNamespace(num_processes=1, process_index=0)

    def draw(self, rows: int) -> list[int]:
        return self._stand_in._next_prompt_batch(rows)[:: self._stand_in.num_generations]


def extra_round_prompts(
    config: dict, pool: int, steps: int, resumes: list[int], rounds: dict[int, int]
) -> dict[int, list[list[int]]]:
    """Step -> the prompts of its extra rounds (rounds 2, 3, ...), the order restarting at every resume as it did."""
    extra: dict[int, list[list[int]]] = {step: [] for step in range(1, steps + 1)}
    if not config.get("dynamic_sampling"):
        return extra
    for start, end in _segments(steps, resumes):
        order = _ExtraRounds(config["seed"], pool, config["num_generations"])
        for step in range(start + 1, end + 1):
            draws = [order.draw(config["per_device_train_batch_size"]) for _ in range(rounds.get(step, 1))]
            extra[step] = draws[:-1]  # after its last round a step draws once more, unused
    return extra


def round_prompts(
    config: dict, pool: int, steps: int, resumes: list[int], rounds: dict[int, int]
) -> dict[int, list[list[int]]]:
    """Step -> the prompts of each of its generation rounds (the main sampler's first)."""
    main = main_sampler_prompts(config, pool, steps, resumes)
    extra = extra_round_prompts(config, pool, steps, resumes, rounds)
    return {step: [main[step], *extra[step]] for step in range(1, steps + 1)}


def compare(record: dict) -> dict | None:
    """The file's prompts as trained and as an uninterrupted run, per step and per prompt; ``None`` without
    training (the base model's files)."""
    if "training_segments" not in record:
        return None
    config = record["config"]
    pool = len(record["pool"]["problem_ids"])
    steps = int(config["max_steps"])
    rounds = {int(h["step"]): int(h.get("dynamic_sampling/rounds", 1)) for h in record["history"] if "loss" in h}
    resumes = resume_steps(record["training_segments"])
    trained = round_prompts(config, pool, steps, resumes, rounds)
    uninterrupted = round_prompts(config, pool, steps, [], rounds)
    differing = [step for step in range(1, steps + 1) if trained[step] != uninterrupted[step]]

    def visits(prompts):
        counts = Counter(index for step in prompts.values() for batch in step for index in batch)
        return [counts.get(index, 0) for index in range(pool)]

    visits_trained, visits_uninterrupted = visits(trained), visits(uninterrupted)
    return {
        "resumed_from_steps": resumes,
        "steps": steps,
        "generation_rounds": sum(len(step) for step in trained.values()),
        "steps_with_other_prompts": len(differing),
        "first_step_with_other_prompts": differing[0] if differing else None,
        "prompts_with_other_visit_counts": sum(a != b for a, b in zip(visits_trained, visits_uninterrupted)),
        "problem_ids": record["pool"]["problem_ids"],
        "visits_trained": visits_trained,
        "visits_uninterrupted": visits_uninterrupted,
        "prompts_unvisited_trained": visits_trained.count(0),
        "rounds_trained": {str(step): trained[step] for step in trained},
    }


def recompute(runs: dict[str, dict[int, dict]]) -> dict:
    """Every trained file's comparison, from the study's loaded results (``runs[arm][seed]``, as
    ``smollm2_mechanism.load_results`` gives them)."""
    files = {
        f"{arm}-seed{seed}": compared
        for arm, by_seed in sorted(runs.items())
        for seed, record in sorted(by_seed.items())
        if (compared := compare(record)) is not None
    }
    return {"files": files}


def report_lines(recomputed: dict) -> list[str]:
    """The report's section on resumed trainings (one row per resumed file)."""
    resumed = {name: f for name, f in recomputed["files"].items() if f["resumed_from_steps"]}
    lines = ["## Prompts after a resume", ""]
    if not resumed:
        return [*lines, "No training resumed from a checkpoint: every run trained on the uninterrupted order.", ""]
    lines += [
        "The study's code started TRL's sampler and dynamic sampling's extra rounds afresh at a resume, so a resumed "
        "training could generate for other prompts than an uninterrupted one. Recomputed from each file "
        f"(`studies/smollm2_resume_order.py`, `{OUTPUT_NAME}`; for dynamic sampling the uninterrupted run is given "
        "the logged rounds per step). Every other trained file ran uninterrupted.",
        "",
        "| file | resumed from | steps with other prompts | first such step | prompts with other visit counts | "
        "visits per prompt as trained (uninterrupted) | prompts never visited |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, f in resumed.items():
        trained, straight = f["visits_trained"], f["visits_uninterrupted"]
        lines.append(
            f"| `{name}` | {', '.join(f'`checkpoint-{s}`' for s in f['resumed_from_steps'])} | "
            f"{f['steps_with_other_prompts']} of {f['steps']} | {f['first_step_with_other_prompts']} | "
            f"{f['prompts_with_other_visit_counts']} of {len(trained)} | {min(trained)}–{max(trained)} "
            f"({min(straight)}–{max(straight)}) | {f['prompts_unvisited_trained']} |"
        )
    return [*lines, ""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(RESULTS), help="folder of the study's results files")
    parser.add_argument("--out", default=None, help=f"default <results>/{OUTPUT_NAME}")
    args = parser.parse_args(argv)
    results = Path(args.results)
    out = Path(args.out) if args.out else results / OUTPUT_NAME
    import smollm2_study  # the provenance helper (machine, versions, command) of the studies
    from smollm2_mechanism import load_results  # (imports this module: loaded here, not at the top)

    from hf_meds_cliff.checkpointing import write_json_atomically

    recomputed = {**recompute(load_results(results)[0]), **smollm2_study.provenance(sys.argv)}
    write_json_atomically(out, recomputed, indent=1)
    print("\n".join(report_lines(recomputed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
