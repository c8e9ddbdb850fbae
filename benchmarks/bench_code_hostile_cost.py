"""What hostile output and hostile completions cost the caller, against well-behaved ones in the same run.

    python benchmarks/bench_code_hostile_cost.py [--quick] [--repeats 3] [--output docs/code_sandbox_results/hostile_cost.json]

(a) **Hostile output through ``run_tests``.** Stdin tests whose expected output is ``5``; the program prints ``5``
(the baseline) or floods: tiny frames (5 bytes each) on every descriptor it holds but stdin and stdout, ``\\x1c``
or spaces (which ``str.strip`` removes) before the right answer, one long line of ``1 1 1 ...``, many short lines,
invalid UTF-8 bytes, stderr. For each: the caller's own CPU time during ``run_tests`` (``time.process_time``: the
caller's threads, not the sandbox's processes), its wall time and the verdict, the median over ``--repeats`` rounds
in which the shapes take turns with the baseline; then the caller's CPU per MiB the program wrote (above the
baseline) and the ratio to the baseline.

(b) **Program extraction from a completion** (``extract_program``, in the trainer's thread), and the other parsers
the trainer runs on a code completion (Cliff's ``split_code_units``, the boxed-answer extraction), on 50 KB
adversarial completions of several shapes: the median CPU time of a call, against the target of 50 ms. The regular
expression ``extract_program`` used before is timed on one shape for comparison (``--quick``: at 10 KB).

Only the public API is used, so the same script measures any version of the package on ``PYTHONPATH``; the JSON
records the machine, CPU flags, versions, the harness file's hash and the exact command.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_EXTRACTION_S = 0.050

# The program the caller grades: its stdout is compared with "5".
_TINY_FRAMES = r"""
import os, signal
class _Stop(Exception):
    pass
def _raise(*_):
    raise _Stop
TINY = (1).to_bytes(4, "big") + b"Z"
FLOOD = TINY * (({size}) // len(TINY))
signal.signal(signal.SIGALRM, _raise)
for name in sorted(os.listdir("/proc/self/fd"), key=int):
    if int(name) < 2:
        continue
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        view = memoryview(FLOOD)
        while view:
            view = view[os.write(int(name), view):]
    except (OSError, _Stop):
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
print(5)
"""


def output_shapes(mib: float) -> dict[str, tuple[str, int]]:
    """name -> (program, bytes it writes). Floods stay just under the default ``max_output_bytes`` (8 MiB)."""
    size = int(mib * (1 << 20)) - 4096
    return {
        "baseline: prints 5": ("print(5)\n", 2),
        "tiny frames on every descriptor but 0, 1": (_TINY_FRAMES.format(size=size), size),
        "\\x1c before the right answer": (
            f"import sys\nsys.stdout.write('\\x1c' * {size})\nprint(5)\n",
            size,
        ),
        "spaces before the right answer": (f"import sys\nsys.stdout.write(' ' * {size})\nprint(5)\n", size),
        "one long line '1 1 1 ...'": (f"import sys\nsys.stdout.write('1 ' * ({size} // 2))\n", size),
        "short lines '1\\n'": (f"import sys\nsys.stdout.write('1\\n' * ({size} // 2))\n", size),
        "invalid UTF-8 bytes": (f"import sys\nsys.stdout.buffer.write(b'\\xff' * {size})\n", size),
        "stderr flood": (f"import sys\nsys.stderr.write('x' * {size})\nprint(5)\n", size),
    }


def measure_outputs(mib: float, repeats: int, isolation: str, timeout_s: float) -> list[dict]:
    from hf_meds_cliff.code import SandboxLimits, run_tests

    limits = SandboxLimits(timeout_s=timeout_s, isolation=isolation)
    tests = [{"input": "", "output": "5"}]
    run_tests("print(5)\n", tests, limits=limits)  # warm: the fork server, imports
    shapes = output_shapes(mib)
    samples: dict[str, list[dict]] = {name: [] for name in shapes}
    for _ in range(repeats):
        for name, (program, _written) in shapes.items():  # the shapes take turns with the baseline
            cpu, wall = time.process_time(), time.perf_counter()
            result = run_tests(program, tests, limits=limits)
            samples[name].append(
                {
                    "cpu_s": time.process_time() - cpu,
                    "wall_s": time.perf_counter() - wall,
                    "status": result.results[0].status if result.results else None,
                }
            )
    baseline = statistics.median(s["cpu_s"] for s in samples["baseline: prints 5"])
    rows = []
    for name, (_program, written) in shapes.items():
        cpu = statistics.median(s["cpu_s"] for s in samples[name])
        wall = statistics.median(s["wall_s"] for s in samples[name])
        mib_written = written / (1 << 20)
        rows.append(
            {
                "output": name,
                "mib_written": round(mib_written, 3),
                "statuses": sorted({s["status"] for s in samples[name]}, key=str),
                "caller_cpu_s": cpu,
                "wall_s": wall,
                "caller_cpu_ms_per_mib_above_baseline": (
                    None if written < 1024 else 1000 * max(0.0, cpu - baseline) / mib_written
                ),
                "caller_cpu_ratio_to_baseline": cpu / baseline if baseline > 0 else None,
                "samples": samples[name],
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------- (b)

_OLD_FENCE = re.compile(r"```[ \t]*(?P<language>[A-Za-z0-9_+#.-]*)[^\n`]*\n(?P<code>.*?)```", re.DOTALL)


def old_extract_program(completion: str):
    """The earlier ``extract_program`` (a regular expression that backtracks)."""
    program = None
    for match in _OLD_FENCE.finditer(completion):
        if match.group("language").lower() in {"", "python", "python3", "py", "py3"}:
            program = match.group("code")
    return program


def completion_shapes(size: int) -> dict[str, str]:
    return {
        "fence then spaces": "```" + " " * size,
        "fence, spaces, a backtick": "```" + " " * size + "`",
        "fence, tabs and tag characters, a backtick": "```" + "\t" * (size // 2) + "a" * (size // 2) + "`\n",
        "fence then spaces, a newline, no close": "```" + " " * (size // 2) + "\n" + " " * (size // 2),
        "unclosed python fences": "```python\n" * (size // 10),
        "fence lines": "```\n" * (size // 4),
        "backticks": "`" * size,
        "open-close pairs with text": ("```python\nx = 1\n```\ntext " * (size // 27))[:size],
        "unclosed \\[ delimiters": "\\[" * (size // 2),
        "unclosed $ maths": "$x " * (size // 3),
        "'a. ' sentences on one line": "a. " * (size // 3),
        "'ii. ' list markers on one line": "ii. " * (size // 4),
        "nested braces": "{" * (size // 2) + "}" * (size // 2),
        "\\boxed{ opened": "\\boxed{" * (size // 7),
        "\\boxed{1} and ...": "\\boxed{1} and " * (size // 14),
    }


def _median_time(function, text: str, repeats: int) -> float:
    """Median CPU time of ``function(text)`` in this process (CPU, not wall: the machine may be shared)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        try:
            function(text)
        except (ValueError, RecursionError):  # a parser's own refusal is an answer too
            pass
        times.append(time.process_time() - start)
    return statistics.median(times)


def _sentences_quadratic():
    """``tests/_sentences_quadratic.py`` (Cliff's earlier, quadratic sentence splitter), if present."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tests" / "_sentences_quadratic.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("sentences_quadratic", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_extraction(size: int, repeats: int, old_size: int, old_size_units: int) -> dict:
    from hf_meds_cliff.cliff import split_code_units
    from hf_meds_cliff.code import extract_program
    from hf_meds_cliff.rewards.extraction import extract_final_answer

    functions = {
        "extract_program": extract_program,
        "cliff.sentences.split_code_units": split_code_units,
        "rewards.extraction.extract_final_answer": extract_final_answer,
    }
    rows = []
    for shape, text in completion_shapes(size).items():
        row = {"shape": shape, "chars": len(text)}
        for name, function in functions.items():
            row[f"{name}_s"] = _median_time(function, text, repeats)
        rows.append(row)
    old_text = "```" + " " * old_size
    start = time.process_time()
    old_extract_program(old_text)
    old_s = time.process_time() - start
    worst = {name: max(row[f"{name}_s"] for row in rows) for name in functions}
    before = _sentences_quadratic()
    previous_units = []
    if before is not None:  # the earlier splitter, at a smaller size (it is quadratic on some shapes)
        for shape, text in completion_shapes(old_size_units).items():
            previous_units.append(
                {
                    "shape": shape,
                    "chars": len(text),
                    "split_code_units_before_s": _median_time(before.split_code_units, text, 1),
                    "split_code_units_now_s": _median_time(split_code_units, text, repeats),
                }
            )
    return {
        "size_chars": size,
        "target_s": TARGET_EXTRACTION_S,
        "rows": rows,
        "worst_s": worst,
        "all_under_target": all(value < TARGET_EXTRACTION_S for value in worst.values()),
        "previous_regular_expression": {
            "shape": "fence then spaces",
            "chars": len(old_text),
            "seconds": old_s,
            "extract_program_now_s": _median_time(extract_program, old_text, repeats),
        },
        "previous_split_code_units": previous_units,
    }


# ---------------------------------------------------------------------------------------------- metadata


def _cpu_info() -> dict:
    from hf_meds_cliff.machine import cpu_model_and_flags

    model, flags = cpu_model_and_flags()
    return {"model": model or None, "flags": flags or None}


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*arguments: str) -> str | None:
    try:
        return subprocess.run(
            ["git", *arguments], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def metadata(code_note: str | None = None) -> dict:
    import hf_meds_cliff
    from hf_meds_cliff.code import sandbox

    harness = Path(sandbox.HARNESS_PATH)
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {
            "platform": platform.platform(),
            "cpu": _cpu_info(),
            "usable_cores": len(os.sched_getaffinity(0)),
            "load_average_at_start": os.getloadavg(),
            "euid": os.geteuid(),
        },
        "versions": {
            "python": platform.python_version(),
            "torch": _version("torch"),
            "trl": _version("trl"),
            "hf-meds-cliff": _version("hf-meds-cliff"),
        },
        "git": {"commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain"))},
        "package_file": hf_meds_cliff.__file__,
        "code_note": code_note,
        "harness_sha256": hashlib.sha256(harness.read_bytes()).hexdigest() if harness.exists() else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 MiB floods, 1 round, old extractor at 10 KB")
    parser.add_argument(
        "--repeats", type=int, default=None, help="rounds of the output shapes (default 3; quick 1)"
    )
    parser.add_argument(
        "--flood_mib", type=float, default=None, help="size of each flood (default 8; quick 2)"
    )
    parser.add_argument("--isolation", default="auto", choices=["auto", "none"])
    parser.add_argument(
        "--timeout_s", type=float, default=6.0, help="the tests' timeout_s (the caller waits 5 s more)"
    )
    parser.add_argument("--completion_chars", type=int, default=50_000)
    parser.add_argument("--skip_outputs", action="store_true", help="only (b), the extraction")
    parser.add_argument("--skip_extraction", action="store_true", help="only (a), the hostile outputs")
    parser.add_argument(
        "--code_note",
        default=None,
        help="where the measured package comes from (recorded), e.g. a branch and commit",
    )
    parser.add_argument("--output", default=None, help="JSON file to write (default: print only)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    mib = args.flood_mib or (2.0 if args.quick else 8.0)
    report = {
        "metadata": metadata(args.code_note),
        "settings": {**vars(args), "repeats": repeats, "flood_mib": mib},
    }

    if not args.skip_outputs:
        rows = measure_outputs(mib, repeats, args.isolation, args.timeout_s)
        report["hostile_output"] = rows
        print(f"(a) caller's CPU per hostile output, {args.isolation} isolation, median of {repeats}")
        print(
            f"{'output':<44} {'MiB':>5} {'verdict':<16} {'CPU s':>7} {'wall s':>7} {'ms CPU/MiB':>10} {'x base':>7}"
        )
        for row in rows:
            per_mib = row["caller_cpu_ms_per_mib_above_baseline"]
            print(
                f"{row['output']:<44} {row['mib_written']:>5.2f} {','.join(map(str, row['statuses'])):<16} "
                f"{row['caller_cpu_s']:>7.3f} {row['wall_s']:>7.2f} "
                f"{'-' if per_mib is None else f'{per_mib:.1f}':>10} {row['caller_cpu_ratio_to_baseline'] or 0:>7.1f}"
            )

    if args.skip_extraction:
        _write(report, args.output)
        return
    extraction = measure_extraction(
        args.completion_chars,
        5,
        10_000 if args.quick else args.completion_chars,
        5_000 if args.quick else 10_000,
    )
    report["extraction"] = extraction
    print(
        f"\n(b) parsing a {args.completion_chars}-char adversarial completion, median CPU of 5 (target < 50 ms)"
    )
    names = list(extraction["worst_s"])
    print(f"{'shape':<44} " + " ".join(f"{name.split('.')[-1]:>22}" for name in names))
    for row in extraction["rows"]:
        print(f"{row['shape']:<44} " + " ".join(f"{1000 * row[f'{name}_s']:>19.2f} ms" for name in names))
    old = extraction["previous_regular_expression"]
    for row in extraction["previous_split_code_units"]:
        print(
            f"split_code_units (earlier, quadratic), {row['chars']} chars of {row['shape']!r}: "
            f"{row['split_code_units_before_s']:.3f} s (now {1000 * row['split_code_units_now_s']:.2f} ms)"
        )
    print(
        f"previous extract_program (regular expression), {old['chars']} chars of '{old['shape']}': "
        f"{old['seconds']:.2f} s (now {1000 * old['extract_program_now_s']:.2f} ms)"
    )
    _write(report, args.output)


def _write(report: dict, output: str | None) -> None:
    report["metadata"]["load_average_at_end"] = os.getloadavg()
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(report, indent=1) + "\n")
        print(f"written: {output}")


if __name__ == "__main__":
    main()
