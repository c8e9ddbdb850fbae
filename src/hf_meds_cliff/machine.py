"""What a measurement ran on: the CPU's model name and flags, read once from ``/proc/cpuinfo``.

Every benchmark, study and data file that records its machine reads the CPU through :func:`cpu_model_and_flags`,
so they all agree on what "the CPU" and "its flags" mean (the first processor's ``model name`` and ``flags``
lines; ``Features`` on ARM). Standard library only; imports nothing of the package.
"""

from __future__ import annotations

import platform

__all__ = ["cpu_model_and_flags"]


def cpu_model_and_flags(path: str = "/proc/cpuinfo") -> tuple[str, list[str]]:
    """``(model, flags)`` of the first processor listed in ``path``; ``platform.processor()`` and ``[]`` where the
    file or a line is missing (not Linux).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix="cpuinfo", delete=False) as handle:
    ...     _ = handle.write("processor\\t: 0\\nmodel name\\t: Test CPU\\nflags\\t\\t: sse avx2\\n"
    ...                      "processor\\t: 1\\nmodel name\\t: Other\\nflags\\t\\t: sse\\n")
    >>> cpu_model_and_flags(handle.name)
    ('Test CPU', ['sse', 'avx2'])
    >>> os.unlink(handle.name)
    """
    model, flags = None, None
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = value.strip()
                elif key in ("flags", "Features") and flags is None:
                    flags = value.split()
    except OSError:
        pass
    return model or platform.processor(), flags or []
