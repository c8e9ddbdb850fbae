"""What every generation backend shares: the :class:`Sample` it returns, the :class:`SamplingSettings` it takes, the
:class:`GenerationBackend` protocol and the per-sample seeds (below :mod:`.generation` and :mod:`.openai_backend`,
which both use them)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["GenerationBackend", "Sample", "SamplingSettings", "sample_seed"]


@dataclass(frozen=True)
class Sample:
    """One completion: its text, token count (eos included) and whether it hit the limit.

    ``num_tokens``/``truncated`` are ``None`` where unknown (a samples file; a server that answered several samples
    in one request reports only their total). ``program`` is code given outright (a samples file's ``completion``
    continuing HumanEval's prompt, evalplus's ``solution``, LiveCodeBench's ``code_list``): graded as it is instead
    of the completion's last fenced block.
    """

    text: str
    num_tokens: int | None
    truncated: bool | None
    program: str | None = None


@dataclass(frozen=True)
class SamplingSettings:
    """How completions are sampled (the paper: n = 128, temperature 1.0, top-p 1.0, seed 0)."""

    num_samples: int
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 3072

    def __post_init__(self):
        if not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(f"num_samples (n) = {self.num_samples!r} must be a positive integer.")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0 (0 means greedy).")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1].")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens!r} must be a positive integer.")


class GenerationBackend(Protocol):
    name: str

    def problems_per_call(self, num_samples: int) -> int:
        """How many prompts to hand over per :meth:`generate` call (the resume granularity)."""

    def generate(
        self, prompts: Sequence[list[dict[str, str]]], seeds: Sequence[int], settings: SamplingSettings
    ) -> list[list[Sample]]:
        """``settings.num_samples`` samples for each chat prompt."""


def sample_seed(problem_seed: int, sample_index: int) -> int:
    """A 31-bit seed for sample ``sample_index`` of a problem seeded with ``problem_seed``.

    >>> sample_seed(7, 0) == sample_seed(7, 0) != sample_seed(7, 1)
    True
    """
    digest = hashlib.blake2b(f"{int(problem_seed)}:{int(sample_index)}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF
