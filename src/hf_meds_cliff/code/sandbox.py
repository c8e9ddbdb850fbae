"""The caller's side of the sandbox: limits, and one harness process per program.

Every untrusted program runs in :mod:`hf_meds_cliff.code._harness`, started here as a fresh interpreter
(``python -I -B``) in its own temporary folder with a minimal environment, in its own session. The
harness isolates itself in new namespaces when the OS allows it; the caller only talks to it over two
pipes, enforces an outer deadline on every answer, and kills the harness's whole process group when a
deadline passes or the run ends. docs/code_sandbox.md describes the threat model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import select
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from ._removal import remove_tree

logger = logging.getLogger(__name__)

HARNESS_PATH = str(Path(__file__).with_name("_harness.py"))
ISOLATION_MODES: tuple[str, ...] = ("auto", "required", "none")
CGROUP_MODES: tuple[str, ...] = ("auto", "required", "none")
# Set to "none" to forbid memory groups in every sandbox of this process (the conservative fallback runs).
CGROUPS_VARIABLE = "HF_MEDS_CLIFF_SANDBOX_CGROUPS"
START_METHODS: tuple[str, ...] = ("fork_server", "exec")
_HARNESS_GRACE_S = 5.0  # on top of a test's own timeout: the harness's kill-and-reap, process start-up


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Limits of one program's run; every test runs in a fresh process under them.

    Args:
        timeout_s: wall-clock limit of one test (seconds).
        cpu_time_s: CPU-time limit of one test (seconds, rounded up to whole seconds by the kernel's
            ``RLIMIT_CPU``); ``None``: the same as ``timeout_s``.
        memory_mb: address-space limit of each process (``RLIMIT_AS``, MiB).
        file_size_mb: largest file a program may write (``RLIMIT_FSIZE``, MiB).
        max_open_files: open descriptors per process (``RLIMIT_NOFILE``).
        max_output_bytes: stdout (or a functional result) beyond this fails the test.
        max_processes: processes per sandbox (``RLIMIT_NPROC``; exact when the caller is root, who runs
            every sandbox under its own fresh uid; otherwise added to the user's existing processes).
        workdir_size_mb: size of the program's folder, a tmpfs of its own under isolation (without
            isolation it is a folder on the host's temporary disk, bounded only by ``file_size_mb`` per file).
        isolation: ``"auto"`` (namespaces where the OS allows, else limits only with one warning and
            ``TestRunResult.isolated`` false), ``"required"`` (no namespaces: every test is a
            ``sandbox_error``), ``"none"`` (limits only).
        cgroups: ``"auto"`` (a fresh memory and pids control group per test where one is writable: cgroup v2, or
            v1's memory and pids hierarchies; every page the test's processes make is charged to it, and a
            ``memory_limit`` is the kernel's own event; elsewhere the conservative fallback of
            ``TestRunResult.memory_bound``), ``"required"`` (no writable group: every test is a ``sandbox_error``),
            ``"none"`` (never a group: the fallback). The environment variable ``HF_MEDS_CLIFF_SANDBOX_CGROUPS=none``
            forbids groups whatever this says.
        start_method: ``"fork_server"`` (each program's harness is forked from a pristine template process
            that never runs programs: no interpreter start-up per program) or ``"exec"`` (a new interpreter
            per program).
        startup_timeout_s: bound on starting the harness and its namespaces.

    >>> SandboxLimits(timeout_s=2).effective_cpu_time_s
    2.0
    """

    timeout_s: float = 6.0
    cpu_time_s: float | None = None
    memory_mb: int = 1024
    file_size_mb: int = 16
    max_open_files: int = 64
    max_output_bytes: int = 8 * 1024 * 1024
    max_processes: int = 32
    workdir_size_mb: int = 64
    isolation: Literal["auto", "required", "none"] = "auto"
    cgroups: Literal["auto", "required", "none"] = "auto"
    start_method: Literal["fork_server", "exec"] = "fork_server"
    startup_timeout_s: float = 20.0

    def __post_init__(self):
        for name in ("timeout_s", "startup_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"SandboxLimits {name}={value!r} must be a positive number of seconds.")
        if self.cpu_time_s is not None and not (
            isinstance(self.cpu_time_s, (int, float)) and self.cpu_time_s > 0
        ):
            raise ValueError(
                f"SandboxLimits cpu_time_s={self.cpu_time_s!r} must be positive seconds, or None."
            )
        for name in (
            "memory_mb",
            "file_size_mb",
            "max_open_files",
            "max_output_bytes",
            "max_processes",
            "workdir_size_mb",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SandboxLimits {name}={value!r} must be a positive integer.")
        if self.memory_mb < 64:
            raise ValueError(
                f"SandboxLimits memory_mb={self.memory_mb} is too small for a Python process; use >= 64."
            )
        if self.max_open_files < 16:
            raise ValueError(f"SandboxLimits max_open_files={self.max_open_files} is too small; use >= 16.")
        if self.start_method not in START_METHODS:
            raise ValueError(
                f"SandboxLimits start_method={self.start_method!r} must be one of {START_METHODS}."
            )
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"SandboxLimits isolation={self.isolation!r} must be one of {ISOLATION_MODES}.")
        if self.cgroups not in CGROUP_MODES:
            raise ValueError(f"SandboxLimits cgroups={self.cgroups!r} must be one of {CGROUP_MODES}.")

    @property
    def effective_cgroups(self) -> str:
        """``cgroups``, or ``"none"`` where ``HF_MEDS_CLIFF_SANDBOX_CGROUPS=none`` forbids groups."""
        return "none" if os.environ.get(CGROUPS_VARIABLE, "").strip().lower() == "none" else self.cgroups

    @property
    def effective_cpu_time_s(self) -> float:
        return float(self.cpu_time_s if self.cpu_time_s is not None else self.timeout_s)

    def harness_limits(self) -> dict[str, Any]:
        return {
            "timeout_s": float(self.timeout_s),
            "cpu_time_s": self.effective_cpu_time_s,
            "memory_mb": self.memory_mb,
            "file_size_mb": self.file_size_mb,
            "max_open_files": self.max_open_files,
            "max_output_bytes": self.max_output_bytes,
            "max_processes": self.max_processes,
            "workdir_size_mb": self.workdir_size_mb,
        }


_SAFE_ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def sandbox_environment(workdir: str) -> dict[str, str]:
    """The whole environment a program sees: fixed values, nothing inherited from the caller (no tokens,
    keys, secrets, ``HF_*`` or proxy settings)."""
    return {**_SAFE_ENVIRONMENT, "HOME": workdir, "TMPDIR": workdir}


_warned_lock = threading.Lock()
_warned_not_isolated = False


def _warn_not_isolated(reason: str) -> None:
    global _warned_not_isolated
    with _warned_lock:
        if _warned_not_isolated:
            return
        _warned_not_isolated = True
    logger.warning(
        "Code sandbox: namespaces are unavailable (%s); programs run with resource limits only, without "
        "network/filesystem/process isolation. TestRunResult.isolated is False and CodeTestsReward logs "
        "code/not_isolated_frac. Set SandboxLimits(isolation='required') to refuse such runs.",
        reason,
    )


class SandboxError(RuntimeError):
    """The harness failed (not the program): it died, broke the protocol or missed its deadline."""


class _ForkServer:
    """The caller's connection to the harness's fork server (see ``_harness.fork_server``): one per
    process, started on first use, restarted when it fails or after a fork of the caller."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        folder = tempfile.gettempdir()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", HARNESS_PATH, "--fork-server", str(theirs.fileno())],
                stdin=subprocess.PIPE,  # never written: its end of file tells the server that we are gone
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                cwd=folder,
                env=sandbox_environment(folder),
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.socket = ours
        self.owner_pid = os.getpid()
        self.lock = threading.Lock()

    def fork(self, fds: list[int], timeout: float) -> int:
        with self.lock:
            self.socket.settimeout(timeout)
            socket.send_fds(self.socket, [b"fork"], fds)
            reply = self.socket.recv(64)
        pid = int(reply) if reply else -1
        if pid <= 0:
            raise OSError(f"the fork server answered {reply!r}")
        return pid

    def close(self) -> None:
        self.socket.close()
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=1.0)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self.process.kill()


_fork_server: _ForkServer | None = None
_fork_server_lock = threading.Lock()


def _fork_harness(fds: list[int], timeout: float) -> int | None:
    """B0's pid, forked by the fork server; ``None`` if the server cannot (the caller then execs one)."""
    global _fork_server
    for _attempt in range(2):
        with _fork_server_lock:
            if (
                _fork_server is None
                or _fork_server.owner_pid != os.getpid()
                or _fork_server.process.poll() is not None
            ):
                try:
                    _fork_server = _ForkServer()
                except OSError as error:
                    logger.warning(
                        "Code sandbox: the fork server does not start (%s); starting interpreters.", error
                    )
                    return None
            server = _fork_server
        try:
            return server.fork(fds, timeout)
        except (OSError, ValueError) as error:
            logger.warning("Code sandbox: the fork server failed (%s); restarting it.", error)
            with _fork_server_lock:
                if _fork_server is server:
                    _fork_server = None
            server.close()
    return None


class HarnessProcess:
    """One harness process (B0) serving the tests of one program; use as a context manager.

    B0 is forked from a pristine fork server (``start_method="fork_server"``, the default: no program ever
    ran in the server) or started as a new interpreter (``"exec"``); either way it leads a session of its
    own. ``start(job)`` sends the job and returns the harness's ready message (``isolated``, ``reason``);
    ``run(input)`` returns the raw answer of one test; ``close()`` ends the session (killing its whole
    process group if it does not end by itself) and removes the folder.
    """

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        self.workdir = tempfile.mkdtemp(prefix="hf-meds-cliff-code-")
        # As root, every sandbox runs its tests under a fresh unprivileged uid: file permissions apply,
        # and RLIMIT_NPROC (which never binds root) bounds its processes alone.
        self.sandbox_uid = _fresh_sandbox_uid()
        if self.sandbox_uid is not None:
            os.chown(self.workdir, self.sandbox_uid, self.sandbox_uid)
        os.chmod(self.workdir, 0o700)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process; closed in close()
        self._buffer = b""
        self._closing_at: float | None = None  # when end_input closed the harness's input
        self.removal_failures = 0  # entries of its folder the caller could not remove (see wait_closed)
        self._popen: subprocess.Popen | None = None
        job_read, self._to_harness = os.pipe()
        self._from_harness, answer_write = os.pipe()
        try:
            pid = None
            if limits.start_method == "fork_server":
                pid = _fork_harness([job_read, answer_write, self._stderr.fileno()], limits.startup_timeout_s)
            if pid is None:
                self._popen = subprocess.Popen(
                    # -S: no site module (no .pth files run at start-up); the harness adds the
                    # site-packages directories from the job
                    [sys.executable, "-I", "-S", "-B", HARNESS_PATH],
                    stdin=job_read,
                    stdout=answer_write,
                    stderr=self._stderr,
                    cwd=self.workdir,
                    env=sandbox_environment(self.workdir),
                    start_new_session=True,
                )
                pid = self._popen.pid
            self.pid = pid
        except BaseException:
            for fd in (self._to_harness, self._from_harness):
                os.close(fd)
            self._stderr.close()
            _remove_tree(self.workdir)
            raise
        finally:
            os.close(job_read)
            os.close(answer_write)

    def __enter__(self) -> HarnessProcess:  # noqa: PYI034
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start(self, job: dict[str, Any]) -> dict[str, Any]:
        job = {
            **job,
            "workdir": self.workdir,
            "sandbox_uid": self.sandbox_uid,
            "isolate": self.limits.isolation != "none",
            "cgroups": self.limits.effective_cgroups,
            "site_packages": _site_packages(),
            "limits": self.limits.harness_limits(),
        }
        self._send(job)
        return self._receive(time.monotonic() + self.limits.startup_timeout_s)

    def run(self, case_input: Any, compare_bytes: int | None = None) -> dict[str, Any]:
        """The raw answer of one test. ``compare_bytes``: the most of its stdout (after stripping) or of its
        functional result that the harness sends back; a longer one comes back truncated and flagged."""
        self._send({"op": "run", "input": case_input, "compare_bytes": compare_bytes})
        return self._receive(time.monotonic() + self.limits.timeout_s + _HARNESS_GRACE_S)

    def _send(self, message: dict[str, Any]) -> None:
        data = memoryview(json.dumps(message).encode() + b"\n")
        try:
            while data:
                data = data[os.write(self._to_harness, data) :]
        except OSError as error:
            raise SandboxError(f"the harness is gone ({error}){self._diagnostics()}") from None

    def _receive(self, deadline: float) -> dict[str, Any]:
        """One answer line. Linear in what arrives (each chunk is searched once for the end of the line) and
        capped: a line longer than :meth:`_max_line_bytes` is the harness's failure, read no further."""
        chunks, size = [], 0
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = b"".join(chunks) + self._buffer[:newline]
                self._buffer = self._buffer[newline + 1 :]
                break
            chunks.append(self._buffer)
            size += len(self._buffer)
            self._buffer = b""
            if size > self._max_line_bytes():
                raise SandboxError(f"the harness sent an answer over {self._max_line_bytes()} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError("the harness missed its deadline")
            ready, _, _ = select.select([self._from_harness], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._from_harness, 1 << 20)
            if not chunk:
                raise SandboxError(f"the harness exited{self._diagnostics()}")
            self._buffer = chunk
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise SandboxError(f"the harness sent a malformed answer: {line[:200]!r}") from None

    def _max_line_bytes(self) -> int:
        # An answer carries at most max_output_bytes of output, each byte at most 6 in JSON (\u00XX), and
        # small fields besides.
        return 6 * self.limits.max_output_bytes + (1 << 20)

    def _diagnostics(self) -> str:
        try:
            self._stderr.seek(0)
            text = self._stderr.read()[-2000:].decode("utf-8", errors="replace").strip()
        except (OSError, ValueError):
            return ""
        return f": {text}" if text else ""

    def _ended(self, deadline: float) -> bool:
        """Whether every holder of the answer pipe (B0, B2, and B1 where it exists) is gone by ``deadline``."""
        while (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._from_harness], [], [], remaining)
            if ready and not os.read(self._from_harness, 1 << 16):
                return True
        return False

    def close(self) -> None:
        self.wait_closed()

    def end_input(self) -> None:
        """Close the harness's input: it (or its namespace init) exits on end of input, on its own."""
        if self._closing_at is None:
            self._closing_at = time.monotonic()
            with contextlib.suppress(OSError):
                os.close(self._to_harness)

    def wait_closed(self, grace_s: float = 1.0) -> None:
        """End its input (if :meth:`end_input` has not), wait until the harness is gone, at most ``grace_s`` from
        the end of its input, then kill its whole session if it is not; free the descriptors and remove the
        folder."""
        try:
            self.end_input()
            if not self._ended(self._closing_at + grace_s):
                # Its session is still alive, so its id is not reused: kill all of it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
            if self._popen is not None:
                self._popen.wait()
        except Exception as error:  # noqa: BLE001 - logged; the caller never raises for a program's sandbox
            logger.warning("Code sandbox: waiting for a harness to end failed (%s); killing its session.", error)
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        finally:
            with contextlib.suppress(OSError):
                os.close(self._from_harness)
            with contextlib.suppress(OSError, ValueError):
                self._stderr.close()
            self.removal_failures = _remove_tree(self.workdir)


def _fresh_sandbox_uid() -> int | None:
    """A random unprivileged host uid for one sandbox when the caller is root (who may map and switch to
    it), else ``None`` (tests then run as the caller's uid, without capabilities)."""
    return 1_000_000 + secrets.randbelow(1_000_000_000) if os.geteuid() == 0 else None


def _site_packages() -> list[str]:
    """This interpreter's site-packages directories (the harness starts without the site module)."""
    return [path for path in site.getsitepackages() if os.path.isdir(path)]


_removal_failures_lock = threading.Lock()
_removal_failures = 0


def removal_failures() -> int:
    """How many entries of programs' folders this process could not remove so far (the caller's own removal of each
    program's folder, after the harness's; test folders the harness could not remove are counted per test, in
    ``TestRunResult.cleanup_failures``). Counted, never raised."""
    return _removal_failures


def _remove_tree(path: str) -> int:
    """Remove a program's folder (usually already removed by its harness) without recursion; count what remains."""
    global _removal_failures
    failures = remove_tree(path)
    if failures:
        with _removal_failures_lock:
            _removal_failures += failures
        logger.warning("Code sandbox: %d entries of %s could not be removed.", failures, path)
    return failures


_warned_writable = False


def warn_if_not_isolated(ready: dict[str, Any], limits: SandboxLimits) -> None:
    """One warning per process when isolation is missing (``auto``), or when some mounts stay writable."""
    global _warned_writable
    if not ready.get("isolated") and limits.isolation == "auto":
        _warn_not_isolated(str(ready.get("reason")))
    if ready.get("isolated") and ready.get("readonly_failures"):
        with _warned_lock:
            if _warned_writable:
                return
            _warned_writable = True
        logger.warning(
            "Code sandbox: these mounts could not be made read-only, so programs may write there: %s",
            "; ".join(ready["readonly_failures"][:10]),
        )
