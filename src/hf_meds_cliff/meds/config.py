"""Configuration of :class:`~hf_meds_cliff.meds.trainer.MEDSGRPOTrainer`."""

from __future__ import annotations

import math

from dataclasses import dataclass, field

from ..dapo import DAPOConfig
from .features import ANSWER_TOKEN_RULES

PENALTY_TARGETS = ("wrong", "right", "both", "none")
NOISE_POLICIES = ("cluster", "ignore")
MEMORY_SCOPES = ("filtered", "all")
CLUSTER_BY = ("features", "answer")


@dataclass
class MEDSConfig(DAPOConfig):
    r"""
    Configuration class for [`MEDSGRPOTrainer`]: every [`trl.GRPOConfig`] parameter, DAPO's dynamic sampling
    (``dynamic_sampling*``, off by default, from [`~hf_meds_cliff.dapo.DAPOConfig`]; the paper trains MEDS on DAPO)
    and the ``meds_*`` fields below.

    MEDS (Memory-Enhanced Dynamic reward Shaping, Liu et al. 2026, arXiv 2604.11297) remembers, per prompt and
    correctness, the layer-wise logit features of past rollouts, clusters them with HDBSCAN and penalises a rollout
    by the size of the cluster it falls into: `r̃ = r − min(α·log(|C|+1), β)` for incorrect rollouts (and
    `r / (1 + min(α·log(|C|+1), β))` for correct ones with target `right`/`both`). See ``shared/spec/meds.md``.

    Paper presets: `meds_alpha=0.1, meds_beta=0.2` (Qwen3-1.7B, Qwen2.5-Math-7B; the defaults) and
    `meds_alpha=0.02, meds_beta=0.04` (Qwen3-8B).

    Parameters:
        meds_alpha (`float`, defaults to `0.1`), meds_beta (`float`, defaults to `0.2`):
            Penalty slope α and cap β.
        meds_penalty_target (`str`, defaults to `"wrong"`):
            Which rollouts are shaped: `"wrong"`, `"right"`, `"both"` or `"none"` (features and memory only).
        meds_num_layers (`int` or `None`, defaults to `None`):
            Number of last decoder layers in the feature; `None` = the last half (paper: 14 of 28). The reference
            code uses 14 for every model (`use_last_n_layers=14`), and so do the recipes in `recipes/`.
        meds_answer_token (`str`, defaults to `"auto"`): How the answer token is found: `"reference"` (the
            reference implementation's token rule: query = the token holding the `{` of the last `\\boxed{`,
            target = the next token), `"decoded"` (on the decoded text; the target is the token carrying the first
            answer characters, even when BPE merged them with the `{`) or `"auto"` (the reference rule, and the
            decoded rule where it finds nothing: equal to `"reference"` on Qwen's tokenizer, and it works on
            tokenizers such as SmolLM2's that split `\\boxed{` as `Ġ\\`, `box`, `ed`, `{`, where the reference rule
            finds no answer token at all). See `locate_answer_token`; `meds/answer_token_rule_*` count which fired.
        meds_shape_uniform_groups (`bool`, defaults to `False`): Shape groups whose correctness has no variance (all
            rollouts wrong, or all right). Off = the reference, which drops such groups with DAPO's filter on
            accuracy (`run_meds.sh`: `enable_filter_groups=True`, `filter_groups_metric=acc`): they get no
            advantage from the penalty. On = this package's earlier behaviour (stages 1-2 of the learning study):
            in an all-wrong group the penalty is then the only variance, and group normalisation turns it into large
            advantages for some wrong answers.
        meds_memory_scope (`str`, defaults to `"filtered"`): Which rollouts enter the memory: `"filtered"` (the
            reference: the rows it trains on; under dynamic sampling those DAPO's group filter and batch trim keep,
            without it those of groups whose correctness varies, plus uniform groups when
            `meds_shape_uniform_groups`) or `"all"` (every rollout of every generation round).
        meds_use_layer_diff (`bool`, defaults to `False`): Use first differences of the per-layer logits.
        meds_logit_lens (`bool`, defaults to `False`): Apply the final norm to every layer before the LM head row.
        meds_knn_k (`int`, defaults to `3`), meds_min_cluster_size (`int`, defaults to `2`),
        meds_min_samples (`int`, defaults to `1`): k-NN vote size and HDBSCAN parameters.
        meds_noise_policy (`str`, defaults to `"cluster"`): Size of the HDBSCAN noise "cluster": `"cluster"`
            (the reference: number of stored noise points, so rows voted into noise are penalised by the noise
            count) or `"ignore"` (0: noise rows are not penalised, the paper's wording).
        meds_cluster_by (`str`, defaults to `"features"`): What defines a rollout's cluster: `"features"` (the paper:
            HDBSCAN on the layer-logit features) or `"answer"` (an ablation, not the paper's method: the stored
            rollouts of the same prompt and correctness with the same exact final answer string, see
            :class:`~hf_meds_cliff.meds.answer_memory.AnswerMemory`; separates MEDS's idea from its features).
        meds_max_rows_per_key (`int` or `None`, defaults to `None`): Cap of stored rows per memory key
            (oldest evicted first); `None` keeps everything, as in the paper.
        meds_prompt_id_column (`str` or `None`, defaults to `"problem_id"`): Dataset column identifying a prompt;
            when absent (or `None`), prompts are identified by a stable hash of their content.
        meds_correctness_reward_index (`int`, defaults to `0`), meds_correctness_threshold (`float`, defaults to
            `1.0`): Which reward function decides correctness, and the value from which a rollout counts as correct.
        meds_binarize_correctness (`bool`, defaults to `False`): Binarise a graded correctness reward: 1.0 when the
            score is `>= meds_correctness_threshold`, 0.0 below (the papers' "non-binary rewards are binarised").
            Off: a reward with more than one value on either side of the threshold is an error. `meds/frac_correct`
            logs the fraction of rollouts counted correct either way.
        meds_save_memory (`bool`, defaults to `True`): Save the error memory with every checkpoint and restore it on
            resume.
        meds_allow_empty_memory_on_resume (`bool`, defaults to `False`): Resume from a checkpoint without a valid
            memory by starting from an empty one (otherwise that is an error naming the checkpoint).
        meds_store_snippets (`bool`, defaults to `True`), meds_snippet_max_chars (`int`, defaults to `256`):
            Keep the answer region of stored completions (at most this many characters) with its step and sample,
            so reports can show what a cluster's completions said; saved with the memory. At most 78 per prompt and
            correctness: above that, those nearest the centres of its 12 largest clusters and 3 of its noise.
    """

    meds_alpha: float = field(
        default=0.1,
        metadata={
            "help": "α: slope of the penalty min(α·log(|C|+1), β). Paper: 0.1 (Qwen3-1.7B, Qwen2.5-Math-7B), "
            "0.02 (Qwen3-8B)."
        },
    )
    meds_beta: float = field(
        default=0.2,
        metadata={
            "help": "β: cap of the penalty min(α·log(|C|+1), β). Paper: 0.2 (with α=0.1), 0.04 (with α=0.02)."
        },
    )
    meds_penalty_target: str = field(
        default="wrong",
        metadata={
            "help": "Rollouts to shape: 'wrong' (r − p, the paper), 'right' (sign-preserving r/(1+p)), 'both', or "
            "'none' (compute features and memory, shape nothing: an ablation/diagnostic run).",
            "choices": list(PENALTY_TARGETS),
        },
    )
    meds_num_layers: int | None = field(
        default=None,
        metadata={
            "help": "Number of last decoder layers whose answer logits form the feature; None = the last half, "
            "N//2 (the paper's wording: 14 of Qwen2.5-Math-7B's 28). The reference code uses 14 for every model "
            "(run_meds.sh, use_last_n_layers=14; 14 of Qwen3-8B's 36, where N//2 is 18): the paper recipes in "
            "recipes/ set 14."
        },
    )
    meds_answer_token: str = field(
        default="auto",
        metadata={
            "help": "How the answer token is found: 'reference' (the reference code's rule: the token holding the "
            "'{' of the last \\boxed{ is the query position and the next token the target; with Qwen's merges "
            "'{\\' + 'frac' the target is 'frac'), 'decoded' (on the decoded text: the target is the token that "
            "carries the first answer characters, e.g. '{\\', and the query the token before it) or 'auto' (the "
            "reference rule, falling back to the decoded rule where it finds no answer token: the same as "
            "'reference' on Qwen's tokenizer; needed on tokenizers such as SmolLM2's, which split ' \\boxed{' into "
            "'Ġ\\', 'box', 'ed', '{'). All give no feature for an empty box or a '{' followed only by EOS/padding.",
            "choices": list(ANSWER_TOKEN_RULES),
        },
    )
    meds_shape_uniform_groups: bool = field(
        default=False,
        metadata={
            "help": "Shape groups whose correctness has no variance (every rollout wrong, or every one right). "
            "False (default) follows the reference: run_meds.sh trains with DAPO's filter on accuracy "
            "(enable_filter_groups=True, filter_groups_metric=acc), so such groups never reach the loss and the "
            "penalty gives them no advantage. True is this package's earlier behaviour (stages 1-2 of the learning "
            "study): in an all-wrong group the penalty is then the only variance, and group normalisation turns "
            "it into large advantages, positive for some wrong answers."
        },
    )
    meds_memory_scope: str = field(
        default="filtered",
        metadata={
            "help": "Which rollouts enter the error memory: 'filtered' (the reference: the rows it trains on. With "
            "dynamic_sampling, the rows of groups that survive DAPO's accuracy filter and the batch trim; without, "
            "the rows of groups whose correctness varies, plus uniform groups when meds_shape_uniform_groups) or "
            "'all' (every rollout of every generation round, including all-wrong and all-right groups).",
            "choices": list(MEMORY_SCOPES),
        },
    )
    meds_use_layer_diff: bool = field(
        default=False,
        metadata={
            "help": "Use first differences of the per-layer logits (the paper's 'diff' ablation) instead of the "
            "logits."
        },
    )
    meds_logit_lens: bool = field(
        default=False,
        metadata={
            "help": "Apply the model's final norm to every layer's hidden state before the LM-head row (logit "
            "lens). Off = the reference: raw states, where only the last layer is normed."
        },
    )
    meds_knn_k: int = field(
        default=3,
        metadata={
            "help": "k of the k-nearest-neighbour vote that assigns a new rollout to a stored cluster."
        },
    )
    meds_min_cluster_size: int = field(
        default=2, metadata={"help": "HDBSCAN min_cluster_size of the per-prompt memory fit (reference: 2)."}
    )
    meds_min_samples: int = field(
        default=1, metadata={"help": "HDBSCAN min_samples of the per-prompt memory fit (reference: 1)."}
    )
    meds_noise_policy: str = field(
        default="cluster",
        metadata={
            "help": "Cluster size of a rollout voted into HDBSCAN noise: 'cluster' (the reference: the number of "
            "stored noise points, so noise rows are penalised by the noise count) or 'ignore' (0: noise rows are "
            "not penalised, the paper's wording).",
            "choices": list(NOISE_POLICIES),
        },
    )
    meds_cluster_by: str = field(
        default="features",
        metadata={
            "help": "What defines a rollout's cluster: 'features' (the paper: HDBSCAN over the layer-logit features, "
            "k-NN assignment) or 'answer' (an ablation, not the paper's method: the cluster is the stored rollouts of "
            "the same prompt and correctness whose exact final answer string, the last \\boxed{...}, is the same; "
            "an oracle grouping that separates the idea of penalising repeated mistakes from the features). The "
            "features are computed and stored either way, so the diagnostics stay comparable.",
            "choices": list(CLUSTER_BY),
        },
    )
    meds_max_rows_per_key: int | None = field(
        default=None,
        metadata={
            "help": "Cap on stored features per (prompt, correctness) memory key, oldest evicted first; None "
            "keeps all (the paper)."
        },
    )
    meds_prompt_id_column: str | None = field(
        default="problem_id",
        metadata={
            "help": "Dataset column that identifies a prompt for the memory. When the column is missing (or "
            "this is None) the prompt is identified by a stable hash of its content."
        },
    )
    meds_correctness_reward_index: int = field(
        default=0,
        metadata={
            "help": "Index (in reward_funcs) of the verifiable reward that decides correctness and is shaped."
        },
    )
    meds_correctness_threshold: float = field(
        default=1.0,
        metadata={
            "help": "A rollout is correct when its correctness reward is >= this value (1.0 for 0/1 rewards)."
        },
    )
    meds_binarize_correctness: bool = field(
        default=False,
        metadata={
            "help": "Binarise a graded correctness reward (a reward model's score, partial credit), as the papers do "
            "with non-binary rewards: the score becomes 1.0 when >= meds_correctness_threshold and 0.0 otherwise, "
            "for MEDS's split into correct and wrong rollouts and for the advantages (TRL logs the 0/1 value). "
            "Off (default): the correctness reward must already be a 0/1 verdict (at most one value below the "
            "threshold and one at or above it), and training stops on the first batch otherwise."
        },
    )
    meds_save_memory: bool = field(
        default=True,
        metadata={
            "help": "Save the error memory (npz + JSON) in every checkpoint and restore it on resume, so a "
            "resumed run assigns the same cluster sizes as an uninterrupted one."
        },
    )
    meds_allow_empty_memory_on_resume: bool = field(
        default=False,
        metadata={
            "help": "When the checkpoint to resume from has no valid error memory (missing, truncated or "
            "corrupt meds_memory/), start from an empty memory with a warning instead of stopping with an error. "
            "Cluster sizes then restart from zero, so the resumed run differs from an uninterrupted one."
        },
    )

    meds_store_snippets: bool = field(
        default=True,
        metadata={
            "help": "Keep snippets of the stored completions (the answer region, with its step and sample) for "
            "`hf-meds-cliff report`; saved with the memory. Each prompt and correctness keeps at most 78: above "
            "that, the 3 nearest the centre of each of its 12 largest clusters and 3 of its noise."
        },
    )
    meds_snippet_max_chars: int = field(
        default=256,
        metadata={
            "help": "Length cap of a stored snippet, in characters (its end is the last \\boxed{...})."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if self.meds_snippet_max_chars < 1:
            raise ValueError(
                f"meds_snippet_max_chars={self.meds_snippet_max_chars} must be >= 1; turn snippets off with "
                "meds_store_snippets=False instead."
            )
        for name in ("meds_alpha", "meds_beta"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name}={value} must be >= 0 (paper: alpha=0.1, beta=0.2).")
        if self.meds_penalty_target not in PENALTY_TARGETS:
            raise ValueError(
                f"meds_penalty_target={self.meds_penalty_target!r} is not one of {list(PENALTY_TARGETS)}; "
                "use 'wrong' for the paper's setting."
            )
        if self.meds_noise_policy not in NOISE_POLICIES:
            raise ValueError(
                f"meds_noise_policy={self.meds_noise_policy!r} is not one of {list(NOISE_POLICIES)}; use 'cluster' "
                "(reference) or 'ignore' (paper wording)."
            )
        if self.meds_cluster_by not in CLUSTER_BY:
            raise ValueError(
                f"meds_cluster_by={self.meds_cluster_by!r} is not one of {list(CLUSTER_BY)}; use 'features' (the "
                "paper) or 'answer' (the answer-oracle ablation)."
            )
        if self.meds_answer_token not in ANSWER_TOKEN_RULES:
            raise ValueError(
                f"meds_answer_token={self.meds_answer_token!r} is not one of {list(ANSWER_TOKEN_RULES)}; use "
                "'auto' (the reference implementation's rule, with the decoded-text rule where it finds nothing) or "
                "'reference' (strictly the reference rule)."
            )
        if self.meds_memory_scope not in MEMORY_SCOPES:
            raise ValueError(
                f"meds_memory_scope={self.meds_memory_scope!r} is not one of {list(MEMORY_SCOPES)}; use 'filtered' "
                "(the reference) or 'all'."
            )
        if self.meds_num_layers is not None and self.meds_num_layers < 1:
            raise ValueError(
                f"meds_num_layers={self.meds_num_layers} must be >= 1, or None for the last half."
            )
        if self.meds_use_layer_diff and self.meds_num_layers is not None and self.meds_num_layers < 2:
            raise ValueError(
                f"meds_use_layer_diff needs at least 2 layers but meds_num_layers={self.meds_num_layers}; raise it."
            )
        if self.meds_knn_k < 1:
            raise ValueError(f"meds_knn_k={self.meds_knn_k} must be >= 1 (reference: 3).")
        if self.meds_min_cluster_size < 2:
            raise ValueError(
                f"meds_min_cluster_size={self.meds_min_cluster_size} must be >= 2 (HDBSCAN's minimum)."
            )
        if self.meds_min_samples < 1:
            raise ValueError(f"meds_min_samples={self.meds_min_samples} must be >= 1 (reference: 1).")
        if self.meds_max_rows_per_key is not None and self.meds_max_rows_per_key < 1:
            raise ValueError(
                f"meds_max_rows_per_key={self.meds_max_rows_per_key} must be >= 1, or None for no cap."
            )
        if not isinstance(self.meds_binarize_correctness, bool):
            raise TypeError(
                f"meds_binarize_correctness={self.meds_binarize_correctness!r} must be True or False (True: a "
                "score counts as correct when >= meds_correctness_threshold)."
            )
        if self.meds_binarize_correctness and not math.isfinite(float(self.meds_correctness_threshold)):
            raise ValueError(
                f"meds_binarize_correctness=True needs a finite meds_correctness_threshold, got "
                f"{self.meds_correctness_threshold!r}: set it to the score from which a rollout counts as correct "
                "(e.g. 0.5 for scores in [0, 1])."
            )
        if self.meds_correctness_reward_index < 0:
            raise ValueError(
                f"meds_correctness_reward_index={self.meds_correctness_reward_index} must be >= 0 (an index into "
                "reward_funcs)."
            )
        if self.dynamic_sampling and self.dynamic_sampling_reward_index != self.meds_correctness_reward_index:
            raise ValueError(
                f"dynamic_sampling_reward_index={self.dynamic_sampling_reward_index} but "
                f"meds_correctness_reward_index={self.meds_correctness_reward_index}: MEDS filters groups on accuracy, "
                "as the reference does (filter_groups_metric=acc), so the filter must read the correctness reward. "
                "Set both to the index of the 0/1 correctness reward."
            )
