"""math-verify's float precision and strict mode reach the pass@k evaluation (``eval_passk.py`` flags)."""

from __future__ import annotations

import json

import pytest
from transformers import HfArgumentParser

from hf_meds_cliff.evaluation import EvalArguments, run_evaluation
from hf_meds_cliff.evaluation.generation import Sample


class BoxingBackend:
    """Every sample boxes the answer written for its problem."""

    name = "boxing"

    def __init__(self, boxed: dict[str, str]):
        self.boxed = boxed

    def problems_per_call(self, num_samples):
        return 4

    def generate(self, prompts, seeds, settings):
        return [
            [Sample(text=f"So \\boxed{{{self.boxed[p[-1]['content']]}}}.", num_tokens=4, truncated=False)]
            * settings.num_samples
            for p in prompts
        ]


@pytest.fixture
def benchmark_file(tmp_path):
    path = tmp_path / "bench.jsonl"
    rows = [{"problem": "pi to 8 places?", "answer": "3.14159265"}, {"problem": "name f", "answer": "f(x)"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _args(benchmark_file, output_dir, *flags: str) -> EvalArguments:
    command = [
        "--model_name_or_path",
        "scripted-model",
        "--output_dir",
        str(output_dir),
        "--benchmarks",
        str(benchmark_file),
        "--num_samples",
        "2",
        "--progress",
        "false",
        "--verify_workers",
        "1",
        *flags,
    ]
    (args,) = HfArgumentParser(EvalArguments).parse_args_into_dataclasses(command)
    return args


def test_eval_precision_and_strict_flags(tmp_path, benchmark_file):
    backend = BoxingBackend({"pi to 8 places?": "3.1416", "name f": "f(y)"})
    default = _args(benchmark_file, tmp_path / "default")
    assert (default.verify_float_rounding, default.verify_strict) == (6, True)  # math-verify's defaults
    strict_summary = run_evaluation(default, backend=backend)
    assert strict_summary["benchmarks"]["bench"]["mean@n"] == 0.0

    lenient = _args(
        benchmark_file, tmp_path / "lenient", "--verify_float_rounding", "3", "--verify_strict", "false"
    )
    assert (lenient.verify_float_rounding, lenient.verify_strict) == (3, False)
    lenient_summary = run_evaluation(lenient, backend=backend)
    assert lenient_summary["benchmarks"]["bench"]["mean@n"] == 1.0

    # the verdicts in samples.jsonl depend on these settings: a resume must not mix them
    with pytest.raises(ValueError, match=r"verify_strict: False -> True.*--overwrite"):
        run_evaluation(
            _args(benchmark_file, tmp_path / "lenient", "--verify_float_rounding", "3"), backend=backend
        )
    with pytest.raises(ValueError, match="verify_float_rounding=-1"):
        _args(benchmark_file, tmp_path / "bad", "--verify_float_rounding", "-1")


def test_resume_of_a_run_recorded_before_the_scoring_flags(tmp_path, benchmark_file):
    """An eval_config.json without the new keys resumes with the defaults (what it was scored with)."""
    backend = BoxingBackend({"pi to 8 places?": "3.14159265", "name f": "f(x)"})
    args = _args(benchmark_file, tmp_path / "run")
    run_evaluation(args, backend=backend)
    config_path = tmp_path / "run" / "eval_config.json"
    config = json.loads(config_path.read_text())
    del config["verify_float_rounding"], config["verify_strict"]
    config_path.write_text(json.dumps(config))
    assert run_evaluation(args, backend=backend)["benchmarks"]["bench"]["mean@n"] == 1.0
    with pytest.raises(ValueError, match="verify_strict: True -> False"):
        run_evaluation(_args(benchmark_file, tmp_path / "run", "--verify_strict", "false"), backend=backend)
