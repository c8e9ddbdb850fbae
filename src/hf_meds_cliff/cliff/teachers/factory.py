"""Build a teacher from script/config values."""

from __future__ import annotations

from typing import Any

from .base import Teacher

__all__ = ["TEACHER_KINDS", "build_teacher"]

TEACHER_KINDS = ("auto", "http", "transformers", "rule_based")


def build_teacher(
    kind: str = "auto",
    *,
    base_url: str | None = None,
    model: Any = None,
    api_key_env: str | None = None,
    **options: Any,
) -> Teacher:
    """A teacher of ``kind``; ``"auto"`` picks ``http`` when ``base_url`` is given, ``transformers`` when
    only ``model`` is, and the toy world's ``rule_based`` teacher otherwise.

    ``options`` go to the teacher's constructor (e.g. ``max_concurrency``, ``timeout``,
    ``judge_temperature`` for HTTP; ``tokenizer``, ``max_new_tokens`` for transformers).

    >>> build_teacher()
    RuleBasedToyTeacher()
    >>> build_teacher("http", base_url="http://127.0.0.1:8000/v1", model="m")
    OpenAICompatibleTeacher(base_url='http://127.0.0.1:8000/v1', model='m', api_key_env=None, ...)
    """
    if kind not in TEACHER_KINDS:
        raise ValueError(f"Unknown teacher kind {kind!r}; use one of {TEACHER_KINDS}.")
    if kind == "auto":
        kind = "http" if base_url else "transformers" if model is not None else "rule_based"
    if kind == "http":
        if not base_url or not model:
            raise ValueError(
                "An HTTP teacher needs both `base_url` (e.g. http://127.0.0.1:8000/v1) and `model` "
                f"(the served model name); got base_url={base_url!r}, model={model!r}."
            )
        from .openai_compatible import OpenAICompatibleTeacher

        return OpenAICompatibleTeacher(base_url, model, api_key_env=api_key_env, **options)
    if kind == "transformers":
        if model is None:
            raise ValueError("A transformers teacher needs `model` (a local path or a loaded model).")
        from .local import TransformersTeacher

        return TransformersTeacher(model, **options)
    if base_url or model is not None or options:
        raise ValueError(
            "The rule-based toy teacher takes no endpoint, model or options; drop them or choose kind='http'."
        )
    from .rule_based import RuleBasedToyTeacher

    return RuleBasedToyTeacher()
