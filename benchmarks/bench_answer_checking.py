"""Cost of safe answer checking: math-verify in killable worker processes vs in-process (unsafe) calls.

    python benchmarks/bench_answer_checking.py [--num_answers 400] [--workers 2]

Measured in the same run:

- baseline: ``math_verify_equal`` called serially in this process (no time bound: unsafe for training),
- ``check_answers`` through a ``MathVerifyPool`` (per-answer timeout, workers started before timing),
- ``check_answers`` on plain-integer answers (the fast path; toy, AIME and GSM8K answers),

and printed as answers per second and as ratios against the baseline. Expect the pool to be near the
baseline per worker (one pipe round trip per answer) and the integer fast path to be orders of magnitude faster.
"""

from __future__ import annotations

import argparse
import random
import time

from hf_meds_cliff.rewards import MathVerifyPool, check_answers, math_verify_equal

FORMS = [
    ("\\frac{{{a}}}{{{b}}}", "{a}/{b}"),
    ("\\frac{{{a}}}{{{b}}}", "\\dfrac{{{a}}}{{{b}}}"),
    ("{a}\\sqrt{{{b}}}", "\\sqrt{{{b}}}\\cdot {a}"),
    ("({a}, {b})", "\\left({a},{b}\\right)"),
    ("x^{{{a}}} + {b}", "{b} + x^{{{a}}}"),
]


def make_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        gold, pred = rng.choice(FORMS)
        a, b = rng.randint(1, 40), rng.randint(2, 40)
        pairs.append((gold.format(a=a, b=b), pred.format(a=a, b=b if rng.random() < 0.7 else b + 1)))
    return pairs


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_answers", type=int, default=400)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    pairs = make_pairs(args.num_answers)
    math_verify_equal("1", "1")  # import sympy/math-verify before timing
    baseline_seconds, baseline = timed(
        lambda: ["correct" if math_verify_equal(g, p) else "wrong" for g, p in pairs]
    )

    pool = MathVerifyPool(num_workers=args.workers)
    pool.verify([("1", "1/1")] * args.workers)  # start the workers before timing
    completions = ["\\boxed{" + p + "}" for _, p in pairs]
    truths = [g for g, _ in pairs]
    pool_seconds, checks = timed(lambda: check_answers(completions, truths, pool=pool, timeout=10))
    pool.close()
    agreement = sum(c.status == b for c, b in zip(checks, baseline)) / len(pairs)

    integers = [(str(random.Random(i).randint(-999, 999)),) * 2 for i in range(args.num_answers)]
    integer_seconds, _ = timed(
        lambda: check_answers(["\\boxed{" + p + "}" for _, p in integers], [g for g, _ in integers])
    )

    def rate(seconds: float) -> float:
        return args.num_answers / seconds

    print(f"{args.num_answers} answers, {args.workers} workers")
    print(f"baseline in-process math-verify : {rate(baseline_seconds):10.1f} answers/s  (ratio 1.00)")
    print(
        f"check_answers via worker pool    : {rate(pool_seconds):10.1f} answers/s  "
        f"(ratio {baseline_seconds / pool_seconds:.2f}; verdicts agree on {100 * agreement:.1f}%)"
    )
    print(
        f"check_answers integer fast path  : {rate(integer_seconds):10.1f} answers/s  "
        f"(ratio {baseline_seconds / integer_seconds:.1f})"
    )


if __name__ == "__main__":
    main()
