"""Cliff's per-step judging protocol, independent of the trainer.

Given the gathered rows of one generation step (every process sees the same rows), :class:`CliffJudge` decides,
per group of rollouts of one prompt, whether Cliff applies and, per incorrect rollout, where its incorrect suffix
starts (a sentence index, the "pitfall step" p(a)):

1. Groups whose rollouts are all correct or all incorrect are skipped (zero reward variance, no teacher call).
   Ungraded rollouts (correctness ``None``: the correctness reward returned ``None``, "cannot grade this row",
   as TRL allows) are neither correct nor incorrect: they never decide a group's mode, are never judged and get
   no first mistake; the trainer leaves them TRL's sequence-level advantage (counted as ``ungraded``).
2. Reference filter: the teacher solves the problem (cached per prompt once verified); the verifier
   (:func:`hf_meds_cliff.rewards.check_answer`) checks the solution against the ground truth. Unverified groups fall
   back to plain GRPO for this step (counted as ``groups_fallback_unverified``), except when the ``solve`` call
   failed at the endpoint (a :class:`~hf_meds_cliff.cliff.teachers.base.SolveFailure` with an endpoint status):
   those count as ``groups_fallback_endpoint``, like a failed ``judge`` call.
3. Truncated incorrect rollouts get p(a) = 0 without a call.
4. Every other incorrect rollout of a mixed group is judged (``k`` times with self-consistency), concurrently.
   The teacher saying "no mistake" on a verifier-wrong rollout gives p(a) = 0 and counts a disagreement; a malformed
   answer (parse error, id out of range, an exception inside the teacher, ...) gives p(a) = 0 and counts a failure
   of that kind; an endpoint failure (:func:`~hf_meds_cliff.cliff.teachers.base.is_endpoint_failure`: timeout,
   HTTP error, unreachable, garbled response, after the teacher's retries) makes the whole group fall back to plain
   GRPO. With self-consistency, failed judgments are ignored when others of the same rollout answered.
5. Judgments and verified references are cached (JSON-serialisable, see :meth:`CliffJudge.state_dict`).

With ``judge_correct=True`` (the paper's "GRPO with Teacher", ``CliffConfig(cliff_outcome="teacher")``) step 4 also
judges the verifier-correct, non-truncated rollouts of those groups, and every judged rollout gets the teacher's
verdict (:attr:`StepOutcome.teacher_verdict`): its correctness field when it gave one, else "no mistake located";
with self-consistency the majority of the usable answers (a tie gives no verdict). Groups, references, truncation,
endpoint failures and the caches follow the same rules as above; the existing counters (``agreements``,
``disagreements``, ``rollouts_with_mistake``) still count verifier-wrong rollouts only.

Code (:mod:`hf_meds_cliff.cliff.code_domain`): the same steps with the rollout numbered by
:func:`~hf_meds_cliff.cliff.split_code_units`, the reference verified by running the teacher's program on the row's
tests, and each judged rollout's program run first (``describe_failure``) so that the teacher also sees the first
failing test (passed as ``execution=`` to a teacher whose ``judge`` takes that keyword). Programs and verifiers that
block (``checks_in_threads``) run in worker threads, concurrently, never on the teacher's event loop.

Several processes: the calls of a step are enumerated in the same order on every rank, rank ``r`` runs calls
``r, r + W, r + 2W, ...``, and the results are all-gathered, so no call is duplicated and every rank ends with the
same outcome and the same caches.

The coroutines run on one persistent event loop in a daemon thread (:class:`BackgroundLoop`), so this works
whether or not the caller is itself inside a running event loop (notebooks), and async HTTP clients bound to
that loop stay valid across steps.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..data import problem_text  # noqa: F401 - its home is data.py (MEDS uses it too); re-exported here
from ..sentences import split_sentences
from .teachers.base import ENDPOINT_FAILURES, Judgment, SolveFailure, Teacher, is_endpoint_failure

logger = logging.getLogger(__name__)

GROUP_SKIPPED = "skipped"
GROUP_CLIFF = "cliff"
GROUP_FALLBACK_UNVERIFIED = "fallback_unverified"
GROUP_FALLBACK_ENDPOINT = "fallback_endpoint"

STATE_VERSION = 1


# ---------------------------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------------------------


def completion_cache_key(prompt_key: str, completion: str) -> str:
    """Key of the judgment cache: the prompt identity and a digest of the completion text.

    >>> completion_cache_key("abc", "1 + 1 = 2.") == completion_cache_key("abc", "1 + 1 = 2.")
    True
    >>> completion_cache_key("abc", "x") == completion_cache_key("abd", "x")
    False
    """
    digest = hashlib.blake2b(completion.encode("utf-8"), digest_size=12).hexdigest()
    return f"{prompt_key}:{digest}"


def reduce_first_mistakes(votes: Sequence[int | None], reducer: str = "median") -> tuple[int | None, float]:
    """Combine ``k`` usable judgments of one rollout into one first-mistake index.

    Args:
        votes: one entry per usable judgment: the sentence index of the first mistake, or ``None`` when the teacher
            found no mistake.
        reducer: ``"median"`` (lower median of the indices, so the result is one of the votes) or ``"majority"``
            (most frequent index; ties go to the earliest sentence).

    Returns:
        ``(first_mistake, agreement)``: ``first_mistake`` is ``None`` unless strictly more votes found a mistake
        than found none; ``agreement`` is the share of votes equal to the result (1.0 for a single vote).

    >>> reduce_first_mistakes([3])
    (3, 1.0)
    >>> reduce_first_mistakes([2, 5, 4])
    (4, 0.3333333333333333)
    >>> reduce_first_mistakes([2, 5, 2], reducer="majority")
    (2, 0.6666666666666666)
    >>> reduce_first_mistakes([1, None, None])
    (None, 0.6666666666666666)
    >>> reduce_first_mistakes([4, 1, 4, 1], reducer="majority")
    (1, 0.5)
    """
    if not votes:
        raise ValueError("reduce_first_mistakes needs at least one vote; got an empty sequence.")
    if reducer not in ("median", "majority"):
        raise ValueError(f"reducer={reducer!r} is unknown; use 'median' or 'majority'.")
    indices = sorted(v for v in votes if v is not None)
    if len(indices) <= len(votes) - len(indices):
        result = None
    elif reducer == "median":
        result = indices[(len(indices) - 1) // 2]
    else:
        counts = Counter(indices)
        best = max(counts.values())
        result = min(i for i, c in counts.items() if c == best)
    agreement = sum(1 for v in votes if v == result) / len(votes)
    return result, agreement


# ---------------------------------------------------------------------------------------------------------------
# Step data
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class StepRows:
    """The gathered rows of one generation step, in global order (every process passes the same rows).

    Row ``i`` belongs to group ``group_ids[i]``; a group is the set of rollouts of one prompt. ``is_correct[i]`` is
    ``None`` for an ungraded rollout (its correctness reward returned ``None``).
    """

    prompt_keys: list[str]
    problems: list[str]
    ground_truths: list[str | None]
    completions: list[str]
    is_correct: list[bool | None]
    is_truncated: list[bool]
    group_ids: list[int]

    def __post_init__(self):
        n = len(self.completions)
        for name in ("prompt_keys", "problems", "ground_truths", "is_correct", "is_truncated", "group_ids"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"StepRows.{name} has {len(getattr(self, name))} entries for {n} completions; all fields must "
                    "have one entry per rollout."
                )


@dataclass
class StepOutcome:
    """What the protocol decided for one step.

    Attributes:
        group_modes: per row, the mode of its group: ``"cliff"``, ``"skipped"``, ``"fallback_unverified"`` or
            ``"fallback_endpoint"``. Only ``"cliff"`` groups get token-level advantages.
        first_mistake: per row, for incorrect rows of Cliff groups the sentence index where the incorrect suffix
            starts (0 = the whole rollout is the suffix, plain GRPO treatment); ``None`` for every other row.
        sentence_spans: per row, the character spans of the sentences the teacher saw, filled only for rows
            where the teacher located a mistake (including at sentence 0); empty otherwise (correct, truncated,
            disagreement, malformed answer). Non-empty spans mark the rows counted in the position metrics.
        counters: step counters (summed over the step, not averaged), see :meth:`CliffJudge.process_step`.
        values: per-row or per-rollout samples of step statistics whose mean is logged (e.g. agreement).
        judge_details: for people inspecting a run, per incorrect row of a group that needed a teacher:
            ``source`` (``"judged"``, ``"cached"``, ``"truncated"`` or ``"unverified"``: no verified
            reference), and for judged rows the teacher's answers ``raw``, their ``statuses`` and ``votes``
            (one per self-consistency call); judged and cached rows of Cliff groups also get ``agreed``
            (True: the teacher located a mistake, False: it found none, a disagreement with the verifier;
            None: no usable answer); judged rows of a run with ``describe_failure`` (code) also get
            ``execution`` (what running the program showed the teacher).
        references: the reference solution used per prompt key this step (None = not verified).
        teacher_verdict: per row, the teacher's verdict on a judged (or cached) rollout of a ``"cliff"`` group: True
            (right), False (wrong), None (not judged: other groups, correct rows unless ``judge_correct``, truncated
            or ungraded rows, or no usable answer).
    """

    group_modes: list[str]
    first_mistake: list[int | None]
    sentence_spans: list[list[tuple[int, int]]]
    counters: Counter = field(default_factory=Counter)
    values: dict[str, list[float]] = field(default_factory=dict)
    judge_details: dict[int, dict[str, Any]] = field(default_factory=dict)
    references: dict[str, str | None] = field(default_factory=dict)
    teacher_verdict: list[bool | None] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------
# Event loop
# ---------------------------------------------------------------------------------------------------------------


class BackgroundLoop:
    """A persistent asyncio loop in a daemon thread; :meth:`run` blocks the caller until a coroutine is done.

    A single loop for the whole run keeps async clients (``httpx.AsyncClient``) valid across steps, and running it
    in its own thread makes :meth:`run` safe even when the caller already runs an event loop (Jupyter).
    """

    def __init__(self, name: str = "cliff-teacher-loop"):
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run_forever():
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(ready.set)
            self._loop.run_forever()

        self._thread = threading.Thread(target=run_forever, name=name, daemon=True)
        self._thread.start()
        ready.wait()

    def run(self, coroutine: Coroutine) -> Any:
        if self._loop.is_closed():
            raise RuntimeError("The Cliff teacher loop is closed; create a new CliffJudge.")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


def _local_gather(objects: list) -> list:
    return list(objects)


# ---------------------------------------------------------------------------------------------------------------
# The orchestrator
# ---------------------------------------------------------------------------------------------------------------


class CliffJudge:
    """Runs the Cliff protocol of one step and holds the reference and judgment caches.

    Args:
        teacher: an object following :class:`hf_meds_cliff.cliff.teachers.base.Teacher`.
        verify: ``verify(solution_text, ground_truth) -> bool``; defaults to
            ``hf_meds_cliff.rewards.check_answer(...).correct``.
        reference_filter: when False, the teacher's solution is the reference without verification.
        reference_cache / judgment_cache: reuse verified references per prompt / judgments per (prompt, completion).
        self_consistency: judgments per rollout (k).
        reducer: ``"median"`` or ``"majority"`` (see :func:`reduce_first_mistakes`).
        split: sentence splitter (defaults to :func:`hf_meds_cliff.cliff.split_sentences`; code:
            :func:`~hf_meds_cliff.cliff.split_code_units`).
        describe_failure: ``describe_failure(completion, ground_truth) -> str | None``, what running the rollout
            showed (code: :meth:`~hf_meds_cliff.cliff.code_domain.CodeTestRunner.describe_failure`); given to the
            teacher's ``judge`` as ``execution=`` when it takes that keyword. ``None`` (math): nothing is run.
        checks_in_threads: run ``verify`` and ``describe_failure`` in worker threads (they execute programs).
        judge_correct: also judge the verifier-correct rollouts of mixed groups and report every judged rollout's
            verdict (the paper's "GRPO with Teacher", where the teacher's verdict is the outcome).
    """

    def __init__(
        self,
        teacher: Teacher,
        *,
        verify: Callable[[str, str], bool] | None = None,
        reference_filter: bool = True,
        reference_cache: bool = True,
        judgment_cache: bool = True,
        self_consistency: int = 1,
        reducer: str = "median",
        split: Callable[[str], list[tuple[int, int]]] = split_sentences,
        describe_failure: Callable[[str, str | None], str | None] | None = None,
        checks_in_threads: bool = False,
        judge_correct: bool = False,
    ):
        if not isinstance(self_consistency, int) or self_consistency < 1:
            raise ValueError(f"self_consistency={self_consistency!r} must be a positive integer.")
        if reducer not in ("median", "majority"):
            raise ValueError(f"reducer={reducer!r} is unknown; use 'median' or 'majority'.")
        self.teacher = teacher
        self.verify = verify if verify is not None else _default_verify
        self.reference_filter = reference_filter
        self.use_reference_cache = reference_cache
        self.use_judgment_cache = judgment_cache
        self.self_consistency = self_consistency
        self.reducer = reducer
        self.split = split
        self.describe_failure = describe_failure
        self.checks_in_threads = checks_in_threads
        self.judge_correct = judge_correct
        self._teacher_takes_execution = _accepts_keyword(getattr(teacher, "judge", None), "execution")
        self.references: dict[str, str] = {}
        self.judgments: dict[str, dict[str, Any]] = {}
        self._loop: BackgroundLoop | None = None

    # -- state ---------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable caches (saved with every checkpoint)."""
        return {
            "version": STATE_VERSION,
            "references": dict(self.references),
            "judgments": dict(self.judgments),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s caches; a malformed state raises ``ValueError`` saying what is wrong."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(
                f"Unsupported Cliff cache state (version {state.get('version') if isinstance(state, dict) else None!r},"
                f" expected {STATE_VERSION}): cliff_state.json was written by another hf_meds_cliff version or edited."
            )
        references, judgments = state.get("references"), state.get("judgments")
        if not isinstance(references, dict) or not all(isinstance(v, str) for v in references.values()):
            raise ValueError(
                f"Cliff cache state: 'references' must map prompt keys to solution texts, got {references!r:.80}."
            )
        if not isinstance(judgments, dict) or not all(isinstance(v, dict) for v in judgments.values()):
            raise ValueError(
                f"Cliff cache state: 'judgments' must map keys to judgment objects, got {judgments!r:.80}."
            )
        self.references = {str(k): v for k, v in references.items()}
        self.judgments = {str(k): dict(v) for k, v in judgments.items()}

    # -- running coroutines --------------------------------------------------------------------------------------

    def _run(self, coroutine: Coroutine) -> Any:
        if self._loop is None:
            self._loop = BackgroundLoop()
        return self._loop.run(coroutine)

    def close(self) -> None:
        """Close the teacher (its HTTP client or model) and stop the event loop."""
        if self._loop is None:
            return
        try:
            self._run(self.teacher.aclose())
        except Exception:  # closing must not hide the real end of a run
            logger.warning("Closing the Cliff teacher failed", exc_info=True)
        self._loop.close()
        self._loop = None

    async def _solve(self, problem: str, ground_truth: str | None) -> dict[str, Any]:
        try:
            solution = await self.teacher.solve(problem)
        except Exception as error:  # noqa: BLE001 -- a Teacher should not raise; count it, keep training
            logger.warning("Teacher.solve raised %s: %s", type(error).__name__, error)
            return {"solution": None, "verified": False, "status": "error"}
        if isinstance(solution, SolveFailure):
            return {"solution": None, "verified": False, "status": solution.status}
        if solution is None:
            return {"solution": None, "verified": False, "status": "no_solution"}
        if not self.reference_filter:
            return {"solution": solution, "verified": True, "status": "unfiltered"}
        if ground_truth is None:
            return {"solution": solution, "verified": False, "status": "no_ground_truth"}
        try:
            if self.checks_in_threads:
                verified = bool(await asyncio.to_thread(self.verify, solution, ground_truth))
            else:
                verified = bool(self.verify(solution, ground_truth))
        except Exception as error:  # noqa: BLE001 -- a verifier crash must not stop training
            logger.warning("Verifying the teacher's solution raised %s: %s", type(error).__name__, error)
            return {"solution": solution, "verified": False, "status": "verify_error"}
        return {"solution": solution, "verified": verified, "status": "verified" if verified else "wrong"}

    async def _describe(self, completion: str, ground_truth: str | None) -> dict[str, Any]:
        """What running ``completion`` on the row's tests showed, for the judge; never raises."""
        try:
            if self.checks_in_threads:
                text = await asyncio.to_thread(self.describe_failure, completion, ground_truth)
            else:
                text = self.describe_failure(completion, ground_truth)
        except Exception as error:  # noqa: BLE001 -- the judge then reads the program without a test result
            logger.warning("Running a rollout for the judge raised %s: %s", type(error).__name__, error)
            return {"execution": None, "status": "error"}
        return {"execution": text, "status": "ok"}

    async def _judge(
        self, problem: str, reference: str, sentences: list[str], execution: str | None = None
    ) -> dict[str, Any]:
        try:
            if execution is not None and self._teacher_takes_execution:
                judgment = await self.teacher.judge(problem, reference, sentences, execution=execution)
            else:
                judgment = await self.teacher.judge(problem, reference, sentences)
        except Exception as error:  # noqa: BLE001 -- judge never raises by contract; keep training alive
            logger.warning("Teacher.judge raised %s: %s", type(error).__name__, error)
            judgment = Judgment(first_mistake=None, verdict_correct=None, status="error", raw=repr(error))
        first_mistake = judgment.first_mistake
        raw = judgment.raw if isinstance(judgment.raw, str) else repr(judgment.raw)
        if first_mistake is not None and not 0 <= first_mistake < len(sentences):
            return {"first_mistake": None, "status": "out_of_range", "endpoint_failure": False, "raw": raw}
        verdict = judgment.verdict_correct if judgment.verdict_correct is not None else first_mistake is None
        return {
            "first_mistake": first_mistake,
            "verdict": bool(verdict) if judgment.status == "ok" else None,
            "status": judgment.status,
            "endpoint_failure": is_endpoint_failure(judgment),
            "raw": raw,
        }

    def _sharded_calls(
        self, calls: list[Callable[[], Coroutine]], rank: int, world_size: int, gather: Callable[[list], list]
    ) -> list[Any]:
        """Run this rank's share of ``calls`` (coroutine factories) concurrently; all-gather results in call order."""
        mine = [index for index in range(len(calls)) if index % world_size == rank]

        async def run_mine():
            return await asyncio.gather(*(calls[index]() for index in mine))

        local = list(zip(mine, self._run(run_mine()) if mine else []))
        gathered = gather(local) if world_size > 1 else local
        results: list[Any] = [None] * len(calls)
        for index, result in gathered:
            results[index] = result
        return results

    # -- the step ------------------------------------------------------------------------------------------------

    def process_step(
        self,
        rows: StepRows,
        *,
        rank: int = 0,
        world_size: int = 1,
        gather: Callable[[list], list] = _local_gather,
    ) -> StepOutcome:
        """Decide group modes and first mistakes for one step (see the module docstring).

        ``gather`` is an all-gather of Python lists that concatenates the ranks' lists in rank order (accelerate's
        ``gather_object``); it must be called by every rank, so every rank calls this method with the same rows.

        Counters: ``groups``, ``ungraded``, ``groups_skipped``, ``groups_cliff``, ``groups_fallback_unverified``,
        ``groups_fallback_endpoint``, ``solve_calls``, ``judge_calls``, ``reference_cache_hits``,
        ``judgment_cache_hits``, ``references_unverified``, ``truncated``, ``agreements``, ``disagreements``,
        ``judge_failures/<status>``, ``solve_failures/<status>``, ``rollouts_with_mistake``; with
        ``describe_failure`` (code) also ``executions`` and ``execution_failures/<status>``.
        Values: ``judge_wall_time``, ``first_mistake_sentence``, ``first_mistake_sentence_fraction``,
        ``self_consistency_agreement``.
        """
        started = time.perf_counter()
        n = len(rows.completions)
        counters: Counter = Counter()
        values: dict[str, list[float]] = {
            "first_mistake_sentence": [],
            "first_mistake_sentence_fraction": [],
            "self_consistency_agreement": [],
        }
        members: dict[int, list[int]] = {}
        for row, group in enumerate(rows.group_ids):
            members.setdefault(group, []).append(row)
        group_order = sorted(members)
        modes: dict[int, str] = {}
        first_mistake: list[int | None] = [None] * n
        spans: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        details: dict[int, dict[str, Any]] = {}

        # 1. zero-variance groups; which groups need a teacher at all
        needs_reference: list[int] = []
        for group in group_order:
            graded = [i for i in members[group] if rows.is_correct[i] is not None]
            counters["ungraded"] += len(members[group]) - len(graded)
            correct = [rows.is_correct[i] for i in graded]
            counters["groups"] += 1
            if all(correct) or not any(correct):  # also a group with no graded rollout at all
                modes[group] = GROUP_SKIPPED
                continue
            modes[group] = GROUP_CLIFF
            incorrect = [i for i in graded if rows.is_correct[i] is False]
            for i in incorrect:
                first_mistake[i] = 0
                if rows.is_truncated[i]:
                    counters["truncated"] += 1
                    details[i] = {"source": "truncated"}
            to_judge = graded if self.judge_correct else incorrect
            if any(not rows.is_truncated[i] for i in to_judge):
                needs_reference.append(group)

        # 2. reference filter (one solve call per distinct prompt missing from the cache)
        references: dict[str, str | None] = {}
        to_solve: list[str] = []
        ground_truth_of: dict[str, str | None] = {}
        for group in needs_reference:
            first_row = members[group][0]
            key = rows.prompt_keys[first_row]
            if key in references or key in ground_truth_of:
                continue
            if self.use_reference_cache and key in self.references:
                references[key] = self.references[key]
                counters["reference_cache_hits"] += 1
                continue
            ground_truth_of[key] = rows.ground_truths[first_row]
            to_solve.append(key)
        problem_of = {rows.prompt_keys[i]: rows.problems[i] for i in range(n)}
        solve_results = self._sharded_calls(
            [partial(self._solve, problem_of[key], ground_truth_of[key]) for key in to_solve],
            rank,
            world_size,
            gather,
        )
        counters["solve_calls"] += len(to_solve)
        endpoint_failed_keys: set[str] = set()
        for key, result in zip(to_solve, solve_results):
            if result["verified"]:
                references[key] = result["solution"]
                if self.use_reference_cache:
                    self.references[key] = result["solution"]
            else:
                references[key] = None
                counters["references_unverified"] += 1
                if result["status"] not in ("wrong",):
                    counters[f"solve_failures/{result['status']}"] += 1
                if result["status"] in ENDPOINT_FAILURES:
                    endpoint_failed_keys.add(key)

        # 3. judge the incorrect, non-truncated rollouts of groups with a reference
        judge_rows: list[int] = []
        cached: dict[int, dict[str, Any]] = {}
        for group in needs_reference:
            key = rows.prompt_keys[members[group][0]]
            if references.get(key) is None:
                modes[group] = (
                    GROUP_FALLBACK_ENDPOINT if key in endpoint_failed_keys else GROUP_FALLBACK_UNVERIFIED
                )
                details.update(
                    {i: {"source": "unverified"} for i in members[group] if rows.is_correct[i] is False}
                )
                continue
            for i in members[group]:
                if rows.is_correct[i] is None or rows.is_truncated[i]:  # ungraded or truncated
                    continue
                if rows.is_correct[i] and not self.judge_correct:
                    continue
                cache_key = completion_cache_key(key, rows.completions[i])
                if self.use_judgment_cache and cache_key in self.judgments:
                    cached[i] = self.judgments[cache_key]
                    counters["judgment_cache_hits"] += 1
                    details[i] = {"source": "cached"}
                else:
                    judge_rows.append(i)
        executions: dict[int, str | None] = {}
        if self.describe_failure is not None and judge_rows:
            described = self._sharded_calls(
                [partial(self._describe, rows.completions[i], rows.ground_truths[i]) for i in judge_rows],
                rank,
                world_size,
                gather,
            )
            counters["executions"] += len(judge_rows)
            for i, result in zip(judge_rows, described):
                executions[i] = result["execution"]
                if result["status"] != "ok":
                    counters[f"execution_failures/{result['status']}"] += 1
        row_sentences: dict[int, list[tuple[int, int]]] = {}
        calls = []
        for i in judge_rows:
            row_sentences[i] = self.split(rows.completions[i])
            sentences = [rows.completions[i][start:end] for start, end in row_sentences[i]]
            reference = references[rows.prompt_keys[i]]
            calls.extend(
                partial(self._judge, rows.problems[i], reference, sentences, executions.get(i))
                for _ in range(self.self_consistency)
            )
        judge_results = self._sharded_calls(calls, rank, world_size, gather)
        counters["judge_calls"] += len(calls)

        # 4. reduce per rollout
        decided: dict[int, dict[str, Any]] = dict(cached)
        endpoint_failed_groups: set[int] = set()
        for position, i in enumerate(judge_rows):
            results = judge_results[position * self.self_consistency : (position + 1) * self.self_consistency]
            details[i] = {
                "source": "judged",
                "raw": [result.get("raw", "") for result in results],
                "statuses": [result["status"] for result in results],
                "votes": [result["first_mistake"] for result in results],
            }
            if i in executions:
                details[i]["execution"] = executions[i]
            votes: list[int | None] = []
            verdicts: list[bool] = []
            endpoint_failures = 0
            for result in results:
                if result["status"] != "ok":
                    counters[f"judge_failures/{result['status']}"] += 1
                if result["endpoint_failure"]:
                    endpoint_failures += 1
                elif result["status"] == "ok":
                    votes.append(result["first_mistake"])
                    verdicts.append(result["verdict"])
            if votes:
                mistake, agreement = reduce_first_mistakes(votes, self.reducer)
                if self.self_consistency > 1:
                    values["self_consistency_agreement"].append(agreement)
                right, wrong = verdicts.count(True), verdicts.count(False)
                decision = {
                    "first_mistake": mistake,
                    "agreed": mistake is not None,
                    "judged": True,
                    "verdict": True if right > wrong else False if wrong > right else None,
                }
                if self.use_judgment_cache:
                    self.judgments[completion_cache_key(rows.prompt_keys[i], rows.completions[i])] = decision
                decided[i] = decision
            elif endpoint_failures == len(results):
                endpoint_failed_groups.add(rows.group_ids[i])
            else:  # only malformed answers: treat as plain GRPO-negative, not cached (a retry may parse)
                decided[i] = {"first_mistake": None, "agreed": None, "judged": False, "verdict": None}

        for group in endpoint_failed_groups:
            modes[group] = GROUP_FALLBACK_ENDPOINT

        # 5. assemble
        teacher_verdict: list[bool | None] = [None] * n
        for i, decision in sorted(decided.items()):
            group = rows.group_ids[i]
            if modes[group] != GROUP_CLIFF:
                continue
            teacher_verdict[i] = _decision_verdict(decision)
            if rows.is_correct[i]:  # judged only with judge_correct: the verdict is all it gives
                continue
            if i in details:
                details[i]["agreed"] = decision["agreed"]
            if decision["agreed"] is True:
                counters["agreements"] += 1
            elif decision["agreed"] is False:
                counters["disagreements"] += 1
            mistake = decision["first_mistake"]
            if mistake is None:
                continue
            spans[i] = row_sentences[i] if i in row_sentences else self.split(rows.completions[i])
            if mistake >= len(spans[i]):  # a stale cache entry for a differently split text; be safe
                counters["judge_failures/out_of_range"] += 1
                spans[i] = []
                continue
            first_mistake[i] = mistake
            counters["rollouts_with_mistake"] += 1
            values["first_mistake_sentence"].append(float(mistake))
            values["first_mistake_sentence_fraction"].append(mistake / len(spans[i]))

        for i in [i for i in details if rows.is_correct[i]]:  # judge_details stay about verifier-wrong rollouts
            del details[i]
        group_modes = [modes[rows.group_ids[i]] for i in range(n)]
        for i in range(n):
            if group_modes[i] != GROUP_CLIFF:
                first_mistake[i] = None
                spans[i] = []
        for group in group_order:
            if modes[group] != GROUP_SKIPPED:
                counters[f"groups_{modes[group]}"] += 1
            else:
                counters["groups_skipped"] += 1
        values["judge_wall_time"] = [time.perf_counter() - started]
        return StepOutcome(
            group_modes=group_modes,
            first_mistake=first_mistake,
            sentence_spans=spans,
            counters=counters,
            values=values,
            judge_details=details,
            references=dict(references),
            teacher_verdict=teacher_verdict,
        )


def _decision_verdict(decision: dict[str, Any]) -> bool | None:
    """The teacher's verdict in a judgment decision; decisions cached before verdicts were kept (no ``verdict``
    key) read "no mistake located" as right."""
    if "verdict" in decision:
        return decision["verdict"]
    return decision["first_mistake"] is None if decision.get("judged") else None


def _accepts_keyword(function: Any, name: str) -> bool:
    """Whether ``function`` can be called with the keyword argument ``name`` (or takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _default_verify(solution: str, ground_truth: str) -> bool:
    from hf_meds_cliff.rewards import check_answer

    return check_answer(solution, ground_truth).correct
