"""Cliff token-level advantages (paper eq. 4 and 5) and the sentence -> token boundary mapping.

Pure tensor functions, separate from the trainer (which only wires them in):

- :func:`cliff_token_advantages` turns the per-sequence GRPO advantages of a batch of groups into
  per-token advantages: an incorrect rollout keeps its negative advantage only on its *incorrect
  suffix* (from the first mistaken sentence on) and gets ``lam * A_cor`` on its correct prefix; every
  group is then re-centred by its token-weighted mean ``b`` so that its token advantages sum to zero.
- :func:`teacher_outcome_rewards` and :func:`group_normalised_advantages` are the paper's "GRPO with Teacher"
  (``CliffConfig(cliff_outcome="teacher")``): the teacher's verdict replaces the verifier's as each rollout's
  outcome, and GRPO's group normalisation turns the outcomes into one advantage per rollout.
- :func:`sentence_to_token_index` / :func:`first_mistake_token_positions` map the teacher's sentence
  index p(a) to the first token of the suffix; a token that straddles the sentence boundary belongs
  to the suffix (it carries characters of the mistaken sentence).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "cliff_token_advantages",
    "first_mistake_token_positions",
    "group_normalised_advantages",
    "sentence_to_token_index",
    "teacher_outcome_rewards",
    "teacher_verifier_counts",
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


def teacher_outcome_rewards(
    verifier_rewards: torch.Tensor, teacher_verdict: Sequence[bool | None]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The outcome of each rollout under the paper's "GRPO with Teacher": the teacher's verdict where it gave one.

    Args:
        verifier_rewards: ``(B,)`` float, the correctness reward per rollout (NaN: ungraded).
        teacher_verdict: ``B`` entries: True (the teacher says right), False (wrong), None (no verdict: the rollout
            was not judged, or the teacher gave no usable answer).

    Returns:
        ``(outcomes, from_teacher)``: ``(B,)`` float, 1.0 / 0.0 where the teacher gave a verdict and the verifier's
        reward otherwise (its fallback; NaN stays NaN), and ``(B,)`` bool, True where the teacher decided. A teacher
        verdict on an ungraded row is ignored (the row stays out of its group, as in Cliff).

    >>> outcomes, decided = teacher_outcome_rewards(torch.tensor([1.0, 0.0, 0.0, 1.0]), [False, True, None, None])
    >>> outcomes.tolist(), decided.tolist()
    ([0.0, 1.0, 0.0, 1.0], [True, True, False, False])
    """
    if not isinstance(verifier_rewards, torch.Tensor) or verifier_rewards.dim() != 1:
        raise ValueError(
            f"`verifier_rewards` must be a (B,) tensor, got "
            f"{tuple(verifier_rewards.shape) if isinstance(verifier_rewards, torch.Tensor) else type(verifier_rewards).__name__}."
        )
    if len(teacher_verdict) != verifier_rewards.shape[0]:
        raise ValueError(
            f"Got {len(teacher_verdict)} teacher verdicts for {verifier_rewards.shape[0]} rollouts; give one per "
            "rollout (None where the teacher gave none)."
        )
    if any(v is not None and not isinstance(v, bool) for v in teacher_verdict):
        raise TypeError(f"Teacher verdicts must be True, False or None, got {list(teacher_verdict)!r:.200}.")
    device = verifier_rewards.device
    graded = ~torch.isnan(verifier_rewards)
    has_verdict = torch.tensor([v is not None for v in teacher_verdict], dtype=torch.bool, device=device)
    verdict = torch.tensor([1.0 if v else 0.0 for v in teacher_verdict], dtype=verifier_rewards.dtype, device=device)
    from_teacher = has_verdict & graded
    return torch.where(from_teacher, verdict, verifier_rewards), from_teacher


def teacher_verifier_counts(
    verifier_correct: Sequence[bool], teacher_verdict: Sequence[bool | None], from_teacher: Sequence[bool]
) -> dict[str, float]:
    """The teacher's verdicts against the verifier's, over the rollouts whose outcome the teacher decided.

    Counted per **used** verdict (``from_teacher``, :func:`teacher_outcome_rewards`): a rollout the teacher was not
    asked about, gave no usable answer on, or that is ungraded is not counted. A simulated teacher's own flip counts
    (:class:`~hf_meds_cliff.cliff.teachers.NoisyTeacher`) are per judge call and against its wrapped teacher, so they
    are not these disagreements.

    Returns:
        ``judged``, ``right_wrong`` (teacher right, verifier wrong), ``wrong_right`` (teacher wrong, verifier right)
        and ``agreement`` (``(judged - right_wrong - wrong_right) / judged``; NaN when nothing was judged).

    >>> teacher_verifier_counts([True, True, False, False], [True, False, True, None], [True, True, True, False])
    {'judged': 3.0, 'right_wrong': 1.0, 'wrong_right': 1.0, 'agreement': 0.3333333333333333}
    """
    if not len(verifier_correct) == len(teacher_verdict) == len(from_teacher):
        raise ValueError(
            f"Got {len(verifier_correct)} verifier outcomes, {len(teacher_verdict)} teacher verdicts and "
            f"{len(from_teacher)} decided flags; give one of each per rollout."
        )
    used = [(bool(v), bool(t)) for v, t, d in zip(verifier_correct, teacher_verdict, from_teacher) if d]
    right_wrong = sum(1 for verifier, teacher in used if teacher and not verifier)
    wrong_right = sum(1 for verifier, teacher in used if verifier and not teacher)
    judged = len(used)
    return {
        "judged": float(judged),
        "right_wrong": float(right_wrong),
        "wrong_right": float(wrong_right),
        "agreement": (judged - right_wrong - wrong_right) / judged if judged else math.nan,
    }


def group_normalised_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, scale_rewards: str = "group", epsilon: float = 1e-4
) -> torch.Tensor:
    """GRPO's advantages of a batch of groups: ``(r − mean_g) / (std_g + ε)``, as TRL's ``sum_then_normalize``.

    NaN rewards (ungraded rows) are left out of their group's mean and standard deviation and get advantage 0. The
    standard deviation is Bessel-corrected (TRL's ``nanstd``); a group with one graded row has std 0.

    Args:
        rewards: ``(B,)`` float, one (combined) reward per rollout.
        group_ids: ``(B,)`` integer, rows of one prompt share a label.
        scale_rewards: ``"group"`` (divide by the group's std), ``"batch"`` (by the std of the whole batch) or
            ``"none"`` (no division), as ``GRPOConfig.scale_rewards``.
        epsilon: added to the std before dividing (TRL: 1e-4).

    Returns:
        ``(B,)`` advantages, dtype of ``rewards``.

    Example: outcomes [0, 1, 0, 1] in one group: mean 0.5, Bessel std sqrt(1/3), advantages ±0.5 / (0.5774 + 1e-4):

    >>> [round(a, 4) for a in group_normalised_advantages(torch.tensor([0.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 0])).tolist()]
    [-0.8659, 0.8659, -0.8659, 0.8659]
    """
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards={scale_rewards!r} is unknown; use 'group', 'batch' or 'none'.")
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1 or not torch.is_floating_point(rewards):
        raise ValueError("`rewards` must be a (B,) floating-point tensor.")
    _check_1d("group_ids", group_ids, rewards.shape[0])
    if rewards.numel() == 0:
        return rewards.clone()
    valid = ~torch.isnan(rewards)
    values = torch.where(valid, rewards, torch.zeros_like(rewards))
    weight = valid.to(rewards.dtype)
    _, inverse = torch.unique(group_ids.to(rewards.device), return_inverse=True)
    num_groups = int(inverse.max().item()) + 1

    def mean_and_std(index: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = torch.zeros(count, dtype=rewards.dtype, device=rewards.device).index_add_(0, index, weight)
        total = torch.zeros_like(n).index_add_(0, index, values)
        mean = total / n.clamp(min=1)
        squares = torch.zeros_like(n).index_add_(0, index, weight * (values - mean[index]) ** 2)
        std = torch.where(n > 1, (squares / (n - 1).clamp(min=1)).sqrt(), torch.zeros_like(n))
        return mean[index], std[index]

    mean, group_std = mean_and_std(inverse, num_groups)
    advantages = values - mean
    if scale_rewards == "group":
        advantages = advantages / (group_std + epsilon)
    elif scale_rewards == "batch":
        _, batch_std = mean_and_std(torch.zeros_like(inverse), 1)
        advantages = advantages / (batch_std + epsilon)
    return torch.where(valid, advantages, torch.zeros_like(advantages))


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
