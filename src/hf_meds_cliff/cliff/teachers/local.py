"""A teacher running a local ``transformers`` model on the training machine (small teachers, tests).

Generation runs in a worker thread (``asyncio.to_thread``) so the event loop stays responsive, and
is serialised with a lock: one model, one generation at a time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..judging import build_judge_messages, build_solve_messages, check_domain, parse_judgment
from .base import Judgment, SolveFailure

logger = logging.getLogger(__name__)

__all__ = ["TransformersTeacher"]


class TransformersTeacher:
    """Teacher backed by a local causal LM.

    Args:
        model: a ``PreTrainedModel`` or a path/name loadable with ``AutoModelForCausalLM`` (offline).
        tokenizer: its tokenizer (loaded from ``model`` when it is a path and this is ``None``).
        solve_temperature / judge_temperature: sampling temperatures (0 = greedy).
        max_new_tokens: generation budget per answer.
        device: device to move a loaded model to (ignored for a model object).
        name: label for logs and metrics.
        domain: ``"math"`` (the default) or ``"code"``: which solve and judge prompts are used.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        solve_temperature: float = 0.6,
        judge_temperature: float = 0.6,
        max_new_tokens: int = 1024,
        device: str | None = None,
        name: str | None = None,
        domain: str = "math",
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if isinstance(model, str):
            name = name or model
            tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
            if device is not None:
                model = model.to(device)
        if tokenizer is None:
            raise ValueError(
                "Pass the `tokenizer` of the teacher model (or give `model` as a path to load both)."
            )
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be an int >= 1, got {max_new_tokens!r}.")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.solve_temperature = solve_temperature
        self.judge_temperature = judge_temperature
        self.max_new_tokens = max_new_tokens
        self.name = (
            name or getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        )
        check_domain(domain)
        self.domain = domain
        self.counters: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, max_new_tokens={self.max_new_tokens})"

    def _prompt_ids(self, messages: list[dict[str, str]]):
        import torch

        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:  # a plain LM: concatenate the messages
            text = "\n\n".join(m["content"] for m in messages) + "\n\n"
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        return ids.to(next(self.model.parameters()).device) if isinstance(ids, torch.Tensor) else ids

    def _generate(self, messages: list[dict[str, str]], temperature: float) -> str:
        import torch

        with self._lock, torch.inference_mode():
            input_ids = self._prompt_ids(messages)
            sampling = (
                {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
            )
            pad_token_id = self.tokenizer.pad_token_id
            if pad_token_id is None:
                pad_token_id = self.tokenizer.eos_token_id
            output = self.model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad_token_id,
                **sampling,
            )
            return self.tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True)

    async def solve(self, problem: str) -> str | SolveFailure:
        self.counters["solve_calls"] += 1
        try:
            return await asyncio.to_thread(
                self._generate, build_solve_messages(problem, domain=self.domain), self.solve_temperature
            )
        except Exception as error:  # a teacher never stops training
            self.counters["failures/error"] += 1
            logger.exception("Local teacher %s raised while solving", self.name)
            return SolveFailure("error", f"{type(error).__name__}: {error}")

    async def judge(
        self, problem: str, reference: str, sentences: Sequence[str], execution: str | None = None
    ) -> Judgment:
        self.counters["judge_calls"] += 1
        if len(sentences) == 0:  # nothing to judge: no request, the rollout stays a plain GRPO negative
            self.counters["failures/empty"] += 1
            return Judgment(None, None, "empty", "empty rollout")
        try:
            messages = build_judge_messages(
                problem, reference, sentences, domain=self.domain, execution=execution
            )
            answer = await asyncio.to_thread(self._generate, messages, self.judge_temperature)
        except Exception as error:  # a teacher never stops training
            self.counters["failures/error"] += 1
            logger.exception("Local teacher %s raised while judging", self.name)
            return Judgment(None, None, "error", f"{type(error).__name__}: {error}")
        judgment = parse_judgment(answer, len(sentences))
        if judgment.status != "ok":
            self.counters[f"failures/{judgment.status}"] += 1
        return judgment

    async def aclose(self) -> None:
        return None
