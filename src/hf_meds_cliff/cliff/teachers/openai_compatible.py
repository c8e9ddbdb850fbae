"""A teacher behind any OpenAI-compatible ``/chat/completions`` endpoint.

Works with ``vllm serve``, SGLang, ``transformers serve`` and hosted APIs. Serving a teacher beside
training on the same node, e.g.::

    CUDA_VISIBLE_DEVICES=7 vllm serve Qwen/Qwen3-32B --port 8001 --max-model-len 16384 &
    accelerate launch --num_processes 7 scripts/train_cliff.py ... \\
        --teacher_base_url http://127.0.0.1:8001/v1 --teacher_model Qwen/Qwen3-32B

The HTTP part (bounded concurrency, timeouts, retries with backoff that respect ``Retry-After``, token usage) is
:class:`hf_meds_cliff.chat_client.OpenAIChatClient`, shared with the evaluation's ``--backend openai``; its
docstring says why it is not the ``openai`` SDK. Every failure ends as a :class:`Judgment` status (or a
:class:`SolveFailure` from :meth:`solve`) and a counter; nothing raises into the trainer. A malformed reply is not
retried (it is a judgment status of its own). The API key is read from an environment variable whose *name* is
configured; the key itself is never logged or shown in ``repr``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ...chat_client import REQUEST_COST, OpenAIChatClient, RequestFailed, retry_after_seconds
from ..judging import build_judge_messages, build_solve_messages, check_domain, parse_judgment
from .base import Judgment, SolveFailure

logger = logging.getLogger(__name__)

__all__ = ["REQUEST_COST", "OpenAICompatibleTeacher"]

_RequestFailed = RequestFailed  # the name this module used before the client was shared
_retry_after_seconds = retry_after_seconds


class OpenAICompatibleTeacher(OpenAIChatClient):
    """Teacher served by an OpenAI-compatible chat-completions endpoint.

    Args:
        base_url: API root including the version, e.g. ``http://127.0.0.1:8000/v1``.
        model: the ``model`` field of requests (for ``transformers serve``: the model path it serves).
        api_key_env: name of the environment variable holding the API key, read once at construction.
            ``None`` or a variable that is not set: no ``Authorization`` header (a local ``vllm serve``).
        max_concurrency: requests in flight at most (per event loop).
        timeout: seconds per HTTP request (connect + read).
        max_retries: retries after the first attempt for retryable failures.
        backoff_base: first backoff in seconds; doubles per retry with +-50 %% jitter, capped by
            ``backoff_max``.
        solve_temperature / judge_temperature: sampling temperatures (the paper uses 0.6).
        solve_max_tokens / judge_max_tokens: ``max_tokens`` of each request.
        extra_body: extra JSON fields merged into every request (e.g. ``{"top_p": 0.95}`` or
            ``{"chat_template_kwargs": {"enable_thinking": False}}`` for vLLM).
        name: label used in logs and metrics (defaults to ``model``).
        domain: ``"math"`` (the default) or ``"code"``: which solve and judge prompts are sent
            (:func:`~hf_meds_cliff.cliff.judging.build_judge_messages`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        max_concurrency: int = 16,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        solve_temperature: float = 0.6,
        judge_temperature: float = 0.6,
        solve_max_tokens: int = 4096,
        judge_max_tokens: int = 4096,
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
        domain: str = "math",
    ):
        check_domain(domain)
        if not isinstance(model, str):
            raise TypeError(f"`model` must be a str, got {type(model).__name__}: {model!r}.")
        super().__init__(
            base_url,
            api_key_env=api_key_env,
            max_concurrency=max_concurrency,
            timeout=timeout,
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
        )
        self.model = model
        self.name = name or model
        self.domain = domain
        self.solve_temperature = solve_temperature
        self.judge_temperature = judge_temperature
        self.solve_max_tokens = solve_max_tokens
        self.judge_max_tokens = judge_max_tokens
        self.extra_body = dict(extra_body or {})

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, timeout={self.timeout})"
        )

    async def _chat(self, messages: list[dict[str, str]], temperature: float, max_tokens: int) -> str:
        """Content of the first choice; raises :class:`RequestFailed` after exhausting retries."""
        payload = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
            **self.extra_body,
        }
        return await self._post_chat(payload, _first_choice_content)

    async def ask(self, messages: list[dict[str, str]]) -> str | SolveFailure:
        """The reply to free-form chat ``messages`` at the judge's temperature and ``max_tokens`` (e.g.
        ProcessBench's critique prompt in ``hf-meds-cliff judge-eval``); a :class:`SolveFailure` names an
        endpoint failure. Never raises."""
        self.counters["ask_calls"] += 1
        try:
            return await self._chat(messages, self.judge_temperature, self.judge_max_tokens)
        except RequestFailed as failure:
            self.counters[f"failures/{failure.kind}"] += 1
            logger.warning("Teacher %s failed to answer (%s): %s", self.name, failure.kind, failure)
            return SolveFailure(failure.kind, str(failure))
        except Exception as error:  # a teacher never raises into its caller
            self.counters["failures/error"] += 1
            logger.exception("Teacher %s raised while answering", self.name)
            return SolveFailure("error", f"{type(error).__name__}: {error}")

    async def solve(self, problem: str) -> str | SolveFailure:
        """A reference solution (sampled at ``solve_temperature``); a :class:`SolveFailure` naming the failure."""
        self.counters["solve_calls"] += 1
        try:
            return await self._chat(
                build_solve_messages(problem, domain=self.domain),
                self.solve_temperature,
                self.solve_max_tokens,
            )
        except RequestFailed as failure:
            self.counters[f"failures/{failure.kind}"] += 1
            logger.warning("Teacher %s failed to solve a problem (%s): %s", self.name, failure.kind, failure)
            return SolveFailure(failure.kind, str(failure))
        except Exception as error:  # a teacher never stops training
            self.counters["failures/error"] += 1
            logger.exception("Teacher %s raised while solving", self.name)
            return SolveFailure("error", f"{type(error).__name__}: {error}")

    async def judge(
        self, problem: str, reference: str, sentences: Sequence[str], execution: str | None = None
    ) -> Judgment:
        """Judge a numbered rollout; every failure is a :class:`Judgment` status, never an exception.

        ``execution`` (code): what running the student's program showed, put into the code judge's prompt."""
        self.counters["judge_calls"] += 1
        if len(sentences) == 0:  # nothing to judge: no request, the rollout stays a plain GRPO negative
            self.counters["failures/empty"] += 1
            return Judgment(None, None, "empty", "empty rollout")
        try:
            messages = build_judge_messages(
                problem, reference, sentences, domain=self.domain, execution=execution
            )
            answer = await self._chat(messages, self.judge_temperature, self.judge_max_tokens)
        except RequestFailed as failure:
            self.counters[f"failures/{failure.kind}"] += 1
            logger.warning("Teacher %s failed to judge (%s): %s", self.name, failure.kind, failure)
            return Judgment(None, None, failure.kind, str(failure))
        except Exception as error:  # a teacher never stops training
            self.counters["failures/error"] += 1
            logger.exception("Teacher %s raised while judging", self.name)
            return Judgment(None, None, "error", f"{type(error).__name__}: {error}")
        judgment = parse_judgment(answer, len(sentences))
        if judgment.status != "ok":
            self.counters[f"failures/{judgment.status}"] += 1
        return judgment


def _first_choice_content(body: Any) -> str:
    """The text of a chat completion's first choice (``reasoning_content`` when ``content`` is null)."""
    message = body["choices"][0]["message"]
    content = message.get("content")
    if content is None:
        content = message.get("reasoning_content") or ""
    if not isinstance(content, str):
        raise TypeError(f"content is {type(content).__name__}")
    return content
