"""The code judge: prompt contents, unit numbering, and the protocol passing the test result to the teacher."""

from __future__ import annotations

import json

import pytest
from helpers import needs_qwen_tokenizer

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


# --- on Qwen's real tokenizer, with the real sandbox ------------------------------------------------------------

QWEN_ROLLOUT = (
    "<think>\nThe sum 1 + ... + n. A loop works; e.g. n = 3 gives 6.\n</think>\n\n"
    "We read n and add the numbers up.\n\n"
    "```python\n"
    "import sys\n"
    "\n"
    "def main():\n"
    "    n = int(sys.stdin.readline())\n"
    "    total = 0\n"
    "    for i in range(1, n):  # 1..n-1\n"
    "        total += i\n"
    "    print(total)\n"
    "\n"
    "main()\n"
    "```\n"
    "This is O(n)."
)
SUM_TESTS = json.dumps(
    [{"input": f"{n}\n", "output": f"{n * (n + 1) // 2}\n", "testtype": "stdin"} for n in (3, 1, 10)]
)


@pytest.fixture(scope="module")
def qwen_tokenizer():
    from hf_meds_cliff.toy.qwen_world import load_qwen_tokenizer

    return load_qwen_tokenizer()


@needs_qwen_tokenizer
def test_judge_prompt_of_a_qwen_decoded_rollout_keeps_every_numbered_line(qwen_tokenizer):
    """The text the trainer judges is Qwen's decode of the rollout's ids; its units, numbered in the code judge's
    prompt and rendered with Qwen's chat template, come back line for line, with the failing test."""
    from hf_meds_cliff.cliff.code_domain import CodeTestRunner

    ids = qwen_tokenizer(QWEN_ROLLOUT, add_special_tokens=False)["input_ids"] + [qwen_tokenizer.eos_token_id]
    text = qwen_tokenizer.decode(ids, skip_special_tokens=True)
    assert text == QWEN_ROLLOUT
    units = code_unit_texts(text)
    truth = json.dumps({"tests": SUM_TESTS, "fn_name": None})
    execution = CodeTestRunner().describe_failure(text, truth)
    assert execution.startswith("The program failed test 1 of 3: wrong answer.")
    assert "Input:\n```\n3\n```\nExpected output:\n```\n6\n```\nActual output:\n```\n3\n```" in execution
    messages = build_judge_messages(PROBLEM, REFERENCE, units, domain="code", execution=execution)
    rendered = qwen_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith("<|im_start|>system\n" + CODE_JUDGE_SYSTEM_PROMPT)
    numbered = rendered.split("numbered from 0)\n", 1)[1].split("\n\n## Result", 1)[0]
    loop = next(k for k, unit in enumerate(units) if "range(1, n)" in unit)
    assert f"[{loop}]     for i in range(1, n):  # 1..n-1" in numbered.splitlines()
    # every unit's text is in the prompt, in order, under its number
    position = 0
    for index, unit in enumerate(units):
        position = numbered.index(f"[{index}] {unit.rstrip()}", position)
    assert execution in rendered
    # the prompt round-trips through Qwen's tokenizer (what a served Qwen teacher reads)
    prompt_ids = qwen_tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert qwen_tokenizer.decode(prompt_ids) == rendered


@needs_qwen_tokenizer
def test_reference_filter_runs_qwen_decoded_teacher_programs(qwen_tokenizer):
    """A teacher's reply (reasoning, then the program) decoded from Qwen ids is verified by running its last fenced
    block on the row's tests: the right program passes, an off-by-one one and a reply without code do not."""
    from hf_meds_cliff.cliff.code_domain import CodeTestRunner

    runner = CodeTestRunner()
    truth = json.dumps({"tests": SUM_TESTS, "fn_name": None})

    def decoded(reply: str) -> str:
        ids = qwen_tokenizer(reply, add_special_tokens=False)["input_ids"]
        return qwen_tokenizer.decode(ids, skip_special_tokens=True)

    right = decoded("<think>\nGauss.\n```python\nprint(0)\n```\n</think>\n\n" + REFERENCE)
    assert runner.verify(right, truth)  # the last block counts, not the draft in the reasoning
    assert not runner.verify(decoded(QWEN_ROLLOUT), truth)
    assert not runner.verify(decoded("The answer is n(n+1)/2."), truth)
    assert runner.describe_failure(decoded("The answer is n(n+1)/2."), truth).startswith("No program")


def test_self_consistency_on_code_runs_each_program_once_and_judges_it_k_times():
    teacher = ScriptedCodeTeacher(REFERENCE)
    judge, calls = _judge(teacher, self_consistency=3)
    try:
        rows = _code_rows()
        rows.completions[3] = WRONG.replace("total = 0", "total = 1")
        outcome = judge.process_step(rows)
    finally:
        judge.close()
    assert sum(1 for call in calls if call[0] == "describe") == 2 and outcome.counters["executions"] == 2
    assert outcome.counters["judge_calls"] == 6 and len(teacher.judged) == 6
    assert all(execution is not None and execution.startswith("ran: ") for _, execution in teacher.judged)
    assert outcome.first_mistake[1] == outcome.first_mistake[3] == 3
    assert outcome.judge_details[1]["votes"] == [3, 3, 3]


def test_http_teacher_sends_the_code_prompts_with_the_test_result():
    """Over HTTP (scripted loopback server): the code teacher's solve request asks for a program, its judge request
    carries the numbered lines and the execution, and the unit id comes back through the parser."""
    import asyncio

    from hf_meds_cliff.cliff.teachers import build_teacher
    from hf_meds_cliff.testing import LoopbackChatServer, Reply

    def responder(body, index):
        if body["messages"][0]["content"] == CODE_INSTRUCTION:
            return Reply(content=f"Use Gauss.\n{REFERENCE}")
        return Reply(content='Line [3] stops at n-1.\n{"final_answer_correct": false, "first_mistake": 3}')

    with LoopbackChatServer(responder) as server:
        teacher = build_teacher("http", base_url=server.base_url, model="m", domain="code", max_retries=0)

        async def run():
            try:
                solution = await teacher.solve(PROBLEM)
                judgment = await teacher.judge(
                    PROBLEM, REFERENCE, code_unit_texts(WRONG), execution=EXECUTION
                )
                return solution, judgment
            finally:
                await teacher.aclose()

        solution, judgment = asyncio.run(run())
        solve_body, judge_body = (request.body for request in server.requests)
    assert teacher.domain == "code" and solution.endswith(REFERENCE)
    assert solve_body["messages"] == build_solve_messages(PROBLEM, domain="code")
    assert judge_body["messages"] == build_judge_messages(
        PROBLEM, REFERENCE, code_unit_texts(WRONG), domain="code", execution=EXECUTION
    )
    assert (judgment.first_mistake, judgment.status) == (3, "ok")
    with pytest.raises(ValueError, match="domain='sql' is unknown"):
        build_teacher("http", base_url=server.base_url, model="m", domain="sql")
