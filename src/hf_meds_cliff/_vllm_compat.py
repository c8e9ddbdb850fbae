"""Keep vLLM's start-up from crashing on llvmlite (loaded by numba, which MEDS's clustering uses).

At platform start (``CpuPlatform.register_triton_kernel_overrides`` -> ``vllm/triton_utils/dispatcher.py``,
vLLM 0.32) vLLM walks every module in ``sys.modules`` and, for each attribute value that answers
``hasattr(value, "__dict__")``, reads ``vars(value).get("kernel")``. llvmlite's library handle
``llvmlite.binding.ffi.lib`` (a ``_lib_wrapper`` with ``__slots__`` and a ``__getattr__`` that wraps whatever
the loaded C library returns) answers ``__dict__`` with a ``_lib_fn_wrapper`` around the ``CDLL``'s dict, which
has no ``get``; vLLM's start-up dies with ``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'``.
MEDS imports numba (``meds/memory.py``), so any process that imports our MEDS trainer and then starts vLLM on
CPU crashed.

:func:`make_llvmlite_scan_safe` gives the handle a real, empty ``__dict__`` answer: its wrapper looks names up in
its function table (``_fntab``) first, so one entry ``"__dict__": {}`` is enough. The handle holds no instance
attributes (only slots), so an empty dict is the truthful answer; llvmlite and numba never ask the handle for
``__dict__`` themselves. :mod:`hf_meds_cliff.meds.memory` calls it right after importing numba, and the vLLM
generation backend calls it before starting the engine (for numba loaded by anything else).
"""

from __future__ import annotations

import sys


def make_llvmlite_scan_safe() -> bool:
    """Make ``llvmlite.binding.ffi.lib`` answer ``__dict__`` with an empty dict (see the module docstring).

    Returns True when the handle was loaded and is now safe, False when llvmlite is not loaded or its handle is
    not the one this fix knows (another llvmlite release: then nothing is changed).
    """
    ffi = sys.modules.get("llvmlite.binding.ffi")
    table = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if not isinstance(table, dict):
        return False
    if not isinstance(
        table.get("__dict__"), dict
    ):  # a scan that already ran cached the wrapper there: replace it
        table["__dict__"] = {}
    return True
