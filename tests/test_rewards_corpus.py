"""check_answer against a labelled corpus: Math-Verify's own test cases in training form, plus probes.

``tests/data/answer_corpus.json`` (built by ``tests/data/build_answer_corpus.py``; its header cites
the source and its license) holds bare ground truths, completions that box their answer, and the
expected verdict. The reward must pay no case labelled wrong, agree with at least 95 % of the labels,
and every remaining disagreement must be listed with its reason in the data file.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from hf_meds_cliff.rewards import MathVerifyPool, check_answers

CORPUS_PATH = Path(__file__).parent / "data" / "answer_corpus.json"
MIN_AGREEMENT = 0.95


@pytest.fixture(scope="module")
def corpus():
    return json.loads(CORPUS_PATH.read_text())


@pytest.fixture(scope="module")
def verdicts(corpus):
    """``{case id: AnswerCheck}`` for every case, checked with the case's math-verify settings."""
    cases = corpus["cases"]
    pool = MathVerifyPool(num_workers=2)
    results = {}
    try:
        settings_of = lambda case: (case["float_rounding"], case["strict"])
        for (float_rounding, strict), group in itertools.groupby(sorted(cases, key=settings_of), settings_of):
            group = list(group)
            checks = check_answers(
                [case["completion"] for case in group],
                [case["ground_truth"] for case in group],
                pool=pool,
                timeout=60,
                float_rounding=float_rounding,
                strict=strict,
            )
            results.update({case["id"]: check for case, check in zip(group, checks)})
    finally:
        pool.close()
    return results


def test_corpus_provenance(corpus):
    about = corpus["about"]
    assert "github.com/huggingface/Math-Verify" in about["source"]
    assert "Apache License 2.0" in about["license"] and "HuggingFace" in about["license"]
    sources = {case["source"] for case in corpus["cases"]}
    assert sources == {"math-verify", "probe"}
    assert sum(case["source"] == "math-verify" for case in corpus["cases"]) >= 150
    assert len({case["id"] for case in corpus["cases"]}) == len(corpus["cases"])


@pytest.mark.timeout(900)
def test_no_false_positives(corpus, verdicts):
    paid_wrong = [
        (case["id"], case["ground_truth"], verdicts[case["id"]].extracted)
        for case in corpus["cases"]
        if case["label"] == 0 and verdicts[case["id"]].correct
    ]
    assert paid_wrong == []


@pytest.mark.timeout(900)
def test_agreement_and_every_disagreement_explained(corpus, verdicts):
    cases = corpus["cases"]
    disagreeing = [case for case in cases if int(verdicts[case["id"]].correct) != case["label"]]
    unexplained = [
        (case["id"], case["label"], verdicts[case["id"]].status, case["completion"][-80:])
        for case in disagreeing
        if not case.get("disagreement") or case["disagreement"] == "UNEXPLAINED"
    ]
    assert unexplained == [], "disagreements without a reason in answer_corpus.json"
    agreement = 1 - len(disagreeing) / len(cases)
    assert agreement >= MIN_AGREEMENT, f"agreement {agreement:.3f} on {len(cases)} cases"


@pytest.mark.timeout(900)
def test_audited_false_positive_table_is_in_the_corpus(corpus, verdicts):
    table = {
        ("32349", "\\boxed{32, 349}"),
        ("0, 100", "\\boxed{100}"),
        ("1, 234", "\\boxed{1234}"),
        ("3100", "\\boxed{3, 100}"),
        ("5000", "\\boxed{5, 000}"),
        ("23", "\\boxed{2 3}"),
    }
    found = [case for case in corpus["cases"] if (case["ground_truth"], case["completion"]) in table]
    assert len(found) == len(table)
    assert all(case["label"] == 0 and verdicts[case["id"]].status == "wrong" for case in found)
