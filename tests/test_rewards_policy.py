"""Answer checking never pays a wrong answer and stays bounded under load.

- six false positives of an earlier normalisation shortcut (one that decided before math-verify),
- the multi-box policy (math-verify's own), safe against boxing every candidate,
- ``\\boxed{18\\$}`` keeps its dollar sign,
- math-verify's ``float_rounding`` and ``strict`` settings,
- the length/nesting cap (deterministic "refused") and the per-batch time budget.
"""

from __future__ import annotations

import pytest

from hf_meds_cliff.rewards import (
    DEFAULT_BATCH_TIMEOUT,
    AnswerCheck,
    MathAnswerReward,
    MathVerifyPool,
    ScaledBatchTimeout,
    answer_refused,
    check_answers,
    extract_final_answer,
    extract_final_boxes,
    normalize_answer,
    same_written_answer,
    strip_math_delimiters,
)

PATHOLOGICAL = "9^{9^{9^{9}}}"


@pytest.fixture(scope="module")
def pool():
    verifier_pool = MathVerifyPool(num_workers=2)
    yield verifier_pool
    verifier_pool.close()


class NoPool:
    """A pool that fails the test when asked: the answer must be settled before math-verify."""

    def verify(self, pairs, timeout, **settings):
        raise AssertionError(f"unexpected math-verify call for {pairs}")


def nested_fraction(levels: int) -> str:
    answer = "2"
    for _ in range(levels):
        answer = "\\frac{1}{" + answer + "}"
    return answer


# The false positives: every one was scored correct by the old shortcut; math-verify scores them wrong.
AUDITED_FALSE_POSITIVES = [
    ("32349", "\\boxed{32, 349}"),
    ("0, 100", "\\boxed{100}"),
    ("1, 234", "\\boxed{1234}"),
    ("3100", "\\boxed{3, 100}"),
    ("5000", "\\boxed{5, 000}"),
    ("23", "\\boxed{2 3}"),
]


@pytest.mark.parametrize(("truth", "completion"), AUDITED_FALSE_POSITIVES)
def test_audited_false_positives_are_wrong(pool, truth, completion):
    (check,) = check_answers([completion], [truth], pool=pool, timeout=30)
    assert check.status == "wrong" and check.correct is False


@pytest.mark.parametrize(
    ("prediction", "truth"),
    [
        ("32, 349", "32,349"),
        ("2 3", "23"),
        ("1.5", "1.50001"),
        ("\\left.x\\right|", ".x|"),
        ("0.5", "\\frac12"),
    ],
)
def test_same_written_answer_never_merges_different_answers(prediction, truth):
    assert not same_written_answer(prediction, truth)


@pytest.mark.parametrize(
    ("truth", "completion"),
    [("1000", "\\boxed{1,000}"), ("1000", "\\boxed{1{,}000}"), ("32349", "\\boxed{32,349}")],
)
def test_thousands_separators_are_math_verifys_call(pool, truth, completion):
    """No longer a shortcut: these reach math-verify, which reads ``1,000`` as one thousand."""
    with pytest.raises(AssertionError, match="unexpected math-verify call"):
        check_answers([completion], [truth], pool=NoPool())
    assert check_answers([completion], [truth], pool=pool, timeout=30)[0].correct


# --- several boxes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "boxes"),
    [
        ("\\boxed{2} and \\boxed{3}", ["2", "3"]),
        ("so $x=\\boxed{2}$, $y = \\boxed{3}$.", ["2", "3"]),
        ("\\boxed{1}\\boxed{2}", ["1", "2"]),  # fewer than 10 characters apart: always joined
        ("\\boxed{7} ... \\boxed{7}", ["7"]),  # repeated answers count once
        (
            "first try \\boxed{4}. Checking the arithmetic once more shows a slip: the total is \\boxed{5}",
            ["5"],
        ),
        (
            "\\boxed{1}, then a long digression about something else entirely, which goes on to \\boxed{3}",
            ["3"],
        ),
        ("\\boxed{1}, and \\boxed{2", []),  # the last box is unclosed: no answer
        ("\\boxed{\\boxed{1}}", ["1"]),
        ("\\boxed{9} wait \\boxed{}", []),  # an empty last box is no answer
    ],
)
def test_extract_final_boxes(text, boxes):
    assert extract_final_boxes(text) == boxes
    assert extract_final_answer(text) == (",".join(boxes) if boxes else None)


def test_multi_box_policy_matches_math_verifys_extraction():
    """The policy is math-verify's own: its ``extract_boxed_content(mode="last")`` joins the same boxes."""
    normalization = pytest.importorskip("latex2sympy2_extended.math_normalization")
    texts = [
        "\\boxed{2} and \\boxed{3}",
        "\\boxed{2}, \\boxed{3}, \\boxed{5}",
        "\\boxed{1} \\boxed{3}",
        "\\boxed{a} or \\boxed{b}; \\boxed{c}",
        "we had \\boxed{4} before; after the long correction below the real answer is \\boxed{5}",
        "\\boxed{x} " + "filler " * 20 + "\\boxed{y}",
        "\\boxed{7}, \\boxed{7}, \\boxed{8}",
        "\\boxed{1}, \\boxed{2}" + "".join(f", \\boxed{{{i}}}" for i in range(3, 101)),
        "\\boxed{\\frac{1}{2}} and \\boxed{\\{1, 2\\}}",
        "\\fbox{3} and \\boxed{4}",
    ]
    for text in texts:
        assert extract_final_answer(text) == normalization.extract_boxed_content(text, mode="last"), text


@pytest.mark.parametrize(
    ("completion", "truth", "correct"),
    [
        ("The roots are \\boxed{2} and \\boxed{3}.", "2, 3", True),
        ("The roots are \\boxed{3} and \\boxed{2}.", "2, 3", True),
        (
            "Intermediate: \\boxed{12}. " + "We still need the remainder modulo 7. " * 3 + "So \\boxed{5}.",
            "5",
            True,
        ),
        ("\\boxed{5} or \\boxed{6}", "5", False),  # hedging between candidates is not an answer
        ("\\boxed{2} and \\boxed{3}", "2", False),
        ("The roots are \\boxed{2}.", "2, 3", False),
    ],
)
def test_multi_box_answers(pool, completion, truth, correct):
    (check,) = check_answers([completion], [truth], pool=pool, timeout=30)
    assert check.correct is correct, check


@pytest.mark.parametrize("truth", ["5", "2, 3", "1, 2, 3", "50"])
def test_boxing_every_candidate_is_never_paid(pool, truth):
    every_candidate = ", ".join(f"\\boxed{{{i}}}" for i in range(1, 101))
    spaced_out = " ".join(f"Maybe it is \\boxed{{{i}}} but let me check." for i in range(1, 101))
    checks = check_answers([every_candidate, spaced_out], [truth, truth], pool=pool, timeout=30)
    assert [c.correct for c in checks] == [False, False], checks
    assert checks[0].extracted == ",".join(str(i) for i in range(1, 101))
    assert checks[1].extracted == "100"  # far apart without a separator: only the last box counts
    assert check_answers([every_candidate], [checks[0].extracted], pool=pool, timeout=30)[0].correct


# --- dollar signs ------------------------------------------------------------------------------


def test_escaped_dollar_is_kept(pool):
    checks = check_answers(
        ["costs \\boxed{18\\$}", "costs \\boxed{\\$18}"], ["18", "18"], pool=pool, timeout=30
    )
    assert [c.extracted for c in checks] == ["18\\$", "\\$18"]
    assert [c.status for c in checks] == ["correct", "correct"]
    assert normalize_answer("18\\$") == "18\\$"  # no dangling backslash
    assert strip_math_delimiters("$18\\$$") == "18\\$"
    assert check_answers(["\\boxed{19\\$}"], ["18"], pool=pool, timeout=30)[0].status == "wrong"


# --- math-verify settings ----------------------------------------------------------------------


def test_float_rounding_setting(pool):
    completions, truths = ["\\boxed{3.1416}"], ["3.14159265"]
    assert not check_answers(completions, truths, pool=pool, timeout=30)[0].correct  # 6 places (default)
    assert check_answers(completions, truths, pool=pool, timeout=30, float_rounding=3)[0].correct
    with pytest.raises(ValueError, match="float_rounding=-1"):
        check_answers(completions, truths, pool=pool, float_rounding=-1)


def test_strict_setting(pool):
    assert check_answers(["\\boxed{f(y)}"], ["f(x)"], pool=pool, timeout=30)[0].status == "wrong"
    assert check_answers(["\\boxed{f(y)}"], ["f(x)"], pool=pool, timeout=30, strict=False)[0].correct
    with pytest.raises(TypeError, match="strict='no'"):
        check_answers(["\\boxed{f(y)}"], ["f(x)"], pool=pool, strict="no")


def test_reward_passes_settings_through():
    default, lenient = MathAnswerReward(), MathAnswerReward(float_rounding=3, strict=False)
    completions = ["\\boxed{3.1416}", "\\boxed{f(y)}"]
    assert default(completions, answer=["3.14159265", "f(x)"]) == [0.0, 0.0]
    assert lenient(completions, answer=["3.14159265", "f(x)"]) == [1.0, 1.0]
    assert "float_rounding=3" in repr(lenient) and "strict=False" in repr(lenient)
    with pytest.raises(ValueError, match="batch_timeout_seconds=0"):
        MathAnswerReward(batch_timeout_seconds=0)


# --- length/nesting cap ------------------------------------------------------------------------


def test_deeply_nested_answer_is_refused_deterministically():
    """A 400-level ``\\frac`` (value 2) was scored equal to 1/2, or timed out, depending on load."""
    deep = nested_fraction(400)
    checks = check_answers(["\\boxed{" + deep + "}"] * 3, ["\\frac{1}{2}"] * 3, pool=NoPool())
    assert [c.status for c in checks] == ["refused"] * 3
    assert not any(c.correct for c in checks)
    assert checks[0].extracted == deep


def test_cap_is_relative_to_the_ground_truth(pool):
    deep_truth = nested_fraction(9)  # deeper than the default cap of 8
    assert answer_refused(nested_fraction(9), "1") and not answer_refused(nested_fraction(9), deep_truth)
    same_depth = nested_fraction(9).replace("{2}", "{2.0}")  # as deep as the ground truth: verified
    (check,) = check_answers(["\\boxed{" + same_depth + "}"], [deep_truth], pool=pool, timeout=60)
    assert check.status == "correct"
    assert check_answers(["\\boxed{" + nested_fraction(11) + "}"], [deep_truth], pool=NoPool())[0].status == (
        "refused"
    )
    long_answer = "+".join(["x"] * 600)
    assert check_answers(["\\boxed{" + long_answer + "}"], ["x"], pool=NoPool())[0].status == "refused"
    assert check_answers(["\\boxed{x}"], [long_answer], pool=pool, timeout=60)[0].status == "wrong"
    with pytest.raises(ValueError, match="max_answer_depth=0"):
        check_answers(["\\boxed{1}"], ["1"], max_answer_depth=0)


def test_reward_counts_refused_answers():
    metrics = {}
    reward = MathAnswerReward()
    values = reward(
        ["\\boxed{" + nested_fraction(400) + "}", "\\boxed{12}"],
        answer=["\\frac{1}{2}", "12"],
        log_metric=lambda name, value: metrics.__setitem__(name, value),
    )
    assert values == [0.0, 1.0]
    assert metrics["math_answer/refused_frac"] == 0.5 and reward.counts["refused"] == 1


# --- per-batch time budget ---------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_batch_budget_bounds_a_batch_of_pathological_answers(pool):
    """Per-answer timeouts alone let a batch take timeout x answers / workers (500 answers: 627 s)."""
    towers = [f"{base}^{{{base}^{{{base}^{{{base}}}}}}}" for base in range(9, 3, -1)]  # each never returns
    completions = ["\\boxed{" + tower + "}" for tower in towers] + ["\\boxed{\\frac{4}{2}}"]
    before_timeouts, before_budget = pool.timeouts, pool.budget_timeouts
    checks = check_answers(completions, ["2"] * 7, pool=pool, timeout=60, batch_timeout=3)
    # the two answers in flight and the five waiting behind them (the easy one included) are timeouts, and the
    # budget ended every one of them: without it each endless answer would run to its own 60 s timeout (not
    # counted as a budget timeout) and the easy one would be verified
    assert [c.status for c in checks] == ["timeout"] * 7
    assert pool.budget_timeouts - before_budget == 7 and pool.timeouts - before_timeouts == 7
    assert check_answers(["\\boxed{0.5}"], ["\\frac12"], pool=pool, timeout=30)[0].correct  # pool recovered


def test_reward_reports_budget_timeouts(monkeypatch):
    from hf_meds_cliff.rewards import functions

    calls = {}

    def fake_check_answers(completions, truths, **settings):
        calls.update(settings)
        return [AnswerCheck(correct=False, extracted="1", status="timeout") for _ in completions]

    monkeypatch.setattr(functions, "check_answers", fake_check_answers)
    metrics = {}
    reward = MathAnswerReward(batch_timeout_seconds=7)
    assert reward(["\\boxed{1}"] * 2, answer=["2"] * 2, log_metric=metrics.__setitem__) == [0.0, 0.0]
    assert calls["batch_timeout"] == 7.0 and metrics["math_answer/timeout_frac"] == 1.0
    MathAnswerReward()(["\\boxed{1}"], answer=["2"])  # the default budget scales with the answers verified
    assert calls["batch_timeout"] == ScaledBatchTimeout(base_seconds=120.0, seconds_per_answer=1.0)
    assert "batch_timeout_seconds=ScaledBatchTimeout(base_seconds=120.0" in repr(MathAnswerReward())


def test_scaled_batch_timeout_formula_and_bad_values():
    assert ScaledBatchTimeout(base_seconds=10, seconds_per_answer=0.5).seconds(4) == 12.0
    assert ScaledBatchTimeout(base_seconds=0, seconds_per_answer=2).seconds(3) == 6.0
    assert DEFAULT_BATCH_TIMEOUT.seconds(8) == 128.0  # 120 s + 1 s per answer
    with pytest.raises(ValueError, match=r"seconds_per_answer=-1\): must be a number of seconds >= 0"):
        ScaledBatchTimeout(seconds_per_answer=-1)
    with pytest.raises(ValueError, match="allows no time at all"):
        ScaledBatchTimeout(base_seconds=0, seconds_per_answer=0)
    for bad in (0, -3, True, "fast"):
        with pytest.raises(ValueError, match=f"batch_timeout_seconds={bad!r} must be a positive number"):
            MathAnswerReward(batch_timeout_seconds=bad)
        with pytest.raises(ValueError, match=f"batch_timeout={bad!r} must be a positive number"):
            check_answers(["\\boxed{1}"], ["1"], batch_timeout=bad)


class RecordingPool(MathVerifyPool):
    """The real pool's bookkeeping (cache, de-duplication, budget) with the workers replaced by a record of
    what reaches them: every answer is "correct"."""

    def __init__(self):
        super().__init__(num_workers=2)
        self.sent: list[tuple[int, float | None]] = []  # (answers sent, deadline) per call

    def _verify_unique(self, requests, timeout, deadline):
        self.sent.append((len(requests), deadline))
        return ["correct"] * len(requests)


def test_scaled_budget_counts_only_the_answers_that_reach_math_verify(monkeypatch):
    import types

    from hf_meds_cliff.rewards import verifier

    monkeypatch.setattr(verifier, "time", types.SimpleNamespace(monotonic=lambda: 1000.0))  # a stopped clock
    pool, budget = RecordingPool(), ScaledBatchTimeout(base_seconds=10, seconds_per_answer=2)
    completions = [
        "\\boxed{12}",  # two plain integers: decided digit for digit
        "\\boxed{\\dfrac{1}{2}}",  # the ground truth written out
        "no box",
        "\\boxed{" + nested_fraction(400) + "}",  # refused by the cap
        "\\boxed{0.5}",  # to math-verify ...
        "\\boxed{0.5}",  # ... once for both
        "\\boxed{x+1}",  # to math-verify
    ]
    truths = ["12", "\\frac{1}{2}", "3", "\\frac{1}{2}", "\\frac12", "\\frac12", "1+x"]
    statuses = [c.status for c in check_answers(completions, truths, pool=pool, batch_timeout=budget)]
    assert statuses == ["correct", "correct", "no_boxed", "refused", "correct", "correct", "correct"]
    assert pool.sent == [(2, 1000.0 + 10 + 2 * 2)]

    # remembered verdicts do not count either; one new answer gets 10 + 2 x 1 seconds
    check_answers(completions + ["\\boxed{2y}"], truths + ["y+y"], pool=pool, batch_timeout=budget)
    assert pool.sent[1:] == [(1, 1000.0 + 12)]
    check_answers(["\\boxed{z+z}"] * 3, ["2z"] * 3, pool=pool, batch_timeout=7)  # a number: fixed, whatever n
    check_answers(["\\boxed{w+w}", "\\boxed{v+v}"], ["2w", "2v"], pool=pool, batch_timeout=None)
    assert pool.sent[2:] == [(1, 1000.0 + 7), (2, None)]


def test_duplicate_answers_are_verified_once(pool):
    hits = pool.cache_hits
    checks = check_answers(["\\boxed{\\frac{2}{4}}"] * 5, ["0.5"] * 5, pool=pool, timeout=30)
    assert [c.status for c in checks] == ["correct"] * 5
    assert pool.cache_hits - hits >= 4
