"""The tiny Qwen3 policy of the toy world (a real architecture, loadable with ``AutoModelForCausalLM``).

Size choice: MEDS computes one feature per decoder layer and keeps the last N/2 layers, so a 2-layer
model would give a 1-dimensional feature (a constant after L2 normalisation). Four layers at hidden 64
(0.25 M parameters) give a 2-dimensional feature and still fit the warm-up budget: measured side by side
on a 2-core CPU, a training step (batch 32) takes 0.55-0.8x the time of a 2-layer/hidden-128 model, and
warm-up (seed 0) reached 50 % validation greedy accuracy after ~1125 steps instead of ~500-900, so the wall
time is about the same. Hidden 96 or 128 at four layers was 2-4x slower per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToyModelConfig:
    """Shape of the toy Qwen3 model."""

    num_hidden_layers: int = field(default=4, metadata={"help": "Decoder layers (MEDS keeps the last half)."})
    hidden_size: int = field(default=64, metadata={"help": "Model width."})
    intermediate_size: int = field(default=256, metadata={"help": "MLP width."})
    num_attention_heads: int = field(default=4, metadata={"help": "Query heads."})
    num_key_value_heads: int = field(
        default=2, metadata={"help": "Key/value heads (grouped-query attention)."}
    )
    head_dim: int = field(default=16, metadata={"help": "Per-head width (even, for rotary embeddings)."})
    max_position_embeddings: int = field(
        default=256, metadata={"help": "Longest sequence (prompt + completion)."}
    )
    rope_theta: float = field(default=10000.0, metadata={"help": "Rotary base."})

    def __post_init__(self) -> None:
        for name in (
            "num_hidden_layers",
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "head_dim",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_key_value_heads "
                f"({self.num_key_value_heads})."
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}.")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def build_toy_model(tokenizer, seed: int = 0, config: ToyModelConfig | None = None):
    """A randomly initialised tiny ``Qwen3ForCausalLM`` matching ``tokenizer`` (tied embeddings, float32).

    Args:
        tokenizer: the toy tokenizer (:func:`~hf_meds_cliff.toy.build_toy_tokenizer`); its vocabulary size,
            pad and eos ids are copied into the model and generation configs.
        seed: seed of the weight initialisation (the global torch RNG is left untouched).
        config: the model shape; :class:`ToyModelConfig` defaults when None.
    """
    config = config or ToyModelConfig()
    if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise ValueError("The tokenizer needs pad and eos tokens; build it with build_toy_tokenizer().")
    model = seeded_qwen3(config, seed, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model.generation_config = toy_generation_config(tokenizer)
    return model


def seeded_qwen3(config: ToyModelConfig, seed: int, vocab_size: int, pad_token_id: int, eos_token_id: int):
    """A randomly initialised ``Qwen3ForCausalLM`` of shape ``config`` (tied embeddings, float32, no BOS), its
    weights drawn from ``seed`` (the global torch RNG is left untouched)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model_config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen3ForCausalLM(model_config)


def toy_generation_config(tokenizer, max_new_tokens: int = 96):
    """Sampling defaults saved with the toy policy (``do_sample=True`` so servers honour temperature)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
