"""Crash-safe files, checkpoint lookup and output-folder checks shared by the trainers, scripts and evaluation.

A file written with :func:`write_atomically` is either absent or complete under its final name: the bytes go to
a temporary file in the same folder (``.<name>.<random>.tmp``), are flushed and fsynced, and the temporary file is
renamed over the final name (``os.replace`` is atomic on POSIX); the folder is fsynced so the rename survives a
power cut. A process killed mid-write (SIGKILL, OOM killer) leaves only the temporary file behind, which
:func:`remove_stale_temporaries` deletes on the next save into that folder.

A checkpoint counts as complete when TRL/transformers wrote its ``trainer_state.json``: ``Trainer._save_checkpoint``
writes that file after the model, optimizer, scheduler and RNG state, and only then rotates older checkpoints.
The MEDS and Cliff trainers write their method state before all of these (see their ``_save_checkpoint``).

:class:`CheckpointSafetyMixin` gives every trainer of the package (MEDS, Cliff, and the GRPO/DAPO trainer of the
scripts) the scripts' resume rule when ``train(resume_from_checkpoint=True)`` is called directly, and keeps secrets
out of the ``training_args.bin`` files that transformers writes next to every saved model.
"""

from __future__ import annotations

import copyreg
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .redaction import is_secret_option

logger = logging.getLogger(__name__)

TRAINER_STATE_NAME = "trainer_state.json"
"""Written last by ``transformers.Trainer._save_checkpoint`` (before rotation): a checkpoint is complete with it."""
_CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
_TEMPORARY_SUFFIX = ".tmp"


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:  # some filesystems (and Windows) do not open folders; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def write_atomically(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call ``write(binary file)`` on a temporary file next to ``path``, fsync it, then rename it to ``path``.

    On any error (or interrupt) the temporary file is removed and the error re-raised; ``path`` keeps its old
    content (or stays absent).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> write_atomically(folder / "a.txt", lambda handle: handle.write(b"hi")).read_text()
    'hi'
    >>> sorted(p.name for p in folder.iterdir())
    ['a.txt']
    """
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=_TEMPORARY_SUFFIX
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; checkpoints are usually shared read-only
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)
    return path


def write_json_atomically(path: str | os.PathLike, value: Any, indent: int | None = None) -> Path:
    """``json.dumps(value)`` written with :func:`write_atomically` (a trailing newline when indented)."""
    text = json.dumps(value, indent=indent) + ("\n" if indent is not None else "")
    return write_atomically(path, lambda handle: handle.write(text.encode("utf-8")))


def remove_stale_temporaries(directory: str | os.PathLike, names: tuple[str, ...]) -> list[Path]:
    """Delete the temporary files :func:`write_atomically` left for ``names`` in ``directory`` (a killed save).

    Returns the removed paths. Only call it when no other process is writing those files.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for candidate in directory.iterdir():
        # the prefix alone: temporary files of versions before the ".tmp" suffix were ".<name>.<random>"
        if candidate.is_file() and any(candidate.name.startswith(f".{name}.") for name in names):
            candidate.unlink(missing_ok=True)
            removed.append(candidate)
    if removed:
        logger.info("Removed %d temporary file(s) of an interrupted save in %s.", len(removed), directory)
    return removed


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_json_file(path: str | os.PathLike, fix: str) -> Any:
    """Parse the JSON file at ``path``; a missing, unreadable or malformed file raises ``ValueError`` naming
    the file, what is wrong and ``fix`` (what the user can do)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise ValueError(f"{path} does not exist. {fix}") from error
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} cannot be read ({error}). {fix}") from error
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        what = "is empty" if not text.strip() else f"is not valid JSON ({error})"
        raise ValueError(f"{path} {what}: an interrupted write or an edited file. {fix}") from error


# ----------------------------------------------------------------------------------------------------------------
# checkpoints
# ----------------------------------------------------------------------------------------------------------------


def files_required_by(manifest: str | os.PathLike) -> list[str]:
    """The file names a method-state manifest lists under ``"requires"`` (relative to its folder), e.g. the shard
    files of ``meds_memory/meds_memory.json``; empty when it lists none or cannot be read (its loader then names
    the problem)."""
    try:
        value = json.loads(Path(manifest).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []
    required = value.get("requires") if isinstance(value, dict) else None
    if not isinstance(required, list):
        return []
    return [name for name in required if isinstance(name, str)]


def missing_checkpoint_files(folder: str | os.PathLike, method_files: Sequence[str] = ()) -> list[str]:
    """Which of TRL's ``trainer_state.json``, ``method_files`` (paths relative to ``folder``: a trainer's method
    state, e.g. ``meds_memory/meds_memory.json``) and the files a JSON method file lists under ``"requires"``
    (:func:`files_required_by`) ``folder`` lacks; empty when it is a complete checkpoint."""
    folder = Path(folder)
    missing = [name for name in (TRAINER_STATE_NAME, *method_files) if not (folder / name).is_file()]
    for name in method_files:
        if name.endswith(".json") and name not in missing:
            parent = Path(name).parent
            listed = [(parent / required).as_posix() for required in files_required_by(folder / name)]
            missing += [required for required in listed if not (folder / required).is_file()]
    return missing


def is_complete_checkpoint(folder: str | os.PathLike, method_files: Sequence[str] = ()) -> bool:
    """Whether ``folder`` holds TRL's ``trainer_state.json`` (written last, see the module docstring) and every one
    of ``method_files`` (the trainer's method state, written before it)."""
    return not missing_checkpoint_files(folder, method_files)


def latest_complete_checkpoint(
    output_dir: str | os.PathLike, method_files: Sequence[str] = ()
) -> Path | None:
    """The ``checkpoint-N`` folder of ``output_dir`` with the highest N that is complete; ``None`` if none is.

    Complete: it has ``trainer_state.json`` and each of ``method_files`` (see :func:`missing_checkpoint_files`).
    Incomplete ones (a run killed while saving, or a checkpoint whose method state was lost since) are skipped with
    a warning naming them and the missing files.
    """
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    numbered = sorted(
        (int(match.group(1)), child)
        for child in output_dir.iterdir()
        if child.is_dir() and (match := _CHECKPOINT_PATTERN.match(child.name))
    )
    for _, folder in reversed(numbered):
        missing = missing_checkpoint_files(folder, method_files)
        if not missing:
            return folder
        if TRAINER_STATE_NAME in missing:
            logger.warning(
                "Skipping %s: it has no %s (the run stopped while saving it).", folder, TRAINER_STATE_NAME
            )
        else:
            logger.warning(
                "Skipping %s: it has no %s (its method state was lost or removed after the save); resuming from "
                "an older complete checkpoint.",
                folder,
                ", ".join(missing),
            )
    return None


_TRUE_WORDS = ("true", "yes", "1", "latest")
_FALSE_WORDS = ("false", "no", "0", "none", "")


def resolve_resume_checkpoint(
    value: str | bool | None, output_dir: str | os.PathLike, method_files: Sequence[str] = ()
) -> str | None:
    """Turn ``--resume_from_checkpoint`` into what ``Trainer.train`` takes: a checkpoint folder or ``None``.

    ``true``/``latest`` (any case) is the newest *complete* ``checkpoint-N`` in ``output_dir`` (with
    ``trainer_state.json`` and each of ``method_files``); ``false`` or unset is a fresh start; anything else is a
    checkpoint folder, which must exist and hold ``trainer_state.json`` (the trainer then checks its method state
    when it loads it, and names the fix).

    >>> resolve_resume_checkpoint("false", "/nonexistent") is None
    True
    """
    if value is None or value is False:
        return None
    if isinstance(value, str) and value.strip().lower() in _FALSE_WORDS:
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() in _TRUE_WORDS):
        checkpoint = latest_complete_checkpoint(output_dir, method_files)
        if checkpoint is None:
            required = ", ".join((TRAINER_STATE_NAME, *method_files))
            raise ValueError(
                f"--resume_from_checkpoint true: no complete checkpoint-N folder (one with {required}) "
                f"in output_dir={str(output_dir)!r}. Pass the folder of a checkpoint with "
                "--resume_from_checkpoint PATH, point --output_dir at the earlier run, or drop the flag to start fresh."
            )
        logger.info("Resuming from the latest complete checkpoint, %s.", checkpoint)
        return str(checkpoint)
    path = Path(os.path.expanduser(str(value)))
    if not path.is_dir():
        raise ValueError(
            f"--resume_from_checkpoint {value!r} is not a folder. Pass a checkpoint-N folder, `true` for the latest "
            f"checkpoint in --output_dir, or `false`."
        )
    if not is_complete_checkpoint(path):
        latest = latest_complete_checkpoint(path.parent)
        hint = f" The latest complete one next to it is {latest}." if latest is not None else ""
        raise ValueError(
            f"--resume_from_checkpoint {str(path)!r} has no {TRAINER_STATE_NAME}: the run stopped while saving "
            f"it, or it is not a checkpoint folder.{hint} Resume from a complete checkpoint (or `true`)."
        )
    return str(path)


# ----------------------------------------------------------------------------------------------------------------
# output folder
# ----------------------------------------------------------------------------------------------------------------


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the filesystem holding ``path`` (what an unprivileged user may write)."""
    return shutil.disk_usage(path).free


def check_output_dir(output_dir: str | os.PathLike, min_free_bytes: int) -> Path:
    """Create ``output_dir`` if needed and fail early unless a file can be written there and at least
    ``min_free_bytes`` are free, so a long run does not discover it at its final save.

    Raises ``ValueError`` naming the folder, what is wrong and the fix.
    """
    output_dir = Path(output_dir).expanduser()
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(dir=output_dir, prefix=".write-probe.", suffix=_TEMPORARY_SUFFIX)
        try:
            os.write(descriptor, b"probe")
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
            Path(probe).unlink(missing_ok=True)
    except OSError as error:
        raise ValueError(
            f"output_dir={str(output_dir)!r} is not writable ({error.strerror or error}); checkpoints and the final "
            "model go there. Pass a writable --output_dir."
        ) from error
    available = free_bytes(output_dir)
    if available < min_free_bytes:
        raise ValueError(
            f"output_dir={str(output_dir)!r} has {available / 2**20:.1f} MiB free, less than the "
            f"{min_free_bytes / 2**20:.0f} MiB required before training (a checkpoint or the final model would be "
            "truncated). Free space, pass another --output_dir, or lower the minimum with "
            "--min_free_disk_mb (0 disables the check)."
        )
    return output_dir


def checkpoint_folder(trainer, trial=None) -> Path:
    """The folder ``Trainer._save_checkpoint`` is about to write for the current step (known before it runs)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return Path(trainer._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}"


def save_checkpoint_json(folder: str | os.PathLike, name: str, value: Any) -> Path:
    """Write ``value`` as ``folder/name`` for a checkpoint being saved: the folder is created, temporary files of an
    earlier killed save of ``name`` are removed, and the file is written atomically (:func:`write_json_atomically`).
    Trainers call it in ``_save_checkpoint`` before ``super()``, so the file exists before ``trainer_state.json``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder, (name,))
    return write_json_atomically(folder / name, value)


def load_optional_checkpoint_json(path: str | os.PathLike, what: str, consequence: str) -> Any | None:
    """The JSON value at ``path``, or ``None`` with one warning when it is missing or unusable (a checkpoint written
    before that file existed, or a damaged one). ``what`` names the state, ``consequence`` what a resume without it
    does; both go into the warning."""
    try:
        return read_json_file(path, fix="")
    except ValueError as error:
        logger.warning("%s not restored: %s %s", what, str(error).strip(), consequence)
        return None


# ----------------------------------------------------------------------------------------------------------------
# the trainers' resume and save hooks
# ----------------------------------------------------------------------------------------------------------------

_SECRET_FREE_PICKLING: dict[type, type] = {}


def _secret_free_pickling_class(cls: type) -> type:
    """``cls`` with pickling that writes an instance as a ``cls`` whose secret fields
    (:func:`~hf_meds_cliff.redaction.is_secret_option`) are ``None``."""
    if cls not in _SECRET_FREE_PICKLING:

        def __reduce_ex__(self, protocol):
            state = {name: None if is_secret_option(name) else value for name, value in vars(self).items()}
            # What pickle writes for a plain object under protocols 0/1: load = object.__new__(cls), then
            # __dict__.update(state). (``copyreg.__newobj__`` would insist that cls is the pickled object's class.)
            return copyreg._reconstructor, (cls, object, None), state

        _SECRET_FREE_PICKLING[cls] = type(
            cls.__name__,
            (cls,),
            {"__reduce_ex__": __reduce_ex__, "__module__": cls.__module__, "__qualname__": cls.__qualname__},
        )
    return _SECRET_FREE_PICKLING[cls]


@contextmanager
def pickled_without_secrets(args: Any) -> Iterator[Any]:
    """Within the block, pickling ``args`` (``torch.save(args, ...)``) writes it with every secret field set to
    ``None``; reading its attributes still gives the real values (``args.hub_token`` for an upload).

    ``args`` keeps its identity and values; only its class is, for the block, a subclass that overrides
    ``__reduce_ex__`` (the pickle then names the original class, so loading needs nothing of this module). The
    class is restored on exit, even on error.

    Copies made inside the block (``copy.copy``, ``copy.deepcopy``, which also use ``__reduce_ex__``) are
    secret-free too:

    >>> import copy
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Settings:
    ...     hub_token: str | None = None
    ...     learning_rate: float = 1e-6
    >>> settings = Settings(hub_token="hf_secret")
    >>> with pickled_without_secrets(settings):
    ...     written = copy.copy(settings)  # what pickle would write
    ...     in_use = settings.hub_token
    >>> written, in_use, settings, type(settings).__name__
    (Settings(hub_token=None, learning_rate=1e-06), 'hf_secret', Settings(hub_token='hf_secret', learning_rate=1e-06), 'Settings')
    """
    original = type(args)
    already_inside = original in _SECRET_FREE_PICKLING.values()  # e.g. a save nested in a push
    if already_inside or not any(is_secret_option(name) and value for name, value in vars(args).items()):
        yield args
        return
    args.__class__ = _secret_free_pickling_class(original)
    try:
        yield args
    finally:
        args.__class__ = original


class CheckpointSafetyMixin:
    r"""Resume and saved-file guarantees of the package's trainers, for TRL users who call ``train()`` themselves.

    Put it before ``GRPOTrainer`` in the bases. Overrides (each calls ``super()``):

    * ``train``: ``resume_from_checkpoint`` goes through :func:`resolve_resume_checkpoint`, the function the
      scripts use: ``True`` (or ``"true"``/``"latest"``) is the newest *complete* ``checkpoint-N`` of
      ``args.output_dir`` (one with ``trainer_state.json``, which the trainers write after their method state, and
      with every file of :meth:`_resume_method_files`), and each newer, incomplete one (a run killed while saving,
      or method state lost after the save) is skipped with a warning naming it and what it lacks; transformers' own
      lookup takes the highest number whatever it holds. A folder must be a complete checkpoint; ``False``/``None``
      start fresh. Raises ``ValueError`` naming the folder and the fix when there is nothing to resume from.
    * ``_get_train_sampler``: TRL's ``RepeatSampler`` becomes a
      :class:`~hf_meds_cliff.sampling.ResumableRepeatSampler`, so that a run resumed in a later epoch trains on the
      prompts the uninterrupted run would have (TRL's restarts at the first epoch's order); without a resume the
      order is TRL's, draw for draw.
    * ``_save`` and ``_push_from_checkpoint`` (the two places transformers ``torch.save``\ s ``self.args`` as
      ``training_args.bin``, next to every checkpoint's and the final model, and uploaded by ``push_to_hub``): the
      file is written without ``hub_token`` and every other field whose name marks a secret
      (:func:`~hf_meds_cliff.redaction.is_secret_option`), as ``None``; in memory the values stay, so the upload
      still authenticates with ``hub_token``. See :func:`pickled_without_secrets`.
    """

    def _get_train_sampler(self, *args: Any, **kwargs: Any):
        # TRL's RepeatSampler restarts its generator in a new trainer, so a resume in a later epoch would draw the
        # first epoch's order; ResumableRepeatSampler catches up in set_epoch (see hf_meds_cliff.sampling). A
        # sampler of the user's own (an overriding subclass of TRL's trainer) is kept as it is.
        from trl.trainer.utils import RepeatSampler

        from .sampling import ResumableRepeatSampler

        sampler = super()._get_train_sampler(*args, **kwargs)
        if type(sampler) is RepeatSampler:
            return ResumableRepeatSampler.from_repeat_sampler(sampler)
        return sampler

    def _resume_method_files(self) -> tuple[str, ...]:
        """Files of a checkpoint (relative to its folder) this trainer cannot resume without, besides TRL's own:
        its method state. ``train(resume_from_checkpoint=True)`` skips a checkpoint that lacks one. None here."""
        return ()

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any):
        checkpoint = resolve_resume_checkpoint(
            resume_from_checkpoint, self.args.output_dir, self._resume_method_files()
        )
        return super().train(checkpoint, *args, **kwargs)

    def _save(self, *args: Any, **kwargs: Any) -> None:
        with pickled_without_secrets(self.args):
            super()._save(*args, **kwargs)

    def _push_from_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        with pickled_without_secrets(self.args):
            super()._push_from_checkpoint(*args, **kwargs)
