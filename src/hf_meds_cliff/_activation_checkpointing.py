"""Activation (gradient) checkpointing switched off for a no-grad pass, under transformers 5's names.

transformers 5 renamed ``gradient_checkpointing*`` to ``activation_checkpointing*`` and the old names warn
(``FutureWarning``) on every call; TRL 1.16's ``trl.models.utils.disable_gradient_checkpointing`` still uses them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def activation_checkpointing_disabled(model: Any, checkpointing_kwargs: dict | None = None) -> Iterator[None]:
    """Turn ``model``'s activation checkpointing off inside the block and back on (with ``checkpointing_kwargs``)
    after it, as TRL's ``disable_gradient_checkpointing`` does, without the deprecated calls. A transformers without
    the new names gets the old ones."""
    new_names = hasattr(model, "activation_checkpointing_enable")
    was_enabled = model.is_activation_checkpointing if new_names else model.is_gradient_checkpointing
    if was_enabled:
        model.activation_checkpointing_disable() if new_names else model.gradient_checkpointing_disable()
    try:
        yield
    finally:
        if was_enabled:
            if new_names:
                model.activation_checkpointing_enable(checkpointing_kwargs)
            else:
                model.gradient_checkpointing_enable(checkpointing_kwargs)
