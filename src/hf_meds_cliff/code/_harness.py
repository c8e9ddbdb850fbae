"""The in-sandbox harness: runs one untrusted program against test inputs, one forked process per test.

Started by :mod:`hf_meds_cliff.code.sandbox` as ``python -I -B _harness.py`` (a fresh interpreter per
program, in the program's own temporary folder, with a minimal environment). Standard library only; the
library never imports it. The protocol is one JSON object per line: the caller writes the job, then one
``{"op": "run", ...}`` per test (or ``{"op": "exit"}``), on this process's stdin; the harness answers
``{"event": "ready", ...}`` and one raw result per test on its stdout. The harness never sees expected
outputs: the caller compares (a program cannot read, in here, what it is graded against). Values that cross
a process boundary (functional results, the calls of assert tests) use the tagged encoding of ``_wire.py``.

Isolation (``job["isolate"]``; see docs/code_sandbox.md for the threat model):

1. This process (B0, host namespaces) forks B1, which ``unshare``s new user, mount, network, PID, IPC and
   UTS namespaces; B0 writes B1's uid/gid maps (as host root: namespace root = host root, and namespace
   uid 1000 = a fresh unprivileged host uid chosen by the caller, so ``RLIMIT_NPROC`` bounds fork bombs
   per sandbox; otherwise namespace root = the caller's uid).
2. B1 forks B2, the init (PID 1) of the new PID namespace: it makes every mount read-only except the
   program's folder, mounts a fresh ``/proc`` (only the sandbox's processes are visible), and serves the
   tests. Signals a program sends to PID 1 are dropped by the kernel; B2 is not dumpable (no ptrace).
3. Each test runs in a child of B2 that sets the resource limits, drops to the unprivileged uid (or
   drops every capability), joins a new, empty session keyring, closes every descriptor but its own pipes
   and runs the program. An assert test runs in two children: the program's process, which only answers
   calls, and a non-dumpable grader's process that runs the test code with proxies for the program's
   functions and alone holds the nonce that confirms the run (see ``run_assert_grader``). After each test
   B2 kills every other process of the namespace, so nothing outlives a test.

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
import gc
import importlib
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

_libc.syscall.restype = ctypes.c_long
# keyctl(2)'s system call number per machine (an unknown machine fails closed: see _join_new_session_keyring)
SYS_KEYCTL = {
    "x86_64": 250,
    "i686": 288,
    "aarch64": 219,
    "riscv64": 219,
    "armv7l": 311,
    "ppc64le": 271,
    "s390x": 280,
}
KEYCTL_JOIN_SESSION_KEYRING = 1

# Captured before any program runs: a program may rebind os.read/os.write/os._exit, not these references.
_read, _write, _exit, _close, _dup2 = os.read, os.write, os._exit, os.close, os.dup2
_CLEAN_BUILTINS = dict(builtins.__dict__)


def _load_wire():
    """``_wire.py`` (the tagged encoding of values), loaded by path: the harness runs as a script, without
    the package on its path."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_wire.py")
    spec = importlib.util.spec_from_file_location("hf_meds_cliff_sandbox_wire", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_wire = _load_wire()


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


def _join_new_session_keyring():
    """Join a new, empty session keyring (``keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)``): the test process
    no longer possesses the caller's session keyring, so keys in it cannot be read (``EACCES``), by id or by
    name. Where keyrings are unavailable to this process (no ``keyctl`` in the kernel, or a seccomp filter
    such as Docker's that refuses it), the program cannot reach them either, and nothing is to be done."""
    number = SYS_KEYCTL.get(os.uname().machine)
    if number is None:
        raise OSError(f"no keyctl system call number known for {os.uname().machine}")
    join = KEYCTL_JOIN_SESSION_KEYRING
    result = _libc.syscall(ctypes.c_long(number), ctypes.c_long(join), ctypes.c_void_p(None))
    if result < 0 and ctypes.get_errno() == errno.EDQUOT:
        # The uid's key quota is spent (a caller that is not root, many tests a second, the kernel collecting
        # ended tests' keyrings late): join the sandbox's own named keyring instead, still not the caller's.
        result = _libc.syscall(
            ctypes.c_long(number), ctypes.c_long(join), ctypes.c_char_p(b"hf-meds-cliff-sandbox")
        )
    if result < 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EPERM):
            return
        raise OSError(code, f"joining a new session keyring: {os.strerror(code)}")


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


def _find_function(namespace, fn_name, given):
    """``Solution().fn_name`` or ``fn_name``, as bound by the program: a name the prelude bound (``given``:
    ``gcd``, ``add``, ...) and the program left alone does not count, or an empty program would pass."""
    solution = namespace.get("Solution")
    if isinstance(solution, type) and solution is not given.get("Solution") and hasattr(solution, fn_name):
        return getattr(solution(), fn_name)
    function = namespace.get(fn_name)
    if function is None or function is given.get(fn_name) or not callable(function):
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


_MemoryError = MemoryError  # captured: a program may rebind builtins.MemoryError


def _reseed():
    # `random` is preloaded in the fork server: give each test its own seed, as a new process has
    if "random" in sys.modules:
        sys.modules["random"].seed()


def _run_and_exit(body, result_fd):
    """Run ``body()`` and exit: with the status a ``SystemExit`` asks for, 0 when it returns, 1 when it raises
    (the traceback goes to stderr, and an ``X`` frame says whether the error was a ``MemoryError``)."""
    status = 0
    try:
        body()
    except SystemExit as error:
        code_value = error.code
        status = 0 if code_value is None else (code_value if isinstance(code_value, int) else 1)
        if not isinstance(code_value, (int, type(None))):
            with contextlib.suppress(BaseException):
                print(code_value, file=sys.stderr)
    except BaseException as error:  # noqa: BLE001 - the program's own failure: reported, then exit 1
        status = 1
        with contextlib.suppress(BaseException):
            _frame(result_fd, b"X", b"MemoryError" if isinstance(error, _MemoryError) else b"other")
        try:
            _print_program_traceback(error)
        except BaseException:  # noqa: BLE001 - e.g. MemoryError while formatting
            with contextlib.suppress(BaseException):
                _write_all(2, f"{type(error).__name__}\n".encode())
    _flush_streams()
    _exit(status & 0xFF)


def _compile_program(job, result_fd):
    try:
        _show_in_tracebacks("<program>", job["program"])
        return compile(job["program"], "<program>", "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as error:
        _frame(result_fd, b"C", f"{type(error).__name__}: {error}".encode(errors="replace"))
        _exit(3)


def run_test_process(job, case_input, result_fd, max_result_bytes):
    """A stdin or functional test, in the forked test process (limits and privileges set). Never returns.
    A functional result leaves as a tagged encoding (``_wire``): plain data, compared in the caller."""
    _restore_standard_streams()
    _reseed()
    code = _compile_program(job, result_fd)

    def body():
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        if job.get("prelude"):
            _show_in_tracebacks("<prelude>", job["prelude"])
            exec(compile(job["prelude"], "<prelude>", "exec"), namespace)  # noqa: S102
        given = dict(namespace)
        exec(code, namespace)  # noqa: S102
        if job["kind"] == "functional":
            function = _find_function(namespace, job["fn_name"], given)
            result = function(*case_input)
            try:
                text = _wire.encode(result, max_result_bytes)
            except (TypeError, ValueError) as error:
                raise TypeError(f"the result cannot be sent for comparison: {error}") from None
            _flush_streams()
            _frame(result_fd, b"R", text.encode())

    _run_and_exit(body, result_fd)


# ------------------------------------------------ assert tests: the program and the grader, two processes
#
# The program's process (P) runs the program (and the dataset's setup code), then only answers calls: a
# function name and arguments in, a result out, both as plain data (``_wire``). The grader's process (G)
# runs the dataset's test code, in which every function the program defined is a proxy that calls P. G alone
# holds the nonce pipe and the confirmation descriptor; P never sees the test code or an expected value, and
# nothing P does (patching modules, ``exec``, the harness's own globals, exiting, writing frames) reaches G.


class ProgramError(Exception):
    """An exception the program raised that is not a builtin exception (rebuilt in the grader by name)."""


_MUTABLE_ARGUMENTS = (list, dict, set, bytearray, collections.deque)
_NOT_REBUILT = ("SystemExit", "KeyboardInterrupt", "GeneratorExit")


def _send_frame(fd, data):
    _write_all(fd, len(data).to_bytes(4, "big") + data)


def _read_exact(fd, size):
    chunks, missing = [], size
    while missing:
        chunk = _read(fd, min(missing, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _receive_frame(fd, max_bytes):
    header = _read_exact(fd, 4)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > max_bytes + 1024:
        raise _wire.WireError(f"a message of {size} bytes, over the limit of {max_bytes}")
    return _read_exact(fd, size)


def _manifest(namespace):
    """What the grader binds before the test code runs: a proxy per callable, its own copy of each standard
    module the program imported, and the program's other plain values (constants a prompt defines)."""
    functions, modules, values = [], {}, {}
    stdlib = getattr(sys, "stdlib_module_names", ())
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if type(value) is type(sys):
            module_name = getattr(value, "__name__", None)
            if isinstance(module_name, str) and module_name.split(".")[0] in stdlib:
                modules[name] = module_name
        elif callable(value):
            functions.append(name)
        else:
            with contextlib.suppress(Exception, _wire._TooDeep):
                values[name] = _wire._to_tree(value, 0)
    return json.dumps({"functions": functions, "modules": modules, "values": values}).encode()


def _error_reply(error, max_bytes):
    with contextlib.suppress(BaseException):
        _print_program_traceback(error)
    kind = type(error)
    name = kind.__name__ if kind.__module__ == "builtins" and kind.__name__ not in _NOT_REBUILT else None
    try:
        return _wire.encode(["error", name, list(error.args)], max_bytes)
    except BaseException:  # noqa: BLE001 - arguments that are no plain data
        return _wire.encode(["error", name, [f"{kind.__name__}: {str(error)[:1000]}"]])


def _serve_calls(namespace, calls_in, calls_out, max_bytes):
    """P: send the manifest, then answer calls until the grader closes its end."""
    functions = {
        name: value for name, value in namespace.items() if not name.startswith("__") and callable(value)
    }
    _send_frame(calls_out, _manifest(namespace))
    while True:
        request = _receive_frame(calls_in, max_bytes)
        if request is None:
            return
        name, arguments, keywords = _wire.decode(request.decode())
        try:
            result = functions[name](*arguments, **keywords)
            after = [value if type(value) in _MUTABLE_ARGUMENTS else None for value in arguments]
            reply = _wire.encode(["ok", result, after], max_bytes)
        except BaseException as error:  # noqa: BLE001 - the program's failure goes back to the grader
            reply = _error_reply(error, max_bytes)
        _send_frame(calls_out, reply.encode())


def run_assert_program(job, result_fd, calls_in, calls_out, max_bytes):
    """P, in its forked test process. Never returns."""
    _restore_standard_streams()
    _reseed()
    code = _compile_program(job, result_fd)

    def body():
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        exec(code, namespace)  # noqa: S102
        if job.get("setup_code"):  # the program's functions may use what the setup code defines
            _show_in_tracebacks("<setup>", job["setup_code"])
            exec(compile(job["setup_code"], "<setup>", "exec"), namespace)  # noqa: S102
        _serve_calls(namespace, calls_in, calls_out, max_bytes)

    _run_and_exit(body, result_fd)


def _apply_mutations(arguments, after):
    """Carry in-place changes the program made to list/dict/set arguments back to the grader's objects."""
    if type(after) is not list or len(after) != len(arguments):
        return
    for argument, changed in zip(arguments, after):
        if changed is None or type(changed) is not type(argument) or type(argument) not in _MUTABLE_ARGUMENTS:
            continue
        if type(argument) in (list, bytearray):
            argument[:] = changed
        elif type(argument) is collections.deque:
            argument.clear()
            argument.extend(changed)
        else:
            argument.clear()
            argument.update(changed)


def _rebuild_error(name, arguments):
    kind = getattr(builtins, name, None) if isinstance(name, str) else None
    if not (isinstance(kind, type) and issubclass(kind, BaseException)) or name in _NOT_REBUILT:
        kind = ProgramError
    try:
        return kind(*arguments)
    except Exception:  # noqa: BLE001 - a constructor with other arguments (UnicodeDecodeError)
        return ProgramError(*arguments)


class _Calls:
    """G's side of the channel to P."""

    def __init__(self, out_fd, in_fd, max_bytes):
        self.out_fd, self.in_fd, self.max_bytes = out_fd, in_fd, max_bytes

    def call(self, name, arguments, keywords):
        _send_frame(self.out_fd, _wire.encode([name, list(arguments), keywords], self.max_bytes).encode())
        reply = _receive_frame(self.in_fd, self.max_bytes)
        if reply is None:
            raise ProgramError(f"the program's process ended during a call to {name}")
        answer = _wire.decode(reply.decode())
        if type(answer) is not list or len(answer) != 3:
            raise ProgramError("malformed answer from the program's process")
        status, value, extra = answer
        if status == "ok":
            _apply_mutations(arguments, extra)
            return value
        raise _rebuild_error(value, extra if type(extra) is list else [])

    def proxy(self, name):
        def call(*arguments, **keywords):
            return self.call(name, arguments, keywords)

        call.__name__ = call.__qualname__ = name
        return call


def run_assert_grader(job, case_input, result_fd, nonce_fd, calls_out, calls_in, max_bytes):
    """G, in its forked test process: the dataset's setup and test code, the program reached only through
    proxies. Confirms with the nonce after the last statement. Never returns."""
    _restore_standard_streams()
    _reseed()

    def body():
        manifest = _receive_frame(calls_in, max_bytes)
        if manifest is None:
            raise ProgramError(
                "the program ended before its functions could be called (it did not compile, exited or crashed)"
            )
        manifest = json.loads(manifest)
        namespace = {"__name__": "__main__", "__builtins__": builtins}

        def bindable(name):
            # A program's `abs` or `set` would change what the asserts compute with: names of builtins stay
            # the builtins (but HumanEval's entry point, the candidate itself).
            return isinstance(name, str) and (name not in _CLEAN_BUILTINS or name == job.get("entry_point"))

        for alias, module_name in manifest["modules"].items():
            if bindable(alias):
                with contextlib.suppress(Exception):
                    namespace[alias] = importlib.import_module(module_name)
        for name, tree in manifest["values"].items():
            if bindable(name):
                with contextlib.suppress(Exception):
                    namespace[name] = _wire._from_tree(tree, 0)
        calls = _Calls(calls_out, calls_in, max_bytes)
        for name in manifest["functions"]:
            if bindable(name):
                namespace[name] = calls.proxy(name)
        if job.get("setup_code"):
            _show_in_tracebacks("<setup>", job["setup_code"])
            exec(compile(job["setup_code"], "<setup>", "exec"), namespace)  # noqa: S102
        _show_in_tracebacks("<test>", case_input)
        exec(compile(case_input, "<test>", "exec"), namespace)  # noqa: S102
        _flush_streams()
        # Every statement ran to the end: only now read the nonce the harness wrote after the fork and
        # hand it back. An exit status alone never counts.
        _frame(result_fd, b"N", _read(nonce_fd, 64))

    _run_and_exit(body, result_fd)


# ---------------------------------------------------------------- the server side (B2, or B0 without isolation)


def _kill_others(in_pid_namespace, reaped, patience=2.0):
    """Kill every process the test left behind and reap them; ``reaped`` maps pid -> wait status.

    As init of a PID namespace, ``kill(-1)`` reaches every other process in it. Without one, this
    process is a child subreaper: every orphan of the test is re-parented here, so killing its children
    round after round (a killed parent's children become ours) ends with none. Reaping never blocks on a
    process not yet killed; after ``patience`` seconds the rest is left to the namespace's end (or, without
    one, to the next round)."""
    as_init = in_pid_namespace and os.getpid() == 1
    deadline = time.monotonic() + patience
    while True:
        if as_init:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)  # everything in the namespace but this process
        else:
            for pid in _children():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return  # no child left
            if pid == 0:
                break  # children remain, none has ended yet
            reaped[pid] = status
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)


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


def _nonblocking(fd):
    os.set_blocking(fd, False)
    return fd


def _spread_numbers(count):
    """``count`` increasing descriptor numbers above 2 (all below 1024) that a program cannot guess."""
    numbers, low = [], 2
    for _ in range(count):
        low += 1 + int.from_bytes(os.urandom(2), "big") % 200
        numbers.append(low)
    return numbers


def _fork_test_process(job, stdio, extra, run, grader=False):
    """Fork a test process with ``stdio`` at 0, 1, 2 and the ``extra`` descriptors at random numbers (the
    first is its result pipe, which also reports a failed setup), every other descriptor closed, limits set,
    privileges dropped and a new, empty session keyring joined; then ``run(*numbers)``, which never returns.
    A ``grader`` is made non-dumpable: a program's process of the same uid can neither ptrace it nor open
    its ``/proc`` files (its memory, its descriptors)."""
    pid = os.fork()
    if pid != 0:
        return pid
    numbers = _spread_numbers(len(extra))
    report_fd = extra[0]
    try:
        os.setpgid(0, 0)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # Move the pipes above every number in use first, so that no dup2 below closes one of them.
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1024) for fd in (*stdio, *extra)]
        report_fd = moved[3]
        for source, target in zip(moved, (0, 1, 2, *numbers)):
            _dup2(source, target)
        previous = 2
        for number in numbers:
            os.closerange(previous + 1, number)
            previous = number
        os.closerange(previous + 1, 65536)
        report_fd = numbers[0]
        os.chdir(job["workdir"])
        limits = job["limits"]
        _set_limits(limits)
        _drop_privileges(job.get("run_as_uid"), limits.get("max_processes"), job.get("existing_processes"))
        _join_new_session_keyring()
        if grader:
            _prctl(PR_SET_DUMPABLE, 0)  # after the uid change, which resets it
        run(*numbers)
    except BaseException:  # noqa: BLE001 - the harness's own setup failed, before the program ran
        try:
            _frame(report_fd, b"S", traceback.format_exc().encode(errors="replace"))
        finally:
            _exit(125)
    _exit(125)


def _reap(pid, kill):
    """(wait status, resource usage) of a test process, killed first if ``kill``; (None, None) if gone."""
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        _, status, usage = os.wait4(pid, 0)
    except ChildProcessError:
        return None, None
    return status, usage


def _ended_by_itself(pid):
    """(wait status, usage) of a test process that has ended (reaped), or (None, None) while it runs."""
    with contextlib.suppress(ChildProcessError):
        ended, status, usage = os.wait4(pid, os.WNOHANG)
        if ended:
            return status, usage
    return None, None


def run_one_test(job, control, message, in_pid_namespace):
    limits = job["limits"]
    kind = job["kind"]
    timeout = float(limits["timeout_s"])
    max_output = int(limits["max_output_bytes"])
    compare_bytes = int(message.get("compare_bytes") or max_output)  # what the caller reads of an output
    case_input = message["input"]
    stdin_bytes = case_input.encode() if kind == "stdin" else b""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    result_r, result_w = os.pipe()
    stdio = (stdin_r, stdout_w, stderr_w)
    child_ends = [stdin_r, stdout_w, stderr_w, result_w]
    program_pid = program_result_r = nonce_w = None
    started = time.monotonic()
    if kind == "assert":
        program_result_r, program_result_w = os.pipe()
        calls_r, calls_w = os.pipe()  # grader -> program
        replies_r, replies_w = os.pipe()  # program -> grader
        nonce_r, nonce_w = os.pipe()
        child_ends += [program_result_w, calls_r, calls_w, replies_r, replies_w, nonce_r]
        program_pid = _fork_test_process(
            job,
            stdio,
            (program_result_w, calls_r, replies_w),
            lambda result_fd, calls_in, calls_out: run_assert_program(
                job, result_fd, calls_in, calls_out, max_output
            ),
        )
        pid = _fork_test_process(
            job,
            stdio,
            (result_w, nonce_r, calls_w, replies_r),
            lambda result_fd, nonce_fd, calls_out, calls_in: run_assert_grader(
                job, case_input, result_fd, nonce_fd, calls_out, calls_in, max_output
            ),
            grader=True,
        )
    else:
        pid = _fork_test_process(
            job,
            stdio,
            (result_w,),
            lambda result_fd: run_test_process(job, case_input, result_fd, max_output),
        )
    for fd in child_ends:
        os.close(fd)
    nonce = None
    if nonce_w is not None:
        # Drawn after the forks, so that no test process's memory (a copy of this one) ever held it.
        nonce = os.urandom(16).hex().encode()
        with contextlib.suppress(BrokenPipeError):  # the grader may be gone already (then unconfirmed)
            _write_all(nonce_w, nonce)
        os.close(nonce_w)
    pidfd = os.pidfd_open(pid)
    buffers = {stdout_r: bytearray(), stderr_r: bytearray(), result_r: bytearray()}
    if program_result_r is not None:
        buffers[program_result_r] = bytearray()
    readers = {_nonblocking(fd) for fd in buffers}
    writer = _nonblocking(stdin_w) if stdin_bytes else None
    if writer is None:
        os.close(stdin_w)
    written = 0
    timed_out = output_exceeded = caller_gone = False
    exited = False
    program_status = program_usage = None
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
            if program_pid is not None:  # the grader is done: the program's process has nothing left to do
                program_status, program_usage = _ended_by_itself(program_pid)
                if program_status is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(program_pid, signal.SIGKILL)
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
            buffer += chunk
            if fd == stderr_r:
                if len(buffer) > STDERR_KEEP_BYTES * 4:
                    del buffer[: -STDERR_KEEP_BYTES * 2]  # keep the end: the traceback comes last
            elif len(buffer) > max_output:
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
    # The program's process of an assert test: did it end by itself before the grader did?
    if program_pid is not None and not exited:
        program_status, program_usage = _ended_by_itself(program_pid)
    if not in_pid_namespace:
        # Their process groups, while the unreaped test processes still hold the groups' ids (no reuse).
        for group in (pid, None if program_status is not None else program_pid):  # reaped: no longer its id
            if group is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
    status, usage = _reap(pid, kill=not exited)
    reaped = {pid: status}
    if program_pid is not None and program_status is None:
        _, program_usage = _reap(program_pid, kill=True)  # killed here: its own status says nothing
    _kill_others(in_pid_namespace, reaped)
    for fd in list(buffers) + [pidfd] + ([writer] if writer is not None else []):
        try:
            os.close(fd)
        except OSError:
            pass
    status = status or 0
    stdout = bytes(buffers[stdout_r][:max_output]).decode("utf-8", errors="replace")
    stdout_truncated = False
    if kind != "stdin":
        stdout = stdout[:STDERR_KEEP_BYTES]  # shown, never compared
    elif len(stdout) > compare_bytes and len(stdout.strip()) > compare_bytes:
        stdout, stdout_truncated = stdout[:compare_bytes], True
    cpu = (usage.ru_utime + usage.ru_stime) if usage else None
    answer = {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timed_out": timed_out,
        "output_exceeded": output_exceeded,
        "caller_gone": caller_gone,
        "stdout": stdout,
        "stdout_truncated": stdout_truncated,
        "stderr": bytes(buffers[stderr_r][-STDERR_KEEP_BYTES:]).decode("utf-8", errors="replace"),
        "wall_s": wall,
        "cpu_s": cpu,
        "max_rss_kb": usage.ru_maxrss if usage else None,
        "compile_error": None,
        "setup_error": None,
        "result": None,
        "result_truncated": False,
        "memory_error": False,
        "confirmed": False,
        "program_exit_code": None,
        "program_signal": None,
        "program_cpu_s": (program_usage.ru_utime + program_usage.ru_stime) if program_usage else None,
    }
    if program_status is not None:
        answer["program_exit_code"] = os.WEXITSTATUS(program_status) if os.WIFEXITED(program_status) else None
        answer["program_signal"] = os.WTERMSIG(program_status) if os.WIFSIGNALED(program_status) else None
    sources = [(result_r, True)] + ([(program_result_r, False)] if program_result_r is not None else [])
    for fd, main in sources:
        for tag, payload in _split_frames(bytes(buffers[fd])):
            if tag == b"S":
                answer["setup_error"] = payload.decode("utf-8", errors="replace")
            elif tag == b"C":
                answer["compile_error"] = payload.decode("utf-8", errors="replace")
            elif tag == b"X":
                answer["memory_error"] = answer["memory_error"] or payload == b"MemoryError"
            elif tag == b"R" and main and kind == "functional":
                if len(payload) > compare_bytes:
                    answer["result_truncated"] = True
                else:
                    answer["result"] = payload.decode("utf-8", errors="replace")
            elif tag == b"N" and main and nonce is not None:
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
    # Not dumpable: a test process of the same uid (limits-only mode, a caller that is not root) can neither
    # ptrace this process nor open its /proc files (the nonce it draws, the pipes it holds).
    _prctl(PR_SET_DUMPABLE, 0)
    # Everything this interpreter holds now goes to the collector's permanent generation: a test process's
    # garbage collections then never walk (and so never copy-on-write) the pages it shares with this one.
    gc.freeze()
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
    _remove_workdir(job["workdir"])
    _exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _remove_workdir(workdir):
    """B0 removes the program's folder when it ends, so that none is left when the caller died first."""
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)


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
    "statistics",
    "io",
    "json",
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
    _remove_workdir(job["workdir"])


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
