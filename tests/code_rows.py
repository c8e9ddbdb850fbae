"""Small rows in the published schemas of the code datasets, written by the tests (the Hub is unreachable).

Schemas (checked against the dataset cards and the loaders that read them):

- LiveCodeBench ``livecodebench/code_generation_lite`` (``test*.jsonl``): ``question_title``, ``question_content``,
  ``platform``, ``question_id``, ``contest_id``, ``contest_date`` (ISO timestamp), ``starter_code``, ``difficulty``,
  ``public_test_cases`` (JSON text of ``[{"input", "output", "testtype": "stdin"|"functional"}]``),
  ``private_test_cases`` (the same list as JSON text, pickled, zlib-compressed, base64-encoded) and ``metadata``
  (JSON text, ``{"func_name": ...}`` for LeetCode problems). Functional inputs are one JSON value per line.
- CodeContests ``deepmind/code_contests``: ``name``, ``description``, ``public_tests``/``private_tests``/
  ``generated_tests`` as ``{"input": [...], "output": [...]}``, ``source``, ``difficulty``, ``cf_rating``,
  ``time_limit`` ``{"seconds", "nanos"}``, ``memory_limit_bytes``, ...
- DeepCoder ``agentica-org/DeepCoder-Preview-Dataset``: ``problem``, ``tests`` (JSON text), ``metadata`` (JSON text
  with ``func_name``), ``starter_code`` (lcbv5); ``tests`` per config: primeintellect
  ``[{"type": "stdin_stdout"|"function_call", "fn_name"?, "input", "output"}]`` (function-call inputs are argument
  lists, outputs one-element lists), taco ``{"inputs", "outputs", "fn_name"?}``, lcbv5 LiveCodeBench's list.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path


def encode_private_tests(tests: list[dict]) -> str:
    """LiveCodeBench's encoding of ``private_test_cases``."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


SUM_STATEMENT = "Given two integers A and B on one line, print A + B."
SUM_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
SUM_WRONG = "a, b = map(int, input().split())\nprint(a - b)\n"
MAX_STATEMENT = "Return the largest element of nums plus k."
MAX_STARTER = "class Solution:\n    def maxPlus(self, nums: List[int], k: int) -> int:\n        "
MAX_PROGRAM = (
    "from typing import List\n\n\nclass Solution:\n    def maxPlus(self, nums: List[int], k: int) -> int:\n"
    "        return max(nums) + k\n"
)


def fenced(program: str, prose: str = "Here is my solution.") -> str:
    return f"{prose}\n\n```python\n{program}```\n"


def livecodebench_rows() -> list[dict]:
    sum_private = [
        {"input": "10 -3\n", "output": "7\n", "testtype": "stdin"},
        {"input": "1000000000 1000000000\n", "output": "2000000000\n", "testtype": "stdin"},
    ]
    max_private = [{"input": "[-5, -2]\n0", "output": "-2", "testtype": "functional"}]
    return [
        {
            "question_title": "A + B",
            "question_content": SUM_STATEMENT,
            "platform": "atcoder",
            "question_id": "abc001_a",
            "contest_id": "abc001",
            "contest_date": "2024-09-14T00:00:00",
            "starter_code": "",
            "difficulty": "easy",
            "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
            "private_test_cases": encode_private_tests(sum_private),
            "metadata": json.dumps({}),
        },
        {
            "question_title": "max-plus",
            "question_content": MAX_STATEMENT,
            "platform": "leetcode",
            "question_id": "3001",
            "contest_id": "weekly-contest-400",
            "contest_date": "2025-03-02T00:00:00",
            "starter_code": MAX_STARTER,
            "difficulty": "medium",
            "public_test_cases": json.dumps(
                [{"input": "[1, 5, 3]\n2", "output": "7", "testtype": "functional"}]
            ),
            "private_test_cases": encode_private_tests(max_private),
            "metadata": json.dumps({"func_name": "maxPlus"}),
        },
    ]


def codecontests_rows() -> list[dict]:
    return [
        {
            "name": "1_A. A plus B",
            "description": SUM_STATEMENT,
            "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
            "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
            "generated_tests": {"input": ["0 0\n", "-1 1\n"], "output": ["0\n", "0\n"]},
            "source": 2,
            "difficulty": 7,
            "cf_contest_id": 1,
            "cf_index": "A",
            "cf_rating": 800,
            "cf_tags": ["math"],
            "time_limit": {"seconds": 1, "nanos": 0},
            "memory_limit_bytes": 256000000,
            "input_file": "",
            "output_file": "",
        }
    ]


def deepcoder_rows(config: str) -> list[dict]:
    """Two rows (a stdin problem, a functional one) of a DeepCoder config."""
    if config == "primeintellect":
        stdin_tests = [
            {"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"},
            {"type": "stdin_stdout", "input": "4 5\n", "output": "9\n"},
        ]
        function_tests = [
            {"type": "function_call", "fn_name": "add", "input": [1, 2], "output": [3]},
            {"type": "function_call", "fn_name": "add", "input": [-1, 1], "output": [0]},
        ]
        return [
            {"problem": SUM_STATEMENT, "tests": json.dumps(stdin_tests), "metadata": json.dumps({})},
            {
                "problem": "Write add(a, b) returning a + b.",
                "tests": json.dumps(function_tests),
                "metadata": json.dumps({}),
            },
        ]
    if config == "taco":
        return [
            {
                "problem": SUM_STATEMENT,
                "tests": json.dumps({"inputs": ["1 2\n", "4 5\n"], "outputs": ["3\n", "9\n"]}),
                "metadata": json.dumps({}),
            },
            {
                "problem": "Write add(a, b) returning a + b.",
                "tests": json.dumps({"fn_name": "add", "inputs": [[1, 2], [-1, 1]], "outputs": [[3], [0]]}),
                "metadata": json.dumps({}),
            },
        ]
    if config == "lcbv5":
        return [
            {
                "problem": SUM_STATEMENT,
                "starter_code": "",
                "tests": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
                "metadata": json.dumps({"func_name": None}),
            },
            {
                "problem": MAX_STATEMENT,
                "starter_code": MAX_STARTER,
                "tests": json.dumps([{"input": "[1, 5, 3]\n2", "output": "7", "testtype": "functional"}]),
                "metadata": json.dumps({"func_name": "maxPlus"}),
            },
        ]
    raise ValueError(config)


ADD_PROGRAM = "def add(a, b):\n    return a + b\n"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def mbpp_rows() -> list[dict]:
    """Rows of MBPP's ``full`` config (``task_id``, ``text``, ``code``, ``test_list``, ``test_setup_code``,
    ``challenge_test_list``)."""
    return [
        {
            "task_id": 2,
            "text": "Write a function to find the shared elements from the given two lists.",
            "code": "def similar_elements(test_tup1, test_tup2):\n    return tuple(set(test_tup1) & set(test_tup2))",
            "test_list": [
                "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
                "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
            ],
            "test_setup_code": "",
            "challenge_test_list": [],
        },
        {
            "task_id": 3,
            "text": "Write a python function to identify non-prime numbers.",
            "code": (
                "import math\ndef is_not_prime(n):\n    if n < 2:\n        return True\n"
                "    for i in range(2, int(math.sqrt(n)) + 1):\n        if n % i == 0:\n            return True\n"
                "    return False"
            ),
            "test_list": ["assert is_not_prime(2) == False", "assert is_not_prime(10) == True"],
            "test_setup_code": "",
            "challenge_test_list": [],
        },
    ]
