"""The stage-3 arm ``grpo_teacher_paper`` keeps its pre-registered text, with an erratum beside it that
the report's generator writes (so it survives ``learning_study.py --report``)."""

from __future__ import annotations

import sys

from helpers import ROOT

sys.path.insert(0, str(ROOT / "studies"))

import learning_report  # noqa: E402
from learning_design import STAGE3_ARMS, STAGE3_HYPOTHESES  # noqa: E402


def test_erratum_stands_beside_the_unchanged_preregistered_text():
    rules = learning_report.stage3_rules_section()
    arm = next(a for a in STAGE3_ARMS if a.name == "grpo_teacher_paper")
    assert arm.why.startswith("GRPO with Teacher as the paper describes it")  # the committed text, unchanged
    assert arm.overrides == (("cliff_split_credit", False), ("cliff_recentre", False))
    row = next(line for line in rules.splitlines() if line.startswith("| `grpo_teacher_paper`"))
    assert arm.why in row and "erratum" in row
    assert "it was GRPO by construction" in rules and 'cliff_outcome=\\"teacher\\"' not in rules
    assert 'CliffConfig(cliff_outcome="teacher")' in rules
    h9 = next(h for h in STAGE3_HYPOTHESES if h.name == "H9")
    h9_row = next(line for line in rules.splitlines() if line.startswith("| H9 |"))
    assert h9.statement in h9_row and "the arm was GRPO" in h9_row


def test_the_committed_report_is_what_the_generator_writes():
    assert learning_report.stage3_rules_section() in (ROOT / "docs" / "learning_study.md").read_text()
