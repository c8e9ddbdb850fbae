"""Exact first-mistake indices of the rule-based toy checker on hand-made solutions."""

from __future__ import annotations

import random

import pytest

from hf_meds_cliff.cliff import split_sentences
from hf_meds_cliff.toy import ToyProblem, first_mistake_index, generate_problem, parse_question

QUESTION = "Compute (7 + 5) * 3 - 4."
CORRECT = "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}."


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        pytest.param(CORRECT, None, id="correct"),
        pytest.param(CORRECT + "\n", None, id="correct-trailing-newline"),
        pytest.param(
            "7+5=12.  12*3=36. 36 -4= 32. The answer is \\boxed{ 32 }.", None, id="correct-odd-spacing"
        ),
        pytest.param(
            "7 + 5 = 13. 13 * 3 = 39. 39 - 4 = 35. The answer is \\boxed{35}.", 0, id="wrong-first-result"
        ),
        pytest.param(
            "7 + 5 = 12. 12 * 3 = 35. 35 - 4 = 31. The answer is \\boxed{31}.", 1, id="wrong-arithmetic"
        ),
        pytest.param(
            "7 + 5 = 13. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}.",
            0,
            id="right-answer-through-wrong-step",
        ),
        pytest.param(
            "7 + 5 = 12. 12 * 4 = 48. 48 - 4 = 44. The answer is \\boxed{44}.", 1, id="wrong-operand-copied"
        ),
        pytest.param(
            "7 + 5 = 12. 12 + 3 = 15. 15 - 4 = 11. The answer is \\boxed{11}.", 1, id="wrong-operator"
        ),
        pytest.param(
            "7 + 5 = 12. 13 * 3 = 39. 39 - 4 = 35. The answer is \\boxed{35}.", 1, id="wrong-carried-result"
        ),
        pytest.param(
            "5 + 7 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}.", 0, id="operands-swapped"
        ),
        pytest.param("7 + 5 = 12. 36 - 4 = 32. The answer is \\boxed{32}.", 1, id="skipped-step"),
        pytest.param(
            "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. 32 + 0 = 32. The answer is \\boxed{32}.",
            3,
            id="extra-step",
        ),
        pytest.param(
            "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{23}.", 3, id="wrong-boxed-value"
        ),
        pytest.param("7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is 32.", 3, id="answer-not-boxed"),
        pytest.param("7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32.", 2, id="missing-final-answer"),
        pytest.param("7 + 5 = 12. 12 * 3 = 36.", 1, id="stops-after-two-steps"),
        pytest.param("7 + 5 = 12. 12 ** = 3 3. 36 - 4 = 32. The answer is \\boxed{32}.", 1, id="gibberish"),
        pytest.param(
            "7 + 5 = 12. Twelve times three is 36. 36 - 4 = 32. The answer is \\boxed{32}.", 1, id="words"
        ),
        pytest.param(CORRECT + " 32 + 1 = 33.", 4, id="text-after-the-box"),
        pytest.param(CORRECT + "\nThe answer is \\boxed{33}.", 4, id="second-box-after-the-answer"),
        pytest.param("", 0, id="empty"),
        pytest.param("   \n", 0, id="blank"),
    ],
)
def test_first_mistake_index_on_hand_made_completions(completion, expected):
    assert first_mistake_index(QUESTION, completion) == expected


def test_indices_follow_the_shared_sentence_splitter():
    completion = "7 + 5 = 12.\n12 * 3 = 36.\n36 - 4 = 33.\nThe answer is \\boxed{33}."
    index = first_mistake_index(QUESTION, completion)
    start, end = split_sentences(completion)[index]
    assert index == 2 and completion[start:end].strip() == "36 - 4 = 33."


def test_negative_intermediate_results():
    question = "Compute (3 - 15) * 2."
    assert first_mistake_index(question, "3 - 15 = -12. -12 * 2 = -24. The answer is \\boxed{-24}.") is None
    assert first_mistake_index(question, "3 - 15 = 12. 12 * 2 = 24. The answer is \\boxed{24}.") == 0
    assert first_mistake_index(question, "3 - 15 = -12. -12 * 2 = 24. The answer is \\boxed{24}.") == 1


def test_accepts_problems_prompts_with_instructions_and_chat_completions():
    problem = parse_question(QUESTION)
    chat_completion = [{"role": "assistant", "content": "7 + 5 = 12. 12 * 3 = 35."}]
    assert first_mistake_index(problem, chat_completion) == 1
    instructed = QUESTION + " Please reason step by step, and put your final answer within \\boxed{}."
    assert first_mistake_index(instructed, CORRECT) is None


def test_rejects_text_that_is_not_a_toy_question():
    with pytest.raises(ValueError, match="Cannot parse a toy question"):
        first_mistake_index("Solve x^2 = 4.", CORRECT)


def test_random_problems_reference_solutions_pass_and_corruptions_are_found_at_their_step():
    rng = random.Random(7)
    for _ in range(200):
        problem = generate_problem(rng)
        assert first_mistake_index(problem.question, problem.solution) is None
        wrong_step = rng.randrange(len(problem.operations))
        wrong = ToyProblem.from_operations(problem.first_operand, problem.operations)
        sentences = wrong.solution.split(". ")
        left, rest = sentences[wrong_step].split(" = ")
        sentences[wrong_step] = f"{left} = {int(rest) + rng.choice([-1, 1])}"
        assert first_mistake_index(problem, ". ".join(sentences)) == wrong_step


def test_checker_and_boxed_integer_agree_with_the_shared_answer_check():
    from hf_meds_cliff.rewards import check_answer
    from hf_meds_cliff.toy import boxed_integer

    completions = [
        CORRECT,  # right
        "7 + 5 = 13. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{32}.",  # right answer, wrong step
        "7 + 5 = 12. 12 * 3 = 36. 36 - 4 = 32. The answer is \\boxed{-32}.",  # wrong answer
        "7 + 5 = 12. 12 * 3 = 36.",  # no box
    ]
    for completion in completions:
        check = check_answer(completion, "32")
        assert check.correct == (boxed_integer(completion) == 32), completion
        if first_mistake_index(QUESTION, completion) is None:
            assert check.correct
    assert [check_answer(c, "32").status for c in completions] == ["correct", "correct", "wrong", "no_boxed"]
