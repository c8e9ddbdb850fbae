"""Verifiable rewards: extraction edge cases, math-verify equivalence, timeouts, threads, TRL hooks."""

from __future__ import annotations

import pickle
import threading

import pytest

from hf_meds_cliff.rewards import (
    MathAnswerReward,
    MathVerifyPool,
    OverlongPenaltyReward,
    check_answer,
    check_answers,
    extract_boxed_answer,
    normalize_answer,
)

PATHOLOGICAL = "9^{9^{9^{9}}}"  # sympy tries to evaluate it exactly: never returns in practice


@pytest.fixture(scope="module")
def pool():
    verifier_pool = MathVerifyPool(num_workers=2)
    yield verifier_pool
    verifier_pool.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7 + 5 = 12. 12 * 3 = 36. The answer is \\boxed{36}.", "36"),
        ("nested \\boxed{\\frac{1}{\\sqrt{2}}} done", "\\frac{1}{\\sqrt{2}}"),
        ("set \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("first \\boxed{1}, then \\boxed{2}, finally \\boxed{3}", "3"),
        ("spaces \\boxed {  42 }", "42"),
        ("brace-less \\boxed 5.", "5"),
        ("$\\boxed 7$", "7"),
        ("\\fbox{x^2}", "x^2"),
        ("text \\boxed{\\text{(B)}}", "\\text{(B)}"),
        ("no box at all", None),
        ("unclosed \\boxed{12", None),
        ("the last box is unclosed: \\boxed{1} and \\boxed{2", None),
        ("empty \\boxed{}", None),
        ("dangling \\boxed", None),
        ("\\boxedtext{3} is another command", None),
        ("unbalanced close \\boxed{1}}", "1"),
    ],
)
def test_extract_boxed_answer(text, expected):
    assert extract_boxed_answer(text) == expected


def test_extract_rejects_non_strings():
    with pytest.raises(TypeError, match="expects a str"):
        extract_boxed_answer(None)


def test_normalize_answer_groups_surface_variants():
    assert normalize_answer("\\dfrac{3}{4}") == normalize_answer("\\frac{3}{4}")
    assert normalize_answer("$1,234$") == normalize_answer("1234") == "1234"
    assert normalize_answer("-007") == "-7"
    assert normalize_answer("0.50") == "0.5"
    assert normalize_answer("45^\\circ") == "45"
    assert normalize_answer("\\frac{1}{2}") != normalize_answer("0.5")  # votes are over surface forms


@pytest.mark.parametrize(
    ("completion", "truth", "status"),
    [
        ("\\boxed{32}", "32", "correct"),  # integer fast path
        ("\\boxed{-4}", "-4", "correct"),
        ("\\boxed{31}", "32", "wrong"),
        ("\\boxed{007}", "7", "correct"),  # leading zeros and sign: still a plain integer
        ("\\boxed{+5}", "5", "correct"),
        ("\\boxed{\\text{(A)}}", "\\text{(A)}", "correct"),  # the ground truth written out
        ("\\boxed{ $x^2$ }", "x^2", "correct"),
        ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", "correct"),  # typography only
        ("\\boxed{\\left(1, 2\\right)}", "(1, 2)", "correct"),
        ("\\boxed{12.50}", "12.5", "correct"),  # plain decimals of the same value
        ("\\boxed{12}", "12.0", "correct"),
        ("no answer", "3", "no_boxed"),
    ],
)
def test_check_answer_without_math_verify_workers(completion, truth, status):
    """These are settled by the exact shortcuts: a pool with no worker must not be touched."""

    class NoPool:
        def verify(self, pairs, timeout, **settings):
            raise AssertionError(f"unexpected math-verify call for {pairs}")

    (check,) = check_answers([completion], [truth], pool=NoPool())
    assert check.status == status
    assert check.correct is (status == "correct")


def test_integers_beyond_pythons_conversion_limit():
    """int() refuses strings of more than 4300 digits; a model can box one, and that must not crash."""
    huge = "9" * 5000
    assert check_answer("\\boxed{" + huge + "}", huge).status == "correct"
    assert check_answer("\\boxed{-" + huge + "}", huge).status == "wrong"
    assert check_answer("\\boxed{00" + huge + "}", huge).correct
    assert normalize_answer("0" + huge) == huge


@pytest.mark.parametrize(
    ("completion", "truth", "correct"),
    [
        ("\\boxed{\\frac{1}{2}}", "0.5", True),
        ("\\boxed{\\dfrac12}", "\\frac{1}{2}", True),
        ("\\boxed{2/4}", "\\frac{1}{2}", True),
        ("\\boxed{32.0}", "32", True),
        ("\\boxed{\\left(3, \\frac{\\pi}{2}\\right)}", "(3, \\frac{\\pi}{2})", True),
        ("\\boxed{1+x^2}", "x^2 + 1", True),
        ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt{2}}{2}", True),
        ("\\boxed{\\frac{1}{3}}", "0.5", False),
        ("\\boxed{x^2 - 1}", "x^2 + 1", False),
        ("malformed \\boxed{\\frac{6}{}", "3", False),
        ("\\boxed{\\frac{6}{}}", "3", False),  # malformed LaTeX inside a closed box
        ("\\boxed{)(}", "3", False),
    ],
)
def test_check_answer_equivalent_forms(pool, completion, truth, correct):
    (check,) = check_answers([completion], [truth], pool=pool, timeout=20)
    assert check.correct is correct
    assert check.status in ({"correct"} if correct else {"wrong", "error", "no_boxed"})


def test_conversational_completions(pool):
    completions = [
        [{"role": "assistant", "content": "so it is \\boxed{\\frac{3}{6}}"}],
        [{"role": "assistant", "content": "\\boxed{7}"}],
    ]
    checks = check_answers(completions, ["1/2", "8"], pool=pool, timeout=20)
    assert [c.status for c in checks] == ["correct", "wrong"]
    assert checks[0].extracted == "\\frac{3}{6}"


@pytest.mark.timeout(300)  # a hang (the failure this guards against) fails here instead of stalling the suite
def test_pathological_answer_times_out_without_blocking_the_batch(pool):
    checks = check_answers(
        ["\\boxed{" + PATHOLOGICAL + "}", "\\boxed{\\frac{4}{2}}", "\\boxed{2}"],
        ["2", "2", "2"],
        pool=pool,
        timeout=4,
    )
    assert [c.status for c in checks] == ["timeout", "correct", "correct"]
    assert checks[0].correct is False
    assert pool.timeouts >= 1 and pool.restarts >= 1
    # the killed worker is replaced and the pool keeps working
    assert check_answers(["\\boxed{0.25}"], ["\\frac14"], pool=pool, timeout=20)[0].correct


def test_check_answer_off_the_main_thread(pool):
    """math-verify's signal-based timeouts raise off the main thread; the pool must not care."""
    results = {}

    def worker(name, completion):
        results[name] = check_answers([completion], ["\\frac{1}{2}"], pool=pool, timeout=20)[0]

    threads = [
        threading.Thread(target=worker, args=("a", "\\boxed{0.5}")),
        threading.Thread(target=worker, args=("b", "\\boxed{\\frac{2}{3}}")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results["a"].status == "correct"
    assert results["b"].status == "wrong"


def test_thread_fallback_when_workers_cannot_start(monkeypatch):
    from hf_meds_cliff.rewards import verifier

    def broken_worker():
        raise OSError("exec not permitted")

    monkeypatch.setattr(verifier, "_Worker", broken_worker)
    degraded = MathVerifyPool(num_workers=1)
    assert degraded.verify([("\\frac{1}{2}", "0.5"), ("1", "2")], timeout=30) == ["correct", "wrong"]
    assert degraded.fallbacks == 2


def test_check_answer_bad_ground_truth():
    with pytest.raises(ValueError, match="ground_truth=None"):
        check_answer("\\boxed{1}", None)
    with pytest.raises(TypeError, match="ground_truth must be a string"):
        check_answer("\\boxed{1}", ["1"])
    with pytest.raises(ValueError, match="2 completions but 1 ground truths"):
        check_answers(["a", "b"], ["1"])
    assert check_answer("\\boxed{3}", 3).correct  # numbers are accepted


def test_math_answer_reward_counts_and_trl_hooks():
    metrics, extras = {}, {}
    reward = MathAnswerReward()
    values = reward(
        ["\\boxed{12}", "\\boxed{13}", "no box", "also none"],
        answer=["12", "12", "12", "12"],
        prompts=["p"] * 4,
        log_metric=lambda name, value: metrics.__setitem__(name, value),
        log_extra=lambda column, value: extras.__setitem__(column, value),
        trainer_state=None,
    )
    assert values == [1.0, 0.0, 0.0, 0.0]
    assert metrics == {
        "math_answer/no_boxed_frac": 0.5,
        "math_answer/refused_frac": 0.0,
        "math_answer/timeout_frac": 0.0,
        "math_answer/error_frac": 0.0,
    }
    assert extras == {
        "extracted_answer": ["12", "13", None, None],
        "answer_status": ["correct", "wrong", "no_boxed", "no_boxed"],
    }
    assert reward.counts["no_boxed"] == 2 and reward.counts["correct"] == 1 and reward.counts["wrong"] == 1


def test_math_answer_reward_column_and_pickling():
    reward = MathAnswerReward(answer_column="target", timeout_seconds=3)
    restored = pickle.loads(pickle.dumps(reward))
    assert restored(["\\boxed{4}"], target=["4"]) == [1.0]
    assert restored.__name__ == "math_answer"
    with pytest.raises(ValueError, match="needs the dataset column 'target'.*answer_column"):
        restored(["\\boxed{4}"], answer=["4"])
    with pytest.raises(ValueError, match="answer_column=''"):
        MathAnswerReward(answer_column="")
    with pytest.raises(ValueError, match="timeout_seconds=0"):
        MathAnswerReward(timeout_seconds=0)


def test_pool_pickles_without_workers(pool):
    copy = pickle.loads(pickle.dumps(pool))
    assert copy.num_workers == pool.num_workers and copy.timeouts == 0


def test_overlong_penalty_ramp():
    reward = OverlongPenaltyReward(max_completion_length=20, buffer_length=8, penalty_factor=0.5)
    lengths = [0, 12, 13, 16, 20]
    values = reward(["c"] * len(lengths), completion_ids=[[7] * n for n in lengths])
    assert values == pytest.approx([0.0, 0.0, -0.0625, -0.25, -0.5])
    assert pickle.loads(pickle.dumps(reward)).penalty(20) == -0.5


def test_overlong_penalty_bad_input():
    with pytest.raises(ValueError, match="buffer_length=30"):
        OverlongPenaltyReward(max_completion_length=20, buffer_length=30)
    with pytest.raises(ValueError, match="buffer_length=0"):
        OverlongPenaltyReward(max_completion_length=20, buffer_length=0)
    with pytest.raises(ValueError, match="penalty_factor=-1"):
        OverlongPenaltyReward(max_completion_length=20, buffer_length=4, penalty_factor=-1)
    with pytest.raises(ValueError, match="needs `completion_ids`"):
        OverlongPenaltyReward(max_completion_length=20, buffer_length=4)(["a"])
