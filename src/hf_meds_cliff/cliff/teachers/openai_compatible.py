"""A teacher behind any OpenAI-compatible ``/chat/completions`` endpoint.

Works with ``vllm serve``, SGLang, ``transformers serve`` and hosted APIs. Serving a teacher beside
training on the same node, e.g.::

    CUDA_VISIBLE_DEVICES=7 vllm serve Qwen/Qwen3-32B --port 8001 --max-model-len 16384 &
    accelerate launch --num_processes 7 scripts/train_cliff.py ... \\
        --teacher_base_url http://127.0.0.1:8001/v1 --teacher_model Qwen/Qwen3-32B

Robustness: a bounded number of requests in flight (a semaphore per event loop), a per-request
timeout, and retries with exponential backoff and jitter on timeouts, connection errors, HTTP 408/409/
425/429 and 5xx, waiting at least what a ``Retry-After`` header asks (capped at ``backoff_max``). Other
HTTP errors are not retried.

Why not the ``openai`` SDK's ``AsyncOpenAI`` (it retries, backs off and honours ``Retry-After`` too):
its retries happen inside the client, so the ``requests``/``retries``/``failures/<kind>`` counters the
trainer logs would need hooks into its transport; without an explicit key it either refuses to start or
sends ``OPENAI_API_KEY`` from the environment to whatever ``base_url`` is configured (a local or
third-party teacher); its timeout bounds each read, not a reply trickled byte by byte (bounded here with
``asyncio.wait_for``); and it would add a second HTTP stack (openai 3.x ships ``httpx2``) to a library that
needs one POST route. The loop below is small and tested against a scripted server and ``transformers serve``. Every failure ends as a :class:`Judgment` status (or a
:class:`SolveFailure` from :meth:`solve`) and a counter; nothing raises into the trainer. The API key is read
from an environment variable whose *name* is configured; the key itself is never logged or shown
in ``repr``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx

from ..judging import build_judge_messages, build_solve_messages, check_domain, parse_judgment
from .base import Judgment, SolveFailure

logger = logging.getLogger(__name__)

__all__ = ["REQUEST_COST", "OpenAICompatibleTeacher"]

REQUEST_COST: contextvars.ContextVar[Counter | None] = contextvars.ContextVar(
    "cliff_request_cost", default=None
)
"""Per-task cost accounting: set it to a ``Counter`` in an asyncio task and every request the task (and the tasks
it starts) sends adds ``requests``, ``request_seconds`` (time from sending to the reply, not waiting for a free
concurrency slot) and, from the server's ``usage``, ``prompt_tokens``,
``completion_tokens`` and ``usage_reported`` to it. ``hf-meds-cliff judge-eval`` uses it to cost each item; the
teacher's own ``counters`` get the same keys summed over all requests."""

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class _RequestFailed(Exception):
    """A request failed for good (after retries); ``kind`` is a judgment status."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class OpenAICompatibleTeacher:
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
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"`base_url` must be an http(s) URL such as 'http://127.0.0.1:8000/v1', got {base_url!r}."
            )
        if not isinstance(model, str):
            raise TypeError(f"`model` must be a str, got {type(model).__name__}: {model!r}.")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"`max_concurrency` must be an int >= 1, got {max_concurrency!r}.")
        if not (isinstance(max_retries, int) and max_retries >= 0):
            raise ValueError(f"`max_retries` must be an int >= 0, got {max_retries!r}.")
        for label, value in (
            ("timeout", timeout),
            ("backoff_base", backoff_base),
            ("backoff_max", backoff_max),
        ):
            if not isinstance(value, (int, float)) or value < 0 or (label == "timeout" and value == 0):
                raise ValueError(f"`{label}` must be a positive number of seconds, got {value!r}.")
        self._api_key: str | None = os.environ.get(api_key_env) if api_key_env else None
        if api_key_env and self._api_key is None:
            logger.info("Teacher API key variable %s is not set: requests carry no API key.", api_key_env)
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.name = name or model
        self.domain = domain
        self.max_concurrency = max_concurrency
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.solve_temperature = solve_temperature
        self.judge_temperature = judge_temperature
        self.solve_max_tokens = solve_max_tokens
        self.judge_max_tokens = judge_max_tokens
        self.extra_body = dict(extra_body or {})
        self.counters: Counter[str] = Counter()
        # httpx clients and asyncio semaphores are bound to the loop that first uses them; the trainer
        # may run one loop per step (asyncio.run), so keep one pair per live loop.
        self._per_loop: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]] = {}
        self._rng = random.Random()
        # Loading CA certificates costs ~0.2 s per client; build the context once, share it across loops.
        self._ssl_context = httpx.create_ssl_context() if self.base_url.startswith("https://") else None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, timeout={self.timeout})"
        )

    def _loop_resources(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        for stale in [other for other in self._per_loop if other.is_closed()]:
            del self._per_loop[stale]  # its sockets died with the loop
        if loop not in self._per_loop:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            client = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                verify=self._ssl_context if self._ssl_context is not None else False,
                timeout=httpx.Timeout(self.timeout),
                limits=httpx.Limits(
                    max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency
                ),
            )
            self._per_loop[loop] = (client, asyncio.Semaphore(self.max_concurrency))
        return self._per_loop[loop]

    def _backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds before retry ``attempt + 1``: exponential with +-50 % jitter, at least ``retry_after``
        (the server's ``Retry-After``), never more than ``backoff_max``."""
        delay = min(self.backoff_max, self.backoff_base * (2**attempt)) * self._rng.uniform(0.5, 1.5)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    async def _chat(self, messages: list[dict[str, str]], temperature: float, max_tokens: int) -> str:
        """Content of the first choice; raises :class:`_RequestFailed` after exhausting retries."""
        client, semaphore = self._loop_resources()
        payload = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
            **self.extra_body,
        }
        last_kind, last_message = "error", ""
        retry_after: float | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.counters["retries"] += 1
                await asyncio.sleep(self._backoff(attempt - 1, retry_after))
                retry_after = None
            self.counters["requests"] += 1
            cost = REQUEST_COST.get()
            if cost is not None:
                cost["requests"] += 1
            request_started: float | None = (
                None  # set once a concurrency slot is free: queueing is not latency
            )
            try:
                async with semaphore:
                    request_started = time.perf_counter()
                    # httpx's timeout bounds each read; wait_for also bounds a reply trickled byte by byte
                    response = await asyncio.wait_for(
                        client.post("/chat/completions", json=payload), self.timeout
                    )
            except (httpx.TimeoutException, asyncio.TimeoutError) as error:
                self._count_seconds(cost, request_started)
                last_kind, last_message = "timeout", f"timeout after {self.timeout}s: {type(error).__name__}"
                continue
            except httpx.TransportError as error:
                self._count_seconds(cost, request_started)
                last_kind, last_message = "connection_error", f"{type(error).__name__}: {error}"
                continue
            self._count_seconds(cost, request_started)
            if response.status_code != 200:
                last_kind, last_message = "http_error", f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code in _RETRYABLE_STATUS:
                    retry_after = _retry_after_seconds(response.headers.get("retry-after"))
                    continue
                break
            try:
                body = response.json()
                message = body["choices"][0]["message"]
                content = message.get("content")
                if content is None:
                    content = message.get("reasoning_content") or ""
                if not isinstance(content, str):
                    raise TypeError(f"content is {type(content).__name__}")
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
                raise _RequestFailed(
                    "bad_response", f"not a chat completion ({error}): {response.text[:300]}"
                ) from None
            self._count_usage(cost, body.get("usage") if isinstance(body, dict) else None)
            return content
        raise _RequestFailed(last_kind, last_message)

    def _count_seconds(self, cost: Counter | None, started: float | None) -> None:
        """Add a request's duration (from sending it, not from waiting for a free slot) to ``request_seconds``."""
        if started is None:
            return
        seconds = time.perf_counter() - started
        self.counters["request_seconds"] += seconds
        if cost is not None:
            cost["request_seconds"] += seconds

    def _count_usage(self, cost: Counter | None, usage: Any) -> None:
        """Add the server's ``usage`` token counts (absent or malformed ``usage``: nothing is added)."""
        if not isinstance(usage, dict):
            return
        counts = {
            key: usage.get(key)
            for key in ("prompt_tokens", "completion_tokens")
            if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool)
        }
        if not counts:
            return
        for target in (self.counters, cost):
            if target is None:
                continue
            target["usage_reported"] += 1
            for key, value in counts.items():
                target[key] += value

    async def ask(self, messages: list[dict[str, str]]) -> str | SolveFailure:
        """The reply to free-form chat ``messages`` at the judge's temperature and ``max_tokens`` (e.g.
        ProcessBench's critique prompt in ``hf-meds-cliff judge-eval``); a :class:`SolveFailure` names an
        endpoint failure. Never raises."""
        self.counters["ask_calls"] += 1
        try:
            return await self._chat(messages, self.judge_temperature, self.judge_max_tokens)
        except _RequestFailed as failure:
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
        except _RequestFailed as failure:
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
        except _RequestFailed as failure:
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

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        resources = self._per_loop.pop(loop, None)
        if resources is not None:
            await resources[0].aclose()
        self._per_loop.clear()  # clients of other (closed) loops cannot be closed from here


def _retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header given in seconds (the HTTP-date form is ignored: backoff applies).

    >>> _retry_after_seconds("2.5"), _retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), _retry_after_seconds(None)
    (2.5, None, None)
    """
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None
