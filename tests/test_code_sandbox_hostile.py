"""Hostile programs against the sandbox. Each is bounded (small memory caps, short timeouts, self-limiting
bombs, a pytest timeout) so that a weak sandbox fails the test without harming the machine."""

import ast
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from hf_meds_cliff.code import SandboxLimits, run_tests
from hf_meds_cliff.code.sandbox import HARNESS_PATH

pytestmark = pytest.mark.timeout(120)
SMALL = SandboxLimits(timeout_s=3, memory_mb=256, max_output_bytes=1 << 20, max_processes=16)
MODES = ["auto", "none"]  # namespaces (where the OS allows), and the limits-only fallback


def limits(isolation, **changes):
    return SandboxLimits(**{**SMALL.__dict__, "isolation": isolation, **changes})


def isolation_available():
    return run_tests("print(1)", [{"input": "", "output": "1"}], limits=limits("auto")).isolated


needs_isolation = pytest.mark.skipif(not isolation_available(), reason="this OS refuses user namespaces")


def processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


@pytest.fixture(autouse=True)
def no_harness_left_behind():
    yield
    # the fork server (a template that never runs programs) lives as long as this process, by design; its
    # forks (the harnesses) share its command line, so it is told apart by its pid
    from hf_meds_cliff.code import sandbox

    server = {sandbox._fork_server.process.pid} if sandbox._fork_server is not None else set()
    left = [
        pid for pid in descendants(os.getpid()) if pid in processes_with(HARNESS_PATH) and pid not in server
    ]
    assert not left, f"harness processes outlived their run: {left}"


def only_output(result):
    assert len(result.results) == 1, result.results
    return result.results[0]


@pytest.mark.parametrize("isolation", MODES)
def test_no_secret_in_the_environment_or_in_other_processes(isolation, monkeypatch):
    secret = f"fake-secret-{uuid.uuid4().hex}"
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "MY_SECRET", "HF_HOME", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, secret)
    program = textwrap.dedent(
        f"""
        import os
        leaks = [key for key, value in os.environ.items() if {secret!r} in value or key.startswith("HF_")]
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{{pid}}/environ", "rb") as environ:
                    if {secret!r}.encode() in environ.read():
                        leaks.append(pid)
            except OSError:
                pass
        print("leaks:", leaks)
        """
    )
    result = run_tests(program, [{"input": "", "output": "leaks: []"}], limits=limits(isolation))
    assert only_output(result).status == "passed", result.results[0]


@needs_isolation
def test_no_network_even_to_loopback():
    received = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                continue
            with connection:
                received.append(connection.recv(100))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    program = textwrap.dedent(
        f"""
        import socket
        try:
            with socket.create_connection(("127.0.0.1", {port}), timeout=2) as connection:
                connection.sendall(b"escaped")
            print("connected")
        except OSError as error:
            print("blocked")
        """
    )
    try:
        result = run_tests(program, [{"input": "", "output": "blocked"}], limits=limits("auto"))
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
    assert only_output(result).status == "passed", result.results[0]
    assert received == []


@needs_isolation
def test_writes_are_confined_to_the_program_folder(tmp_path):
    """Under isolation the program's /tmp and /dev/shm are folders of its test's own fresh tmpfs: writing there
    reaches nothing of the host, and the host's world-writable folders are not in its root at all."""
    open_door = tmp_path / "world-writable"
    open_door.mkdir()
    open_door.chmod(0o777)
    outside = [
        open_door / "escape.txt",
        Path("/tmp") / f"hf-meds-cliff-escape-{uuid.uuid4().hex}",
        Path("/dev/shm/escape"),
    ]
    program = textwrap.dedent(
        f"""
        escaped = []
        for path in {[str(path) for path in outside]!r}:
            try:
                with open(path, "w") as handle:
                    handle.write("x")
                escaped.append(path)
            except OSError:
                pass
        with open("inside.txt", "w") as handle:  # the program's own folder stays writable
            handle.write("fine")
        print(open("inside.txt").read(), escaped[:1] if escaped[:1] == [{str(open_door / "escape.txt")!r}] else [])
        """
    )
    # its own /tmp and /dev/shm are writable (the second and third paths), the host's folder is not there
    result = run_tests(program, [{"input": "", "output": "fine []"}], limits=limits("auto"))
    for path in outside:
        assert not path.exists(), path
    assert only_output(result).status == "passed", result.results[0]


@pytest.mark.parametrize("isolation", MODES)
@pytest.mark.parametrize("kill_everything", [False, True])
def test_cannot_kill_the_caller_or_the_harness(isolation, kill_everything):
    canary = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    program = textwrap.dedent(
        f"""
        import os, signal
        harness, harness_group = os.getppid(), os.getpgid(os.getppid())
        if os.fork() == 0:  # the attacker, in a session of its own so that it does not just kill itself
            os.setsid()
            for target in (harness, 1, {os.getpid()}, {canary.pid}):
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.kill(target, sig)
                    except OSError:
                        pass
            for group in (harness_group, {os.getpgid(os.getpid())}):
                try:
                    if group > 0:
                        os.killpg(group, signal.SIGKILL)
                except OSError:
                    pass
            if os.getuid() != 0 and {kill_everything}:  # never from root: a weak sandbox would kill the machine
                try:
                    os.kill(-1, signal.SIGKILL)  # everything it may signal (this program too)
                except OSError:
                    pass
            os._exit(0)
        os.wait()
        print("done")
        """
    )
    try:
        result = run_tests(
            program,
            [{"input": "", "output": "done"}] * 3,
            limits=limits(isolation),
            stop_at_first_failure=False,
        )
        assert canary.poll() is None, "the program killed a process of the caller"
    finally:
        canary.kill()
        canary.wait()
    # the harness survived every attempt: all three tests ran (kill(-1) also kills the program itself)
    expected = "runtime_error" if kill_everything else "passed"
    assert [case.status for case in result.results] == [expected] * 3, result.results


@pytest.mark.parametrize("isolation", MODES)
def test_fork_bomb_is_bounded_by_the_process_limit(isolation):
    program = textwrap.dedent(
        """
        import os, time
        started = 0
        for _ in range(200):  # self-limiting, so that a sandbox without a limit is harmless
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            started += 1
        print(started)
        """
    )
    result = run_tests(program, [{"input": "", "output": "0"}], limits=limits(isolation, max_processes=16))
    case = only_output(result)
    assert case.actual is not None and int(case.actual) < 16, case


@pytest.mark.parametrize("isolation", MODES)
def test_memory_bombs(isolation):
    tests = [{"input": "", "output": "0"}]
    at_once = run_tests("x = bytearray(1 << 31)\n", tests, limits=limits(isolation))
    assert only_output(at_once).status == "memory_limit"
    growing = "x = []\nfor _ in range(2048):\n    x.append(bytearray(1 << 20))\n"
    assert only_output(run_tests(growing, tests, limits=limits(isolation))).status == "memory_limit"


@pytest.mark.parametrize("isolation", MODES)
def test_time_bombs(isolation):
    tests = [{"input": "", "output": "0"}]
    fast = limits(isolation, timeout_s=1)
    for program in (
        "while True:\n    pass\n",
        "import time\ntime.sleep(1000)\n",
        "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n",
        "import os, time\nif os.fork() == 0:\n    time.sleep(1000)\nos.wait()\n",
    ):
        case = only_output(run_tests(program, tests, limits=fast))
        assert case.status == "time_limit", (program, case)


@pytest.mark.parametrize("isolation", MODES)
def test_output_bombs(isolation):
    tests = [{"input": "", "output": "0"}]
    bounded = limits(isolation, timeout_s=2, max_output_bytes=1 << 16)
    stdout = only_output(run_tests("while True:\n    print('x' * 4096)\n", tests, limits=bounded))
    assert stdout.status == "runtime_error" and "output exceeded" in stdout.error
    assert len(stdout.actual) < 4096  # the shown output is truncated, not the flood
    stderr = only_output(
        run_tests("import sys\nwhile True:\n    sys.stderr.write('x' * 4096)\n", tests, limits=bounded)
    )
    assert stderr.status == "time_limit" and len(stderr.error or "") < 5000
    big_file = only_output(
        run_tests(
            "open('big', 'wb').write(b'x' * (64 << 20))\nprint(0)\n",
            tests,
            limits=limits(isolation, file_size_mb=1),
        )
    )
    assert big_file.status == "runtime_error"


@needs_isolation
def test_the_program_folder_is_a_bounded_tmpfs():
    program = textwrap.dedent(
        """
        written = 0
        for index in range(20):  # at most 160 MiB even where nothing bounds the folder
            try:
                with open(f"part{index}", "wb") as handle:
                    handle.write(b"x" * (8 << 20))
                written += 8
            except OSError:
                break
        print(written)
        """
    )
    result = run_tests(
        program, [{"input": "", "output": "0"}], limits=limits("auto", workdir_size_mb=16, file_size_mb=8)
    )
    case = only_output(result)
    assert case.actual is not None and int(case.actual) <= 16, case


DAEMON = """
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{head}" + "{tail}"])  # no source line holds the marker
    os._exit(0)
os.wait()
print("0")
"""


@pytest.mark.parametrize("isolation", MODES)
def test_daemonised_grandchild_is_gone_afterwards(isolation):
    marker = f"{1000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9}"
    result = run_tests(
        DAEMON.format(head=marker[:3], tail=marker[3:]),
        [{"input": "", "output": "0"}] * 2,
        limits=limits(isolation),
    )
    assert [case.status for case in result.results] == ["passed", "passed"]
    assert processes_with(marker) == []


@pytest.mark.parametrize("isolation", MODES)
def test_everything_dies_with_the_caller(isolation, tmp_path):
    """A caller killed mid-run leaves neither its harness nor the program's daemon behind."""
    marker = f"{1000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9}"
    program = DAEMON.format(head=marker[:3], tail=marker[3:]).replace(
        'print("0")', "import time\ntime.sleep(100)"
    )
    # the daemon names the program's folder in its command line: sh -c "sleep <marker>; : <folder>"
    program = program.replace(
        'os.execv("/bin/sleep", ["sleep", ',
        'os.execv("/bin/sh", ["sh", "-c", "sleep " + ',
    ).replace("])  # no source line holds the marker", ' + "; : " + os.getcwd()])')
    caller_code = textwrap.dedent(
        f"""
        from hf_meds_cliff.code import SandboxLimits, run_tests
        run_tests({program!r}, [{{"input": "", "output": "0"}}],
                  limits=SandboxLimits(timeout_s=100, isolation={isolation!r}))
        """
    )
    # the caller's temporary folder: where the program's host folder is made (under isolation the program only
    # sees its own new root, so its command line names /box, not the host folder)
    environment = {
        **os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "TMPDIR": str(tmp_path)
    }
    caller = subprocess.Popen([sys.executable, "-c", caller_code], env=environment)
    try:
        deadline = time.monotonic() + 60
        while not processes_with(marker) and time.monotonic() < deadline and caller.poll() is None:
            time.sleep(0.1)
        assert processes_with(marker), "the program never started"
        folders = {_folder_named_by(pid) for pid in processes_with(marker)} - {None}
        assert len(folders) == 1, folders
        if isolation == "none":
            assert os.path.isdir(next(iter(folders))), folders
        program_folders = [path for path in tmp_path.iterdir() if path.name.startswith("hf-meds-cliff-code-")]
        assert len(program_folders) == 1, program_folders
        harnesses = [pid for pid in descendants(caller.pid) if pid in processes_with(HARNESS_PATH)]
        assert harnesses
    finally:
        caller.send_signal(signal.SIGKILL)
        caller.wait()
    deadline = time.monotonic() + 20
    while (processes_with(marker) or _alive(harnesses)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == [] and not _alive(harnesses)
    while os.path.exists(program_folders[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(program_folders[0]), "the program's folder was left behind"


def _folder_named_by(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            arguments = cmdline.read().split(b"\0")
    except OSError:
        return None
    if len(arguments) >= 3 and b"; : " in arguments[2]:
        return arguments[2].split(b"; : ", 1)[1].decode()
    return None


def _alive(pids):
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if HARNESS_PATH.encode() in cmdline.read():
                    alive.append(pid)
        except OSError:
            pass
    return alive


@pytest.mark.parametrize("isolation", MODES)
def test_programs_share_nothing(isolation):
    """A file or module state one program leaves is not seen by the next program, nor by the next test."""
    writer = (
        "import builtins\nbuiltins.MARK = 1\nopen('/tmp/x', 'a')\nopen('note', 'w').write('x')\nprint(0)\n"
    )
    reader = "import builtins, os\nprint(int(hasattr(builtins, 'MARK')) + int(os.path.exists('note')))\n"
    run_tests(writer, [{"input": "", "output": "0"}], limits=limits(isolation))
    assert run_tests(reader, [{"input": "", "output": "0"}], limits=limits(isolation)).passed
    same_program = "import builtins\nprint(int(hasattr(builtins, 'MARK')))\nbuiltins.MARK = 1\n"
    two_tests = run_tests(same_program, [{"input": "", "output": "0"}] * 2, limits=limits(isolation))
    assert two_tests.passed


@needs_isolation
@pytest.mark.parametrize("fresh_uid", [True, False])
def test_no_capabilities_no_home(fresh_uid, monkeypatch):
    """Tests run without capabilities, as a fresh uid (a root caller) or as the caller's own uid mapped
    to namespace root (any other caller, simulated here); the caller's home is hidden either way."""
    from hf_meds_cliff.code import sandbox

    if not fresh_uid:
        monkeypatch.setattr(sandbox, "_fresh_sandbox_uid", lambda: None)
    home = Path.home()
    program = textwrap.dedent(
        f"""
        import os, socket
        capabilities = [line.split()[1] for line in open("/proc/self/status") if line.startswith(("CapEff", "CapPrm"))]
        try:
            socket.sethostname("owned")
            owned = "hostname changed"
        except OSError:
            owned = "no"
        print(capabilities, owned, sorted(os.listdir({str(home)!r})) if os.path.isdir({str(home)!r}) else [])
        """
    )
    result = run_tests(program, [{"input": "", "output": "x"}], limits=limits("auto"))
    actual = only_output(result).actual
    assert actual, result.results[0]
    assert actual.startswith("['0000000000000000', '0000000000000000'] no"), actual
    listed = ast.literal_eval(actual.split(" no ", 1)[1])  # the list the program printed
    assert set(listed) <= {".pyenv"}, listed  # at most the interpreter's own directory, bound back


GRADER_REACH = textwrap.dedent(
    """
        import os, time
        time.sleep(0.3)
        nonces, targets = [], []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                path = f"/proc/{pid}/fd/{fd}"
                try:
                    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                    data = os.read(reader, 64)
                    os.close(reader)
                    if len(data) == 32:
                        nonces.append(data)
                except OSError:
                    pass
                targets.append(path)
        for path in targets:
            for nonce in nonces:
                try:
                    writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                    os.write(writer, (len(nonce) + 1).to_bytes(4, "big") + b"N" + nonce)
                    os.close(writer)
                except OSError:
                    pass
        os._exit(0)
        """
)


@pytest.mark.parametrize("isolation", MODES)
def test_the_grader_process_is_out_of_reach_through_proc(isolation):
    """Assert tests run in a grader process that is not dumpable: the program's process (same uid) cannot
    open its descriptors (nor the harness's) through /proc to steal the nonce or write a confirmation."""
    human_eval = {"test": "def check(candidate):\n    assert candidate(2) == 4\n", "entry_point": "square"}
    mbpp = {"test_list": ["assert square(2) == 4"]}
    for tests in (human_eval, mbpp):
        result = run_tests(GRADER_REACH + "def square(x):\n    return -1\n", tests, limits=limits(isolation))
        assert not result.passed and result.results[0].status in ("wrong_answer", "runtime_error"), (
            result.results
        )
