"""Cliff token-level advantages (paper eq. 4 and 5) and the sentence -> token boundary mapping.

Pure tensor functions, separate from the trainer (which only wires them in):

- :func:`cliff_token_advantages` turns the per-sequence GRPO advantages of a batch of groups into
  per-token advantages: an incorrect rollout keeps its negative advantage only on its *incorrect
  suffix* (from the first mistaken sentence on) and gets ``lam * A_cor`` on its correct prefix; every
  group is then re-centred by its token-weighted mean ``b`` so that its token advantages sum to zero.
- :func:`sentence_to_token_index` / :func:`first_mistake_token_positions` map the teacher's sentence
  index p(a) to the first token of the suffix; a token that straddles the sentence boundary belongs
  to the suffix (it carries characters of the mistaken sentence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "cliff_token_advantages",
    "first_mistake_token_positions",
    "sentence_to_token_index",
    "token_index_at_char",
    "zero_variance_groups",
]


def _check_1d(name: str, tensor: Any, batch_size: int) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"`{name}` must be a torch.Tensor of shape ({batch_size},), got {type(tensor).__name__}."
        )
    if tensor.shape != (batch_size,):
        raise ValueError(
            f"`{name}` has shape {tuple(tensor.shape)} but must be ({batch_size},), one entry per completion "
            "(the rows of `completion_mask`)."
        )
    return tensor


def zero_variance_groups(is_correct: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Rows whose group has zero reward variance, i.e. all rows of the group equally correct.

    With binary verifier rewards the group variance is zero exactly when every rollout of the group
    is correct or every one is wrong; this is read from ``is_correct`` rather than from the advantage
    values so that it does not depend on the scaling/normalisation TRL applied (or on float noise).

    Args:
        is_correct: ``(B,)`` bool.
        group_ids: ``(B,)`` integer group label of each row (rows of one prompt share a label).

    Returns:
        ``(B,)`` bool, True for rows of all-correct or all-wrong groups.

    >>> zero_variance_groups(torch.tensor([True, False, True, True]), torch.tensor([0, 0, 1, 1])).tolist()
    [False, False, True, True]
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    correct = is_correct.to(torch.float64)
    rows = torch.zeros(num_groups, dtype=torch.float64, device=correct.device).index_add_(
        0, inverse, torch.ones_like(correct)
    )
    correct_rows = torch.zeros_like(rows).index_add_(0, inverse, correct)
    mixed = (correct_rows > 0) & (correct_rows < rows)
    return ~mixed[inverse]


def cliff_token_advantages(
    advantages: torch.Tensor,
    is_correct: torch.Tensor,
    group_ids: torch.Tensor,
    suffix_start: torch.Tensor,
    completion_mask: torch.Tensor,
    lam: float = 0.0,
    recentre: bool = True,
) -> torch.Tensor:
    """Per-token Cliff advantages of a batch of groups (paper eq. 4 and 5).

    For a row ``i`` of group ``g`` and token ``j`` the un-centred value ``u_ij`` is

    - correct row: ``advantages[i]`` (``A_cor``) on every token;
    - incorrect row: ``lam * A_cor(g)`` for ``j < suffix_start[i]`` (the correct prefix) and
      ``advantages[i]`` (``A_inc``) for ``j >= suffix_start[i]`` (the incorrect suffix);

    where ``A_cor(g)`` is the mean advantage of the correct rows of ``g`` (they are all equal with
    binary rewards). The result is ``u_ij - b_g`` on unmasked tokens and 0 on masked ones, with
    ``b_g`` the token-weighted mean of ``u`` over the unmasked tokens of the group, so each group's
    token advantages sum to zero. Rows of groups with zero reward variance (all rows equally correct,
    see :func:`zero_variance_groups`) are all 0: such groups carry no signal in GRPO either.

    ``recentre=False`` leaves out ``b_g`` (an ablation; the paper always re-centres, eq. 5): the result is ``u`` on
    unmasked tokens. With ``recentre=False`` and every ``suffix_start = 0`` each row carries its own sequence
    advantage on every token, one advantage per rollout as in GRPO.

    ``suffix_start[i] = 0`` makes an incorrect row a plain GRPO-negative row (before centring);
    ``suffix_start`` is ignored on correct rows. With every ``suffix_start = 0`` and ``lam`` anything,
    the result is GRPO's advantages minus the per-group token mean.

    Args:
        advantages: ``(B,)`` float, per-sequence GRPO advantages (``A_cor`` on correct rows, ``A_inc``
            on incorrect ones), with whatever normalisation the config uses.
        is_correct: ``(B,)`` bool, the verifier's verdict per row.
        group_ids: ``(B,)`` integer, rows of one prompt share a label (labels need not be contiguous).
        suffix_start: ``(B,)`` integer >= 0, token index where the incorrect suffix starts.
        completion_mask: ``(B, T)`` 0/1 (bool, int or float); 0 marks padding / tokens after EOS.
        lam: weight of ``A_cor`` on the correct prefix of incorrect rows; the paper's main setting is 0.
        recentre: subtract the token-weighted group mean ``b_g`` (the paper, eq. 5); ``False``: ``b_g = 0``.

    Returns:
        ``(B, T)`` tensor with the dtype of ``advantages`` and the device of ``completion_mask``.

    Example (one group: a correct row of 2 tokens, an incorrect row of 4 tokens whose suffix starts at
    token 2; A_cor = 1, A_inc = -1, lam = 0 => u = [1, 1 | 0, 0, -1, -1], b = 0):

    >>> cliff_token_advantages(torch.tensor([1.0, -1.0]), torch.tensor([True, False]), torch.tensor([0, 0]),
    ...                        torch.tensor([0, 2]), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])).tolist()
    [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, -1.0, -1.0]]
    """
    if not isinstance(completion_mask, torch.Tensor) or completion_mask.dim() != 2:
        shape = (
            tuple(completion_mask.shape)
            if isinstance(completion_mask, torch.Tensor)
            else type(completion_mask)
        )
        raise ValueError(f"`completion_mask` must be a (B, T) tensor, got {shape}.")
    batch_size, seq_len = completion_mask.shape
    _check_1d("advantages", advantages, batch_size)
    _check_1d("is_correct", is_correct, batch_size)
    _check_1d("group_ids", group_ids, batch_size)
    _check_1d("suffix_start", suffix_start, batch_size)
    if not torch.is_floating_point(advantages):
        raise TypeError(f"`advantages` must be a floating-point tensor, got dtype {advantages.dtype}.")
    if torch.is_floating_point(suffix_start) or torch.is_floating_point(group_ids):
        raise TypeError(
            "`suffix_start` and `group_ids` must be integer tensors (token indices and group labels)."
        )
    if batch_size and int(suffix_start.min().item()) < 0:
        raise ValueError(
            f"`suffix_start` must be >= 0 (0 = the whole rollout is the incorrect suffix), got {suffix_start.tolist()}."
        )
    if not isinstance(lam, (int, float)) or isinstance(lam, bool):
        raise TypeError(f"`lam` must be a float, got {type(lam).__name__}: {lam!r}.")
    if not isinstance(recentre, bool):
        raise TypeError(f"`recentre` must be a bool, got {type(recentre).__name__}: {recentre!r}.")

    device = completion_mask.device
    dtype = advantages.dtype
    advantages = advantages.to(device)
    correct = is_correct.to(device=device, dtype=torch.bool)
    suffix_start = suffix_start.to(device)
    mask = completion_mask.to(device=device, dtype=dtype)
    if batch_size == 0:
        return torch.zeros_like(mask)

    _, inverse = torch.unique(group_ids.to(device), return_inverse=True)
    num_groups = int(inverse.max().item()) + 1
    correct_f = correct.to(dtype)
    correct_rows = torch.zeros(num_groups, dtype=dtype, device=device).index_add_(0, inverse, correct_f)
    correct_sum = torch.zeros(num_groups, dtype=dtype, device=device).index_add_(
        0, inverse, advantages * correct_f
    )
    a_cor_row = (correct_sum / correct_rows.clamp(min=1))[inverse]  # (B,)

    positions = torch.arange(seq_len, device=device)
    in_suffix = positions.unsqueeze(0) >= suffix_start.unsqueeze(1)  # (B, T)
    incorrect_values = torch.where(in_suffix, advantages.unsqueeze(1), (lam * a_cor_row).unsqueeze(1))
    uncentred = torch.where(correct.unsqueeze(1), advantages.unsqueeze(1), incorrect_values) * mask

    token_sum = torch.zeros(num_groups, dtype=dtype, device=device).index_add_(
        0, inverse, uncentred.sum(dim=1)
    )
    token_count = torch.zeros(num_groups, dtype=dtype, device=device).index_add_(0, inverse, mask.sum(dim=1))
    baseline = torch.where(token_count > 0, token_sum / token_count.clamp(min=1), torch.zeros_like(token_sum))
    if not recentre:
        baseline = torch.zeros_like(baseline)

    centred = (uncentred - baseline[inverse].unsqueeze(1)) * mask
    keep = ~zero_variance_groups(correct, inverse)
    return centred * keep.to(dtype).unsqueeze(1)


def sentence_to_token_index(
    offsets: Sequence[tuple[int, int]], sentence_spans: Sequence[tuple[int, int]], sentence_index: int
) -> int:
    """Index of the first token of the suffix that starts at sentence ``sentence_index``.

    The suffix starts at character ``c = sentence_spans[sentence_index][0]``; its first token is the
    first token whose character span ends after ``c`` -- so a token straddling the boundary (e.g. a
    BPE token " 12" made of the previous sentence's trailing space and the next sentence's first
    characters) belongs to the suffix. Zero-width tokens (special tokens, offsets ``(k, k)``) are
    skipped. Sentence 0 gives 0; a boundary after the last token gives ``len(offsets)`` (no suffix).

    Args:
        offsets: per-token ``(start, end)`` character offsets into the completion text.
        sentence_spans: :func:`hf_meds_cliff.cliff.split_sentences` of the same text.
        sentence_index: p(a), in ``[0, len(sentence_spans))``.

    >>> sentence_to_token_index([(0, 2), (2, 5), (5, 8), (8, 9)], [(0, 4), (4, 9)], 1)
    1
    """
    if isinstance(sentence_index, bool) or not isinstance(sentence_index, int):
        raise TypeError(
            f"`sentence_index` must be an int, got {type(sentence_index).__name__}: {sentence_index!r}."
        )
    if not 0 <= sentence_index < len(sentence_spans):
        raise ValueError(
            f"`sentence_index`={sentence_index} is out of range for {len(sentence_spans)} sentences; "
            "clamp or drop out-of-range teacher answers before mapping them to tokens."
        )
    if sentence_index == 0:
        return 0
    boundary = sentence_spans[sentence_index][0]
    for index, (start, end) in enumerate(offsets):
        if end > start and end > boundary:
            return index
    return len(offsets)


def token_index_at_char(
    tokenizer: Any, token_ids: Sequence[int], char_position: int, **decode_kwargs: Any
) -> int:
    """First token whose decoded prefix reaches past ``char_position``, by binary search on decodes.

    The tokenizer-agnostic fallback of :func:`first_mistake_token_positions`: it needs only
    ``tokenizer.decode`` (``O(log T)`` decodes) and so works for any tokenizer, including byte-level
    ones whose tokens split multi-byte characters. Returns ``len(token_ids)`` if no prefix reaches it.
    """
    low, high = 0, len(token_ids)  # invariant: answer in [low, high]
    while low < high:
        middle = (low + high) // 2
        if len(tokenizer.decode(list(token_ids[: middle + 1]), **decode_kwargs)) > char_position:
            high = middle
        else:
            low = middle + 1
    return low


def first_mistake_token_positions(
    tokenizer: Any,
    completion_ids: Sequence[Sequence[int]],
    completion_texts: Sequence[str],
    first_mistakes: Sequence[int | None],
    split: Callable[[str], list[tuple[int, int]]] | None = None,
) -> list[int]:
    """Token index of the start of the incorrect suffix for each rollout (batched).

    ``first_mistakes[i]`` is the sentence index p(a) of rollout ``i`` under
    :func:`~hf_meds_cliff.cliff.split_sentences` of ``completion_texts[i]`` (the text decoded from
    ``completion_ids[i]`` without special tokens); ``None`` (correct rollouts, or no judgment) gives 0.
    Fast path: a fast tokenizer re-encodes the text with an offset mapping; when that reproduces the
    completion's ids the offsets are exact and used via :func:`sentence_to_token_index`. Otherwise
    (tokenisation not canonical, special tokens in between, slow tokenizer) it falls back to
    :func:`token_index_at_char`. Either way a straddling token belongs to the suffix.

    ``split`` is the unit splitter the teacher numbered the rollout with: :func:`~hf_meds_cliff.cliff.split_sentences`
    (the default, math) or :func:`~hf_meds_cliff.cliff.split_code_units` (code rollouts).

    Returns:
        ``len(completion_ids)`` ints, each in ``[0, len(completion_ids[i])]``.
    """
    from ..sentences import split_sentences

    split = split_sentences if split is None else split

    if not len(completion_ids) == len(completion_texts) == len(first_mistakes):
        raise ValueError(
            f"Got {len(completion_ids)} completions, {len(completion_texts)} texts and {len(first_mistakes)} first "
            "mistakes; they must align one to one."
        )
    positions: list[int] = []
    for ids, text, first_mistake in zip(completion_ids, completion_texts, first_mistakes):
        ids = [int(t) for t in ids]
        if first_mistake is None or first_mistake <= 0:
            positions.append(0)
            continue
        spans = split(text)
        if first_mistake >= len(spans):
            raise ValueError(
                f"first mistake {first_mistake} is out of range for a rollout of {len(spans)} sentences."
            )
        offsets = _exact_offsets(tokenizer, ids, text)
        if offsets is not None:
            positions.append(sentence_to_token_index(offsets, spans, first_mistake))
        else:
            positions.append(
                token_index_at_char(tokenizer, ids, spans[first_mistake][0], skip_special_tokens=True)
            )
    return positions


def _exact_offsets(tokenizer: Any, ids: list[int], text: str) -> list[tuple[int, int]] | None:
    """Offsets of ``ids`` in ``text`` when re-encoding ``text`` gives back ``ids`` (trailing specials allowed)."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    try:
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except (NotImplementedError, ValueError, TypeError):
        return None
    encoded = list(encoding["input_ids"])
    if ids[: len(encoded)] != encoded:
        return None
    special = set(getattr(tokenizer, "all_special_ids", []))
    if any(t not in special for t in ids[len(encoded) :]):
        return None
    end = len(text)
    return [tuple(o) for o in encoding["offset_mapping"]] + [(end, end)] * (len(ids) - len(encoded))
