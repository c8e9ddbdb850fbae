"""The pass@k evaluation run: generate ``n`` samples per problem, score them, write results, resume.

Output directory layout:

- ``samples.jsonl``: one line per sample (``benchmark``, ``problem_id``, ``sample_index``, ``answer``,
  ``completion``, ``extracted``, ``status``, ``correct``, ``num_tokens``, ``truncated``); a problem's
  ``n`` lines are appended together once they are scored, so an interrupted run loses at most the
  batch in flight.
- ``eval_config.json``: the settings that determine the samples; a resumed run must match them.
- ``summary.json``: per benchmark ``pass@k`` for every k, ``mean@n``, ``maj@n``, answer diversity
  (distinct normalised answers per problem), no-box/timeout/error/truncation fractions, and the
  unweighted average over benchmarks. Computed from ``samples.jsonl`` alone.
- ``passk.csv`` and ``passk.png`` (pass@k against k on a log2 axis).

Resuming: re-running with the same output directory skips the problems whose ``n`` samples are all
in ``samples.jsonl`` (partial or corrupt lines from a crash are dropped and regenerated).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checkpointing import read_json_file, write_atomically, write_json_atomically
from ..data import PROMPT_TEMPLATES
from ..rewards import DEFAULT_FLOAT_ROUNDING, DEFAULT_TIMEOUT_SECONDS, MathVerifyPool, check_answers
from .benchmarks import EvalProblem, known_benchmarks, load_benchmark, resolve_benchmark_name
from .generation import BACKENDS, GenerationBackend, SamplingSettings, build_backend
from .plots import plot_pass_at_k, write_csv
from .summary import average_summaries, default_k_values, summarize_records, validate_k_values

logger = logging.getLogger(__name__)

TOY_MODEL = "toy"
"""``--model_name_or_path toy``: the cached warmed-up toy policy (the same one the training scripts start from)."""

SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "eval_config.json"
CSV_FILE = "passk.csv"
PLOT_FILE = "passk.png"

# Settings that change the samples: a resumed run must agree on them.
_SAMPLE_DEFINING_FIELDS = (
    "model_name_or_path",
    "adapter_path",
    "num_samples",
    "temperature",
    "top_p",
    "seed",
    "max_new_tokens",
    "prompt_template",
    "toy_seed",
    "verify_float_rounding",  # scoring settings: the records' verdicts depend on them
    "verify_strict",
    "answer_from_solution",
)


@dataclass
class EvalArguments:
    """Arguments of ``scripts/eval_passk.py`` and :func:`run_evaluation`."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "Model folder or Hub id to evaluate (required unless --compare), or `toy` for the cached "
            "warmed-up toy policy (built on first use, a few minutes on CPU)."
        },
    )
    output_dir: str | None = field(
        default=None, metadata={"help": "Folder for samples.jsonl, summary.json, passk.csv and passk.png."}
    )
    benchmarks: list[str] = field(
        default_factory=lambda: ["toy"],
        metadata={
            "help": f"Benchmark names ({', '.join(known_benchmarks())}) or local jsonl/parquet/csv files."
        },
    )
    adapter_path: str | None = field(default=None, metadata={"help": "Optional PEFT/LoRA adapter folder."})
    tokenizer_name_or_path: str | None = field(
        default=None, metadata={"help": "Tokenizer (default: the adapter's if it has one, else the model's)."}
    )
    label: str | None = field(
        default=None, metadata={"help": "Model name in plots and tables (default: folder name)."}
    )
    num_samples: int = field(
        default=8, metadata={"help": "Samples per problem, n (the MEDS paper uses 128)."}
    )
    k_values: list[int] | None = field(
        default=None, metadata={"help": "Budgets k to report (default: powers of two up to n, and n)."}
    )
    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature (paper: 1.0; 0 = greedy)."}
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling top-p (paper: 1.0)."})
    seed: int = field(
        default=0, metadata={"help": "Base seed; each problem's seed derives from it (paper: 0)."}
    )
    max_new_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Completion token limit (default: 96 when only the toy benchmark runs, else 3072)."
        },
    )
    prompt_template: str = field(
        default="qwen_math",
        metadata={
            "help": "How real benchmark problems become chat prompts (the toy prompts are used as they are).",
            "choices": [t for t in PROMPT_TEMPLATES if t != "keep"],
        },
    )
    chat_template_kwargs: str | None = field(
        default=None,
        metadata={"help": "JSON dict for apply_chat_template, e.g. '{\"enable_thinking\": false}'."},
    )
    problem_column: str | None = field(
        default=None, metadata={"help": "Problem column (local files / overrides)."}
    )
    answer_column: str | None = field(
        default=None, metadata={"help": "Answer column (local files / overrides)."}
    )
    answer_from_solution: bool = field(
        default=False,
        metadata={
            "help": "The answer column is a worked solution (MATH's `solution`): take its last \\boxed{} as the "
            "ground truth (problems without one are skipped)."
        },
    )
    id_column: str | None = field(
        default=None, metadata={"help": "Problem id column (default: hash of the problem)."}
    )
    max_problems: int | None = field(
        default=None, metadata={"help": "Only the first N problems of each benchmark."}
    )
    toy_num_problems: int = field(default=200, metadata={"help": "Size of the toy test split."})
    toy_seed: int = field(default=0, metadata={"help": "Seed of the toy test split."})
    backend: str = field(
        default="auto",
        metadata={
            "help": "Generation backend: vLLM when importable with a GPU (auto), or transformers.",
            "choices": list(BACKENDS),
        },
    )
    batch_size: int = field(default=64, metadata={"help": "transformers: sequences per generate call."})
    dtype: str = field(default="auto", metadata={"help": "Model dtype (auto: bf16 on GPU, fp32 on CPU)."})
    tensor_parallel_size: int = field(default=1, metadata={"help": "vLLM tensor parallel size."})
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "vLLM GPU memory fraction."})
    max_model_len: int | None = field(default=None, metadata={"help": "vLLM max model length."})
    verify_timeout: float = field(
        default=DEFAULT_TIMEOUT_SECONDS, metadata={"help": "Per-answer math-verify timeout in seconds."}
    )
    verify_workers: int = field(default=2, metadata={"help": "math-verify worker processes."})
    verify_float_rounding: int = field(
        default=DEFAULT_FLOAT_ROUNDING,
        metadata={
            "help": "math-verify's float_rounding: decimal places floats are rounded to before comparing."
        },
    )
    verify_strict: bool = field(
        default=True,
        metadata={
            "help": "math-verify's strict mode: variables matter (f(x) != f(y)) and sets are not tuples; "
            "false matches variables by position."
        },
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Discard earlier results in output_dir instead of resuming."}
    )
    compare: list[str] | None = field(
        default=None,
        metadata={"help": "Summary JSON files (or run folders) to plot together instead of evaluating."},
    )
    progress: bool = field(default=True, metadata={"help": "Show a tqdm progress bar."})

    def __post_init__(self):
        if self.compare:
            if not self.output_dir:
                raise ValueError("--compare needs --output_dir for the comparison plot and table.")
            return
        if not self.model_name_or_path:
            raise ValueError(
                "--model_name_or_path is required (a model folder or Hub id), unless --compare is given."
            )
        if not self.output_dir:
            raise ValueError("--output_dir is required: where samples.jsonl and summary.json go.")
        if not self.benchmarks:
            raise ValueError(f"Give at least one benchmark; known: {known_benchmarks()}.")
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(f"num_samples (n) = {self.num_samples!r} must be >= 1: pass@k needs samples.")
        self.k_values = validate_k_values(
            self.k_values or default_k_values(self.num_samples), self.num_samples
        )
        if self.max_new_tokens is None:
            only_toy = all(resolve_benchmark_name(b) == "toy" for b in self.benchmarks)
            self.max_new_tokens = 96 if only_toy else 3072
        SamplingSettings(self.num_samples, self.temperature, self.top_p, self.max_new_tokens)  # validates
        if not self.verify_timeout > 0:
            raise ValueError(f"verify_timeout={self.verify_timeout} must be > 0 seconds.")
        if isinstance(self.verify_float_rounding, bool) or not (
            isinstance(self.verify_float_rounding, int) and self.verify_float_rounding >= 0
        ):
            raise ValueError(
                f"verify_float_rounding={self.verify_float_rounding!r} must be a non-negative integer "
                f"(decimal places; math-verify's default is {DEFAULT_FLOAT_ROUNDING})."
            )
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={self.backend!r} is not one of {BACKENDS}.")
        if self.model_name_or_path == TOY_MODEL:
            return
        model_path = Path(self.model_name_or_path)
        looks_local = (
            model_path.is_absolute() or self.model_name_or_path.startswith(".") or model_path.exists()
        )
        if looks_local and not model_path.exists():
            raise ValueError(f"model_name_or_path={self.model_name_or_path!r} does not exist.")
        if self.adapter_path and not Path(self.adapter_path).exists():
            raise ValueError(f"adapter_path={self.adapter_path!r} does not exist.")

    def model_label(self) -> str:
        if self.label:
            return self.label
        if self.model_name_or_path == TOY_MODEL:
            return "toy-warmup"
        name = Path(self.model_name_or_path.rstrip("/")).name
        return f"{name}+{Path(self.adapter_path.rstrip('/')).name}" if self.adapter_path else name


def resolve_model_path(args: EvalArguments) -> str:
    """The model to load: the warmed-up toy policy for ``toy`` (:func:`hf_meds_cliff.toy.toy_policy`), else
    ``model_name_or_path``."""
    if args.model_name_or_path == TOY_MODEL:
        from ..toy import toy_policy

        return str(toy_policy(seed=args.toy_seed))
    return args.model_name_or_path


def problem_seed(seed: int, problem: EvalProblem) -> int:
    """A 31-bit seed for one problem, stable across runs and batchings."""
    digest = hashlib.blake2b(
        f"{seed}:{problem.benchmark}:{problem.problem_id}".encode(), digest_size=4
    ).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def read_completed(path: Path, num_samples: int) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Records of the problems whose ``num_samples`` samples are all in the JSONL at ``path``.

    Malformed lines (a crash mid-write) and incomplete problems are left out.
    """
    groups: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    if not path.exists():
        return {}
    with path.open() as handle:
        for line_number, line in enumerate(handle, 1):
            try:
                record = json.loads(line)
                key = (record["benchmark"], str(record["problem_id"]))
                groups.setdefault(key, {})[int(record["sample_index"])] = record
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                logger.warning("Ignoring malformed line %d of %s.", line_number, path)
    complete = {}
    for key, by_index in groups.items():
        if set(by_index) == set(range(num_samples)):
            complete[key] = [by_index[i] for i in range(num_samples)]
    return complete


def _check_resume_config(output_dir: Path, args: EvalArguments) -> None:
    config_path = output_dir / CONFIG_FILE
    current = {name: getattr(args, name) for name in _SAMPLE_DEFINING_FIELDS}
    if config_path.exists():
        previous = read_json_file(
            config_path,
            f"Delete it to re-record the current settings, or pass --overwrite to discard {output_dir}.",
        )
        if not isinstance(previous, dict):
            raise ValueError(
                f"{config_path} must hold a JSON object, got {type(previous).__name__}; delete it to re-record the "
                "current settings, or pass --overwrite."
            )
        mismatched = {
            # A setting added after a run was written counts as its default there.
            name: (previous.get(name, EvalArguments.__dataclass_fields__[name].default), value)
            for name, value in current.items()
            if previous.get(name, EvalArguments.__dataclass_fields__[name].default) != value
        }
        if mismatched:
            details = ", ".join(f"{name}: {old!r} -> {new!r}" for name, (old, new) in mismatched.items())
            raise ValueError(
                f"{output_dir} holds results from different settings ({details}). Use another --output_dir, "
                "or --overwrite to discard them."
            )
    write_json_atomically(config_path, {**current, "k_values": args.k_values}, indent=2)


def _rewrite_complete(path: Path, completed: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    lines = "".join(
        json.dumps(record, ensure_ascii=False) + "\n" for records in completed.values() for record in records
    )
    write_atomically(path, lambda handle: handle.write(lines.encode("utf-8")))


def _score(
    problems: Sequence[EvalProblem], samples, pool: MathVerifyPool, args: EvalArguments
) -> list[list[dict[str, Any]]]:
    completions = [s.text for group in samples for s in group]
    truths = [p.answer for p, group in zip(problems, samples) for _ in group]
    checks = iter(
        check_answers(
            completions,
            truths,
            timeout=args.verify_timeout,
            pool=pool,
            float_rounding=args.verify_float_rounding,
            strict=args.verify_strict,
        )
    )
    scored = []
    for problem, group in zip(problems, samples):
        records = []
        for index, sample in enumerate(group):
            check = next(checks)
            records.append(
                {
                    "benchmark": problem.benchmark,
                    "problem_id": problem.problem_id,
                    "sample_index": index,
                    "answer": problem.answer,
                    "completion": sample.text,
                    "extracted": check.extracted,
                    "status": check.status,
                    "correct": check.correct,
                    "num_tokens": sample.num_tokens,
                    "truncated": sample.truncated,
                }
            )
        scored.append(records)
    return scored


def run_evaluation(args: EvalArguments, backend: GenerationBackend | None = None) -> dict[str, Any]:
    """Evaluate ``args.model_name_or_path`` on ``args.benchmarks`` and write the outputs; returns the summary.

    Args:
        args: the settings (validated on construction).
        backend: a ready generation backend (default: built from ``args``); tests pass scripted ones.
    """
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    samples_path = output_dir / SAMPLES_FILE
    if args.overwrite:
        for name in (SAMPLES_FILE, SUMMARY_FILE, CONFIG_FILE, CSV_FILE, PLOT_FILE):
            (output_dir / name).unlink(missing_ok=True)
    _check_resume_config(output_dir, args)

    problems: list[EvalProblem] = []
    for name in args.benchmarks:
        problems.extend(
            load_benchmark(
                name,
                problem_column=args.problem_column,
                answer_column=args.answer_column,
                answer_from_solution=args.answer_from_solution,
                id_column=args.id_column,
                prompt_template=args.prompt_template,
                max_problems=args.max_problems,
                toy_num_problems=args.toy_num_problems,
                toy_seed=args.toy_seed,
            )
        )
    completed = read_completed(samples_path, args.num_samples)
    _rewrite_complete(samples_path, completed)  # drop partial problems and corrupt lines before appending
    pending = [p for p in problems if (p.benchmark, p.problem_id) not in completed]
    logger.info(
        "%d problems, %d already done, %d to generate.",
        len(problems),
        len(problems) - len(pending),
        len(pending),
    )

    settings = SamplingSettings(args.num_samples, args.temperature, args.top_p, args.max_new_tokens)
    if pending:
        if backend is None:
            backend = build_backend(
                args.backend,
                resolve_model_path(args),
                adapter_path=args.adapter_path,
                tokenizer_name_or_path=args.tokenizer_name_or_path,
                batch_size=args.batch_size,
                dtype=args.dtype,
                tensor_parallel_size=args.tensor_parallel_size,
                gpu_memory_utilization=args.gpu_memory_utilization,
                max_model_len=args.max_model_len,
                chat_template_kwargs=json.loads(args.chat_template_kwargs)
                if args.chat_template_kwargs
                else None,
            )
        pool = MathVerifyPool(num_workers=args.verify_workers)
        from tqdm.auto import tqdm

        step = backend.problems_per_call(args.num_samples)
        try:
            with (
                samples_path.open("a") as handle,
                tqdm(
                    total=len(pending) * args.num_samples,
                    desc="pass@k samples",
                    unit="sample",
                    disable=not args.progress,
                ) as progress,
            ):
                for start in range(0, len(pending), step):
                    chunk = pending[start : start + step]
                    samples = backend.generate(
                        [p.prompt for p in chunk], [problem_seed(args.seed, p) for p in chunk], settings
                    )
                    for problem, group in zip(chunk, samples):
                        if len(group) != args.num_samples:
                            raise RuntimeError(
                                f"Backend {backend.name} returned {len(group)} samples for {problem.problem_id}, "
                                f"expected {args.num_samples}."
                            )
                    for records in _score(chunk, samples, pool, args):
                        for record in records:
                            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                        completed[(records[0]["benchmark"], records[0]["problem_id"])] = records
                    handle.flush()
                    progress.update(len(chunk) * args.num_samples)
        finally:
            pool.close()
            if pool.timeouts or pool.fallbacks:
                logger.warning(
                    "math-verify: %d timeouts, %d thread fallbacks.", pool.timeouts, pool.fallbacks
                )

    wanted = {(p.benchmark, p.problem_id) for p in problems}
    records = [r for key, group in completed.items() if key in wanted for r in group]
    benchmarks = summarize_records(records, args.k_values)
    summary: dict[str, Any] = {
        "model": args.model_label(),
        "model_name_or_path": args.model_name_or_path,
        "adapter_path": args.adapter_path,
        "settings": {
            "num_samples": args.num_samples,
            "k_values": args.k_values,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "seed": args.seed,
            "max_new_tokens": args.max_new_tokens,
            "prompt_template": args.prompt_template,
            "backend": backend.name if backend is not None else None,
        },
        "benchmarks": benchmarks,
    }
    if len(benchmarks) > 1:
        summary["average"] = average_summaries(benchmarks)
    (output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    write_csv([(summary["model"], summary)], output_dir / CSV_FILE)
    plot_pass_at_k([(summary["model"], summary)], output_dir / PLOT_FILE, title=summary["model"])
    return summary


def load_summary(path: str | Path) -> dict[str, Any]:
    """A run's summary from its ``summary.json`` path or its output folder."""
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    if not path.is_file():
        raise ValueError(f"No summary at {str(path)!r}; pass a summary.json or a run folder holding one.")
    summary = json.loads(path.read_text())
    if "benchmarks" not in summary:
        raise ValueError(f"{str(path)!r} is not a pass@k summary (no 'benchmarks' key).")
    return summary


def compare_summaries(
    paths: Sequence[str | Path], output_dir: str | Path, labels: Sequence[str] | None = None
):
    """Plot and tabulate several runs together: ``compare_passk.png`` and ``compare_passk.csv``.

    Returns the paths of the two files.
    """
    if not paths:
        raise ValueError("Give at least one summary to compare.")
    summaries = [load_summary(p) for p in paths]
    if labels is not None and len(labels) != len(summaries):
        raise ValueError(f"Got {len(labels)} labels for {len(summaries)} summaries.")
    names = (
        list(labels)
        if labels is not None
        else [s.get("model") or Path(p).stem for s, p in zip(summaries, paths)]
    )
    # Same label twice (e.g. the same model before and after training under one folder name): disambiguate.
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            names[index] = f"{name} ({seen[name]})"
    entries = list(zip(names, summaries))
    output_dir = Path(output_dir)
    return (
        plot_pass_at_k(entries, output_dir / "compare_passk.png", title="pass@k"),
        write_csv(entries, output_dir / "compare_passk.csv"),
    )
