"""Configuration of :class:`~hf_meds_cliff.cliff.trainer.CliffGRPOTrainer`."""

from __future__ import annotations

import math

from dataclasses import dataclass, field

from ..dapo import DAPOConfig
from .code_domain import CLIFF_DOMAINS

TEACHER_KINDS = ("rule", "http", "transformers")
SELF_CONSISTENCY_REDUCERS = ("median", "majority")
CLIFF_OUTCOMES = ("verifier", "teacher")


@dataclass
class CliffConfig(DAPOConfig):
    r"""
    Configuration class for [`CliffGRPOTrainer`]: every [`trl.GRPOConfig`] parameter, DAPO's dynamic sampling
    (:class:`~hf_meds_cliff.dapo.DAPOConfig`, off by default) and the ``cliff_*`` fields below.

    Cliff ("learning process rewards from the first mistake") asks a teacher for the first mistaken sentence of each
    incorrect rollout of a mixed group and gives the tokens before it ``λ·A_cor − b`` and the tokens from it on
    ``A_inc − b`` (see ``shared/spec/cliff.md``). The paper's setting is ``cliff_lam=0``, teacher temperature 0.6,
    reference filter on.

    Parameters:
        cliff_lam (`float`, defaults to `0.0`):
            λ: weight of the correct-rollout advantage given to the correct prefix of an incorrect rollout.
        cliff_split_credit (`bool`, defaults to `True`): `False`: every token of an incorrect rollout gets the suffix
            advantage (no correct prefix). With the default re-centring that is GRPO's advantages minus the group's
            token mean `b`; with `cliff_recentre=False` it is GRPO exactly. Either way the teacher's output is not used
            (the verifier decides right or wrong), so this is *not* the paper's "GRPO with Teacher": that is
            `cliff_outcome="teacher"`.
        cliff_recentre (`bool`, defaults to `True`): Subtract the token-weighted group mean `b` (paper eq. 5) so the
            group's token advantages sum to zero; `False` (an ablation, `b = 0`) keeps the un-centred values.
        cliff_outcome (`str`, defaults to `"verifier"`): `"verifier"`: Cliff (the verifier decides right or wrong, the
            teacher locates the first mistake of each wrong rollout). `"teacher"`: the paper's "GRPO with Teacher"
            ablation: in each mixed group with a verified reference (the same skipping, reference filter and
            truncation rules as Cliff) the teacher judges every non-truncated rollout, right or wrong as well, and
            its verdict is the rollout's correctness outcome: the correctness reward column is replaced by 1/0 and
            the rewards are group-normalised as GRPO does (`scale_rewards`), one advantage per rollout, no
            prefix/suffix split (`cliff_lam`, `cliff_split_credit`, `cliff_recentre` are not used). A rollout
            without a usable verdict (malformed answer; truncated rollouts are not judged) keeps the verifier's
            reward, counted in `cliff/teacher_verdict_fallbacks`; an endpoint failure makes its group plain GRPO.
            Logged beside it: `cliff/teacher_verifier_agreement`, `cliff/teacher_says_right_verifier_wrong`,
            `cliff/teacher_says_wrong_verifier_right`.
        cliff_teacher (`str`, defaults to `"rule"`):
            Teacher kind: `"rule"` (the toy world's exact first-mistake checker; toy questions only: the trainer
            raises at start-up, or on the first batch, when it can read none of the dataset's problems), `"http"`
            (an OpenAI-compatible endpoint such as `vllm serve`), or `"transformers"` (a local model).
        cliff_teacher_base_url (`str` or `None`): Base URL of the HTTP teacher, e.g. `http://127.0.0.1:8000/v1`.
        cliff_teacher_model (`str` or `None`): Model name (HTTP) or local path / hub id (transformers).
        cliff_teacher_api_key_env (`str`): Environment variable holding the HTTP teacher's API key.
        cliff_teacher_concurrency, cliff_teacher_timeout, cliff_teacher_max_retries, cliff_teacher_temperature,
        cliff_teacher_max_tokens: Request settings of the teacher.
        cliff_reference_filter (`bool`, defaults to `True`): Only groups whose teacher solution is verified use Cliff.
        cliff_reference_cache, cliff_judgment_cache (`bool`, defaults to `True`): Reuse verified references per prompt
            and judgments per (prompt, completion); saved with checkpoints.
        cliff_self_consistency (`int`, defaults to `1`): Judgments per rollout; reduced by `cliff_self_consistency_reducer`.
        cliff_correctness_reward_index (`int`, defaults to `0`), cliff_correctness_threshold (`float`, defaults to `1.0`):
            Which reward function decides correctness, and the value from which a rollout counts as correct.
        cliff_binarize_correctness (`bool`, defaults to `False`): Binarise a graded correctness reward: 1.0 when the
            score is `>= cliff_correctness_threshold`, 0.0 below (the papers' "non-binary rewards are binarised").
            Off: a reward with more than one value on either side of the threshold is an error. `cliff/frac_correct`
            logs the fraction of rollouts counted correct either way.
        cliff_answer_column (`str`, defaults to `"answer"`): Dataset column with the ground-truth answer used to
            verify the teacher's reference solutions.
        cliff_domain (`str`, defaults to `"auto"`): `"math"` or `"code"`; `"auto"` is code when the correctness
            reward is a :class:`hf_meds_cliff.code.CodeTestsReward`, math otherwise. Code numbers rollouts by
            :func:`~hf_meds_cliff.cliff.split_code_units`, verifies the teacher's reference program on the row's
            tests and shows the judge the first failing test of the student's program.
        cliff_tests_column (`str`, defaults to `"tests"`): Dataset column with the tests (code).
        cliff_allow_missing_state_on_resume (`bool`, defaults to `False`): Resume from a checkpoint without a valid
            `cliff_state.json` by starting with empty caches (otherwise that is an error naming the checkpoint).
        cliff_log_rollouts (`int`, defaults to `64`), cliff_log_max_chars (`int`, defaults to `4000`):
            Per training step, at most this many incorrect rollouts of groups that needed the teacher are
            appended to ``<output_dir>/cliff_rollouts.jsonl`` (text, sentences, first mistake, the teacher's
            raw answers, the reference), each text cut to ``cliff_log_max_chars``; read by
            ``hf-meds-cliff report``. 0 turns it off.
    """

    cliff_lam: float = field(
        default=0.0,
        metadata={
            "help": "λ: weight of the correct-rollout advantage A_cor given to the correct prefix of an incorrect "
            "rollout (prefix tokens get λ·A_cor − b). The paper uses 0; 1.0 caused length hacking. Must be in [0, 1]."
        },
    )
    cliff_split_credit: bool = field(
        default=True,
        metadata={
            "help": "True: Cliff's two-segment credit (correct prefix / incorrect suffix). False: every token of an "
            "incorrect rollout gets the suffix advantage (first mistake treated as sentence 0), so the teacher's "
            "output is not used; with cliff_recentre (default) the advantages are GRPO's minus the group's "
            "token mean b, without it GRPO's exactly. Not the paper's 'GRPO with Teacher': that is "
            "cliff_outcome='teacher'."
        },
    )
    cliff_recentre: bool = field(
        default=True,
        metadata={
            "help": "Re-centre each Cliff group by the token-weighted mean b of its un-centred token advantages "
            "(paper eq. 5: the group's token advantages sum to zero). False is an ablation (b = 0): correct rollouts "
            "keep A_cor, correct prefixes λ·A_cor and incorrect suffixes A_inc. With cliff_split_credit=False it "
            "gives GRPO's own sequence advantages (the verifier decides; the paper's 'GRPO with Teacher' is "
            "cliff_outcome='teacher')."
        },
    )
    cliff_outcome: str = field(
        default="verifier",
        metadata={
            "help": "'verifier': Cliff (the verifier decides right or wrong; the teacher locates first mistakes). "
            "'teacher': the paper's 'GRPO with Teacher' ablation: in mixed groups with a verified reference the "
            "teacher judges every non-truncated rollout and its verdict replaces the correctness reward (1/0), "
            "group-normalised as GRPO, one advantage per rollout; a rollout without a usable verdict keeps the "
            "verifier's reward (cliff/teacher_verdict_fallbacks). Logs cliff/teacher_verifier_agreement and both "
            "directions of disagreement.",
            "choices": list(CLIFF_OUTCOMES),
        },
    )
    cliff_teacher: str = field(
        default="rule",
        metadata={
            "help": "Teacher kind: 'rule' (exact rule-based first-mistake checker of the toy world, free; it reads "
            "toy questions only, so the trainer refuses a dataset it cannot read), 'http' "
            "(OpenAI-compatible endpoint: vllm serve, SGLang, transformers serve, hosted APIs) or 'transformers' "
            "(a local model on the training machine).",
            "choices": list(TEACHER_KINDS),
        },
    )
    cliff_teacher_base_url: str | None = field(
        default=None,
        metadata={
            "help": "Base URL of the OpenAI-compatible teacher, e.g. 'http://127.0.0.1:8000/v1'. Needed for 'http'."
        },
    )
    cliff_teacher_model: str | None = field(
        default=None,
        metadata={
            "help": "Teacher model: the served model name for 'http', a local path or hub id for 'transformers'."
        },
    )
    cliff_teacher_api_key_env: str = field(
        default="CLIFF_TEACHER_API_KEY",
        metadata={
            "help": "Name of the environment variable that holds the HTTP teacher's API key (the key itself is never "
            "put in the config nor logged). Unset variable = no key (fine for a local vllm serve)."
        },
    )
    cliff_teacher_concurrency: int = field(
        default=32,
        metadata={"help": "Maximum number of teacher requests in flight at once (per process)."},
    )
    cliff_teacher_timeout: float = field(
        default=300.0,
        metadata={"help": "Per-request timeout of the teacher, in seconds."},
    )
    cliff_teacher_max_retries: int = field(
        default=2,
        metadata={
            "help": "Retries (with exponential backoff) of a failed teacher request before it counts as failed."
        },
    )
    cliff_teacher_temperature: float = field(
        default=0.6,
        metadata={
            "help": "Sampling temperature of the teacher for solving and judging (the paper uses 0.6)."
        },
    )
    cliff_teacher_max_tokens: int = field(
        default=4096,
        metadata={"help": "Maximum number of tokens the teacher may generate per request."},
    )
    cliff_reference_filter: bool = field(
        default=True,
        metadata={
            "help": "Reference filter: the teacher solves each query and only groups whose solution the verifier "
            "accepts use Cliff; the others fall back to plain GRPO for that step. When False the teacher's solution "
            "is used as the reference without verification (the paper reports ~2%% lower accuracy for weak teachers)."
        },
    )
    cliff_reference_cache: bool = field(
        default=True,
        metadata={"help": "Cache verified reference solutions per prompt and reuse them in later steps."},
    )
    cliff_judgment_cache: bool = field(
        default=True,
        metadata={
            "help": "Cache judgments per (prompt, completion) so a repeated rollout is not judged twice."
        },
    )
    cliff_allow_missing_state_on_resume: bool = field(
        default=False,
        metadata={
            "help": "When the checkpoint to resume from has no valid cliff_state.json (missing, truncated or "
            "corrupt), start with empty reference/judgment caches (more teacher calls) with a warning instead of "
            "stopping with an error."
        },
    )
    cliff_self_consistency: int = field(
        default=1,
        metadata={
            "help": "Number of judgments per incorrect rollout. With k > 1 the first-mistake indices are reduced by "
            "`cliff_self_consistency_reducer` and their agreement is logged (cliff/self_consistency_agreement)."
        },
    )
    cliff_self_consistency_reducer: str = field(
        default="median",
        metadata={
            "help": "How k judgments are combined: 'median' (lower median of the first-mistake indices) or "
            "'majority' (most frequent index, ties to the earliest). Either way the rollout counts as having a "
            "mistake only when more judgments found one than found none.",
            "choices": list(SELF_CONSISTENCY_REDUCERS),
        },
    )
    cliff_correctness_reward_index: int = field(
        default=0,
        metadata={
            "help": "Index (in `reward_funcs`) of the verifiable correctness reward that decides which rollouts are "
            "correct; other reward functions still shape the sequence-level advantages."
        },
    )
    cliff_correctness_threshold: float = field(
        default=1.0,
        metadata={"help": "A rollout is correct when its correctness reward is >= this value."},
    )
    cliff_binarize_correctness: bool = field(
        default=False,
        metadata={
            "help": "Binarise a graded correctness reward (a reward model's score, partial credit), as the papers do "
            "with non-binary rewards: the score becomes 1.0 when >= cliff_correctness_threshold and 0.0 otherwise, "
            "for Cliff's split into correct and wrong rollouts and for the advantages (TRL logs the 0/1 value). "
            "Off (default): the correctness reward must already be a 0/1 verdict (at most one value below the "
            "threshold and one at or above it), and training stops on the first batch otherwise."
        },
    )
    cliff_answer_column: str = field(
        default="answer",
        metadata={
            "help": "Dataset column holding the ground-truth answer used to verify the teacher's reference."
        },
    )
    cliff_domain: str = field(
        default="auto",
        metadata={
            "help": "Task domain: 'math' (rollouts numbered by sentence, answers checked by math-verify), 'code' "
            "(rollouts numbered by sentence and program line, the teacher's reference program must pass the row's "
            "tests in the sandbox, the judge sees the first failing test), or 'auto' (code when the correctness "
            "reward is a hf_meds_cliff.code.CodeTestsReward, math otherwise).",
            "choices": list(CLIFF_DOMAINS),
        },
    )
    cliff_tests_column: str = field(
        default="tests",
        metadata={
            "help": "Code domain: dataset column holding each row's tests (DeepCoder's JSON string, a list of "
            "{input, output} cases, or a TACO dict), used to verify the teacher's reference program and to show "
            "the judge the student's first failing test. Functional tests take the function name from a `fn_name` "
            "column or DeepCoder's metadata['func_name']."
        },
    )

    cliff_log_rollouts: int = field(
        default=64,
        metadata={
            "help": "Incorrect rollouts per step (of groups that needed the teacher) appended with their "
            "judgment, "
            "the teacher's raw answers and the reference to <output_dir>/cliff_rollouts.jsonl, for "
            "`hf-meds-cliff report`; 0 = off."
        },
    )
    cliff_log_max_chars: int = field(
        default=4000,
        metadata={
            "help": "Cap, in characters, of each text (rollout, teacher answer, reference) in that log."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if self.cliff_log_rollouts < 0 or self.cliff_log_max_chars < 1:
            raise ValueError(
                f"cliff_log_rollouts={self.cliff_log_rollouts} must be >= 0 (0 = off) and "
                "cliff_log_max_chars="
                f"{self.cliff_log_max_chars} >= 1."
            )
        if not 0.0 <= self.cliff_lam <= 1.0:
            raise ValueError(
                f"cliff_lam={self.cliff_lam!r} is outside [0, 1]. λ weighs the correct prefix of an incorrect rollout "
                "between no credit (0, the paper's setting) and full credit (1); pick a value in that range."
            )
        if self.cliff_domain not in CLIFF_DOMAINS:
            raise ValueError(
                f"cliff_domain={self.cliff_domain!r} is not a known domain; use one of {list(CLIFF_DOMAINS)} "
                "('auto' reads it from the correctness reward)."
            )
        if self.cliff_outcome not in CLIFF_OUTCOMES:
            raise ValueError(
                f"cliff_outcome={self.cliff_outcome!r} is unknown; use 'verifier' (Cliff) or 'teacher' (the paper's "
                "GRPO with Teacher: the teacher's verdict is the outcome)."
            )
        if self.cliff_outcome == "teacher" and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                f"cliff_outcome='teacher' replaces the correctness reward before GRPO's group normalisation, which "
                f"needs multi_objective_aggregation='sum_then_normalize' (got {self.multi_objective_aggregation!r}); "
                "set it, or use cliff_outcome='verifier'."
            )
        if self.cliff_teacher not in TEACHER_KINDS:
            raise ValueError(
                f"cliff_teacher={self.cliff_teacher!r} is not a known teacher kind; use one of {list(TEACHER_KINDS)}."
            )
        if self.cliff_teacher == "http" and (not self.cliff_teacher_base_url or not self.cliff_teacher_model):
            raise ValueError(
                f"cliff_teacher='http' needs both cliff_teacher_base_url (got {self.cliff_teacher_base_url!r}) and "
                f"cliff_teacher_model (got {self.cliff_teacher_model!r}), e.g. "
                "--cliff_teacher_base_url http://127.0.0.1:8000/v1 --cliff_teacher_model Qwen/Qwen3-32B."
            )
        if self.cliff_teacher == "transformers" and not self.cliff_teacher_model:
            raise ValueError(
                "cliff_teacher='transformers' needs cliff_teacher_model (a local path or hub id of the teacher model)."
            )
        for name in ("cliff_teacher_concurrency", "cliff_self_consistency", "cliff_teacher_max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer (>= 1).")
        if not isinstance(self.cliff_teacher_max_retries, int) or self.cliff_teacher_max_retries < 0:
            raise ValueError(
                f"cliff_teacher_max_retries={self.cliff_teacher_max_retries!r} must be a non-negative integer."
            )
        if not self.cliff_teacher_timeout > 0:
            raise ValueError(f"cliff_teacher_timeout={self.cliff_teacher_timeout!r} must be > 0 seconds.")
        if not self.cliff_teacher_temperature >= 0:
            raise ValueError(f"cliff_teacher_temperature={self.cliff_teacher_temperature!r} must be >= 0.")
        if self.cliff_self_consistency_reducer not in SELF_CONSISTENCY_REDUCERS:
            raise ValueError(
                f"cliff_self_consistency_reducer={self.cliff_self_consistency_reducer!r} is unknown; use one of "
                f"{list(SELF_CONSISTENCY_REDUCERS)}."
            )
        if not isinstance(self.cliff_binarize_correctness, bool):
            raise TypeError(
                f"cliff_binarize_correctness={self.cliff_binarize_correctness!r} must be True or False (True: a "
                "score counts as correct when >= cliff_correctness_threshold)."
            )
        if self.cliff_binarize_correctness and not math.isfinite(float(self.cliff_correctness_threshold)):
            raise ValueError(
                f"cliff_binarize_correctness=True needs a finite cliff_correctness_threshold, got "
                f"{self.cliff_correctness_threshold!r}: set it to the score from which a rollout counts as correct "
                "(e.g. 0.5 for scores in [0, 1])."
            )
        if self.cliff_correctness_reward_index < 0:
            raise ValueError(
                f"cliff_correctness_reward_index={self.cliff_correctness_reward_index!r} must index a reward function "
                "(0 for the first one)."
            )
