"""pass@k evaluation: estimator vs brute force, benchmarks, runner end to end (scripted and toy model), resume."""

from __future__ import annotations

import csv
import itertools
import json
import math
import runpy
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from hf_meds_cliff.evaluation import (
    PASS_AT_K_METRIC_PATH,
    EvalArguments,
    Sample,
    compare_summaries,
    default_k_values,
    distinct_answers,
    load_benchmark,
    maj_at_n,
    majority_answer,
    mean_at_n,
    pass_at_k,
    run_evaluation,
)
from hf_meds_cliff.evaluation import runner as runner_module
from hf_meds_cliff.evaluation.benchmarks import gsm8k_answer, listed_answer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------------------------
# Estimator


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Fraction of all k-subsets of n samples (c correct) that contain a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(samples[i] for i in subset) for subset in subsets), len(subsets))


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_matches_enumeration_of_all_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = brute_force_pass_at_k(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12), (n, c, k)


def test_pass_at_k_exact_one_when_every_subset_hits():
    for n, c, k in [(5, 3, 3), (4, 4, 1), (128, 120, 16), (10, 1, 10)]:
        assert pass_at_k(n, c, k) == 1.0  # exact, not approximately


def test_pass_at_k_hand_values_and_large_n_stability():
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(10, 0, 5) == 0.0
    # against exact big-integer binomials where they are still computable
    for n, c, k in [(300, 7, 50), (1000, 3, 200), (128, 1, 64)]:
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-10)
    # far beyond float range for binomials: C(100000, 50000) overflows, the product form does not
    value = pass_at_k(100_000, 2, 50_000)
    assert np.isfinite(value) and value == pytest.approx(0.75, abs=1e-4)


def test_pass_at_k_vectorised():
    n = np.array([[4, 4, 8], [16, 16, 16]])
    c = np.array([[0, 2, 8], [1, 3, 16]])
    result = pass_at_k(n, c, 2)
    assert result.shape == (2, 3)
    expected = [[pass_at_k(int(a), int(b), 2) for a, b in zip(row_n, row_c)] for row_n, row_c in zip(n, c)]
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-15)
    assert result[0, 2] == 1.0
    assert pass_at_k([8, 8], 4, 1).tolist() == pytest.approx([0.5, 0.5])  # broadcasting a scalar c


@pytest.mark.parametrize(
    ("n", "c", "k", "error", "match"),
    [
        (4, 2, 5, ValueError, "k=5 cannot exceed n.*n=4, c=2"),
        (4, 5, 1, ValueError, "cannot exceed n.*n=4, c=5"),
        (4, -1, 1, ValueError, "c must be >= 0.*c=-1"),
        (-3, 0, 1, ValueError, "n must be >= 1.*n=-3"),
        (0, 0, 1, ValueError, "n must be >= 1.*n=0"),
        (4, 2, 0, ValueError, "k=0 must be >= 1"),
        ([4, 4, 2], [1, 1, 1], 3, ValueError, r"k=3 cannot exceed n.*n=2, c=1, k=3 at index \(2,\)"),
        (4.5, 1, 1, TypeError, "whole numbers"),
        (4, 1, True, TypeError, "k must be an integer"),
        (4, 1, 1.0, TypeError, "k must be an integer"),
    ],
)
def test_pass_at_k_bad_input(n, c, k, error, match):
    with pytest.raises(error, match=match):
        pass_at_k(n, c, k)


def test_mean_and_majority():
    assert mean_at_n([[True, False, False, False], [True, True]]) == pytest.approx(0.625)
    answers = [["\\dfrac{1}{2}", "\\frac{1}{2}", "3", None], ["7", "8", "8", "7"], [None, None]]
    correct = [[True, True, False, False], [False, True, True, False], [False, False]]
    assert majority_answer(answers[0]) == 0
    assert majority_answer(answers[1]) == 0  # tie 2-2: the first sample shown
    # maj@n: problem 0's majority (1/2, two votes) is correct: 1; problem 1 ties 2-2 between a wrong "7" and a right
    # "8": each tied answer gets half the credit, 1/2, whatever the order; problem 2 has no vote: 0 -> (1 + 1/2) / 3
    assert maj_at_n(answers, correct) == pytest.approx(1.5 / 3)
    reordered = [list(reversed(a)) for a in answers]
    assert maj_at_n(reordered, [list(reversed(c)) for c in correct]) == pytest.approx(1.5 / 3)
    assert [distinct_answers(a) for a in answers] == [2, 2, 0]
    with pytest.raises(ValueError, match="Problem 0 has no samples"):
        mean_at_n([[]])
    with pytest.raises(ValueError, match="2 answers vs 1 correctness"):
        maj_at_n([["1", "2"]], [[True]])


def test_default_k_values():
    assert default_k_values(128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert default_k_values(1) == [1]
    assert default_k_values(6) == [1, 2, 4, 6]


def test_evaluate_metric_loads_offline():
    import evaluate

    metric = evaluate.load(PASS_AT_K_METRIC_PATH)
    result = metric.compute(
        predictions=[["\\boxed{4}", "\\boxed{5}", "none"], ["\\boxed{2}", "\\boxed{2}", "\\boxed{3}"]],
        references=["4", "3"],
        k=[1, 3],
    )
    # maj@n: problem 0 ties 4 (right) and 5 (wrong) 1-1: 1/2; problem 1 votes 2 (wrong): 0 -> 1/4
    assert result == pytest.approx({"pass@1": 1 / 3, "pass@3": 1.0, "mean@n": 1 / 3, "maj@n": 0.25})
    with pytest.raises(ValueError, match=r"k values \[5\] are outside \[1, n=3\]"):
        metric.compute(predictions=[["a", "b", "c"]], references=["1"], k=[5])


# ----------------------------------------------------------------------------------------------
# Benchmarks


def test_unknown_benchmark_lists_known_ones():
    with pytest.raises(ValueError, match="Unknown benchmark 'aime2099'.*toy, aime24, aime25, amc23, math500"):
        load_benchmark("aime2099")


def test_local_file_columns(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [
        {"question": "What is 1+1?", "target": "2"},
        {"question": "Half of 1?", "target": "$\\frac{1}{2}$"},
        {"question": "What is 1+1?", "target": "2"},
        {"question": "No answer", "target": ""},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        ValueError, match=r"lacks the column\(s\) \['answer', 'problem'\].*--problem_column <column>"
    ):
        load_benchmark(str(path))
    problems = load_benchmark(
        str(path), problem_column="question", answer_column="target", prompt_template="qwen_math_user"
    )
    assert [p.answer for p in problems] == ["2", "\\frac{1}{2}"]  # duplicate and answerless rows dropped
    assert problems[0].benchmark == "mine"
    assert problems[0].prompt[-1]["content"].endswith("put your final answer within \\boxed{}.")
    assert len({p.problem_id for p in problems}) == 2
    with pytest.raises(ValueError, match="does not exist"):
        load_benchmark(str(tmp_path / "missing.parquet"))


def test_local_file_answer_from_solution(tmp_path):
    path = tmp_path / "math-like.jsonl"
    rows = [
        {"problem": "Half of 1?", "solution": "Divide: $1/2 = \\frac{1}{2}$, so $\\boxed{\\frac{1}{2}}$."},
        {"problem": "No box", "solution": "It is 3."},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    whole = load_benchmark(str(path), answer_column="solution")
    assert whole[0].answer == rows[0]["solution"]  # without the flag the worked solution is the "answer"
    problems = load_benchmark(str(path), answer_column="solution", answer_from_solution=True)
    assert [p.answer for p in problems] == ["\\frac{1}{2}"]  # the boxed answer; the box-less row is skipped


def test_answer_post_processing():
    assert gsm8k_answer("He pays 3 * 4 = <<3*4=12>>12.\n#### 1,200") == "1200"
    with pytest.raises(ValueError, match="without '####"):
        gsm8k_answer("12")
    assert listed_answer(["$3$", "$\\sqrt{2}$"]) == "3, \\sqrt{2}"


def test_toy_benchmark_prompts_are_used_as_they_are():
    problems = load_benchmark("toy", max_problems=3)
    assert len(problems) == 3
    assert problems[0].prompt == [{"role": "user", "content": problems[0].prompt[0]["content"]}]
    assert problems[0].prompt[0]["content"].startswith("Compute")
    assert all(p.answer.lstrip("-").isdigit() for p in problems)


# ----------------------------------------------------------------------------------------------
# Runner with a scripted backend: exact numbers, resume, corrupt lines


class ScriptedBackend:
    """Problem i gets ``correct_counts[i]`` correct samples (first), then wrong or unboxed ones."""

    name = "scripted"

    def __init__(self, answers: dict[str, str], correct_by_problem: dict[str, int]):
        self.answers = answers
        self.correct_by_problem = correct_by_problem
        self.generated: list[str] = []

    def problems_per_call(self, num_samples):
        return 2

    def generate(self, prompts, seeds, settings):
        groups = []
        for prompt in prompts:
            question = prompt[-1]["content"]
            self.generated.append(question)
            truth = int(self.answers[question])
            correct = self.correct_by_problem[question]
            group = []
            for index in range(settings.num_samples):
                if index < correct:
                    text = f"So \\boxed{{{truth}}}."
                elif index % 2:
                    text = "I am not sure."
                else:
                    text = f"\\boxed{{{truth + 1}}}"
                group.append(Sample(text=text, num_tokens=5 + index, truncated=False))
            groups.append(group)
        return groups


def _toy_args(output_dir, **overrides):
    settings = {
        "model_name_or_path": "scripted-model",
        "output_dir": str(output_dir),
        "benchmarks": ["toy"],
        "num_samples": 4,
        "max_problems": 3,
        "progress": False,
    }
    settings.update(overrides)
    return EvalArguments(**settings)


def test_runner_exact_numbers_and_resume(tmp_path):
    problems = load_benchmark("toy", max_problems=5)
    answers = {p.prompt[-1]["content"]: p.answer for p in problems}
    counts = dict(zip(answers, [0, 1, 4, 2, 3]))
    backend = ScriptedBackend(answers, counts)
    summary = run_evaluation(_toy_args(tmp_path), backend=backend)
    toy = summary["benchmarks"]["toy"]
    assert toy["num_problems"] == 3 and toy["num_samples"] == 4
    # n = 4 samples, c = 0, 1, 4 correct; pass@k = 1 - C(n - c, k) / C(n, k) per problem, then the mean:
    # k=1: 0, 1/4, 1 -> 5/12; k=2: 0, 1 - 3/6, 1 -> 1/2; k=4: 0, 1 - 0/1, 1 -> 2/3
    assert toy["pass@k"] == pytest.approx({"1": 5 / 12, "2": 1 / 2, "4": 2 / 3})
    assert toy["mean@n"] == pytest.approx(5 / 12)
    # problem 0 votes wrong: 0; problem 1 ties 1-1 between the correct answer and a wrong one: 1/2 (whichever comes
    # first); problem 2 all correct: 1 -> (0 + 1/2 + 1) / 3
    assert toy["maj@n"] == pytest.approx(1.5 / 3)
    assert toy["no_boxed_fraction"] == pytest.approx(4 / 12)  # odd indices past the correct ones
    assert len(backend.generated) == 3

    # Resume: nothing left to generate
    def no_backend(*args, **kwargs):
        raise AssertionError("a resumed run with every problem done must not build a backend")

    original_build = runner_module.build_backend
    runner_module.build_backend = no_backend
    try:
        again = run_evaluation(_toy_args(tmp_path))
    finally:
        runner_module.build_backend = original_build
    assert again["benchmarks"] == summary["benchmarks"]

    # Resume with two more problems and a corrupt tail line: only the new problems are generated
    samples_path = tmp_path / "samples.jsonl"
    with samples_path.open("a") as handle:
        handle.write('{"benchmark": "toy", "problem_id": "trunc')
    backend.generated.clear()
    extended = run_evaluation(_toy_args(tmp_path, max_problems=5), backend=backend)
    assert backend.generated == [p.prompt[-1]["content"] for p in problems[3:]]
    assert extended["benchmarks"]["toy"]["num_problems"] == 5
    # the two new problems have c = 2 and 3: pass@2 adds 1 - 1/6 and 1, pass@4 adds 1 and 1
    assert extended["benchmarks"]["toy"]["pass@k"] == pytest.approx(
        {"1": 10 / 20, "2": (10 / 3) / 5, "4": 4 / 5}
    )
    lines = samples_path.read_text().splitlines()
    assert len(lines) == 20 and all(json.loads(line) for line in lines)

    # Different sampling settings must not silently mix with these results
    with pytest.raises(ValueError, match=r"different settings \(temperature: 1.0 -> 0.6\).*--overwrite"):
        run_evaluation(_toy_args(tmp_path, temperature=0.6), backend=backend)


def test_eval_arguments_bad_input(tmp_path):
    with pytest.raises(ValueError, match=r"k values \[16\] are outside \[1, n=8\]"):
        EvalArguments(model_name_or_path="m", output_dir=str(tmp_path), num_samples=8, k_values=[1, 16])
    with pytest.raises(ValueError, match=r"num_samples \(n\) = 0 must be >= 1"):
        EvalArguments(model_name_or_path="m", output_dir=str(tmp_path), num_samples=0)
    with pytest.raises(ValueError, match="Unknown benchmark 'nope'"):
        EvalArguments(model_name_or_path="m", output_dir=str(tmp_path), benchmarks=["nope"])
    with pytest.raises(ValueError, match="does not exist"):
        EvalArguments(model_name_or_path=str(tmp_path / "no-model"), output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="--model_name_or_path is required"):
        EvalArguments(output_dir=str(tmp_path))
    toy = EvalArguments(model_name_or_path="toy", output_dir=str(tmp_path))  # the cached warm-up policy
    assert toy.model_label() == "toy-warmup" and toy.max_new_tokens == 96 and toy.k_values == [1, 2, 4, 8]


# ----------------------------------------------------------------------------------------------
# End to end on the toy policy with the transformers backend


@pytest.fixture
def toy_model_path(request, tmp_path_factory):
    """The shared warmed-up toy policy when the suite provides it, else a random tiny toy model."""
    try:
        return Path(request.getfixturevalue("toy_policy_path"))
    except pytest.FixtureLookupError:
        from hf_meds_cliff.toy import build_toy_model, build_toy_tokenizer

        folder = tmp_path_factory.mktemp("random-toy-model")
        tokenizer = build_toy_tokenizer()
        build_toy_model(tokenizer, seed=0).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder


@pytest.fixture
def one_torch_thread():
    """Generation of a tiny model is dominated by thread synchronisation: on a shared 2-core machine two
    threads were measured 30x slower per forward than one, so this test generates single-threaded."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.mark.slow
def test_end_to_end_toy_transformers_backend(tmp_path, toy_model_path, monkeypatch, one_torch_thread):
    output_dir = tmp_path / "run"
    args = EvalArguments(
        model_name_or_path=str(toy_model_path),
        output_dir=str(output_dir),
        benchmarks=["toy"],
        num_samples=4,
        max_problems=6,
        backend="transformers",
        batch_size=8,
        label="toy",
        progress=False,
        verify_timeout=20,
    )
    summary = run_evaluation(args)
    for name in ("samples.jsonl", "summary.json", "passk.csv", "passk.png", "eval_config.json"):
        assert (output_dir / name).is_file(), name
    records = [json.loads(line) for line in (output_dir / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 6 * 4
    assert {r["sample_index"] for r in records} == {0, 1, 2, 3}
    assert all(r["num_tokens"] <= 96 and isinstance(r["completion"], str) for r in records)

    # the summary is what the JSONL says
    by_problem: dict[str, list[bool]] = {}
    for r in records:
        by_problem.setdefault(r["problem_id"], []).append(r["correct"])
        assert r["correct"] == (r["status"] == "correct")
    c = np.array([sum(v) for v in by_problem.values()])
    written = json.loads((output_dir / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    toy = written["benchmarks"]["toy"]
    assert written["settings"]["backend"] == "transformers"
    for k in (1, 2, 4):
        assert toy["pass@k"][str(k)] == pytest.approx(float(np.mean(pass_at_k(4, c, k))))
    assert toy["mean@n"] == pytest.approx(c.sum() / 24)
    with (output_dir / "passk.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert (
        len(rows) == 1
        and rows[0]["benchmark"] == "toy"
        and float(rows[0]["pass@4"]) == pytest.approx(toy["pass@k"]["4"])
    )
    png = (output_dir / "passk.png").read_bytes()
    assert png.startswith(PNG_MAGIC)
    import matplotlib.image

    assert matplotlib.image.imread(output_dir / "passk.png").ndim == 3

    # resume: nothing is regenerated, the same numbers come back
    monkeypatch.setattr(
        runner_module, "build_backend", lambda *a, **k: pytest.fail("regenerated finished problems")
    )
    assert run_evaluation(args)["benchmarks"] == summary["benchmarks"]

    # several runs compared (through the script's argument parsing): a second run on the same problems, every
    # sample correct
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other = json.loads(json.dumps(written))
    other["model"] = "toy-after"
    other["benchmarks"]["toy"]["pass@k"] = {k: 1.0 for k in toy["pass@k"]}
    (other_dir / "summary.json").write_text(json.dumps(other))
    (other_dir / "samples.jsonl").write_text("".join(json.dumps({**r, "correct": True}) + "\n" for r in records))
    script = Path(__file__).resolve().parents[1] / "scripts" / "eval_passk.py"
    argv = [
        "eval_passk.py",
        "--compare",
        str(output_dir),
        str(other_dir / "summary.json"),
        "--output_dir",
        str(tmp_path / "cmp"),
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exited:  # the script exits with the command's status, as a CLI does
        runpy.run_path(str(script), run_name="__main__")
    assert exited.value.code == 0
    assert (tmp_path / "cmp" / "compare_passk.png").read_bytes().startswith(PNG_MAGIC)
    with (tmp_path / "cmp" / "compare_passk.csv").open() as handle:
        assert [row["model"] for row in csv.DictReader(handle)] == ["toy", "toy-after"]
    comparison = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert comparison["benchmarks"]["toy"]["pass@k"]["1"]["difference"]["toy-after"] == pytest.approx(
        1 - toy["pass@k"]["1"]
    )


def test_compare_rejects_non_summaries(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a pass@k summary"):
        compare_summaries([tmp_path / "x.json"], tmp_path / "out")
    with pytest.raises(ValueError, match="No summary at"):
        compare_summaries([tmp_path / "missing"], tmp_path / "out")


def test_backend_selection_errors(monkeypatch):
    from hf_meds_cliff.evaluation import build_backend, generation

    with pytest.raises(ValueError, match="backend='bogus' is not one of"):
        build_backend("bogus", "m")
    monkeypatch.setattr(generation.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="vLLM is not installed"):
        build_backend("vllm", "m")
    assert generation.vllm_available() is False


@pytest.mark.parametrize("on_cpu", [False, True])
def test_vllm_backend_against_a_recording_fake(monkeypatch, toy_tokenizer, on_cpu):
    """The vLLM backend's calls (engine args, one SamplingParams(n=...) per prompt, LoRA) and output parsing; on CPU
    vLLM no per-problem seeds (its CPU sampler cannot rewind a seeded generator, see ``VLLMBackend``)."""
    import types

    from hf_meds_cliff.evaluation import SamplingSettings, VLLMBackend

    calls = {}

    class FakeLLM:
        def __init__(self, **kwargs):
            calls["engine"] = kwargs

        def get_tokenizer(self):
            return toy_tokenizer

        def generate(self, prompts, sampling_params, lora_request=None, use_tqdm=True):
            calls["generate"] = (prompts, sampling_params, lora_request)
            return [
                types.SimpleNamespace(
                    outputs=[
                        types.SimpleNamespace(
                            text=f"\\boxed{{{i}}}", token_ids=[1] * (i + 2), finish_reason=reason
                        )
                        for i, reason in enumerate(["stop"] * (params.n - 1) + ["length"])
                    ]
                )
                for params in sampling_params
            ]

    fake_vllm = types.ModuleType("vllm")
    fake_vllm.LLM = FakeLLM
    fake_vllm.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    fake_lora = types.ModuleType("vllm.lora.request")
    fake_lora.LoRARequest = lambda name, lora_id, path: ("lora", name, lora_id, path)
    fake_platforms = types.ModuleType("vllm.platforms")
    fake_platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: on_cpu)
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", fake_platforms)
    monkeypatch.setitem(sys.modules, "vllm.lora", types.ModuleType("vllm.lora"))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", fake_lora)

    backend = VLLMBackend("some/model", adapter_path="adapter-dir", max_model_len=4096)
    assert calls["engine"]["enable_lora"] is True and calls["engine"]["max_model_len"] == 4096
    prompts = [
        [{"role": "user", "content": "Compute 1 + 2."}],
        [{"role": "user", "content": "Compute 3 * 2."}],
    ]
    groups = backend.generate(
        prompts, [11, 12], SamplingSettings(num_samples=3, temperature=1.0, top_p=0.9, max_new_tokens=64)
    )
    texts, params, lora = calls["generate"]
    assert texts == [
        toy_tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts
    ]
    seeds = (None, None) if on_cpu else (11, 12)
    assert [(p.n, p.seed, p.top_p, p.max_tokens) for p in params] == [(3, seeds[0], 0.9, 64), (3, seeds[1], 0.9, 64)]
    assert lora == ("lora", "adapter", 1, "adapter-dir")
    assert len(groups) == 2
    assert [(s.text, s.num_tokens, s.truncated) for s in groups[0]] == [
        ("\\boxed{0}", 2, False),
        ("\\boxed{1}", 3, False),
        ("\\boxed{2}", 4, True),
    ]
