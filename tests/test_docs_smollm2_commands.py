"""The SmolLM2 commands of ``docs/real_model.md`` train with the real-model tests' own settings (read, not run).

Earlier they left out ``--logging_steps 1`` (one logged point for a 2-step run) and ``--save_strategy no``
(each run also wrote a checkpoint of the weights and Adam's moments); the tests had both.
"""

from __future__ import annotations

import ast
import re
import shlex

from helpers import ROOT


def _test_flags() -> dict[str, str]:
    tree = ast.parse((ROOT / "tests" / "test_real_model.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TRAIN_FLAGS" for t in node.targets):
            words = ast.literal_eval(node.value)
            return dict(zip(words[::2], words[1::2]))
    raise AssertionError("TRAIN_FLAGS not found in tests/test_real_model.py")


def _docs_flags() -> dict[str, str]:
    text = (ROOT / "docs" / "real_model.md").read_text()
    shared = re.search(r'^W="(.*?)"$', text, re.DOTALL | re.MULTILINE)
    assert shared, "docs/real_model.md: no W=\"...\" block of shared flags"
    words = shlex.split(shared.group(1).replace("\\\n", " "))
    return dict(zip(words[::2], words[1::2]))


def test_the_docs_smollm2_commands_use_the_tests_training_settings():
    docs, tests = _docs_flags(), _test_flags()
    assert docs["--logging_steps"] == "1" and docs["--save_strategy"] == "no"
    left_out = {"--dataloader_num_workers"}  # a test-only setting (no worker processes inside pytest)
    assert {flag: value for flag, value in tests.items() if flag not in left_out} == {
        flag: value for flag, value in docs.items() if flag != "--dataset_name"
    }
