r"""The real-model world: arithmetic for SmolLM2-135M-Instruct, in the chat format it answers in.

Problems are the toy world's chains ("Compute 17 + 25.", "Compute (7 + 5) * 3."; :mod:`hf_meds_cliff.toy.task`), with
the toy world's split hash, so the rule-based Cliff teacher reads them and grades the sentences ("17 + 25 = 42.").
The prompt is the ``one_shot_boxed`` template (:func:`hf_meds_cliff.data.build_prompt`): one worked example turn,
"Compute 3 + 2. Put the final answer in \boxed{}." answered "3 + 2 = 5. The answer is \boxed{5}.", then the problem
with the same instruction. Asked zero-shot, SmolLM2-135M-Instruct wrote no box in 16 of 16 rollouts; after the
example it writes the toy world's sentence format. Correctness is :class:`hf_meds_cliff.rewards.MathAnswerReward`
(the last ``\boxed{}`` against the answer), as for any math dataset.

The difficulty is one of :data:`LEVELS`, chosen by :func:`choose_level` from measured base pass@1 and pass@8 (the rule
is in ``docs/real_model.md``, written before the measurement); :data:`DEFAULT_LEVEL` is the result.

CLI (writes ``train.jsonl`` and ``test.jsonl`` with columns ``problem``, ``answer``, ``problem_id``, ``solution``)::

    python -m hf_meds_cliff.real_world --output_dir data/smollm2-arith
    hf-meds-cliff grpo --model_name_or_path smollm2-135m --dataset_name data/smollm2-arith/train.jsonl \
        --problem_column problem --prompt_template one_shot_boxed ...
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from itertools import islice
from pathlib import Path

from .data import ONE_SHOT_QUESTION
from .toy.task import ToyTaskConfig, iter_problems, problem_id

__all__ = [
    "DEFAULT_LEVEL",
    "LEVELS",
    "PASS1_RANGE",
    "PASS8_RANGE",
    "choose_level",
    "real_world_rows",
    "write_real_world",
]

LEVELS: dict[str, ToyTaskConfig] = {
    "add9": ToyTaskConfig(min_steps=1, max_steps=1, min_operand=1, max_operand=9, operators=("+",), test_fraction=0.5),
    "addsub20": ToyTaskConfig(
        min_steps=1, max_steps=1, min_operand=1, max_operand=20, operators=("+", "-"), test_fraction=0.3
    ),
    "addsub99": ToyTaskConfig(
        min_steps=1, max_steps=1, min_operand=10, max_operand=99, operators=("+", "-"), test_fraction=0.3
    ),
    "chain2": ToyTaskConfig(min_steps=2, max_steps=2, min_operand=1, max_operand=20, test_fraction=0.3),
}
"""Difficulty levels, easiest first: one addition of single digits (81 questions, half of them test); one + or - on
1-20; one + or - on 10-99; two steps of +, - or * (multipliers 2-5) on 1-20 (30 % of each question space is test)."""

PASS1_RANGE = (0.15, 0.70)
PASS8_RANGE = (0.30, 0.95)
"""A level qualifies when its base pass@1 and pass@8 lie in these closed ranges (neither near 0 nor near 1)."""

DEFAULT_LEVEL = "addsub99"
"""The level :func:`choose_level` chose from the measurement in ``docs/real_model.md`` (pass@1 / pass@8): ``add9``
92 % / 100 % (too easy), ``addsub20`` 52 % / 69 %, ``addsub99`` 17 % / 38 % (both qualify), ``chain2`` 0 % / 0 %
(stop)."""


def choose_level(measured: Mapping[str, tuple[float, float]]) -> str:
    """The difficulty rule: the hardest level of :data:`LEVELS` whose measured ``(pass@1, pass@8)`` lie in
    :data:`PASS1_RANGE` and :data:`PASS8_RANGE`; if none does, the measured level whose pass@1 is closest to the
    middle of :data:`PASS1_RANGE` (the harder one on a tie).

    Levels are measured easiest first, and measuring stops after the first level whose pass@1 is below the range
    (harder ones would be too), so ``measured`` may hold a prefix of :data:`LEVELS`.

    >>> choose_level({"add9": (0.8, 1.0), "addsub20": (0.4, 0.9), "addsub99": (0.1, 0.5)})
    'addsub20'
    >>> choose_level({"add9": (0.75, 1.0), "addsub20": (0.05, 0.2)})
    'add9'
    """
    unknown = sorted(set(measured) - set(LEVELS))
    if unknown or not measured:
        raise ValueError(f"measured levels {sorted(measured)} must be a non-empty subset of {list(LEVELS)}.")
    order = [name for name in LEVELS if name in measured]
    qualifying = [
        name
        for name in order
        if PASS1_RANGE[0] <= measured[name][0] <= PASS1_RANGE[1] and PASS8_RANGE[0] <= measured[name][1] <= PASS8_RANGE[1]
    ]
    if qualifying:
        return qualifying[-1]
    middle = sum(PASS1_RANGE) / 2
    return min(reversed(order), key=lambda name: abs(measured[name][0] - middle))


def real_world_rows(split: str, num_rows: int, level: str = DEFAULT_LEVEL, seed: int = 0) -> list[dict[str, str]]:
    """``num_rows`` distinct problems of ``split`` ("train" or "test") at ``level``, as rows with ``problem``,
    ``answer``, ``problem_id`` and ``solution`` (the worked solution in the example's format). The one-shot example's
    question never occurs."""
    if level not in LEVELS:
        raise ValueError(f"level={level!r} is not one of {list(LEVELS)}.")
    if not isinstance(num_rows, int) or num_rows < 1:
        raise ValueError(f"num_rows={num_rows!r} must be a positive integer.")
    stream = iter_problems(split, seed, LEVELS[level], unique=True, exclude={ONE_SHOT_QUESTION},
                           stream_name=f"real_world:{level}")  # fmt: skip
    return [
        {"problem": p.question, "answer": str(p.answer), "problem_id": problem_id(p.question), "solution": p.solution}
        for p in islice(stream, num_rows)
    ]


def write_real_world(
    output_dir: str | Path, level: str = DEFAULT_LEVEL, train_size: int = 256, test_size: int = 64, seed: int = 0
) -> dict[str, Path]:
    """Write ``train.jsonl`` and ``test.jsonl`` of :func:`real_world_rows` into ``output_dir``; returns their paths."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, size in (("train", train_size), ("test", test_size)):
        path = folder / f"{split}.jsonl"
        rows = real_world_rows(split, size, level, seed)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        paths[split] = path
    return paths


def main(argv=None) -> dict[str, Path]:
    parser = argparse.ArgumentParser(description="Write the real-model world's train.jsonl and test.jsonl.")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--level", default=DEFAULT_LEVEL, choices=list(LEVELS))
    parser.add_argument("--train_size", type=int, default=256)
    parser.add_argument("--test_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    paths = write_real_world(args.output_dir, args.level, args.train_size, args.test_size, args.seed)
    for path in paths.values():
        print(path)
    return paths


if __name__ == "__main__":
    main()
