"""The in-sandbox harness: runs one untrusted program against test inputs, one forked process per test.

Started by :mod:`hf_meds_cliff.code.sandbox` as ``python -I -B _harness.py`` (a fresh interpreter per
program, in the program's own temporary folder, with a minimal environment). Standard library only; the
library never imports it. The protocol is one JSON object per line: the caller writes the job, then one
``{"op": "run", ...}`` per test (or ``{"op": "exit"}``), on this process's stdin; the harness answers
``{"event": "ready", ...}`` and one raw result per test on its stdout. The harness never sees expected
outputs: the caller compares (a program cannot read, in here, what it is graded against).

Isolation (``job["isolate"]``; see docs/code_sandbox.md for the threat model):

1. This process (B0, host namespaces) forks B1, which ``unshare``s new user, mount, network, PID, IPC and
   UTS namespaces; B0 writes B1's uid/gid maps (as host root: namespace root = host root, and namespace
   uid 1000 = a fresh unprivileged host uid chosen by the caller, so ``RLIMIT_NPROC`` bounds fork bombs
   per sandbox; otherwise namespace root = the caller's uid).
2. B1 forks B2, the init (PID 1) of the new PID namespace: it makes every mount read-only except the
   program's folder, mounts a fresh ``/proc`` (only the sandbox's processes are visible), and serves the
   tests. Signals a program sends to PID 1 are dropped by the kernel; B2 is not dumpable (no ptrace).
3. Each test runs in a child of B2 that sets the resource limits, drops to the unprivileged uid (or
   drops every capability), closes every descriptor but its own pipes and runs the program. After each
   test B2 kills every other process of the namespace, so nothing outlives a test.

Every level dies with the one above it (``PR_SET_PDEATHSIG``), and B2 stops as soon as its stdin reaches
end of file (the caller is gone); when PID 1 dies the kernel kills the whole namespace.

Without namespaces (``isolate`` false, or ``unshare`` refused) B0 serves the tests itself with the same
limits, as a child subreaper that kills its orphaned descendants after each test.
"""

import builtins
import collections
import contextlib
import ctypes
import errno
import fcntl
import fractions
import io
import json
import linecache
import os
import resource
import select
import signal
import socket
import sys
import time
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 32, 1024, 2048, 4096
MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 16384, 1 << 18, 1 << 21, 1 << 24
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
NAMESPACE_UID = 1000  # the unprivileged uid tests run as inside the namespace (host root only)
STDERR_KEEP_BYTES = 4096

_libc = ctypes.CDLL(None, use_errno=True)  # the C library this interpreter is linked with
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

# Captured before any program runs: a program may rebind os.read/os.write/os._exit, not these references.
_read, _write, _exit, _close, _dup2 = os.read, os.write, os._exit, os.close, os.dup2
_CLEAN_BUILTINS = dict(builtins.__dict__)


def _check(result, what):
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _prctl(option, value=0):
    _check(_libc.prctl(option, value, 0, 0, 0), f"prctl({option})")


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = _write(fd, view)
        view = view[written:]


class Control:
    """Line-delimited JSON over the caller's pipes (moved off fds 0/1, which the tests get)."""

    def __init__(self, in_fd, out_fd):
        self.in_fd, self.out_fd = in_fd, out_fd
        self.buffer = b""
        self.closed = False

    def receive(self):
        while b"\n" not in self.buffer:
            chunk = _read(self.in_fd, 1 << 20)
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, message):
        _write_all(self.out_fd, json.dumps(message).encode() + b"\n")


# ---------------------------------------------------------------- in the test process (untrusted from here)


def _set_limits(limits):
    def cap(kind, value):
        if value is None:
            return
        soft, hard = (value, value) if not isinstance(value, tuple) else value
        resource.setrlimit(kind, (int(soft), int(hard)))

    megabyte = 1024 * 1024
    cap(resource.RLIMIT_AS, limits["memory_mb"] * megabyte if limits.get("memory_mb") else None)
    cpu = limits.get("cpu_time_s")
    if cpu:
        cap(resource.RLIMIT_CPU, (max(1, int(cpu + 0.999)), max(1, int(cpu + 0.999)) + 1))
    cap(resource.RLIMIT_FSIZE, limits["file_size_mb"] * megabyte if limits.get("file_size_mb") else None)
    cap(resource.RLIMIT_NOFILE, limits.get("max_open_files"))
    cap(resource.RLIMIT_CORE, 0)


def _drop_privileges(run_as_uid, nproc_limit, existing_processes):
    if run_as_uid is not None:
        os.setgroups([])
        os.setresgid(run_as_uid, run_as_uid, run_as_uid)
        if nproc_limit:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc_limit, nproc_limit))
        os.setresuid(run_as_uid, run_as_uid, run_as_uid)  # a uid change drops every capability
    else:
        if nproc_limit and existing_processes is not None:
            # RLIMIT_NPROC counts every process of the (host) uid: allow those that existed plus the budget.
            limit = existing_processes + nproc_limit
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
        for capability in range(64):
            if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
                break
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        _libc.capset(header, data)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _frame(fd, tag, payload):
    data = tag + payload
    _write_all(fd, len(data).to_bytes(4, "big") + data)


def _restore_standard_streams():
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace"
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr


def _flush_streams():
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):  # a closed or replaced stream: the output is what it is
            stream.flush()


def _class_snapshot(kind):
    return dict(vars(kind))


# Standard-library classes defined in Python that correct solutions return (MBPP counts with Counter):
# accepted while their class dictionaries are the ones captured before the program ran.
_TRUSTED_PYTHON_CLASSES = {kind: _class_snapshot(kind) for kind in (collections.Counter, fractions.Fraction)}


def _trusted(kind):
    snapshot = _TRUSTED_PYTHON_CLASSES.get(kind)
    if snapshot is None:
        return False
    current = vars(kind)
    return len(current) == len(snapshot) and all(
        current.get(name) is value for name, value in snapshot.items()
    )


def _is_plain(value, depth=0):
    """Built only from types defined in C (whose equality a program cannot redefine), or from trusted,
    unmodified standard-library classes."""
    if depth > 100:
        return False
    kind = type(value)
    if kind.__flags__ & (1 << 9) and not _trusted(kind):  # Py_TPFLAGS_HEAPTYPE: defined in Python, patchable
        return False
    if isinstance(value, collections.Counter):
        return all(_is_plain(key, depth + 1) and _is_plain(item, depth + 1) for key, item in value.items())
    if kind in (list, tuple, set, frozenset):
        return all(_is_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(_is_plain(key, depth + 1) and _is_plain(item, depth + 1) for key, item in value.items())
    return True


def _guard_returns(namespace):
    """Wrap the program's functions so that a return value with program-defined equality fails the test."""

    def guarded(function):
        def call(*args, **kwargs):
            result = function(*args, **kwargs)
            if not _is_plain(result):
                raise TypeError(
                    f"{function.__name__} returned a {type(result).__name__}, whose type is defined in Python; "
                    "assert tests accept only values built from builtin types"
                )
            return result

        call.__name__ = getattr(function, "__name__", "call")
        call.__wrapped_program_function__ = function
        return call

    for name, value in list(namespace.items()):
        code = getattr(value, "__code__", None) if type(value).__name__ == "function" else None
        if code is not None and code.co_filename == "<program>":
            namespace[name] = guarded(value)


def _find_function(namespace, fn_name):
    solution = namespace.get("Solution")
    if isinstance(solution, type) and hasattr(solution, fn_name):
        return getattr(solution(), fn_name)
    function = namespace.get(fn_name)
    if function is None or not callable(function):
        raise NameError(
            f"the program defines no function {fn_name!r} (nor a class Solution with that method)"
        )
    return function


def _show_in_tracebacks(name, source):
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)


def _print_program_traceback(error):
    """The traceback without the harness's own frames (they say nothing about the program)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename != __file__]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    lines += traceback.format_exception_only(type(error), error)
    sys.stderr.write("".join(lines))


def run_test_process(job, case_input, result_fd, nonce_fd):
    """Runs in the forked test process, after limits and privileges are set. Never returns."""
    _restore_standard_streams()
    if (
        "random" in sys.modules
    ):  # preloaded in the fork server: give each test its own seed, as a new process has
        sys.modules["random"].seed()
    status = 0
    try:
        try:
            _show_in_tracebacks("<program>", job["program"])
            code = compile(job["program"], "<program>", "exec")
        except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as error:
            _frame(result_fd, b"C", f"{type(error).__name__}: {error}".encode(errors="replace"))
            _exit(3)
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        kind = job["kind"]
        if kind == "stdin":
            sys.stdin = io.TextIOWrapper(
                io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"
            )
            exec(code, namespace)  # noqa: S102
        elif kind == "functional":
            exec(code, namespace)  # noqa: S102
            function = _find_function(namespace, job["fn_name"])
            result = function(*case_input)
            try:
                text = json.dumps(result)
            except (TypeError, ValueError) as error:
                raise TypeError(f"the result is not JSON-serialisable: {error}") from None
            _flush_streams()
            _frame(result_fd, b"R", text.encode())
        else:  # assert
            exec(code, namespace)  # noqa: S102
            _guard_returns(namespace)
            namespace["__builtins__"] = dict(_CLEAN_BUILTINS)  # what the program did to builtins is undone
            sys.settrace(None)
            sys.setprofile(None)
            _show_in_tracebacks("<test>", case_input)
            if job.get("setup_code"):
                _show_in_tracebacks("<setup>", job["setup_code"])
                exec(compile(job["setup_code"], "<setup>", "exec"), namespace)  # noqa: S102
            exec(compile(case_input, "<test>", "exec"), namespace)  # noqa: S102
            _flush_streams()
            # Every statement ran to the end: only now read the nonce the harness wrote after the fork
            # and hand it back. An exit status alone never counts.
            _frame(result_fd, b"N", _read(nonce_fd, 64))
    except SystemExit as error:
        code_value = error.code
        status = 0 if code_value is None else (code_value if isinstance(code_value, int) else 1)
        if not isinstance(code_value, (int, type(None))):
            with contextlib.suppress(BaseException):
                print(code_value, file=sys.stderr)
    except BaseException as error:  # noqa: BLE001 - the program's own failure: reported, then exit 1
        status = 1
        try:
            _print_program_traceback(error)
        except BaseException:  # noqa: BLE001 - e.g. MemoryError while formatting
            with contextlib.suppress(BaseException):
                _write_all(2, f"{type(error).__name__}\n".encode())
    _flush_streams()
    _exit(status & 0xFF)


# ---------------------------------------------------------------- the server side (B2, or B0 without isolation)


def _kill_others(in_pid_namespace, test_pid, reaped):
    """Kill every process the tests left behind and reap them; ``reaped`` maps pid -> wait status."""
    if in_pid_namespace and os.getpid() == 1:
        for _ in range(100):
            try:
                os.kill(-1, signal.SIGKILL)  # as init of the namespace: everything in it but itself
            except ProcessLookupError:
                pass
            if not _reap(reaped):
                return
        return
    # Without a PID namespace: this process is a child subreaper; its children are the test process and
    # every orphan of it (re-parented here). Kill them until none is left.
    if test_pid is not None:
        try:
            os.killpg(test_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for _ in range(100):
        children = _children()
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not _reap(reaped) and not children:
            return


def _children():
    """This (single-threaded) process's children: the kernel's list, or a scan of /proc without it."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as listing:
            return [int(pid) for pid in listing.read().split()]
    except OSError:
        pass
    me, children = str(os.getpid()), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1].decode() == me:
            children.append(int(name))
    return children


def _processes_of(uid):
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _reap(reaped):
    """Wait for every child; True if any was reaped."""
    any_reaped = False
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return any_reaped
        except InterruptedError:
            continue
        reaped[pid] = status
        any_reaped = True


def _nonblocking(fd):
    os.set_blocking(fd, False)
    return fd


def run_one_test(job, control, message, in_pid_namespace):
    limits = job["limits"]
    kind = job["kind"]
    timeout = float(limits["timeout_s"])
    max_output = int(limits["max_output_bytes"])
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    result_r, result_w = os.pipe()
    nonce_r, nonce_w = os.pipe()
    case_input = message["input"]
    stdin_bytes = case_input.encode() if kind == "stdin" else b""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        # Descriptor numbers the program cannot guess from the layout; everything else is closed.
        result_fd = 3 + int.from_bytes(os.urandom(2), "big") % 400
        nonce_fd = result_fd + 1 + int.from_bytes(os.urandom(2), "big") % 400
        report_fd = result_w
        try:
            os.setpgid(0, 0)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            # Move the pipes above every number in use first, so that no dup2 below closes one of them.
            moved = [
                fcntl.fcntl(fd, fcntl.F_DUPFD, 1024)
                for fd in (stdin_r, stdout_w, stderr_w, result_w, nonce_r)
            ]
            report_fd = moved[3]
            for source, target in zip(moved, (0, 1, 2, result_fd, nonce_fd)):
                _dup2(source, target)
            os.closerange(3, result_fd)
            os.closerange(result_fd + 1, nonce_fd)
            os.closerange(nonce_fd + 1, 65536)
            report_fd = result_fd
            os.chdir(job["workdir"])
            _set_limits(limits)
            _drop_privileges(
                job.get("run_as_uid"), limits.get("max_processes"), job.get("existing_processes")
            )
            run_test_process(job, case_input, result_fd, nonce_fd)
        except BaseException:  # noqa: BLE001 - the harness's own setup failed, before the program ran
            try:
                _frame(report_fd, b"S", traceback.format_exc().encode(errors="replace"))
            finally:
                _exit(125)
        _exit(125)
    for fd in (stdin_r, stdout_w, stderr_w, result_w, nonce_r):
        os.close(fd)
    # Drawn after the fork, so that the test process's memory (its copy of this one) never held it.
    nonce = os.urandom(16).hex().encode()
    _write_all(nonce_w, nonce)
    os.close(nonce_w)
    pidfd = os.pidfd_open(pid)
    buffers = {stdout_r: bytearray(), stderr_r: bytearray(), result_r: bytearray()}
    readers = {_nonblocking(stdout_r), _nonblocking(stderr_r), _nonblocking(result_r)}
    writer = _nonblocking(stdin_w) if stdin_bytes else None
    if writer is None:
        os.close(stdin_w)
    written = 0
    timed_out = output_exceeded = caller_gone = False
    exited = False
    exit_deadline = None
    while True:
        now = time.monotonic()
        remaining = started + timeout - now
        if remaining <= 0:
            timed_out = not exited
            break
        if exited and (not readers or now >= exit_deadline):
            break
        watch = list(readers) + [control.in_fd] + ([] if exited else [pidfd])
        ready_read, ready_write, _ = select.select(
            watch, [writer] if writer is not None else [], [], min(remaining, 0.2 if exited else remaining)
        )
        if control.in_fd in ready_read:
            caller_gone = True  # the caller writes nothing while a test runs: readable means it is gone
            break
        if pidfd in ready_read and not exited:
            exited = True
            exit_deadline = time.monotonic() + 0.2  # drain what is already written, not a daemon's output
        for fd in ready_read:
            if fd not in readers:
                continue
            try:
                chunk = _read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                readers.discard(fd)
                continue
            buffer = buffers[fd]
            if fd == stderr_r:
                buffer += chunk
                if len(buffer) > STDERR_KEEP_BYTES * 4:
                    del buffer[: -STDERR_KEEP_BYTES * 2]  # keep the end: the traceback comes last
            else:
                buffer += chunk
                if len(buffer) > max_output:
                    output_exceeded = True
        if output_exceeded:
            break
        if writer is not None and writer in ready_write:
            try:
                written += _write(writer, stdin_bytes[written : written + (1 << 16)])
            except BrokenPipeError:
                written = len(stdin_bytes)
            except BlockingIOError:
                pass
            if written >= len(stdin_bytes):
                os.close(writer)
                writer = None
    wall = time.monotonic() - started
    reaped = {}
    if not exited:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        _, status, usage = os.wait4(pid, 0)
        reaped[pid] = status
    except ChildProcessError:
        usage = None
    _kill_others(in_pid_namespace, pid, reaped)
    for fd in list(buffers) + [pidfd] + ([writer] if writer is not None else []):
        try:
            os.close(fd)
        except OSError:
            pass
    status = reaped.get(pid, 0)
    frames = _split_frames(bytes(buffers[result_r]))
    answer = {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timed_out": timed_out,
        "output_exceeded": output_exceeded,
        "caller_gone": caller_gone,
        "stdout": bytes(buffers[stdout_r][:max_output]).decode("utf-8", errors="replace"),
        "stderr": bytes(buffers[stderr_r][-STDERR_KEEP_BYTES:]).decode("utf-8", errors="replace"),
        "wall_s": wall,
        "cpu_s": (usage.ru_utime + usage.ru_stime) if usage else None,
        "max_rss_kb": usage.ru_maxrss if usage else None,
        "compile_error": None,
        "setup_error": None,
        "result": None,
        "confirmed": False,
    }
    for tag, payload in frames:
        if tag == b"S":
            answer["setup_error"] = payload.decode("utf-8", errors="replace")
        elif tag == b"C":
            answer["compile_error"] = payload.decode("utf-8", errors="replace")
        elif tag == b"R":
            answer["result"] = payload.decode("utf-8", errors="replace")
        elif tag == b"N":
            answer["confirmed"] = answer["confirmed"] or payload == nonce
    return answer


def _split_frames(data):
    frames = []
    while len(data) >= 5:
        size = int.from_bytes(data[:4], "big")
        if size < 1 or len(data) < 4 + size:
            break
        frames.append((data[4:5], data[5 : 4 + size]))
        data = data[4 + size :]
    return frames


def serve(job, control, in_pid_namespace, isolation):
    control.send({"event": "ready", **isolation})
    while True:
        message = control.receive()
        if message is None or message.get("op") != "run":
            break
        answer = run_one_test(job, control, message, in_pid_namespace)
        if answer["caller_gone"]:
            break
        control.send(answer)


# ---------------------------------------------------------------- namespaces


def _mount(source, target, fstype, flags, data=None):
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


_KEPT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}


def _interpreter_paths():
    """The directories the interpreter reads modules from."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(path for path in sys.path if path and os.path.isdir(path))
    paths = sorted(os.path.realpath(path) for path in paths)
    # keep only the outermost of nested paths
    return [
        path for path in paths if not any(path != other and path.startswith(other + "/") for other in paths)
    ]


def _private_ancestor(path):
    """The outermost ancestor of ``path`` that other users cannot enter (e.g. a 0700 /root), or None."""
    current = "/"
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        try:
            if not os.stat(current).st_mode & 0o001:
                return current
        except OSError:
            return None
    return None


def _hide_homes(workdir, extra_homes):
    """Hide home directories under empty tmpfs mounts, with the interpreter's own directories bound back
    at their paths: the program can import the standard library and site-packages but sees nothing else
    of the home (tokens, caches, keys). Hidden: every private (0700-like) ancestor of an interpreter
    directory, which an unprivileged uid could not enter anyway (pyenv under /root), and the caller's
    home (``extra_homes``), whose files a program running as the caller's own uid could read.
    A home holding the program's folder stays visible."""
    interpreter = _interpreter_paths()
    homes = {home for home in (_private_ancestor(path) for path in interpreter) if home is not None}
    homes.update(os.path.realpath(home) for home in extra_homes if home and os.path.isdir(home))
    homes = {home for home in homes if home != "/" and not (workdir + "/").startswith(home + "/")}
    homes = sorted(home for home in homes if not any(home.startswith(other + "/") for other in homes))
    for number, home in enumerate(homes):
        inside = [path for path in interpreter if path.startswith(home + "/")]
        stages = []
        for index, path in enumerate(inside):
            stage = os.path.join(workdir, f".interpreter-{number}-{index}")
            os.mkdir(stage)
            _mount(path, stage, None, MS_BIND | MS_REC)
            stages.append(stage)
        _mount("tmpfs", home, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=1m")
        for path, stage in zip(inside, stages):
            os.makedirs(path, mode=0o755, exist_ok=True)
            _mount(stage, path, None, MS_BIND | MS_REC)
            _check(_libc.umount2(stage.encode(), MNT_DETACH), f"umount {stage}")
            os.rmdir(stage)
    return homes


def _confine_filesystem(workdir, owner, size_mb, homes):
    """Every mount read-only but the program's folder, which becomes a tmpfs of ``size_mb`` owned by
    ``owner`` (no disk is filled, nothing is left behind: it vanishes with the namespace); private homes
    hidden (see :func:`_hide_homes`); a fresh /proc (or none, where a fresh one is refused). Returns the
    hidden homes, the mounts that could not be made read-only and what /proc shows."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    options = f"size={int(size_mb)}m,nr_inodes=4096,mode=700,uid={owner},gid={owner}"
    _mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, options)
    hidden = _hide_homes(workdir, homes)
    failures = []
    with open("/proc/self/mountinfo") as mountinfo:
        mounts = [line.split() for line in mountinfo]
    for fields in mounts:
        target = fields[4].encode().decode("unicode_escape")
        if target == workdir:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in fields[5].split(","):
            flags |= _KEPT_FLAGS.get(option, 0)
        try:
            _mount(None, target, None, flags)
        except OSError as error:
            failures.append(f"{target}: {error.strerror}")
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        proc = "fresh"
    except OSError:
        # Refused where the host's /proc has masked paths (Docker): hide it instead of showing the host's.
        _mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=555")
        proc = "hidden"
    return hidden, failures, proc


def _write_map(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def isolate_and_serve(job, control):
    """B0: fork B1 into new namespaces, map its ids, wait. Returns False if namespaces are refused."""
    ready_r, ready_w = os.pipe()  # B1 -> B0: unshare done (b"1") or refused (b"0" + reason)
    go_r, go_w = os.pipe()  # B0 -> B1: maps written
    setup_r, setup_w = os.pipe()  # B2 -> B0: confined and serving (b"1") or failed (b"0" + reason)
    pid = os.fork()
    if pid == 0:  # B1
        os.close(ready_r)
        os.close(go_w)
        os.close(setup_r)
        flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
        if _libc.unshare(flags) != 0:
            reason = os.strerror(ctypes.get_errno())
            _write_all(ready_w, b"0" + reason.encode())
            _exit(0)
        _write_all(ready_w, b"1")
        os.close(ready_w)
        if _read(go_r, 1) != b"1":
            _exit(1)
        try:
            os.setresgid(0, 0, 0)
            os.setresuid(0, 0, 0)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # set after the credential change, which clears it
            init = os.fork()
            if init == 0:  # B2: PID 1 of the new namespace
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                _prctl(PR_SET_DUMPABLE, 0)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                job["run_as_uid"] = NAMESPACE_UID if job.get("sandbox_uid") is not None else None
                owner = job["run_as_uid"] or 0
                try:
                    hidden, failures, proc = _confine_filesystem(
                        job["workdir"], owner, job["limits"]["workdir_size_mb"], job.get("hidden_homes", [])
                    )
                    socket.sethostname("sandbox")
                except BaseException as error:  # noqa: BLE001 - reported to B0, which serves without isolation
                    _write_all(setup_w, b"0" + f"{type(error).__name__}: {error}".encode(errors="replace"))
                    _exit(1)
                _write_all(setup_w, b"1")
                os.close(setup_w)
                isolation = {
                    "isolated": True,
                    "reason": None,
                    "hidden_homes": hidden,
                    "readonly_failures": failures,
                    "proc": proc,
                    "network_reachable": _network_reachable(),
                }
                serve(job, control, True, isolation)
                _exit(0)
            os.close(setup_w)
            _, status = os.waitpid(init, 0)
            _exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            _exit(1)
    os.close(ready_w)
    os.close(go_r)
    answer = b""
    while True:
        chunk = _read(ready_r, 4096)
        if not chunk:
            break
        answer += chunk
        if answer[:1] == b"1":
            break
    if answer[:1] != b"1":
        os.waitpid(pid, 0)
        os.close(setup_r)
        os.close(setup_w)
        return answer[1:].decode(errors="replace") or "unshare failed"
    try:
        sandbox_uid = job.get("sandbox_uid")
        uid, gid = os.geteuid(), os.getegid()
        if sandbox_uid is not None:
            _write_map(f"/proc/{pid}/uid_map", f"0 {uid} 1\n{NAMESPACE_UID} {sandbox_uid} 1\n")
            _write_map(f"/proc/{pid}/gid_map", f"0 {gid} 1\n{NAMESPACE_UID} {sandbox_uid} 1\n")
        else:
            _write_map(f"/proc/{pid}/uid_map", f"0 {uid} 1\n")
            _write_map(f"/proc/{pid}/setgroups", "deny")
            _write_map(f"/proc/{pid}/gid_map", f"0 {gid} 1\n")
    except OSError as error:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(setup_r)
        os.close(setup_w)
        return f"writing the uid/gid maps failed: {error}"
    _write_all(go_w, b"1")
    os.close(go_w)
    os.close(setup_w)
    status = b""
    while len(status) < 1 or status[:1] == b"0":
        chunk = _read(setup_r, 4096)
        if not chunk:
            break
        status += chunk
    os.close(setup_r)
    if status[:1] != b"1":
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return "setting up the namespaces failed: " + (
            status[1:].decode(errors="replace") or "the sandbox init died"
        )
    control.closed = True  # B2 owns the conversation from here
    _, status = os.waitpid(pid, 0)
    _exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _network_reachable():
    """Whether the sandbox can reach even its own loopback (a fresh network namespace cannot: lo is down)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("127.0.0.1", 9))
        return True
    except OSError:
        return False
    finally:
        probe.close()


# Imported once per program, before any test forks: the tests start faster, and these stay importable where
# the interpreter's files are private to another user and cannot be re-exposed (limits-only mode as root).
PRELOADED_MODULES = [
    "array",
    "bisect",
    "collections",
    "copy",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "itertools",
    "math",
    "operator",
    "queue",
    "random",
    "re",
    "string",
    "struct",
    "typing",
]


def _preload():
    for name in PRELOADED_MODULES:
        with contextlib.suppress(ImportError):
            __import__(name)


def main():
    """B0: serve one program's job, read from fd 0, answering on fd 1."""
    control = Control(os.dup(0), os.dup(1))
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _preload()
    job = control.receive()
    if job is None:
        return
    sys.path.extend(path for path in job.get("site_packages", []) if path not in sys.path)
    if os.getuid() != 0:  # counted here, in the host's PID namespace, where the kernel counts them
        job["existing_processes"] = _processes_of(os.getuid())
    os.environ["HOME"] = os.environ["TMPDIR"] = job["workdir"]
    reason = "isolation disabled by the caller"
    if job.get("isolate"):
        reason = isolate_and_serve(job, control)  # returns only if the namespaces were refused
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if job.get("sandbox_uid") is not None and os.geteuid() == 0:
        job["run_as_uid"] = job["sandbox_uid"]
    else:
        job["run_as_uid"] = None
    serve(
        job,
        control,
        False,
        {"isolated": False, "reason": reason, "readonly_failures": [], "network_reachable": None},
    )


def fork_server(request_fd):
    """A pristine template process: it never runs a program, it only forks B0 processes on request.

    The caller sends ``b"fork"`` with three descriptors (the job pipe, the answer pipe, stderr) over the
    Unix socket ``request_fd``; the template forks a child that becomes the session leader B0 on those
    descriptors and answers its pid. Each child starts from this process's untouched interpreter state
    (as with multiprocessing's forkserver), so it shares nothing with any other program, without paying
    for a new interpreter. The template exits when its stdin (held by the caller) reaches end of file.
    """
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the B0 processes
    requests = socket.socket(fileno=request_fd)
    while True:
        ready, _, _ = select.select([0, requests], [], [])
        if 0 in ready and not _read(0, 1):
            _exit(0)  # the caller is gone
        if requests not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(requests, 16, 3)
        except OSError:
            _exit(0)
        if not message:
            _exit(0)
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            requests.send(b"-1")
            continue
        pid = os.fork()
        if pid == 0:
            try:
                requests.detach()  # its descriptor is closed below; the object must not close a reused number
                os.setsid()
                for source, target in zip(fds, (0, 1, 2)):
                    os.dup2(source, target)
                os.closerange(3, 65536)
                main()
            finally:
                _exit(0)
        for fd in fds:
            os.close(fd)
        requests.send(str(pid).encode())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fork-server":
        fork_server(int(sys.argv[2]))
    else:
        main()
