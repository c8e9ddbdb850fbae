"""Control groups that bound what a program's processes hold: memory (every page they make the kernel keep,
whoever maps it: anonymous, shared memory, tmpfs and memfd files, SysV segments) and the number of processes.

Standard library only, loaded by path by the harness. The harness's first process (B0, in the host's namespaces)
makes one group per program with :meth:`ProgramGroups.create`, under the group it runs in; the checker makes a
fresh child group per test (:meth:`ProgramGroups.new_test`) and hands the program's process the descriptors of its
``tasks`` (v1) or ``cgroup.procs`` (v2) files, through which it moves itself in before it drops its privileges (a
write of ``0``: no pid
crosses a namespace). Pages are charged to the group of the process that makes them, so a page shared by
copy-on-write with the checker is not charged again, and a page a test makes is charged once, to that test.

Where the unified hierarchy (cgroup v2) has the ``memory`` and ``pids`` controllers, it is used (``memory.max``,
``memory.swap.max`` 0, ``pids.max``; events from ``memory.events``); otherwise the legacy hierarchies (cgroup v1:
``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes`` where swap accounting is on, ``pids.max``; events from
``memory.oom_control``'s ``oom_kill`` and ``memory.failcnt``). ``HF_MEDS_CLIFF_CGROUP_PARENT`` names another
parent (a folder of the unified hierarchy delegated to this user, or of the legacy memory hierarchy).
"""

import contextlib
import os
import secrets
import time

_PARENT_VARIABLE = "HF_MEDS_CLIFF_CGROUP_PARENT"


def _read(path, dir_fd=None):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


def _write(path, text, dir_fd=None):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mounts():
    """(fstype, mount point, super options) of every cgroup mount this process sees."""
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            separator = fields.index("-")
            fstype, options = fields[separator + 1], fields[separator + 3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((fstype, fields[4].encode().decode("unicode_escape"), options.split(",")))
    return found


def _own_paths():
    """This process's group per hierarchy: ``{"": path}`` for v2 and ``{controller: path}`` for v1."""
    paths = {}
    with open("/proc/self/cgroup") as groups:
        for line in groups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path
    return paths


def _counters(text):
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


class TestGroup:
    """One test's group: its name, and the ``tasks``/``cgroup.procs`` descriptors the program's process writes to."""

    __test__ = False

    def __init__(self, name, procs_fds):
        self.name, self.procs_fds = name, procs_fds

    def close_procs(self):
        for fd in self.procs_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.procs_fds = []


class ProgramGroups:
    """The groups of one program: ``kind`` is ``"cgroup_v2"`` or ``"cgroup_v1"``; ``fds`` holds an open
    descriptor of each of its folders (usable after the checker's root changed); ``paths`` their paths in the
    host's view, for :meth:`remove`."""

    def __init__(self, kind, paths, fds):
        self.kind, self.paths, self.fds = kind, paths, fds
        self.tests = 0

    @classmethod
    def create(cls):
        """The program's groups, or ``(None, reason)`` where no writable hierarchy has the controllers."""
        reasons = []
        for make in (cls._create_v2, cls._create_v1):
            try:
                made = make()
            except OSError as error:
                reasons.append(f"{make.__name__[8:]}: {error}")
                continue
            if isinstance(made, str):
                reasons.append(made)
            else:
                return made, None
        return None, "; ".join(reasons)

    @classmethod
    def _create_v2(cls):
        unified = [point for fstype, point, _ in _mounts() if fstype == "cgroup2"]
        if not unified:
            return "v2: no unified hierarchy is mounted"
        parent = os.environ.get(_PARENT_VARIABLE)
        if not parent:
            parent = unified[0] + _own_paths().get("", "/")
        controllers = _read(os.path.join(parent, "cgroup.controllers")).split()
        if not {"memory", "pids"} <= set(controllers):
            return f"v2: {parent} has the controllers {controllers}, not memory and pids"
        enabled = _read(os.path.join(parent, "cgroup.subtree_control")).split()
        if not {"memory", "pids"} <= set(enabled):
            # Refused (EBUSY) when the parent holds processes itself, as the caller's own group does: name a
            # delegated parent in HF_MEDS_CLIFF_CGROUP_PARENT instead.
            _write(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
        path = os.path.join(parent, f"hf-meds-cliff-{os.getpid()}-{secrets.token_hex(4)}")
        os.mkdir(path)
        try:
            _write(os.path.join(path, "cgroup.subtree_control"), "+memory +pids")
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            raise
        return cls("cgroup_v2", [path], [fd])

    @classmethod
    def _create_v1(cls):
        points = {}
        for fstype, point, options in _mounts():
            if fstype == "cgroup":
                for controller in ("memory", "pids"):
                    if controller in options:
                        points[controller] = point
        if set(points) != {"memory", "pids"}:
            return f"v1: the memory and pids hierarchies are not both mounted (found {sorted(points)})"
        own = _own_paths()
        name = f"hf-meds-cliff-{os.getpid()}-{secrets.token_hex(4)}"
        paths, fds = [], []
        try:
            for controller in ("memory", "pids"):
                parent = points[controller] + own.get(controller, "/")
                if controller == "memory" and os.environ.get(_PARENT_VARIABLE, "").startswith(
                    points["memory"]
                ):
                    parent = os.environ[_PARENT_VARIABLE]
                path = os.path.join(parent, name)
                os.mkdir(path)
                paths.append(path)
                fds.append(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
        except OSError:
            for fd in fds:
                os.close(fd)
            for path in reversed(paths):
                with contextlib.suppress(OSError):
                    os.rmdir(path)
            raise
        return cls("cgroup_v1", paths, fds)

    def new_test(self, memory_bytes, max_processes):
        """A fresh group for the next test, with its limits set; the descriptors through which a process moves itself
        in (v1: ``tasks``, v2: ``cgroup.procs``)."""
        self.tests += 1
        name = f"test-{self.tests}"
        procs = []
        made = []
        try:
            for index, fd in enumerate(self.fds):
                os.mkdir(name, dir_fd=fd)
                made.append(fd)
                if self.kind == "cgroup_v2":
                    _write(f"{name}/memory.max", str(memory_bytes), fd)
                    with contextlib.suppress(FileNotFoundError):  # no swap accounting: nothing to swap to
                        _write(f"{name}/memory.swap.max", "0", fd)
                    _write(f"{name}/pids.max", str(max_processes), fd)
                elif index == 0:  # v1 memory
                    _write(f"{name}/memory.limit_in_bytes", str(memory_bytes), fd)
                    with contextlib.suppress(FileNotFoundError):  # swap accounting off: nothing more to bound
                        _write(f"{name}/memory.memsw.limit_in_bytes", str(memory_bytes), fd)
                else:  # v1 pids
                    _write(f"{name}/pids.max", str(max_processes), fd)
                # v1: the "tasks" file. Written "0" by the program's process, still single-threaded, it moves that
                # one thread, which the kernel does without the global lock that a move through "cgroup.procs" takes
                # (and waits an RCU grace period for: 5-15 ms measured here, against 0.05 ms).
                entry = "cgroup.procs" if self.kind == "cgroup_v2" else "tasks"
                procs.append(os.open(f"{name}/{entry}", os.O_WRONLY | os.O_CLOEXEC, dir_fd=fd))
        except OSError:
            for procs_fd in procs:
                os.close(procs_fd)
            for fd in made:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=fd)
            raise
        return TestGroup(name, procs)

    def memory_events(self, test):
        """The memory events the kernel recorded in ``test``'s group: ``oom_kill`` (processes the kernel killed
        for the group's limit) and ``limit_hits`` (charges that met the limit)."""
        fd = self.fds[0]
        try:
            if self.kind == "cgroup_v2":
                events = _counters(_read(f"{test.name}/memory.events", fd))
                return {"oom_kill": events.get("oom_kill", 0), "limit_hits": events.get("max", 0)}
            oom = _counters(_read(f"{test.name}/memory.oom_control", fd))
            hits = int(_read(f"{test.name}/memory.failcnt", fd) or 0)
            with contextlib.suppress(FileNotFoundError, ValueError):
                hits += int(_read(f"{test.name}/memory.memsw.failcnt", fd) or 0)
            return {"oom_kill": oom.get("oom_kill", 0), "limit_hits": hits}
        except OSError:
            return {"oom_kill": 0, "limit_hits": 0}

    def kill_and_remove(self, test, patience=2.0):
        """Kill whatever is left in ``test``'s group and remove it; False if it could not be removed in time."""
        test.close_procs()
        deadline = time.monotonic() + patience
        removed = [False] * len(self.fds)
        while True:
            for index, fd in enumerate(self.fds):
                if removed[index]:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    for pid in _read(f"{test.name}/cgroup.procs", fd).split():
                        with contextlib.suppress(OSError):
                            os.kill(int(pid), 9)
                try:
                    os.rmdir(test.name, dir_fd=fd)
                    removed[index] = True
                except FileNotFoundError:
                    removed[index] = True
                except OSError:
                    pass
            if all(removed) or time.monotonic() > deadline:
                return all(removed)
            time.sleep(0.002)

    def remove(self):
        """B0, when the program ended: remove every test group left and the program's own; the number of folders
        that could not be removed."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []
        failures = 0
        for path in self.paths:
            with contextlib.suppress(OSError):
                for name in os.listdir(path):
                    if name.startswith("test-") and os.path.isdir(os.path.join(path, name)):
                        if not _rmdir_patiently(os.path.join(path, name)):
                            failures += 1
            if not _rmdir_patiently(path):
                failures += 1
        return failures


def _rmdir_patiently(path, patience=2.0):
    deadline = time.monotonic() + patience
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
