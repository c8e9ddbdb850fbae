"""MEDS features: per-layer logits of the answer token, captured with forward hooks.

For a completion whose last ``\\boxed{`` opens the final answer, MEDS looks at how every decoder layer
already "votes" for the first answer token ``y*``: ``l_n = h_n · W_lm[y*] (+ b_lm[y*])`` where ``h_n``
is layer ``n``'s output at the position whose next-token prediction is ``y*``. The vector of the last
``N/2`` layers, L2-normalised, is the feature the error memory clusters.

Three pieces, each usable on its own:

* :func:`locate_answer_token` finds ``y*`` in the completion tokens: by default as the reference implementation
  does, falling back to the decoded text where that rule finds nothing (``rule="auto"``; reference-exact on Qwen),
  or strictly one of the two (``rule="reference"``, ``rule="decoded"``); see its docstring;
* :func:`resolve_decoder` finds the decoder layers, final norm and LM head of a plain, PEFT- or
  DDP-wrapped Qwen2/Qwen3/Llama-style model;
* :class:`AnswerLogitCapture` hooks the kept layers during *any* forward pass (ours, or one TRL runs
  anyway) and keeps only the ``(rows, hidden)`` states at the answer positions; the per-layer logits
  use one LM-head row per sample, never the full-vocabulary logits of a layer, and the model is never
  called with ``output_hidden_states``.

:func:`answer_logit_features` runs one no-grad forward over prompt + completion truncated at the
answer position (only the decoder body: no LM head at all) and returns the features.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from typing_extensions import Self

logger = logging.getLogger(__name__)

__all__ = [
    "ANSWER_MARKER",
    "ANSWER_TOKEN_RULES",
    "AnswerLocation",
    "AnswerLogitCapture",
    "DecoderParts",
    "answer_logit_features",
    "answer_prefix_batch",
    "features_from_layer_logits",
    "forward_chunk_count",
    "locate_answer_token",
    "locate_answer_tokens",
    "reference_brace_index",
    "resolve_decoder",
    "select_layers",
]

ANSWER_MARKER = "\\boxed{"
"""Text that opens the final answer; the *last* occurrence in a completion is the one used."""

ANSWER_TOKEN_RULES = ("auto", "reference", "decoded")
"""How :func:`locate_answer_token` finds the answer token (``MEDSConfig.meds_answer_token``): ``"auto"`` (default)
is the reference rule, falling back to the decoded-text rule where the reference finds none."""

REFERENCE_BRACE_WINDOW = 10
"""Reference fallback: the ``{`` token must lie within this many tokens from the ``boxed`` token (inclusive)."""


@dataclass(frozen=True)
class AnswerLocation:
    """Where the answer token of one completion is, in completion-token coordinates.

    ``query_index`` is the token whose hidden state predicts the target (``-1`` means the last prompt
    token), ``target_index = query_index + 1`` the target token ``y*`` and ``target_id`` its id.
    """

    query_index: int
    target_index: int
    target_id: int
    rule: str = field(default="reference", compare=False)
    """Which rule found it: ``"reference"`` or ``"decoded"`` (provenance only; not part of equality)."""


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)


def reference_brace_index(
    completion_ids: Sequence[int], tokenizer, marker: str = ANSWER_MARKER
) -> int | None:
    """Index of the token holding the ``{`` of the answer box, by the reference implementation's rule.

    The rule of ``find_brace_positions_in_responses`` in the authors' ``recipe/MEDS/extract_layer_logits.py``:

    1. the last exact occurrence of the token sequence ``tokenizer.encode(marker)`` (``\\boxed{``), searched
       from the end: its last token;
    2. else, scanning tokens from the end (``convert_ids_to_tokens``), the last token whose string contains
       ``"boxed"`` (any case) that has a token containing ``"{"`` at most ``REFERENCE_BRACE_WINDOW - 1``
       positions after it (itself included): the first such token.

    Qwen's BPE often merges the ``{`` with what follows (``{\\``, ``{-``, ``{(``, ``{x``) or with a preceding
    space (``Ġ\\`` + ``boxed``), so step 2 decides most real completions.
    """
    ids = [int(i) for i in completion_ids]
    marker_ids = list(tokenizer.encode(marker, add_special_tokens=False))
    width = len(marker_ids)
    if width:
        for start in range(len(ids) - width, -1, -1):
            if ids[start : start + width] == marker_ids:
                return start + width - 1
    tokens = tokenizer.convert_ids_to_tokens(ids)
    for index in range(len(tokens) - 1, -1, -1):
        token = tokens[index]
        if isinstance(token, str) and "boxed" in token.lower():
            for candidate in range(index, min(index + REFERENCE_BRACE_WINDOW, len(tokens))):
                if isinstance(tokens[candidate], str) and "{" in tokens[candidate]:
                    return candidate
    return None


def _decoded_brace_index(ids: list[int], tokenizer, marker: str) -> tuple[int, bool] | None:
    """(index of the token completing the last ``marker`` on the decoded text, whether the answer starts
    inside that token)."""
    n = len(ids)
    # Grow a suffix window until it holds the whole last marker.
    window = min(n, 32)
    while True:
        start = n - window
        text = _decode(tokenizer, ids[start:])
        if marker in text:
            break
        if start == 0:
            return None
        window = min(n, window * 2)
    occurrences = text.count(marker)
    # Smallest k such that the window's first k tokens contain all `occurrences` markers: token
    # start + k - 1 is then the one that completes the last marker, i.e. holds its final "{".
    low, high = 1, n - start
    while low < high:
        middle = (low + high) // 2
        if _decode(tokenizer, ids[start : start + middle]).count(marker) >= occurrences:
            high = middle
        else:
            low = middle + 1
    prefix = _decode(tokenizer, ids[start : start + low])
    return start + low - 1, len(prefix) > prefix.rfind(marker) + len(marker)


def _has_answer_after_brace(ids: list[int], brace_index: int, tokenizer) -> bool:
    """Whether any answer text follows the ``{`` in token ``brace_index`` (special tokens such as EOS and
    padding do not count, whitespace does not count, and a box closed at once is empty)."""
    text = tokenizer.decode(ids[brace_index:], skip_special_tokens=True, clean_up_tokenization_spaces=False)
    brace = text.find("{")
    answer = (text[brace + 1 :] if brace >= 0 else text).lstrip()
    return answer != "" and not answer.startswith("}")


def locate_answer_token(
    completion_ids: Sequence[int], tokenizer, marker: str = ANSWER_MARKER, rule: str = "auto"
) -> AnswerLocation | None:
    """Locate the answer token ``y*`` of a completion and the position whose hidden state predicts it.

    ``rule="reference"`` reproduces the reference implementation: the token ``b`` holding the
    ``{`` is found by :func:`reference_brace_index` (exact token-sequence match of ``\\boxed{`` from the end,
    else the ``"boxed"``/``"{"`` token-string fallback); the query position is ``b`` and the target ``b + 1``.
    When Qwen merges the brace with the answer's first characters (``{\\`` + ``frac``), the target is the
    token after the merged one (``frac``), as in the reference.

    ``rule="decoded"`` finds ``b`` as the token that completes the last ``\\boxed{`` of the *decoded* text;
    when ``b`` also carries the first answer characters (``{1``) the target is ``b`` itself and the query
    ``b - 1`` (``-1``: the last prompt token), so the target starts the answer. Cost ``O(w log w)`` decodes
    in the distance ``w`` of the box from the end.

    ``rule="auto"`` (default) is the reference rule, and where it finds no answer token the decoded rule. On
    Qwen's tokenizer the reference rule finds every non-empty box, so ``"auto"`` is reference-exact there; on
    tokenizers that split ``\\boxed{`` differently it is not: SmolLM2's (GPT-2-style BPE) writes `` \\boxed{`` as
    ``Ġ\\``, ``box``, ``ed``, ``{``, so neither the exact ``encode("\\boxed{")`` sequence nor a token containing
    ``"boxed"`` occurs and the reference rule finds nothing. ``AnswerLocation.rule`` says which rule fired.

    All rules return ``None`` (no feature) when there is no box, when the box is empty (``\\boxed{}``,
    ``\\boxed{ }``), or when only EOS/padding (or nothing) follows the ``{`` (the target would be a special
    token). The reference still computes a feature in the last two cases, with ``}`` or the padding token as
    the target (and, for a ``{`` in the last position of the padded batch, none).

    Args:
        completion_ids: the completion's token ids (no padding needed; EOS may be included), shape ``(T,)``.
        tokenizer: a Hugging Face tokenizer.
        marker: the answer-opening text, ``\\boxed{`` by default; its last character must be ``{``.
        rule: ``"auto"``, ``"reference"`` or ``"decoded"`` (see above).
    """
    if rule not in ANSWER_TOKEN_RULES:
        raise ValueError(f"rule={rule!r} is not one of {list(ANSWER_TOKEN_RULES)} (meds_answer_token).")
    ids = [int(i) for i in completion_ids]
    if not ids:
        return None
    if rule in ("reference", "auto"):
        location = _reference_location(ids, tokenizer, marker)
        if location is not None or rule == "reference":
            return location
    return _decoded_location(ids, tokenizer, marker)


def _special_ids(tokenizer) -> set[int]:
    return set(getattr(tokenizer, "all_special_ids", []) or [])


def _reference_location(ids: list[int], tokenizer, marker: str) -> AnswerLocation | None:
    brace_index = reference_brace_index(ids, tokenizer, marker)
    if brace_index is None or brace_index + 1 >= len(ids) or ids[brace_index + 1] in _special_ids(tokenizer):
        return None
    if not _has_answer_after_brace(ids, brace_index, tokenizer):
        return None
    return AnswerLocation(brace_index, brace_index + 1, ids[brace_index + 1], rule="reference")


def _decoded_location(ids: list[int], tokenizer, marker: str) -> AnswerLocation | None:
    found = _decoded_brace_index(ids, tokenizer, marker)
    if found is None:
        return None
    brace_index, answer_starts_inside = found
    if not _has_answer_after_brace(ids, brace_index, tokenizer):
        return None
    if answer_starts_inside:
        return AnswerLocation(brace_index - 1, brace_index, ids[brace_index], rule="decoded")
    if brace_index + 1 >= len(ids) or ids[brace_index + 1] in _special_ids(tokenizer):
        return None
    return AnswerLocation(brace_index, brace_index + 1, ids[brace_index + 1], rule="decoded")


def locate_answer_tokens(
    completion_ids_list: Sequence[Sequence[int]],
    tokenizer,
    marker: str = ANSWER_MARKER,
    rule: str = "auto",
) -> list[AnswerLocation | None]:
    """:func:`locate_answer_token` for each completion of a batch."""
    return [locate_answer_token(ids, tokenizer, marker, rule) for ids in completion_ids_list]


@dataclass
class DecoderParts:
    """The pieces of a causal LM that MEDS needs.

    ``body`` maps ``input_ids`` to final hidden states (runs every layer and the final norm, no LM
    head); ``layers`` are its decoder layers in order; ``final_norm`` is applied after the last layer
    (``None`` if the architecture has none); ``lm_head`` is the output projection (``weight`` of shape
    ``(V, H)``, optional ``bias``).
    """

    body: nn.Module
    layers: nn.ModuleList
    final_norm: nn.Module | None
    lm_head: nn.Module


def full_parameters(*modules: nn.Module | None) -> contextlib.AbstractContextManager:
    """Context in which the parameters of ``modules`` are whole, for reading them outside a forward pass.

    Under DeepSpeed ZeRO-3 a parameter outside its module's forward is an empty shard; MEDS reads
    ``B`` LM-head rows (and the final norm) after the decoder forward, so the weights are gathered for that
    read (``deepspeed.zero.GatheredParameters``, read-only: the whole LM head, transiently, once per step;
    DeepSpeed has no row-level gather). Without ZeRO-3 this is a no-op. Not exercised here (no DeepSpeed on
    the CI machine); the single-process path is what the tests check.
    """
    params = [p for m in modules if m is not None for p in m.parameters(recurse=False)]
    if any(hasattr(p, "ds_id") for p in params):
        import deepspeed

        return deepspeed.zero.GatheredParameters(params, modifier_rank=None)
    return contextlib.nullcontext()


def _whole_module(module: nn.Module):
    """``module`` as a callable whose parameters are whole tensors.

    FSDP2 may leave a module that is not an FSDP unit of its own (e.g. the final norm, grouped with its
    parent) sharded outside the forward: its parameters are then ``DTensor`` shards and calling it on a plain
    tensor fails ("got mixed torch.Tensor and DTensor"). Its parameters are gathered (``full_tensor()``, a
    collective) and the module is called functionally with them; a module without ``DTensor`` parameters is
    returned as is.
    """
    if type(module).__name__.startswith("FSDP"):  # an FSDP2 unit gathers its own shards when called
        return module
    parameters = dict(module.named_parameters())
    if not any(hasattr(p, "full_tensor") for p in parameters.values()):
        return module
    whole = {name: p.full_tensor() if hasattr(p, "full_tensor") else p for name, p in parameters.items()}
    return lambda inputs: torch.func.functional_call(module, whole, (inputs,))


def _unwrap(model: nn.Module) -> nn.Module:
    # DDP / DataParallel / accelerate wrappers keep the real model in `.module`; torch.compile in `_orig_mod`.
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) or (
            type(model).__name__ in {"DistributedDataParallel", "DataParallel", "DeepSpeedEngine"}
            and hasattr(model, "module")
        ):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            break
    # PEFT: the base model carries the LoRA-injected layers, so features come from the adapted model.
    if hasattr(model, "get_base_model") and callable(model.get_base_model):
        model = model.get_base_model()
    return model


def resolve_decoder(model: nn.Module) -> DecoderParts:
    """Find body, decoder layers, final norm and LM head of a (possibly wrapped) causal LM.

    Supports the ``model.model.layers`` / ``model.model.norm`` / ``model.lm_head`` layout of Qwen2,
    Qwen3, Llama, Mistral and most Hugging Face decoder-only models, and GPT-2's
    ``model.transformer.h`` / ``ln_f``, each plain, PEFT-wrapped or DDP-wrapped.

    Raises:
        ValueError: the layers or the LM head cannot be found.
    """
    base = _unwrap(model)
    lm_head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if lm_head is None or not hasattr(lm_head, "weight"):
        raise ValueError(
            f"MEDS features need the model's LM head, but {type(base).__name__} has no output embeddings with a "
            "`weight` (get_output_embeddings() returned None). Use a causal LM such as Qwen2/Qwen3/Llama "
            "(`AutoModelForCausalLM`)."
        )
    for body_name, layers_name, norm_name in (("model", "layers", "norm"), ("transformer", "h", "ln_f")):
        body = getattr(base, body_name, None)
        layers = getattr(body, layers_name, None) if body is not None else None
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return DecoderParts(
                body=body, layers=layers, final_norm=getattr(body, norm_name, None), lm_head=lm_head
            )
    raise ValueError(
        f"Cannot find the decoder layers of {type(base).__name__}: MEDS supports the Qwen2/Qwen3/Llama layout "
        "(`model.model.layers`, `model.model.norm`, `model.lm_head`) and GPT-2's (`model.transformer.h`). "
        "For another architecture, subclass MEDSGRPOTrainer and override `_meds_decoder_parts`."
    )


def select_layers(num_model_layers: int, num_layers: int | None = None) -> list[int]:
    """Indices (0-based) of the decoder layers whose logits form the feature: the last ``num_layers``.

    ``None`` keeps the last ``N // 2`` (paper default, 14 of 28), at least one.

    >>> select_layers(28)
    [14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]
    >>> select_layers(4, num_layers=3)
    [1, 2, 3]
    """
    if num_model_layers < 1:
        raise ValueError(f"The model has {num_model_layers} decoder layers; MEDS needs at least one.")
    keep = max(1, num_model_layers // 2) if num_layers is None else num_layers
    if not 1 <= keep <= num_model_layers:
        raise ValueError(
            f"meds_num_layers={num_layers} is out of range for a model with {num_model_layers} decoder layers; "
            f"use a value in [1, {num_model_layers}] or None for the last half."
        )
    return list(range(num_model_layers - keep, num_model_layers))


def features_from_layer_logits(
    layer_logits: torch.Tensor, use_layer_diff: bool = False, eps: float = 1e-12
) -> torch.Tensor:
    """Turn per-layer answer logits into MEDS features.

    Args:
        layer_logits: ``(n, k)`` logits ``l_n`` of the kept layers, in layer order.
        use_layer_diff: use the first differences ``l_{n+1} - l_n`` (``(n, k - 1)``) instead.
        eps: guard against division by zero for an all-zero row.

    Returns:
        ``(n, k)`` (or ``(n, k - 1)``) float32 rows of unit L2 norm.

    >>> features_from_layer_logits(torch.tensor([[3.0, 4.0]]))
    tensor([[0.6000, 0.8000]])
    >>> features_from_layer_logits(torch.tensor([[1.0, 4.0, 8.0]]), use_layer_diff=True)
    tensor([[0.6000, 0.8000]])
    """
    if layer_logits.ndim != 2:
        raise ValueError(f"layer_logits must be (n, k), got shape {tuple(layer_logits.shape)}.")
    values = layer_logits.float()
    if use_layer_diff:
        if values.size(1) < 2:
            raise ValueError("Layer differences need at least 2 kept layers; raise meds_num_layers.")
        values = values[:, 1:] - values[:, :-1]
    return values / values.norm(dim=1, keepdim=True).clamp_min(eps)


def _layer_output_tensor(output) -> torch.Tensor:
    # transformers >= 5 decoder layers return a Tensor; older ones a tuple whose first item is the state.
    return output[0] if isinstance(output, (tuple, list)) else output


class AnswerLogitCapture:
    """Forward hooks that keep, for each kept layer, the hidden state at each row's answer position.

    Use as a context manager around any forward pass(es) of the model over the batch the positions
    refer to; the batch may be run in consecutive row chunks (as TRL does), each hook tracks its row
    offset. Afterwards :meth:`layer_logits` gives ``(B, k)`` logits ``h_n · W[y*] (+ b[y*])``.

    Args:
        parts: from :func:`resolve_decoder`.
        layer_indices: kept layers (see :func:`select_layers`).
        query_positions: ``(B,)`` absolute positions (in the sequences the forward sees) whose hidden
            state predicts the target; rows with a negative position are skipped (zeros).
        logit_lens: apply the final norm to every kept layer. Without it only the last layer is
            normed, exactly like ``lm_head(hidden_states[l])`` of Hugging Face's
            ``output_hidden_states`` (whose last element already has the final norm).
    """

    def __init__(
        self,
        parts: DecoderParts,
        layer_indices: Sequence[int],
        query_positions: torch.Tensor,
        logit_lens: bool = False,
    ):
        self.parts = parts
        self.layer_indices = list(layer_indices)
        self.query_positions = query_positions.long()
        self.logit_lens = logit_lens
        self._states: dict[int, list[torch.Tensor]] = {i: [] for i in self.layer_indices}
        self._rows_seen: dict[int, int] = dict.fromkeys(self.layer_indices, 0)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def _make_hook(self, layer_index: int):
        def hook(module, args, output):
            hidden = _layer_output_tensor(output)
            start = self._rows_seen[layer_index]
            rows = hidden.size(0)
            positions = self.query_positions[start : start + rows].to(hidden.device)
            self._rows_seen[layer_index] = start + rows
            picked = hidden[torch.arange(rows, device=hidden.device), positions.clamp_min(0)]
            self._states[layer_index].append(picked.detach().float())

        return hook

    def __enter__(self) -> Self:
        for layer_index in self.layer_indices:
            handle = self.parts.layers[layer_index].register_forward_hook(self._make_hook(layer_index))
            self._handles.append(handle)
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    @property
    def complete(self) -> bool:
        """Whether every kept layer saw every row exactly once."""
        total = self.query_positions.numel()
        return all(seen == total for seen in self._rows_seen.values())

    def hidden_states(self) -> torch.Tensor:
        """``(B, k, H)`` captured states (float32), in layer order (``B`` may be 0)."""
        if not self.complete:
            raise RuntimeError(
                f"The hooks saw {self._rows_seen} rows per layer, expected {self.query_positions.numel()}: "
                "the capture must wrap forward passes over exactly the batch its positions refer to."
            )
        if self.query_positions.numel() == 0:
            hidden_size = self.parts.lm_head.weight.shape[-1]  # a DTensor reports its global shape
            return torch.zeros((0, len(self.layer_indices), hidden_size), dtype=torch.float32)
        return torch.stack([torch.cat(self._states[i], dim=0) for i in self.layer_indices], dim=1)

    @torch.no_grad()
    def layer_logits(self, target_ids: torch.Tensor) -> torch.Tensor:
        """``(B, k)`` per-layer logits of ``target_ids`` ``(B,)`` (float32); skipped rows are 0.

        Under FSDP2 / ZeRO-3 the LM head and final norm may be sharded here (this runs outside a forward),
        and making them whole is a collective: every rank must call this, even with ``B = 0``.
        """
        states = self.hidden_states()  # (B, k, H)
        num_model_layers = len(self.parts.layers)
        norm = self.parts.final_norm
        with full_parameters(self.parts.lm_head, norm):
            if norm is not None:
                apply_norm = _whole_module(norm)  # every rank, even with no row: it may all-gather
                norm_dtype = next(norm.parameters(), states).dtype
                for column, layer_index in enumerate(self.layer_indices):
                    if self.logit_lens or layer_index == num_model_layers - 1:
                        states[:, column] = apply_norm(states[:, column].to(norm_dtype)).float()
            weight = self.parts.lm_head.weight
            if hasattr(weight, "full_tensor"):  # FSDP2 DTensor, sharded over ranks
                weight = weight.full_tensor()
            targets = target_ids.long().to(weight.device)
            rows = weight[targets].float().to(states.device)  # (B, H): one LM-head row per sample
        logits = torch.einsum("bkh,bh->bk", states, rows)
        bias = getattr(self.parts.lm_head, "bias", None)
        if bias is not None:
            logits = logits + bias[targets].float().to(states.device).unsqueeze(1)
        return logits.masked_fill((self.query_positions < 0).to(logits.device).unsqueeze(1), 0.0)


def answer_prefix_batch(
    prompt_ids_list: Sequence[Sequence[int]],
    completion_ids_list: Sequence[Sequence[int]],
    locations: Sequence[AnswerLocation],
    pad_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt + completion prefixes that end at each answer's query position.

    Right padding keeps every real token at its natural position (0, 1, ...), so the features of a
    row do not depend on what else is in the batch.

    Returns:
        ``input_ids`` ``(n, L)``, ``attention_mask`` ``(n, L)`` and ``query_positions`` ``(n,)``
        (the last real token of each row).
    """
    if not (len(prompt_ids_list) == len(completion_ids_list) == len(locations)):
        raise ValueError(
            f"Got {len(prompt_ids_list)} prompts, {len(completion_ids_list)} completions and {len(locations)} "
            "answer locations; they must align one to one."
        )
    # query_index == -1 (the answer starts in the first completion token) ends the row at the prompt.
    sequences = [
        list(prompt) + list(completion)[: loc.query_index + 1]
        for prompt, completion, loc in zip(prompt_ids_list, completion_ids_list, locations, strict=True)
    ]
    length = max((len(s) for s in sequences), default=0)
    input_ids = torch.full((len(sequences), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        input_ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
        attention_mask[row, : len(sequence)] = 1
    query_positions = attention_mask.sum(dim=1) - 1
    return input_ids, attention_mask, query_positions


def forward_chunk_count(num_rows: int, batch_size: int | None) -> int:
    """Forward passes :func:`answer_logit_features` runs for ``num_rows`` located answers.

    Under FSDP2 or ZeRO-3 every forward is a collective: all ranks must run the same number, so a trainer
    takes the maximum of this count over its ranks and passes it as ``num_chunks``.

    >>> forward_chunk_count(5, 2), forward_chunk_count(0, 2), forward_chunk_count(5, None)
    (3, 0, 1)
    """
    if num_rows == 0:
        return 0
    return -(-num_rows // batch_size) if batch_size else 1


@torch.no_grad()
def answer_logit_features(
    model: nn.Module,
    prompt_ids_list: Sequence[Sequence[int]],
    completion_ids_list: Sequence[Sequence[int]],
    locations: Sequence[AnswerLocation | None],
    layer_indices: Sequence[int] | None = None,
    *,
    pad_token_id: int = 0,
    logit_lens: bool = False,
    use_layer_diff: bool = False,
    batch_size: int | None = None,
    autocast: contextlib.AbstractContextManager | None = None,
    parts: DecoderParts | None = None,
    num_chunks: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MEDS features from one no-grad forward of the decoder body over the answer prefixes.

    Args:
        model: the policy (plain, PEFT- or DDP-wrapped; LoRA stays active).
        prompt_ids_list, completion_ids_list: ``B`` unpadded token lists.
        locations: ``B`` results of :func:`locate_answer_token`; ``None`` rows get no feature.
        layer_indices: kept layers; default the last half (:func:`select_layers`).
        pad_token_id: id used for right padding (masked out).
        logit_lens, use_layer_diff: see :class:`AnswerLogitCapture` and :func:`features_from_layer_logits`.
        batch_size: rows per forward chunk (default: all at once).
        autocast: context to run the forward in (e.g. ``accelerator.autocast()``); entered once, around
            all chunks (a generator-based context such as accelerate's cannot be entered twice).
        parts: pre-resolved :class:`DecoderParts` (default: :func:`resolve_decoder`).
        num_chunks: run exactly this many forwards, padding with one-token dummy chunks (whose outputs are
            not used) when this process has fewer rows; default :func:`forward_chunk_count` of its rows.
            Sharded models (FSDP2, ZeRO-3) need the same count on every rank, and a rank with no located
            answer must still run its share of forwards and of the LM-head/norm gathers, or the ranks issue
            mismatched collectives and hang.

    Returns:
        ``features`` ``(B, d)`` float32 (zero rows where there is no feature), ``has_feature`` ``(B,)``
        bool, and the raw per-layer logits ``(B, k)``.
    """
    parts = parts or resolve_decoder(model)
    layer_indices = select_layers(len(parts.layers)) if layer_indices is None else list(layer_indices)
    num_rows = len(locations)
    has_feature = torch.tensor([loc is not None for loc in locations], dtype=torch.bool)
    kept = [i for i, loc in enumerate(locations) if loc is not None]
    dim = len(layer_indices) - 1 if use_layer_diff else len(layer_indices)
    features = torch.zeros((num_rows, dim), dtype=torch.float32)
    layer_logits = torch.zeros((num_rows, len(layer_indices)), dtype=torch.float32)
    chunk = batch_size or max(len(kept), 1)
    real_chunks = forward_chunk_count(len(kept), chunk)
    num_chunks = real_chunks if num_chunks is None else num_chunks
    if num_chunks < real_chunks:
        raise ValueError(
            f"num_chunks={num_chunks} is fewer than the {real_chunks} forward chunks that {len(kept)} rows need "
            f"at batch_size={batch_size}; pass the maximum of forward_chunk_count(...) over the ranks."
        )
    if num_chunks == 0:  # nothing to run here, and (by the caller's agreement) on no other rank either
        return features, has_feature, layer_logits
    input_ids, attention_mask, query_positions = answer_prefix_batch(
        [prompt_ids_list[i] for i in kept],
        [completion_ids_list[i] for i in kept],
        [locations[i] for i in kept],
        pad_token_id,
    )
    target_ids = torch.tensor([locations[i].target_id for i in kept], dtype=torch.long)
    device = parts.lm_head.weight.device
    capture = AnswerLogitCapture(parts, layer_indices, query_positions, logit_lens=logit_lens)
    with autocast if autocast is not None else contextlib.nullcontext():
        with capture:
            for start in range(0, len(kept), chunk):
                rows = slice(start, start + chunk)
                length = int(attention_mask[rows].sum(dim=1).max())  # drop the chunk's all-pad tail
                parts.body(
                    input_ids=input_ids[rows, :length].to(device),
                    attention_mask=attention_mask[rows, :length].to(device),
                    use_cache=False,
                )
        dummy = torch.full((1, 1), pad_token_id, dtype=torch.long, device=device)
        for _ in range(num_chunks - real_chunks):  # outside the capture: nothing of it is kept
            parts.body(input_ids=dummy, attention_mask=torch.ones_like(dummy), use_cache=False)
    logits = capture.layer_logits(target_ids).cpu()  # every rank: it may gather the LM head and norm
    if kept:
        layer_logits[kept] = logits
        features[kept] = features_from_layer_logits(logits, use_layer_diff=use_layer_diff)
    return features, has_feature, layer_logits
