"""``make_llvmlite_scan_safe``: llvmlite's library handle survives vLLM's start-up scan of ``sys.modules``.

vLLM (``vllm/triton_utils/dispatcher.py``, 0.32) reads ``vars(value).get("kernel")`` for every module attribute
that answers ``hasattr(value, "__dict__")``. These tests replay that access on the real llvmlite (loaded by numba,
as MEDS loads it) in a fresh process, without vLLM; the lane (``test_vllm_lane.py``) runs vLLM's own scan.
"""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import ROOT

SCAN = """
import sys

def scan():  # vLLM 0.32's _rebind_kernels, less the rebinding
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not namespace:
            continue
        for value in list(namespace.values()):
            if hasattr(value, "__dict__"):
                vars(value).get("kernel")
"""


def run_python(code: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT / "src"), os.environ.get("PYTHONPATH")))),
    }
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_scan_crashes_on_llvmlite_and_the_fix_makes_it_pass():
    done = run_python(
        SCAN
        + """
from hf_meds_cliff._vllm_compat import make_llvmlite_scan_safe
print("before import:", make_llvmlite_scan_safe())
import numba
import llvmlite.binding.ffi as ffi
ffi.lib.LLVMPY_GetVersionInfo  # loads the library, as numba's compiler does on first use
try:
    scan()
except AttributeError as error:
    print("crash:", error)
print("fixed:", make_llvmlite_scan_safe())
scan()
print("dict:", vars(ffi.lib))
print("scan ok")
"""
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "before import: False",  # llvmlite not loaded: nothing to do
        "crash: '_lib_fn_wrapper' object has no attribute 'get'",  # the llvmlite crash, reproduced
        "fixed: True",
        "dict: {}",
        "scan ok",
    ], done.stdout


def test_importing_meds_memory_makes_the_scan_safe():
    """MEDS's memory is what loads numba in our package; importing it leaves llvmlite scan-safe."""
    done = run_python(
        SCAN
        + """
import hf_meds_cliff.meds.memory
import llvmlite.binding.ffi as ffi
ffi.lib.LLVMPY_GetVersionInfo
scan()
print("scan ok")
"""
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "scan ok"
