import pytest
from datasets import Dataset

from hf_meds_cliff.data import (
    QWEN_MATH_INSTRUCTION,
    build_prompt,
    prepare_math_dataset,
    prompt_key,
    prompt_keys,
)


def test_prompt_key_is_stable_and_discriminates():
    chat = [{"role": "user", "content": "Compute 1 + 2."}]
    assert prompt_key(chat) == prompt_key([dict(reversed(list(chat[0].items())))])
    assert prompt_key(chat) != prompt_key([{"role": "user", "content": "Compute 1 + 3."}])
    # A fixed value: the key must not depend on the process (unlike hash()).
    assert prompt_key("abc") == "359574f2a9440c0b"


def test_prompt_keys_prefers_ids_and_checks_alignment():
    assert prompt_keys(["a", "b"], ids=[3, 4]) == ["3", "4"]
    with pytest.raises(ValueError, match="1 prompt ids for 2 prompts"):
        prompt_keys(["a", "b"], ids=[3])


def test_build_prompt_templates():
    assert build_prompt("p", "qwen_math") == [
        {"role": "system", "content": QWEN_MATH_INSTRUCTION},
        {"role": "user", "content": "p"},
    ]
    assert build_prompt("p", "qwen_math_user")[0]["content"].endswith(QWEN_MATH_INSTRUCTION)
    with pytest.raises(ValueError, match="prompt_template='nope'"):
        build_prompt("p", "nope")


def test_prepare_math_dataset_maps_columns_and_extracts_answers():
    raw = Dataset.from_dict(
        {
            "problem": ["What is 1+1?", "What is 2+2?", "No answer here"],
            "solution": ["So \\boxed{2}.", "First \\boxed{3}, then \\boxed{\\frac{8}{2}}", "none"],
            "idx": [10, 11, 12],
        }
    )
    ds = prepare_math_dataset(
        raw, answer_column="solution", answer_from_solution=True, prompt_template="plain"
    )
    assert ds["answer"] == ["2", "\\frac{8}{2}"]
    assert ds["prompt"][0] == [{"role": "user", "content": "What is 1+1?"}]
    assert ds["idx"] == [10, 11]  # other columns survive


def test_prepare_math_dataset_reads_verl_ground_truth_dicts():
    raw = Dataset.from_dict({"problem": ["q"], "reward_model": [{"ground_truth": "42", "style": "rule"}]})
    ds = prepare_math_dataset(raw, answer_column="reward_model")
    assert ds["answer"] == ["42"]


def test_prepare_math_dataset_names_missing_columns_and_the_fix():
    raw = Dataset.from_dict({"question": ["q"], "final": ["1"]})
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['answer', 'problem'\].*--problem_column"):
        prepare_math_dataset(raw)
