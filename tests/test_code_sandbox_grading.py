"""Hostile programs against the grading itself: forged assert tests, the caller's keyring, outputs that
crash or burden the comparison, stderr that fakes a verdict, and LiveCodeBench's functional semantics.

Every test runs in both isolation modes, is bounded (small limits, a pytest timeout) and failed on the code
before the grading was hardened (checked by running this file against it): there the forgeries passed, the
keyring was read, the comparisons raised in the caller, a clean exit that printed ``MemoryError`` was a
``memory_limit``, an 8 MiB line cost the caller hundreds of MiB, and the LiveCodeBench cases below got the
TACO verdicts. The autouse fixture of ``test_code_sandbox_hostile`` checks that no harness process
outlives its run.
"""

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
import uuid
from pathlib import Path

import pytest
from test_code_sandbox_hostile import MODES, limits, no_harness_left_behind  # noqa: F401 - autouse fixture

import hf_meds_cliff
from hf_meds_cliff.code import CodeTestsReward, run_tests

pytestmark = pytest.mark.timeout(120)

HUMAN_EVAL = {
    "test": "def check(candidate):\n    assert candidate(2) == 4\n    assert abs(candidate(3) - 9) < 1e-9\n",
    "entry_point": "square",
}
MBPP = {"test_list": ["assert square(2) == 4", "assert sorted([square(3)]) == [9] and len([square(3)]) == 1"]}
MBPP_MATH = {"test_list": ["assert math.isclose(square(3), 9.0)"], "test_setup_code": "import math"}
WRONG = "def square(x):\n    return -1\n"
FAILED = ("wrong_answer", "runtime_error")

FORGERIES = {
    # the two lines of the original forgery: the test statements' exec becomes a no-op in the harness module
    "exec_patched": "import sys; sys.modules['__main__'].exec = lambda *a, **k: None\n" + WRONG,
    # a global that shadows a builtin the asserts compute with (human-eval is fooled by it too)
    "builtin_shadowed": (
        "def abs(x):\n    return 0\ndef sorted(*a, **k):\n    return []\ndef len(x):\n    return 0\n"
        "def square(x):\n    return 4 if x == 2 else 99\n"
    ),
    # read the nonce from whatever descriptor holds it, then send the confirmation frame on every descriptor
    "nonce_read_and_confirmed": textwrap.dedent(
        """
        import os, time
        time.sleep(0.3)  # the harness writes the nonce right after the fork
        nonces = []
        for fd in range(3, 1024):
            try:
                os.set_blocking(fd, False)
                data = os.read(fd, 64)
            except OSError:
                continue
            if len(data) == 32:
                nonces.append(data)
        for fd in range(3, 1024):
            for nonce in nonces:
                try:
                    os.write(fd, (len(nonce) + 1).to_bytes(4, "big") + b"N" + nonce)
                except OSError:
                    pass
        os._exit(0)
        """
    ),
}


@pytest.mark.parametrize("isolation", MODES)
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_assert_tests_cannot_be_forged_from_the_program(isolation, forgery):
    """The test code runs in a grader process that the program's process cannot reach: patching the harness,
    reading descriptors, writing frames change nothing (before, both passed every assert test)."""
    program = FORGERIES[forgery]
    for tests in (HUMAN_EVAL, MBPP):
        result = run_tests(program, tests, limits=limits(isolation), stop_at_first_failure=False)
        # a failed assert of the test code is a wrong answer, a program that ends early a runtime error
        assert not result.passed and result.results[-1].status in FAILED, (forgery, result.results)
    # the sandbox still passes an honest program (so the forgeries failed for the right reason)
    for tests in (HUMAN_EVAL, MBPP):
        honest = run_tests("def square(x):\n    return x * x\n", tests, limits=limits(isolation))
        assert honest.passed, honest.results


@pytest.mark.parametrize("isolation", MODES)
def test_standard_modules_patched_by_the_program_do_not_reach_the_asserts(isolation):
    """The grader imports its own ``math``: ``math.isclose = lambda *a: True`` in the program changes nothing
    (before the hardening it passed)."""
    patched = "import math\nmath.isclose = lambda *a, **k: True\n" + WRONG
    result = run_tests(patched, MBPP_MATH, limits=limits(isolation))
    assert result.results[0].status == "wrong_answer", result.results
    assert run_tests("def square(x):\n    return x * x\n", MBPP_MATH, limits=limits(isolation)).passed


def _key_syscalls():
    """``add_key`` and ``keyctl`` through ctypes, as in the harness (x86_64 / aarch64 numbers)."""
    numbers = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)
    if numbers is None:
        pytest.skip(f"no keyring system call numbers for {os.uname().machine}")
    return numbers


KEYRING_CALLER = """
import ctypes, json, sys
from hf_meds_cliff.code import SandboxLimits, run_tests

add_key, keyctl = {numbers}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
secret = {secret!r}.encode()
# the caller's session keyring (created and joined here if it had none), before any sandbox starts
key = libc.syscall(ctypes.c_long(add_key), b"user", {name!r}.encode(), secret, ctypes.c_size_t(len(secret)),
                   ctypes.c_long(-3))
if key < 0:
    print(json.dumps({{"unavailable": ctypes.get_errno()}}))
    sys.exit(0)
program = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = []
buffer = ctypes.create_string_buffer(256)
ids = [%d]
for keyring in (-3, -5, -4):  # session, user-session, user: look the key up by name too
    key = libc.syscall(ctypes.c_long(%d), ctypes.c_long(10), ctypes.c_long(keyring), b"user", b"%s", ctypes.c_long(0))
    if key > 0:
        ids.append(key)
for key in ids:
    size = libc.syscall(ctypes.c_long(%d), ctypes.c_long(11), ctypes.c_long(key), buffer, ctypes.c_size_t(256))
    if size > 0:
        found.append(buffer.raw[:size].decode(errors="replace"))
print("read:", found)
''' % (key, keyctl, {name!r}, keyctl)
result = run_tests(program, [{{"input": "", "output": "read: []"}}],
                   limits=SandboxLimits(timeout_s=5, memory_mb=256, isolation={isolation!r}))
case = result.results[0]
print(json.dumps({{"status": case.status, "actual": case.actual, "error": case.error}}))
"""


@pytest.mark.parametrize("isolation", MODES)
def test_the_callers_session_keyring_is_out_of_reach(isolation):
    """A caller (a fresh process, so that its fork server starts after the key exists) puts a secret in its
    session keyring; the program, reading by id and searching by name, gets nothing (before, it read
    the secret in both modes)."""
    secret, name = f"fake-secret-{uuid.uuid4().hex}", f"hf-meds-cliff-test-{uuid.uuid4().hex[:8]}"
    code = KEYRING_CALLER.format(numbers=_key_syscalls(), secret=secret, name=name, isolation=isolation)
    # the caller imports the same package as this test
    environment = {**os.environ, "PYTHONPATH": str(Path(hf_meds_cliff.__file__).resolve().parents[1])}
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=90, env=environment, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    outcome = json.loads(completed.stdout.strip().splitlines()[-1])
    if "unavailable" in outcome:
        pytest.skip(f"keyrings are unavailable here (errno {outcome['unavailable']}): nothing to leak")
    assert secret not in (outcome["actual"] or "") + (outcome["error"] or ""), outcome
    assert outcome["status"] == "passed", outcome


FUNCTIONAL_LCB = [{"input": "1", "output": "1", "testtype": "functional"}]
CRASHING_OUTPUTS = {
    # (program, tests): each raised in the caller before the hardening
    "signalling_nan_stdout": ("print('sNaN')\n", [{"input": "", "output": "5"}]),
    "result_nested_1000_deep": (
        "def f(x):\n    r = []\n    for _ in range(1000):\n        r = [r]\n    return r\n",
        FUNCTIONAL_LCB,
    ),
    "int_over_the_digit_limit": (
        "import sys\nsys.set_int_max_str_digits(0)\ndef f(x):\n    return 10**5000\n",
        FUNCTIONAL_LCB,
    ),
    # a result frame of its own making, nested beyond any recursion limit, on every descriptor
    "forged_deep_result_frame": (
        (
            # fd 1 is where a functional result leaves the program's process (it holds only 0, 1, 2)
            "import os\ndef f(x):\n    data = b'R' + b'[' * 20000 + b']' * 20000\n"
            "    for fd in range(1, 1024):\n        try:\n"
            "            os.write(fd, len(data).to_bytes(4, 'big') + data)\n        except OSError:\n"
            "            pass\n    os._exit(0)\n"
        ),
        FUNCTIONAL_LCB,
    ),
}


@pytest.mark.parametrize("isolation", MODES)
@pytest.mark.parametrize("case", sorted(CRASHING_OUTPUTS))
def test_outputs_that_break_the_comparison_are_wrong_answers(isolation, case):
    program, tests = CRASHING_OUTPUTS[case]
    result = run_tests(program, tests, fn_name="f", limits=limits(isolation))
    assert [test.status for test in result.results] == ["wrong_answer"], result.results
    if case != "int_over_the_digit_limit":  # that one is decoded exactly now, and simply differs
        assert result.comparison_errors == 1 and result.results[0].comparison_error, result.results
    # the reward scores it 0 and counts it, instead of killing the training step
    reward = CodeTestsReward(limits=limits(isolation))
    logged = {}
    scores = reward([f"```python\n{program}```"], tests=[tests], fn_name=["f"], log_metric=logged.__setitem__)
    assert scores == [0.0] and logged["code/comparison_errors"] == float(result.comparison_errors)


@pytest.mark.parametrize("isolation", MODES)
def test_stderr_text_does_not_decide_a_clean_exit(isolation):
    """A correct program that exits 0 after printing ``MemoryError`` to stderr passes, in every test kind
    (before the hardening: ``memory_limit``)."""
    noise = "import sys\nsys.stderr.write('Traceback ...\\nMemoryError\\nCannot allocate memory\\n')\n"
    stdin = run_tests(noise + "print(5)\n", [{"input": "", "output": "5"}], limits=limits(isolation))
    functional = run_tests(
        noise + "def f(x):\n    return x\n", FUNCTIONAL_LCB, fn_name="f", limits=limits(isolation)
    )
    asserts = run_tests(noise + "def square(x):\n    return x * x\n", HUMAN_EVAL, limits=limits(isolation))
    for result in (stdin, functional, asserts):
        assert result.passed, result.results
    # a real MemoryError is still named by its exit
    real = run_tests("x = bytearray(1 << 31)\n", [{"input": "", "output": "5"}], limits=limits(isolation))
    assert real.results[0].status == "memory_limit"


@pytest.mark.parametrize("isolation", MODES)
def test_a_flood_on_one_line_costs_the_caller_little(isolation):
    """8 MiB of ``1 1 1 ...`` on one line against a one-number answer: the caller reads at most
    ``COMPARED_BYTES_FLOOR`` of it and splits off at most two tokens (before: about 538 MiB of peak
    memory and 1.5-2 s of CPU in the caller)."""
    program = "import sys\nsys.stdout.write('1 ' * (4 << 20))\n"
    bounded = limits(isolation, max_output_bytes=16 << 20)
    tracemalloc.start()
    try:
        before = os.times()
        result = run_tests(program, [{"input": "", "output": "5"}], limits=bounded)
        after = os.times()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.results[0].status == "wrong_answer", result.results
    assert peak < 16 << 20, f"the caller's peak was {peak / 2**20:.0f} MiB"
    caller_cpu = (after.user - before.user) + (after.system - before.system)
    assert caller_cpu < 1.0, f"the caller spent {caller_cpu:.2f} s of CPU"


LIVECODEBENCH_CASES = {
    # program body of f, expected JSON, whether LiveCodeBench's grader passes it
    "one_element_list_is_not_its_element": ("return 7", "[7]", False),
    "nested_tuple_is_not_a_list": ("return [(1, 2)]", "[[1, 2]]", False),
    "int_key_is_not_a_string_key": ("return {1: 2}", '{"1": 2}', False),
    "fraction_equals_its_float": ("from fractions import Fraction\n    return Fraction(1, 2)", "0.5", True),
    "decimal_equals_its_float": ("from decimal import Decimal\n    return Decimal('0.5')", "0.5", True),
}


@pytest.mark.parametrize("isolation", MODES)
@pytest.mark.parametrize("case", sorted(LIVECODEBENCH_CASES))
def test_livecodebench_functional_tests_follow_livecodebench(isolation, case):
    body, expected, passes = LIVECODEBENCH_CASES[case]
    tests = [{"input": "1", "output": expected, "testtype": "functional"}]
    result = run_tests(f"def f(x):\n    {body}\n", tests, fn_name="f", limits=limits(isolation))
    assert result.passed is passes, result.results
    if not passes:
        assert result.results[0].status == "wrong_answer"
