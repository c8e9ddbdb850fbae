"""``hf-meds-cliff report`` on a Cliff code run: numbered program lines, the mistaken line, the failing test."""

from __future__ import annotations

import json
import re

from hf_meds_cliff.cliff import split_code_units
from hf_meds_cliff.report import write_report

XSS = '<img src=x onerror="alert(1)">'
COMPLETION = (
    "Sum the numbers with a loop.\n"
    "```python\n"
    "n = int(input())\n"
    "total = 0\n"
    "for i in range(n):\n"
    "    total += i\n"
    f"print(total)  # {XSS}\n"
    "```"
)
EXECUTION = "The program failed test 1 of 3: wrong answer.\nInput:\n```\n3\n```\nExpected output:\n```\n6\n```\nActual output:\n```\n3\n```"


def test_code_rollouts_show_numbered_lines_the_mistaken_line_and_the_failing_test(tmp_path):
    spans = split_code_units(COMPLETION)
    record = {
        "step": 1, "sample": 1, "domain": "code", "prompt_key": "k", "problem": "Print 1 + ... + n.",
        "ground_truth": json.dumps({"tests": [{"input": "3\n", "output": "6\n"}], "fn_name": None}),
        "completion": COMPLETION, "sentences": [list(span) for span in spans], "is_truncated": False,
        "group_mode": "cliff", "first_mistake": 3, "source": "judged", "agreed": True,
        "teacher_raw": ['range(n) skips n.\n{"first_mistake": 3}'], "teacher_statuses": ["ok"], "teacher_votes": [3],
        "reference": "```python\nn = int(input())\nprint(n * (n + 1) // 2)\n```", "execution": EXECUTION,
    }  # fmt: skip
    math_record = {
        **record,
        "sample": 2,
        "domain": "math",
        "completion": "1 + 2 = 4.",
        "sentences": [[0, 10]],
    }
    math_record.update(first_mistake=0, execution=None)
    (tmp_path / "cliff_rollouts.jsonl").write_text(json.dumps(record) + "\n" + json.dumps(math_record) + "\n")
    page = write_report(tmp_path).read_text()

    article = page.split('<article class="rollout"')[1]  # newest first: sample 1 before sample 2
    assert "· code ·" in article and 'class="completion code"' in article
    assert "first mistake at unit 3: for i in range(n):" in article
    # every unit numbered, in order; the mistaken one highlighted, the earlier ones prefix, the later ones suffix
    numbers = [int(n) for n in re.findall(r"<sup>\[(\d+)\]</sup>", article)]
    assert numbers == list(range(len(spans)))
    kinds = re.findall(r'<span class="s (\w+)"><sup>\[(\d+)\]', article)
    assert [kind for kind, _ in kinds] == ["prefix"] * 3 + ["mistake"] + ["suffix"] * (len(spans) - 4)
    assert '<span class="s mistake"><sup>[3]</sup>for i in range(n):</span><bdi>\n</bdi>' in article
    # the failing test the judge saw, escaped; nothing from the run is executable in the page
    assert "running the program (what the judge saw)" in article
    assert "Expected output:\n```\n6\n```\nActual output:\n```\n3\n```" in article
    assert XSS not in page and "&lt;img src=x" in article
    # the math rollout keeps the sentence wording
    math_article = page.split('<article class="rollout"')[2]
    assert "· code ·" not in math_article and "running the program" not in math_article


def test_report_survives_sibling_folders_vanishing_while_it_looks_for_eval_summaries(tmp_path, monkeypatch):
    """A run under a shared parent (``/tmp``): a sibling deleted mid-walk makes ``Path.glob`` raise; the report
    retries the walk instead of failing."""
    from pathlib import Path

    run = tmp_path / "run"
    run.mkdir()
    (run / "cliff_rollouts.jsonl").write_text("")
    real_glob, failures = Path.glob, []

    def flaky_glob(self, pattern):
        if self == tmp_path and not failures:
            failures.append(pattern)
            raise FileNotFoundError(2, "No such file or directory", str(tmp_path / "vanished"))
        return real_glob(self, pattern)

    monkeypatch.setattr(Path, "glob", flaky_glob)
    assert write_report(run).is_file() and failures
