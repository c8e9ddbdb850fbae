"""Judging prompt and the never-raising parser, on a corpus of well-formed and malformed answers."""

import pytest

from hf_meds_cliff.cliff import build_judge_messages, build_solve_messages, parse_judgment, split_sentences
from hf_meds_cliff.cliff.judging import JUDGE_SYSTEM_PROMPT, aggregate_judgments, format_numbered_sentences
from hf_meds_cliff.cliff.teachers import Judgment, is_endpoint_failure
from hf_meds_cliff.data import QWEN_MATH_INSTRUCTION

ROLLOUT = "7 + 5 = 12. 12 * 3 = 35. 35 - 4 = 31. The answer is \\boxed{31}."
SENTENCES = [ROLLOUT[s:e] for s, e in split_sentences(ROLLOUT)]


def test_judge_prompt_contains_problem_reference_numbered_sentences_and_rules():
    messages = build_judge_messages("Compute (7 + 5) * 3 - 4.", "7 + 5 = 12. ... \\boxed{32}.", SENTENCES)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert "Compute (7 + 5) * 3 - 4." in user and "\\boxed{32}" in user
    assert "[0] 7 + 5 = 12.\n[1] 12 * 3 = 35.\n[2] 35 - 4 = 31.\n[3] The answer is \\boxed{31}." in user
    assert "from 0 to 3" in user and "-1" in user
    system = messages[0]["content"]
    for rule in (
        "irrefutable",
        "different but valid method",
        "later notices and corrects",
        "gibberish",
        "first genuine mistake",
        '"first_mistake"',
        '"final_answer_correct"',
    ):
        assert rule in system
    assert system == JUDGE_SYSTEM_PROMPT


def test_prompt_bad_input():
    with pytest.raises(ValueError, match="empty"):
        build_judge_messages("p", "r", [])
    with pytest.raises(TypeError, match="sequence of str"):
        build_judge_messages("p", "r", "not a list")
    with pytest.raises(TypeError, match="problem"):
        build_solve_messages(None)


def test_solve_prompt_adds_the_qwen_math_instruction_once():
    (message,) = build_solve_messages("Compute 1 + 2.")
    assert message == {"role": "user", "content": f"Compute 1 + 2.\n{QWEN_MATH_INSTRUCTION}"}
    (again,) = build_solve_messages(message["content"])
    assert again["content"].count(QWEN_MATH_INSTRUCTION) == 1


def test_numbered_sentences_strip_whitespace():
    assert format_numbered_sentences([" a. \n", "b."]) == "[0] a.\n[1] b."


# (answer, expected first_mistake, expected verdict, expected status) with 4 sentences
CORPUS = [
    # well formed
    ('Step [1] multiplies wrongly.\n{"final_answer_correct": false, "first_mistake": 1}', 1, False, "ok"),
    ('{"final_answer_correct": true, "first_mistake": -1}', None, True, "ok"),
    ('{"final_answer_correct": true, "first_mistake": null}', None, True, "ok"),
    # code fences, text before and after
    (
        'Reasoning...\n```json\n{"final_answer_correct": false, "first_mistake": 2}\n```\nHope this helps!',
        2,
        False,
        "ok",
    ),
    ('```\n{"first_mistake": 0, "final_answer_correct": false}\n```', 0, False, "ok"),
    # trailing commas, single quotes, Python literals
    ('{"final_answer_correct": false, "first_mistake": 3,}', 3, False, "ok"),
    ("{'final_answer_correct': False, 'first_mistake': 1}", 1, False, "ok"),
    ("{'final_answer_correct': false, 'first_mistake': 2,}", 2, False, "ok"),
    # ids as strings / bracketed / "step k"
    ('{"final_answer_correct": false, "first_mistake": "2"}', 2, False, "ok"),
    ('{"final_answer_correct": false, "first_mistake": "[1]"}', 1, False, "ok"),
    ('{"final_answer_correct": "incorrect", "first_mistake": "step 3"}', 3, False, "ok"),
    ('{"final_answer_correct": "yes", "first_mistake": "none"}', None, True, "ok"),
    ('{"correct": false, "first_mistake_id": 1}', 1, False, "ok"),  # field aliases
    ('{"Final Answer Correct": false, "First-Mistake": 2.0}', 2, False, "ok"),
    # several JSON objects: the last wins; LaTeX braces in the reasoning are ignored
    (
        'Draft: {"first_mistake": 0}. \\frac{1}{2} is fine. Final: {"final_answer_correct": false, "first_mistake": 2}',
        2,
        False,
        "ok",
    ),
    # reasoning model: the answer after </think> wins over drafts in the thinking
    (
        '<think>maybe {"first_mistake": 0}</think>{"final_answer_correct": false, "first_mistake": 1}',
        1,
        False,
        "ok",
    ),
    ('<think>{"final_answer_correct": false, "first_mistake": 2}</think>Done.', 2, False, "ok"),
    # nested object and braces inside strings
    (
        '{"result": {"x": 1}, "note": "a } brace", "final_answer_correct": false, "first_mistake": 1}',
        1,
        False,
        "ok",
    ),
    # ids out of range
    ('{"final_answer_correct": false, "first_mistake": 4}', None, False, "out_of_range"),
    ('{"final_answer_correct": false, "first_mistake": -3}', None, False, "out_of_range"),
    # missing fields
    ('{"final_answer_correct": false}', None, False, "missing_field"),
    ('{"reasoning": "it is wrong"}', None, None, "missing_field"),
    ('{"first_mistake": 2}', 2, None, "ok"),  # verdict is optional
    # invalid values
    ('{"final_answer_correct": false, "first_mistake": "two"}', None, False, "invalid_field"),
    ('{"final_answer_correct": false, "first_mistake": 1.5}', None, False, "invalid_field"),
    ('{"final_answer_correct": false, "first_mistake": true}', None, False, "invalid_field"),
    ('{"final_answer_correct": "maybe", "first_mistake": 1}', 1, None, "ok"),
    # unterminated / broken JSON: fields read by the fallback pattern
    ('The error is in [2]. {"final_answer_correct": false, "first_mistake": 2', 2, False, "ok"),
    ("first_mistake = 3, final_answer_correct: false", 3, False, "ok"),
    # non-JSON answers
    ("The student made an error in the second step.", None, None, "parse_error"),
    ("{not json at all}", None, None, "parse_error"),
    ("[1, 2, 3]", None, None, "parse_error"),
    ("", None, None, "empty"),
    ("   \n", None, None, "empty"),
    (None, None, None, "empty"),
]


@pytest.mark.parametrize(("answer", "first_mistake", "verdict", "status"), CORPUS)
def test_parse_corpus(answer, first_mistake, verdict, status):
    judgment = parse_judgment(answer, 4)
    assert (judgment.first_mistake, judgment.verdict_correct, judgment.status) == (
        first_mistake,
        verdict,
        status,
    )
    assert judgment.raw == (answer or "")
    assert not is_endpoint_failure(judgment)


def test_parse_never_raises_on_garbage():
    import random

    rng = random.Random(0)
    alphabet = list("{}[]\"':,-0123456789 truefalsnul\n") + ['"first_mistake"', "```json", "</think>"]
    for _ in range(2000):
        answer = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        judgment = parse_judgment(answer, 3)
        assert judgment.first_mistake is None or 0 <= judgment.first_mistake < 3


def test_parse_bad_num_sentences():
    with pytest.raises(ValueError, match="num_sentences"):
        parse_judgment("{}", -1)


def test_aggregate_judgments():
    judgments = [
        Judgment(2, False, "ok"),
        Judgment(5, False, "ok"),
        Judgment(3, True, "ok"),
        Judgment(None, None, "parse_error"),
    ]
    combined, agreement = aggregate_judgments(judgments)
    assert (combined.first_mistake, combined.verdict_correct, combined.status) == (3, False, "ok")
    assert agreement == pytest.approx(2 / 3)
    # most say "no mistake"
    combined, agreement = aggregate_judgments(
        [Judgment(None, True, "ok"), Judgment(None, True, "ok"), Judgment(1, False, "ok")]
    )
    assert (
        combined.first_mistake is None
        and combined.verdict_correct is True
        and agreement == pytest.approx(2 / 3)
    )
    # only failures: an endpoint failure is propagated so the group falls back to GRPO
    combined, agreement = aggregate_judgments(
        [Judgment(None, None, "parse_error"), Judgment(None, None, "timeout")]
    )
    assert combined.status == "timeout" and agreement == 0.0
    with pytest.raises(ValueError, match="at least one"):
        aggregate_judgments([])


def test_judgment_rejects_unknown_status():
    with pytest.raises(ValueError, match="Unknown judgment status"):
        Judgment(None, None, "weird")
