"""Build a teacher from a :class:`~hf_meds_cliff.CliffConfig` or from explicit values."""

from __future__ import annotations

from typing import Any

from .base import Teacher

__all__ = ["TEACHER_KINDS", "build_teacher"]

TEACHER_KINDS = ("auto", "rule", "http", "transformers")
_ALIASES = {"rule_based": "rule", "rule-based": "rule", "openai": "http"}


def _from_config(config: Any, domain: str | None = None) -> Teacher:
    """The teacher a ``CliffConfig`` (its ``cliff_teacher*`` fields) describes, prompting for ``domain``."""
    kind = config.cliff_teacher
    prompts = {} if domain is None else {"domain": domain}
    temperature = getattr(config, "cliff_teacher_temperature", 0.6)
    max_tokens = getattr(config, "cliff_teacher_max_tokens", 4096)
    if _ALIASES.get(kind, kind) == "http":
        return build_teacher(
            "http",
            base_url=config.cliff_teacher_base_url,
            model=config.cliff_teacher_model,
            api_key_env=getattr(config, "cliff_teacher_api_key_env", None),
            max_concurrency=getattr(config, "cliff_teacher_concurrency", 16),
            timeout=getattr(config, "cliff_teacher_timeout", 120.0),
            max_retries=getattr(config, "cliff_teacher_max_retries", 3),
            solve_temperature=temperature,
            judge_temperature=temperature,
            solve_max_tokens=max_tokens,
            judge_max_tokens=max_tokens,
            **prompts,
        )
    if _ALIASES.get(kind, kind) == "transformers":
        return build_teacher(
            "transformers",
            model=config.cliff_teacher_model,
            solve_temperature=temperature,
            judge_temperature=temperature,
            max_new_tokens=max_tokens,
            **prompts,
        )
    return build_teacher(kind, domain=domain)


def build_teacher(
    kind: Any = "auto",
    *,
    base_url: str | None = None,
    model: Any = None,
    api_key_env: str | None = None,
    domain: str | None = None,
    **options: Any,
) -> Teacher:
    """A teacher of ``kind``, or the one a ``CliffConfig`` passed as ``kind`` describes.

    ``"auto"`` picks ``http`` when ``base_url`` is given, ``transformers`` when only ``model`` is, and
    the toy world's ``rule`` teacher otherwise. ``options`` go to the teacher's constructor (e.g.
    ``max_concurrency``, ``timeout``, ``judge_temperature`` for HTTP; ``tokenizer``,
    ``max_new_tokens`` for transformers). ``domain`` (``"math"`` or ``"code"``, for the HTTP and transformers
    teachers) picks their solve and judge prompts, and ``"code"`` makes ``rule`` the code world's exact checker
    (:class:`~hf_meds_cliff.cliff.teachers.RuleBasedCodeTeacher`); with a ``CliffConfig`` it is the run's resolved domain (the
    trainer passes it; ``cliff_domain='auto'`` is resolved from the data).

    >>> build_teacher()
    RuleBasedToyTeacher()
    >>> build_teacher("rule", domain="code")
    RuleBasedCodeTeacher()
    >>> build_teacher("http", base_url="http://127.0.0.1:8000/v1", model="m")
    OpenAICompatibleTeacher(base_url='http://127.0.0.1:8000/v1', model='m', api_key_env=None, ...)
    """
    if hasattr(kind, "cliff_teacher"):
        if base_url is not None or model is not None or api_key_env is not None or options:
            raise ValueError(
                "Pass either a CliffConfig or explicit teacher values to build_teacher, not both."
            )
        return _from_config(kind, domain)
    if domain is not None:
        options["domain"] = domain
    kind = _ALIASES.get(kind, kind)
    if kind not in TEACHER_KINDS:
        raise ValueError(f"Unknown teacher kind {kind!r}; use one of {TEACHER_KINDS}.")
    if kind == "auto":
        kind = "http" if base_url else "transformers" if model is not None else "rule"
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
    rule_domain = options.pop("domain", None)
    if base_url or model is not None or options:
        raise ValueError(
            "The rule-based toy teacher takes no endpoint, model or options; drop them or choose kind='http'."
        )
    if rule_domain == "code":  # the code world's exact teacher (first wrong program line)
        from .rule_based_code import RuleBasedCodeTeacher

        return RuleBasedCodeTeacher()
    from .rule_based import RuleBasedToyTeacher

    return RuleBasedToyTeacher()
