"""The code world: its task, the pure first-wrong-line checker, the unit mapping and the rule-based code teacher."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from hf_meds_cliff.cliff import code_unit_texts, split_code_units
from hf_meds_cliff.cliff.teachers import RuleBasedCodeTeacher, RuleBasedToyTeacher, build_teacher
from hf_meds_cliff.toy.code_checker import (
    MAX_STATEMENTS,
    UndecidableProgram,
    first_mistake_unit,
    first_wrong_line,
    trace_program,
)
from hf_meds_cliff.toy.code_task import (
    CodeProblem,
    CodeWorldConfig,
    generate_code_problem,
    iter_code_problems,
    make_code_dataset,
    parse_code_question,
)
from hf_meds_cliff.toy.code_world import build_code_tokenizer, completion_program, program_passes

# (a + 5) * 3 - b: chain values v1 = a + 5, v2 = 3a + 15, v3 = 3a + 15 - b.
QUESTION = "Read integers a and b from one line of standard input and print (a + 5) * 3 - b."
READ = "a, b = map(int, input().split())\n"
RIGHT = READ + "x = a + 5\nx = x * 3\nx = x - b\nprint(x)\n"


def test_question_renders_and_parses_back():
    problem = parse_code_question(QUESTION)
    assert problem.inputs == ("a", "b")
    assert problem.operations == (("+", 5), ("*", 3), ("-", "b"))
    assert problem.question == QUESTION
    assert problem.program == RIGHT
    assert problem.solution == f"Read a and b, then apply 3 operations.\n```python\n{RIGHT}```"
    rng = random.Random(1)
    for _ in range(200):
        drawn = generate_code_problem(rng)
        assert parse_code_question(drawn.question + " Answer in Python.") == drawn


def test_tests_follow_the_chain_have_distinct_inputs_and_defeat_a_constant():
    problem = parse_code_question(QUESTION)
    assert len(problem.tests) == CodeWorldConfig().num_tests == 3
    assert len({stdin for stdin, _ in problem.tests}) == 3
    for stdin, expected in problem.tests:
        a, b = map(int, stdin.split())
        assert expected == f"{(a + 5) * 3 - b}\n"
    assert parse_code_question(QUESTION).tests == problem.tests  # a function of the question text
    answers = {expected for _, expected in problem.tests}
    assert len(answers) > 1, "a program printing one constant would pass every test"
    constant = f"```python\nprint({problem.tests[0][1].strip()})\n```"
    assert not program_passes(problem, constant)


@pytest.mark.parametrize(
    "question",
    [
        "Compute (7 + 5) * 3 - 4.",
        "Read integers a and a from one line of standard input and print a + a.",
        "Read an integer a from standard input and print b + 1.",
        "Read an integer a from standard input and print a.",
        "Read integers a and b from one line of standard input and print a + 2 * b.",
    ],
)
def test_parse_rejects_questions_outside_the_world(question):
    with pytest.raises(ValueError, match="question|Question"):
        parse_code_question(question)
    assert not RuleBasedCodeTeacher.can_read(question)


def test_splits_are_disjoint_and_the_dataset_has_the_code_columns():
    test_questions = {p.question for p, _ in zip(iter_code_problems("test"), range(50))}
    train = iter_code_problems("train")
    assert not test_questions & {next(train).question for _ in range(2000)}
    dataset = make_code_dataset("test", 4)
    assert dataset.column_names == ["prompt", "tests", "problem_id", "solution"]
    row = dataset[0]
    problem = parse_code_question(row["prompt"][0]["content"])
    assert row["tests"] == problem.tests_column() and row["solution"] == problem.solution


def test_reference_completions_pass_and_fit_the_token_budget():
    tokenizer = build_code_tokenizer()
    problems = [p for p, _ in zip(iter_code_problems("train", stream_name="budget"), range(300))]
    assert all(program_passes(p, p.solution) for p in problems)
    lengths = [len(tokenizer(p.solution)["input_ids"]) for p in problems]
    assert max(lengths) + 1 <= 72  # the warm-up's default max_new_tokens, with eos
    for problem in problems[:20]:
        assert tokenizer.decode(tokenizer(problem.solution)["input_ids"]) == problem.solution


@pytest.mark.parametrize(
    ("program", "line"),
    [
        pytest.param(RIGHT, None, id="right"),
        pytest.param(READ + "x = (a + 5) * 3\nx = x - b\nprint(x)\n", None, id="two-steps-merged"),
        pytest.param(READ + "x = a + 5\nx *= 3\nx -= b\nprint(x)\n", None, id="augmented-assignments"),
        pytest.param(
            "line = input()\na, b = map(int, line.split())\nx = a + 5\nx = x * 3\nx = x - b\nprint(x)\n",
            None,
            id="raw-line-then-split",
        ),
        pytest.param(READ + "x = a + 5\n\nx = x * 3\nx = x - b\nprint(x)\n", None, id="blank-line"),
        pytest.param(READ + "x = a + 4\nx = x * 3\nx = x - b\nprint(x)\n", 2, id="wrong-first-operand"),
        pytest.param(READ + "x = a + 5\nx = x * 4\nx = x - b\nprint(x)\n", 3, id="wrong-multiplier"),
        pytest.param(READ + "x = a + 5\nx = x + 3\nx = x - b\nprint(x)\n", 3, id="wrong-operator"),
        pytest.param(READ + "x = a + 5\nx = x * 3\nx = x - a\nprint(x)\n", 4, id="wrong-input-used"),
        pytest.param(READ + "x = a + 5\nx = x - b\nprint(x)\n", 3, id="skipped-step"),
        pytest.param(READ + "x = a + 5\nx = x * 3\nprint(x)\n", 4, id="prints-too-early"),
        pytest.param(READ + "x = a + 5\nx = x * 3\nx = x - b\nprint(x - 1)\n", 5, id="prints-wrong-value"),
        pytest.param(READ + "x = a + 5\nx = x * 3\nx = x - b\n", 4, id="no-print"),
        pytest.param(RIGHT + "print(x)\n", 6, id="second-print"),
        pytest.param("b, a = map(int, input().split())\n" + RIGHT.split("\n", 1)[1], 1, id="inputs-swapped"),
        pytest.param("a = int(input())\nx = a + 5\nprint(x)\n", 1, id="misread-format-raises"),
        pytest.param(READ + "x = a + 5\nx = y * 3\nprint(x)\n", 3, id="undefined-name"),
        pytest.param(READ + "x = a + 5\nx = x * 3 +\nprint(x)\n", 3, id="syntax-error"),
        pytest.param(READ + "x = a + 4\nx = x * 3 +\nprint(x)\n", 2, id="wrong-line-before-syntax-error"),
        pytest.param(
            READ + "x = a + 5\nx = x * 3\nx = x - b\nprint(x)\nx = x // 0\n", 6, id="error-after-print"
        ),
        pytest.param("print(7)\n", 1, id="hard-coded-answer"),
        pytest.param(
            READ + "x = a + 5\n" + "x = x * x\n" * 80 + "print(x)\n", 3, id="squaring-blamed-not-evaluated"
        ),
        pytest.param(READ + "x = a + 4\nimport os\n", 2, id="wrong-line-before-unsupported"),
    ],
)
def test_first_wrong_line(program, line):
    assert first_wrong_line(QUESTION, program).line == line


@pytest.mark.parametrize(
    "program",
    [
        "import sys\na, b = map(int, sys.stdin.read().split())\nprint((a + 5) * 3 - b)\n",
        READ + "for _ in range(3):\n    a = a + 1\nprint(a)\n",
        READ + "x = a * 10000000000 * 10000000000\nprint(x)\n",
        READ + "x = a + 5\n" * (MAX_STATEMENTS + 2) + "print(x)\n",
        READ + "x = a + 5\nx = x ** 3\nprint(x)\n",
    ],
    ids=["sys-stdin", "loop", "beyond-the-integer-cap", "too-many-statements", "power"],
)
def test_programs_outside_the_vocabulary_are_undecidable_not_blamed(program):
    with pytest.raises(UndecidableProgram):
        first_wrong_line(QUESTION, program)


def test_trace_matches_python_semantics_on_hand_computed_cases():
    trace = trace_program("a, b = map(int, input().split())\nx = a * -2 + b % 3\nprint(x, a)\n", " 4  5 \n")
    assert trace.output == "-6 4\n"
    assert [s.line for s in trace.statements] == [1, 2, 3]
    assert trace_program("a = int(input())\n", "").error == "EOFError"
    assert trace_program("a, b = map(int, input().split())\n", "1 2 3\n").error == "ValueError"
    assert trace_program("a = int(input())\nprint(a)\n", "x\n").error_line == 1
    assert trace_program("exec('1')\n", "").unsupported_line == 1  # never executed, only refused


def test_first_mistake_unit_uses_the_code_unit_numbering():
    prose = "Read a and b, then apply 3 operations.\n```python\n"
    wrong = prose + READ + "x = a + 5\nx = x * 4\nx = x - b\nprint(x)\n```"
    units = code_unit_texts(wrong)
    assert units[0] == prose and units[3] == "x = x * 4\n"  # prose (with the fence), then one unit per line
    assert first_mistake_unit(QUESTION, wrong, split_code_units(wrong)) == 3
    two_sentences = (
        "We read a and b. Then three steps.\n```python\n" + READ + "x = a + 5\n\nx = x * 4\nprint(x)\n```"
    )
    assert first_mistake_unit(QUESTION, two_sentences, split_code_units(two_sentences)) == 4
    no_code = "I do not know. Sorry."
    assert first_mistake_unit(QUESTION, no_code, split_code_units(no_code)) == 1
    empty_program = "Read a and b.\n```python\n\n```"
    assert first_mistake_unit(QUESTION, empty_program, split_code_units(empty_program)) == 0
    right = prose + RIGHT + "```"
    assert first_mistake_unit(QUESTION, right, split_code_units(right)) is None
    assert completion_program(right) == RIGHT


def test_rule_code_teacher_solves_and_judges():
    teacher = build_teacher("rule", domain="code")
    assert isinstance(teacher, RuleBasedCodeTeacher) and isinstance(teacher, RuleBasedToyTeacher)
    assert isinstance(build_teacher("rule", domain="math"), RuleBasedToyTeacher)
    assert not isinstance(build_teacher("rule", domain="math"), RuleBasedCodeTeacher)
    reference = asyncio.run(teacher.solve(QUESTION))
    assert reference == parse_code_question(QUESTION).solution
    wrong = (
        "Read a and b, then apply 3 operations.\n```python\n" + READ + "x = a + 5\nx = x + 3\nprint(x)\n```"
    )
    judgment = asyncio.run(teacher.judge(QUESTION, reference, code_unit_texts(wrong)))
    assert (judgment.status, judgment.first_mistake, judgment.verdict_correct) == ("ok", 3, False)
    right = asyncio.run(teacher.judge(QUESTION, reference, code_unit_texts(reference)))
    assert (right.status, right.first_mistake, right.verdict_correct) == ("ok", None, True)
    undecidable = "```python\nimport sys\nprint(1)\n```"
    assert (
        asyncio.run(teacher.judge(QUESTION, reference, code_unit_texts(undecidable))).status == "parse_error"
    )
    assert asyncio.run(teacher.judge("Compute 1 + 2.", reference, ["1 + 2 = 3."])).status == "parse_error"
    assert asyncio.run(teacher.judge(QUESTION, reference, [])).status == "empty"
    assert asyncio.run(teacher.solve("Compute 1 + 2.")) is None
    assert teacher.counters["failures/undecidable"] == 1 and teacher.counters["judge_calls"] == 5


def test_config_validation():
    with pytest.raises(ValueError, match="num_tests"):
        CodeWorldConfig(num_tests=0)
    with pytest.raises(ValueError, match="two_input_fraction"):
        CodeWorldConfig(two_input_fraction=1.5)
    assert isinstance(
        generate_code_problem(random.Random(0), CodeWorldConfig(two_input_fraction=0.0)), CodeProblem
    )
    assert generate_code_problem(random.Random(0), CodeWorldConfig(two_input_fraction=0.0)).inputs == ("a",)


def _mutants(problem: CodeProblem) -> list[str]:
    """The reference program and wrong variants of it, each a kind of mistake a student makes."""
    program = problem.program
    lines = program.splitlines(keepends=True)
    swapped = lines[0].replace("a, b", "b, a") if len(problem.inputs) == 2 else "a = int(input()) + 1\n"
    first_op, first_operand = problem.operations[0]
    return [
        program,
        "".join([lines[0], *lines[1:-1], "print(x + 1)\n"]),
        "".join([swapped, *lines[1:]]),
        "".join([lines[0], *lines[2:]]).replace("x = x", "x = a", 1),  # the first step skipped
        "".join([lines[0], lines[1].replace(f"{first_op} {first_operand}", f"{first_op} 7"), *lines[2:]]),
        "".join([*lines[:-1], "print(y)\n"]),
        "".join([*lines[:-1], "print(x\n"]),
        "".join(lines[:-1]),
        "a = int(input())\n" + "".join(lines[1:]),
        f"print({problem.tests[0][1].strip()})\n",
        "".join([*lines[:-1], "print(x)\n", "print(x)\n"]),
    ]


def test_pure_evaluation_agrees_with_the_sandbox():
    """The checker's evaluation (never executing the program) and the sandbox agree on pass/fail; a program the
    checker finds no wrong line in passes, and one that fails always gets a wrong line."""
    from hf_meds_cliff.code import run_tests_batch

    problems = [p for p, _ in zip(iter_code_problems("test", stream_name="agreement"), range(6))]
    jobs, expected = [], []
    for problem in problems:
        for program in _mutants(problem):
            completion = f"Some prose.\n```python\n{program}```"
            jobs.append((program, problem.tests_column()))
            verdict = first_wrong_line(problem, program)
            expected.append((program_passes(problem, completion), verdict.line))
    results = run_tests_batch(jobs)
    assert [r.passed for r in results] == [passes for passes, _ in expected]
    assert all(
        r.passed == (line is None) for r, (_, line) in zip(results, expected) if line is None or not r.passed
    )
    references = results[:: len(_mutants(problems[0]))]
    assert all(r.passed for r in references)
    assert sum(not r.passed for r in results) >= len(results) - 2 * len(problems)  # the mutants mostly fail


def test_warmup_settings_validation_and_cache_key():
    from hf_meds_cliff.toy import build_toy_tokenizer
    from hf_meds_cliff.toy.code_world import CodeWarmupSettings, warmup_code_world

    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        CodeWarmupSettings(batch_size=0)
    with pytest.raises(ValueError, match="target_greedy_accuracy"):
        CodeWarmupSettings(target_greedy_accuracy=2.0)
    with pytest.raises(TypeError, match="Unknown code-world warm-up setting"):
        warmup_code_world(None, trap_rate=0.1)
    base = CodeWarmupSettings().cache_key()
    assert CodeWarmupSettings(time_budget_s=5.0).cache_key() == base  # a capped run is never reused anyway
    assert CodeWarmupSettings(world=CodeWorldConfig(num_tests=4)).cache_key() != base
    assert CodeWarmupSettings(seed=1).cache_key() != base
    with pytest.raises(ValueError, match="without a line break"):
        build_toy_tokenizer(word_tokens=["x = \n"])


@pytest.mark.slow
def test_short_code_warmup_writes_a_loadable_reusable_policy(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_meds_cliff.toy.code_world import warmup_code_world

    settings = {
        "max_steps": 4,
        "eval_start_step": 2,
        "eval_every_steps": 2,
        "num_validation_problems": 4,
        "num_test_problems": 3,
        "num_samples": 2,
        "max_new_tokens": 16,
    }
    folder = warmup_code_world(tmp_path / "policy", **settings)
    metrics = json.loads((folder / "warmup_metrics.json").read_text())
    assert metrics["steps"] == 4 and metrics["stop_reason"] == "max_steps"
    assert [h["step"] for h in metrics["validation_history"]] == [2, 4]
    for key in (
        "greedy_accuracy",
        "pass@1",
        "pass@2",
        "mixed_group_fraction",
        "program_fraction",
        "static_agreement",
    ):
        assert 0.0 <= metrics["test_split"][key] <= 1.0
    AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.tokenize("```python") == ["```python"]
    modified = (folder / "model.safetensors").stat().st_mtime_ns
    assert warmup_code_world(tmp_path / "policy", **settings) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == modified  # reused, not retrained


def test_tests_never_all_expect_the_same_output():
    from hf_meds_cliff.toy import ToyTaskConfig
    from hf_meds_cliff.toy.code_task import make_tests

    tiny = CodeWorldConfig(task=ToyTaskConfig(min_operand=1, max_operand=2), num_tests=2)
    for constant in range(1, 30):  # a - b + c over inputs {1, 2}: (1, 1) and (2, 2) both give c
        tests = make_tests(("a", "b"), (("-", "b"), ("+", constant)), tiny)
        assert len({expected for _, expected in tests}) == 2
    with pytest.raises(ValueError, match="Could not draw 3 distinct tests"):
        make_tests(("a",), (("*", 2),), CodeWorldConfig(task=ToyTaskConfig(min_operand=1, max_operand=2)))
