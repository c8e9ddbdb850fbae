"""What runs inside the test processes of the sandbox, once ``_harness.py`` has set them up: the program's
runtime (in the program's process P) and the assert checker (in the grader's process G).

Standard library only, loaded by path by the harness (before any job is read). See ``_harness.py`` for the
process tree and the descriptors each process holds.

**P** holds exactly descriptors 0, 1 and 2 (pipes to the checker). By test kind:

- *stdin*: the program runs on them as its own stdin, stdout and stderr (after the LiveCodeBench prelude).
- *functional*: P first reads one frame from fd 0 (the arguments, JSON), then runs the program with an
  empty stdin; what the program prints leaves fd 1 in ``O`` frames, and the return value, encoded with
  ``_wire``, in a last ``R`` frame.
- *assert*: P runs the program and the dataset's setup code, sends a manifest (``M``: the names of its
  functions, the standard modules it imported, its other plain values) and answers calls (``A`` frames) that
  arrive on fd 0, until fd 0 ends.

Frames are a 4-byte big-endian size, then a one-byte tag and the payload. Nothing P writes is a verdict: a
frame P forges is at most an answer the program could have given by returning it.

**G** runs the dataset's setup and test code with every function the program defined bound to a proxy that
calls P, the standard modules of :data:`GRADER_MODULES` that the program imported bound to the checker's own
(imported before any program ran: the grader never imports a name the program chose), and the program's other
plain values. Its outcome (``passed``; ``assertion``: an ``AssertionError`` raised by the test code's own
statement; ``error``: anything else, including every exception a call of the program raised) goes to fd 5,
which only G and the checker hold.
"""

import builtins
import collections
import contextlib
import io
import json
import linecache
import os
import sys
import traceback

# Captured before any program runs: a program may rebind os.read/os.write/os._exit, not these references.
_read, _write, _exit = os.read, os.write, os._exit
_CLEAN_BUILTINS = dict(builtins.__dict__)
_MemoryError = MemoryError  # captured: a program may rebind builtins.MemoryError
_OUTPUT_FRAME_BYTES = 1 << 16  # the program's prints leave in frames of at most this size

# The standard modules the grader binds under the program's alias (``import math as m``): its own copies,
# imported by the harness before any program ran. No other module name the program chose is ever imported.
GRADER_MODULES = (
    "array",
    "bisect",
    "cmath",
    "collections",
    "copy",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "itertools",
    "json",
    "math",
    "operator",
    "queue",
    "random",
    "re",
    "statistics",
    "string",
    "struct",
    "sys",
    "time",
    "typing",
)


def _load_wire():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_wire.py")
    spec = importlib.util.spec_from_file_location("hf_meds_cliff_sandbox_wire", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_wire = _load_wire()


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = _write(fd, view)
        view = view[written:]


def send_frame(fd, tag, payload):
    _write_all(fd, (len(payload) + 1).to_bytes(4, "big") + tag + payload)


class FrameError(ValueError):
    """Bytes that are not a frame, or a frame over the size limit."""


class OutputExceeded(Exception):
    """More bytes arrived than ``max_output_bytes``."""


class FrameReader:
    """Frames from a descriptor (or from bytes already read), split with an offset into a buffer read in large
    chunks: the work is linear in the bytes that arrive, whatever the sizes of the frames. ``max_total``
    bounds every byte read; ``skip`` tags are dropped (the program's prints)."""

    def __init__(self, fd, max_frame, max_total=None, skip=(), data=b""):
        self.fd, self.max_frame, self.max_total, self.skip = fd, max_frame, max_total, skip
        self.buffer, self.offset, self.total = bytearray(data), 0, len(data)

    def _fill(self):
        if self.fd is None:
            return False
        chunk = _read(self.fd, 1 << 16)
        if not chunk:
            return False
        self.total += len(chunk)
        if self.max_total is not None and self.total > self.max_total:
            raise OutputExceeded(self.total)
        if self.offset > (1 << 16) and 2 * self.offset > len(self.buffer):
            del self.buffer[: self.offset]  # amortised: each byte is moved at most once per halving
            self.offset = 0
        self.buffer += chunk
        return True

    def next(self):
        """(tag, payload) of the next frame not skipped, or None at the end (or at a partial frame)."""
        while True:
            available = len(self.buffer) - self.offset
            if available >= 4:
                size = int.from_bytes(self.buffer[self.offset : self.offset + 4], "big")
                if size < 1 or size > self.max_frame + 1024:
                    raise FrameError(f"a frame of {size} bytes")
                if available >= 4 + size:
                    start = self.offset + 4
                    self.offset = start + size
                    tag = bytes(self.buffer[start : start + 1])
                    if tag in self.skip:
                        continue
                    return tag, bytes(self.buffer[start + 1 : start + size])
            if not self._fill():
                return None


def last_frame(data, tag, max_frame):
    """The payload of the last frame tagged ``tag`` in ``data`` (None if none), reading up to the first
    malformed frame; linear in ``len(data)``."""
    reader, found = FrameReader(None, max_frame, data=data), None
    with contextlib.suppress(FrameError):
        while (frame := reader.next()) is not None:
            if frame[0] == tag:
                found = frame[1]
    return found


# ---------------------------------------------------------------- in the program's process (P)


class _FramedOutput(io.RawIOBase):
    """fd 1 of a functional or assert test: what the program prints leaves in ``O`` frames."""

    def writable(self):
        return True

    def write(self, data):
        data = bytes(data)
        for start in range(0, len(data), _OUTPUT_FRAME_BYTES):
            send_frame(1, b"O", data[start : start + _OUTPUT_FRAME_BYTES])
        return len(data)


def _standard_streams(framed):
    if framed:
        sys.stdin = io.StringIO("")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_FramedOutput()), encoding="utf-8")
    else:
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


def show_in_tracebacks(name, source):
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)


_OWN_FILES = (__file__,)


def _print_traceback(error, own_files=()):
    """The traceback without the harness's own frames (they say nothing about the program)."""
    hidden = {*_OWN_FILES, *own_files}
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename not in hidden]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)] if frames else []
    lines += traceback.format_exception_only(type(error), error)
    sys.stderr.write("".join(lines))


def _report_failure(error):
    try:
        _print_traceback(error)
    except BaseException:  # noqa: BLE001 - e.g. MemoryError while formatting
        with contextlib.suppress(BaseException):
            _write_all(2, f"{type(error).__name__}\n".encode())


def _run_and_exit(body):
    """Run ``body()`` and exit: with the status a ``SystemExit`` asks for, 0 when it returns, 1 when it
    raises (the traceback, without the harness's frames, goes to stderr). The status is all the checker learns from P about how it ended."""
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
        status = 1  # a MemoryError too: only the checker's own measurement makes a memory_limit
        _report_failure(error)
    _flush_streams()
    _exit(status & 0xFF)


def _reseed():
    # `random` is preloaded before the zygote forks: give each test its own seed, as a new process has
    if "random" in sys.modules:
        sys.modules["random"].seed()


def _read_exact(fd, size):
    chunks, missing = [], size
    while missing:
        chunk = _read(fd, min(missing, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


def _receive_request(fd, max_bytes):
    """A frame from the checker (trusted: the arguments of a call)."""
    header = _read_exact(fd, 4)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > max_bytes + 1024:
        raise _wire.WireError(f"a message of {size} bytes, over the limit of {max_bytes}")
    return _read_exact(fd, size)


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


class ProgramError(Exception):
    """An exception the program raised that is not a builtin exception (rebuilt in the grader by name)."""


_MUTABLE_ARGUMENTS = (list, dict, set, bytearray, collections.deque)
_NOT_REBUILT = ("SystemExit", "KeyboardInterrupt")


def _manifest(namespace):
    """What the grader binds before the test code runs: a proxy per callable, the name of each standard
    module the program imported (bound only from :data:`GRADER_MODULES`), and the program's other plain values
    (constants a prompt defines)."""
    functions, modules, values = [], {}, {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if type(value) is type(sys):
            module_name = getattr(value, "__name__", None)
            if isinstance(module_name, str) and module_name in GRADER_MODULES:
                modules[name] = module_name
        elif callable(value):
            functions.append(name)
        else:
            with contextlib.suppress(Exception, _wire._TooDeep):
                values[name] = _wire._to_tree(value, 0)
    return json.dumps({"functions": functions, "modules": modules, "values": values}).encode()


def _error_reply(error, max_bytes):
    with contextlib.suppress(BaseException):
        _print_traceback(error)
    kind = type(error)
    name = kind.__name__ if kind.__module__ == "builtins" and kind.__name__ not in _NOT_REBUILT else None
    try:
        return _wire.encode(["error", name, list(error.args)], max_bytes)
    except BaseException:  # noqa: BLE001 - arguments that are no plain data
        return _wire.encode(["error", name, [f"{kind.__name__}: {str(error)[:1000]}"]])


def _serve_calls(namespace, max_bytes):
    """Send the manifest on fd 1, then answer the calls that arrive on fd 0 until it ends."""
    functions = {
        name: value for name, value in namespace.items() if not name.startswith("__") and callable(value)
    }
    _flush_streams()
    send_frame(1, b"M", _manifest(namespace))
    while True:
        request = _receive_request(0, max_bytes)
        if request is None:
            return
        name, arguments, keywords = _wire.decode(request.decode())
        try:
            result = functions[name](*arguments, **keywords)
            after = [value if type(value) in _MUTABLE_ARGUMENTS else None for value in arguments]
            reply = _wire.encode(["ok", result, after], max_bytes)
        except BaseException as error:  # noqa: BLE001 - the program's failure goes back to the grader
            reply = _error_reply(error, max_bytes)
        _flush_streams()
        send_frame(1, b"A", reply.encode())


def run_program(job, code, prelude):
    """P, set up (limits, uid, keyring; descriptors 0, 1, 2 only): run the program as the job's kind asks.
    ``code`` and ``prelude`` were compiled by the checker. Never returns."""
    kind = job["kind"]
    max_bytes = int(job["limits"]["max_output_bytes"])
    arguments = None
    if kind == "functional":
        request = _receive_request(0, max_bytes)  # before the program runs: it cannot read it first
        arguments = json.loads(request.decode()) if request is not None else []
    _standard_streams(framed=kind != "stdin")
    _reseed()

    def body():
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        if prelude is not None:
            exec(prelude, namespace)  # noqa: S102
        given = dict(namespace)
        exec(code, namespace)  # noqa: S102
        if kind == "functional":
            function = _find_function(namespace, job["fn_name"], given)
            result = function(*arguments)
            try:
                text = _wire.encode(result, max_bytes)
            except (TypeError, ValueError) as error:
                raise TypeError(f"the result cannot be sent for comparison: {error}") from None
            _flush_streams()
            send_frame(1, b"R", text.encode())
        elif kind == "assert":
            if job.get("setup_code"):  # the program's functions may use what the setup code defines
                exec(compile(job["setup_code"], "<setup>", "exec", dont_inherit=True), namespace)  # noqa: S102
            _serve_calls(namespace, max_bytes)

    _run_and_exit(body)


# ---------------------------------------------------------------- in the grader's process (G)


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


# Exceptions that Python's own control flow consumes: a StopIteration raised inside ``map``, ``all``, a generator
# expression or a ``for`` loop of the test code would end the iteration as if it were exhausted (so
# ``all(map(candidate, cases))`` would be true with nothing checked). Raised on the program's behalf, they become a
# RuntimeError, as PEP 479 does for a StopIteration that leaves a generator.
_CONTROL_FLOW = ("StopIteration", "StopAsyncIteration", "GeneratorExit")


def _rebuild_error(name, arguments):
    if name in _CONTROL_FLOW:
        shown = ", ".join(repr(argument) for argument in arguments)[:1000]
        return RuntimeError(f"the program raised {name}({shown}), which the test code receives as a RuntimeError")
    kind = getattr(builtins, name, None) if isinstance(name, str) else None
    if not (isinstance(kind, type) and issubclass(kind, Exception)) or name in _NOT_REBUILT:
        kind = ProgramError
    try:
        return kind(*arguments)
    except Exception:  # noqa: BLE001 - a constructor with other arguments (UnicodeDecodeError)
        return ProgramError(*arguments)


class _Calls:
    """G's side of the channel to P: requests on P's stdin, answers from P's stdout (its prints skipped)."""

    def __init__(self, out_fd, reader, max_bytes):
        self.out_fd, self.reader, self.max_bytes = out_fd, reader, max_bytes
        self.raised = []  # the exceptions raised on the program's behalf (never the test code's own)

    def call(self, name, arguments, keywords):
        request = _wire.encode([name, list(arguments), keywords], self.max_bytes).encode()
        try:
            _write_all(self.out_fd, len(request).to_bytes(4, "big") + request)
        except BrokenPipeError:
            raise self._raise(ProgramError(f"the program's process ended before a call to {name}")) from None
        try:
            frame = self.reader.next()
        except FrameError as error:
            raise self._raise(ProgramError(f"the program broke its answer channel: {error}")) from None
        if frame is None or frame[0] != b"A":
            raise self._raise(ProgramError(f"the program's process ended during a call to {name}"))
        try:
            answer = _wire.decode(frame[1].decode())
        except (ValueError, UnicodeDecodeError) as error:
            raise self._raise(ProgramError(f"malformed answer from the program's process: {error}")) from None
        if type(answer) is not list or len(answer) != 3:
            raise self._raise(ProgramError("malformed answer from the program's process"))
        status, value, extra = answer
        if status == "ok":
            _apply_mutations(arguments, extra)
            return value
        raise self._raise(_rebuild_error(value, extra if type(extra) is list else []))

    def _raise(self, error):
        self.raised.append(error)
        return error

    def proxy(self, name):
        def call(*arguments, **keywords):
            return self.call(name, arguments, keywords)

        call.__name__ = call.__qualname__ = name
        return call


def run_grader(job, case_input, calls_out, calls_in, result_fd, own_files=()):
    """G, set up: the dataset's setup and test code, the program reached only through proxies. Writes its
    outcome (JSON) on ``result_fd`` and exits."""
    sys.stdin = io.StringIO("")
    sys.stdout = sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace"
    )
    max_bytes = int(job["limits"]["max_output_bytes"])
    reader = FrameReader(calls_in, max_bytes, max_total=max_bytes, skip=(b"O",))
    calls = _Calls(calls_out, reader, max_bytes)
    outcome = {"outcome": "error", "error_type": None, "memory_error": False, "output_exceeded": False}
    try:
        try:
            manifest = reader.next()
        except FrameError as error:
            raise calls._raise(ProgramError(f"the program broke its answer channel: {error}")) from None
        if manifest is None or manifest[0] != b"M":
            raise calls._raise(
                ProgramError("the program ended before its functions could be called (it exited or crashed)")
            )
        manifest = json.loads(manifest[1])
        namespace = {"__name__": "__main__", "__builtins__": builtins}

        def bindable(name):
            # A program's `abs` or `set` would change what the asserts compute with: names of builtins stay
            # the builtins (but HumanEval's entry point, the candidate itself).
            return isinstance(name, str) and (name not in _CLEAN_BUILTINS or name == job.get("entry_point"))

        modules = manifest.get("modules") if isinstance(manifest, dict) else None
        for alias, module_name in (modules or {}).items():
            # Only the checker's own copies of a fixed list, imported before any program ran: no import here.
            if bindable(alias) and module_name in GRADER_MODULES and module_name in sys.modules:
                namespace[alias] = sys.modules[module_name]
        for name, tree in (manifest.get("values") or {}).items():
            if bindable(name):
                with contextlib.suppress(Exception):
                    namespace[name] = _wire._from_tree(tree, 0)
        for name in manifest.get("functions") or []:
            if bindable(name):
                namespace[name] = calls.proxy(name)
        if job.get("setup_code"):
            show_in_tracebacks("<setup>", job["setup_code"])
            exec(compile(job["setup_code"], "<setup>", "exec", dont_inherit=True), namespace)  # noqa: S102
        show_in_tracebacks("<test>", case_input)
        exec(compile(case_input, "<test>", "exec", dont_inherit=True), namespace)  # noqa: S102
        outcome["outcome"] = "passed"
    except OutputExceeded:
        outcome["output_exceeded"] = True
    except BaseException as error:  # noqa: BLE001 - the test failed: say how
        own = any(error is raised for raised in calls.raised)
        outcome["error_type"] = type(error).__name__
        outcome["memory_error"] = isinstance(error, _MemoryError)
        if isinstance(error, AssertionError) and not own:
            outcome["outcome"] = "assertion"  # the test code's own statement failed: a wrong answer
        _report_failure_without(error, own_files)
    _flush_streams()
    _write_all(result_fd, json.dumps(outcome).encode())
    _exit(0 if outcome["outcome"] == "passed" else 1)


def _report_failure_without(error, own_files):
    try:
        _print_traceback(error, own_files)
    except BaseException:  # noqa: BLE001
        with contextlib.suppress(BaseException):
            _write_all(2, f"{type(error).__name__}\n".encode())
