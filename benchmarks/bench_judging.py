"""Judging wall time for one Cliff step: concurrent vs sequential calls to a loopback teacher.

A scripted OpenAI-compatible server on 127.0.0.1 (in its own process, like a real endpoint) answers every judge request after an injected
latency (standing in for a remote LLM's generation time). The same 64 wrong toy rollouts are judged
by :class:`~hf_meds_cliff.cliff.teachers.OpenAICompatibleTeacher` one call at a time (baseline) and
all at once with bounded concurrency ``c``, in the same run. Prints both times, the speed-up ratio
and the target ``latency * ceil(rollouts / c)`` that ideal concurrency would reach.

    python benchmarks/bench_judging.py --latency 0.2 --concurrency 16 --rollouts 64
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import sys
import time

from hf_meds_cliff.cliff import split_sentences
from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher
from hf_meds_cliff.testing import FixedReply, serve_in_subprocess

ANSWER = 'The product is wrong.\n{"final_answer_correct": false, "first_mistake": 1}'


def wrong_rollouts(count: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """``count`` (problem, sentences) pairs whose second step is off by one."""
    rng = random.Random(seed)
    rollouts = []
    for _ in range(count):
        a, b, m, c = rng.randint(1, 20), rng.randint(1, 20), rng.randint(2, 5), rng.randint(1, 20)
        s1, s2 = a + b, (a + b) * m + 1
        text = (
            f"{a} + {b} = {s1}. {s1} * {m} = {s2}. {s2} - {c} = {s2 - c}. The answer is \\boxed{{{s2 - c}}}."
        )
        rollouts.append((f"Compute ({a} + {b}) * {m} - {c}.", [text[s:e] for s, e in split_sentences(text)]))
    return rollouts


async def judge_sequential(teacher, rollouts, reference: str):
    return [await teacher.judge(problem, reference, sentences) for problem, sentences in rollouts]


async def judge_concurrent(teacher, rollouts, reference: str):
    return await asyncio.gather(
        *(teacher.judge(problem, reference, sentences) for problem, sentences in rollouts)
    )


def timed(teacher, function, rollouts) -> tuple[float, list]:
    async def body():
        start = time.perf_counter()
        judgments = await function(teacher, rollouts, "reference \\boxed{0}.")
        return time.perf_counter() - start, judgments

    return asyncio.run(body())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.2, help="injected seconds per teacher call (>= 0)")
    parser.add_argument("--concurrency", type=int, default=16, help="max teacher calls in flight")
    parser.add_argument("--rollouts", type=int, default=64, help="wrong rollouts judged per step")
    parser.add_argument("--repeats", type=int, default=3, help="concurrent runs (median reported)")
    args = parser.parse_args(argv)

    rollouts = wrong_rollouts(args.rollouts)
    server = serve_in_subprocess(FixedReply(ANSWER, args.latency))
    with server as base_url:
        teacher = OpenAICompatibleTeacher(base_url, "bench", max_concurrency=args.concurrency, timeout=60.0)
        timed(teacher, judge_concurrent, rollouts[: args.concurrency])  # warm-up: connections, SSL context
        sequential_s, sequential = timed(teacher, judge_sequential, rollouts)
        concurrent_runs = [timed(teacher, judge_concurrent, rollouts) for _ in range(args.repeats)]
    peak = server.max_in_flight
    concurrent_s = statistics.median(t for t, _ in concurrent_runs)
    judgments = sequential + [j for _, run in concurrent_runs for j in run]
    failures = sum(j.status != "ok" or j.first_mistake != 1 for j in judgments)
    target_s = args.latency * math.ceil(args.rollouts / args.concurrency)

    print(
        f"rollouts={args.rollouts} latency={args.latency:.3f}s concurrency={args.concurrency} (peak in flight {peak})"
    )
    print(f"sequential     : {sequential_s:8.3f} s  ({sequential_s / args.rollouts * 1000:.1f} ms per call)")
    print(f"concurrent     : {concurrent_s:8.3f} s  (median of {args.repeats})")
    print(f"speed-up       : {sequential_s / concurrent_s:8.2f}x  (sequential / concurrent)")
    print(f"target         : {target_s:8.3f} s  (latency x ceil(rollouts / concurrency))")
    if target_s > 0:
        print(f"concurrent / target: {concurrent_s / target_s:.3f}")
    print(f"judgment failures: {failures} of {len(judgments)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
