"""MEDS as a subclass of TRL's ``GRPOTrainer``."""

from __future__ import annotations

import logging
import math
import os
import textwrap
import time
import weakref
from collections import Counter
from typing import Any, ClassVar

import numpy as np
import torch
from accelerate.utils import gather, gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import get_callable_name

from .._activation_checkpointing import activation_checkpointing_disabled
from ..checkpointing import (
    CheckpointSafetyMixin,
    checkpoint_folder,
    load_optional_checkpoint_json,
    save_checkpoint_json,
)
from ..code.reward import is_code_reward
from ..correctness import binarize_trainer_correctness, check_trainer_correctness_reward, correctness_threshold
from ..dapo import DynamicSamplingMixin
from ..data import problem_text, prompt_keys
from ..model_card import MethodModelCardMixin
from ..rewards.extraction import extract_final_answer
from .config import MEDSConfig
from .diagnostics import meds_advantage_diagnostics, meds_group_counts, meds_summary_line
from .features import (
    AnswerLocation,
    AnswerLogitCapture,
    answer_logit_features,
    features_from_layer_logits,
    forward_chunk_count,
    locate_answer_tokens,
    resolve_decoder,
    select_layers,
)
from .agentic import AGENTIC_ANSWER_OUTSIDE_FINAL_TURN, AGENTIC_NO_ANSWER, locate_final_turn_answers
from ..collapse import cluster_concentration
from .answer_memory import ANSWER_MEMORY_JSON_NAME, AnswerMemory
from .preflight import (
    MEDSVisitEstimate,
    estimate_meds_visits,
    meds_can_act,
    meds_preflight_message,
    training_generations,
)
from .idle import NO_EFFECT_BATCHES, idle_warning, meds_idle, meds_without_effect, no_effect_warning
from .memory import (
    MEMORY_JSON_NAME,
    ErrorMemory,
    RowSnippet,
    answer_region,
)
from .memory_shard import ShardedErrorMemory, build_error_memory, load_error_memory
from .shaping import shape_rewards, top1_eigen_ratio, uniform_correctness_rows

logger = logging.getLogger(__name__)

RULE_CODES = {"no_box": 0, "reference": 1, "decoded": 2, "boxed_without_feature": 3}
"""Per-row codes of :meth:`MEDSGRPOTrainer._meds_rule_codes` (gathered over processes as one integer tensor)."""

MEMORY_DIRNAME = "meds_memory"
"""Folder of the error memory inside a checkpoint (written by ``ErrorMemory.save``)."""


PENALTY_COLUMN = "meds_penalty"
"""Name of the MEDS penalty reward function, so of its column in TRL's rewards and logs."""


class MEDSPenaltyReward:
    """Pseudo reward function holding the MEDS penalty column (weight 1) so TRL logs it as a reward.

    It returns ``None`` (no opinion) for every completion when TRL calls it, so TRL's check "all reward
    functions returned None" still sees only the user's functions. :class:`MEDSGRPOTrainer` then fills the
    column, once the rewards of all processes are gathered, with ``shaped − r`` (the shaped correctness
    reward minus the unshaped one; 0 when unshaped) for every row whose correctness reward is a number, and
    leaves it NaN (``None``) for rows whose correctness reward returned ``None``: such a row is never stored in
    the memory, penalised or favoured (see :meth:`MEDSGRPOTrainer._calculate_rewards`).

    >>> MEDSPenaltyReward()(completions=["a", "b"])
    [None, None]
    """

    __name__ = PENALTY_COLUMN

    def __call__(self, completions, **kwargs) -> list[float | None]:
        return [None] * len(completions)


_MEDS_ON_CODE_MESSAGE = (
    "MEDS cannot shape code rollouts ({found}): its feature is the model's layer logits at the first token of the "
    "final answer (the '{{' of the last \\boxed{{), and a program has no such token, so every rollout would go "
    "without a feature and MEDS would silently be plain GRPO. For code, train with Cliff (`hf-meds-cliff cliff`, "
    "CliffGRPOTrainer with hf_meds_cliff.code.CodeTestsReward), or with plain GRPO (`hf-meds-cliff grpo`)."
)


class _MEDSPreflightCallback(TrainerCallback):
    """Runs :meth:`MEDSGRPOTrainer._meds_preflight` once training knows its number of steps."""

    def __init__(self, trainer: MEDSGRPOTrainer):
        self._trainer = weakref.ref(trainer)

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = self._trainer()
        if trainer is not None:
            trainer._meds_preflight(state.max_steps)


class MEDSGRPOTrainer(DynamicSamplingMixin, MethodModelCardMixin, CheckpointSafetyMixin, GRPOTrainer):
    """GRPO with MEDS reward shaping (memory of past mistakes per prompt, penalised by cluster size).

    Every GRPO option keeps working (loss types, ``scale_rewards``, ``num_iterations``, LoRA, vLLM,
    multi-process): the penalty is applied to the gathered rewards before TRL's group normalisation,
    as an extra reward column ``meds_penalty`` (weight 1) that TRL logs like any reward.

    Overrides (each calls ``super()``):

    * ``__init__``: passes the user's reward functions to ``super()`` as they are (so TRL's own checks and errors
      apply, and an ``environment_factory`` whose environment owns the reward via ``get_reward`` can be the only
      reward source), then appends the :class:`MEDSPenaltyReward` column last, as TRL appends an environment-owned
      reward (``None`` in ``reward_processing_classes``, weight 1.0 in ``reward_weights``); the correctness reward
      may be any of TRL's columns, an environment's included. Builds the :class:`ErrorMemory`, resolves the decoder
      layers.
    * ``_generate``: keeps the prompt token ids of the batch (to build feature inputs) and locates the
      answer token of each completion; on tool-calling rollouts (TRL's ``tool_mask``) in the final assistant
      turn only (:mod:`hf_meds_cliff.meds.agentic`; rollouts without one counted as ``meds/agentic_no_answer`` and
      ``meds/agentic_answer_outside_final_turn``, see ``docs/agents.md``).
    * ``_get_per_token_logps_and_entropies``: when TRL runs its no-grad old-log-prob forward before
      the rewards (``gradient_accumulation_steps`` not a multiple of ``steps_per_generation ×
      num_iterations``, or vLLM importance-sampling correction), the features are captured from that
      forward with layer hooks instead of running a new one.
      (Numerically the captured features equal the own-forward ones up to float noise, except for
      completions masked by ``mask_truncated_completions``, whose completion tokens TRL masks out.)
    * ``_calculate_rewards``: computes the features (own no-grad forward of the decoder body over
      prompt + completion truncated at the answer position, unless captured above), gathers them with
      the prompt keys across processes, updates the memory (on several processes a
      :class:`~hf_meds_cliff.meds.memory_shard.ShardedErrorMemory`: each rank fits the prompts it owns and the sizes
      are gathered back), and fills the ``meds_penalty`` column; logs ``meds/*`` metrics. Eval batches are not
      shaped.
    * ``_save_checkpoint`` / ``_load_optimizer_and_scheduler``: save the memory into each checkpoint
      (``checkpoint-N/meds_memory``, before TRL's own files, so a checkpoint with ``trainer_state.json`` always
      has it) and restore it on resume; a checkpoint without a valid memory is an error unless
      ``meds_allow_empty_memory_on_resume``.
    * ``create_model_card`` (from :class:`MethodModelCardMixin`): adds the ``meds_*`` settings.
    * ``train``, ``_save``, ``_push_from_checkpoint`` (from :class:`~hf_meds_cliff.checkpointing.CheckpointSafetyMixin`):
      ``train(resume_from_checkpoint=True)`` resumes from the newest *complete* checkpoint, skipping (and naming)
      incomplete ones and ones whose ``meds_memory/`` files are gone (``_resume_method_files``), as the scripts do; ``training_args.bin`` is written without ``hub_token`` or other secrets.
    * ``_generate_and_score_completions`` (from :class:`~hf_meds_cliff.dapo.DynamicSamplingMixin`, only
      with ``dynamic_sampling=True``): DAPO's dynamic sampling, filtering on the unshaped correctness
      reward. As in the reference, only the rows the filter and the batch trim keep enter the memory (and are
      shaped); ``meds_memory_scope="all"`` memorises every generation round (``meds/num_not_memorised`` counts
      the featured rows left out).

    Groups whose correctness has no variance (all wrong, or all right) are never shaped by default, with or without
    dynamic sampling: the reference drops them with DAPO's filter on accuracy, so in its runs the penalty never
    puts variance into an all-wrong group. Without dynamic sampling they stay in the batch with GRPO's advantage
    (0 from the correctness reward) and, under ``meds_memory_scope="filtered"``, stay out of the memory as in the
    reference; ``meds_shape_uniform_groups=True`` memorises and shapes them (this package's earlier behaviour).
    ``meds/frac_groups_uniform`` logs their share of the batch, ``meds/frac_rows_shapeable`` the share of rows the
    penalty can act on, and ``meds/idle`` (1.0) a step where most groups are uniform and nothing replaces or shapes
    them: the first such step logs a warning with its numbers and the authors' setting
    (:mod:`hf_meds_cliff.meds.idle`).

    Code: MEDS's feature is the first token of the final answer (``\\boxed{``), which a program does not have. The
    trainer refuses a :class:`~hf_meds_cliff.code.CodeTestsReward` as the correctness reward at start-up, and stops
    on the first training batch when its rows carry a ``tests`` column and none of its rollouts has an answer
    token, rather than run with no features (no shaping at all). Use Cliff for code.
    """

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "meds", "hf-meds-cliff"]
    _name = "MEDS"
    _config_prefix = "meds_"
    _paper: ClassVar[dict[str, str]] = {
        "title": "The Past Is Not Past: Memory-Enhanced Dynamic Reward Shaping",
        "id": "2604.11297",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{liu2026meds,
                title        = {{The Past Is Not Past: Memory-Enhanced Dynamic Reward Shaping}},
                author       = {Liu and others},
                year         = 2026,
                eprint       = {arXiv:2604.11297},
            }"""),
    }

    def __init__(
        self, model, reward_funcs=None, args: MEDSConfig | None = None, *trainer_args, **trainer_kwargs
    ):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = MEDSConfig(f"{str(name).split('/')[-1]}-MEDS")
        if not isinstance(args, MEDSConfig):
            raise TypeError(
                f"MEDSGRPOTrainer needs a MEDSConfig, got {type(args).__name__}; convert yours with "
                "MEDSConfig.from_grpo_config(your_grpo_config, meds_alpha=0.1, ...) (every GRPOConfig field is kept), "
                "or build a MEDSConfig directly."
            )
        # No reward_funcs is fine when an environment_factory's environment owns the reward (its get_reward):
        # TRL appends that column itself, and raises its own "No reward source provided" when there is neither.
        if reward_funcs is None:
            user_funcs = []
        else:
            user_funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        user_weights = args.reward_weights
        if user_weights is not None and len(user_weights) != len(user_funcs):
            names = [
                getattr(f, "__name__", None) or getattr(f, "name_or_path", None) or str(f) for f in user_funcs
            ]
            raise ValueError(
                f"reward_weights has {len(user_weights)} value(s) ({list(user_weights)}) but {len(user_funcs)} reward "
                f"function(s) were passed ({names}); give one weight per reward function. (MEDS adds its own "
                "`meds_penalty` column with weight 1.0 itself, and TRL an environment-owned reward's with weight 1.0: "
                "do not count them.)"
            )
        if any(
            not isinstance(f, (str, torch.nn.Module)) and get_callable_name(f) == PENALTY_COLUMN
            for f in user_funcs
        ):
            raise ValueError(
                f"A reward function is named {PENALTY_COLUMN!r}, the name of MEDS's own penalty column: "
                "TRL would log both under the same rewards/ key. Rename yours (its __name__)."
            )
        # Refused before TRL loads the model; an environment-owned reward (TRL's later columns) is never a code reward.
        index = args.meds_correctness_reward_index
        if index < len(user_funcs) and is_code_reward(user_funcs[index]):
            raise ValueError(_MEDS_ON_CODE_MESSAGE.format(found="the correctness reward is a CodeTestsReward"))
        super().__init__(model, user_funcs or None, args, *trainer_args, **trainer_kwargs)
        # TRL's reward columns: the user's functions, then one per environment class that owns its reward.
        if not args.meds_correctness_reward_index < len(self.reward_funcs):
            raise ValueError(
                f"meds_correctness_reward_index={args.meds_correctness_reward_index} but only "
                f"{len(self.reward_funcs)} reward function(s) were given ({self.reward_func_names}: the reward_funcs, "
                "then each environment-owned get_reward); point it at the verifiable correctness reward."
            )
        self.meds_penalty_func = MEDSPenaltyReward()
        self._meds_append_penalty_column()
        if self.multi_objective_aggregation == "normalize_then_sum":
            logger.warning(
                "multi_objective_aggregation='normalize_then_sum': TRL normalises every reward column per group on "
                "its own, the meds_penalty column too, so the penalty becomes an objective of unit spread next to "
                "correctness (meds_alpha/meds_beta then shape it but no longer set its strength; the paper "
                "normalises the shaped reward r - p, which is 'sum_then_normalize', the default)."
            )

        # One process: an ErrorMemory; several: a ShardedErrorMemory, each rank holding the keys it owns.
        self.meds_memory = build_error_memory(
            self.accelerator.num_processes,
            self.accelerator.process_index,
            min_cluster_size=args.meds_min_cluster_size,
            min_samples=args.meds_min_samples,
            knn_k=args.meds_knn_k,
            noise_policy=args.meds_noise_policy,
            max_rows_per_key=args.meds_max_rows_per_key,
        )
        self.meds_answer_memory = (
            AnswerMemory(args.meds_max_rows_per_key) if args.meds_cluster_by == "answer" else None
        )
        """The answer-oracle ablation's memory (``meds_cluster_by="answer"``): its sizes replace the feature memory's."""
        parts = self._meds_decoder_parts()
        self._meds_layer_indices = select_layers(len(parts.layers), args.meds_num_layers)
        if args.meds_use_layer_diff and len(self._meds_layer_indices) < 2:
            raise ValueError(
                f"meds_use_layer_diff needs at least 2 kept layers, but the model has {len(parts.layers)} layers and "
                f"{len(self._meds_layer_indices)} are kept; set meds_num_layers >= 2."
            )
        self._meds_prompt_ids: list[list[int]] | None = None
        self._meds_locations: list[AnswerLocation | None] | None = None
        self._meds_capture: AnswerLogitCapture | None = None
        self._meds_captured_logits: torch.Tensor | None = None
        self.meds_last_cluster_sizes: np.ndarray | None = None
        """Cluster size of every completion of the last training step (all processes; -1 = not assigned: no feature,
        ungraded, or not memorised under ``meds_memory_scope="filtered"``)."""
        self.meds_last_penalties: np.ndarray | None = None
        """Penalty column of the last training step (all processes; NaN where the correctness reward was None)."""
        self._meds_last_feature_source: str | None = None  # "captured" (TRL's forward) or "forward" (ours)
        self._meds_correctness_checked = False  # the first training batch checks the reward is 0/1
        self._meds_local_rule_codes = torch.zeros(0, dtype=torch.long)  # this process's rows, see _meds_rule_codes
        self._meds_warned_boxed_without_feature = False
        self.meds_totals: Counter = Counter()
        """What MEDS did in this process's training so far: sums of :meth:`_meds_count_groups`' counts."""
        self.meds_preflight: MEDSVisitEstimate | None = None
        """The start-of-training estimate of how often MEDS meets each prompt again (:mod:`.preflight`)."""
        self.add_callback(_MEDSPreflightCallback(self))

    def _meds_append_penalty_column(self) -> None:
        """Append the ``meds_penalty`` column last in every per-function list of TRL (``reward_funcs``,
        ``reward_func_names``, ``reward_processing_classes``: ``None``, ``reward_weights``: 1.0), as TRL appends an
        environment-owned reward: the user's columns and TRL's environment columns keep their indices."""
        self.reward_funcs.append(self.meds_penalty_func)
        self.reward_func_names.append(PENALTY_COLUMN)
        self.reward_processing_classes.append(None)
        self.reward_weights = torch.cat([self.reward_weights, torch.ones(1)])
        self._meds_penalty_index = len(self.reward_funcs) - 1

    # ------------------------------------------------------------------------------------------
    # Pre-flight: can MEDS act in this run?
    # ------------------------------------------------------------------------------------------

    def _meds_pool_size(self) -> int | None:
        """Distinct prompts of the training set (by ``meds_prompt_id_column`` when every row has one); ``None``
        for a dataset without a length (an iterable dataset)."""
        dataset = self.train_dataset
        try:
            size = len(dataset)
        except TypeError:
            return None
        column = self.args.meds_prompt_id_column
        if column is not None and column in (getattr(dataset, "column_names", None) or ()):
            return len(set(dataset[column]))
        return size

    def _meds_preflight(self, max_steps: int) -> None:
        """At the start of training: estimate how often each prompt is memorised again (:mod:`.preflight`), log it
        as ``meds/preflight/*`` and warn once when MEDS can barely act."""
        args = self.args
        pool_size = self._meds_pool_size()
        if pool_size is None or pool_size < 1 or max_steps < 1:
            return
        self.meds_preflight = estimate = estimate_meds_visits(
            pool_size,
            max(1, args.generation_batch_size // self.num_generations),
            training_generations(
                max_steps, args.gradient_accumulation_steps, args.steps_per_generation, self.num_iterations
            ),
            self.num_generations,
            dynamic_sampling=bool(args.dynamic_sampling),
            min_cluster_size=args.meds_min_cluster_size,
            max_rows_per_key=args.meds_max_rows_per_key,
        )
        for name, value in estimate.as_metrics().items():
            self._metrics["train"][name].append(value)
        if self.accelerator.is_main_process:
            message = meds_preflight_message(estimate, steps=max_steps)
            (logger.info if meds_can_act(estimate) else logger.warning)(message)

    def meds_summary(self) -> str:
        """One line saying what MEDS did in this process's training: groups differentiated, rollouts penalised."""
        return meds_summary_line(self.meds_totals, self.meds_memory.num_rows, len(self.meds_memory))

    # ------------------------------------------------------------------------------------------
    # Features
    # ------------------------------------------------------------------------------------------

    def _meds_decoder_parts(self):
        """Decoder body, layers, final norm and LM head of the policy (override for other layouts)."""
        return resolve_decoder(self.accelerator.unwrap_model(self.model))

    def _generate(self, prompts: list):
        outputs = super()._generate(prompts)
        self._meds_prompt_ids = [list(ids) for ids in outputs[0]]
        self._meds_tool_masks = outputs[2]  # tool-calling rollouts: the answer is looked for in the final turn
        self._meds_captured_logits = None
        self._meds_capture = None
        if self.model.training:
            self._meds_locations = self._meds_locate(outputs[1])
            generate_every = self.args.steps_per_generation * self.num_iterations
            old_logps_forward_runs = self.args.gradient_accumulation_steps % generate_every != 0 or (
                self.use_vllm and self.vllm_importance_sampling_correction
            )
            # Arm the hooks for TRL's old-log-prob forward, the first policy forward after generation.
            self._meds_arm_capture = old_logps_forward_runs
        else:
            self._meds_locations = None
            self._meds_arm_capture = False
        return outputs

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
    ):
        if (
            not getattr(self, "_meds_arm_capture", False)
            or model is not self.model
            or self._meds_locations is None
        ):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        self._meds_arm_capture = False
        prompt_width = input_ids.size(1) - logits_to_keep  # prompts are left-padded to this width
        positions = torch.tensor(
            [prompt_width + loc.query_index if loc is not None else -1 for loc in self._meds_locations]
        )
        if len(positions) != input_ids.size(0):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        capture = AnswerLogitCapture(
            self._meds_decoder_parts(),
            self._meds_layer_indices,
            positions,
            logit_lens=self.args.meds_logit_lens,
        )
        with capture:
            result = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        if capture.complete:
            targets = torch.tensor([loc.target_id if loc is not None else 0 for loc in self._meds_locations])
            self._meds_captured_logits = capture.layer_logits(targets).cpu()
        return result

    def _meds_locate(self, completion_ids_list) -> list[AnswerLocation | None]:
        """Answer tokens of the completions; ``None`` for a truncated one under ``mask_truncated_completions``.

        TRL masks a truncated completion out of the loss and out of its own forward's attention: features
        captured from that forward would describe masked tokens, and shaping a rollout that is not trained on
        is pointless, so such a completion gets no feature (and never enters the memory) on either path.
        """
        tool_masks = getattr(self, "_meds_tool_masks", None)
        self._meds_agentic_statuses = None
        if tool_masks is not None and len(tool_masks) == len(completion_ids_list):
            locations, self._meds_agentic_statuses = locate_final_turn_answers(
                completion_ids_list, tool_masks, self.processing_class, rule=self.args.meds_answer_token
            )
        else:
            locations = locate_answer_tokens(
                completion_ids_list, self.processing_class, rule=self.args.meds_answer_token
            )
        if self.args.mask_truncated_completions:
            eos_and_pad = {*self.eos_token_ids, self._tokenizer.pad_token_id}
            locations = [
                None if len(ids) == 0 or ids[-1] not in eos_and_pad else location
                for ids, location in zip(completion_ids_list, locations, strict=True)
            ]
        return locations

    def _meds_rule_codes(self, locations, completion_ids_list) -> torch.Tensor:
        """Per row (B,): which answer-token rule located it (:data:`RULE_CODES`), or whether a row without a
        feature has a non-empty box in its decoded text (found by the decoded rule) or none."""
        codes = []
        for location, ids in zip(locations, completion_ids_list, strict=True):
            if location is not None:
                codes.append(RULE_CODES[location.rule])
            elif len(ids) and locate_answer_tokens([ids], self.processing_class, rule="decoded")[0] is not None:
                codes.append(RULE_CODES["boxed_without_feature"])
            else:
                codes.append(RULE_CODES["no_box"])
        return torch.tensor(codes, dtype=torch.long)

    def _meds_log_rules(self, rule_codes: torch.Tensor) -> None:
        """``meds/answer_token_rule_*`` (fractions of the batch located by each rule), ``meds/frac_boxed_without_feature``
        (of the completions with a non-empty box, the fraction that got no feature), and one warning per run when
        that fraction is above one half: MEDS then shapes almost nothing (e.g. ``meds_answer_token="reference"`` on a
        tokenizer that splits ``\\boxed{`` unlike Qwen's, or truncated boxed completions under
        ``mask_truncated_completions``)."""
        metrics = self._metrics["train"]
        num = len(rule_codes)
        decoded_name = "decoded_fallback" if self.args.meds_answer_token == "auto" else "decoded"
        located_reference = int((rule_codes == RULE_CODES["reference"]).sum())
        located_decoded = int((rule_codes == RULE_CODES["decoded"]).sum())
        boxed_without = int((rule_codes == RULE_CODES["boxed_without_feature"]).sum())
        boxed = located_reference + located_decoded + boxed_without
        metrics["meds/answer_token_rule_reference"].append(located_reference / num if num else 0.0)
        metrics[f"meds/answer_token_rule_{decoded_name}"].append(located_decoded / num if num else 0.0)
        metrics["meds/frac_boxed_without_feature"].append(boxed_without / boxed if boxed else 0.0)
        if boxed and boxed_without / boxed > 0.5 and not self._meds_warned_boxed_without_feature:
            self._meds_warned_boxed_without_feature = True
            if self.accelerator.is_main_process:
                logger.warning(
                    "MEDS found no answer token in %d of the %d completions with a non-empty \\boxed{} this step "
                    "(meds_answer_token=%r, mask_truncated_completions=%s): MEDS shapes almost nothing. Use "
                    "meds_answer_token='auto' (the reference rule with the decoded-text fallback) on tokenizers that "
                    "split \\boxed{ unlike Qwen's. Warned once; see meds/frac_boxed_without_feature.",
                    boxed_without, boxed, self.args.meds_answer_token, self.args.mask_truncated_completions,
                )  # fmt: skip

    def _meds_log_agentic(self) -> None:
        """On tool-calling batches, ``meds/agentic_no_answer`` and ``meds/agentic_answer_outside_final_turn``: the
        rollouts of the step (all processes) whose final assistant turn has no answer token, without and with a
        ``\\boxed{}`` elsewhere (tool output or an earlier turn). Such rollouts get no feature and no penalty."""
        statuses = getattr(self, "_meds_agentic_statuses", None)
        if statuses is None:
            return
        local = torch.tensor(
            [[s == AGENTIC_NO_ANSWER, s == AGENTIC_ANSWER_OUTSIDE_FINAL_TURN] for s in statuses] or [[0, 0]],
            dtype=torch.float32,
            device=self.accelerator.device,
        ).sum(dim=0, keepdim=True)
        totals = self.accelerator.gather(local).sum(dim=0).tolist()
        self._metrics["train"]["meds/agentic_no_answer"].append(totals[0])
        self._metrics["train"]["meds/agentic_answer_outside_final_turn"].append(totals[1])

    def _meds_num_chunks(self, num_rows: int, batch_size: int) -> int:
        """Forward chunks of the own feature forward, agreed over the ranks (the maximum of theirs).

        Under FSDP2 / ZeRO-3 each forward is a collective, so every rank runs the same number (dummy chunks
        fill in) and none skips it, or the ranks hang on mismatched collectives.
        """
        local = forward_chunk_count(num_rows, batch_size)
        if self.accelerator.num_processes == 1:
            return local
        counts = self.accelerator.gather(torch.tensor([local], device=self.accelerator.device))
        return int(counts.max())

    def _meds_local_features(self, completion_ids_list) -> tuple[torch.Tensor, torch.Tensor, str]:
        """This process's features ``(B, d)``, feature mask ``(B,)`` and the source ("captured"/"forward")."""
        locations = self._meds_locations
        if locations is None or len(locations) != len(completion_ids_list):
            locations = self._meds_locate(completion_ids_list)
        self._meds_local_rule_codes = self._meds_rule_codes(locations, completion_ids_list)
        has_feature = torch.tensor([loc is not None for loc in locations], dtype=torch.bool)
        if self._meds_captured_logits is not None:
            logits = self._meds_captured_logits
            features = torch.zeros((len(locations), logits.size(1) - int(self.args.meds_use_layer_diff)))
            if has_feature.any():
                features[has_feature] = features_from_layer_logits(
                    logits[has_feature], use_layer_diff=self.args.meds_use_layer_diff
                )
            self._meds_captured_logits = None
            return features, has_feature, "captured"
        if self._meds_prompt_ids is None or len(self._meds_prompt_ids) != len(completion_ids_list):
            raise RuntimeError(
                "MEDS needs the prompt token ids of the batch, which `_generate` records; a custom generation path "
                "bypassed it. Call MEDSGRPOTrainer._generate (or set `trainer._meds_prompt_ids`) before the rewards."
            )
        batch_size = self.args.per_device_train_batch_size
        num_chunks = self._meds_num_chunks(sum(loc is not None for loc in locations), batch_size)
        with activation_checkpointing_disabled(self.model, self.args.gradient_checkpointing_kwargs):
            features, has_feature, _ = answer_logit_features(
                self.model,
                self._meds_prompt_ids,
                completion_ids_list,
                locations,
                self._meds_layer_indices,
                pad_token_id=self._tokenizer.pad_token_id or 0,
                logit_lens=self.args.meds_logit_lens,
                use_layer_diff=self.args.meds_use_layer_diff,
                batch_size=batch_size,
                autocast=self.accelerator.autocast(),
                parts=self._meds_decoder_parts(),
                num_chunks=num_chunks,
            )
        return features, has_feature, "forward"

    def _meds_snippet_texts(self, completion_ids_list) -> list[str] | None:
        """Answer regions of the gathered batch's completions (``meds_store_snippets``), else None."""
        if not self.args.meds_store_snippets:
            return None
        texts = self._tokenizer.batch_decode(completion_ids_list, skip_special_tokens=True)
        return gather_object([answer_region(text, self.args.meds_snippet_max_chars) for text in texts])

    def _meds_note_problems(self, keys_local, prompts, is_correct, scored) -> None:
        """Attach the problem text to memory keys without one (for reports; every rank does the same)."""
        offset = self.accelerator.process_index * len(prompts)
        missing: dict[tuple[str, bool], str] = {}
        for j, (key, prompt) in enumerate(zip(keys_local, prompts)):
            memory_key = (key, bool(is_correct[offset + j]))
            if scored[offset + j] and memory_key not in missing and not self.meds_memory.has_note(memory_key):
                text = problem_text(prompt)
                missing[memory_key] = text if len(text) <= 1000 else text[:1000] + "…"
        for memory_key, text in gather_object(list(missing.items())):
            self.meds_memory.set_note(tuple(memory_key), text)

    def _meds_prompt_keys(self, inputs: list[dict[str, Any]], prompts: list) -> list[str]:
        column = self.args.meds_prompt_id_column
        if column is not None and inputs and all(column in example for example in inputs):
            return prompt_keys(prompts, [example[column] for example in inputs])
        return prompt_keys(prompts)

    # ------------------------------------------------------------------------------------------
    # Shaping
    # ------------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's gathered rewards with the ``meds_penalty`` column filled in.

        Rows whose correctness reward is ``None`` (NaN: "cannot grade this row") keep a NaN penalty, are not
        stored in the memory and are not penalised: with no other reward they stay unscorable for TRL
        (advantage 0, TRL's warning kept), exactly as under plain GRPO; with other rewards they are scored by
        those alone. Evaluation batches get a zero penalty and do not touch the memory.
        """
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        binarize_trainer_correctness(self, rewards_per_func)  # meds_binarize_correctness; logs meds/frac_correct
        if self.model.training:
            penalties = self._meds_shape(inputs, prompts, completion_ids_list, rewards_per_func)
        else:
            penalties = torch.zeros(rewards_per_func.size(0))
        ungraded = torch.isnan(rewards_per_func[:, self.args.meds_correctness_reward_index]).cpu()
        penalties = penalties.masked_fill(ungraded, torch.nan)
        if self.model.training:
            self.meds_last_penalties = penalties.numpy().copy()
        rewards_per_func[:, self._meds_penalty_index] = penalties.to(rewards_per_func.device)
        if self.model.training:
            self._meds_log_advantage_diagnostics(rewards_per_func)
        return rewards_per_func

    def _meds_check_correctness(self, correctness_reward: torch.Tensor) -> None:
        """On the first training batch: the correctness reward must be a 0/1 verdict (see ``correctness.py``)."""
        if self._meds_correctness_checked:
            return
        self._meds_correctness_checked = True
        check_trainer_correctness_reward(self, correctness_reward.tolist())

    def _meds_log_advantage_diagnostics(self, rewards_per_func: torch.Tensor) -> None:
        """Log ``meds/advantage_shift`` and ``meds/frac_groups_differentiated`` (see ``meds/diagnostics.py``)."""
        correctness = rewards_per_func[:, self.args.meds_correctness_reward_index].double().cpu().numpy()
        with np.errstate(invalid="ignore"):
            is_correct = correctness >= correctness_threshold(self)  # NaN -> False (not penalised)
        diagnostics = meds_advantage_diagnostics(
            rewards_per_func.double().cpu().numpy(),
            self._meds_penalty_index,
            self.reward_weights.double().cpu().numpy(),
            np.arange(len(correctness)) // self.num_generations,
            is_correct,
            scale_rewards=self.scale_rewards,
            aggregation=self.multi_objective_aggregation,
        )
        for name, value in diagnostics.items():
            self._metrics["train"][f"meds/{name}"].append(value)
        self._meds_warn_without_effect(diagnostics["advantage_shift"], rewards_per_func)

    def _meds_warn_without_effect(self, advantage_shift: float, rewards_per_func: torch.Tensor) -> None:
        """Warn once when MEDS changed no update in ``NO_EFFECT_BATCHES`` consecutive batches (``meds/idle.py``)."""
        if getattr(self, "_meds_no_effect_warned", False):
            return
        shifts = getattr(self, "_meds_recent_shifts", [])
        self._meds_recent_shifts = [*shifts, float(advantage_shift)][-NO_EFFECT_BATCHES:]
        if meds_without_effect(self._meds_recent_shifts, batches=NO_EFFECT_BATCHES):
            self._meds_no_effect_warned = True
            penalties = rewards_per_func[:, self._meds_penalty_index]
            wrong_keys = [key for key in self.meds_memory.keys() if isinstance(key, tuple) and key[-1] is False]
            wrong_rows = sum(self.meds_memory.num_stored_rows(key) for key in wrong_keys)
            logger.warning(
                no_effect_warning(
                    self.state.global_step + 1,
                    NO_EFFECT_BATCHES,
                    float((penalties != 0).float().mean()) if len(penalties) else 0.0,
                    len(wrong_keys),
                    wrong_rows,
                    self.scale_rewards,
                )
            )

    def _meds_shape(
        self, inputs, prompts, completion_ids_list, rewards_per_func: torch.Tensor
    ) -> torch.Tensor:
        """Update the memory with the gathered features and return the penalty column ``(B_global,)``."""
        args = self.args
        device = self.accelerator.device
        start = time.perf_counter()
        features_local, has_local, source = self._meds_local_features(completion_ids_list)
        time_features = time.perf_counter() - start
        self._meds_last_feature_source = source
        keys_local = self._meds_prompt_keys(inputs, prompts)

        # Groups may be split across processes: every rank sees the whole gathered batch, in the same order
        # as the gathered rewards, and passes it to the memory (sharded: each rank fits the prompts it owns).
        features = gather(features_local.to(device)).float().cpu()
        has_feature = gather(has_local.to(device)).bool().cpu()
        rule_codes = gather(self._meds_local_rule_codes.to(device)).cpu()
        keys = gather_object(keys_local)
        snippet_texts = self._meds_snippet_texts(completion_ids_list)
        answers = None
        if self.meds_answer_memory is not None:
            texts = self._tokenizer.batch_decode(completion_ids_list, skip_special_tokens=True)
            answers = gather_object([extract_final_answer(text) for text in texts])
        correctness_reward = rewards_per_func[:, args.meds_correctness_reward_index].float().cpu()
        if (
            not self._meds_correctness_checked
            and not bool(has_feature.any())
            and inputs
            and "tests" in inputs[0]
        ):
            raise ValueError(
                _MEDS_ON_CODE_MESSAGE.format(
                    found=f"the training rows have a 'tests' column and none of the first batch's {len(keys)} "
                    "rollouts has an answer token"
                )
            )
        self._meds_check_correctness(correctness_reward)
        graded = ~torch.isnan(correctness_reward)
        featured = has_feature & graded
        is_correct = (correctness_reward >= correctness_threshold(self)).numpy()
        # Groups whose correctness has no variance (all wrong or all right): the reference never trains on them
        # (DAPO's filter on accuracy), so by default the penalty gives them no advantage.
        uniform = torch.from_numpy(uniform_correctness_rows(is_correct, self.num_generations, graded.numpy()))
        # Reference parity: only the rows the reference trains on are memorised. Under dynamic sampling those are the
        # rows DAPO's filter and batch trim keep; without it, the rows of groups whose correctness varies.
        survivors = None
        if args.meds_memory_scope == "filtered":
            survivors = self.dynamic_sampling_survivors(rewards_per_func)
            if survivors is None and not args.meds_shape_uniform_groups:
                survivors = ~uniform
        scored = featured if survivors is None else featured & survivors
        num_not_memorised = int((featured & ~scored).sum())
        shaped_rows = scored if args.meds_shape_uniform_groups else scored & ~uniform

        rows = np.flatnonzero(scored.numpy())
        cluster_sizes = np.full(len(keys), -1, dtype=np.int64)
        penalties = torch.zeros(len(keys), dtype=torch.float32)
        # Rows whose prompt already holds stored wrong rollouts: only these can get nonzero, different sizes.
        revisited = np.array([(key, False) in self.meds_memory for key in keys], dtype=bool)
        start = time.perf_counter()
        if len(rows) > 0:
            memory_keys = [(keys[i], bool(is_correct[i])) for i in rows]
            torch_threads = torch.get_num_threads()
            try:
                snippets = None
                if snippet_texts is not None:
                    step = self.state.global_step + 1  # the step these completions train, as it is logged
                    snippets = [RowSnippet(snippet_texts[i], step=step, sample=int(i)) for i in rows]
                sizes = self.meds_memory.assign_and_update(memory_keys, features[rows].numpy(), snippets)
            finally:
                # The first numba-parallel fit initialises the OpenMP runtime torch shares and resets its
                # thread count (measured: 1 -> 2 on a 2-core box); keep the user's setting for training.
                torch.set_num_threads(torch_threads)
            if answers is not None:  # the answer-oracle ablation: clusters by exact final answer
                sizes = self.meds_answer_memory.assign_and_update(memory_keys, [answers[i] for i in rows])
                for name, value in self.meds_answer_memory.last_step_stats().items():
                    self._metrics["train"][f"meds/answer_memory/{name}"].append(value)
            sizes = np.asarray(sizes, dtype=np.int64)
            cluster_sizes[rows] = sizes
            if snippet_texts is not None:
                self._meds_note_problems(keys_local, prompts, is_correct, scored.numpy())
            rewards = correctness_reward[rows].numpy().astype(np.float64)
            shaped = np.asarray(
                shape_rewards(
                    rewards,
                    is_correct[rows],
                    sizes,
                    args.meds_alpha,
                    args.meds_beta,
                    args.meds_penalty_target,
                    has_feature=shaped_rows.numpy()[rows],  # memorised, but not shaped: no penalty
                ),
                dtype=np.float64,
            )
            penalties[rows] = torch.from_numpy(shaped - rewards).float()
        time_clustering = time.perf_counter() - start

        self.meds_last_cluster_sizes = cluster_sizes
        self.meds_last_penalties = penalties.numpy().copy()
        self._meds_log_rules(rule_codes)
        self._meds_log_agentic()
        self._meds_log(
            features[scored],
            cluster_sizes,
            penalties,
            has_feature,
            scored,
            time_features,
            time_clustering,
            memory_updated=len(rows) > 0,
        )
        self._meds_count_groups(penalties, is_correct, shaped_rows.numpy(), revisited)
        self._metrics["train"]["meds/num_not_memorised"].append(float(num_not_memorised))
        self._metrics["train"]["meds/frac_groups_uniform"].append(
            float(uniform.view(-1, self.num_generations)[:, 0].float().mean()) if len(uniform) else 0.0
        )
        self._meds_log_idle(uniform, shaped_rows)
        self._metrics["train"]["collapse/cluster_concentration"].append(
            self._meds_wrong_cluster_concentration([keys[i] for i in rows if not is_correct[i]])
        )
        process_slice = slice(
            self.accelerator.process_index * len(prompts), (self.accelerator.process_index + 1) * len(prompts)
        )
        self._log_completion_extra("meds_cluster_size", cluster_sizes[process_slice].tolist())
        logger.debug("MEDS step: %d/%d rows with features (%s)", int(scored.sum()), len(keys), source)
        return penalties

    def _meds_wrong_cluster_concentration(self, wrong_keys: list[str]) -> float:
        """``collapse/cluster_concentration``: mean over the batch's prompts with at least 2 stored wrong completions
        of the share of them in the prompt's largest cluster (:func:`~hf_meds_cliff.collapse.cluster_concentration`);
        NaN when no prompt has 2."""
        shares = []
        for key in dict.fromkeys(wrong_keys):
            counts = self.meds_memory.label_counts((key, False))  # every key of the step, also when sharded
            if sum(counts.values()) >= 2:
                shares.append(cluster_concentration([label for label, n in counts.items() for _ in range(n)]))
        return sum(shares) / len(shares) if shares else math.nan

    def _meds_log_idle(self, uniform: torch.Tensor, shaped_rows: torch.Tensor) -> None:
        """``meds/idle`` and ``meds/frac_rows_shapeable``; warn once when most groups are uniform and nothing
        replaces or shapes them (see :mod:`hf_meds_cliff.meds.idle`)."""
        num_groups = len(uniform) // self.num_generations
        uniform_groups = int(uniform.view(-1, self.num_generations)[:, 0].sum()) if num_groups else 0
        idle = meds_idle(
            uniform_groups,
            num_groups,
            dynamic_sampling=bool(self.args.dynamic_sampling),
            shape_uniform_groups=bool(self.args.meds_shape_uniform_groups),
        )
        metrics = self._metrics["train"]
        metrics["meds/idle"].append(float(idle))
        metrics["meds/frac_rows_shapeable"].append(float(shaped_rows.float().mean()) if len(shaped_rows) else 0.0)
        if idle and not getattr(self, "_meds_idle_warned", False):
            self._meds_idle_warned = True
            logger.warning(
                idle_warning(
                    self.state.global_step + 1, uniform_groups, num_groups, int(shaped_rows.sum()), len(shaped_rows)
                )
            )

    def _meds_count_groups(self, penalties, is_correct, shaped_rows, revisited) -> None:
        """``meds/groups_mixed``, ``groups_revisited``, ``groups_differentiated``, ``rollouts_penalised`` of this
        batch (:func:`~hf_meds_cliff.meds.diagnostics.meds_group_counts`), added to :attr:`meds_totals`."""
        counts = meds_group_counts(
            penalties.numpy(),
            is_correct,
            shaped_rows,
            revisited,
            np.arange(len(is_correct)) // self.num_generations,
        )
        for name, value in counts.items():
            self._metrics["train"][f"meds/{name}"].append(float(value))
        self.meds_totals.update(counts)

    def _meds_log(
        self,
        features,
        cluster_sizes,
        penalties,
        has_feature,
        scored,
        time_features,
        time_clustering,
        memory_updated: bool = True,
    ):
        metrics = self._metrics["train"]
        num = len(cluster_sizes)
        metrics["meds/frac_with_feature"].append(float(has_feature.float().mean()) if num else 0.0)
        metrics["meds/num_without_feature"].append(float(num - int(has_feature.sum())))
        metrics["meds/mean_penalty"].append(float(penalties.mean()) if num else 0.0)
        metrics["meds/frac_penalized"].append(float((penalties != 0).float().mean()) if num else 0.0)
        metrics["meds/time_features_s"].append(float(time_features))
        metrics["meds/time_clustering_s"].append(float(time_clustering))
        if len(features) >= 2:
            metrics["meds/top1_eigen_ratio"].append(float(top1_eigen_ratio(features.numpy())))
        if not memory_updated:  # e.g. a dynamic-sampling round without survivors: the memory's stats are old
            return
        # The memory's own statistics: clusters_per_key, noise_fraction, mean/max_cluster_size, memory_rows, ...
        for name, value in sorted(self.meds_memory.last_step_stats().items()):
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                metrics[f"meds/{name}"].append(float(value))

    # ------------------------------------------------------------------------------------------
    # Checkpointing
    # ------------------------------------------------------------------------------------------

    def _save_checkpoint(self, model, trial):
        # The memory goes in first: transformers writes trainer_state.json (what marks a checkpoint complete)
        # and rotates older checkpoints only at the end of super(), so a run killed while saving never leaves a
        # complete-looking checkpoint without its memory, nor deletes the previous one before this one is whole.
        # (``_save_rng_state``/``_save_optimizer_and_scheduler`` would also run before trainer_state.json, but
        # are skipped with ``save_only_model``.)
        if self.args.meds_save_memory and (self.args.should_save or self.accelerator.num_processes > 1):
            # sharded (several processes): every rank writes its shard, rank 0 the manifest (a collective)
            self.meds_memory.save(checkpoint_folder(self, trial) / MEMORY_DIRNAME)
        if self.args.meds_save_memory and self.args.should_save and self.meds_answer_memory is not None:
            self.meds_answer_memory.save(checkpoint_folder(self, trial) / MEMORY_DIRNAME)
        # Every process its own totals (they count its own rows), so meds_summary() covers the whole run on resume.
        save_checkpoint_json(checkpoint_folder(self, trial), self._meds_totals_name(), dict(self.meds_totals))
        super()._save_checkpoint(model, trial)

    def _meds_totals_name(self) -> str:
        return f"meds_totals.rank{self.accelerator.process_index}.json"

    def _meds_load_totals(self, checkpoint: str) -> None:
        """Restore this process's :attr:`meds_totals`. They only feed :meth:`meds_summary`, never training: a
        checkpoint without them (written before they were saved) or with a damaged file resumes with a warning, and
        the summary counts from the resume on."""
        path = os.path.join(checkpoint, self._meds_totals_name())
        consequence = "meds_summary() counts from this resume on."
        totals = load_optional_checkpoint_json(path, "MEDS's totals of this process", consequence)
        if totals is None:
            return
        if not isinstance(totals, dict) or not all(
            isinstance(value, (int, float)) and not isinstance(value, bool) for value in totals.values()
        ):
            logger.warning("MEDS's totals of this process not restored: %s holds %r, not counts by name. %s",
                           path, totals, consequence)  # fmt: skip
            return
        self.meds_totals = Counter(totals)

    def _resume_method_files(self) -> tuple[str, ...]:
        # resume_from_checkpoint=True skips a checkpoint whose memory files are gone (unless an empty memory is allowed)
        if not self.args.meds_save_memory or self.args.meds_allow_empty_memory_on_resume:
            return ()
        names = (MEMORY_JSON_NAME,)  # the manifest; the shard files it lists under "requires" are checked too
        names += (ANSWER_MEMORY_JSON_NAME,) if self.meds_answer_memory is not None else ()
        return tuple(f"{MEMORY_DIRNAME}/{name}" for name in names)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        self._meds_load_totals(checkpoint)
        if not self.args.meds_save_memory:
            return
        path = os.path.join(checkpoint, MEMORY_DIRNAME)
        try:
            memory = load_error_memory(path, self.accelerator.num_processes, self.accelerator.process_index)
            self._meds_check_restored_memory(memory, path)
            answer_memory = AnswerMemory.load(path) if self.meds_answer_memory is not None else None
        except (OSError, ValueError) as error:  # missing, unreadable, truncated or mismatched files
            if not self.args.meds_allow_empty_memory_on_resume:
                raise ValueError(
                    f"Cannot resume MEDS from {checkpoint}: its error memory is not usable. {error} Options: resume "
                    f"from another checkpoint whose {MEMORY_DIRNAME}/ is intact (--resume_from_checkpoint PATH), or "
                    "pass --meds_allow_empty_memory_on_resume true to continue from an empty memory (cluster sizes "
                    "restart from zero, so the run differs from an uninterrupted one)."
                ) from error
            logger.warning(
                "meds_allow_empty_memory_on_resume: resuming from %s with an EMPTY error memory (%s).",
                checkpoint,
                error,
            )
            return
        self.meds_memory = memory
        if answer_memory is not None:
            self.meds_answer_memory = answer_memory
        logger.info(
            "Restored the MEDS error memory from %s (%d rows, %d keys)", path, memory.num_rows, len(memory)
        )

    def _meds_check_restored_memory(self, memory: ErrorMemory | ShardedErrorMemory, path: str) -> None:
        """Reject a memory whose feature width this run cannot produce; warn when its settings differ."""
        width = len(self._meds_layer_indices) - int(self.args.meds_use_layer_diff)
        if memory.dim is not None and memory.dim != width:
            raise ValueError(
                f"{path} stores {memory.dim}-wide features, but this run computes {width}-wide ones "
                f"({len(self._meds_layer_indices)} kept layers, meds_num_layers={self.args.meds_num_layers}, "
                f"meds_use_layer_diff={self.args.meds_use_layer_diff}): resume with the model, meds_num_layers and "
                "meds_use_layer_diff of the run that wrote it."
            )
        current = self.meds_memory.config()
        if memory.config() != current:
            logger.warning(
                "The restored memory keeps its own settings %s, which differ from this run's %s.",
                memory.config(),
                current,
            )
