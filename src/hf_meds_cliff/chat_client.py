"""An OpenAI-compatible ``/chat/completions`` client with bounded concurrency and retries: the HTTP part shared by
the Cliff teacher (:class:`hf_meds_cliff.cliff.teachers.OpenAICompatibleTeacher`) and the evaluation backend
(:class:`hf_meds_cliff.evaluation.openai_backend.OpenAIBackend`).

Robustness: a bounded number of requests in flight (a semaphore per event loop), a per-request timeout, and retries
with exponential backoff and jitter on timeouts, connection errors, HTTP 408/409/425/429 and 5xx, waiting at least
what a ``Retry-After`` header asks (capped at ``backoff_max``). Other HTTP errors are not retried; a body that is no
chat completion is retried only where the caller asks (the evaluation does: a sample must not be lost to one bad
reply; a judge's malformed reply is a result of its own).

Why not the ``openai`` SDK's ``AsyncOpenAI`` (it retries, backs off and honours ``Retry-After`` too): its retries
happen inside the client, so the ``requests``/``retries``/``failures/<kind>`` counters logged here would need hooks
into its transport; without an explicit key it either refuses to start or sends ``OPENAI_API_KEY`` from the
environment to whatever ``base_url`` is configured (a local or third-party server); its timeout bounds each read, not
a reply trickled byte by byte (bounded here with ``asyncio.wait_for``); and it would add a second HTTP stack to a
library that needs one POST route.

The API key is read from an environment variable whose *name* is configured; the key itself is never logged, never
shown in ``repr`` and never written to a file.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

logger = logging.getLogger(__name__)

__all__ = ["REQUEST_COST", "RETRYABLE_STATUS", "OpenAIChatClient", "RequestFailed", "retry_after_seconds"]

REQUEST_COST: contextvars.ContextVar[Counter | None] = contextvars.ContextVar(
    "cliff_request_cost", default=None
)
"""Per-task cost accounting: set it to a ``Counter`` in an asyncio task and every request the task (and the tasks
it starts) sends adds ``requests``, ``request_seconds`` (time from sending to the reply, not waiting for a free
concurrency slot) and, from the server's ``usage``, ``prompt_tokens``,
``completion_tokens`` and ``usage_reported`` to it. ``hf-meds-cliff judge-eval`` uses it to cost each item; the
client's own ``counters`` get the same keys summed over all requests."""

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""HTTP statuses retried with backoff (timeouts, conflicts, rate limits, server errors)."""

ParsedReply = TypeVar("ParsedReply")


class RequestFailed(Exception):
    """A request failed for good (after retries): ``kind`` is ``timeout``, ``connection_error``, ``http_error`` or
    ``bad_response``; ``status_code`` the last HTTP status (``None`` without a reply)."""

    def __init__(self, kind: str, message: str, status_code: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header given in seconds (the HTTP-date form is ignored: backoff applies).

    >>> retry_after_seconds("2.5"), retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), retry_after_seconds(None)
    (2.5, None, None)
    """
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


class OpenAIChatClient:
    """POSTs to ``{base_url}/chat/completions`` with bounded concurrency, a timeout and retries.

    Subclasses build the payloads and read the replies; this class sends them. ``counters`` gets ``requests``
    (attempts), ``retries``, ``request_seconds`` and the server's token ``usage`` (``prompt_tokens``,
    ``completion_tokens``, ``usage_reported``); ``attempt_failures`` counts every failed attempt by kind
    (``http_429``, ``http_500``, ``bad_response``, ``timeout``, ``connection_error``), retried or not.

    Args:
        base_url: API root including the version, e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: name of the environment variable holding the API key, read once at construction.
            ``None`` or a variable that is not set: no ``Authorization`` header (a local ``vllm serve``).
        max_concurrency: requests in flight at most (per event loop).
        timeout: seconds per HTTP request (connect + read, and the whole reply).
        max_retries: retries after the first attempt for retryable failures.
        backoff_base: first backoff in seconds; doubles per retry with +-50 %% jitter, capped by ``backoff_max``.
        backoff_max: the longest wait between attempts, ``Retry-After`` included.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key_env: str | None = None,
        max_concurrency: int = 16,
        timeout: float = 120.0,
        max_retries: int = 3,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
    ):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"`base_url` must be an http(s) URL such as 'http://127.0.0.1:8000/v1', got {base_url!r}."
            )
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
            logger.info("API key variable %s is not set: requests carry no API key.", api_key_env)
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.counters: Counter[str] = Counter()
        self.attempt_failures: Counter[str] = Counter()
        # httpx clients and asyncio semaphores are bound to the loop that first uses them; the trainer
        # may run one loop per step (asyncio.run), so keep one pair per live loop.
        self._per_loop: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]] = {}
        self._rng = random.Random()
        # Loading CA certificates costs ~0.2 s per client; build the context once, share it across loops.
        self._ssl_context = httpx.create_ssl_context() if self.base_url.startswith("https://") else None

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

    async def _post_chat(
        self,
        payload: dict[str, Any],
        parse: Callable[[Any], ParsedReply],
        *,
        retry_malformed: bool = False,
    ) -> ParsedReply:
        """``parse(body)`` of the first good reply to ``payload``; :class:`RequestFailed` after exhausting retries.

        ``parse`` raises ``ValueError``/``KeyError``/``IndexError``/``TypeError``/``AttributeError`` for a body that
        is no usable chat completion: a ``bad_response``, retried when ``retry_malformed``, else final at once.
        """
        client, semaphore = self._loop_resources()
        last_kind, last_message, last_status = "error", "", None
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
                self.attempt_failures["timeout"] += 1
                continue
            except httpx.TransportError as error:
                self._count_seconds(cost, request_started)
                last_kind, last_message = "connection_error", f"{type(error).__name__}: {error}"
                self.attempt_failures["connection_error"] += 1
                continue
            self._count_seconds(cost, request_started)
            last_status = response.status_code
            if response.status_code != 200:
                self.attempt_failures[f"http_{response.status_code}"] += 1
                last_kind, last_message = "http_error", f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code in RETRYABLE_STATUS:
                    retry_after = retry_after_seconds(response.headers.get("retry-after"))
                    continue
                break
            try:
                body = response.json()
                parsed = parse(body)
            except (ValueError, KeyError, IndexError, TypeError, AttributeError) as error:
                self.attempt_failures["bad_response"] += 1
                last_kind = "bad_response"
                last_message = f"not a chat completion ({error}): {response.text[:300]}"
                if retry_malformed:
                    continue
                break
            self._count_usage(cost, body.get("usage") if isinstance(body, dict) else None)
            return parsed
        raise RequestFailed(last_kind, last_message, last_status)

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

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        resources = self._per_loop.pop(loop, None)
        if resources is not None:
            await resources[0].aclose()
        self._per_loop.clear()  # clients of other (closed) loops cannot be closed from here
