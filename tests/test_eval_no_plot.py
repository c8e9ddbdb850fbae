"""``hf-meds-cliff eval --no_plot``: everything but ``passk.png``, and matplotlib never imported.

The GPU smoke bundle (scripts/gpu_smoke.py) leaves matplotlib and its dependencies out for room and runs its
``eval`` case with ``--no_plot``. These tests run the CLI in a fresh interpreter in which ``import matplotlib``
fails (``sys.modules["matplotlib"] = None``), as it does on the GPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hf_meds_cliff.evaluation import EvalArguments, load_benchmark, run_evaluation

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

BLOCKED_MATPLOTLIB = (
    "import sys; sys.modules['matplotlib'] = None\n"
    "from hf_meds_cliff.cli import main\n"
    "status = main(sys.argv[1:])\n"
    "assert 'matplotlib.pyplot' not in sys.modules\n"
    "sys.exit(status or 0)\n"
)


def _toy_samples(tmp_path: Path) -> Path:
    problems = load_benchmark("toy", max_problems=2)
    lines = [
        {"problem_id": problems[0].problem_id, "completions": [f"\\boxed{{{problems[0].answer}}}", "\\boxed{-1}"]},
        {"problem_id": problems[1].problem_id, "completions": ["no box", f"So \\boxed{{{problems[1].answer}}}."]},
    ]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _eval_without_matplotlib(tmp_path: Path, output: Path, *flags: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-c", BLOCKED_MATPLOTLIB, "eval", "--samples", str(_toy_samples(tmp_path)),
        "--benchmarks", "toy", "--max_problems", "2", "--output_dir", str(output), "--no_progress", *flags,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_eval_no_plot_writes_the_rest_without_importing_matplotlib(tmp_path):
    output = tmp_path / "scored"
    done = _eval_without_matplotlib(tmp_path, output, "--no_plot")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["benchmarks"]["toy"]["pass@k"] == pytest.approx({"1": 0.5, "2": 1.0})
    assert (output / "passk.csv").is_file() and (output / "samples.jsonl").is_file()
    assert not (output / "passk.png").exists()


def test_eval_plots_by_default_and_needs_matplotlib_for_it(tmp_path):
    # The same interpreter with matplotlib blocked fails when a plot is asked for: the block above is real.
    blocked = _eval_without_matplotlib(tmp_path, tmp_path / "blocked")
    assert blocked.returncode != 0 and "matplotlib" in blocked.stderr
    # With matplotlib importable, the default still writes the plot.
    args = EvalArguments(
        samples=str(_toy_samples(tmp_path)), benchmarks=["toy"], max_problems=2,
        output_dir=str(tmp_path / "plotted"), progress=False,
    )  # fmt: skip
    assert args.plot
    run_evaluation(args)
    assert (tmp_path / "plotted" / "passk.png").read_bytes().startswith(PNG_MAGIC)
