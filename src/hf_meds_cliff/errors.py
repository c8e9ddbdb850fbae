"""How the ``hf-meds-cliff`` commands and scripts report an error: one line on stderr,
``hf-meds-cliff <command>: error: <message>``, as ``trl`` and ``accelerate`` print them; exit status 2 for a usage
error (with the usage line), 1 for a failure, 130 for Ctrl-C. ``HF_MEDS_CLIFF_DEBUG=1`` (or ``hf-meds-cliff --debug``)
adds the traceback. Below both :mod:`hf_meds_cliff.cli` and :mod:`hf_meds_cliff.script_utils`, which use it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

PROG = "hf-meds-cliff"
DEBUG_ENV = "HF_MEDS_CLIFF_DEBUG"
"""Set to 1 (or pass ``hf-meds-cliff --debug``) to see the Python traceback of an error."""


class UsageError(ValueError):
    """A command line that cannot work as written (unknown flag, impossible option value): exit status 2."""


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def one_line(error: BaseException) -> str:
    """``error``'s message on one line (library messages can span several)."""
    message = " ".join(str(error).split())
    if isinstance(error, KeyError) and message.startswith("'"):  # KeyError's str is the repr of its key
        message = f"missing key {message}"
    return message or type(error).__name__


_EXPECTED_ERRORS = (ValueError, TypeError, LookupError, OSError, RuntimeError, ImportError)
"""Errors whose message is written for the user (bad input, missing file, unreachable Hub, ...)."""


def run_reporting_errors(
    command: str,
    body: Callable[[], int | None],
    usage: Callable[[], str] | None = None,
    report: Callable[[Exception], bool] = lambda error: True,
) -> int:
    """Run ``body`` and turn an error into one line on stderr and an exit status (2 usage, 1 failure, 130 Ctrl-C).

    With :data:`DEBUG_ENV` set the traceback is printed too. ``SystemExit`` (argparse's own usage errors,
    already printed) passes through, and so does an error for which ``report(error)`` is false (the training
    scripts report set-up errors this way and keep the traceback of a failure during training).
    """
    prefix = f"{PROG} {command}".strip()
    try:
        return body() or 0
    except KeyboardInterrupt:
        if debug_enabled():
            traceback.print_exc()
        print(f"{prefix}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # the command's last line of defence: report, do not crash
        if not report(error):
            raise
        if debug_enabled():
            traceback.print_exc()
        if isinstance(error, UsageError):
            if usage is not None:
                print(usage().rstrip(), file=sys.stderr)
            print(f"{prefix}: error: {one_line(error)}", file=sys.stderr)
            return 2
        message = one_line(error)
        if not isinstance(error, _EXPECTED_ERRORS):
            message = f"{type(error).__name__}: {message} (set {DEBUG_ENV}=1 for the traceback)"
        print(f"{prefix}: error: {message}", file=sys.stderr)
        return 1


def parse_dataclass_args(parser: Any, argv: Sequence[str] | None = None) -> Any:
    """The one dataclass of an ``HfArgumentParser`` from ``argv`` (default ``sys.argv[1:]``). An unknown flag is an
    argparse usage error (usage line, ``error: unrecognized arguments``, exit status 2), not a traceback."""
    parsed, unknown = parser.parse_args_into_dataclasses(
        args=None if argv is None else list(argv), return_remaining_strings=True
    )
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return parsed


def run_dataclass_command(
    command: str,
    parser: Any,
    main: Callable[[Any], Any],
    argv: Sequence[str] | None = None,
    before_main: Callable[[], None] | None = None,
) -> int:
    """Parse ``argv`` with ``parser`` (:func:`parse_dataclass_args`) and run ``main(args)``, reporting errors as
    :func:`run_reporting_errors` does; a ``ValueError`` of the arguments' ``__post_init__`` (an impossible
    combination of options) is a usage error. ``before_main`` runs between the two (e.g. logging set-up)."""

    def body() -> int:
        try:
            args = parse_dataclass_args(parser, argv)
        except ValueError as error:
            raise UsageError(str(error)) from error
        if before_main is not None:
            before_main()
        main(args)
        return 0

    return run_reporting_errors(command, body, usage=parser.format_usage)
