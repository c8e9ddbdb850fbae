"""``CliffGRPOTrainer``: GRPO with teacher-located first mistakes and prefix/suffix token advantages."""

from __future__ import annotations

import json
import logging
import math
import os
import textwrap
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from ..checkpointing import (
    CheckpointSafetyMixin,
    checkpoint_folder,
    read_json_file,
    save_checkpoint_json,
)
from ..correctness import binarize_trainer_correctness, check_trainer_correctness_reward, correctness_threshold
from ..dapo import DynamicSamplingMixin
from ..data import prompt_keys
from ..model_card import MethodModelCardMixin
from ..agentic import policy_token_mask
from ..sentences import split_code_units, split_sentences
from .advantages import (
    cliff_token_advantages,
    first_mistake_token_positions,
    group_normalised_advantages,
    teacher_outcome_rewards,
    teacher_verifier_counts,
)
from .agentic import AgenticRollout, AgenticSplit, split_agentic_rollout
from .code_domain import CodeTestRunner, code_ground_truth, resolve_cliff_domain, tests_column_of
from .config import CliffConfig
from .cost import COST_KEYS, render_teacher_cost, teacher_step_cost
from .protocol import GROUP_CLIFF, CliffJudge, StepOutcome, StepRows, problem_text
from .splits import (
    SPLIT_WINDOW_ROLLOUTS,
    SplitRecord,
    sequence_level_warning,
    split_record,
    split_step_metrics,
    split_window_warning,
)
from .teachers.rule_based import RuleBasedToyTeacher

logger = logging.getLogger(__name__)

CLIFF_STATE_NAME = "cliff_state.json"
TEACHER_COST_NAME = "cliff_teacher_cost.json"
"""The teacher's cost totals so far (requests, tokens, time), saved in each checkpoint for the model card."""
METRIC_KEYS_FIELD = "logged_counter_keys"
"""In ``TEACHER_COST_NAME``: the failure and teacher counters logged so far (a resumed run logs them from its start)."""
ROLLOUT_LOG_NAME = "cliff_rollouts.jsonl"
"""Judged rollouts appended each step in the output directory (``cliff_log_rollouts``), read by reports."""


class CliffTokenAdvantageTrainer(MethodModelCardMixin, CheckpointSafetyMixin, GRPOTrainer):
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
      ``cliff_state.json`` in every checkpoint (atomically, before TRL's own files) and restore them on resume; a
      checkpoint without a valid one is an error unless ``cliff_allow_missing_state_on_resume``.
    - ``create_model_card`` (from :class:`~hf_meds_cliff.model_card.MethodModelCardMixin`): adds the ``cliff_*``
      hyperparameters and the reproduce command.
    - ``train``, ``_save``, ``_push_from_checkpoint`` (from :class:`~hf_meds_cliff.checkpointing.CheckpointSafetyMixin`):
      ``train(resume_from_checkpoint=True)`` resumes from the newest *complete* checkpoint, skipping (and naming)
      incomplete ones, as the scripts do; ``training_args.bin`` is written without ``hub_token`` or other secrets.

    Domains (``cliff_domain``; ``"auto"`` = code when the correctness reward is a
    :class:`~hf_meds_cliff.code.CodeTestsReward`): on **math** rollouts are numbered by sentence and the teacher's
    reference is checked by math-verify against ``cliff_answer_column``. On **code** (the paper's second domain)
    rollouts are numbered by :func:`~hf_meds_cliff.cliff.split_code_units` (prose sentences, one unit per non-blank
    program line), the teacher's reference program must pass the row's tests (``cliff_tests_column``) in the sandbox
    with the correctness reward's limits, and the judge also sees what running the student's program showed (first
    failing test's input, expected and actual output, or the error); every other protocol step is the same. Partial
    credit on code: correctness stays all-tests-pass (``CodeTestsReward(mode="binary")`` at
    ``cliff_correctness_reward_index``); a ``CodeTestsReward(mode="fraction")`` added as a second reward changes
    only TRL's sequence-level advantages: an incorrect rollout's suffix carries its own (less negative when it
    passes more tests) advantage, correct rollouts all pass everything so ``A_cor`` is unchanged, and a group whose
    rollouts all fail but pass different shares of tests keeps TRL's sequence-level advantages (no teacher call),
    so it still learns from the partial credit.

    Args:
        teacher: an object following :class:`hf_meds_cliff.cliff.teachers.base.Teacher`; when ``None`` it is built
            from the ``cliff_teacher*`` fields of ``args`` (prompting for the run's domain). A teacher with a
            ``domain`` attribute must match the run's domain.
        reference_verifier: ``verify(teacher_solution, ground_truth) -> bool`` for the reference filter; defaults
            to :func:`hf_meds_cliff.rewards.check_answer` (math answers) or, on code, to running the teacher's
            program on the row's tests (:class:`~hf_meds_cliff.cliff.code_domain.CodeTestRunner`).
        All other arguments are those of [`~trl.GRPOTrainer`]; ``args`` must be a [`CliffConfig`].

    Ungraded rollouts: a correctness reward may return ``None`` for a row it cannot grade (TRL allows it, and TRL's
    warning about rows every reward function left ungraded is kept). Such a row is neither correct nor incorrect: it
    never makes a group mixed, is never sent to the teacher, gets no token-level advantage (it keeps TRL's
    sequence-level one, 0 when every reward function returned ``None``) and is left out of its group's Cliff
    baseline ``b``; counted per step as ``cliff/ungraded``.

    Metrics (under ``cliff/``, identical on every process): ``groups_cliff``, ``groups_skipped``, ``ungraded``,
    ``groups_fallback_unverified``, ``groups_fallback_endpoint`` (groups per step), ``solve_calls``,
    ``judge_calls``, ``reference_cache_hits``, ``judgment_cache_hits``, ``truncated``, ``judge_failures/<kind>``,
    ``solve_failures/<kind>``, ``teacher/<counter>`` (the teacher's own counts summed over processes: requests,
    retries, ``failures/<kind>`` including endpoint failures of ``solve``), ``agreement`` (teacher–verifier agreement on judged incorrect rollouts),
    ``disagreements``, ``first_mistake_sentence``, ``first_mistake_sentence_fraction``, ``prefix_fraction`` (share
    of the rollout's tokens before its first mistake), ``judge_wall_time`` (seconds), ``self_consistency_agreement``;
    on code also ``executions`` (student programs run for the judge) and ``execution_failures/<kind>``.

    ``cliff_outcome="teacher"`` (the paper's "GRPO with Teacher" ablation): the same groups, reference filter,
    truncation and failure rules, but the teacher judges every non-truncated rollout of a Cliff group (verifier-right
    ones too) and its verdict replaces the correctness reward; the advantages are GRPO's group normalisation of the
    result (:func:`~hf_meds_cliff.cliff.advantages.teacher_outcome_rewards`,
    :func:`~hf_meds_cliff.cliff.advantages.group_normalised_advantages`), ``(B,)``, one per rollout. Extra metrics:
    ``teacher_judged_rollouts``, ``teacher_verifier_agreement``, ``teacher_says_right_verifier_wrong``,
    ``teacher_says_wrong_verifier_right``, ``teacher_verdict_fallbacks`` (rollouts without a usable verdict, which keep
    the verifier's reward); the agreement counts are per used verdict
    (:func:`~hf_meds_cliff.cliff.advantages.teacher_verifier_counts`).
    A simulated teacher's ``teacher/flipped_to_right`` / ``teacher/flipped_to_wrong``
    (:class:`~hf_meds_cliff.cliff.teachers.NoisyTeacher`) count flips per judge call against its *wrapped* teacher,
    verifier-right rollouts included: flipping the exact rule teacher's "wrong" on a verifier-right rollout makes
    teacher and verifier agree, so flips need not show up as disagreements.

    Tool-calling rollouts (``tools=`` / ``environment_factory=``, see ``docs/agents.md`` and
    :mod:`hf_meds_cliff.cliff.agentic`): the teacher numbers each assistant sentence and each tool call (name and
    arguments, one unit) and sees the environment's replies as labelled context, never as units; the incorrect suffix
    starts at the first token of the first wrong sentence or action; tool-output tokens get no advantage and the group
    baseline ``b`` is the mean over the policy's tokens (``completion_mask * tool_mask``).

    Limitations: the group baseline ``b`` uses ``completion_mask`` after TRL's ``mask_truncated_completions``.
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
                f"CliffGRPOTrainer needs args of type CliffConfig, got {type(args).__name__}; convert yours with "
                "CliffConfig.from_grpo_config(your_grpo_config, cliff_teacher=...) (every GRPOConfig field is kept), "
                "or build a CliffConfig directly."
            )
        super().__init__(model, reward_funcs, args, *pargs, **kwargs)
        if args.cliff_correctness_reward_index >= len(self.reward_funcs):
            raise ValueError(
                f"cliff_correctness_reward_index={args.cliff_correctness_reward_index} but only "
                f"{len(self.reward_funcs)} reward function(s) were given; point it at the correctness reward."
            )
        columns = getattr(self.train_dataset, "column_names", None)
        correctness_reward = self.reward_funcs[args.cliff_correctness_reward_index]
        self.cliff_tests_column = tests_column_of(correctness_reward, args.cliff_tests_column)
        self.cliff_domain = resolve_cliff_domain(
            args.cliff_domain, correctness_reward, columns, self.cliff_tests_column
        )
        if (
            self.cliff_domain == "math"
            and args.cliff_reference_filter
            and columns is not None
            and args.cliff_answer_column not in columns
        ):
            raise ValueError(
                f"cliff_answer_column={args.cliff_answer_column!r} is not a column of the training dataset "
                f"({columns}); the reference filter needs the ground truth to verify the teacher's solutions. Point "
                "--cliff_answer_column at it, or pass --cliff_reference_filter false."
            )
        if teacher is None:
            from .teachers import build_teacher

            teacher = build_teacher(args, domain=self.cliff_domain)
        teacher_domain = getattr(teacher, "domain", None)
        if isinstance(teacher_domain, str) and teacher_domain != self.cliff_domain:
            raise ValueError(
                f"The teacher {teacher!r} prompts for the {teacher_domain!r} domain but this run is "
                f"{self.cliff_domain!r} (cliff_domain={args.cliff_domain!r}); build it with domain="
                f"{self.cliff_domain!r}, or set --cliff_domain to the data's domain."
            )
        self.teacher = teacher
        logger.info("Cliff teacher: %r", teacher)
        if args.cliff_outcome != "teacher" and args.cliff_split_credit:  # else no split reaches the loss anyway
            averaged = sequence_level_warning(args.importance_sampling_level, args.loss_type)
            if averaged is not None:
                logger.warning(averaged)
        # The toy world's rule-based teacher (the default) reads toy questions only: on other data every mixed group
        # would silently fall back to plain GRPO. Checked on the dataset's first rows here, or on the first batch.
        self._cliff_unchecked_rule_teacher = isinstance(teacher, RuleBasedToyTeacher)
        self._check_rule_teacher_reads(_first_problems(self.train_dataset))
        code_runner = None
        if self.cliff_domain == "code":
            from .code_domain import is_code_reward

            code_runner = (
                CodeTestRunner.from_reward(correctness_reward)
                if is_code_reward(correctness_reward)
                else CodeTestRunner()
            )
            if reference_verifier is None:
                reference_verifier = code_runner.verify
        self.cliff_code_runner = code_runner
        self.cliff_judge = CliffJudge(
            teacher,
            verify=reference_verifier,
            # Tool-calling rollouts are numbered by their registered units (sentences and tool calls), others as before.
            split=AgenticSplit(split_code_units if self.cliff_domain == "code" else split_sentences),
            describe_failure=code_runner.describe_failure if code_runner is not None else None,
            checks_in_threads=code_runner is not None,
            reference_filter=args.cliff_reference_filter,
            reference_cache=args.cliff_reference_cache,
            judgment_cache=args.cliff_judgment_cache,
            self_consistency=args.cliff_self_consistency,
            reducer=args.cliff_self_consistency_reducer,
            judge_correct=args.cliff_outcome == "teacher",
        )
        self._cliff_pending: tuple | None = None
        self._cliff_correctness_checked = False  # the first training batch checks the reward is 0/1
        self._cliff_failure_keys: set[str] = set()
        self._teacher_counters_seen: Counter = Counter()
        self.cliff_last_outcome: StepOutcome | None = None
        # Teacher cost (cliff/teacher_*, the model card): running totals and the end of the last round's judging.
        self.cliff_teacher_cost: Counter = Counter({key: 0.0 for key in COST_KEYS})
        # Where the splits of the latest judged wrong rollouts fell (cliff.splits), for the token-0 warning.
        self.cliff_split_window: deque[SplitRecord] = deque(maxlen=SPLIT_WINDOW_ROLLOUTS)
        self._cliff_split_warned = False
        self._cliff_round_started: float | None = None
        self._cliff_last_judged: float | None = None

    # -- recording the step ----------------------------------------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        binarize_trainer_correctness(self, rewards_per_func)  # cliff_binarize_correctness; logs cliff/frac_correct
        if self.model.training and not self._cliff_correctness_checked:
            self._cliff_correctness_checked = True
            correctness = rewards_per_func[:, self.args.cliff_correctness_reward_index]
            check_trainer_correctness_reward(self, correctness.float().cpu().tolist())
        self._cliff_pending = (inputs, prompts, completion_ids_list, rewards_per_func)
        self._cliff_pending_messages = completions  # parsed turns of tool-calling rollouts (cliff.agentic)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self._cliff_pending = None
        self._cliff_round_started = time.perf_counter()
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
        correctness = rewards_per_func[:, args.cliff_correctness_reward_index]
        is_graded = ~torch.isnan(correctness)  # None from the reward function: "cannot grade this row"
        is_correct = correctness >= correctness_threshold(self)  # False on NaN
        eos_and_pad = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        texts = self._tokenizer.batch_decode(completion_ids_list, skip_special_tokens=True)
        agentic = self._cliff_agentic_rollouts(output, completion_ids_list)
        if agentic is not None:  # the teacher sees the transcript: units, and the environment's replies as context
            texts = [rollout.transcript for rollout in agentic]
        if self.cliff_domain == "code":
            ground_truths = [code_ground_truth(row, self.cliff_tests_column) for row in inputs]
        else:
            ground_truths = [_ground_truth(row.get(args.cliff_answer_column)) for row in inputs]
        local_rows = [
            (
                key,
                problem_text(prompt),
                ground_truth,
                text,
                bool(len(ids)) and ids[-1] not in eos_and_pad,
            )
            for key, prompt, ground_truth, text, ids in zip(
                prompt_keys(prompts), prompts, ground_truths, texts, completion_ids_list
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
            is_correct=[bool(c) if g else None for c, g in zip(is_correct.tolist(), is_graded.tolist())],
            is_truncated=[r[4] for r in all_rows],
            group_ids=group_ids.tolist(),
        )
        self._check_rule_teacher_reads(rows.problems)
        self._cliff_register_agentic(agentic, world_size)
        outcome = self.cliff_judge.process_step(rows, rank=rank, world_size=world_size, gather=gather_object)
        self.cliff_last_outcome = outcome
        judged_at = time.perf_counter()
        cycle_started = (
            self._cliff_last_judged if self._cliff_last_judged is not None else self._cliff_round_started
        )
        cycle_time_s = judged_at - cycle_started if cycle_started is not None else 0.0
        self._cliff_last_judged = judged_at
        if args.cliff_log_rollouts and accelerator.is_main_process:
            self._cliff_log_rollouts(rows, outcome)
        # Judge inspection: each rollout's first-mistake sentence (None = plain GRPO) beside TRL's completions table,
        # which super() has just extended with this step's gathered completions in the same order.
        self._logs["extra"]["cliff_first_mistake"].extend(outcome.first_mistake)
        self._logs["extra"]["cliff_group_mode"].extend(outcome.group_modes)
        counts_requests = "requests" in self._teacher_counters_seen or "requests" in getattr(
            self.teacher, "counters", {}
        )
        teacher_counts = self._teacher_counter_deltas(world_size)
        teacher_cost = teacher_step_cost(
            teacher_counts,
            outcome.counters,
            sum(outcome.values.get("judge_wall_time", [0.0])),
            cycle_time_s,
            counts_requests,
        )

        # Sentence index -> token index for this process's rows; then all rows, for the group baselines.
        local = slice(rank * local_count, (rank + 1) * local_count)
        if agentic is not None:  # a unit index -> the token where that sentence or tool call starts
            local_suffix = [
                0 if mistake is None or mistake <= 0 else rollout.token_starts[mistake]
                for rollout, mistake in zip(agentic, outcome.first_mistake[local])
            ]
        else:
            local_suffix = first_mistake_token_positions(
                self._tokenizer, completion_ids_list, texts, outcome.first_mistake[local], self.cliff_judge.split
            )
        suffix_start = torch.tensor(local_suffix, dtype=torch.long, device=device)
        # Multi-turn: tool-output tokens get no advantage and stay out of the baseline b (TRL's tool_mask).
        completion_mask = policy_token_mask(output["completion_mask"], output.get("tool_mask"))
        if world_size > 1:
            suffix_start = accelerator.gather(suffix_start)
            completion_mask = accelerator.gather(
                accelerator.pad_across_processes(completion_mask, dim=1, pad_index=0)
            )
        mask = completion_mask.float()
        # Ungraded rows keep TRL's sequence-level advantage and stay out of the Cliff groups' baselines b.
        # GRPO with Teacher (cliff_split_credit=False): no correct prefix, the whole rollout is the suffix.
        credited_suffix = suffix_start if args.cliff_split_credit else torch.zeros_like(suffix_start)
        plain = sequence_advantages.unsqueeze(1) * mask
        uses_cliff = torch.tensor([mode == GROUP_CLIFF for mode in outcome.group_modes], device=device)
        graded = is_graded.to(device).nonzero().squeeze(1)
        token_advantages = plain.clone()
        token_advantages[graded] = torch.where(
            uses_cliff[graded].unsqueeze(1),
            cliff_token_advantages(
                sequence_advantages[graded], is_correct[graded].to(device), group_ids[graded],
                credited_suffix[graded], mask[graded], lam=float(args.cliff_lam), recentre=args.cliff_recentre,
            ),
            plain[graded],
        )  # fmt: skip

        located = torch.tensor([bool(spans) for spans in outcome.sentence_spans], device=device)
        lengths = mask.sum(dim=1).clamp(min=1)
        self._log_cliff_metrics(outcome, (suffix_start.float() / lengths)[located], teacher_counts)
        self._cliff_log_splits(outcome, rows, suffix_start.tolist())
        self._log_teacher_cost(teacher_cost, cycle_time_s)
        if args.cliff_outcome == "teacher":  # the paper's GRPO with Teacher: one advantage per rollout
            return self._teacher_outcome_advantages(outcome, rows, rewards_per_func, is_correct, group_ids)[local]
        return token_advantages[local, : output["completion_mask"].shape[1]].contiguous()

    def _cliff_agentic_rollouts(self, output, completion_ids_list) -> list[AgenticRollout] | None:
        """This process's tool-calling rollouts split into units (:mod:`hf_meds_cliff.cliff.agentic`); ``None``
        for a single-turn batch (no ``tool_mask``)."""
        tool_mask = output.get("tool_mask")
        if tool_mask is None:
            return None
        messages = getattr(self, "_cliff_pending_messages", None) or [None] * len(completion_ids_list)
        split_prose = split_code_units if self.cliff_domain == "code" else split_sentences
        return [
            split_agentic_rollout(self._tokenizer, ids, mask, turns, split_prose)
            for ids, mask, turns in zip(completion_ids_list, tool_mask.tolist(), messages)
        ]

    def _cliff_register_agentic(self, agentic: list[AgenticRollout] | None, world_size: int) -> None:
        """Give the judge's splitter the units of every process's tool-calling rollouts of this step."""
        split = self.cliff_judge.split
        if not isinstance(split, AgenticSplit):
            return
        local = [(r.transcript, r.spans) for r in agentic] if agentic is not None else []
        entries = gather_object(local) if world_size > 1 else local
        split.register_spans([text for text, _ in entries], [spans for _, spans in entries])

    def _teacher_outcome_advantages(
        self, outcome: StepOutcome, rows: StepRows, rewards_per_func, is_correct, group_ids
    ) -> torch.Tensor:
        """(B_global,) advantages of ``cliff_outcome="teacher"``: the teacher's verdicts replace the correctness
        column, then TRL's weighted sum and GRPO's group normalisation; logs the verdicts beside the verifier's."""
        index = self.args.cliff_correctness_reward_index
        correctness = rewards_per_func[:, index].float()
        outcomes, from_teacher = teacher_outcome_rewards(correctness, outcome.teacher_verdict)
        substituted = rewards_per_func.float().clone()
        substituted[:, index] = outcomes
        rewards = (substituted * self.reward_weights.to(substituted.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = math.nan  # unscorable rows, as TRL
        advantages = group_normalised_advantages(rewards, group_ids.to(rewards.device), self.scale_rewards)

        decided = from_teacher.tolist()
        counts = teacher_verifier_counts(is_correct.tolist(), outcome.teacher_verdict, decided)
        fallbacks = sum(
            1
            for i, mode in enumerate(outcome.group_modes)
            if mode == GROUP_CLIFF and rows.is_correct[i] is not None and not rows.is_truncated[i] and not decided[i]
        )
        metrics = self._metrics["train"]
        metrics["cliff/teacher_judged_rollouts"].append(counts["judged"])
        metrics["cliff/teacher_verifier_agreement"].append(counts["agreement"])
        metrics["cliff/teacher_says_right_verifier_wrong"].append(counts["right_wrong"])
        metrics["cliff/teacher_says_wrong_verifier_right"].append(counts["wrong_right"])
        metrics["cliff/teacher_verdict_fallbacks"].append(float(fallbacks))
        return advantages.to(rewards_per_func.device)

    def _check_rule_teacher_reads(self, problems: list[str]) -> None:
        """Raise when the rule-based toy teacher can read none of ``problems`` (checked once, on the first ones)."""
        if not self._cliff_unchecked_rule_teacher or not problems:
            return
        self._cliff_unchecked_rule_teacher = False
        if not any(self.teacher.can_read(problem) for problem in problems):
            world, example = (
                ("code world", "Read an integer a from standard input and print a + 1.")
                if self.cliff_domain == "code"
                else ("toy world", "Compute (7 + 5) * 3 - 4.")
            )
            raise ValueError(
                f"The rule-based teacher (cliff_teacher='rule', the default) is the {world}'s exact checker and "
                f"reads only toy questions ({example!r}), not this dataset's (e.g. "
                f"{problems[0]!r:.100}); every mixed group would fall back to plain GRPO. Choose a teacher that can "
                "judge this data: an OpenAI-compatible server (`--cliff_teacher http --cliff_teacher_base_url "
                "http://127.0.0.1:8000/v1 --cliff_teacher_model <served model>`: vllm serve, SGLang, transformers "
                "serve, a hosted API), a local model (`--cliff_teacher transformers --cliff_teacher_model <path or "
                "hub id>`), or your own object passed as CliffGRPOTrainer(..., teacher=...)."
            )

    def _cliff_log_rollouts(self, rows: StepRows, outcome: StepOutcome) -> None:
        """Append this step's first ``cliff_log_rollouts`` judged rollouts to ``cliff_rollouts.jsonl``.

        Main process only. Each line: step, sample (row of the gathered batch), domain (``math``/``code``), prompt
        key, problem, ground truth (code: the tests as JSON), completion, its sentence spans (character offsets of
        the units the teacher saw: sentences, and program lines on code), group mode, first mistake (None = plain
        GRPO), how it was decided (``source``: judged / cached / truncated / unverified; ``agreed``: the teacher
        located a mistake / found none / gave no usable answer) with the teacher's raw answers, the reference, and
        on code ``execution`` (what running the program showed the judge: the failing test). Texts are cut to ``cliff_log_max_chars`` (spans beyond the cut are
        dropped). After a resume, steps logged twice keep their last line (readers dedupe by step and sample).
        """
        cap = self.args.cliff_log_max_chars

        def cut(text: str | None) -> str | None:
            return text if text is None or len(text) <= cap else text[:cap] + "…"

        records = []
        for i, detail in sorted(outcome.judge_details.items()):
            if len(records) == self.args.cliff_log_rollouts:
                break
            text = rows.completions[i]
            spans = outcome.sentence_spans[i] or self.cliff_judge.split(text)
            records.append(
                {
                    "step": self.state.global_step + 1,
                    "sample": i,
                    "domain": self.cliff_domain,
                    "prompt_key": rows.prompt_keys[i],
                    "problem": cut(rows.problems[i]),
                    "ground_truth": cut(rows.ground_truths[i]),
                    "completion": cut(text),
                    "sentences": [[start, end] for start, end in spans if end <= cap],
                    "is_truncated": rows.is_truncated[i],
                    "group_mode": outcome.group_modes[i],
                    "first_mistake": outcome.first_mistake[i],
                    "source": detail["source"],
                    "agreed": detail.get("agreed"),
                    "teacher_raw": [cut(raw) for raw in detail.get("raw", [])],
                    "teacher_statuses": detail.get("statuses", []),
                    "teacher_votes": detail.get("votes", []),
                    "reference": cut(outcome.references.get(rows.prompt_keys[i])),
                    "execution": cut(detail.get("execution")),
                }
            )
        if not records:
            return
        os.makedirs(self.args.output_dir, exist_ok=True)
        with open(os.path.join(self.args.output_dir, ROLLOUT_LOG_NAME), "a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)

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
            "disagreements", "rollouts_with_mistake", "ungraded",
        ):  # fmt: skip
            metrics[f"cliff/{name}"].append(float(counters.get(name, 0)))
        if self.cliff_domain == "code":  # student programs run to show the judge their first failing test
            metrics["cliff/executions"].append(float(counters.get("executions", 0)))
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

    def _cliff_log_splits(self, outcome: StepOutcome, rows: StepRows, suffix_start: list[int]) -> None:
        """``cliff/split_rollouts``, ``split_at_token0_fraction``, ``split_token_mean`` of the wrong rollouts of Cliff
        groups (judged, cached or truncated); warn once when nearly all of the latest ones split at token 0
        (:mod:`hf_meds_cliff.cliff.splits`)."""
        records = []
        for i, first_mistake in enumerate(outcome.first_mistake):
            detail = outcome.judge_details.get(i, {})
            if first_mistake is None or detail.get("source") not in ("judged", "cached", "truncated"):
                continue  # not a wrong rollout of a Cliff group
            spans = outcome.sentence_spans[i] or self.cliff_judge.split(rows.completions[i])
            records.append(
                split_record(
                    int(suffix_start[i]),
                    len(spans),
                    int(first_mistake),
                    detail.get("agreed"),
                    truncated=detail.get("source") == "truncated",
                )
            )
        metrics = self._metrics["train"]
        for name, value in split_step_metrics(records).items():
            metrics[f"cliff/{name}"].append(value)
        self.cliff_split_window.extend(records)
        if records and not self._cliff_split_warned:
            warning = split_window_warning(self.cliff_split_window)
            if warning is not None:
                self._cliff_split_warned = True
                if self.accelerator.is_main_process:
                    logger.warning(warning)

    def _log_teacher_cost(self, cost: dict[str, float], cycle_time_s: float) -> None:
        """Log ``cliff/teacher_*`` (see :mod:`hf_meds_cliff.cliff.cost`) and add the round to the run's totals."""
        metrics = self._metrics["train"]
        for name, value in cost.items():
            metrics[f"cliff/teacher_{name}"].append(value)
        self.cliff_teacher_cost.update(
            requests=cost["requests"],
            prompt_tokens=cost["prompt_tokens"],
            completion_tokens=cost["completion_tokens"],
            teacher_time_s=cost["time_s"],
            cycle_time_s=cycle_time_s,
            rounds=1,
        )

    def _method_card_sections(self) -> str:
        """The model card's teacher-cost section (the totals of this run, resumed runs included)."""
        return render_teacher_cost(
            self.cliff_teacher_cost, getattr(self.teacher, "name", type(self.teacher).__name__)
        )

    # -- checkpointing ------------------------------------------------------------------------------------------------

    def _save_checkpoint(self, model, trial):
        # Written first: transformers writes trainer_state.json (what marks a checkpoint complete) and rotates older
        # checkpoints only at the end of super(), so a kill while saving never leaves a complete-looking checkpoint
        # without the caches.
        if self.args.should_save:
            folder = checkpoint_folder(self, trial)
            save_checkpoint_json(folder, CLIFF_STATE_NAME, self.cliff_judge.state_dict())
            # with the counter keys logged so far: a resumed run logs them from its first step (0 where absent)
            cost = {**self.cliff_teacher_cost, METRIC_KEYS_FIELD: sorted(self._cliff_failure_keys)}
            save_checkpoint_json(folder, TEACHER_COST_NAME, cost)
        super()._save_checkpoint(model, trial)

    def _resume_method_files(self) -> tuple[str, ...]:
        # resume_from_checkpoint=True skips a checkpoint whose judge caches are gone (unless empty ones are allowed)
        return () if self.args.cliff_allow_missing_state_on_resume else (CLIFF_STATE_NAME,)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, CLIFF_STATE_NAME)
        try:
            self.cliff_judge.load_state_dict(read_json_file(path, fix=""))
        except ValueError as error:
            if not self.args.cliff_allow_missing_state_on_resume:
                raise ValueError(
                    f"Cannot resume Cliff from {checkpoint}: its {CLIFF_STATE_NAME} is not usable. {error} Options: "
                    "resume from another checkpoint whose cliff_state.json is intact (--resume_from_checkpoint "
                    "PATH), or pass --cliff_allow_missing_state_on_resume true to continue with empty reference and "
                    "judgment caches (the teacher is asked again)."
                ) from error
            logger.warning(
                "cliff_allow_missing_state_on_resume: resuming from %s with EMPTY Cliff caches (%s).",
                checkpoint,
                error,
            )
            return
        self._load_teacher_cost(os.path.join(checkpoint, TEACHER_COST_NAME))
        logger.info(
            "Restored Cliff caches from %s (%d references, %d judgments)",
            path, len(self.cliff_judge.references), len(self.cliff_judge.judgments),
        )  # fmt: skip

    def _model_card_domain(self) -> str:
        return self.cliff_domain

    def _load_teacher_cost(self, path: str) -> None:
        """Restore the cost totals and the counter keys logged so far; a missing or unreadable file (older
        checkpoints) restarts them with a warning: they only feed the metrics and the model card, never training."""
        try:
            cost = read_json_file(path, fix="")
            if not isinstance(cost, dict):
                raise TypeError(f"{path} does not hold a JSON object")
            self.cliff_teacher_cost = Counter({key: float(cost.get(key, 0.0)) for key in COST_KEYS})
            keys = cost.get(METRIC_KEYS_FIELD, [])
            if isinstance(keys, list) and all(isinstance(key, str) for key in keys):
                self._cliff_failure_keys |= set(keys)
        except (ValueError, TypeError) as error:
            logger.warning(
                "Teacher cost totals not restored (%s); the model card counts from this resume on.", error
            )

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


def _first_problems(dataset: Any, count: int = 8) -> list[str]:
    """Problem texts of the first ``count`` rows of a map-style dataset with a ``prompt`` column; [] otherwise (an
    iterable dataset is checked on the first batch instead)."""
    if "prompt" not in (getattr(dataset, "column_names", None) or ()) or not hasattr(dataset, "__len__"):
        return []
    problems = []
    for index in range(min(count, len(dataset))):
        try:
            problems.append(problem_text(dataset[index]["prompt"]))
        except TypeError:  # an unusual prompt: leave it to the first batch
            continue
    return problems


def _ground_truth(value: Any) -> str | None:
    """Ground truth of a dataset row as text (verl-style ``{"ground_truth": ...}`` dicts are unwrapped)."""
    if value is None:
        return None
    if isinstance(value, dict) and "ground_truth" in value:
        value = value["ground_truth"]
    return str(value)
