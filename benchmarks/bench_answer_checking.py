"""Speed of answer checking: ``check_answers`` against plain math-verify, measured in the same run.

    python benchmarks/bench_answer_checking.py [--num_answers 1000] [--workers 2] [--seed 0]

Workloads (completions that box their answer, against bare ground truths):

- ``mixed``: distinct pairs, a third plain integers (settled by the exact integer shortcut), the
  rest LaTeX answers math-verify must parse: fractions, radicals, tuples, sets, thousands
  separators, spaced digits, several boxes, percentages; about 70 % correct.
- ``groups``: GRPO-like batches, 8 completions per prompt drawn from 3 candidate answers per
  prompt (repeated answers are verified once per batch).
- ``integers``: plain integers only (toy, AIME, GSM8K answers).

The baseline is plain math-verify called serially in this process, as its README shows:
``verify(parse(ground truth), parse(completion))`` with its own (signal-based) timeouts: unsafe off
the main thread and unbounded in C code, which is what the worker pool is for. ``check_answers``
runs through a fresh ``MathVerifyPool`` per workload (workers started before timing). Both are
timed batch by batch, alternating (``--batch_size`` checks, a generation batch), so that a machine
whose load changes during the run slows both alike. Printed: checks per second, the ratio to the baseline (> 1 is faster) and how often the
two verdicts agree. Only ``completions, ground_truths, pool, timeout`` are passed, so the same script
measures an older version of the package for a before/after comparison (``PYTHONPATH=old/src``).
"""

from __future__ import annotations

import argparse
import logging
import random
import time

from hf_meds_cliff.rewards import MathVerifyPool, check_answers

LATEX_FORMS = [  # (ground truth, correct answer, wrong answer) templates over integers a, b
    ("\\frac{{{a}}}{{{b}}}", "{a}/{b}", "{a}/{c}"),
    ("\\frac{{{a}}}{{{b}}}", "\\dfrac{{{a}}}{{{b}}}", "\\dfrac{{{c}}}{{{b}}}"),
    ("{a}\\sqrt{{{b}}}", "\\sqrt{{{b}}}\\cdot {a}", "{c}\\sqrt{{{b}}}"),
    ("({a}, {b})", "\\left({a},{b}\\right)", "\\left({b},{a}\\right)"),
    ("x^{{{a}}} + {b}", "{b} + x^{{{a}}}", "{c} + x^{{{a}}}"),
    ("\\{{{a}, {b}\\}}", "\\{{{b}, {a}\\}}", "\\{{{a}, {c}\\}}"),
    ("{a}{b:03d}", "{a},{b:03d}", "{a}, {b:03d}"),  # thousands separator vs a pair
    ("{a}, {b}", "{a}}} and \\boxed{{{b}", "{a}}} and \\boxed{{{c}"),  # two boxes
    ("{a}\\%", "{a}\\%", "{c}\\%"),
    ("{a}.5", "{a}.50", "{a}.05"),
]


def _latex_pair(rng: random.Random) -> tuple[str, str]:
    gold, right, wrong = rng.choice(LATEX_FORMS)
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    c = b + rng.randint(1, 5)
    answer = right if rng.random() < 0.7 else wrong
    return gold.format(a=a, b=b, c=c), "So the answer is \\boxed{" + answer.format(a=a, b=b, c=c) + "}."


def _integer_pair(rng: random.Random) -> tuple[str, str]:
    gold = rng.randint(-999, 9999)
    answer = gold if rng.random() < 0.7 else gold + rng.randint(1, 9)
    return str(gold), f"The answer is \\boxed{{{answer}}}."


def mixed_workload(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs: dict[tuple[str, str], None] = {}
    while len(pairs) < count:
        pairs[_integer_pair(rng) if rng.random() < 1 / 3 else _latex_pair(rng)] = None
    return list(pairs)


def group_workload(count: int, seed: int, group_size: int = 8) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < count:
        candidates = [_latex_pair(rng) for _ in range(3)]
        gold = candidates[0][0]
        answers = [completion for _, completion in candidates]
        pairs.extend((gold, rng.choice(answers)) for _ in range(group_size))
    return pairs[:count]


def integer_workload(count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [_integer_pair(rng) for _ in range(count)]


def plain_math_verify(pairs: list[tuple[str, str]]) -> list[bool]:
    from math_verify import parse, verify

    return [bool(verify(parse("$" + gold + "$"), parse(completion))) for gold, completion in pairs]


def timed(function, *arguments, **keywords):
    start = time.perf_counter()
    result = function(*arguments, **keywords)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_answers", type=int, default=1000, help="Checks per workload.")
    parser.add_argument("--workers", type=int, default=2, help="math-verify worker processes.")
    parser.add_argument("--batch_size", type=int, default=128, help="Checks per check_answers call.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    plain_math_verify([("1", "\\boxed{1}")])  # import sympy/math-verify before timing

    print(f"{args.num_answers} checks per workload, {args.workers} workers")
    print(
        f"{'workload':10} {'plain math-verify':>20} {'check_answers':>16} {'ratio':>7} {'agree':>7} {'correct':>8}"
    )
    totals = [0.0, 0.0]
    for name, make in (("mixed", mixed_workload), ("groups", group_workload), ("integers", integer_workload)):
        pairs = make(args.num_answers, args.seed)
        pool = MathVerifyPool(num_workers=args.workers)
        pool.verify([("1", "1/1")] * args.workers, timeout=120)  # start the workers before timing
        baseline_seconds = ours_seconds = 0.0
        baseline, checks = [], []
        for start in range(0, len(pairs), args.batch_size):
            batch = pairs[start : start + args.batch_size]
            seconds, verdicts = timed(plain_math_verify, batch)
            baseline_seconds += seconds
            baseline += verdicts
            completions, truths = [c for _, c in batch], [g for g, _ in batch]
            seconds, batch_checks = timed(check_answers, completions, truths, pool=pool, timeout=10)
            ours_seconds += seconds
            checks += batch_checks
        pool.close()
        agree = sum(c.correct == b for c, b in zip(checks, baseline)) / len(pairs)
        correct = sum(c.correct for c in checks) / len(pairs)
        totals[0] += baseline_seconds
        totals[1] += ours_seconds
        print(
            f"{name:10} {len(pairs) / baseline_seconds:14.1f} chk/s {len(pairs) / ours_seconds:10.1f} chk/s "
            f"{baseline_seconds / ours_seconds:7.2f} {100 * agree:6.1f}% {100 * correct:7.1f}%"
        )
        print(f"{'':10} {baseline_seconds:16.2f} s {ours_seconds:12.2f} s")
    print(f"all three: plain math-verify {totals[0]:.1f} s, check_answers {totals[1]:.1f} s")


if __name__ == "__main__":
    main()
