"""Toy task generator, question parser and train/test split."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from hf_meds_cliff.toy import (
    ToyProblem,
    ToyTaskConfig,
    generate_problem,
    iter_problems,
    make_toy_dataset,
    parse_question,
    problem_id,
    question_split,
)


def _expression(question: str) -> str:
    return re.fullmatch(r"Compute (.+)\.", question).group(1)


def test_example_from_the_issue():
    problem = ToyProblem.from_operations(7, (("+", 5), ("*", 3), ("-", 4)))
    assert problem.question == "Compute (7 + 5) * 3 - 4."
    assert problem.solution == "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}."
    assert problem.answer == 32


@pytest.mark.parametrize(
    ("first", "operations", "expression", "answer"),
    [
        (7, (("*", 3), ("+", 5)), "7 * 3 + 5", 26),
        (3, (("-", 15), ("*", 2)), "(3 - 15) * 2", -24),
        (7, (("-", 5), ("*", 3), ("+", 1), ("*", 2)), "((7 - 5) * 3 + 1) * 2", 14),
        (2, (("*", 3), ("*", 4), ("-", 30)), "2 * 3 * 4 - 30", -6),
        (9, (("-", 20),), "9 - 20", -11),
    ],
)
def test_brackets_only_where_precedence_differs(first, operations, expression, answer):
    problem = ToyProblem.from_operations(first, operations)
    assert _expression(problem.question) == expression
    assert problem.answer == answer


def test_random_problems_match_python_precedence_and_round_trip_through_the_parser():
    rng = random.Random(123)
    config = ToyTaskConfig(min_steps=1, max_steps=5)
    for _ in range(300):
        problem = generate_problem(rng, config)
        assert eval(_expression(problem.question)) == problem.answer  # Python's precedence, independent check
        assert parse_question(problem.question) == problem
        sentences = problem.solution.split(". ")
        assert len(sentences) == len(problem.operations) + 1
        assert problem.solution.endswith(f"The answer is \\boxed{{{problem.answer}}}.")


def test_generator_respects_the_difficulty_knobs():
    config = ToyTaskConfig(
        min_steps=3, max_steps=4, min_operand=10, max_operand=12, min_multiplier=7, max_multiplier=7
    )
    rng = random.Random(0)
    seen_steps = set()
    for _ in range(200):
        problem = generate_problem(rng, config)
        seen_steps.add(len(problem.operations))
        assert 10 <= problem.first_operand <= 12
        for op, right in problem.operations:
            assert right == 7 if op == "*" else 10 <= right <= 12
    assert seen_steps == {3, 4}


def test_default_config_draws_two_or_three_steps_with_all_operators_and_negative_results():
    rng = random.Random(1)
    problems = [generate_problem(rng) for _ in range(400)]
    assert {len(p.operations) for p in problems} == {2, 3}
    assert {op for p in problems for op, _ in p.operations} == {"+", "-", "*"}
    assert any(p.answer < 0 for p in problems)


def test_generator_is_deterministic_and_accepts_numpy_generators():
    assert generate_problem(random.Random(5)) == generate_problem(random.Random(5))
    a = generate_problem(np.random.default_rng(5))
    assert a == generate_problem(np.random.default_rng(5))
    with pytest.raises(TypeError, match="random.Random"):
        generate_problem(5)


def test_parse_question_accepts_trailing_text_and_negative_first_operands():
    problem = parse_question(
        "Compute (7 + 5) * 3 - 4. Please reason step by step, and put your final answer within \\boxed{}."
    )
    assert problem.answer == 32
    negative = parse_question("Compute (-3) * 2 + 1.")
    assert (negative.first_operand, negative.operations, negative.answer) == (-3, (("*", 2), ("+", 1)), -5)


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ("What is 2 + 3?", "Cannot parse a toy question"),
        ("Compute 2 + 3 * 4.", "not a left-to-right chain"),
        ("Compute (2 + 3 * 4.", "unbalanced|ends too early"),
        ("Compute 2 + + 3.", "unexpected"),
        ("Compute 7.", "no operation"),
    ],
)
def test_parse_question_rejects_bad_text(question, message):
    with pytest.raises(ValueError, match=message):
        parse_question(question)


def test_parse_question_rejects_non_strings():
    with pytest.raises(TypeError, match="question must be a str"):
        parse_question(None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_steps": 3, "max_steps": 2}, "min_steps"),
        ({"min_operand": -1}, "non-negative"),
        ({"min_multiplier": 6, "max_multiplier": 5}, "min_multiplier"),
        ({"operators": ("/",)}, "operators"),
        ({"test_fraction": 1.0}, "test_fraction"),
    ],
)
def test_task_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ToyTaskConfig(**kwargs)


def test_dataset_rows_have_the_shared_layout():
    dataset = make_toy_dataset("test", 5)
    assert dataset.column_names == ["prompt", "answer", "problem_id", "solution"]
    row = dataset[0]
    assert row["prompt"][0]["role"] == "user" and len(row["prompt"]) == 1
    problem = parse_question(row["prompt"][0]["content"])
    assert row["answer"] == str(problem.answer)
    assert row["solution"] == problem.solution
    assert row["problem_id"] == problem_id(problem.question)


def test_test_split_is_fixed_by_seed_and_distinct():
    a = make_toy_dataset("test", 300, seed=0)
    b = make_toy_dataset("test", 300, seed=0)
    assert a["problem_id"] == b["problem_id"]
    assert len(set(a["problem_id"])) == 300
    other_seed = make_toy_dataset("test", 300, seed=1)
    assert set(a["problem_id"]) != set(other_seed["problem_id"])
    assert make_toy_dataset("test", 10, seed=0)["problem_id"] == a["problem_id"][:10]


def test_train_split_never_contains_a_test_question():
    test_questions = {row[0]["content"] for row in make_toy_dataset("test", 2000, seed=0)["prompt"]}
    train = make_toy_dataset("train", 3000, seed=0)
    train_questions = [row[0]["content"] for row in train["prompt"]]
    assert not test_questions & set(train_questions)
    assert all(question_split(q, seed=0) == "train" for q in train_questions)
    # a question space small enough to hit every test question still never leaks into train
    small = ToyTaskConfig(min_steps=1, max_steps=1, max_operand=4, operators=("+",))
    small_test = list(make_toy_dataset("train", 200, seed=3, config=small)["problem_id"])
    assert not {problem_id(q) for q in _all_small_questions() if question_split(q, 3) == "test"} & set(
        small_test
    )


def _all_small_questions():
    return [f"Compute {a} + {b}." for a in range(1, 5) for b in range(1, 5)]


def test_exhausting_a_tiny_test_split_raises_a_clear_error():
    tiny = ToyTaskConfig(min_steps=1, max_steps=1, min_operand=1, max_operand=1, operators=("+",))
    with pytest.raises(ValueError, match="too small"):
        make_toy_dataset("test", 5, config=tiny)


def test_bad_arguments():
    with pytest.raises(ValueError, match="split must be"):
        next(iter_problems("validation"))
    with pytest.raises(ValueError, match="num_rows"):
        make_toy_dataset("train", -1)
