"""The zygote process tree, checked from inside the program: what the program's process holds by
construction, in every isolation mode and start method (fork server, exec, and the automatic exec fallback).

Each test failed on the harness before the zygote tree, where each test process was forked from the process
that held the tests and the result channel: the program found the test code's marker and the caller's
``compare_bytes`` in its own memory, held descriptors besides 0, 1 and 2, forged ``compile_error`` and
``sandbox_error`` with frames, saw files of the previous test, and the grader imported a module the program
named (whose import ran unittest's discovery in the program's folder).
"""

import atexit
import functools
import hashlib
import shutil
import tempfile
import textwrap
import uuid
from pathlib import Path

import pytest
from test_code_sandbox_hostile import (  # noqa: F401 - autouse fixture
    limits,
    needs_isolation,
    no_harness_left_behind,
    processes_with,
)

from hf_meds_cliff.code import SandboxLimits, run_tests, run_tests_batch, sandbox

pytestmark = pytest.mark.timeout(180)

SETUPS = [
    ("auto", "fork_server"),
    ("auto", "exec"),
    ("auto", "exec_fallback"),
    ("auto", "exec_without_clone"),
    ("none", "fork_server"),
    ("none", "exec"),
    ("none", "exec_fallback"),
]


class _NoForkServer:
    def __init__(self):
        raise OSError("refused for this test")


def setup_limits(setup, monkeypatch, **changes) -> SandboxLimits:
    """The limits of one (isolation, start method) setup; ``exec_fallback`` makes the fork server fail to
    start, so that the caller falls back to starting an interpreter (as it does on a machine that refuses it)."""
    isolation, method = setup
    if method == "exec_without_clone":
        monkeypatch.setattr(sandbox, "HARNESS_PATH", harness_without_clone())
        method = "exec"
    if method == "exec_fallback":
        monkeypatch.setattr(sandbox, "_ForkServer", _NoForkServer)
        monkeypatch.setattr(sandbox, "_fork_server", None)
        method = "fork_server"
    return limits(isolation, start_method=method, **changes)


@functools.cache
def harness_without_clone() -> str:
    """A copy of the harness that does not know any machine's clone(2): B2 and the zygote are made through the
    helper processes B1 and H (``unshare``, then fork), the path of machines other than x86_64, aarch64 and
    riscv64. Run with the exec start method (a fork server of its own would outlive the test). One copy per
    test session, removed when it ends."""
    folder = Path(tempfile.mkdtemp(prefix="hf-meds-cliff-harness-"))
    atexit.register(shutil.rmtree, folder, True)
    for name in ("_harness.py", "_inside.py", "_wire.py", "_groups.py", "_removal.py"):
        text = (Path(sandbox.HARNESS_PATH).parent / name).read_text()
        if name == "_harness.py":
            known = 'SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220}'
            assert known in text
            text = text.replace(known, "SYS_CLONE = {}")
        (folder / name).write_text(text)
    return str(folder / "_harness.py")


# Finds every occurrence of PREFIX in its own memory (read with process_vm_readv, as ctypes would) and reports whether one of them
# continues as the secret marker (known only by its hash: the program cannot build it) or as the caller's
# `"compare_bytes": <number>`. The first line puts the scanner's own source out of the search's way.
SCANNER = textwrap.dedent(
    """
    import ctypes, hashlib, os, re
    libc = ctypes.CDLL(None, use_errno=True)
    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(IoVec), ctypes.c_ulong,
                                      ctypes.POINTER(IoVec), ctypes.c_ulong, ctypes.c_ulong]
    def read_own(start, size):
        # process_vm_readv on itself: a region that cannot be read fails with EFAULT instead of crashing
        chunks = []
        for offset in range(0, size, 1 << 20):
            length = min(1 << 20, size - offset)
            buffer = ctypes.create_string_buffer(length)
            local, remote = IoVec(ctypes.addressof(buffer), length), IoVec(start + offset, length)
            got = libc.process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            if got > 0:
                chunks.append(buffer.raw[:got])
        return b"".join(chunks)
    def scan(prefix, digest, length):
        found_marker = found_compare = False
        compare = re.compile(rb'bytes": ?[0-9]')
        with open("/proc/self/maps") as maps:
            regions = [line.split() for line in maps]
        for fields in regions:
            if "r" not in fields[1] or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            start, end = (int(value, 16) for value in fields[0].split("-"))
            data = read_own(start, end - start)
            at = data.find(prefix)
            while at >= 0:
                if hashlib.sha256(data[at : at + length]).hexdigest() == digest:
                    found_marker = True
                at = data.find(prefix, at + 1)
            at = data.find(b'"compare_')
            while at >= 0:
                if compare.match(data, at + 9):
                    found_compare = True
                at = data.find(b'"compare_', at + 1)
        return found_marker, found_compare
    """
)


def _marker():
    prefix = "HFMC" + uuid.uuid4().hex[:8]
    marker = prefix + uuid.uuid4().hex
    return prefix, marker, hashlib.sha256(marker.encode()).hexdigest()


@pytest.mark.parametrize("setup", SETUPS)
def test_the_program_process_never_held_the_test_code(setup, monkeypatch):
    """The program scans its whole memory for a marker that only the test code contains: it is not there, so
    it cannot return what the asserts want (before the zygote tree it found it and passed)."""
    prefix, marker, digest = _marker()
    program = SCANNER + textwrap.dedent(
        f"""
        def square(x):
            found_marker, found_compare = scan({prefix!r}.encode(), {digest!r}, {len(marker)})
            return x * x if found_marker else -1
        """
    )
    tests = {
        "test": f"def check(candidate):\n    assert candidate(3) == 9, {marker!r}\n",
        "entry_point": "square",
    }
    result = run_tests(program, tests, limits=setup_limits(setup, monkeypatch, timeout_s=10, memory_mb=512))
    assert not result.passed and result.results[0].status == "wrong_answer", result.results


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_the_memory_scanner_finds_what_the_program_was_given(isolation):
    """The control of the test above: the same scanner finds the marker when it is the program's own input
    (so a scan that finds nothing there means the marker is absent), and finds no ``compare_bytes`` of the
    caller's messages."""
    prefix, marker, digest = _marker()
    program = SCANNER + textwrap.dedent(
        f"""
        given = input()
        print(*scan({prefix!r}.encode(), {digest!r}, {len(marker)}))
        """
    )
    # Each test's message carries the caller's read cap for its output ("compare_bytes"): never in P's memory.
    tests = [
        {"input": marker + "\n", "output": "True False"},
        {"input": marker + "\n", "output": "True False"},
    ]
    result = run_tests(
        program, tests, limits=limits(isolation, timeout_s=10, memory_mb=512), stop_at_first_failure=False
    )
    assert [case.status for case in result.results] == ["passed", "passed"], result.results


DESCRIPTORS = "import os\nfds = sorted(int(fd) for fd in os.listdir('/proc/self/fd'))\n"


@pytest.mark.parametrize("setup", SETUPS)
def test_the_program_process_holds_exactly_its_three_pipes(setup, monkeypatch):
    """Descriptors 0, 1 and 2 and nothing else (the listing's own descriptor aside), for every kind of test."""
    listed = DESCRIPTORS + "shown = [fd for fd in fds if os.path.exists(f'/proc/self/fd/{fd}')]\n"
    bounded = setup_limits(setup, monkeypatch)
    stdin = run_tests(listed + "print(*shown)\n", [{"input": "", "output": "0 1 2"}], limits=bounded)
    assert stdin.passed, stdin.results
    functional = run_tests(
        listed + "def f(x):\n    return shown\n",
        [{"input": "1", "output": "[0, 1, 2]", "testtype": "functional"}],
        fn_name="f",
        limits=bounded,
    )
    assert functional.passed, functional.results
    asserts = run_tests(
        listed + "def square(x):\n    return shown\n",
        {"test": "def check(candidate):\n    assert candidate(2) == [0, 1, 2]\n", "entry_point": "square"},
        limits=bounded,
    )
    assert asserts.passed, asserts.results


FORGED_FRAMES = textwrap.dedent(
    """
    import os
    frames = b"".join(
        (len(payload) + 1).to_bytes(4, "big") + tag + payload
        for tag, payload in [(b"C", b"SyntaxError: forged"), (b"S", b"forged setup error"), (b"X", b"MemoryError")]
    )
    for fd in range(1, 1024):
        try:
            os.write(fd, frames)
        except OSError:
            pass
    """
)


@pytest.mark.parametrize("setup", SETUPS)
def test_frames_the_program_writes_are_no_verdict(setup, monkeypatch):
    """Frames that claim a compile error, a harness failure or a memory error, written on every descriptor,
    change no verdict: only the checker decides (the old harness made them a compile_error)."""
    bounded = setup_limits(setup, monkeypatch)
    stdin = run_tests(FORGED_FRAMES + "print(5)\n", [{"input": "", "output": "5"}], limits=bounded)
    assert stdin.results[0].status == "wrong_answer", stdin.results
    functional = run_tests(
        FORGED_FRAMES + "def f(x):\n    return x\n",
        [{"input": "1", "output": "1", "testtype": "functional"}],
        fn_name="f",
        limits=bounded,
    )
    assert functional.results[0].status == "passed", (
        functional.results
    )  # what it returned decides, as it should
    human_eval = {"test": "def check(candidate):\n    assert candidate(2) == 4\n", "entry_point": "square"}
    asserts = run_tests(FORGED_FRAMES + "def square(x):\n    return x * x\n", human_eval, limits=bounded)
    assert asserts.results[0].status == "runtime_error", asserts.results  # it broke its own answer channel


# Writes modules into its folder that, if the grader imported them, would print the marker (into the test's
# error text) and make the grader exit 0; and names unittest's command line (whose import runs discovery in
# the current folder) and other modules as its own imports.
PLANTER = textwrap.dedent(
    """
    import os, types
    evil = "import os, sys\\nsys.stderr.write('{marker}\\\\n'); sys.stderr.flush()\\nos._exit(0)\\n"
    for name in ("test_evil.py", "textwrap.py", "sitecustomize.py", "usercustomize.py", "unicodedata.py",
                 "evil.pth", "this.py"):
        with open(name, "w") as handle:
            handle.write("import os; " + evil if name.endswith(".pth") else evil)
    runner = types.ModuleType("unittest.__main__")
    zen = types.ModuleType("this")
    planted = types.ModuleType("textwrap")
    def square(x):
        return -1
    """
)


@pytest.mark.parametrize("setup", SETUPS)
def test_the_grader_imports_nothing_the_program_names_or_writes(setup, monkeypatch):
    """The grader binds only its own copies of a fixed list of standard modules, imports nothing the program
    names, and resolves the test code's imports away from the program's folder (the old harness
    imported ``unittest.__main__``, whose discovery imported the program's ``test_evil.py``)."""
    marker = f"EVIL-{uuid.uuid4().hex}"
    tests = {
        "test": "import textwrap, unicodedata\ndef check(candidate):\n    assert candidate(2) == 4\n",
        "entry_point": "square",
    }
    result = run_tests(PLANTER.replace("{marker}", marker), tests, limits=setup_limits(setup, monkeypatch))
    case = result.results[0]
    # A wrong answer; or, where the grader's uid cannot read the interpreter's private folder (limits-only
    # mode as root), the test code's own import fails: never the program's module.
    assert not result.passed and case.status in ("wrong_answer", "runtime_error"), result.results
    assert case.status == "wrong_answer" or "ModuleNotFoundError" in case.error, case.error
    assert marker not in (case.error or ""), case.error


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_every_test_gets_a_fresh_folder(isolation):
    """A file one test writes is gone for the next test of the same program (the old harness kept it)."""
    program = (
        "import os\nprint('seen' if os.path.exists('note') else 'fresh')\nopen('note', 'w').write('x')\n"
    )
    result = run_tests(
        program, [{"input": "", "output": "fresh"}] * 3, limits=limits(isolation), stop_at_first_failure=False
    )
    assert [case.status for case in result.results] == ["passed"] * 3, result.results


@needs_isolation
@pytest.mark.parametrize("method", ["fork_server", "exec", "exec_without_clone"])
def test_the_zygote_is_init_of_the_programs_pid_namespace(method, monkeypatch):
    """Under isolation every test's process is a child of PID 1 of a PID namespace that holds nothing else
    (the zygote, made by one clone(CLONE_NEWPID), or through the helper process where clone is not known):
    the checker and the grader are not there to signal, and the zygote cannot be signalled from inside."""
    program = textwrap.dedent(
        """
        import os, signal
        try:
            os.kill(1, signal.SIGKILL)  # refused, or dropped by the kernel: the zygote lives on
        except OSError:
            pass
        print(os.getppid(), os.getpid())
        """
    )
    result = run_tests(
        program,
        [{"input": "", "output": "1 2"}, {"input": "", "output": "1 3"}],
        limits=setup_limits(("auto", method), monkeypatch),
        stop_at_first_failure=False,
    )
    assert result.isolated, result
    # the program's first process is the namespace's second; the second test's comes from the same zygote
    assert [case.status for case in result.results] == ["passed", "passed"], result.results
    # a fresh memory group per test where one is writable, else the fallback's sum over the zygote's processes
    assert result.memory_bound in ("cgroup_v2", "cgroup_v1", "per_program_watchdog"), result
    if method == "exec_without_clone":
        assert not processes_with(sandbox.HARNESS_PATH), "the helper-process harness left processes behind"


def test_a_batch_returns_only_when_every_sandbox_is_gone(tmp_path, monkeypatch):
    """``run_tests_batch`` hands each finished sandbox's wait-until-gone to one closing thread (so that a worker
    starts its next program meanwhile); it returns only after every one ended and its folder was removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = {sandbox._fork_server.process.pid} if sandbox._fork_server is not None else set()
    jobs = [(f"print(int(input()) + {i})", [{"input": "1", "output": str(1 + i)}]) for i in range(6)]
    results = run_tests_batch(jobs, max_workers=2, limits=limits("auto"))
    assert [result.passed for result in results] == [True] * 6, results
    server |= {sandbox._fork_server.process.pid} if sandbox._fork_server is not None else set()
    assert not [pid for pid in processes_with(sandbox.HARNESS_PATH) if pid not in server]
    assert not [path for path in tmp_path.iterdir() if path.name.startswith("hf-meds-cliff-code-")]
