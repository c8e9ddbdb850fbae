"""Plumbing shared by the trl-style scripts in ``scripts/`` (``train_grpo.py``, ``train_meds.py``,
``train_cliff.py``).

Every script is ``TrlParser((RLScriptArguments, <Config>, ModelConfig))`` plus :func:`run_training`.
With no arguments a script trains on the offline toy world: :func:`parse_script_args` then prepends
``--config <the packaged toy recipe>``, so any flag given on the command line still overrides it.
``--model_name_or_path toy`` / ``--dataset_name toy`` select the toy model and data explicitly.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from trl import ModelConfig, ScriptArguments, TrlParser

logger = logging.getLogger(__name__)

TOY = "toy"
"""Sentinel value of ``--model_name_or_path`` / ``--dataset_name`` for the offline toy world."""

REWARD_FUNCS = ("math_answer", "overlong", "code_tests")

TOY_DOMAINS = ("math", "code")
"""Values of ``--domain``: the toy world (``math``) or the code world (``code``)."""


@dataclass
class RLScriptArguments(ScriptArguments):
    """Script arguments shared by the training scripts (data mapping, rewards, toy world)."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub id or local path of the training dataset, or `toy` for the offline toy world "
            "(the default when neither a model nor a dataset is given). A dataset with a tests column and no answer "
            "column is a code dataset (e.g. `agentica-org/DeepCoder-Preview-Dataset` with `--dataset_config "
            "primeintellect|taco|lcbv5`): prompts ask for a program and `math_answer` becomes `code_tests`."
        },
    )
    tests_column: str = field(
        default="tests",
        metadata={
            "help": "Code datasets: the column holding the tests (any format hf_meds_cliff.code.parse_tests reads, "
            "as objects or a JSON string)."
        },
    )
    code_max_tests: int | None = field(
        default=None,
        metadata={
            "help": "`code_tests` reward: run at most this many tests per problem (the longest inputs first, as "
            "DeepCoder keeps 15); default all."
        },
    )
    code_timeout: float | None = field(
        default=None,
        metadata={
            "help": "`code_tests` reward: wall-clock limit per test in seconds (default: the sandbox's, "
            "hf_meds_cliff.code.SandboxLimits.timeout_s)."
        },
    )
    problem_column: str = field(
        default="problem",
        metadata={
            "help": "Column holding the problem text (MATH: `problem`; DAPO-Math-17k-Processed: `prompt`)."
        },
    )
    answer_column: str = field(
        default="answer",
        metadata={
            "help": "Column holding the ground truth (MATH: `solution` with `--answer_from_solution true`; "
            "DAPO-Math-17k-Processed: `solution`; verl-style `reward_model` dicts with a `ground_truth` key work too)."
        },
    )
    answer_from_solution: bool = field(
        default=False,
        metadata={
            "help": "Take the ground truth as the last \\boxed{} of `answer_column` (a worked solution)."
        },
    )
    prompt_template: str = field(
        default="qwen_math",
        metadata={
            "help": "How a problem becomes a chat prompt: `qwen_math` (instruction as system message), "
            "`qwen_math_user` (instruction appended to the user message), `plain`, `one_shot_boxed` (one worked "
            "example turn ending \\boxed{5} first: for small instruct models such as smollm2-135m) or `keep` (use the "
            "dataset's `prompt` column as it is); for code datasets `code` (the problem, its starter code and what "
            "to write in one user message; used when a math template is given) or `code_system`.",
            "choices": ["qwen_math", "qwen_math_user", "plain", "one_shot_boxed", "keep", "code", "code_system"],
        },
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["math_answer"],
        metadata={
            "help": "Reward functions, in order: `math_answer` (1/0 from math-verify on the last \\boxed{}), "
            "`overlong` (DAPO soft overlong penalty), `code_tests` (1/0: the last ```python block passes every test "
            "of the row's `tests`, run in the sandbox), or a dotted import path `pkg.module.func`. The first one "
            "defines correctness for MEDS and Cliff."
        },
    )
    overlong_buffer_length: int = field(
        default=512, metadata={"help": "DAPO overlong buffer (tokens) for the `overlong` reward."}
    )
    overlong_penalty_factor: float = field(
        default=1.0, metadata={"help": "DAPO overlong penalty at the maximum completion length."}
    )
    toy_train_size: int = field(
        default=2000, metadata={"help": "Number of toy training problems (toy world only)."}
    )
    toy_seed: int = field(default=0, metadata={"help": "Seed of the toy world's data and warm-up."})
    domain: str = field(
        default="math",
        metadata={
            "help": "Which offline toy world `toy` means: `math` (arithmetic chains answered in \\boxed{}) or `code` "
            "(the same chains as stdin programs, tested in the sandbox: the code world of hf_meds_cliff.toy.code_world; "
            "`hf-meds-cliff cliff --domain code` alone trains Cliff on it with its exact rule teacher).",
            "choices": list(TOY_DOMAINS),
        },
    )
    max_prompt_tokens: int | None = field(
        default=2048,
        metadata={
            "help": "Warn (how many, and the longest rows) when prompts are longer than this many tokens after the "
            "chat template: TRL does not truncate prompts, so one very long problem slows every batch it is in. "
            "`None` skips the check."
        },
    )
    min_free_disk_mb: int = field(
        default=1024,
        metadata={
            "help": "Stop before training unless --output_dir is writable and has at least this many MiB free "
            "(checkpoints and the final model go there; 0 checks writability only)."
        },
    )


def toy_recipe_path(method: str, domain: str = "math") -> Path:
    """The packaged CPU recipe used when a script runs without arguments (``toy_<method>.yaml``, or
    ``toy_<method>_code.yaml`` for the code world)."""
    if domain not in TOY_DOMAINS:
        raise ValueError(f"--domain {domain!r} is unknown; use one of {list(TOY_DOMAINS)}.")
    suffix = "" if domain == "math" else f"_{domain}"
    path = resources.files("hf_meds_cliff") / "recipes" / f"toy_{method}{suffix}.yaml"
    if not path.is_file():
        raise ValueError(
            f"No packaged toy recipe for method={method!r} with --domain {domain} (looked for {path}); pass "
            "--config with your own recipe."
        )
    return Path(str(path))


def _domain_argument(argv: Sequence[str]) -> str:
    """The value of ``--domain`` in ``argv`` (``--domain code`` or ``--domain=code``), ``"math"`` without one."""
    for index, argument in enumerate(argv):
        if argument == "--domain" and index + 1 < len(argv):
            return argv[index + 1]
        if argument.startswith("--domain="):
            return argument.split("=", 1)[1]
    return "math"


def build_parser(config_cls: type, *extra: type, prog: str | None = None) -> TrlParser:
    """The ``TrlParser`` of a training script: script arguments, ``config_cls``, ``ModelConfig`` and ``extra``;
    ``prog`` names the command in ``--help`` (e.g. ``hf-meds-cliff meds``)."""
    parser = TrlParser((RLScriptArguments, config_cls, ModelConfig, *extra))
    if prog is not None:
        parser.prog = prog
    return reword_negated_flags(parser)


def reword_negated_flags(parser):
    """Give each ``--no_<flag>`` that ``HfArgumentParser`` adds for a boolean defaulting to true a help text of
    its own: it copies the positive flag's (``--no_progress`` "Show a progress bar."), which reads backwards."""
    for action in parser._actions:
        negated = [option for option in action.option_strings if option.startswith("--no_")]
        if negated and action.help and not action.help.startswith("Turn off"):
            action.help = f"Turn off --{negated[0][len('--no_') :]} (default: on)."
    return parser


_TRAINING_STARTED = threading.Event()
"""Set by :func:`run_training` right before the first training step."""


def run_script(command: str, main: Callable[..., Any], parse_args: Callable[[], Sequence[Any]]) -> int:
    """The ``__main__`` of a training script: ``main(*parse_args()).end()``; returns the exit status.

    Errors in the options and in the set-up before the first training step (options, data, model, output folder)
    are printed as one line (exit 2 for options, 1 for set-up); an error once :func:`run_training` has started
    training keeps its Python traceback.
    """
    from .errors import UsageError, run_reporting_errors

    def body() -> int:
        try:
            parsed = parse_args()
        except ValueError as error:  # a config's __post_init__: an impossible combination of options
            raise UsageError(str(error)) from error
        main(*parsed).end()
        return 0

    _TRAINING_STARTED.clear()
    return run_reporting_errors(command, body, report=lambda error: not _TRAINING_STARTED.is_set())


def with_toy_recipe(argv: Sequence[str], method: str) -> list[str]:
    """``argv`` with ``--config <the packaged toy recipe>`` first when it names neither config nor model (the code
    world's recipe with ``--domain code``)."""
    args = list(argv)
    if "--config" not in args and not any(a.split("=")[0] == "--model_name_or_path" for a in args):
        args = ["--config", str(toy_recipe_path(method, _domain_argument(args))), *args]
    return args


def parse_script_args(
    config_cls: type, method: str, argv: Sequence[str] | None = None, extra: Sequence[type] = ()
):
    """Parse ``argv`` (default ``sys.argv[1:]``) into ``(script_args, training_args, model_args, *extra)``.

    Without ``--config`` and without ``--model_name_or_path`` the packaged toy recipe for ``method`` is
    loaded first, so ``python scripts/train_<method>.py`` alone is the CPU toy run.
    """
    args = with_toy_recipe(sys.argv[1:] if argv is None else argv, method)
    from .redaction import redact_secrets_in_logs, secret_values

    redact_secrets_in_logs(secret_values(args))  # e.g. --hub_token: never in a log line, whoever logs it
    parser = build_parser(config_cls, *extra)
    try:
        parsed = parser.parse_args_and_config(args=args)
    except ValueError as err:
        if "bf16" in str(err):  # transformers' message does not say which flags to pass
            raise ValueError(
                f"{err} TRL's configs default to bf16=True: on a machine without a GPU pass "
                "`--bf16 false --use_cpu true`."
            ) from err
        raise
    script_args, training_args, model_args = parsed[:3]
    if getattr(training_args, "hub_token", None):
        logger.warning(
            "--hub_token is kept out of the model card, the logs and training_args.bin, but a token on the "
            "command line stays in the shell history and the process list; prefer `hf auth login` or the "
            "HF_TOKEN variable."
        )
    check_compatibility(script_args, training_args, model_args)
    return parsed


def check_compatibility(script_args: RLScriptArguments, training_args, model_args: ModelConfig) -> None:
    """Reject option combinations that would fail late (or silently do the wrong thing)."""
    import torch

    half = [name for name in ("bf16", "fp16") if getattr(training_args, name, False)]
    if half and not torch.cuda.is_available() and not _xpu_or_mps_available():
        raise ValueError(
            f"{'/'.join('--' + h for h in half)} is on but no GPU is available; on CPU pass `--bf16 false` "
            "(TRL's configs default to bf16=True) or use a toy recipe."
        )
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ValueError(
            "--use_vllm true needs vLLM, which is not installed: `pip install hf-meds-cliff[vllm]` (CUDA only), "
            "or drop --use_vllm."
        )
    if model_args.use_peft and model_args.lora_target_modules and "lm_head" in model_args.lora_target_modules:
        raise ValueError(
            "LoRA on `lm_head` is not supported by TRL's fused LM head (and MEDS reads lm_head rows); "
            "remove `lm_head` from --lora_target_modules."
        )
    for name in script_args.reward_funcs:
        if name not in REWARD_FUNCS and "." not in name:
            raise ValueError(
                f"Unknown reward function {name!r}: use one of {list(REWARD_FUNCS)} or a dotted import path."
            )
    if script_args.code_max_tests is not None and script_args.code_max_tests < 1:
        raise ValueError(
            f"--code_max_tests {script_args.code_max_tests} must be >= 1 (or unset for all tests)."
        )
    if script_args.code_timeout is not None and not script_args.code_timeout > 0:
        raise ValueError(f"--code_timeout {script_args.code_timeout} must be > 0 seconds.")
    if "overlong" in script_args.reward_funcs:
        max_len = training_args.max_completion_length
        if not 0 < script_args.overlong_buffer_length < max_len:
            raise ValueError(
                f"--overlong_buffer_length {script_args.overlong_buffer_length} must be in (0, "
                f"max_completion_length={max_len}); lower it or raise --max_completion_length."
            )


def _xpu_or_mps_available() -> bool:
    import torch

    return bool(getattr(torch, "xpu", None) and torch.xpu.is_available()) or torch.backends.mps.is_available()


def is_toy(value: str | None) -> bool:
    return value is None or value == TOY


def resolve_model_path(script_args: RLScriptArguments, model_args: ModelConfig) -> str:
    """Path or Hub id of the policy: the warmed-up toy policy for ``toy``/None (``$HF_MEDS_CLIFF_TOY_POLICY`` or the
    cached warm-up, see :func:`hf_meds_cliff.toy.toy_policy`; the code world's with ``--domain code``), the cached
    conversion of a real model for one of :data:`hf_meds_cliff.real_models.REAL_MODEL_NAMES` (``smollm2-135m``:
    :func:`hf_meds_cliff.real_models.smollm2_135m`, downloaded and converted on first use), else as given.

    A value that looks like a local path (starts with ``.``, ``/`` or ``~``) must exist.
    """
    name = model_args.model_name_or_path
    if is_toy(name) and script_args.domain == "code":
        from .toy.code_world import warmup_code_world

        return str(warmup_code_world(seed=script_args.toy_seed))
    if is_toy(name):
        from .toy import toy_policy

        return str(toy_policy(seed=script_args.toy_seed))
    from .real_models import is_real_model_name, real_model_path

    if is_real_model_name(name):
        return str(real_model_path(name))
    expanded = os.path.expanduser(name)
    if name.startswith((".", "/", "~")) and not os.path.exists(expanded):
        raise ValueError(
            f"--model_name_or_path {name!r} looks like a local path but does not exist; pass an existing "
            "directory written by `save_pretrained`, a Hub id such as `Qwen/Qwen3-1.7B`, `toy` or `smollm2-135m`."
        )
    return expanded if os.path.exists(expanded) else name


def load_tokenizer(model_path: str, model_args: ModelConfig, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        model_path, revision=model_args.model_revision, trust_remote_code=trust_remote_code
    )
    tokenizer.padding_side = "left"  # a saved tokenizer does not keep it; TRL left-pads prompts
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def is_code_dataset(column_names, script_args: RLScriptArguments) -> bool:
    """A dataset with the tests column and without the answer column is a code dataset."""
    return script_args.tests_column in column_names and script_args.answer_column not in column_names


def dataset_domain(dataset) -> str:
    """``"code"`` for a prepared code dataset (``tests`` and no ``answer`` column), else ``"math"``."""
    columns = getattr(dataset, "column_names", None) or []
    return "code" if "tests" in columns and "answer" not in columns else "math"


def load_train_dataset(script_args: RLScriptArguments):
    """Training split with ``prompt`` and ``answer`` columns (see :func:`hf_meds_cliff.data.prepare_math_dataset`),
    or for a code dataset ``prompt``, ``tests`` and ``fn_name`` (see :func:`hf_meds_cliff.data.prepare_code_dataset`;
    ``--dataset_config lcbv5`` warns that it overlaps LiveCodeBench v5/v6); ``toy`` with ``--domain code`` is the code
    world's ``prompt`` and ``tests`` (:func:`hf_meds_cliff.toy.code_task.make_code_dataset`)."""
    if is_toy(script_args.dataset_name) and script_args.domain == "code":
        from .toy.code_task import make_code_dataset

        return make_code_dataset("train", script_args.toy_train_size, seed=script_args.toy_seed)
    if is_toy(script_args.dataset_name):
        from .toy import make_toy_dataset

        return make_toy_dataset("train", script_args.toy_train_size, seed=script_args.toy_seed)
    from datasets import load_dataset

    from .data import prepare_math_dataset

    name = script_args.dataset_name
    if os.path.isfile(name):  # a local jsonl/json/parquet/csv file
        suffix = Path(name).suffix.lstrip(".")
        builder = {"jsonl": "json", "json": "json", "parquet": "parquet", "csv": "csv"}.get(suffix)
        if builder is None:
            raise ValueError(
                f"--dataset_name {name!r}: unsupported file type {suffix!r}; use jsonl, json, parquet or csv."
            )
        dataset = load_dataset(builder, data_files={"train": name})["train"]
    else:
        dataset = load_dataset(name, name=script_args.dataset_config, split=script_args.dataset_train_split)
    if is_code_dataset(dataset.column_names, script_args):
        from .data import CODE_PROMPT_TEMPLATES, prepare_code_dataset

        template = script_args.prompt_template
        if template not in (*CODE_PROMPT_TEMPLATES, "keep"):
            template = "code"
        return prepare_code_dataset(
            dataset,
            problem_column=script_args.problem_column,
            tests_column=script_args.tests_column,
            prompt_template=template,
            dataset_config=script_args.dataset_config,
        )
    if script_args.prompt_template in ("code", "code_system"):
        raise ValueError(
            f"--prompt_template {script_args.prompt_template} is for code datasets, but {name!r} has no "
            f"{script_args.tests_column!r} column (or has an {script_args.answer_column!r} column); point "
            "--tests_column at its tests or use a math template."
        )
    return prepare_math_dataset(
        dataset,
        problem_column=script_args.problem_column,
        answer_column=script_args.answer_column,
        answer_from_solution=script_args.answer_from_solution,
        prompt_template=script_args.prompt_template,
    )


def build_reward_funcs(script_args: RLScriptArguments, training_args, domain: str = "math") -> list[Any]:
    """Reward functions in the order given; the first defines correctness for MEDS and Cliff.

    On a code dataset (``domain="code"``) ``math_answer``, which has no answer to check there, becomes
    ``code_tests`` (with a warning).
    """
    from .rewards import MathAnswerReward, OverlongPenaltyReward

    names = list(script_args.reward_funcs)
    if domain == "code" and "math_answer" in names:
        logger.warning(
            "The training data is code (prompt + tests): reward `math_answer` is replaced by `code_tests` (pass "
            "--reward_funcs code_tests to say so)."
        )
        names = ["code_tests" if name == "math_answer" else name for name in names]
    funcs = []
    for name in names:
        if name == "code_tests":
            from .code import CodeTestsReward, SandboxLimits

            funcs.append(
                CodeTestsReward(
                    mode="binary",
                    limits=SandboxLimits()
                    if script_args.code_timeout is None
                    else SandboxLimits(timeout_s=script_args.code_timeout),
                    max_tests=script_args.code_max_tests,
                )
            )
        elif name == "math_answer":
            funcs.append(MathAnswerReward())
        elif name == "overlong":
            funcs.append(
                OverlongPenaltyReward(
                    max_completion_length=training_args.max_completion_length,
                    buffer_length=script_args.overlong_buffer_length,
                    penalty_factor=script_args.overlong_penalty_factor,
                )
            )
        else:
            module_name, _, attr = name.rpartition(".")
            sys.path.insert(0, os.getcwd())
            try:
                funcs.append(getattr(importlib.import_module(module_name), attr))
            except (ImportError, AttributeError) as err:
                raise ValueError(f"Could not import reward function {name!r}: {err}") from err
    return funcs


def build_trainer(trainer_cls: type, script_args, training_args, model_args, **trainer_kwargs):
    """Instantiate ``trainer_cls`` (a ``GRPOTrainer`` subclass) the way TRL's own ``grpo.py`` does."""
    from trl import get_peft_config, get_quantization_config

    model_path = resolve_model_path(script_args, model_args)
    model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,  # a GRPOConfig field in TRL 1.16
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    quantization_config = get_quantization_config(model_args)
    if training_args.model_init_kwargs:
        model_init_kwargs.update(training_args.model_init_kwargs)
    training_args.model_init_kwargs = {k: v for k, v in model_init_kwargs.items() if v is not None}
    train_dataset = load_train_dataset(script_args)
    tokenizer = load_tokenizer(model_path, model_args, training_args.trust_remote_code)
    if training_args.process_index == 0:
        from .data import warn_long_prompts

        warn_long_prompts(train_dataset, tokenizer, script_args.max_prompt_tokens)
    return trainer_cls(
        model=model_path,
        reward_funcs=build_reward_funcs(script_args, training_args, domain=dataset_domain(train_dataset)),
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        **({"quantization_config": quantization_config} if quantization_config is not None else {}),
        **trainer_kwargs,
    )


def write_metrics(trainer, output_dir: str | os.PathLike) -> Path:
    """Write the trainer's log history as JSON lines (one logged step per line) to ``metrics.jsonl``."""
    from .checkpointing import write_atomically

    path = Path(output_dir) / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(record) + "\n" for record in trainer.state.log_history)
    # all lines or none: a crash or a full disk mid-write leaves the previous file (or none), never a torn line
    return write_atomically(path, lambda handle: handle.write(lines.encode("utf-8")))


def prepare_output_dir(script_args: RLScriptArguments, training_args) -> str | None:
    """Checks made before any model is loaded; returns the checkpoint to resume from (``None``: fresh start).

    ``--resume_from_checkpoint`` takes ``true`` (the latest complete ``checkpoint-N`` in ``--output_dir``),
    ``false`` or a checkpoint folder, as in TRL's scripts (a bare string ``"true"`` would otherwise reach
    ``Trainer.train`` as a path). The output folder must be writable with ``--min_free_disk_mb`` free, so a full
    or read-only disk stops the run now rather than at its final save.
    """
    from .checkpointing import check_output_dir, resolve_resume_checkpoint

    checkpoint = resolve_resume_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
    if training_args.should_save:
        if script_args.min_free_disk_mb < 0:
            raise ValueError(f"--min_free_disk_mb {script_args.min_free_disk_mb} must be >= 0.")
        check_output_dir(training_args.output_dir, script_args.min_free_disk_mb * 2**20)
    return checkpoint


def _warn_if_a_checkpoint_may_not_fit(trainer) -> None:
    """Warn when the output disk has less room than one checkpoint (weights, plus Adam moments unless
    ``save_only_model``), estimated from the model's parameters."""
    from .checkpointing import free_bytes

    parameters = list(trainer.model.parameters())
    weights = sum(p.numel() * p.element_size() for p in parameters)
    moments = 0 if trainer.args.save_only_model else sum(8 * p.numel() for p in parameters if p.requires_grad)
    needed, available = weights + moments, free_bytes(trainer.args.output_dir)
    if trainer.args.save_strategy != "no" and available < needed:
        logger.warning(
            "%s has %.1f GiB free but one checkpoint needs about %.1f GiB: checkpoints may fail mid-run.",
            trainer.args.output_dir,
            available / 2**30,
            needed / 2**30,
        )


def compact_progress_callback():
    """transformers' progress bar with the logged step's reward and loss as its postfix, instead of the whole metrics
    dict written under the bar at every logged step. The toy demo uses it (:func:`run_training`); every metric still
    goes to the trainer's log history and ``metrics.jsonl``."""
    from transformers.trainer_callback import ProgressCallback

    class CompactProgressCallback(ProgressCallback):
        shown = ("reward", "loss")

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and self.training_bar is not None and logs:
                postfix = {k: f"{logs[k]:.3g}" for k in self.shown if isinstance(logs.get(k), (int, float))}
                if postfix:
                    self.training_bar.set_postfix(postfix, refresh=False)

    return CompactProgressCallback


def run_training(trainer_cls: type, script_args, training_args, model_args, **trainer_kwargs):
    """Build the trainer, train (resuming if asked), save model + tokenizer + metrics; returns the trainer.

    The caller ends the run with ``trainer.end()`` once nothing else needs the other processes.
    """
    checkpoint = prepare_output_dir(script_args, training_args)
    trainer = build_trainer(trainer_cls, script_args, training_args, model_args, **trainer_kwargs)
    if trainer.accelerator.is_main_process:
        _warn_if_a_checkpoint_may_not_fit(trainer)
    if checkpoint is not None and hasattr(trainer, "_resume_method_files"):
        # the trainer's own rule (CheckpointSafetyMixin) also skips a checkpoint whose method state is gone
        from .checkpointing import resolve_resume_checkpoint

        checkpoint = resolve_resume_checkpoint(
            training_args.resume_from_checkpoint, training_args.output_dir, trainer._resume_method_files()
        )
    if is_toy(model_args.model_name_or_path) and not training_args.disable_tqdm:
        # the toy demo: a bar with reward and loss, not TRL's metrics dict printed at every one of its 40 steps
        from transformers.trainer_callback import ProgressCallback

        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(compact_progress_callback())
    _TRAINING_STARTED.set()  # from here on an error keeps its traceback (run_script)
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(training_args.output_dir)  # also saves the tokenizer (the processing class)
    dataset_name = None if is_toy(script_args.dataset_name) else script_args.dataset_name
    trainer.create_model_card(dataset_name=dataset_name)  # README.md; rank 0 only (TRL checks)
    if trainer.accelerator.is_main_process:
        write_metrics(trainer, training_args.output_dir)
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=dataset_name)
    return trainer
