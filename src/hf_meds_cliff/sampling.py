"""A resumed training draws the prompts an uninterrupted one would.

TRL's ``RepeatSampler`` draws each epoch's permutation from one seeded ``torch.Generator`` that lives as long as the
sampler: epoch ``e`` gets the generator's ``e``-th draw. A trainer built to resume starts a new sampler, so the epoch
it resumes in gets the *first* draw: from the first resumed step on, the run trains on other prompts than the run it
continues would have (transformers skips the resumed epoch's trained batches by position, not by prompt). A run that
checkpoints inside its first epoch is unaffected; every later checkpoint is.

:class:`ResumableRepeatSampler` is TRL's sampler plus ``set_epoch``, which transformers calls (through accelerate's
data loader) before it iterates every epoch, the resumed one included: it draws and discards the permutations of the
epochs before ``epoch`` that this sampler has not drawn yet. In a run that never resumes there is nothing to catch up
on, and the orders are TRL's, draw for draw. The trainers of this package use it in place of TRL's
(:meth:`~hf_meds_cliff.checkpointing.CheckpointSafetyMixin._get_train_sampler`).
"""

from __future__ import annotations

import torch
from trl.trainer.utils import RepeatSampler


class ResumableRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose ``set_epoch(e)`` brings its generator to epoch ``e``'s permutation.

    >>> sampler = ResumableRepeatSampler(range(4), mini_repeat_count=1, batch_size=4, seed=0)
    >>> epochs = [list(sampler) for _ in range(3)]  # an uninterrupted run: three epochs
    >>> resumed = ResumableRepeatSampler(range(4), mini_repeat_count=1, batch_size=4, seed=0)
    >>> resumed.set_epoch(2)  # a run resumed in its third epoch
    >>> list(resumed) == epochs[2]
    True
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.permutations_drawn = 0  # epochs whose permutation this sampler's generator has produced

    @classmethod
    def from_repeat_sampler(cls, sampler: RepeatSampler) -> ResumableRepeatSampler:
        """The same sampler (data, repeats, batch size, shuffle, seed), resumable; its generator starts afresh, so
        pass a sampler that has not been iterated yet (as ``_get_train_sampler`` returns it)."""
        return cls(
            data_source=sampler.data_source,
            mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size,
            repeat_count=sampler.repeat_count,
            shuffle=sampler.shuffle,
            seed=sampler.seed,
        )

    def set_epoch(self, epoch: int) -> None:
        if not self.shuffle:
            return
        while self.permutations_drawn < epoch:
            torch.randperm(self.num_samples, generator=self.generator)  # what __iter__ drew in that epoch
            self.permutations_drawn += 1

    def __iter__(self):
        if self.shuffle:
            self.permutations_drawn += 1  # counted where super() draws it: at the first item
        yield from super().__iter__()
