"""The code judge: prompt contents, unit numbering, and the protocol passing the test result to the teacher."""

from __future__ import annotations

import json

import pytest

from hf_meds_cliff.cliff import Judgment, code_unit_texts, parse_judgment, split_code_units
from hf_meds_cliff.cliff.judging import (
    CODE_INSTRUCTION,
    CODE_JUDGE_SYSTEM_PROMPT,
    JUDGE_SYSTEM_PROMPT,
    build_judge_messages,
    build_solve_messages,
    format_numbered_units,
)
from hf_meds_cliff.cliff.protocol import GROUP_CLIFF, GROUP_FALLBACK_UNVERIFIED, CliffJudge, StepRows

PROBLEM = "Read an integer n and print the sum 1 + 2 + ... + n."
REFERENCE = "```python\nn = int(input())\nprint(n * (n + 1) // 2)\n```"
WRONG = (
    "The sum of the first n integers is a loop.\n"
    "```python\n"
    "n = int(input())\n"
    "total = 0\n"
    "for i in range(n):\n"
    "    total += i\n"
    "print(total)\n"
    "```"
)
EXECUTION = (
    "The program failed test 1 of 3: wrong answer.\nInput:\n```\n3\n```\nExpected output:\n```\n6\n```"
)


def test_code_units_of_the_example():
    assert code_unit_texts(WRONG) == [
        "The sum of the first n integers is a loop.\n```python\n",
        "n = int(input())\n",
        "total = 0\n",
        "for i in range(n):\n",
        "    total += i\n",
        "print(total)\n```",
    ]


def test_code_judge_prompt_has_the_rules_the_inputs_and_the_numbered_lines():
    units = code_unit_texts(WRONG)
    system, user = build_judge_messages(PROBLEM, REFERENCE, units, domain="code", execution=EXECUTION)
    assert system == {"role": "system", "content": CODE_JUDGE_SYSTEM_PROMPT}
    rules = system["content"]
    # the paper's rules carried over, and what only code has
    for phrase in (
        "passes the tests is correct unless it contains an irrefutable, fatal error",
        "different but valid algorithm",
        "equivalent rewrites",
        "later notices and corrects",
        "loops, repeats itself",
        "Mark only the first genuine mistake",
        "off-by-one",
        "misread input or output format",
        "complexity is too high",
        '"first_mistake"',
    ):
        assert phrase in rules, phrase
    content = user["content"]
    assert PROBLEM in content and REFERENCE in content and EXECUTION in content
    assert f"({len(units)} units, numbered from 0)" in content and f"from 0 to {len(units) - 1}" in content
    # indentation of code lines survives the numbering; fences stay with their unit
    assert "[3] for i in range(n):\n[4]     total += i\n[5] print(total)\n```" in content
    assert "[0] The sum of the first n integers is a loop.\n```python\n[1] n = int(input())" in content


def test_code_judge_without_a_test_result_says_so_and_math_is_unchanged():
    units = code_unit_texts(WRONG)
    _, user = build_judge_messages(PROBLEM, REFERENCE, units, domain="code")
    assert "Not available: judge the program by reading it." in user["content"]
    math = build_judge_messages("Compute 1 + 2.", "1 + 2 = 3.", ["1 + 2 = 4."], execution="ignored")
    assert math[0]["content"] == JUDGE_SYSTEM_PROMPT and "ignored" not in math[1]["content"]
    assert math == build_judge_messages("Compute 1 + 2.", "1 + 2 = 3.", ["1 + 2 = 4."])


def test_code_solve_prompt_asks_for_one_fenced_program():
    messages = build_solve_messages(PROBLEM, domain="code")
    assert messages == [
        {"role": "system", "content": CODE_INSTRUCTION},
        {"role": "user", "content": PROBLEM},
    ]
    assert "```python" in CODE_INSTRUCTION and "standard input" in CODE_INSTRUCTION
    assert "boxed" not in json.dumps(messages)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: build_judge_messages(PROBLEM, REFERENCE, ["x"], domain="sql"),
            ValueError,
            "domain='sql' is unknown",
        ),
        (lambda: build_solve_messages(PROBLEM, domain="sql"), ValueError, "domain='sql' is unknown"),
        (lambda: build_judge_messages(PROBLEM, REFERENCE, [], domain="code"), ValueError, "is empty"),
        (
            lambda: build_judge_messages(PROBLEM, REFERENCE, "x = 1", domain="code"),
            TypeError,
            "split_code_units",
        ),
        (
            lambda: build_judge_messages(PROBLEM, REFERENCE, ["x"], domain="code", execution=3),
            TypeError,
            "execution",
        ),
    ],
)
def test_code_judge_rejects_bad_input(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_format_numbered_units_strips_only_line_ends():
    assert format_numbered_units(["a\n", "    b  \n\n", "c"]) == "[0] a\n[1]     b\n[2] c"


def test_parse_judgment_reads_a_unit_id_within_the_unit_count():
    units = code_unit_texts(WRONG)
    answer = 'Line [3] iterates 0..n-1: off by one.\n{"final_answer_correct": false, "first_mistake": 3}'
    assert parse_judgment(answer, len(units)) == Judgment(3, False, "ok", answer)
    assert parse_judgment('{"first_mistake": 6}', len(units)).status == "out_of_range"


# --- the protocol on code, with a scripted teacher and scripted checks ------------------------------------------


class ScriptedCodeTeacher:
    """Solves with a fixed program and puts the first mistake at the line containing ``marker``."""

    name = "scripted-code"

    def __init__(self, solution: str, marker: str = "range(n)"):
        self.solution = solution
        self.marker = marker
        self.judged: list[tuple[list[str], str | None]] = []
        self.counters: dict[str, int] = {}

    async def solve(self, problem):
        return self.solution

    async def judge(self, problem, reference, sentences, execution=None):
        self.judged.append((list(sentences), execution))
        index = next(k for k, unit in enumerate(sentences) if self.marker in unit)
        return Judgment(index, False, "ok", f"line {index}")

    async def aclose(self):
        return None


class TeacherWithoutExecution(ScriptedCodeTeacher):
    async def judge(self, problem, reference, sentences):  # an older teacher: no `execution` keyword
        return await super().judge(problem, reference, sentences)


def _code_rows(ground_truth: str | None = '{"tests": "t", "fn_name": null}') -> StepRows:
    right = REFERENCE
    return StepRows(
        prompt_keys=["p", "p", "p", "p"],
        problems=[PROBLEM] * 4,
        ground_truths=[ground_truth] * 4,
        completions=[right, WRONG, right, "no code at all"],
        is_correct=[True, False, True, False],
        is_truncated=[False, False, False, False],
        group_ids=[0, 0, 0, 0],
    )


def _judge(teacher, verified=True, **kwargs) -> tuple[CliffJudge, list]:
    calls: list = []

    def verify(solution, ground_truth):
        calls.append(("verify", solution, ground_truth))
        return verified

    def describe(completion, ground_truth):
        calls.append(("describe", completion, ground_truth))
        return f"ran: {completion[:10]}"

    judge = CliffJudge(
        teacher,
        verify=verify,
        split=split_code_units,
        describe_failure=describe,
        checks_in_threads=True,
        **kwargs,
    )
    return judge, calls


def test_protocol_on_code_numbers_lines_and_shows_the_teacher_the_test_result():
    teacher = ScriptedCodeTeacher(REFERENCE)
    judge, calls = _judge(teacher)
    try:
        outcome = judge.process_step(_code_rows())
    finally:
        judge.close()
    assert outcome.group_modes == [GROUP_CLIFF] * 4
    # the reference filter ran on the teacher's program with the row's ground truth
    assert calls[0] == ("verify", REFERENCE, '{"tests": "t", "fn_name": null}')
    # only the incorrect rows were run, and their results went to the teacher with the numbered lines
    assert sorted(c[1] for c in calls if c[0] == "describe") == sorted([WRONG, "no code at all"])
    judged = {tuple(units): execution for units, execution in teacher.judged if len(units) > 1}
    assert judged == {tuple(code_unit_texts(WRONG)): f"ran: {WRONG[:10]}"}
    # "for i in range(n):" is unit 3 of the wrong rollout; the rollout without code has no such line -> error
    assert outcome.first_mistake[1] == 3
    assert outcome.counters["judge_failures/error"] == 1 and outcome.first_mistake[3] == 0
    assert outcome.sentence_spans[1] == split_code_units(WRONG)
    assert outcome.counters["executions"] == 2
    assert outcome.judge_details[1]["execution"] == f"ran: {WRONG[:10]}"


def test_a_teacher_without_the_execution_keyword_is_judged_without_it():
    teacher = TeacherWithoutExecution(REFERENCE)
    judge, _ = _judge(teacher)
    try:
        rows = _code_rows()
        rows.completions[3] = WRONG.replace("total = 0", "total = 1")
        outcome = judge.process_step(rows)
    finally:
        judge.close()
    assert [execution for _, execution in teacher.judged] == [None, None]
    assert outcome.first_mistake[1] == 3 and outcome.first_mistake[3] == 3


def test_unverified_reference_program_falls_back_and_runs_no_student_program():
    teacher = ScriptedCodeTeacher("```python\nprint(0)\n```")
    judge, calls = _judge(teacher, verified=False)
    try:
        outcome = judge.process_step(_code_rows())
    finally:
        judge.close()
    assert outcome.group_modes == [GROUP_FALLBACK_UNVERIFIED] * 4
    assert (
        outcome.counters["references_unverified"] == 1 and outcome.counters["groups_fallback_unverified"] == 1
    )
    assert [c[0] for c in calls] == ["verify"] and teacher.judged == []
    assert judge.references == {}


def test_a_crashing_test_run_is_counted_and_the_teacher_still_judges():
    teacher = ScriptedCodeTeacher(REFERENCE)

    def describe(completion, ground_truth):
        raise RuntimeError("sandbox exploded")

    judge = CliffJudge(
        teacher,
        verify=lambda s, g: True,
        split=split_code_units,
        describe_failure=describe,
        checks_in_threads=True,
    )
    try:
        rows = _code_rows()
        rows.completions[3] = WRONG
        outcome = judge.process_step(rows)
    finally:
        judge.close()
    assert outcome.counters["execution_failures/error"] == 2
    assert outcome.first_mistake[1] == 3 and [execution for _, execution in teacher.judged] == [None, None]
