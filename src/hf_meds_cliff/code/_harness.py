"""The in-sandbox harness: the process tree that runs one untrusted program against test inputs.

Started by :mod:`hf_meds_cliff.code.sandbox` as ``python -I -S -B _harness.py`` (a fresh interpreter), or
forked from the fork server (a pristine template started that way, see :func:`fork_server`). Standard library
only; the library never imports it. The protocol is one JSON object per line: the caller writes the job,
then one ``{"op": "run", ...}`` per test (or ``{"op": "exit"}``), on this process's stdin; the harness
answers ``{"event": "ready", ...}`` and one raw result per test on its stdout. Expected outputs of stdin
and functional tests never reach the harness: the caller compares. Values that cross a process boundary
(functional arguments and results, the calls of assert tests) use the tagged encoding of ``_wire.py``; what
runs inside the test processes (the program's runtime, the assert checker) is in ``_inside.py``.

The process tree, and every descriptor each process holds (under isolation; ``job["isolate"]``)::

    caller ──job/answers (2 pipes)──> B0 (host namespaces)
                                       │ clone(new user, mount, net, pid, ipc, uts namespaces);
                                       │ B0 writes B2's uid/gid maps (where clone(2)'s calling
                                       │ convention is not known here: fork B1, B1 unshares, B0
                                       │ writes B1's maps, B1 forks B2)
      ┌─────────────────────────────── B2 = PID 1 of namespace A: THE CHECKER
      │  holds: the caller's 2 pipes, the zygote socket, per test the program's
      │  stdin/stdout/stderr ends and (assert tests) the grader's result and
      │  stderr pipes. Reads the tests. Alone answers the caller. Lives in a new
      │  root (interpreter and system libraries, read-only); per test it mounts a
      │  fresh tmpfs (/box, /tmp, /dev/shm) and makes fresh memory and pids groups.
      │
      ├─ clone(NEWPID), before any test is read ──> Z
      │     Z = PID 1 of namespace B: THE ZYGOTE (where clone(2)'s calling convention is not known
      │     here: fork H, H unshare(pid), fork Z, H exits and Z is re-parented to B2)
      │     holds: 0, 1, 2 = /dev/null and its socket to B2, nothing else;
      │     its memory: the job (program, setup code, limits), never a test
      │
      │     per test: B2 ──SCM_RIGHTS (3 pipe ends, the groups' tasks files)──> Z ── fork ──> P
      │               Z ──pidfd of P──> B2        P: THE PROGRAM'S PROCESS: into the test's groups, a new
      │                                           IPC namespace, limits, unprivileged uid, new session
      │                                           keyring, sealed user keyrings; then holds exactly
      │                                           0 = stdin, 1 = stdout, 2 = stderr, and runs the program
      │               Z: wait4(P), kill(-1) in namespace B, reap, report P's status and CPU to B2;
      │               B2: kill what is left in the groups, remove them, unmount the folder
      │
      └─ fork per assert test ── G: THE GRADER (dataset code)
            holds: 0 = /dev/null, 1/2 = its own stderr pipe, 3 = P's stdin (calls),
            4 = P's stdout (answers), 5 = result pipe to B2; same limits and uid as P,
            not dumpable; runs the test code with a proxy per function of the program,
            writes its outcome on 5.

P is forked from Z, and Z from B2 before B2 read any test: no test code, expected value or input of another
test was ever in P's memory, and P holds no descriptor but its own three pipes. P cannot signal or ptrace G or
B2 (they are in namespace A, P in B, whose init is Z: their pids do not exist in P's namespace; the /proc that
P sees is A's and lists them, but they are not dumpable, so their memory and descriptors stay closed), and
cannot signal Z (the kernel drops signals from inside a namespace to its init). Only B2 writes to the
caller, and a verdict's every input comes from B2, G or Z (wait statuses, resource usage, G's outcome, the
compiler in B2); P's bytes are only ever the program's output, compared in the caller, or the program's
answers to calls.

Without namespaces (``isolate`` false, or the namespaces refused: *limits-only mode*) B0 is the checker and
forks Z directly; Z is a child subreaper (instead of a namespace's init) and kills what P left behind after
each test; G and P run as a fresh uid when the caller is root. Every level dies with the one above it
(``PR_SET_PDEATHSIG``); B2 stops as soon as its stdin reaches end of file (the caller is gone); when PID 1
of a namespace dies the kernel kills the whole namespace.
"""

import contextlib
import ctypes
import errno
import fcntl
import gc
import json
import os
import resource
import secrets
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
MAX_GROUP_FDS = 2  # the cgroup.procs files of a test's groups (v1: memory and pids; v2: one)
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
KEYCTL_SETPERM = 5
KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -4, -5
# pivot_root(2)'s number per machine (an unknown machine gets no new root, and so no isolation)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "i686": 217, "ppc64le": 203, "s390x": 217}
# clone(2)'s number on the machines where its first argument is the flags; elsewhere B2 and the zygote are
# made through helper processes (B1, H: see isolate_and_serve and Zygote)
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220}
# A PyDLL call keeps the GIL: a child made by a raw clone resumes as this (only) thread, holding it.
_libc_gil_held = ctypes.PyDLL(None, use_errno=True)
_libc_gil_held.syscall.restype = ctypes.c_long

# Captured before any program runs: a program may rebind os.read/os.write/os._exit, not these references.
_read, _write, _exit, _close, _dup2 = os.read, os.write, os._exit, os.close, os.dup2


def _load_by_path(filename, name):
    """A sibling file (``_wire.py``, ``_inside.py``), loaded by path: the harness runs as a script, without
    the package on its path, and never imports by a name that a folder on ``sys.path`` could shadow."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), filename)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_inside = _load_by_path("_inside.py", "hf_meds_cliff_sandbox_inside")
_groups = _load_by_path("_groups.py", "hf_meds_cliff_sandbox_groups")
_removal = _load_by_path("_removal.py", "hf_meds_cliff_sandbox_removal")


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
    """Line-delimited JSON over the caller's pipes (moved off fds 0/1). Linear in what arrives: each chunk is
    searched once for the end of line."""

    def __init__(self, in_fd, out_fd):
        self.in_fd, self.out_fd = in_fd, out_fd
        self.chunks = []
        self.closed = False

    def receive(self):
        while not self.chunks or b"\n" not in self.chunks[-1]:
            chunk = _read(self.in_fd, 1 << 20)
            if not chunk:
                self.closed = True
                return None
            self.chunks.append(chunk)
        data = b"".join(self.chunks)
        line, rest = data.split(b"\n", 1)
        self.chunks = [rest] if rest else []
        return json.loads(line)

    def pending(self):
        return any(self.chunks)

    def send(self, message):
        _write_all(self.out_fd, json.dumps(message).encode() + b"\n")


# ---------------------------------------------------------------- setting up a test process (P or G)


def _set_limits(limits, address_space=True):
    """The rlimits of a test process. ``address_space`` false: no ``RLIMIT_AS`` (the process is in a memory group,
    which bounds the pages it makes, and the group's own events decide a ``memory_limit``)."""

    def cap(kind, value):
        if value is None:
            return
        soft, hard = (value, value) if not isinstance(value, tuple) else value
        resource.setrlimit(kind, (int(soft), int(hard)))

    megabyte = 1024 * 1024
    if address_space:
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


def _seal_user_keyrings():
    """Make the uid's user keyring (``@u``) and user session keyring (``@us``) unusable for good: permissions 0,
    set while this process possesses them through their special ids. Nothing a test leaves there can reach a later
    test, which runs as the same uid, and no test can set them back (that needs the permission just removed). Only
    for a uid in the sandbox's own user namespace, whose user keyrings are that namespace's (Linux 5.3 and later)
    and end with it, never the caller's."""
    number = SYS_KEYCTL.get(os.uname().machine)
    if number is None:
        raise OSError(f"no keyctl system call number known for {os.uname().machine}")
    for keyring in (KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING):
        # EACCES: sealed by an earlier test already; ENOSYS/EPERM: no keyrings for this process at all
        _libc.syscall(ctypes.c_long(number), ctypes.c_long(KEYCTL_SETPERM), ctypes.c_long(keyring), ctypes.c_long(0))


def _new_ipc_namespace(limits, capped):
    """A new IPC namespace for one test's processes: no SysV segment, queue or semaphore of another test or of the
    host is visible, and all of them are destroyed with the test's last process. Its shared-memory total is capped
    at ``memory_mb`` and its message queues at a few (they bound what a program can hold there where no memory
    group charges it; ``capped`` false: a memory group charges every page, and its event makes the verdict). Where
    refused (a caller that is not root, without namespaces), the test runs in the
    checker's IPC namespace: limits-only mode cannot give this."""
    if _libc.unshare(CLONE_NEWIPC) != 0:
        return False
    if not capped:
        return True
    megabytes = int(limits.get("memory_mb") or 0)
    page = os.sysconf("SC_PAGE_SIZE")
    settings = {"shmmax": megabytes << 20, "shmall": (megabytes << 20) // page, "shmmni": 64, "msgmni": 32}
    for name, value in settings.items():
        if megabytes or name in ("shmmni", "msgmni"):
            with contextlib.suppress(OSError), open(f"/proc/sys/kernel/{name}", "w") as setting:
                setting.write(str(value))
    return True


def _confine(job, folder, test_process=False, uid=None):
    """A test process (P, or G with ``folder`` "/"): its own IPC namespace (P), limits, the unprivileged uid (the
    test's ``uid``, else the job's; or no capabilities), a new session keyring and sealed user keyrings, ``folder``
    as cwd, HOME and TMPDIR."""
    os.chdir(folder)
    if test_process:
        os.environ["HOME"] = os.environ["TMPDIR"] = folder
    limits = job["limits"]
    if test_process:
        _new_ipc_namespace(limits, capped=not job.get("memory_group"))
    _set_limits(limits, address_space=not (test_process and job.get("memory_group")))
    run_as_uid = uid if uid is not None else job.get("run_as_uid")
    _drop_privileges(run_as_uid, limits.get("max_processes"), job.get("existing_processes"))
    _join_new_session_keyring()
    if job.get("seal_user_keyrings"):
        _seal_user_keyrings()


def _keep_only(fds):
    """Close every descriptor but ``fds`` (all of them >= 3 or at their final number already)."""
    previous = -1
    for fd in sorted(set(fds)):
        if fd > previous + 1:  # never an empty range: os.closerange(n, n) would close everything from n on
            os.closerange(previous + 1, fd)
        previous = fd
    os.closerange(previous + 1, 1 << 16)


def _place(sources):
    """Put ``sources[i]`` at descriptor ``i`` and close every other descriptor."""
    moved = [_dup_high(fd) for fd in sources]
    for target, fd in enumerate(moved):
        _dup2(fd, target)
    _keep_only(range(len(sources)))


def _dup_high(fd):
    """A copy of ``fd`` at 64 or above: out of the way of the low numbers it is then placed at."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD, 64)


def _kill_descendants(as_init, patience=2.0):
    """Kill every process under this one and reap them.

    As init of a PID namespace, ``kill(-1)`` reaches every other process in it. Without one, this process is
    a child subreaper: every orphan is re-parented here, so killing its children round after round (a killed
    parent's children become ours) ends with none. After ``patience`` seconds the rest is left to the
    namespace's end (or, without one, to the next round)."""
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
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return  # no child left
            if pid == 0:
                break  # children remain, none has ended yet
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)


# ---------------------------------------------------------------- the zygote (Z) and the program's process (P)


def _zygote(sock_fd, job, code, prelude):
    """Z: fork one program's process per request and report how it ended. Holds 0, 1, 2 (``/dev/null``) and
    ``sock_fd``; its memory is the checker's before any test was read. Never returns."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as a namespace's init, no handler: signals are dropped
    as_init = os.getpid() == 1
    if not as_init:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)  # P's orphans come here, and are killed after each test
    sock = socket.socket(fileno=sock_fd)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 1 << 12, 3 + MAX_GROUP_FDS)
            request = json.loads(message) if message else None
        except (OSError, ValueError):
            _exit(0)
        if not isinstance(request, dict) or len(fds) < 3:
            _exit(0)  # the checker is gone
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _program_process(job, code, prelude, fds[:3], fds[3:], request["folder"], request.get("uid"), status_w)
        for fd in (*fds, status_w):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        socket.send_fds(sock, [b"P"], [pidfd])
        os.close(pidfd)
        setup = b""
        while chunk := _read(status_r, 1 << 16):  # ends when P closes it, before the program runs
            setup += chunk
        os.close(status_r)
        _, status, usage = os.wait4(pid, 0)
        _kill_descendants(as_init)
        report = {
            "status": status,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "max_rss_kb": usage.ru_maxrss,
            "setup_error": setup.decode("utf-8", errors="replace") or None,
        }
        sock.send(json.dumps(report).encode())


def _program_process(job, code, prelude, fds, group_fds, folder, uid, status_w):
    """P: into the test's memory and pids groups (``group_fds``: their ``tasks`` or ``cgroup.procs``), its three pipes at 0, 1, 2
    and every other descriptor closed; a failed setup is reported on ``status_w``, which is closed before the
    program runs. Never returns."""
    try:
        os.setpgid(0, 0)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for fd in group_fds:  # "0": this process; before any page of the test is made, and while privileged
            _write_all(fd, b"0")
        for target, fd in enumerate(fds):
            _dup2(fd, target)  # every received descriptor is >= 3: 0, 1, 2 were /dev/null in Z
        _keep_only((0, 1, 2, status_w))
        _confine(job, folder, test_process=True, uid=uid)
    except BaseException:  # noqa: BLE001 - the harness's own setup failed, before the program ran
        with contextlib.suppress(BaseException):
            _write_all(status_w, traceback.format_exc().encode(errors="replace"))
        _exit(125)
    _close(status_w)
    _inside.run_program(job, code, prelude)
    _exit(125)


class Zygote:
    """The checker's handle on Z: started before any test is read (see the module docstring)."""

    def __init__(self, job, code, prelude, new_pid_namespace):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.fd, their_fd = ours.detach(), theirs.detach()
        # Z cloned straight into a new PID namespace (one process), or through H where clone is not known
        # here or refused (H then finds out which)
        made = _clone_into_namespaces(CLONE_NEWPID) if new_pid_namespace else None
        cloned = made is not None and made[0] >= 0
        pid = made[0] if cloned else os.fork()
        if pid == 0:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for target in (0, 1, 2):
                    _dup2(null, target)
                _keep_only((0, 1, 2, their_fd))
                if new_pid_namespace and not cloned:
                    # H: Z becomes PID 1 of a new PID namespace (or, where refused, a plain subreaper); H
                    # exits at once and Z is re-parented to the checker, the init of the namespace above.
                    created = _libc.unshare(CLONE_NEWPID) == 0
                    if os.fork() != 0:
                        _exit(0 if created else 2)
                else:
                    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                _zygote(their_fd, job, code, prelude)
            finally:
                _exit(1)
        _close(their_fd)
        self.sock = socket.socket(fileno=self.fd)
        self.kind = "pid_namespace" if cloned else "subreaper"
        self.pid = pid
        if new_pid_namespace and not cloned:
            _, status = os.waitpid(pid, 0)  # H
            self.kind = (
                "pid_namespace" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else "subreaper"
            )
            # Z was re-parented here when H exited, and is this process's only child (no test has run yet)
            children = _children()
            self.pid = children[0] if len(children) == 1 else None

    pending_report = False  # the previous test's report, not read yet (see run_one_test)
    pending_space = None  # the previous test's folder and groups, removed once its report is read
    cleanup_failures = 0  # entries of test folders and groups that could not be removed, not reported yet

    def settle(self):
        """Before a test: the previous test's report read (its processes are all gone) and its folder and groups
        removed, if that was left to now. False if the zygote is gone."""
        if not self.pending_report:
            return True
        self.pending_report = False
        settled = self.wait_report(5.0) is not None
        if self.pending_space is not None:
            self.cleanup_failures += self.pending_space.close()
            self.pending_space = None
        return settled

    def wait_report(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], timeout)
        return self.receive_report() if ready else None

    def request(self, fds, folder, uid):
        socket.send_fds(self.sock, [json.dumps({"folder": folder, "uid": uid}).encode()], fds)

    def receive_pidfd(self, deadline):
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                break
        try:
            message, fds, _, _ = socket.recv_fds(self.sock, 16, 1)
        except OSError:
            return None
        if message != b"P" or len(fds) != 1:
            for fd in fds:
                _close(fd)
            return None
        return fds[0]

    def receive_report(self):
        try:
            data = self.sock.recv(1 << 16)
        except OSError:
            return None
        if not data:
            return None
        return json.loads(data)

    def close(self):
        """End Z (it exits when its socket closes) and reap it, killing it after a second: when the checker
        is gone, so is every process of the program, in both modes."""
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.pid is None:
            return
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:
            return  # already reaped
        try:
            ready, _, _ = select.select([pidfd], [], [], 1.0)
            if not ready:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        finally:
            os.close(pidfd)


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


# ---------------------------------------------------------------- the checker (B2, or B0 without isolation)


def _fork_grader(job, case_input, calls_out, calls_in, stderr_w, result_w, uid):
    """G: 0 = /dev/null, 1 and 2 = its own stderr pipe, 3 = P's stdin, 4 = P's stdout, 5 = the result pipe;
    confined like P, then not dumpable. Returns its pid."""
    pid = os.fork()
    if pid != 0:
        return pid
    try:
        os.setpgid(0, 0)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        null = os.open(os.devnull, os.O_RDWR)
        _place([null, stderr_w, stderr_w, calls_out, calls_in, result_w])
        _confine(job, "/", uid=uid)
        _prctl(PR_SET_DUMPABLE, 0)  # after the uid change, which resets it
    except BaseException:  # noqa: BLE001 - the harness's own setup failed
        with contextlib.suppress(BaseException):
            _write_all(5, json.dumps({"setup_error": traceback.format_exc()}).encode(errors="replace"))
        _exit(125)
    _inside.run_grader(job, case_input, 3, 4, 5, own_files=(__file__,))
    _exit(125)


def _blank_answer():
    return {
        "exit_code": None,
        "signal": None,
        "timed_out": False,
        "output_exceeded": False,
        "caller_gone": False,
        "stdout": "",
        "stdout_truncated": False,
        "stderr": "",
        "wall_s": 0.0,
        "cpu_s": None,
        "max_rss_kb": None,
        "compile_error": None,
        "setup_error": None,
        "result": None,
        "result_truncated": False,
        "memory_error": False,
        "memory_exceeded": False,
        "memory_killed": False,
        "confirmed": False,
        "assertion_failed": False,
        "program_exit_code": None,
        "program_signal": None,
        "program_cpu_s": None,
        "cleanup_failures": 0,
    }


def _status_fields(status):
    return (
        os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
    )


def _drain(fd, buffer, limit):
    """What is left in a pipe whose writers are gone (or not: never blocks), up to ``limit`` bytes."""
    with contextlib.suppress(OSError):
        while len(buffer) <= limit:
            chunk = _read(fd, 1 << 16)
            if not chunk:
                break
            buffer += chunk


class TestSpace:
    """One test's fresh folder and, where the program has memory groups, its fresh groups.

    Under isolation (a new root) the folder is a new tmpfs of ``workdir_size_mb``, mounted at ``/box`` for this test
    only, with ``/tmp`` and ``/dev/shm`` folders of the same tmpfs; it is removed by unmounting it, which needs no
    walk of what the program left there. Without isolation it is a new folder ``test-<n>`` in the program's folder,
    removed without recursion (:func:`_removal.remove_tree`). A folder is never emptied and reused. A failure to
    remove is counted (``cleanup_failures`` in the answer), never raised."""

    __test__ = False
    BOX = "/box"
    _STAGE = "/.stage"
    _MOUNTED = (("box", BOX, 0o700), ("tmp", "/tmp", 0o1777), ("shm", "/dev/shm", 0o1777))
    count = 0

    def __init__(self, job):
        self.job, self.group, self.mounted = job, None, []
        TestSpace.count += 1
        # Without a user namespace, a root caller's tests each run as a fresh uid: nothing a uid owns (its user
        # keyrings, its processes) is shared by two tests, and no keyring has to be made only to be sealed.
        self.uid = _fresh_uid() if job.get("fresh_uid_per_test") else job.get("run_as_uid")
        owner = self.uid
        if job.get("new_root"):
            size = int(job["limits"]["workdir_size_mb"])
            # one inode per 4 KiB of its size (a tree of 16,000 entries in the default 64 MiB)
            options = f"size={size}m,nr_inodes={size * 256},mode=755"
            _mount("tmpfs", self._STAGE, "tmpfs", MS_NOSUID | MS_NODEV, options)
            try:
                for name, target, mode in self._MOUNTED:
                    staged = f"{self._STAGE}/{name}"
                    os.mkdir(staged)
                    os.chmod(staged, mode)
                    if name == "box":
                        os.chown(staged, owner or 0, owner or 0)
                    _mount(staged, target, None, MS_BIND)
                    self.mounted.append(target)
            except BaseException:
                self.close()
                raise
            finally:
                _libc.umount2(self._STAGE.encode(), MNT_DETACH)  # the binds keep the tmpfs while the test runs
            self.folder = self.BOX
        else:
            self.folder = os.path.join(job["workdir"], f"test-{TestSpace.count}")
            os.mkdir(self.folder, 0o700)
            if owner is not None:
                os.chown(self.folder, owner, owner)
        groups = job.get("groups")
        if groups is not None:
            limits = job["limits"]
            try:
                self.group = groups.new_test(int(limits["memory_mb"]) << 20, int(limits["max_processes"]))
            except BaseException:
                self.close()
                raise

    def memory_events(self):
        """``(met, killed)``: whether the kernel recorded that the test's group met its memory limit (an OOM kill, or
        a charge that met the limit), and whether it killed a process for it: the checker's measurement, which
        nothing the program writes can make."""
        if self.group is None:
            return False, False
        events = self.job["groups"].memory_events(self.group)
        return events["oom_kill"] > 0 or events["limit_hits"] > 0, events["oom_kill"] > 0

    def close(self):
        """Remove the folder and the groups (the test's processes are gone or being killed); the number of
        entries that could not be removed."""
        failures = 0
        if self.group is not None:
            failures += not self.job["groups"].kill_and_remove(self.group)
            self.group = None
        if self.job.get("new_root"):
            for target in reversed(self.mounted):
                if _libc.umount2(target.encode(), MNT_DETACH) != 0:
                    failures += 1
            self.mounted = []
        else:
            failures += _removal.remove_tree(self.folder)
        return failures


WATCH_INTERVAL_S = 0.05  # how often the checker sums the memory of a program's processes


def _descendants(root):
    """Every process under ``root`` (all of a program's processes, when ``root`` is its zygote), from the
    kernel's lists of children; empty where /proc shows none."""
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as listing:
                    children = [int(child) for child in listing.read().split()]
            except (OSError, ValueError):
                continue
            found.extend(children)
            stack.extend(children)
    return found


def _memory_kb(pid):
    """A process's resident pages, shared ones included (``statm``: readable for any process, where
    ``smaps_rollup`` is not). Conservative: a page two processes share is counted for each, so the sum over a
    program's processes is never below what they hold in mapped pages."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            fields = statm.read().split()
        return int(fields[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, ValueError, IndexError):
        return 0


def _shared_memory_kb():
    """The machine's pages in shared memory, tmpfs and memfd files (``Shmem`` of /proc/meminfo): where no group
    charges them, the only measure of the pages a program holds outside its processes' mappings."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"Shmem:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _over_memory(zygote, limit_kb, shared_at_start_kb):
    """The fallback's measurement, where no memory group is writable: whether a program's processes together hold
    more than ``limit_kb``, counting every resident page of each process (a page two of them share counts twice)
    and every page of shared memory, tmpfs or memfd files the machine gained since the test started (whoever made
    it: conservative). Sampled every ``WATCH_INTERVAL_S``."""
    if zygote.pid is None:
        return False
    held = max(0, _shared_memory_kb() - shared_at_start_kb)
    if held > limit_kb:
        return True
    return held + sum(_memory_kb(pid) for pid in _descendants(zygote.pid)) > limit_kb


def run_one_test(job, control, message, zygote):
    """One test: the program's process from the zygote (and, for assert tests, the grader forked here), the
    wall clock, the output limit, and the answer for the caller."""
    answer = _blank_answer()
    if job.get("compile_error"):
        answer["compile_error"] = job["compile_error"]  # compiled by the checker: nothing runs
        return answer
    limits, kind = job["limits"], job["kind"]
    timeout = float(limits["timeout_s"])
    max_output = int(limits["max_output_bytes"])
    compare_bytes = int(message.get("compare_bytes") or max_output)  # used once the program is dead
    case_input = message["input"]
    settled = zygote.settle()
    answer["cleanup_failures"], zygote.cleanup_failures = zygote.cleanup_failures, 0
    if not settled:
        answer["setup_error"] = "the zygote did not answer (it died, or the harness failed)"
        return answer
    try:
        space = TestSpace(job)
    except OSError as error:
        answer["setup_error"] = f"the test's folder or memory group could not be made ({error})"
        return answer
    started = time.monotonic()
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    try:
        group_fds = space.group.procs_fds if space.group else []
        zygote.request([stdin_r, stdout_w, stderr_w, *group_fds], space.folder, space.uid)
    except OSError as error:
        for fd in (stdin_r, stdin_w, stdout_r, stdout_w, stderr_r, stderr_w):
            _close(fd)
        answer["cleanup_failures"] += space.close()
        answer["setup_error"] = f"the zygote is gone ({error})"
        return answer
    if space.group is not None:
        space.group.close_procs()  # the program's process holds its own copies until it has moved in
    grader_pid = grader_pidfd = result_r = grader_err_r = None
    if kind == "assert":
        result_r, result_w = os.pipe()
        grader_err_r, grader_err_w = os.pipe()  # the grader's own traceback, apart from the program's stderr
        grader_pid = _fork_grader(job, case_input, stdin_w, stdout_r, grader_err_w, result_w, space.uid)
        for fd in (stdin_w, stdout_r, result_w, grader_err_w):
            _close(fd)
        stdin_w = stdout_r = None
        grader_pidfd = os.pidfd_open(grader_pid)
    for fd in (stdin_r, stdout_w, stderr_w):
        _close(fd)
    program_pidfd = zygote.receive_pidfd(started + timeout + 2.0)
    if kind == "stdin":
        payload = case_input.encode()
    elif kind == "functional":
        data = json.dumps(case_input).encode()
        payload = len(data).to_bytes(4, "big") + data
    else:
        payload = b""
    buffers = {stdout_r: bytearray(), stderr_r: bytearray(), result_r: bytearray(), grader_err_r: bytearray()}
    buffers.pop(None, None)
    readers = {_nonblocking(fd) for fd in buffers}
    writer = stdin_w
    if writer is not None and not payload:
        _close(writer)
        writer = None
    elif writer is not None:
        _nonblocking(writer)
    written = 0
    report = None
    zygote_gone = program_pidfd is None
    grader_done = False
    memory_limit_kb = int(limits["memory_mb"]) * 1024
    shared_at_start_kb = _shared_memory_kb() if space.group is None else 0
    next_watch = started + WATCH_INTERVAL_S
    while not zygote_gone:
        now = time.monotonic()
        if now >= next_watch:
            next_watch = now + WATCH_INTERVAL_S
            if report is None and space.group is None and _over_memory(zygote, memory_limit_kb, shared_at_start_kb):
                answer["memory_exceeded"] = True  # the program's processes together: killed below
                answer["memory_killed"] = True
                break
        remaining = started + timeout - now
        if grader_done if kind == "assert" else report is not None:
            break
        if remaining <= 0:
            answer["timed_out"] = True
            break
        watch = [*readers, control.in_fd]
        if report is None:
            watch.append(zygote.fd)
        if grader_pidfd is not None and not grader_done:
            watch.append(grader_pidfd)
        wait = min(remaining, max(0.0, next_watch - now))
        ready_read, ready_write, _ = select.select(watch, [writer] if writer is not None else [], [], wait)
        if control.in_fd in ready_read:
            answer["caller_gone"] = True  # the caller writes nothing while a test runs: readable means gone
            break
        if zygote.fd in ready_read:
            report = zygote.receive_report()
            zygote_gone = report is None
        if grader_pidfd in ready_read:
            grader_done = True
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
            if fd in (stderr_r, grader_err_r):
                if len(buffer) > STDERR_KEEP_BYTES * 4:
                    del buffer[: -STDERR_KEEP_BYTES * 2]  # keep the end: the traceback comes last
            elif fd == stdout_r and len(buffer) > max_output:
                answer["output_exceeded"] = True  # raw bytes, before any decoding or stripping
            elif fd == result_r and len(buffer) > 1 << 16:
                del buffer[1 << 16 :]
        if answer["output_exceeded"]:
            break
        if writer is not None and writer in ready_write:
            try:
                written += _write(writer, payload[written : written + (1 << 16)])
            except BrokenPipeError:
                written = len(payload)
            except BlockingIOError:
                pass
            if written >= len(payload):
                _close(writer)
                writer = None
    answer["wall_s"] = time.monotonic() - started
    # The program's process: killed now if it still runs (its own status then says nothing), then Z's report.
    killed = deferred = False
    if report is None and program_pidfd is not None and not zygote_gone:
        killed = True
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(program_pidfd, signal.SIGKILL)
        if kind == "assert" and grader_done:
            # The grader decided; the program's process was only answering calls, and its status says nothing.
            # The zygote's report (and the folder's emptying) wait for the next test: see Zygote.settle.
            deferred = zygote.pending_report = True
        else:
            report = zygote.wait_report(5.0)
            zygote_gone = report is None
    grader_status = grader_usage = None
    if grader_pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(
                grader_pid, signal.SIGKILL
            )  # the grader's group, while its unreaped leader holds the id
        _, grader_status, grader_usage = os.wait4(grader_pid, 0)
    with contextlib.suppress(ChildProcessError):  # anything else that ended here (H, a grader's orphans)
        while os.waitpid(-1, os.WNOHANG)[0] != 0:
            pass
    for fd in list(readers):
        _drain(fd, buffers[fd], max_output if fd == stdout_r else 1 << 16)
    for fd in [*buffers, program_pidfd, grader_pidfd, writer]:
        if fd is not None:
            with contextlib.suppress(OSError):
                _close(fd)
    met, killed = space.memory_events()
    answer["memory_exceeded"] = answer["memory_exceeded"] or met
    answer["memory_killed"] = answer["memory_killed"] or killed
    if deferred:
        zygote.pending_space = space
    else:
        answer["cleanup_failures"] += space.close()
    if zygote_gone:
        answer["setup_error"] = "the zygote did not answer (it died, or the harness failed)"
        return answer
    report = report or {"status": None, "cpu_s": None, "max_rss_kb": None, "setup_error": None}
    if report.get("setup_error"):
        answer["setup_error"] = report["setup_error"]
    program_status = None if killed else report["status"]
    answer["stderr"] = bytes(buffers[stderr_r][-STDERR_KEEP_BYTES:]).decode("utf-8", errors="replace")
    if kind == "assert":
        answer["exit_code"], answer["signal"] = _status_fields(grader_status)
        answer["cpu_s"] = grader_usage.ru_utime + grader_usage.ru_stime
        answer["max_rss_kb"] = grader_usage.ru_maxrss
        answer["program_cpu_s"] = report["cpu_s"]
        if program_status is not None:
            answer["program_exit_code"], answer["program_signal"] = _status_fields(program_status)
        try:
            outcome = json.loads(bytes(buffers[result_r]))
        except ValueError:
            outcome = {}
        if not isinstance(outcome, dict):
            outcome = {}
        if outcome.get("setup_error"):
            answer["setup_error"] = str(outcome["setup_error"])
        grader_text = bytes(buffers[grader_err_r][-STDERR_KEEP_BYTES:]).decode("utf-8", errors="replace")
        if outcome.get("outcome") == "error":  # the program's own traceback says why, then the grader's
            answer["stderr"] = (answer["stderr"][-STDERR_KEEP_BYTES // 2 :] + "\n" + grader_text).strip()
        else:  # a failed assert (or none): the grader's traceback alone, which the program cannot write to
            answer["stderr"] = grader_text
        answer["confirmed"] = outcome.get("outcome") == "passed"
        answer["assertion_failed"] = outcome.get("outcome") == "assertion"
        answer["memory_error"] = answer["memory_exceeded"]  # measured by the checker, never the program's word
        answer["output_exceeded"] = answer["output_exceeded"] or bool(outcome.get("output_exceeded"))
        return answer
    answer["exit_code"], answer["signal"] = _status_fields(report["status"])
    answer["memory_error"] = answer["memory_exceeded"]  # measured by the checker, never the program's word
    answer["cpu_s"] = report["cpu_s"]
    answer["max_rss_kb"] = report["max_rss_kb"]
    stdout = bytes(buffers[stdout_r][:max_output])
    if kind == "stdin":
        if len(stdout) > compare_bytes:  # far longer than the expected output: sent truncated, not compared
            answer["stdout_truncated"] = True
            stdout = stdout[:STDERR_KEEP_BYTES]
        answer["stdout"] = stdout.decode("utf-8", errors="replace")
    else:
        result = _inside.last_frame(stdout, b"R", max_output)
        if result is not None and len(result) > compare_bytes:
            answer["result_truncated"] = True
        elif result is not None:
            answer["result"] = result.decode("utf-8", errors="replace")
    return answer


def _compile(job):
    """The program (and the prelude), compiled here, in the checker: a compile error is the compiler's."""
    try:
        _inside.show_in_tracebacks("<program>", job["program"])
        code = compile(job["program"], "<program>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as error:
        job["compile_error"] = f"{type(error).__name__}: {error}"
        return None, None
    prelude = None
    if job.get("prelude"):
        _inside.show_in_tracebacks("<prelude>", job["prelude"])
        prelude = compile(job["prelude"], "<prelude>", "exec", dont_inherit=True)
    return code, prelude


def serve(job, control, in_pid_namespace, isolation):
    # Not dumpable: a test process of the same uid (limits-only mode, a caller that is not root) can neither
    # ptrace this process nor open its /proc files.
    _prctl(PR_SET_DUMPABLE, 0)
    code, prelude = _compile(job)
    # Everything this interpreter holds now goes to the collector's permanent generation: a test process's
    # garbage collections then never walk (and so never copy-on-write) the pages it shares with this one.
    gc.freeze()
    zygote = None
    if code is not None:
        assert not control.pending(), "the caller sent a test before the harness was ready"
        zygote = Zygote(job, code, prelude, new_pid_namespace=in_pid_namespace)
    watched = zygote is not None and zygote.pid is not None and os.path.exists(f"/proc/{zygote.pid}/task")
    if job.get("groups") is not None:
        bound = job["groups"].kind  # "cgroup_v2" or "cgroup_v1": a fresh memory and pids group per test
    else:
        bound = "per_program_watchdog" if watched else "per_process_rlimit"
    control.send(
        {
            "event": "ready",
            **isolation,
            "zygote": zygote.kind if zygote else None,
            "memory_bound": bound,
            "cgroup_reason": job.get("cgroup_reason"),
        }
    )
    try:
        while True:
            message = control.receive()
            if message is None or message.get("op") != "run":
                break
            answer = run_one_test(job, control, message, zygote)
            if answer["caller_gone"]:
                break
            control.send(answer)
    finally:
        if zygote is not None:
            zygote.close()
            if zygote.pending_space is not None:
                zygote.pending_space.close()


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


# What the new root holds besides the interpreter's own directories, each bound read-only where the host has it:
# the system's programs and libraries (or the links to them), and the few files of /etc that the dynamic loader
# and the C library read. Nothing else of the host: no /tmp, /run, /var, /home, /root, /sys or /mnt, so no path of a
# host Unix socket, no host file a program could read beyond these.
NEW_ROOT_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
NEW_ROOT_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
)
NEW_ROOT_DEVICES = ("null", "zero", "full", "random", "urandom")
_STATVFS_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME,
                  4096: MS_RELATIME}


def _bind_read_only(source, target, failures):
    """Bind ``source`` at ``target`` (made in the new root, as a folder or an empty file), then make that bind
    read-only, keeping the flags the host's mount locks (nosuid, nodev, noexec, atime)."""
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    _mount(source, target, None, MS_BIND)
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
    kept = os.statvfs(target).f_flag
    for bit, flag in _STATVFS_FLAGS.items():
        if kept & bit:
            flags |= flag
    try:
        _mount(None, target, None, flags)
    except OSError as error:
        failures.append(f"{source}: {error.strerror}")


def _pivot_root(new_root):
    """Make ``new_root`` this mount namespace's root and detach the old one (``pivot_root(".", ".")``)."""
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"no pivot_root system call number known for {os.uname().machine}")
    os.chdir(new_root)
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")


def _enter_new_root(root):
    """B2: build a new root in a tmpfs mounted at ``root`` (the program's host folder, an empty mount point) and
    pivot into it. It holds the interpreter's directories and the system's libraries bound read-only, a few device
    nodes, a fresh /proc, and empty mount points for each test's fresh folder (/box, /tmp, /dev/shm: see
    :class:`TestSpace`); the tmpfs itself is then made read-only. Returns the binds that could not be made
    read-only and what /proc shows."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=755")
    failures = []
    for path in NEW_ROOT_SYSTEM:
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            _bind_read_only(path, root + path, failures)
    for path in _interpreter_paths():
        if not os.path.exists(root + path) or not any(
            path == system or path.startswith(system + "/") for system in NEW_ROOT_SYSTEM
        ):
            _bind_read_only(path, root + path, failures)
    for path in NEW_ROOT_ETC:
        if os.path.exists(path):
            _bind_read_only(os.path.realpath(path), root + path, failures)
    os.makedirs(root + "/dev/shm", mode=0o755)
    for device in NEW_ROOT_DEVICES:
        if os.path.exists(f"/dev/{device}"):
            os.close(os.open(f"{root}/dev/{device}", os.O_CREAT | os.O_WRONLY, 0o666))
            _mount(f"/dev/{device}", f"{root}/dev/{device}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    for folder in (TestSpace.BOX, "/tmp", TestSpace._STAGE):
        os.makedirs(root + folder, mode=0o755, exist_ok=True)
    os.makedirs(root + "/proc", mode=0o555)
    try:
        # while the host's /proc is still in this mount namespace: the kernel allows a new one only then
        _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        proc = "fresh"
    except OSError:
        # Refused where the host's /proc has masked paths (Docker): an empty one instead of the host's.
        _mount("tmpfs", root + "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=555")
        proc = "hidden"
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _pivot_root(root)
    return failures, proc


def _write_map(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def _serve_as_namespace_init(job, control, setup_w):
    """B2, PID 1 of the new namespaces (uid 0 there): confine the filesystem, report to B0, serve."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    job["run_as_uid"] = NAMESPACE_UID if job.get("sandbox_uid") is not None else None
    # the user keyrings in this user namespace are its own (Linux 5.3 and later), never the caller's
    job["seal_user_keyrings"] = job["run_as_uid"] is not None or _kernel_at_least(5, 3)
    try:
        failures, proc = _enter_new_root(job["workdir"])
        job["new_root"] = True
        os.environ["HOME"] = os.environ["TMPDIR"] = TestSpace.BOX
        # no user namespace below this one: a test process cannot mount a filesystem of its own, nor make
        # the namespaces that a mount needs
        with contextlib.suppress(OSError), open("/proc/sys/user/max_user_namespaces", "w") as setting:
            setting.write("0")
        socket.sethostname("sandbox")
    except BaseException as error:  # noqa: BLE001 - reported to B0, which serves without isolation
        _write_all(setup_w, b"0" + f"{type(error).__name__}: {error}".encode(errors="replace"))
        _exit(1)
    _write_all(setup_w, b"1")
    os.close(setup_w)
    isolation = {
        "isolated": True,
        "reason": None,
        "new_root": True,
        "readonly_failures": failures,
        "proc": proc,
        "network_reachable": _network_reachable(),
    }
    serve(job, control, True, isolation)
    _exit(0)


def _become_root_when_mapped(go_r):
    """In the new user namespace: wait until B0 wrote the uid/gid maps, then take uid and gid 0 there."""
    if _read(go_r, 1) != b"1":
        _exit(1)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)


def _clone_into_namespaces(flags):
    """``clone(flags)`` (new namespaces) with fork's semantics: ``(0, 0)`` in the child, ``(pid, 0)`` in the
    parent, ``(-1, errno)`` where refused; ``None`` where this machine's clone(2) is not known here. Only for a
    single-threaded process (B0 and the checker are): the child skips Python's after-fork bookkeeping, which
    matters only to other threads and to ``os.register_at_fork`` hooks, and every process it forks with
    ``os.fork`` runs those hooks again."""
    number = SYS_CLONE.get(os.uname().machine)
    if number is None:
        return None
    pid = _libc_gil_held.syscall(
        ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD), None, None, None, None
    )
    return (pid, ctypes.get_errno()) if pid < 0 else (pid, 0)


def isolate_and_serve(job, control):
    """B0: create B2 in new namespaces (one clone, or through B1 where clone(2) is unknown here), map its
    ids, wait. Returns the reason if namespaces are refused."""
    ready_r, ready_w = os.pipe()  # B1 -> B0: unshare done (b"1") or refused (b"0" + reason)
    go_r, go_w = os.pipe()  # B0 -> B1 or B2: maps written
    setup_r, setup_w = os.pipe()  # B2 -> B0: confined and serving (b"1") or failed (b"0" + reason)
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    cloned = _clone_into_namespaces(flags)
    if cloned is not None:
        pid, code = cloned
        if pid == 0:  # B2, made directly: PID 1 of the new namespaces
            try:
                for fd in (ready_r, ready_w, go_w, setup_r):
                    os.close(fd)
                _become_root_when_mapped(go_r)
                _serve_as_namespace_init(job, control, setup_w)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            _exit(1)
        os.close(ready_r)
        os.close(ready_w)
        answer = b"1" if pid > 0 else b"0" + os.strerror(code).encode()
    else:
        pid = os.fork()
        if pid == 0:  # B1
            os.close(ready_r)
            os.close(go_w)
            os.close(setup_r)
            if _libc.unshare(flags) != 0:
                reason = os.strerror(ctypes.get_errno())
                _write_all(ready_w, b"0" + reason.encode())
                _exit(0)
            _write_all(ready_w, b"1")
            os.close(ready_w)
            try:
                _become_root_when_mapped(go_r)
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # set after the credential change, which clears it
                init = os.fork()
                if init == 0:  # B2: PID 1 of the new namespace
                    _serve_as_namespace_init(job, control, setup_w)
                os.close(setup_w)
                _, status = os.waitpid(init, 0)
                _exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                _exit(1)
        os.close(ready_w)
        answer = b""
        while True:
            chunk = _read(ready_r, 4096)
            if not chunk:
                break
            answer += chunk
            if answer[:1] == b"1":
                break
    os.close(go_r)
    if answer[:1] != b"1":
        if pid > 0:
            os.waitpid(pid, 0)
        os.close(setup_r)
        os.close(setup_w)
        os.close(go_w)
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
        os.close(go_w)
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
    _remove_workdir(job)
    _exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _remove_workdir(job):
    """B0 removes the program's folder and groups when it ends, so that none is left when the caller died first
    (never raising: what cannot be removed is left to the caller's own removal, which counts it)."""
    _removal.remove_tree(job["workdir"])
    if job.get("groups") is not None:
        job["groups"].remove()


def _fresh_uid():
    """A random unprivileged host uid (as the caller picks one per sandbox: see sandbox._fresh_sandbox_uid)."""
    return 1_000_000 + secrets.randbelow(1_000_000_000)


def _kernel_at_least(major, minor):
    try:
        found = tuple(int(part) for part in os.uname().release.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return found >= (major, minor)


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
    "mmap",
    "operator",
    "queue",
    "random",
    "re",
    "string",
    "struct",
    "tempfile",
    "typing",
]


def _preload():
    for name in (*PRELOADED_MODULES, *_inside.GRADER_MODULES):
        with contextlib.suppress(ImportError):
            __import__(name)


def _safe_path(workdir):
    """``sys.path`` without any entry the program could write to: no relative entry (the current folder),
    nothing inside its folder. Imports the harness or the grader makes resolve only from the interpreter's
    own directories and site-packages (read-only under isolation)."""
    folder = os.path.realpath(workdir)
    sys.path[:] = [
        path
        for path in sys.path
        if path and os.path.isabs(path) and not (os.path.realpath(path) + "/").startswith(folder + "/")
    ]


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
    _safe_path(job["workdir"])
    if os.getuid() != 0:  # counted here, in the host's PID namespace, where the kernel counts them
        job["existing_processes"] = _processes_of(os.getuid())
    os.environ["HOME"] = os.environ["TMPDIR"] = job["workdir"]
    job["groups"] = None
    if job.get("cgroups", "auto") != "none":
        job["groups"], job["cgroup_reason"] = _groups.ProgramGroups.create()
    else:
        job["cgroup_reason"] = "memory groups disabled by the caller"
    job["memory_group"] = job["groups"] is not None
    reason = "isolation disabled by the caller"
    if job.get("isolate"):
        reason = isolate_and_serve(job, control)  # returns only if the namespaces were refused
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if job.get("sandbox_uid") is not None and os.geteuid() == 0:
        job["run_as_uid"] = job["sandbox_uid"]
    else:
        job["run_as_uid"] = None
    job["new_root"] = False
    # A root caller's tests each run as a fresh uid (TestSpace), which the folder lets through; the caller's uid's
    # user keyrings are the caller's: never touched.
    job["fresh_uid_per_test"] = job["run_as_uid"] is not None
    job["seal_user_keyrings"] = False
    if job["fresh_uid_per_test"]:
        os.chmod(job["workdir"], 0o711)
    try:
        serve(
            job,
            control,
            False,
            {"isolated": False, "reason": reason, "readonly_failures": [], "network_reachable": None},
        )
    finally:
        _remove_workdir(job)


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
