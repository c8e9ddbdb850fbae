"""Cliff's per-step protocol (hf_meds_cliff.cliff.protocol) with a scripted fake teacher: no trainer, no network."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from hf_meds_cliff.cliff.protocol import (
    GROUP_CLIFF,
    GROUP_FALLBACK_ENDPOINT,
    GROUP_FALLBACK_UNVERIFIED,
    GROUP_SKIPPED,
    CliffJudge,
    StepRows,
    completion_cache_key,
    reduce_first_mistakes,
)
from hf_meds_cliff.cliff.teachers.base import Judgment

WRONG_AT_1 = "2 + 3 = 5. 5 * 2 = 11. 11 - 1 = 10. The answer is \\boxed{10}."
WRONG_AT_2 = "2 + 3 = 5. 5 * 2 = 10. 10 - 1 = 8. The answer is \\boxed{8}."
RIGHT = "2 + 3 = 5. 5 * 2 = 10. 10 - 1 = 9. The answer is \\boxed{9}."
PROBLEM = "Compute (2 + 3) * 2 - 1."


class ScriptedTeacher:
    """Answers from a script: ``solutions[problem]`` and ``judgments[completion text]`` (a list is cycled).

    With ``rendezvous=n`` each judge call waits (at most 5 s) until ``n`` calls are in flight at once, so calls
    made concurrently reach ``max_in_flight == n`` whatever the machine's load, and calls made one at a time
    never do."""

    name = "scripted"

    def __init__(self, solutions=None, judgments=None, rendezvous=0):
        self.solutions = solutions or {}
        self.judgments = judgments or {}
        self.rendezvous = rendezvous
        self._all_in_flight: asyncio.Event | None = None
        self.solve_calls: list[str] = []
        self.judge_calls: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.closed = False

    async def solve(self, problem):
        self.solve_calls.append(problem)
        return self.solutions.get(problem)

    async def judge(self, problem, reference, sentences):
        text = "".join(sentences)
        index = sum(1 for t in self.judge_calls if t == text)
        self.judge_calls.append(text)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.rendezvous:
            if self._all_in_flight is None:
                self._all_in_flight = asyncio.Event()
            if self.in_flight >= self.rendezvous:
                self._all_in_flight.set()
            try:
                await asyncio.wait_for(self._all_in_flight.wait(), timeout=5)
            except asyncio.TimeoutError:
                pass  # not concurrent: max_in_flight stays below the rendezvous and the test says so
        self.in_flight -= 1
        script = self.judgments[text]
        if isinstance(script, list):
            script = script[index % len(script)]
        return script

    async def aclose(self):
        self.closed = True


def ok(index):
    return Judgment(first_mistake=index, verdict_correct=False, status="ok")


NO_MISTAKE = Judgment(first_mistake=None, verdict_correct=True, status="ok")
TIMEOUT = Judgment(first_mistake=None, verdict_correct=None, status="timeout")
PARSE_ERROR = Judgment(first_mistake=None, verdict_correct=None, status="parse_error")


def verify(solution, ground_truth):
    return solution.endswith(f"\\boxed{{{ground_truth}}}.")


def make_rows(groups, truncated=()):
    """``groups``: list of (problem, ground truth, [completion, ...]); correctness = verify(completion, gt)."""
    rows = {"prompt_keys": [], "problems": [], "ground_truths": [], "completions": [], "is_correct": [], "is_truncated": [],
                "group_ids": []}  # fmt: skip
    for group, (problem, truth, completions) in enumerate(groups):
        for text in completions:
            index = len(rows["completions"])
            rows["prompt_keys"].append(f"key-{problem}")
            rows["problems"].append(problem)
            rows["ground_truths"].append(truth)
            rows["completions"].append(text)
            rows["is_correct"].append(verify(text, truth))
            rows["is_truncated"].append(index in truncated)
            rows["group_ids"].append(group)
    return StepRows(**rows)


@pytest.fixture
def judge_factory():
    judges = []

    def make(teacher, **kwargs):
        judge = CliffJudge(teacher, verify=verify, **kwargs)
        judges.append(judge)
        return judge

    yield make
    for judge in judges:
        judge.close()


def test_mixed_group_gets_first_mistakes_and_skipped_group_no_calls(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: ok(1), WRONG_AT_2: ok(2)})
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1, WRONG_AT_2, RIGHT]), ("other", "9", [RIGHT, RIGHT])])
    outcome = judge_factory(teacher).process_step(rows)
    assert outcome.group_modes == [GROUP_CLIFF] * 4 + [GROUP_SKIPPED] * 2
    assert outcome.first_mistake == [None, 1, 2, None, None, None]
    assert outcome.sentence_spans[1][1] == (11, 23)  # "5 * 2 = 11. " follows "2 + 3 = 5. "
    assert teacher.solve_calls == [PROBLEM]  # the all-correct group costs nothing
    assert sorted(teacher.judge_calls) == sorted([WRONG_AT_1, WRONG_AT_2])
    c = outcome.counters
    assert (c["groups_cliff"], c["groups_skipped"], c["judge_calls"], c["solve_calls"]) == (1, 1, 2, 1)
    assert (c["agreements"], c["disagreements"], c["rollouts_with_mistake"]) == (2, 0, 2)
    assert outcome.values["first_mistake_sentence"] == [1.0, 2.0]
    assert outcome.values["first_mistake_sentence_fraction"] == [1 / 4, 2 / 4]


def test_unverified_reference_falls_back_without_judging(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: WRONG_AT_1}, {WRONG_AT_1: ok(1)})  # teacher's own answer is wrong
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])])
    outcome = judge_factory(teacher).process_step(rows)
    assert outcome.group_modes == [GROUP_FALLBACK_UNVERIFIED] * 2
    assert outcome.first_mistake == [None, None]
    assert teacher.judge_calls == []
    assert outcome.counters["references_unverified"] == 1
    assert outcome.counters["groups_fallback_unverified"] == 1


def test_reference_filter_off_uses_unverified_solution(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: WRONG_AT_1}, {WRONG_AT_2: ok(2)})
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_2])])
    outcome = judge_factory(teacher, reference_filter=False).process_step(rows)
    assert outcome.group_modes == [GROUP_CLIFF] * 2
    assert outcome.first_mistake == [None, 2]


def test_missing_solution_counts_a_solve_failure(judge_factory):
    teacher = ScriptedTeacher({}, {})
    outcome = judge_factory(teacher).process_step(make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])]))
    assert outcome.group_modes == [GROUP_FALLBACK_UNVERIFIED] * 2
    assert outcome.counters["solve_failures/no_solution"] == 1


def test_truncated_rollout_gets_zero_without_a_call(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_2: ok(2)})
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1, WRONG_AT_2])], truncated={1})
    outcome = judge_factory(teacher).process_step(rows)
    assert outcome.first_mistake == [None, 0, 2]
    assert teacher.judge_calls == [WRONG_AT_2]
    assert outcome.counters["truncated"] == 1


def test_group_with_only_truncated_wrong_rollouts_needs_no_teacher(judge_factory):
    teacher = ScriptedTeacher({}, {})
    outcome = judge_factory(teacher).process_step(
        make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])], truncated={1})
    )
    assert outcome.group_modes == [GROUP_CLIFF] * 2
    assert outcome.first_mistake == [None, 0]
    assert teacher.solve_calls == [] and teacher.judge_calls == []


def test_teacher_says_no_mistake_is_a_disagreement_with_zero(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: NO_MISTAKE, WRONG_AT_2: ok(2)})
    outcome = judge_factory(teacher).process_step(
        make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1, WRONG_AT_2])])
    )
    assert outcome.group_modes == [GROUP_CLIFF] * 3
    assert outcome.first_mistake == [None, 0, 2]
    assert outcome.sentence_spans[1] == []  # not located
    assert (outcome.counters["agreements"], outcome.counters["disagreements"]) == (1, 1)


def test_endpoint_failure_falls_back_only_that_group(judge_factory):
    other_wrong = WRONG_AT_2.replace("2 + 3", "2 + 3 ")
    teacher = ScriptedTeacher({PROBLEM: RIGHT, "p2": RIGHT}, {WRONG_AT_1: TIMEOUT, other_wrong: ok(2)})
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1]), ("p2", "9", [RIGHT, other_wrong])])
    outcome = judge_factory(teacher).process_step(rows)
    assert outcome.group_modes == [GROUP_FALLBACK_ENDPOINT] * 2 + [GROUP_CLIFF] * 2
    assert outcome.first_mistake == [None, None, None, 2]
    assert outcome.counters["judge_failures/timeout"] == 1
    assert outcome.counters["groups_fallback_endpoint"] == 1
    assert outcome.counters["groups_cliff"] == 1


def test_malformed_answer_gives_zero_and_counts_and_is_not_cached(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: PARSE_ERROR})
    judge = judge_factory(teacher)
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])])
    outcome = judge.process_step(rows)
    assert outcome.group_modes == [GROUP_CLIFF] * 2 and outcome.first_mistake == [None, 0]
    assert outcome.counters["judge_failures/parse_error"] == 1
    assert judge.judgments == {}
    judge.process_step(rows)
    assert len(teacher.judge_calls) == 2


def test_out_of_range_index_is_a_failure_not_a_crash(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: ok(17)})
    outcome = judge_factory(teacher).process_step(make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])]))
    assert outcome.first_mistake == [None, 0]
    assert outcome.counters["judge_failures/out_of_range"] == 1


def test_raising_teacher_is_contained(judge_factory):
    class RaisingTeacher(ScriptedTeacher):
        async def judge(self, problem, reference, sentences):
            raise RuntimeError("boom")

    outcome = judge_factory(RaisingTeacher({PROBLEM: RIGHT})).process_step(
        make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])])
    )
    assert outcome.group_modes == [GROUP_CLIFF] * 2  # like the teachers' own "error" status: p(a) = 0
    assert outcome.first_mistake == [None, 0]
    assert outcome.counters["judge_failures/error"] == 1


def test_caches_hit_on_repeat_and_round_trip_through_json(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: ok(1)})
    judge = judge_factory(teacher)
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1, WRONG_AT_1])])
    first = judge.process_step(rows)
    assert first.first_mistake == [None, 1, 1]
    assert len(teacher.judge_calls) == 2  # both copies judged in the same step (one concurrent batch)
    second = judge.process_step(rows)
    assert second.first_mistake == [None, 1, 1]
    assert len(teacher.solve_calls) == 1 and len(teacher.judge_calls) == 2
    assert (second.counters["reference_cache_hits"], second.counters["judgment_cache_hits"]) == (1, 2)

    state = json.loads(json.dumps(judge.state_dict()))
    fresh_teacher = ScriptedTeacher({}, {})
    restored = judge_factory(fresh_teacher)
    restored.load_state_dict(state)
    third = restored.process_step(rows)
    assert third.first_mistake == [None, 1, 1]
    assert fresh_teacher.solve_calls == [] and fresh_teacher.judge_calls == []
    assert completion_cache_key(f"key-{PROBLEM}", WRONG_AT_1) in state["judgments"]
    with pytest.raises(ValueError, match="cliff_state.json"):
        restored.load_state_dict({"version": 99})


def test_caches_can_be_disabled(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: ok(1)})
    judge = judge_factory(teacher, reference_cache=False, judgment_cache=False)
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])])
    judge.process_step(rows)
    judge.process_step(rows)
    assert len(teacher.solve_calls) == 2 and len(teacher.judge_calls) == 2


@pytest.mark.parametrize(
    ("script", "reducer", "expected", "agreement"),
    [
        ([ok(1), ok(3), ok(2)], "median", 2, 1 / 3),
        ([ok(3), ok(1), ok(3)], "majority", 3, 2 / 3),
        ([ok(1), NO_MISTAKE, NO_MISTAKE], "median", 0, 2 / 3),  # majority says no mistake -> disagreement
        ([ok(2), TIMEOUT, ok(2)], "median", 2, 1.0),  # endpoint failures are ignored when others answered
    ],
)
def test_self_consistency(judge_factory, script, reducer, expected, agreement):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: script})
    judge = judge_factory(teacher, self_consistency=3, reducer=reducer)
    outcome = judge.process_step(make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])]))
    assert outcome.first_mistake == [None, expected]
    assert outcome.counters["judge_calls"] == 3
    assert outcome.values["self_consistency_agreement"] == [pytest.approx(agreement)]


def test_reduce_first_mistakes_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one vote"):
        reduce_first_mistakes([])
    with pytest.raises(ValueError, match="reducer='mean'"):
        reduce_first_mistakes([1], reducer="mean")


def test_calls_are_concurrent_and_work_inside_a_running_event_loop(judge_factory):
    wrongs = [WRONG_AT_1.replace("11 - 1", f"11 - 1{' ' * k}") for k in range(8)]
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {w: ok(1) for w in wrongs}, rendezvous=8)
    judge = judge_factory(teacher)
    rows = make_rows([(PROBLEM, "9", [RIGHT, *wrongs])])

    async def caller_inside_a_loop():  # e.g. a notebook: the protocol must not call asyncio.run here
        return judge.process_step(rows)

    outcome = asyncio.run(caller_inside_a_loop())
    assert outcome.first_mistake[1:] == [1] * 8
    assert teacher.max_in_flight == 8  # all eight judge calls were in flight at once
    assert outcome.values["judge_wall_time"][0] > 0


def test_rank_sharding_splits_calls_and_all_ranks_agree(judge_factory):
    """Two simulated ranks in threads with an all-gather barrier: each call runs once, outcomes are identical."""
    wrongs = [WRONG_AT_1.replace("11 - 1", f"11 - 1{' ' * k}") for k in range(5)]
    rows = make_rows([(PROBLEM, "9", [RIGHT, *wrongs]), ("p2", "9", [RIGHT, WRONG_AT_2])])
    teachers = [
        ScriptedTeacher({PROBLEM: RIGHT, "p2": RIGHT}, {**{w: ok(1) for w in wrongs}, WRONG_AT_2: ok(2)})
        for _ in range(2)
    ]
    judges = [judge_factory(t) for t in teachers]
    barrier = threading.Barrier(2)
    slots: list = [None, None]

    def make_gather(rank):
        def gather(objects):
            slots[rank] = list(objects)
            barrier.wait()
            merged = slots[0] + slots[1]
            barrier.wait()
            return merged

        return gather

    outcomes: list = [None, None]

    def run(rank):
        outcomes[rank] = judges[rank].process_step(rows, rank=rank, world_size=2, gather=make_gather(rank))

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert outcomes[0].first_mistake == outcomes[1].first_mistake == [None, 1, 1, 1, 1, 1, None, 2]
    assert outcomes[0].group_modes == outcomes[1].group_modes
    assert len(teachers[0].solve_calls) + len(teachers[1].solve_calls) == 2
    assert len(teachers[0].judge_calls) + len(teachers[1].judge_calls) == 6
    assert len(teachers[0].judge_calls) == 3 and len(teachers[1].judge_calls) == 3
    assert judges[0].state_dict() == judges[1].state_dict()


def test_step_rows_must_align():
    with pytest.raises(ValueError, match="is_correct has 1 entries for 2 completions"):
        StepRows(["a", "a"], ["p", "p"], ["1", "1"], ["x", "y"], [True], [False, False], [0, 0])


def test_close_closes_the_teacher(judge_factory):
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: ok(1)})
    judge = CliffJudge(teacher, verify=verify)
    judge.process_step(make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])]))
    judge.close()
    assert teacher.closed


@pytest.mark.parametrize("failing_call", ["solve", "judge"])
def test_dead_endpoint_is_an_endpoint_fallback_whatever_call_failed(judge_factory, failing_call):
    """A teacher server that is down: the group falls back as ``fallback_endpoint`` (not "unverified") whether the
    failed request was the reference ``solve`` or a ``judge`` call (the reference cached from an earlier step)."""
    from hf_meds_cliff.cliff.teachers import OpenAICompatibleTeacher
    from hf_meds_cliff.testing import LoopbackChatServer, Reply

    with LoopbackChatServer(lambda body, index: Reply(content="unused")) as server:
        dead_url = server.base_url  # closed on exit: connections are refused from now on
    teacher = OpenAICompatibleTeacher(dead_url, "m", timeout=1.0, max_retries=1, backoff_base=0.01)
    judge = judge_factory(teacher)
    if failing_call == "judge":
        judge.references[f"key-{PROBLEM}"] = RIGHT
    outcome = judge.process_step(
        make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1]), ("p2", "9", [RIGHT, RIGHT])])
    )
    assert outcome.group_modes == [GROUP_FALLBACK_ENDPOINT] * 2 + [GROUP_SKIPPED] * 2
    assert outcome.first_mistake == [None, None, None, None]
    counters = outcome.counters
    assert (counters["groups_fallback_endpoint"], counters["groups_fallback_unverified"]) == (1, 0)
    assert counters[f"{failing_call}_failures/connection_error"] == 1
    assert teacher.counters["failures/connection_error"] == 1 and teacher.counters["retries"] == 1
    assert judge.references == ({f"key-{PROBLEM}": RIGHT} if failing_call == "judge" else {})


@pytest.mark.parametrize(
    ("status", "mode"), [("timeout", GROUP_FALLBACK_ENDPOINT), ("error", GROUP_FALLBACK_UNVERIFIED)]
)
def test_solve_failure_status_decides_the_fallback_kind(judge_factory, status, mode):
    from hf_meds_cliff.cliff.teachers.base import SolveFailure

    teacher = ScriptedTeacher({PROBLEM: SolveFailure(status, "scripted")}, {})
    outcome = judge_factory(teacher).process_step(make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])]))
    assert outcome.group_modes == [mode] * 2 and teacher.judge_calls == []
    assert outcome.counters[f"solve_failures/{status}"] == 1 and outcome.counters[f"groups_{mode}"] == 1
    with pytest.raises(ValueError, match="Unknown solve failure status 'ok'"):
        SolveFailure("ok")


def test_ungraded_rollouts_are_never_judged_and_never_decide_a_group(judge_factory):
    """Correctness ``None`` (the reward function could not grade the row): not judged, no first mistake, and the
    group's mode is decided by its graded rows only."""
    teacher = ScriptedTeacher({PROBLEM: RIGHT, "p2": RIGHT}, {WRONG_AT_1: ok(1), WRONG_AT_2: ok(2)})
    rows = make_rows(
        [
            (PROBLEM, "9", [RIGHT, WRONG_AT_1, WRONG_AT_2]),  # WRONG_AT_2 ungraded: still a mixed group
            ("p2", "9", [RIGHT, WRONG_AT_2]),  # the only wrong row ungraded: all graded rows correct
            ("p3", "9", [WRONG_AT_1, WRONG_AT_2]),  # nothing graded
        ]
    )
    for row in (2, 4, 5, 6):
        rows.is_correct[row] = None
    outcome = judge_factory(teacher).process_step(rows)
    assert outcome.group_modes == [GROUP_CLIFF] * 3 + [GROUP_SKIPPED] * 4
    assert outcome.first_mistake == [None, 1, None, None, None, None, None]
    assert teacher.judge_calls == [WRONG_AT_1] and teacher.solve_calls == [PROBLEM]
    assert outcome.counters["ungraded"] == 4 and outcome.counters["rollouts_with_mistake"] == 1


def test_judge_details_say_how_each_wrong_rollout_was_decided(judge_factory):
    """What the report shows: the raw answer of the teacher per judged rollout, cache hits, truncation."""
    raw_1 = Judgment(first_mistake=1, verdict_correct=False, status="ok", raw='{"first_mistake": 1}')
    teacher = ScriptedTeacher({PROBLEM: RIGHT}, {WRONG_AT_1: raw_1, WRONG_AT_2: NO_MISTAKE})
    judge = judge_factory(teacher)
    rows = make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1, WRONG_AT_2, WRONG_AT_2])], truncated={3})
    outcome = judge.process_step(rows)
    assert outcome.references == {f"key-{PROBLEM}": RIGHT}
    assert outcome.judge_details == {
        1: {
            "source": "judged",
            "raw": ['{"first_mistake": 1}'],
            "statuses": ["ok"],
            "votes": [1],
            "agreed": True,
        },
        2: {
            "source": "judged",
            "raw": [""],
            "statuses": ["ok"],
            "votes": [None],
            "agreed": False,
        },  # disagreement
        3: {"source": "truncated"},
    }
    again = judge.process_step(make_rows([(PROBLEM, "9", [RIGHT, WRONG_AT_1])]))
    assert again.judge_details == {1: {"source": "cached", "agreed": True}} and again.first_mistake == [
        None,
        1,
    ]
    unverified = judge_factory(ScriptedTeacher({})).process_step(
        make_rows([("other", "9", [RIGHT, WRONG_AT_1])])
    )
    assert unverified.judge_details == {1: {"source": "unverified"}}
    assert unverified.references == {"key-other": None}
