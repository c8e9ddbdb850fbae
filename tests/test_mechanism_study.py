"""The mechanism world's traps and the mechanism study's quick mode."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, load_module

from hf_meds_cliff.toy import ToyProblem, first_mistake_index
from hf_meds_cliff.toy.task import ToyTaskConfig
from hf_meds_cliff.toy.traps import (
    first_trap_index,
    iter_trapped_training_problems,
    trap_value,
    trapped_solution,
)
from hf_meds_cliff.toy.warmup import WarmupSettings


@pytest.mark.parametrize(
    ("first", "operations", "trap_index", "trapped_answer", "trapped_step"),
    [
        (17, (("+", 25), ("-", 3)), 0, 29, "17 + 25 = 32."),  # carry dropped: 32 - 3
        (5, (("-", 12), ("+", 1)), 0, 8, "5 - 12 = 7."),  # sign dropped: 7 + 1
        (6, (("+", 2), ("*", 3)), 1, 12, "8 * 3 = 12."),  # brackets ignored: 6 + 2 * 3
        (8, (("-", 2), ("*", 4), ("+", 1)), 1, 1, "6 * 4 = 0."),  # 8 - 2 * 4 = 0, then 0 + 1
    ],
)
def test_traps_by_hand(first, operations, trap_index, trapped_answer, trapped_step):
    problem = ToyProblem.from_operations(first, operations)
    solution, answer, index = trapped_solution(problem)
    assert (index, answer) == (trap_index, trapped_answer)
    assert solution.split(". ")[index] + "." == trapped_step
    assert solution.endswith(f"\\boxed{{{trapped_answer}}}.")
    # The rule teacher locates the trap as the first mistake, after a correct prefix of `index` sentences.
    assert first_mistake_index(problem.question, solution) == trap_index


def test_no_trap_where_none_applies():
    problem = ToyProblem.from_operations(
        3, (("+", 4), ("*", 2))
    )  # 3 + 4 has no carry; 7 * 2 follows a "+" ...
    assert trap_value(problem, 0) is None
    assert trap_value(problem, 1) == 11  # ... so the bracket trap applies: 3 + 4 * 2
    assert trapped_solution(ToyProblem.from_operations(2, (("*", 3), ("+", 1)))) is None
    assert first_trap_index(ToyProblem.from_operations(12, (("+", 5),))) is None


def test_trapped_stream_rate_and_the_plain_warmup_cache_key():
    stream = iter_trapped_training_problems(seed=0, config=ToyTaskConfig(), trap_rate=0.5)
    problems = [next(stream) for _ in range(400)]
    eligible = [p for p in problems if trapped_solution(p) is not None]
    trapped = [p for p in eligible if p.solution == trapped_solution(p)[0]]
    assert 0.4 < len(trapped) / len(eligible) < 0.6
    assert all(p.solution != trapped_solution(p)[0] for p in problems if p not in trapped and p in eligible)
    # The plain toy warm-up keeps its cache key (the shared cached policy stays valid); traps get their own.
    assert WarmupSettings().cache_key() == "449da3e03fe6f7df"
    assert WarmupSettings(trap_rate=0.3).cache_key() != WarmupSettings().cache_key()
    with pytest.raises(ValueError, match="trap_rate"):
        WarmupSettings(trap_rate=1.5)


def test_report_statistics_by_hand():
    report = load_module(ROOT / "studies" / "mechanism_report.py", "mechanism_report")
    assert report.expected_distinct([1, 1, 2, 3], 2) == pytest.approx(
        11 / 6
    )  # only the pair {1, 1} has one value
    assert report.expected_distinct([None, None, 4], 3) == 2.0 and report.expected_distinct([5], 0) == 0.0
    test = report.paired_test([1.0, 2.0, 3.0])
    assert test["mean"] == 2.0 and test["sign_flip_p"] == pytest.approx(
        2 / 8
    )  # all + or all − are as extreme
    assert test["t_p"] == pytest.approx(
        0.0742, abs=1e-3
    )  # t = 2 / (1 / sqrt(3)) = 3.46 with 2 degrees of freedom


@pytest.mark.slow
@pytest.mark.integration
def test_mechanism_study_quick_mode(toy_policy_path, tmp_path):
    study = load_module(ROOT / "studies" / "mechanism_study.py", "mechanism_study")
    report = tmp_path / "docs" / "mechanism_study.md"
    output = tmp_path / "study"
    argv = ["--quick", "--policy", str(toy_policy_path), "--output_dir", str(output), "--report", str(report)]
    assert study.main(argv) == 0
    runs = {p.stem: json.loads(p.read_text()) for p in (output / "runs").glob("*.json")}
    assert set(runs) == {f"{m}-seed0" for m in study.METHODS} | {"warm-up-seed0"}
    for run in runs.values():
        assert run["seed"] == 0
        assert set(run["eval"]["pass@k"]) == {"1", "2", "3", "4"}
        assert 0.0 <= run["probe"][-1]["reward"] <= 1.0
    for method in ("meds", "meds_strong"):
        assert any("meds/advantage_shift" in h for h in runs[f"{method}-seed0"]["history"])
    for method in ("cliff", "grpo_teacher"):
        assert any("cliff/groups_cliff" in h for h in runs[f"{method}-seed0"]["history"])
    # Resume: a second call finds every run and trains nothing.
    mtimes = {p: p.stat().st_mtime for p in (output / "runs").glob("*.json")}
    assert study.main(argv) == 0
    assert mtimes == {p: p.stat().st_mtime for p in (output / "runs").glob("*.json")}
    # The premise check: GRPO again with every wrong answer kept, against a larger warm-up sample.
    assert study.main([*argv, "--premise_check", "0"]) == 0
    premise = json.loads((output / "premise" / "grpo-seed0.json").read_text())
    assert all(len(p["wrong_answers"]) == study.QUICK.pool_size for p in premise["probe"])
    text = report.read_text()
    assert "no-collapse expectation" in text
    assert "| meds_strong (n=1) |" in text and "figures/mechanism_premise_grpo.png" in text
    assert (report.parent / "figures" / "mechanism_passk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (report.parent / "mechanism_study_results" / "grpo-seed0.json").exists()
