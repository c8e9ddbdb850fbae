"""Entry point of a :class:`~hf_meds_cliff.rewards.MathVerifyPool` worker process.

Started as ``python -m hf_meds_cliff.rewards._verify_worker PARENT_PID`` with pipes on stdin/stdout.
Replies go to a private copy of the original stdout; file descriptor 1 is pointed at stderr, so
anything a library prints cannot corrupt the line protocol.

The worker dies with its parent, even while sympy is busy in C code: on Linux the kernel sends it
``SIGKILL`` when the parent goes (``PR_SET_PDEATHSIG``), and on every platform a watchdog thread exits
the process once the parent pid changes (re-parented to init). Reading stdin alone would notice the
parent only between answers.
"""

import ctypes
import os
import signal
import sys
import threading
import time

from hf_meds_cliff.rewards.verifier import serve_verification_requests

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_WATCHDOG_PERIOD_SECONDS = 0.5


def _request_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (exotic libc): the watchdog still covers it
        pass


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(_WATCHDOG_PERIOD_SECONDS)


if __name__ == "__main__":
    parent_pid = int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid()
    _request_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="parent-watchdog").start()
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve_verification_requests(sys.stdin.buffer, replies)
