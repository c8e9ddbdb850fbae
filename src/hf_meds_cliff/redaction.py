"""Keep secrets given on the command line (``--hub_token hf_...``, API keys, passwords) out of model cards, logs and
the ``training_args.bin`` the trainers save (:func:`hf_meds_cliff.checkpointing.pickled_without_secrets`).

An option is secret when its name contains ``secret``, ``password``, ``passwd``, ``credential`` or ``apikey``, or
ends in ``token`` or ``key`` (``--hub_token``, ``--api_key``, ``--wandb-key``), except the names in
:data:`NOT_SECRET` and names ending in ``_env`` (they hold the *name* of an environment variable, such as
``--cliff_teacher_api_key_env OPENAI_API_KEY``). Independently of names, values shaped like well-known tokens
(Hugging Face ``hf_...``, OpenAI ``sk-...``, GitHub ``ghp_...``, W&B keys after ``WANDB_API_KEY=``) are redacted
wherever they appear.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence

REDACTED = "<redacted>"
NOT_SECRET = frozenset(
    {"pad_token", "eos_token", "bos_token", "unk_token", "meds_max_rows_per_key", "meds_answer_token"}
)
"""Option names that match the secret patterns but hold no secret."""
_ANYWHERE = ("secret", "password", "passwd", "credential", "apikey")
_AS_LAST_WORD = ("token", "key")
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"
)


def is_secret_option(name: str) -> bool:
    """Whether a command-line option or config field called ``name`` holds a secret.

    >>> [is_secret_option(n) for n in ("--hub_token", "api-key", "db_password", "max_tokens", "pad_token")]
    [True, True, True, False, False]
    >>> is_secret_option("--cliff_teacher_api_key_env")
    False
    """
    name = name.lstrip("-").lower().replace("-", "_")
    if name in NOT_SECRET or name.endswith("_env"):
        return False
    words = [word for word in re.split(r"[_.]+", name) if word]
    return any(part in name for part in _ANYWHERE) or (bool(words) and words[-1] in _AS_LAST_WORD)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every value in ``secrets`` and every token-shaped string replaced by ``<redacted>``.

    >>> redact_text("push with hf_" + "a" * 30)
    'push with <redacted>'
    """
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _TOKEN_SHAPES.sub(REDACTED, text)


def secret_values(argv: Sequence[str]) -> list[str]:
    """The values given to secret options in ``argv`` (``--name value`` and ``--name=value`` forms)."""
    values = []
    for index, argument in enumerate(argv):
        if not argument.startswith("-"):
            continue
        name, equals, value = argument.partition("=")
        if not is_secret_option(name):
            continue
        if equals:
            values.append(value)
        elif index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            values.append(argv[index + 1])
    return [value for value in values if value]


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of secret options (and token-shaped strings) replaced by ``<redacted>``.

    >>> redact_argv(["train.py", "--hub_token", "abc", "--api_key=xyz", "--max_tokens", "8"])
    ['train.py', '--hub_token', '<redacted>', '--api_key=<redacted>', '--max_tokens', '8']
    """
    secrets = secret_values(argv)
    redacted = []
    for index, argument in enumerate(argv):
        name, equals, _ = argument.partition("=")
        previous = argv[index - 1] if index else ""
        if argument.startswith("-") and equals and is_secret_option(name):
            redacted.append(f"{name}={REDACTED}")
        elif (
            previous.startswith("-")
            and "=" not in previous
            and is_secret_option(previous)
            and not argument.startswith("--")
        ):
            redacted.append(REDACTED)
        else:
            redacted.append(redact_text(argument, secrets))
    return redacted


class _RedactingRecordFactory:
    """Log record factory that rewrites every record's message with :func:`redact_text` (all loggers, all handlers)."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.secrets: set[str] = set()

    def __call__(self, *args, **kwargs) -> logging.LogRecord:
        record = self.wrapped(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's own business (it reports it when formatting)
            return record
        cleaned = redact_text(message, self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return record


def redact_secrets_in_logs(secrets: Iterable[str] = ()) -> None:
    """Redact ``secrets`` (and token-shaped strings) from every log record created from now on, by any logger.

    Idempotent: later calls add secrets to the same factory.
    """
    factory = logging.getLogRecordFactory()
    if not isinstance(factory, _RedactingRecordFactory):
        factory = _RedactingRecordFactory(factory)
        logging.setLogRecordFactory(factory)
    factory.secrets.update(s for s in secrets if s)
