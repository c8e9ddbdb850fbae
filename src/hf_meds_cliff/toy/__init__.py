"""The offline toy world: arithmetic task, exact first-mistake checker, tokenizer, tiny Qwen3, warm-up; and the code
world (the same chains as stdin programs, its exact first-wrong-line checker and warm-up).

Re-exports only; nothing here imports ``trl``, and ``torch``/``transformers`` load when a builder is called.
"""

from .checker import first_mistake_index
from .code_checker import UndecidableProgram, first_mistake_unit, first_wrong_line
from .code_task import CodeProblem, CodeWorldConfig, make_code_dataset, parse_code_question
from .code_world import CodeWarmupSettings, warmup_code_world
from .model import ToyModelConfig, build_toy_model, toy_generation_config
from .task import (
    ToyProblem,
    ToyStep,
    ToyTaskConfig,
    generate_problem,
    iter_problems,
    make_toy_dataset,
    parse_question,
    problem_id,
    question_split,
)
from .tokenizer import build_toy_tokenizer
from .warmup import (
    VLLM_TOY_MODEL,
    WarmupSettings,
    boxed_integer,
    evaluate_policy,
    toy_policy,
    vllm_toy_policy,
    warmup_toy_model,
)

__all__ = [
    "VLLM_TOY_MODEL",
    "CodeProblem",
    "CodeWarmupSettings",
    "CodeWorldConfig",
    "ToyModelConfig",
    "ToyProblem",
    "ToyStep",
    "ToyTaskConfig",
    "UndecidableProgram",
    "WarmupSettings",
    "boxed_integer",
    "build_toy_model",
    "build_toy_tokenizer",
    "evaluate_policy",
    "first_mistake_index",
    "first_mistake_unit",
    "first_wrong_line",
    "generate_problem",
    "iter_problems",
    "make_code_dataset",
    "make_toy_dataset",
    "parse_code_question",
    "parse_question",
    "problem_id",
    "question_split",
    "toy_generation_config",
    "toy_policy",
    "vllm_toy_policy",
    "warmup_code_world",
    "warmup_toy_model",
]
