"""A character-level tokenizer for the toy world, built locally with the ``tokenizers`` library.

Every printable ASCII character (plus newline and tab) is one token, and a few whole words used by the
chat template and the toy solutions are single tokens. Decoding concatenates token strings (a ``Fuse``
decoder), so ``decode(encode(text)) == text`` for any text over that alphabet: TRL decodes completions with
``batch_decode(..., skip_special_tokens=True)`` and the rewards and the first-mistake checker read exactly
what the model wrote. Characters outside the alphabet become ``<|unk|>`` (a special token, dropped when
decoding with ``skip_special_tokens=True``).

The chat template is Qwen-like (``<|im_start|>role\\n...<|im_end|>\\n``) with ``add_generation_prompt``;
``<|im_end|>`` is the eos token and ``<|endoftext|>`` the pad token.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path

TOKENIZER_VERSION = 1
"""Bumped whenever the vocabulary changes (part of the warm-up cache key)."""

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
IM_START_TOKEN = "<|im_start|>"
UNK_TOKEN = "<|unk|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START_TOKEN, EOS_TOKEN, UNK_TOKEN)

WORD_TOKENS = ("Compute ", " The answer is ", "\\boxed{", "user", "assistant", "system")
"""Multi-character tokens (matched greedily before the per-character split)."""

CHARACTERS = tuple(dict.fromkeys(string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")))

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_toy_tokenizer(
    save_directory: str | Path | None = None, *, word_tokens: Sequence[str] = WORD_TOKENS
):
    """Build the toy tokenizer as a ``PreTrainedTokenizerFast`` (left padding, pad and eos set).

    Args:
        save_directory: when given, the tokenizer is also saved there and can be reloaded with
            ``AutoTokenizer.from_pretrained(save_directory)``; set ``padding_side = "left"`` after
            loading, since the saved file does not keep it reliably.
        word_tokens: the multi-character tokens (default :data:`WORD_TOKENS`; the code world passes its own
            list, see :data:`hf_meds_cliff.toy.code_world.CODE_WORD_TOKENS`). None may contain a line break, so a
            token never straddles two lines (or two code units).

    >>> tok = build_toy_tokenizer()
    >>> text = "7 + 5 = 12. The answer is \\\\boxed{12}."
    >>> tok.decode(tok(text)["input_ids"]) == text
    True
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    word_tokens = tuple(dict.fromkeys(word_tokens))
    bad = [t for t in word_tokens if len(t) < 2 or "\n" in t or t in SPECIAL_TOKENS]
    if bad:
        raise ValueError(
            f"word_tokens {bad!r} are not multi-character tokens without a line break (or clash with a special "
            "token); drop them."
        )
    vocabulary = {token: index for index, token in enumerate(SPECIAL_TOKENS + word_tokens + CHARACTERS)}
    backend = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    backend.add_tokens(list(word_tokens))

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        additional_special_tokens=[IM_START_TOKEN],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=256,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    if save_directory is not None:
        tokenizer.save_pretrained(str(save_directory))
    return tokenizer
