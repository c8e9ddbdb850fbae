"""Data intake says what it drops, refuses what it cannot use, and makes answers comparable text."""

from __future__ import annotations

import json
import logging

import pytest
from datasets import Dataset, load_dataset

from hf_meds_cliff.data import answer_text, prepare_math_dataset, warn_long_prompts


def _jsonl(tmp_path, rows):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return load_dataset("json", data_files={"train": str(path)})["train"]


def test_dropped_rows_are_counted_with_examples(caplog):
    raw = Dataset.from_dict(
        {
            "problem": ["p0", "p1 no answer", "p2 empty", "p3", "p4 blank"],
            "answer": ["1", None, "", "4", "  "],
        }
    )
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.data"):
        prepared = prepare_math_dataset(raw, prompt_template="plain")
    assert prepared["answer"] == ["1", "4"] and "_drop_reason" not in prepared.column_names
    assert "Dropped 3 of 5 rows: missing or empty answer in column 'answer'" in caplog.text
    assert "row 1: 'p1 no answer'; row 2: 'p2 empty'; row 4: 'p4 blank'" in caplog.text


def test_solutions_without_boxed_are_counted(caplog):
    raw = Dataset.from_dict(
        {"problem": ["a", "b", "c"], "solution": ["\\boxed{1}", "so 2", "thus \\boxed{3}"]}
    )
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.data"):
        prepared = prepare_math_dataset(raw, answer_column="solution", answer_from_solution=True)
    assert prepared["answer"] == ["1", "3"]
    assert (
        "Dropped 1 of 3 rows: no \\boxed{} answer in the solution column 'solution' (e.g. row 1: 'b')"
        in caplog.text
    )


@pytest.mark.parametrize("bad", [None, "", "   "])
def test_null_problems_are_refused_naming_the_rows(bad):
    raw = Dataset.from_dict({"problem": ["fine", bad, "also fine"], "answer": ["1", "2", "3"]})
    with pytest.raises(ValueError, match=r"1 row\(s\) of column 'problem' have no problem text .*rows \[1\]"):
        prepare_math_dataset(raw)


def test_mixed_int_and_list_answer_column_becomes_comparable_text(tmp_path):
    # A JSON column mixing ints and lists loads as a `Json` feature, which decoded "24, 0" back into a list and
    # crashed the first training step; now every answer is text.
    raw = _jsonl(tmp_path, [{"problem": "a", "answer": 7}, {"problem": "b", "answer": [24, 0]}])
    prepared = prepare_math_dataset(raw)
    assert prepared["answer"] == ["7", "24, 0"]
    assert prepared.features["answer"].dtype == "string"
    from hf_meds_cliff.rewards import check_answer

    assert check_answer("so \\boxed{24, 0}", prepared["answer"][1])


def test_answers_without_a_text_form_name_the_row_and_column(tmp_path):
    raw = _jsonl(tmp_path, [{"problem": "a", "answer": 1}, {"problem": "b", "answer": [[1, 2], 3]}])
    with pytest.raises(ValueError, match=r"Row 1, column 'answer': a nested or incomplete list"):
        prepare_math_dataset(raw)
    assert [answer_text(v) for v in (3.5, [1, "x"], {"ground_truth": [1, 2]})] == ["3.5", "1, x", "1, 2"]
    for bad in (True, {"other": 1}, float("nan")):
        with pytest.raises((TypeError, ValueError), match="not a math answer"):
            answer_text(bad)


def test_prompts_longer_than_the_limit_are_reported(caplog, toy_tokenizer):
    raw = Dataset.from_dict(
        {"problem": ["1+1?", "x" * 500, "2+2?", "y" * 300], "answer": ["2", "1", "4", "1"]}
    )
    prepared = prepare_math_dataset(raw, prompt_template="plain")
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.data"):
        assert warn_long_prompts(prepared, toy_tokenizer, max_prompt_tokens=200) == [1, 3]
    assert "2 of 4 prompts are longer than max_prompt_tokens=200 tokens (longest: row 1:" in caplog.text
    assert warn_long_prompts(prepared, toy_tokenizer, max_prompt_tokens=None) == []
