"""Code as a verifiable domain: test formats, a sandboxed test runner, and the reward.

Untrusted (model-written) code is handled only here: :mod:`.sandbox` and :mod:`._harness` run it,
:mod:`.comparison` grades its outputs in the caller. docs/code_sandbox.md has the semantics and the
threat model.
"""

from .comparison import functional_result_matches, stdout_matches
from .extraction import extract_program
from .formats import CodeTests, TestCase, has_tests, parse_tests
from .reward import AsyncCodeTestsReward, CodeTestsReward, is_code_reward
from .runner import (
    LIVECODEBENCH_PRELUDE,
    TEST_STATUSES,
    TestCaseResult,
    TestRunResult,
    arun_tests_batch,
    run_tests,
    run_tests_batch,
    select_cases,
)
from .sandbox import SandboxLimits

__all__ = [
    "LIVECODEBENCH_PRELUDE",
    "TEST_STATUSES",
    "AsyncCodeTestsReward",
    "CodeTests",
    "CodeTestsReward",
    "SandboxLimits",
    "TestCase",
    "TestCaseResult",
    "TestRunResult",
    "arun_tests_batch",
    "extract_program",
    "functional_result_matches",
    "has_tests",
    "is_code_reward",
    "parse_tests",
    "run_tests",
    "run_tests_batch",
    "select_cases",
    "stdout_matches",
]
