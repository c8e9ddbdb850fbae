"""``CliffGRPOTrainer``: GRPO with teacher-located first mistakes and prefix/suffix token advantages."""

from __future__ import annotations

import json
import logging
import math
import os
import textwrap
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from accelerate.utils import gather_object
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from ..dapo import DynamicSamplingMixin
from ..data import prompt_keys
from ..model_card import MethodModelCardMixin
from .advantages import cliff_token_advantages, first_mistake_token_positions
from .config import CliffConfig
from .protocol import GROUP_CLIFF, CliffJudge, StepOutcome, StepRows, problem_text

logger = logging.getLogger(__name__)

CLIFF_STATE_NAME = "cliff_state.json"


class CliffTokenAdvantageTrainer(MethodModelCardMixin, GRPOTrainer):
    r"""
    Cliff (learning process rewards from the first mistake) on top of TRL's [`~trl.GRPOTrainer`].

    Use :class:`CliffGRPOTrainer`, which is this class with DAPO's dynamic sampling available
    (``dynamic_sampling=True``; off by default). The sampling wraps this class's
    ``_generate_and_score_completions``, so every generation round is judged and gets its token advantages
    before rounds are merged; zero-variance groups, which the sampling drops, cost no teacher call anyway.

    For every mixed group (some rollouts correct, some not) a teacher that solved the problem correctly (reference
    filter) locates the first mistaken sentence p(a) of each incorrect rollout; the tokens before it get
    ``λ·A_cor − b`` and the tokens from it on ``A_inc − b`` (``b``: the group's token-weighted mean, so a group's
    token advantages sum to zero). Groups without variance, without a verified reference, or whose teacher calls
    failed at the endpoint keep TRL's sequence-level advantages. See ``shared/spec/cliff.md`` and
    :mod:`hf_meds_cliff.cliff.protocol`.

    Overrides (all call ``super()`` first and only post-process):

    - ``_calculate_rewards``: records this step's prompts, completion ids, dataset rows and the gathered rewards
      (returned unchanged).
    - ``_generate_and_score_completions``: in training mode, replaces the ``(B,)`` ``advantages`` of the output with
      ``(B, T)`` Cliff token advantages (TRL's loss accepts both; ``_prepare_inputs`` shuffles and splits the
      ``(B, T)`` tensor with the rest of the batch). Logged ``advantages`` in the completions table stay TRL's
      per-sequence values. Evaluation batches are left untouched (no teacher calls).
    - ``_save_checkpoint`` / ``_load_optimizer_and_scheduler``: save the reference and judgment caches as
      ``cliff_state.json`` in every checkpoint and restore them on resume.
    - ``create_model_card`` (from :class:`~hf_meds_cliff.model_card.MethodModelCardMixin`): adds the ``cliff_*``
      hyperparameters and the reproduce command.

    Args:
        teacher: an object following :class:`hf_meds_cliff.cliff.teachers.base.Teacher`; when ``None`` it is built
            from the ``cliff_teacher*`` fields of ``args``.
        reference_verifier: ``verify(teacher_solution, ground_truth) -> bool`` for the reference filter; defaults
            to :func:`hf_meds_cliff.rewards.check_answer` (math answers). Pass one for other tasks (e.g. code).
        All other arguments are those of [`~trl.GRPOTrainer`]; ``args`` must be a [`CliffConfig`].

    Metrics (under ``cliff/``, identical on every process): ``groups_cliff``, ``groups_skipped``,
    ``groups_fallback_unverified``, ``groups_fallback_endpoint`` (groups per step), ``solve_calls``,
    ``judge_calls``, ``reference_cache_hits``, ``judgment_cache_hits``, ``truncated``, ``judge_failures/<kind>``,
    ``solve_failures/<kind>``, ``teacher/<counter>`` (the teacher's own counts summed over processes: requests,
    retries, ``failures/<kind>`` including endpoint failures of ``solve``), ``agreement`` (teacher–verifier agreement on judged incorrect rollouts),
    ``disagreements``, ``first_mistake_sentence``, ``first_mistake_sentence_fraction``, ``prefix_fraction`` (share
    of the rollout's tokens before its first mistake), ``judge_wall_time`` (seconds), ``self_consistency_agreement``.

    Limitations: multi-turn tool masks are not used for ``b`` (the completion mask is); the group baseline ``b``
    uses ``completion_mask`` after TRL's ``mask_truncated_completions``.
    """

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "cliff", "hf-meds-cliff"]
    _name = "Cliff"
    _config_prefix = "cliff_"
    _paper: ClassVar[dict[str, str]] = {
        "title": "Cliff: Learning Process Rewards from the First Mistake",
        "id": None,  # no arXiv id known: TRL then prints no (broken) papers link
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{cliff2026,
                title        = {{Cliff: Learning Process Rewards from the First Mistake}},
                year         = 2026,
            }"""),
    }

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: CliffConfig | None = None,
        *pargs,
        teacher=None,
        reference_verifier: Callable[[str, str], bool] | None = None,
        **kwargs,
    ):
        if args is None:
            model_name = model if isinstance(model, str) else model.config._name_or_path
            args = CliffConfig(f"{str(model_name).split('/')[-1]}-Cliff")
        if not isinstance(args, CliffConfig):
            raise TypeError(
                f"CliffGRPOTrainer needs args of type CliffConfig, got {type(args).__name__}; build it with "
                "hf_meds_cliff.CliffConfig(...) (it accepts every GRPOConfig field)."
            )
        super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        if args.cliff_correctness_reward_index >= len(self.reward_funcs):
            raise ValueError(
                f"cliff_correctness_reward_index={args.cliff_correctness_reward_index} but only "
                f"{len(self.reward_funcs)} reward function(s) were given; point it at the correctness reward."
            )
        columns = getattr(self.train_dataset, "column_names", None)
        if args.cliff_reference_filter and columns is not None and args.cliff_answer_column not in columns:
            raise ValueError(
                f"cliff_answer_column={args.cliff_answer_column!r} is not a column of the training dataset "
                f"({columns}); the reference filter needs the ground truth to verify the teacher's solutions. Point "
                "--cliff_answer_column at it, or pass --cliff_reference_filter false."
            )
        if teacher is None:
            from .teachers import build_teacher

            teacher = build_teacher(args)
        self.teacher = teacher
        self.cliff_judge = CliffJudge(
            teacher,
            verify=reference_verifier,
            reference_filter=args.cliff_reference_filter,
            reference_cache=args.cliff_reference_cache,
            judgment_cache=args.cliff_judgment_cache,
            self_consistency=args.cliff_self_consistency,
            reducer=args.cliff_self_consistency_reducer,
        )
        self._cliff_pending: tuple | None = None
        self._cliff_failure_keys: set[str] = set()
        self._teacher_counters_seen: Counter = Counter()
        self.cliff_last_outcome: StepOutcome | None = None

    # -- recording the step ----------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._cliff_pending = (inputs, prompts, completion_ids_list, rewards_per_func)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self._cliff_pending = None
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return output
        if self._cliff_pending is None:
            raise RuntimeError(
                "CliffGRPOTrainer did not see this step's rewards: GRPOTrainer._calculate_rewards was not called. "
                "This TRL version is not supported (pinned: trl>=1.16,<1.17)."
            )
        pending, self._cliff_pending = self._cliff_pending, None
        output["advantages"] = self._cliff_advantages(output, *pending)
        return output

    # -- the Cliff step ---------------------------------------------------------------------------------------------

    def _cliff_advantages(
        self, output, inputs, prompts, completion_ids_list, rewards_per_func
    ) -> torch.Tensor:
        """(B_local, T) token advantages for this process's rows (see the class docstring)."""
        args: CliffConfig = self.args
        accelerator = self.accelerator
        world_size, rank = accelerator.num_processes, accelerator.process_index
        local_count = len(prompts)
        device = output["advantages"].device

        # Per-sequence advantages, correctness and truncation of every row of the step (groups can span processes).
        sequence_advantages = accelerator.gather(output["advantages"]).float()
        correctness = torch.nan_to_num(
            rewards_per_func[:, args.cliff_correctness_reward_index], nan=-math.inf
        )
        is_correct = correctness >= args.cliff_correctness_threshold
        eos_and_pad = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        texts = self._tokenizer.batch_decode(completion_ids_list, skip_special_tokens=True)
        local_rows = [
            (
                key,
                problem_text(prompt),
                _ground_truth(row.get(args.cliff_answer_column)),
                text,
                bool(len(ids)) and ids[-1] not in eos_and_pad,
            )
            for key, prompt, row, text, ids in zip(
                prompt_keys(prompts), prompts, inputs, texts, completion_ids_list
            )
        ]
        all_rows = gather_object(local_rows) if world_size > 1 else local_rows
        global_count = len(all_rows)
        group_ids = torch.arange(global_count, device=device) // self.num_generations
        rows = StepRows(
            prompt_keys=[r[0] for r in all_rows],
            problems=[r[1] for r in all_rows],
            ground_truths=[r[2] for r in all_rows],
            completions=[r[3] for r in all_rows],
            is_correct=is_correct.tolist(),
            is_truncated=[r[4] for r in all_rows],
            group_ids=group_ids.tolist(),
        )
        outcome = self.cliff_judge.process_step(rows, rank=rank, world_size=world_size, gather=gather_object)
        self.cliff_last_outcome = outcome
        # Judge inspection: each rollout's first-mistake sentence (None = plain GRPO) beside TRL's completions table,
        # which super() has just extended with this step's gathered completions in the same order.
        self._logs["extra"]["cliff_first_mistake"].extend(outcome.first_mistake)
        self._logs["extra"]["cliff_group_mode"].extend(outcome.group_modes)
        teacher_counts = self._teacher_counter_deltas(world_size)

        # Sentence index -> token index for this process's rows; then all rows, for the group baselines.
        local = slice(rank * local_count, (rank + 1) * local_count)
        local_suffix = first_mistake_token_positions(
            self._tokenizer, completion_ids_list, texts, outcome.first_mistake[local]
        )
        suffix_start = torch.tensor(local_suffix, dtype=torch.long, device=device)
        completion_mask = output["completion_mask"]
        if world_size > 1:
            suffix_start = accelerator.gather(suffix_start)
            completion_mask = accelerator.gather(
                accelerator.pad_across_processes(completion_mask, dim=1, pad_index=0)
            )
        mask = completion_mask.float()
        # GRPO with Teacher (cliff_split_credit=False): no correct prefix, the whole rollout is the suffix.
        credited_suffix = suffix_start if args.cliff_split_credit else torch.zeros_like(suffix_start)
        token_advantages = cliff_token_advantages(
            sequence_advantages, is_correct, group_ids, credited_suffix, mask, lam=float(args.cliff_lam)
        )
        uses_cliff = torch.tensor([mode == GROUP_CLIFF for mode in outcome.group_modes], device=device)
        plain = sequence_advantages.unsqueeze(1) * mask
        token_advantages = torch.where(uses_cliff.unsqueeze(1), token_advantages, plain)

        located = torch.tensor([bool(spans) for spans in outcome.sentence_spans], device=device)
        lengths = mask.sum(dim=1).clamp(min=1)
        self._log_cliff_metrics(outcome, (suffix_start.float() / lengths)[located], teacher_counts)
        return token_advantages[local, : output["completion_mask"].shape[1]].contiguous()

    def _teacher_counter_deltas(self, world_size: int) -> Counter:
        """What the teachers of all processes counted during this step (requests, retries, failures by kind)."""
        counters = getattr(self.teacher, "counters", None)
        if not isinstance(counters, dict):
            return Counter()
        current = Counter({str(k): float(v) for k, v in counters.items()})
        delta = Counter({k: v - self._teacher_counters_seen.get(k, 0.0) for k, v in current.items()})
        self._teacher_counters_seen = current
        if world_size == 1:
            return delta
        total: Counter = Counter()
        for part in gather_object([dict(delta)]):
            total.update(part)
        return total

    def _log_cliff_metrics(
        self, outcome: StepOutcome, prefix_fractions: torch.Tensor, teacher_counts: Counter
    ) -> None:
        metrics = self._metrics["train"]
        counters: Counter = outcome.counters + Counter({f"teacher/{k}": v for k, v in teacher_counts.items()})
        for name in (
            "groups_cliff", "groups_skipped", "groups_fallback_unverified", "groups_fallback_endpoint",
            "solve_calls", "judge_calls", "reference_cache_hits", "judgment_cache_hits", "truncated",
            "disagreements", "rollouts_with_mistake",
        ):  # fmt: skip
            metrics[f"cliff/{name}"].append(float(counters.get(name, 0)))
        self._cliff_failure_keys.update(k for k in counters if "_failures/" in k or k.startswith("teacher/"))
        for name in sorted(self._cliff_failure_keys):
            metrics[f"cliff/{name}"].append(float(counters.get(name, 0)))
        judged = counters.get("agreements", 0) + counters.get("disagreements", 0)
        metrics["cliff/agreement"].append(counters.get("agreements", 0) / judged if judged else math.nan)
        for name, samples in outcome.values.items():
            metrics[f"cliff/{name}"].append(sum(samples) / len(samples) if samples else math.nan)
        metrics["cliff/prefix_fraction"].append(
            prefix_fractions.mean().item() if prefix_fractions.numel() else math.nan
        )

    # -- checkpointing ------------------------------------------------------------------------------------------------

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(
                self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            )
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, CLIFF_STATE_NAME), "w") as handle:
                json.dump(self.cliff_judge.state_dict(), handle)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, CLIFF_STATE_NAME)
        if os.path.isfile(path):
            with open(path) as handle:
                self.cliff_judge.load_state_dict(json.load(handle))
            logger.info(
                "Restored Cliff caches from %s (%d references, %d judgments)",
                path, len(self.cliff_judge.references), len(self.cliff_judge.judgments),
            )  # fmt: skip
        else:
            logger.warning("No %s in %s; Cliff caches start empty.", CLIFF_STATE_NAME, checkpoint)

    def close_teacher(self) -> None:
        """Close the teacher's client/model and its event loop."""
        self.cliff_judge.close()


class CliffGRPOTrainer(DynamicSamplingMixin, CliffTokenAdvantageTrainer):
    """Cliff on TRL's ``GRPOTrainer``, with DAPO's dynamic sampling available (``dynamic_sampling=True``).

    The method, its overrides, arguments and ``cliff/`` metrics are those of :class:`CliffTokenAdvantageTrainer`.
    :class:`~hf_meds_cliff.dapo.DynamicSamplingMixin` comes first so it wraps ``_generate_and_score_completions``
    from the outside: every generation round is judged and gets its ``(B, T)`` token advantages, then the kept
    rows of all rounds are merged.
    """


def _ground_truth(value: Any) -> str | None:
    """Ground truth of a dataset row as text (verl-style ``{"ground_truth": ...}`` dicts are unwrapped)."""
    if value is None:
        return None
    if isinstance(value, dict) and "ground_truth" in value:
        value = value["ground_truth"]
    return str(value)
