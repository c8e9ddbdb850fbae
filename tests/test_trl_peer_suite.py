"""tools/trl_peer_suite.py without a TRL checkout: how outcomes are compared and sorted, and the binary stand-in
reward model (TRL's tests are never part of this repository; docs/trl_peer_suite.md has a real run)."""

from __future__ import annotations

import torch
from helpers import ROOT, load_module

suite = load_module(ROOT / "tools" / "trl_peer_suite.py", "trl_peer_suite")


def test_exceptions_are_sorted_by_documented_restriction():
    results = {
        "grpo": {
            "T::a": ("passed", ""),
            "T::b": ("passed", ""),
            "T::c": ("passed", ""),
            "T::d": ("failed", "OSError: no stand-in"),
            "T::e": ("passed", ""),
        },
        "meds": {
            "T::a": ("passed", ""),
            "T::b": ("failed", "ValueError: MEDS needs a 0/1 correctness reward, but reward function 0 ..."),
            "T::c": ("failed", "AssertionError: assert 3 == 2\n + where 3 = len(...)"),
            "T::d": ("failed", "OSError: no stand-in"),  # fails for GRPO too: not an exception
            "T::e": ("failed", "RuntimeError: something else"),
        },
    }
    summary = suite.compare(results)
    assert summary["grpo"]["counts"] == {"cases": 5, "passed": 4, "failed": 1, "skipped": 0}
    assert summary["grpo"]["failed"] == {"T::d": "OSError: no stand-in"}
    meds = summary["meds"]
    assert meds["counts"] == {"cases": 5, "passed": 1, "failed": 4, "skipped": 0}
    assert meds["by_reason"] == {
        "MEDS adds its own reward column": ["T::c"],
        "reward 0 must be a 0/1 correctness verdict": ["T::b"],
        "unexplained": ["T::e"],
    }
    assert suite.classify("cliff_answer_column='answer' is not a column of") == (
        "Cliff's reference filter needs an answer column"
    )


def test_binary_stand_in_reward_model_scores_the_last_token_parity():
    from transformers import AutoModelForSequenceClassification

    config = suite._tiny_config(
        "qwen2", vocab_size=64, pad_token_id=0, num_labels=1, num_hidden_layers=0, rms_norm_eps=0.0, hidden_size=8
    )
    model = suite._binary_reward_model(AutoModelForSequenceClassification.from_config(config), 8)
    input_ids = torch.tensor([[5, 7, 0, 0], [3, 9, 12, 0], [2, 4, 6, 11]])  # last non-pad tokens 7, 12, 11
    scores = model(input_ids=input_ids, attention_mask=(input_ids != 0).long()).logits[:, 0]
    assert scores.tolist() == [1.0, 0.0, 1.0]
