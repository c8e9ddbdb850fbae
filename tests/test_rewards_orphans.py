"""Answer-checking workers die with the process that started them.

A parent process starts a math-verify worker and gives it an answer that keeps sympy busy for good;
the test kills the parent (SIGKILL, SIGTERM) while the worker computes and then looks in /proc for
the worker. Before the fix the worker was re-parented to init and kept a core busy indefinitely.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

PATHOLOGICAL = "9^{9^{9^{9}}}"  # sympy evaluates it exactly: never returns in practice

PARENT = textwrap.dedent(
    """
    import sys, threading
    from hf_meds_cliff.rewards import MathVerifyPool

    pool = MathVerifyPool(num_workers=1)
    if sys.argv[1] == "thread":  # start the worker from a thread that ends at once
        starter = threading.Thread(target=pool.verify, args=([("1", "1/1")],), kwargs={"timeout": 120})
        starter.start()
        starter.join()
    else:
        pool.verify([("1", "1/1")], timeout=120)
    print(pool.worker_pids()[0], flush=True)
    print(pool.verify([("1/2", "0.5")], timeout=120)[0], pool.restarts, flush=True)
    pool.verify([("2", sys.argv[2])], timeout=3600)
    """
)


def _state(pid: int) -> str | None:
    """The process state letter from /proc (``Z`` for a zombie), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")


def _start_parent(mode: str) -> tuple[subprocess.Popen, int]:
    environment = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode, PATHOLOGICAL],
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
    )
    worker_pid = int(parent.stdout.readline())
    verdict, restarts = parent.stdout.readline().split()
    assert (verdict, restarts) == ("correct", "0"), "the worker must outlive the thread that started it"
    return parent, worker_pid


def _wait_until_busy(worker_pid: int, seconds: float = 60.0) -> None:
    start_ticks = _cpu_ticks(worker_pid)
    deadline = time.monotonic() + seconds
    while _cpu_ticks(worker_pid) - start_ticks < 20:  # 0.2 s of CPU (100 ticks/s) on the answer
        assert time.monotonic() < deadline, "the worker never started computing"
        time.sleep(0.1)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("kill_signal", "mode"),
    [(signal.SIGKILL, "main"), (signal.SIGTERM, "main"), (signal.SIGKILL, "thread")],
    ids=["sigkill", "sigterm", "sigkill-worker-started-in-a-thread"],
)
def test_busy_worker_dies_with_its_parent(kill_signal, mode):
    parent, worker_pid = _start_parent(mode)
    try:
        _wait_until_busy(worker_pid)
        assert _alive(worker_pid)
        os.kill(parent.pid, kill_signal)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _alive(worker_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        survived = _alive(worker_pid)
    finally:
        if parent.poll() is None:
            parent.kill()
        if _alive(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)  # never leave the orphan this test looks for
    assert not survived, f"worker {worker_pid} outlived its parent (state {_state(worker_pid)})"
