"""Generation through an OpenAI-compatible ``/chat/completions`` server (``vllm serve``, SGLang, ``transformers serve``,
a hosted API): ``hf-meds-cliff eval --backend openai --base_url URL --model_name_or_path NAME``.

- ``n`` samples per request where the server supports it: the first request of a run asks for all the samples of a
  problem at once; a server that returns fewer choices (``transformers serve`` ignores ``n``) or refuses ``n`` (HTTP
  400/422) keeps what it returned and is asked one sample per request from then on (counted: ``n_unsupported``).
- Bounded concurrency, a timeout per request, and retries with exponential backoff that wait at least what a
  ``Retry-After`` header asks (:class:`hf_meds_cliff.chat_client.OpenAIChatClient`, shared with the Cliff teacher).
  Unlike the teacher, a body that is no chat completion is retried too: a sample is never lost to one bad reply.
- Resumable per sample: every sample is appended to ``requests_cache`` (``openai_samples.jsonl`` in the run folder)
  as soon as its reply arrives, keyed by (model, prompt, seed, sampling settings); a run killed mid-way, or stopped
  by a request that failed for good, asks only for the samples it does not have when it is run again.
- The server's token ``usage`` is summed into the summary (``generation``), with the request, retry and
  failure counts; all of them survive a resume (the counts of each invocation are appended to the cache as one
  ``{"counters": ...}`` line), and ``this_invocation`` holds this invocation's own.
- The API key is read from the environment variable named by ``api_key_env``; it is sent in the ``Authorization``
  header only, never logged, never written (the cache and the summary hold no header).

Seeds: a request for sample ``j`` of a problem (or for samples ``j, j+1, ...`` with ``n``) carries
``seed = sample_seed(problem seed, j)``; servers that honour ``seed`` (vLLM) then give the same samples again. A
server that ignores it (``transformers serve``) may return the same completion for several samples of a prompt: the
runner counts such duplicates per prompt (:func:`duplicate_samples`), warns once with the numbers and records them in
the summary.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..chat_client import OpenAIChatClient, RequestFailed
from .sampling import Sample, SamplingSettings, sample_seed

logger = logging.getLogger(__name__)

__all__ = ["OpenAIBackend", "OpenAIGenerationError", "duplicate_samples"]

_N_REFUSED_STATUS = frozenset({400, 422})


class OpenAIGenerationError(RuntimeError):
    """Some samples could not be generated after every retry; the ones that were are kept for the next run."""


@dataclass(frozen=True)
class _Choice:
    text: str
    truncated: bool


@dataclass(frozen=True)
class _Reply:
    choices: list[_Choice]
    usage: dict[str, int]


def _parse_reply(body: Any) -> _Reply:
    """The choices of a chat completion; ``ValueError``/``TypeError``/``KeyError`` for anything else (retried)."""
    choices = body["choices"]
    if not isinstance(choices, list) or not choices:
        raise ValueError("no choices")
    parsed = []
    for choice in sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0):
        message = choice["message"]
        content = message.get("content")
        if content is None:
            content = message.get("reasoning_content") or ""
        if not isinstance(content, str):
            raise TypeError(f"content is {type(content).__name__}")
        parsed.append(_Choice(content, choice.get("finish_reason") == "length"))
    usage = body.get("usage") if isinstance(body, dict) else None
    counts = {
        name: usage[name]
        for name in ("prompt_tokens", "completion_tokens")
        if isinstance(usage, dict)
        and isinstance(usage.get(name), int)
        and not isinstance(usage.get(name), bool)
    }
    return _Reply(parsed, counts)


class OpenAIBackend(OpenAIChatClient):
    """Samples from an OpenAI-compatible chat-completions server (see the module docstring).

    Args:
        base_url: API root including the version, e.g. ``http://127.0.0.1:8000/v1``.
        model: the ``model`` field of the requests (``transformers serve``: the folder it serves).
        api_key_env: name of the environment variable holding the API key (unset: no key is sent).
        max_concurrency: requests in flight at most.
        timeout: seconds per request (a long completion needs minutes).
        max_retries, backoff_base, backoff_max: retries of a failed request (see :class:`OpenAIChatClient`).
        samples_per_request: ask for all of a problem's samples in one request (``n``) until the server shows it
            does not support it; ``False`` asks one sample per request from the start.
        requests_cache: JSONL file the samples are appended to as they arrive (``None``: no resume).
        chat_template_kwargs: sent as the request's ``chat_template_kwargs`` (vLLM, ``transformers serve``).
        extra_body: extra JSON fields merged into every request.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = None,
        max_concurrency: int = 8,
        timeout: float = 600.0,
        max_retries: int = 6,
        backoff_base: float = 1.0,
        backoff_max: float = 60.0,
        samples_per_request: bool = True,
        requests_cache: str | Path | None = None,
        chat_template_kwargs: dict | None = None,
        extra_body: dict[str, Any] | None = None,
    ):
        if not isinstance(model, str) or not model:
            raise ValueError(f"`model` must be the model name the server knows, got {model!r}.")
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
        self.n_supported: bool | None = None if samples_per_request else False
        self.extra_body = dict(extra_body or {})
        if chat_template_kwargs:
            self.extra_body["chat_template_kwargs"] = dict(chat_template_kwargs)
        self.requests_cache = Path(requests_cache) if requests_cache is not None else None
        self._cached: dict[str, dict[int, Sample]] = {}
        # token usage of every sample in the cache, earlier runs included
        self._usage: Counter[str] = Counter()
        # request counts of earlier invocations (their {"counters": ...} lines), and what this one wrote so far
        self._earlier: Counter[str] = Counter()
        self._earlier_failures: Counter[str] = Counter()
        self._written: Counter[str] = Counter()
        self._written_failures: Counter[str] = Counter()
        if self.requests_cache is not None and self.requests_cache.is_file():
            self._read_cache()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, timeout={self.timeout})"
        )

    def problems_per_call(self, num_samples: int) -> int:
        # Enough requests to keep every concurrency slot busy; finished problems are scored and written per call.
        return max(1, (4 * self.max_concurrency) // max(1, num_samples) or 1)

    # ------------------------------------------------------------------------------------------
    # The per-sample cache

    def _read_cache(self) -> None:
        assert self.requests_cache is not None
        with self.requests_cache.open(encoding="utf-8", errors="replace") as handle:
            for line_number, line in enumerate(handle, 1):
                try:
                    entry = json.loads(line)
                    if "counters" in entry:
                        self._earlier.update({k: int(v) for k, v in entry["counters"].items()})
                        self._earlier_failures.update({k: int(v) for k, v in entry["failed_attempts"].items()})
                        continue
                    sample = Sample(
                        text=entry["text"],
                        num_tokens=entry.get("num_tokens"),
                        truncated=bool(entry["truncated"]),
                    )
                    self._cached.setdefault(entry["key"], {})[int(entry["sample_index"])] = sample
                    for key, value in (entry.get("usage") or {}).items():
                        self._usage[key] += int(value)
                except (ValueError, KeyError, TypeError):
                    logger.warning("Ignoring malformed line %d of %s.", line_number, self.requests_cache)

    def _remember(self, key: str, index: int, sample: Sample, usage: dict[str, int] | None) -> None:
        self._cached.setdefault(key, {})[index] = sample
        for name, value in (usage or {}).items():
            self._usage[name] += value
        if self.requests_cache is None:
            return
        entry = {
            "key": key,
            "sample_index": index,
            "text": sample.text,
            "num_tokens": sample.num_tokens,
            "truncated": sample.truncated,
            "usage": usage,
        }
        with self.requests_cache.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def _problem_key(self, messages: list[dict[str, str]], seed: int, settings: SamplingSettings) -> str:
        identity = [
            self.model,
            messages,
            int(seed),
            settings.temperature,
            settings.top_p,
            settings.max_new_tokens,
            self.extra_body,
        ]
        return hashlib.blake2b(json.dumps(identity, sort_keys=True).encode(), digest_size=12).hexdigest()

    # ------------------------------------------------------------------------------------------
    # Generation

    def generate(
        self, prompts: Sequence[list[dict[str, str]]], seeds: Sequence[int], settings: SamplingSettings
    ) -> list[list[Sample]]:
        if len(prompts) != len(seeds):
            raise ValueError(f"Got {len(seeds)} seeds for {len(prompts)} prompts.")
        return asyncio.run(self._generate(list(prompts), list(seeds), settings))

    async def _generate(self, prompts, seeds, settings: SamplingSettings) -> list[list[Sample]]:
        keys = [self._problem_key(p, s, settings) for p, s in zip(prompts, seeds)]
        failures: list[RequestFailed] = []
        try:
            await asyncio.gather(
                *(
                    self._fill_problem(key, messages, seed, settings, failures)
                    for key, messages, seed in zip(keys, prompts, seeds)
                )
            )
        finally:
            await self.aclose()
            self._save_counters()
        if failures:
            kinds = Counter(f.kind for f in failures)
            kept = sum(len(samples) for samples in self._cached.values())
            raise OpenAIGenerationError(
                f"{len(failures)} request(s) to {self.base_url} failed after {self.max_retries} retries "
                f"({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))}; last: {failures[-1]}). The {kept} samples "
                f"generated so far are kept in {self.requests_cache or 'memory'}: run the same command again to resume."
            )
        return [[self._cached[key][i] for i in range(settings.num_samples)] for key in keys]

    def _missing(self, key: str, num_samples: int) -> list[int]:
        have = self._cached.get(key, {})
        return [i for i in range(num_samples) if i not in have]

    async def _fill_problem(self, key, messages, seed, settings: SamplingSettings, failures) -> None:
        """Request the samples of one problem that are not cached yet: with ``n`` while it works, then one by one."""
        missing = self._missing(key, settings.num_samples)
        if len(missing) > 1 and self.n_supported is not False:
            try:
                await self._request(key, messages, seed, missing, settings)
            except RequestFailed as failure:
                # not "is None": requests sent together all carry n, and the first refusal already set False
                if failure.status_code in _N_REFUSED_STATUS and self.n_supported is not True:
                    self._note_n_unsupported(f"HTTP {failure.status_code} to a request with n={len(missing)}")
                else:
                    failures.append(failure)
                    return
            missing = self._missing(key, settings.num_samples)
        results = await asyncio.gather(
            *(self._request(key, messages, seed, [index], settings) for index in missing),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, RequestFailed):
                failures.append(result)
            elif isinstance(result, BaseException):
                raise result

    def _note_n_unsupported(self, reason: str) -> None:
        if self.n_supported is not False:
            self.counters["n_unsupported"] += 1
            logger.warning(
                "%s does not give several samples per request (%s): asking one sample per request from now on.",
                self.base_url,
                reason,
            )
        self.n_supported = False

    async def _request(self, key, messages, seed, indices: list[int], settings: SamplingSettings) -> None:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
            "max_tokens": settings.max_new_tokens,
            "seed": sample_seed(seed, indices[0]),
            **self.extra_body,
        }
        if len(indices) > 1:
            payload["n"] = len(indices)
        reply = await self._post_chat(payload, _parse_reply, retry_malformed=True)
        choices = reply.choices[: len(indices)]
        if len(indices) > 1:
            if len(reply.choices) < len(indices):
                self._note_n_unsupported(f"{len(reply.choices)} choice(s) for n={len(indices)}")
            else:
                self.n_supported = True
        for position, (index, choice) in enumerate(zip(indices, choices)):
            # usage covers the whole request: a sample's own token count is known only when it was alone
            tokens = reply.usage.get("completion_tokens") if len(reply.choices) == 1 else None
            sample = Sample(text=choice.text, num_tokens=tokens, truncated=choice.truncated)
            self._remember(key, index, sample, (reply.usage or None) if position == 0 else None)

    _COUNTED = ("requests", "retries", "usage_reported")

    def _save_counters(self) -> None:
        """Append this invocation's request counts not yet written (one ``{"counters": ...}`` line), so that a
        resumed run reports the failures of the runs before it."""
        counts = Counter({name: self.counters[name] for name in self._COUNTED})
        delta, failures = counts - self._written, Counter(self.attempt_failures) - self._written_failures
        if self.requests_cache is None or not (delta or failures):
            return
        with self.requests_cache.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"counters": dict(delta), "failed_attempts": dict(failures)}) + "\n")
        self._written, self._written_failures = counts, Counter(self.attempt_failures)

    def report(self) -> dict[str, Any]:
        """What the server did over the whole run, earlier invocations included (from the cache):
        ``prompt_tokens``/``completion_tokens`` from its ``usage``, ``requests``, ``retries`` and ``failed_attempts``
        (by kind: ``http_429``, ``http_500``, ``bad_response``, ``timeout``, ...); ``this_invocation`` holds this
        invocation's own request counts."""
        earlier = self._earlier
        return {
            "backend": self.name,
            "base_url": self.base_url,
            "model": self.model,
            "prompt_tokens": self._usage["prompt_tokens"],
            "completion_tokens": self._usage["completion_tokens"],
            "requests": earlier["requests"] + self.counters["requests"],
            "retries": earlier["retries"] + self.counters["retries"],
            "failed_attempts": dict(sorted((self._earlier_failures + Counter(self.attempt_failures)).items())),
            "requests_with_usage": earlier["usage_reported"] + self.counters["usage_reported"],
            "n_per_request": self.n_supported is not False,
            "this_invocation": {
                "requests": self.counters["requests"],
                "retries": self.counters["retries"],
                "failed_attempts": dict(sorted(self.attempt_failures.items())),
            },
        }


def duplicate_samples(groups: Sequence[Sequence[str]]) -> dict[str, int]:
    """Samples that repeat an earlier sample of the same prompt, counted per prompt.

    Returns ``{"prompts": prompts with at least one repeat, "of_prompts": prompts with 2+ samples,
    "duplicate_samples": samples equal to an earlier one of their prompt, "of_samples": samples in those prompts}``.

    >>> duplicate_samples([["a", "a", "b"], ["c", "d"], ["e"]])
    {'prompts': 1, 'of_prompts': 2, 'duplicate_samples': 1, 'of_samples': 5}
    """
    prompts = duplicates = of_prompts = of_samples = 0
    for texts in groups:
        if len(texts) < 2:
            continue
        of_prompts += 1
        of_samples += len(texts)
        repeats = len(texts) - len(set(texts))
        duplicates += repeats
        prompts += repeats > 0
    return {"prompts": prompts, "of_prompts": of_prompts, "duplicate_samples": duplicates, "of_samples": of_samples}
