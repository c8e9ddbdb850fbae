"""Test formats, program extraction and output comparison: pure functions, no sandbox."""

import json

import pytest

from hf_meds_cliff.code import (
    CodeTests,
    TestCase,
    extract_program,
    functional_result_matches,
    has_tests,
    parse_tests,
    select_cases,
    stdout_matches,
)


def test_livecodebench_stdin_and_functional():
    stdin = parse_tests(json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]))
    assert stdin == CodeTests("stdin", [TestCase("1 2\n", "3\n")])
    functional = parse_tests(
        [
            {
                "input": '[1, 2]\n"x"',
                "output": "[3, 1]",
                "testtype": "functional",
                "metadata": {"func_name": "f"},
            }
        ]
    )
    assert (
        functional.kind == "functional"
        and functional.fn_name == "f"
        and functional.semantics == "livecodebench"
    )
    assert functional.cases == [TestCase([[1, 2], "x"], [3, 1])]
    assert parse_tests([{"input": "1", "output": "2", "testtype": "functional"}], fn_name="g").fn_name == "g"


def test_primeintellect_stdin_stdout_and_function_call():
    tests = parse_tests('[{"type": "stdin_stdout", "input": "5\\n", "output": "25\\n"}]')
    assert tests.kind == "stdin" and tests.cases == [TestCase("5\n", "25\n")]
    calls = parse_tests([{"type": "function_call", "fn_name": "sq", "input": [3], "output": [9]}])
    assert calls == CodeTests("functional", [TestCase([3], [9])], fn_name="sq", semantics="taco")


def test_taco_apps_stdin_and_call_based():
    assert parse_tests({"inputs": ["1\n", ["2", "3"]], "outputs": ["1\n", "5"]}).cases == [
        TestCase("1\n", "1\n"),
        TestCase("2\n3", "5"),
    ]
    call = parse_tests(json.dumps({"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}))
    assert call == CodeTests("functional", [TestCase([1, 2], [3])], fn_name="add", semantics="taco")


def test_code_contests_uses_every_split_in_order():
    tests = parse_tests(
        {
            "public_tests": {"input": ["a"], "output": ["A"]},
            "private_tests": {"input": ["b"], "output": ["B"]},
            "generated_tests": {"input": ["c"], "output": ["C"]},
        }
    )
    assert [case.input for case in tests.cases] == ["a", "b", "c"]


def test_human_eval_and_mbpp():
    human_eval = parse_tests(
        {"test": "def check(candidate):\n    assert candidate(1) == 2\n", "entry_point": "inc"}
    )
    assert human_eval.kind == "assert" and human_eval.entry_point == "inc"
    assert human_eval.cases[0].input.rstrip().endswith("check(inc)")
    mbpp = parse_tests(
        {"test_list": ["assert f(1) == 2", "assert f(2) == 3"], "test_setup_code": "import math"}
    )
    assert mbpp.setup_code == "import math" and [case.input for case in mbpp.cases] == [
        "assert f(1) == 2",
        "assert f(2) == 3",
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('[{"input": "1"}]', r"row 7, field '\[0\]\.output' is missing"),
        ("[{'input': 1}]", r"row 7, field 'tests' is not valid JSON"),
        ({"inputs": ["1"], "outputs": []}, r"row 7, field 'inputs/outputs' have different lengths"),
        (
            [{"input": "1", "output": "2", "testtype": "functional"}],
            r"row 7, field 'fn_name'.*no function name",
        ),
        ([{"input": "1", "output": "2", "testtype": "batch"}], r"row 7, field '\[0\]\.testtype'"),
        ({"test": "", "entry_point": "f"}, r"row 7, field 'test'"),
        ({"test_list": "assert 1"}, r"row 7, field 'test_list'"),
        ({"public_tests": {"input": ["1"]}}, r"row 7, field 'public_tests'"),
        ({"foo": 1}, r"row 7, field 'tests'.*matches no supported format"),
        (42, r"row 7, field 'tests' must be a list or an object"),
        ([], r"row 7, field 'tests' holds no test cases"),
    ],
)
def test_malformed_tests_name_the_row_and_field(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_tests(raw, row=7)


def test_has_tests_recognises_missing_and_empty():
    assert [has_tests(value) for value in (None, "", " [] ", "{}", [], {}, "null")] == [False] * 7
    assert has_tests('[{"input": "", "output": ""}]') and has_tests({"test_list": ["assert 1"]})


def test_extract_program_takes_the_last_python_or_bare_block():
    completion = "```python\nprint(1)\n```\ntext\n```py\nprint(2)\n```\n```cpp\nint x;\n```\n"
    assert extract_program(completion) == "print(2)\n"
    assert extract_program("```\nprint(3)\n```") == "print(3)\n"
    assert extract_program("```python\nprint(4)\n") is None  # cut off before the closing fence
    assert extract_program("plain text") is None
    assert extract_program("Here: ```python\nprint(5)\n``` and done") == "print(5)\n"  # mid-line fences
    assert extract_program("```python\nprint(6)\n``` ```\nprint(7)\n```") == "print(7)\n"
    with pytest.raises(TypeError, match="completion text"):
        extract_program(["not", "text"])


def test_stdout_comparison_follows_livecodebench():
    assert stdout_matches("  1 2\n3  \n\n", "1 2\n3")
    assert stdout_matches("1.50 2e1", "1.5 20")
    assert not stdout_matches("1 2", "1 2 3")
    assert not stdout_matches("1\n2", "1 2")  # lines count
    assert not stdout_matches("1.5000001", "1.5")
    assert not stdout_matches("YES", "yes")


def test_functional_comparison_taco_semantics_after_a_json_round_trip():
    assert functional_result_matches("[1, 2]", (1, 2), "taco")
    assert functional_result_matches('{"d":[["a",{"t":[1]}]]}', {"a": (1,)}, "taco")
    assert functional_result_matches('{"d":[[1,2]]}', {"1": 2}, "taco")  # keys as JSON carries them
    assert functional_result_matches("3", [3], "taco")  # TACO/APPS wrap a return value in a list
    assert not functional_result_matches("[3, 4]", [[3, 4], 1], "taco")
    assert not functional_result_matches("not json", 1, "taco")


def test_functional_comparison_livecodebench_semantics():
    """As LiveCodeBench's grader: only a top-level tuple becomes a list, then ``==``."""
    assert functional_result_matches('{"t":[1,2]}', [1, 2])
    assert not functional_result_matches('[{"t":[1,2]}]', [[1, 2]])  # a nested tuple is no list
    assert not functional_result_matches('{"d":[[1,2]]}', {"1": 2})  # an int key is no string key
    assert not functional_result_matches("3", [3])  # no one-element-list rule
    assert functional_result_matches('{"q":[1,2]}', 0.5) and functional_result_matches('{"m":"0.50"}', 0.5)
    assert not functional_result_matches('{"q":[1,10]}', 0.1)  # exact: 1/10 is not the float 0.1
    with pytest.raises(ValueError, match="semantics"):
        functional_result_matches("1", 1, "apps")


def test_select_cases_keeps_the_longest_inputs_in_order():
    cases = [TestCase("a" * length, "") for length in (1, 5, 3, 4, 2)]
    assert [index for index, _ in select_cases(cases, 3)] == [1, 2, 3]
    assert len(select_cases(cases, None)) == 5
