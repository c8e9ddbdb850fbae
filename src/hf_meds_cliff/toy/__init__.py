"""The offline toy world: arithmetic task, exact first-mistake checker, tokenizer, tiny Qwen3, warm-up.

Re-exports only; nothing here imports ``trl``, and ``torch``/``transformers`` load when a builder is called.
"""

from .checker import first_mistake_index
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
from .warmup import WarmupSettings, boxed_integer, evaluate_policy, toy_policy, warmup_toy_model

__all__ = [
    "ToyModelConfig",
    "ToyProblem",
    "ToyStep",
    "ToyTaskConfig",
    "WarmupSettings",
    "boxed_integer",
    "build_toy_model",
    "build_toy_tokenizer",
    "evaluate_policy",
    "first_mistake_index",
    "generate_problem",
    "iter_problems",
    "make_toy_dataset",
    "parse_question",
    "problem_id",
    "question_split",
    "toy_generation_config",
    "toy_policy",
    "warmup_toy_model",
]
