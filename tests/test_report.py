"""``hf-meds-cliff report``: what a person sees, from a hand-made run directory and from short toy runs, and
the page drawn by a real headless browser (Chromium) where one is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import write_half_solved_toy_data

from hf_meds_cliff import cli
from hf_meds_cliff.meds.memory import ErrorMemory, RowSnippet
from hf_meds_cliff.report import READY_ATTRIBUTE, collect_run, write_report

XSS = '<img src=x onerror="alert(1)">'
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def unit(degrees: float) -> list[float]:
    radians = np.deg2rad(degrees)
    return [float(np.cos(radians)), float(np.sin(radians))]


def _write_jsonl(path: Path, records) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


@pytest.fixture
def made_run(tmp_path) -> Path:
    """A run directory with every artefact the report reads, written by hand with known contents."""
    run = tmp_path / "runs" / "meds-run"
    run.mkdir(parents=True)
    _write_jsonl(
        run / "metrics.jsonl",
        [
            {
                "step": 1,
                "reward": 0.25,
                "completions/mean_length": 40.0,
                "meds/mean_penalty": 0.0,
                "loss": 0.1,
            },
            {"step": 2, "reward": 0.5, "completions/mean_length": 38.0, "meds/mean_penalty": -0.05},
            {"step": 3, "reward": float("nan"), "meds/mean_penalty": -0.07, "cliff/agreement": None},
            {"train_runtime": 12.0, "step": 3},
        ],
    )
    memory = ErrorMemory()
    # Step 1: three wrong rows of p1 around 0° (one with the XSS text), two around 90°; step 2 adds one at 1°.
    texts = ["1 + 2 = 4. \\boxed{4}", f"1 + 2 = 4. {XSS} \\boxed{{4}}", "1 + 2 = 4! \\boxed{4}"]
    snippets = [RowSnippet(text, step=1, sample=i) for i, text in enumerate(texts)]
    snippets += [RowSnippet("1 + 2 = 5. \\boxed{5}", step=1, sample=3), RowSnippet("= 5 \\boxed{5}", 1, 4)]
    memory.assign_and_update(
        [("p1", False)] * 5, np.array([unit(0), unit(2), unit(4), unit(90), unit(92)]), snippets
    )
    memory.assign_and_update(
        [("p1", False), ("p2", False), ("p2", False)],
        np.array([unit(1), unit(0), unit(45)]),
        [RowSnippet("1 + 2 = 4. \\boxed{4}", 2, 0), RowSnippet("x \\boxed{1}", 2, 8), None],
    )
    memory.set_note(("p1", False), "Compute <b>1</b> + 2.")
    memory.set_note(("p2", False), "A second problem")
    memory.save(run / "meds_memory")

    rollout = {
        "step": 2, "sample": 5, "prompt_key": "k1", "problem": "Compute 2 + 3 * 2.", "ground_truth": "10",
        "completion": f"2 + 3 = 5. 5 * 2 = 11. {XSS} The answer is \\boxed{{11}}.",
        "is_truncated": False, "group_mode": "cliff", "first_mistake": 1, "source": "judged", "agreed": True,
        "teacher_raw": ['{"first_mistake": 1} <script>alert(2)</script>'], "teacher_statuses": ["ok"],
        "teacher_votes": [1], "reference": "2 + 3 = 5. 5 * 2 = 10. The answer is \\boxed{10}.",
    }  # fmt: skip
    text = rollout["completion"]
    rollout["sentences"] = [[0, 11], [11, 23], [23, len(text)]]
    stale = {**rollout, "completion": "STALE LINE FROM BEFORE A RESUME", "sentences": []}
    disagreement = {
        **rollout, "sample": 6, "completion": "2 + 3 = 5. 5 * 2 = 12.", "sentences": [[0, 11], [11, 22]],
        "first_mistake": 0, "agreed": False, "teacher_raw": ["no mistake"], "teacher_votes": [None],
    }  # fmt: skip
    truncated = {
        **rollout, "step": 1, "sample": 1, "completion": "2 + 3 = 5. 5 * 2 =", "sentences": [[0, 11]],
        "first_mistake": 0, "source": "truncated", "agreed": None, "teacher_raw": [], "teacher_statuses": [],
        "teacher_votes": [],
    }  # fmt: skip
    _write_jsonl(run / "cliff_rollouts.jsonl", [stale, truncated, rollout, disagreement])
    (run / "checkpoint-2").mkdir()
    (run / "checkpoint-2" / "cliff_state.json").write_text(
        json.dumps({"version": 1, "references": {"k1": "ref"}, "judgments": {"k1:a": {"agreed": True}}})
    )
    # pass@k of this run's model next to it, and of another model (not shown).
    for name, model in (("this", run), ("other", tmp_path / "elsewhere")):
        folder = tmp_path / "runs" / "eval" / name
        folder.mkdir(parents=True)
        summary = {
            "model": f"model-{name}", "model_name_or_path": str(model), "settings": {"num_samples": 4},
            "benchmarks": {"toy": {"pass@k": {"1": 0.25, "2": 0.4, "4": 0.5}, "mean@n": 0.25, "maj@n": 0.3}},
        }  # fmt: skip
        (folder / "summary.json").write_text(json.dumps(summary))
    return run


def test_report_of_a_made_run_shows_clusters_rollouts_and_passk(made_run, tmp_path, capsys):
    assert cli.main(["report", str(made_run)]) == 0
    assert "report.html" in capsys.readouterr().out
    page = (made_run / "report.html").read_text()

    # Self-contained and offline: one inline script, a CSP without network, no external reference.
    assert page.count("<script") == 1 and "default-src 'none'" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    # Every text from the run is escaped.
    assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "<script>alert(2)" not in page and "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "Compute &lt;b&gt;1&lt;/b&gt; + 2." in page

    # MEDS: p1's wrong cluster around 0° holds 4 rows (3 from step 1, 1 from step 2), the 90° one 2;
    # p2's 2 rows are noise. p1 comes first (largest wrong cluster).
    blocks = re.findall(r'<details class="prompt" data-largest_wrong="(\d+)"[^>]*data-prompt="([^"]*)"', page)
    assert blocks == [("4", "Compute &lt;b&gt;1&lt;/b&gt; + 2."), ("0", "A second problem")]
    p1 = page[page.index('data-largest_wrong="4"') : page.index('data-largest_wrong="0"')]
    assert re.findall(r'<td class="num">(\d+)</td>', p1) == ["4", "2"]
    assert "step 2 · sample 0" in p1 and "1 + 2 = 5. \\boxed{5}" in p1

    # Cliff: the stale line is replaced; the judged rollout is split prefix / first mistake / suffix.
    assert "STALE LINE" not in page
    assert '<span class="s prefix"><sup>[0]</sup>2 + 3 = 5. </span>' in page
    assert '<span class="s mistake"><sup>[1]</sup>5 * 2 = 11. </span>' in page
    assert re.search(r'<span class="s suffix"><sup>\[2\]</sup>&lt;img', page)
    assert (
        '<article class="rollout" data-kind="disagree">' in page
        and '<span class="s plain"><sup>[1]</sup>' in page
    )
    assert '<article class="rollout" data-kind="truncated">' in page
    assert "agreement on the judged (or cached) ones: <b>50.0 %</b>" in page
    assert "1 verified reference solutions, 1 judgments" in page

    # pass@k of this run only; curves of the logged metrics (NaN and None dropped).
    assert "model-this" in page and "model-other" not in page and "<th>pass@4</th>" in page
    assert '<td class="num">50.0</td>' in page
    assert "<figcaption>meds/mean_penalty</figcaption>" in page and "cliff/agreement" not in page

    custom = tmp_path / "out" / "r.html"
    assert cli.main(["report", str(made_run), "-o", str(custom), "--max_rollouts", "1"]) == 0
    assert custom.read_text().count('<article class="rollout"') == 1


def test_a_stopped_run_is_read_from_its_newest_checkpoint(tmp_path):
    for step in (2, 10):  # numeric order: checkpoint-10 is newer than checkpoint-2
        (tmp_path / f"checkpoint-{step}").mkdir()
        history = [{"step": s, "reward": s / 10} for s in range(1, step + 1)]
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(
            json.dumps({"log_history": history})
        )
    data = collect_run(tmp_path)
    assert (
        data.log_source == tmp_path / "checkpoint-10" / "trainer_state.json" and len(data.log_history) == 10
    )
    assert "10 logged steps" in write_report(tmp_path).read_text()


def test_report_of_an_empty_folder_says_what_is_missing(tmp_path):
    page = write_report(tmp_path).read_text()
    assert "No logged metrics found" in page and "No eval summary" in page
    assert collect_run(tmp_path).method == "GRPO"
    with pytest.raises(FileNotFoundError, match="is not a directory; pass the --output_dir"):
        write_report(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no summary.json there"):
        write_report(tmp_path, eval_dirs=[tmp_path])


def find_browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def render_in_browser(page: Path, screenshot: Path | None = None, fragment: str = "") -> tuple[str, str]:
    """(DOM after the page's scripts ran, browser log) of ``page`` in headless Chromium, offline, isolated."""
    browser = find_browser()
    with tempfile.TemporaryDirectory() as profile:
        flags = [
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--window-size=1280,2000",
        ]  # fmt: skip
        action = [f"--screenshot={screenshot}", "--hide-scrollbars"] if screenshot else ["--dump-dom"]
        result = subprocess.run(
            [browser, *flags, *action, page.resolve().as_uri() + fragment],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout, result.stderr


def assert_draws_without_errors(page: Path, fragment: str = "") -> str:
    dom, log = render_in_browser(page, fragment=fragment)
    console = [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not [line for line in console if "Uncaught" in line or "Content Security Policy" in line], console
    assert f'{READY_ATTRIBUTE}="1"' in dom, "the page's script did not run to its end"
    return dom


needs_browser = pytest.mark.skipif(
    find_browser() is None,
    reason=(
        f"no headless Chromium on PATH (looked for {', '.join(BROWSERS)}); pip cannot install one: install the "
        "system package (e.g. `apt-get install chromium`) to run the in-browser checks of the report"
    ),
)


@needs_browser
@pytest.mark.browser
def test_made_report_draws_in_a_real_browser(made_run, tmp_path):
    dom = assert_draws_without_errors(write_report(made_run))
    assert dom.count("<svg") >= 5 and '<details class="prompt"' in dom
    assert dom.index('data-prompt="Compute') < dom.index(
        'data-prompt="A second'
    )  # largest wrong cluster first
    assert not re.search(r'<article class="rollout" data-kind="\w+" hidden', dom)
    # The controls work: sort the prompts by name and show only the disagreements.
    dom = assert_draws_without_errors(made_run / "report.html", "#meds-sort=prompt&cliff-filter=disagree")
    assert dom.index('data-prompt="A second') < dom.index('data-prompt="Compute')
    shown = re.findall(r'<article class="rollout" data-kind="(\w+)"( hidden="")?', dom)
    assert sorted(shown) == [("agree", ' hidden=""'), ("disagree", ""), ("truncated", ' hidden=""')]
    screenshot = tmp_path / "shot.png"
    render_in_browser(made_run / "report.html", screenshot)
    assert screenshot.stat().st_size > 10_000


@pytest.fixture(scope="module")
def short_toy_runs(toy_policy_path, tmp_path_factory) -> tuple[Path, Path]:
    """Run directories of a 2-step toy MEDS run (`hf-meds-cliff meds`) and a 2-step toy Cliff run."""
    from hf_meds_cliff.scripts import train_cliff

    root = tmp_path_factory.mktemp("toy_runs")
    meds_dir, cliff_dir = root / "meds", root / "cliff"
    # No --model_name_or_path: the toy recipe's `toy` model, the policy the fixture made sure exists. The data: 4 toy
    # problems this policy is measured to half-solve, so there are wrong clusters and judged rollouts to show.
    data = write_half_solved_toy_data(toy_policy_path, 4, root / "half_solved.jsonl")
    small = [
        "--max_steps", "2", *data,
        "--per_device_train_batch_size", "32", "--gradient_checkpointing", "false",
    ]  # fmt: skip
    assert cli.main(["meds", *small, "--output_dir", str(meds_dir)]) == 0  # through accelerate launch
    trainer = train_cliff.main(*train_cliff.parse_args([*small, "--output_dir", str(cliff_dir)]))
    trainer.close_teacher()
    return meds_dir, cliff_dir


@pytest.mark.slow
def test_reports_of_short_toy_runs(short_toy_runs):
    """`hf-meds-cliff meds ... --output_dir D`, `hf-meds-cliff report D`; a toy Cliff run; both pages."""
    meds_dir, cliff_dir = short_toy_runs
    assert cli.main(["report", str(meds_dir)]) == 0
    page = (meds_dir / "report.html").read_text()
    assert "MEDS: error clusters per prompt" in page and "<figcaption>meds/memory_rows</figcaption>" in page
    memory = ErrorMemory.load(meds_dir / "meds_memory")
    keys = memory.keys()
    snippets = [s for key in keys for s in memory.stored_snippets(key) if s is not None]  # the kept representatives
    assert snippets and all(s.text.endswith("}") and 1 <= s.step <= 2 for s in snippets)
    steps = {int(step) for key in keys for step in memory.stored_steps(key)}  # every row's, snippet kept or not
    assert steps == {1, 2}  # the same 4 prompts come back at step 2
    assert re.search(r'<span class="ptitle">Compute [^<]+\.</span>', page)  # the problem, not a hash
    assert re.search(r"<pre>[^<]*\\boxed\{-?\d+\}</pre>", page)  # completions shown in their clusters
    assert int(re.search(r'data-largest_wrong="(\d+)"', page).group(1)) >= 2

    assert cli.main(["report", str(cliff_dir)]) == 0
    page = (cliff_dir / "report.html").read_text()
    assert "Cliff: judged rollouts" in page and "<figcaption>cliff/agreement</figcaption>" in page
    assert (
        '<span class="s mistake">' in page and "first_mistake_index=" in page
    )  # the rule teacher's raw answer
    assert '<span class="s prefix">' in page or '<span class="s mistake"><sup>[0]</sup>' in page


@pytest.mark.slow
@needs_browser
@pytest.mark.browser
def test_reports_of_short_toy_runs_draw_in_a_real_browser(short_toy_runs):
    for run in short_toy_runs:
        if not (run / "report.html").exists():  # this test alone: write the page first
            assert cli.main(["report", str(run)]) == 0
        assert_draws_without_errors(run / "report.html")


def test_the_eval_hint_uses_the_runs_own_template_and_dataset(tmp_path):
    """A run without an eval summary: the hint is evaluated with the run's prompt template and columns (read from its
    card's reproduce command) on its dataset's held-out split, not on the toy benchmark with the default template."""
    from hf_meds_cliff.report import eval_command_hint

    smollm2 = tmp_path / "smollm2-grpo"
    smollm2.mkdir()
    (smollm2 / "README.md").write_text(
        "## GRPO settings\n\n### Reproduce\n\n```bash\nhf-meds-cliff grpo --model_name_or_path smollm2-135m "
        "--dataset_name data/smollm2-arith/train.jsonl --problem_column problem --answer_column answer "
        "--prompt_template one_shot_boxed --output_dir outputs/smollm2-grpo\n```\n"
    )
    hint = eval_command_hint(smollm2)
    assert "--benchmarks HELD_OUT_SPLIT_OF_data/smollm2-arith/train.jsonl" in hint
    assert "--prompt_template one_shot_boxed --problem_column problem --answer_column answer" in hint
    assert "--benchmarks toy" not in hint and "qwen_math" not in hint
    page = write_report(smollm2).read_text()
    assert "one_shot_boxed" in page.split('id="passk"')[1]

    toy = tmp_path / "toy-meds"
    toy.mkdir()
    assert "--benchmarks toy --output_dir" in eval_command_hint(toy)  # no card: the toy world's defaults
