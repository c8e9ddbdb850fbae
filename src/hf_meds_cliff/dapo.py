"""DAPO's dynamic sampling for TRL's ``GRPOTrainer`` and its subclasses (MEDS, Cliff).

DAPO (Yu et al., 2025) drops prompt groups whose accuracy has zero variance (all right or all wrong:
no learning signal under group normalisation) and keeps generating fresh prompts until the batch is full,
giving up after a cap on generation rounds. TRL 1.16 has DAPO's loss (``loss_type="dapo"``) and
clip-higher (``epsilon_high``) but not this sampling.

:class:`DynamicSamplingMixin` adds it without copying TRL code: it wraps ``_generate_and_score_completions``
(call ``super()`` once per round, keep the rows of groups with accuracy variance, concatenate) and
``_calculate_rewards`` (call ``super()``, remember the gathered rewards so the filter sees whole groups
even when a group is split across processes). Put it first in the bases so every round goes through the
subclass's own hooks: ``class MyTrainer(DynamicSamplingMixin, MEDSGRPOTrainer)``.

Extra prompts come from a sampler of their own (seeded from ``args.seed``, shared by all processes) so the
main dataloader's order is untouched. The filter uses the reward function at
``dynamic_sampling_reward_index`` (default 0, the correctness reward), like DAPO's ``acc`` metric.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer

from .checkpointing import (
    CheckpointSafetyMixin,
    checkpoint_folder,
    load_optional_checkpoint_json,
    save_checkpoint_json,
)
from .model_card import LocalBaseModelCardMixin

logger = logging.getLogger(__name__)

DYNAMIC_SAMPLING_STATE_NAME = "dynamic_sampling_state.json"
"""In each checkpoint of a dynamic-sampling run: where the extra rounds' prompt order stands (pass and cursor)."""

LEFT_PADDED_KEYS = ("prompt_ids", "prompt_mask")
"""Per-row tensors TRL left-pads; every other per-row tensor is right-padded (completion side)."""


def groups_with_signal(values: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Which rows belong to a group whose ``values`` are not all equal.

    ``values`` (B,) in group order (``num_generations`` consecutive rows per prompt) → bool (B,).
    NaN (unscorable) rows are ignored; a group with fewer than two scored rows has no signal.

    >>> groups_with_signal(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), 2).tolist()
    [True, True, False, False, False, False]
    """
    if values.ndim != 1 or values.numel() % num_generations:
        raise ValueError(
            f"values must be (B,) with B a multiple of num_generations={num_generations}; got shape {tuple(values.shape)}."
        )
    grouped = values.view(-1, num_generations)
    scored = ~torch.isnan(grouped)
    high = torch.where(scored, grouped, torch.full_like(grouped, -torch.inf)).amax(dim=1)
    low = torch.where(scored, grouped, torch.full_like(grouped, torch.inf)).amin(dim=1)
    has_signal = (scored.sum(dim=1) >= 2) & (high > low)
    return has_signal.repeat_interleave(num_generations)


def pad_rows(tensor: torch.Tensor, length: int, left: bool) -> torch.Tensor:
    """Pad the second dimension of a (B, T, ...) tensor with zeros to ``length`` (left or right)."""
    missing = length - tensor.shape[1]
    if missing <= 0:
        return tensor
    padding = tensor.new_zeros((tensor.shape[0], missing, *tensor.shape[2:]))
    return torch.cat([padding, tensor] if left else [tensor, padding], dim=1)


def concat_rows(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Concatenate per-row tensor dicts along rows, padding sequence dimensions (prompt side on the left)."""
    merged = {}
    for key in parts[0]:
        tensors = [part[key] for part in parts]
        if tensors[0].ndim >= 2:
            length = max(t.shape[1] for t in tensors)
            tensors = [pad_rows(t, length, left=key in LEFT_PADDED_KEYS) for t in tensors]
        merged[key] = torch.cat(tensors, dim=0)
    return merged


_HAS_ACTIVATION_CHECKPOINTING = "activation_checkpointing" in {f.name for f in dataclasses.fields(GRPOConfig)}
"""transformers >= 5.23 has ``TrainingArguments.activation_checkpointing``; 5.20-5.22 only ``gradient_checkpointing``."""

_DEPRECATED_ALIASES = frozenset(
    {
        # Old names that __post_init__ has already resolved into their replacements (passing them again warns).
        "gradient_checkpointing",  # -> activation_checkpointing
        "gradient_checkpointing_kwargs",  # -> activation_checkpointing_kwargs
        "vllm_importance_sampling_cap",  # -> vllm_importance_sampling_clip_max
        "use_transformers_paged",  # -> use_transformers_continuous_batching
    }
)


@dataclass
class DAPOConfig(GRPOConfig):
    """``GRPOConfig`` plus DAPO's dynamic sampling (off by default, so the plain GRPO behaviour is unchanged)."""

    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "DAPO dynamic sampling: drop prompt groups whose accuracy has zero variance and generate "
            "fresh prompts until the batch is full."
        },
    )
    dynamic_sampling_max_rounds: int = field(
        default=10,
        metadata={
            "help": "Most generation rounds per batch (DAPO's max_num_gen_batches; the paper uses 10). Reaching it "
            "without a full batch raises an error."
        },
    )
    dynamic_sampling_reward_index: int = field(
        default=0,
        metadata={"help": "Index of the reward function whose per-group variance decides (0 = correctness)."},
    )
    # TRL's configs default `gradient_checkpointing=True`, a name transformers 5 deprecated for
    # `activation_checkpointing` (FutureWarning on every config built). Unset here; __post_init__ carries TRL's default
    # over under the new name, so only a user who passes the old name sees the warning.
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Deprecated alias of `activation_checkpointing` (transformers 5). When neither is given, "
            "activation checkpointing is on, as in TRL."
        },
    )

    if not _HAS_ACTIVATION_CHECKPOINTING:
        # transformers 5.20-5.22 (5.20.2 is what `pip install "hf-meds-cliff[vllm]"` installs: vllm 0.33 caps
        # transformers <5.21) have no `activation_checkpointing` (added in 5.23): accept the name our recipes and
        # users write and carry it over to `gradient_checkpointing` (found by the lowest-versions lane).
        activation_checkpointing: bool | None = field(
            default=None,
            metadata={
                "help": "Activation (gradient) checkpointing; on this transformers it sets `gradient_checkpointing`. "
                "When neither is given, it is on, as in TRL."
            },
        )

    @classmethod
    def from_grpo_config(cls, config: GRPOConfig, **overrides):
        """This config class built from an existing ``GRPOConfig`` (every field kept) plus ``overrides``.

        ``MEDSConfig(**grpo_config.to_dict())`` does not work: ``GRPOConfig.__post_init__`` fills both
        ``generation_batch_size`` and ``steps_per_generation`` from whichever one was given, and a config with
        both set is rejected. This passes ``steps_per_generation`` back (or ``generation_batch_size`` when an
        override sets it), which gives the same generation batch.

        >>> from trl import GRPOConfig
        >>> from hf_meds_cliff import MEDSConfig
        >>> grpo = GRPOConfig("out", use_cpu=True, bf16=False, per_device_train_batch_size=4, num_generations=4,
        ...                   generation_batch_size=16, report_to="none")
        >>> meds = MEDSConfig.from_grpo_config(grpo, meds_alpha=0.02, meds_beta=0.04)
        >>> meds.generation_batch_size, meds.steps_per_generation, meds.meds_alpha
        (16, 4, 0.02)

        Raises:
            TypeError: ``config`` is not a ``GRPOConfig``, or an override is not a field of this class.
        """
        if not isinstance(config, GRPOConfig):
            raise TypeError(
                f"{cls.__name__}.from_grpo_config needs a trl.GRPOConfig, got {type(config).__name__}."
            )
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TypeError(f"{unknown} are not fields of {cls.__name__}; check their spelling.")
        # Without `activation_checkpointing` (transformers < 5.23) `gradient_checkpointing` is no alias: copy it.
        copied_aliases = (
            _DEPRECATED_ALIASES
            if _HAS_ACTIVATION_CHECKPOINTING
            else _DEPRECATED_ALIASES - {"gradient_checkpointing", "gradient_checkpointing_kwargs"}
        )
        values = {
            f.name: getattr(config, f.name)
            for f in dataclasses.fields(config)
            if f.init and f.name in names and f.name not in copied_aliases and hasattr(config, f.name)
        }
        # Both were derived by __post_init__; give back the one that determines the other.
        values[
            "steps_per_generation" if "generation_batch_size" in overrides else "generation_batch_size"
        ] = None
        values.update(overrides)
        return cls(**values)

    def __post_init__(self):
        if not _HAS_ACTIVATION_CHECKPOINTING:
            if self.gradient_checkpointing is None:
                self.gradient_checkpointing = self.activation_checkpointing in (None, True)
            self.activation_checkpointing = self.gradient_checkpointing
        elif self.gradient_checkpointing is None and getattr(self, "activation_checkpointing", None) is None:
            if hasattr(self, "activation_checkpointing"):
                self.activation_checkpointing = True
            else:  # a transformers without the new name
                self.gradient_checkpointing = True
        super().__post_init__()
        if self.dynamic_sampling_max_rounds < 1:
            raise ValueError(
                f"dynamic_sampling_max_rounds={self.dynamic_sampling_max_rounds} must be >= 1 (10 in the DAPO paper)."
            )
        if self.dynamic_sampling_reward_index < 0:
            raise ValueError(
                f"dynamic_sampling_reward_index={self.dynamic_sampling_reward_index} must index a reward function."
            )


class DynamicSamplingMixin:
    """DAPO dynamic sampling; overrides ``_generate_and_score_completions`` and ``_calculate_rewards``.

    Active when ``args.dynamic_sampling`` is true and the model is training. Metrics:
    ``dynamic_sampling/rounds``, ``dynamic_sampling/groups_dropped``, ``dynamic_sampling/kept_fraction``.

    Checkpoints keep the extra rounds' prompt order (``dynamic_sampling_state.json``: the pass over the data and the
    cursor in it; ``_save_checkpoint`` and ``_load_optimizer_and_scheduler``), so a resumed run draws the prompts the
    uninterrupted one would. A checkpoint without the file (written before it existed) resumes with a warning, its
    extra rounds starting again at the first pass.
    """

    _last_gathered_rewards: torch.Tensor | None = None
    _dynamic_sampling_rows_needed: int | None = None  # rows the batch still needs, during a round only
    _dynamic_sampling_cursor: int = 0
    _dynamic_sampling_epoch: int = 0
    _dynamic_sampling_order: torch.Tensor | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_gathered_rewards = rewards_per_func
        return rewards_per_func

    def _dynamic_sampling_enabled(self) -> bool:
        return bool(getattr(self.args, "dynamic_sampling", False)) and self.model.training

    def dynamic_sampling_survivors(self, gathered_rewards: torch.Tensor) -> torch.Tensor | None:
        """Which rows of the generation round being scored end up in the training batch.

        ``gathered_rewards`` (B_global, n_funcs), the round's rewards of all processes in TRL's order, as
        ``_calculate_rewards`` returns them → bool (B_global,): the rows of groups with accuracy variance
        (:func:`groups_with_signal` on ``dynamic_sampling_reward_index``) that the batch trim keeps (the first ones,
        in generation order, up to the rows the batch still needs). ``None`` outside a dynamic-sampling round,
        where every row is trained on. Subclasses use it to act only on the rows DAPO keeps (MEDS' memory).
        """
        needed = self._dynamic_sampling_rows_needed
        if needed is None:
            return None
        values = gathered_rewards[:, self.args.dynamic_sampling_reward_index].float().cpu()
        keep = groups_with_signal(values, self.num_generations)
        return keep & (torch.cumsum(keep.long(), dim=0) <= needed)

    def _next_prompt_batch(self, size: int) -> list[dict]:
        """This process's share of a fresh generation batch, ``size`` rows, groups as TRL lays them out."""
        prompts_per_batch = size * self.accelerator.num_processes // self.num_generations
        dataset = self.train_dataset
        if self._dynamic_sampling_order is None or self._dynamic_sampling_cursor + prompts_per_batch > len(
            dataset
        ):
            self._dynamic_sampling_order = self._dynamic_sampling_permutation(self._dynamic_sampling_epoch)
            self._dynamic_sampling_cursor = 0
            self._dynamic_sampling_epoch += 1
        start = self._dynamic_sampling_cursor
        prompt_indices = self._dynamic_sampling_order[start : start + prompts_per_batch].tolist()
        self._dynamic_sampling_cursor += prompts_per_batch
        global_rows = [index for index in prompt_indices for _ in range(self.num_generations)]
        rank = self.accelerator.process_index
        return [dataset[index] for index in global_rows[rank * size : (rank + 1) * size]]

    def _dynamic_sampling_permutation(self, data_pass: int) -> torch.Tensor:
        """The extra rounds' prompt order of pass ``data_pass`` (0, 1, ...) over the data: its own seeded
        permutation per pass, identical on every process."""
        generator = torch.Generator().manual_seed(self.args.seed + 7919 * (1 + data_pass))
        return torch.randperm(len(self.train_dataset), generator=generator)

    def _save_checkpoint(self, model, trial):
        # Before super(): trainer_state.json, which marks the checkpoint complete, is written after this file.
        if getattr(self.args, "dynamic_sampling", False) and self.args.should_save:
            state = {"passes_started": self._dynamic_sampling_epoch, "cursor": self._dynamic_sampling_cursor}
            save_checkpoint_json(checkpoint_folder(self, trial), DYNAMIC_SAMPLING_STATE_NAME, state)
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None or not getattr(self.args, "dynamic_sampling", False):
            return
        state = load_optional_checkpoint_json(
            os.path.join(checkpoint, DYNAMIC_SAMPLING_STATE_NAME),
            "Dynamic sampling's prompt order",
            "The extra rounds start again at their first pass, so this run's extra prompts differ from an "
            "uninterrupted run's (checkpoints written before the order was saved resume like this).",
        )
        if state is None:
            return
        passes, cursor = (state.get(key) if isinstance(state, dict) else None for key in ("passes_started", "cursor"))
        valid = (
            isinstance(passes, int) and isinstance(cursor, int) and passes >= 0
            and 0 <= cursor <= len(self.train_dataset) and (passes > 0 or cursor == 0)
        )  # fmt: skip
        if not valid:
            raise ValueError(
                f"{os.path.join(checkpoint, DYNAMIC_SAMPLING_STATE_NAME)} holds {state!r}, not a pass count and a "
                f"cursor within this run's {len(self.train_dataset)} prompts: the file was edited, or the checkpoint "
                "belongs to a run on another dataset. Resume from this run's own checkpoint, or delete the file to "
                "start the extra rounds' order afresh."
            )
        self._dynamic_sampling_epoch = passes
        self._dynamic_sampling_cursor = cursor
        self._dynamic_sampling_order = self._dynamic_sampling_permutation(passes - 1) if passes else None

    def _generate_and_score_completions(self, inputs):
        if not self._dynamic_sampling_enabled():
            return super()._generate_and_score_completions(inputs)
        if len(self.train_dataset) * self.num_generations < len(inputs) * self.accelerator.num_processes:
            raise ValueError(
                "Dynamic sampling needs at least one generation batch worth of prompts in the dataset."
            )
        local_size = len(inputs)
        target = local_size * self.accelerator.num_processes
        index = self.args.dynamic_sampling_reward_index
        kept_parts, kept_total, dropped_groups, rounds, scalars = [], 0, 0, 0, {}
        batch = inputs
        while kept_total < target:
            if rounds == self.args.dynamic_sampling_max_rounds:
                raise RuntimeError(
                    f"Dynamic sampling: after {rounds} generation rounds only {kept_total} of the {target} rows "
                    "needed come from groups with accuracy variance. Raise --dynamic_sampling_max_rounds, use easier "
                    "or more varied prompts, raise --num_generations, or turn --dynamic_sampling off."
                )
            rounds += 1
            self._dynamic_sampling_rows_needed = target - kept_total
            try:
                output = super()._generate_and_score_completions(batch)
            finally:
                self._dynamic_sampling_rows_needed = None
            key_order = [key for key, value in output.items() if value is not None]
            gathered = self._last_gathered_rewards
            if gathered is None or index >= gathered.shape[1]:
                raise ValueError(
                    f"dynamic_sampling_reward_index={index} but the trainer has "
                    f"{0 if gathered is None else gathered.shape[1]} reward column(s)."
                )
            keep_global = groups_with_signal(gathered[:, index].float(), self.num_generations)
            dropped_groups += int((~keep_global).sum().item()) // self.num_generations
            rank = self.accelerator.process_index
            keep_local = keep_global[rank * local_size : (rank + 1) * local_size].to(
                output["advantages"].device
            )
            # Global position of each row (round, then TRL's layout), so kept groups stay whole and in order.
            order = rounds * target + rank * local_size + torch.arange(local_size, device=keep_local.device)
            rows, row_scalars = {"_dynamic_sampling_order": order[keep_local]}, {}
            for key, value in output.items():
                if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == local_size:
                    rows[key] = value[keep_local]
                elif value is not None:
                    row_scalars[key] = value
            scalars.update(row_scalars)
            kept_parts.append(rows)
            kept_total += int(keep_global.sum().item())
            batch = self._next_prompt_batch(local_size)

        merged = self._redistribute(concat_rows(kept_parts), local_size)
        merged.pop("_dynamic_sampling_order")
        loss_mask = (
            merged["completion_mask"] * merged["tool_mask"]
            if "tool_mask" in merged
            else merged["completion_mask"]
        )
        scalars["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/rounds"].append(float(rounds))
        metrics["dynamic_sampling/groups_dropped"].append(float(dropped_groups))
        metrics["dynamic_sampling/kept_fraction"].append(kept_total / (rounds * target))
        # TRL reads the first entry as the batch (prompt_ids): keep its key order.
        return {key: merged[key] if key in merged else scalars[key] for key in key_order}

    def _redistribute(self, rows: dict[str, torch.Tensor], local_size: int) -> dict[str, torch.Tensor]:
        """Gather every process's kept rows, order them globally, give each process its ``local_size`` slice.

        The global batch is the first ``local_size × num_processes`` kept rows in generation order: whole
        groups, since every kept group contributes ``num_generations`` rows and the batch is a multiple of it.
        With one process this only truncates. Rows are padded to common shapes before the gather.
        """
        accelerator = self.accelerator
        count = rows["_dynamic_sampling_order"].shape[0]
        if accelerator.num_processes == 1:
            return {key: value[:local_size] for key, value in rows.items()}
        counts = accelerator.gather(torch.tensor([count], device=accelerator.device)).tolist()
        max_count = max(counts)
        rank = accelerator.process_index
        gathered = {}
        for key, value in rows.items():
            if value.ndim >= 2:
                length = int(
                    accelerator.gather(torch.tensor([value.shape[1]], device=value.device)).max().item()
                )
                value = pad_rows(value, length, left=key in LEFT_PADDED_KEYS)
            padded = torch.cat([value, value.new_zeros((max_count - count, *value.shape[1:]))], dim=0)
            everything = accelerator.gather(padded)
            gathered[key] = torch.cat(
                [everything[p * max_count : p * max_count + c] for p, c in enumerate(counts)]
            )
        ranking = torch.argsort(gathered["_dynamic_sampling_order"])
        mine = ranking[rank * local_size : (rank + 1) * local_size]
        return {key: value[mine] for key, value in gathered.items()}


class DAPOTrainer(DynamicSamplingMixin, CheckpointSafetyMixin, LocalBaseModelCardMixin, GRPOTrainer):
    """``GRPOTrainer`` with DAPO dynamic sampling (configure with :class:`DAPOConfig`).

    DAPO's other parts are TRL options: ``loss_type="dapo"``, ``epsilon_high=0.28``, ``beta=0`` and the
    ``overlong`` reward of :mod:`hf_meds_cliff.rewards`.

    :class:`~hf_meds_cliff.checkpointing.CheckpointSafetyMixin` adds the package's resume rule
    (``train(resume_from_checkpoint=True)``: the newest *complete* checkpoint) and a ``training_args.bin`` without
    secrets.
    """

    _tag_names = ["trl", "grpo", "dapo", "hf-meds-cliff"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._name = "DAPO" if getattr(self.args, "dynamic_sampling", False) else "GRPO"
