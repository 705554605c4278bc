"""Checkpoints a job resumes from after a restart, a preemption or a resize.

    from mlyard.sdk import checkpoint

    found = checkpoint.load_latest()
    if found is not None:
        state, step = found      # restore from `state`, continue after `step`
    ...
    checkpoint.save({"model": model.state_dict(), "epoch": epoch}, step=epoch)

Files go to `MLYARD_CHECKPOINT_DIR`, the job's directory that outlives its attempts
(`./checkpoints` outside mlyard), as `checkpoint-<step>.pt` written by `torch.save`, or
`checkpoint-<step>.pkl` written by `pickle` where torch is not installed. The suffix is the
format marker: it tells `load_latest` how to read a file back, and a `.pt` file stays an
ordinary `torch.save` file that `torch.load` opens.

A checkpoint is written under a temporary name and renamed only once it is complete and on
disk, so a replica killed while saving leaves a temporary file that is never read (and that
later saves remove), never a truncated checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import secrets
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

DIRECTORY_VARIABLE = "MLYARD_CHECKPOINT_DIR"
RESTART_COUNT_VARIABLE = "MLYARD_RESTART_COUNT"
RANK_VARIABLE = "RANK"
DEFAULT_DIRECTORY = "checkpoints"
DEFAULT_KEEP = 3
TORCH_SUFFIX = ".pt"
PICKLE_SUFFIX = ".pkl"
# With `all_ranks`, several processes may save into one directory at once: a temporary file
# is only taken for the remains of a killed save once nobody has written to it for this long
# (syncing a large checkpoint to slow storage does not touch its modification time).
STALE_TEMPORARY_SECONDS = 300.0

_CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)(\.pt|\.pkl)")
_TEMPORARY_NAME = re.compile(r"\.checkpoint-\d+(\.pt|\.pkl)\.[0-9a-f]+\.tmp")


class CheckpointError(RuntimeError):
    """Checkpoints exist but none of them could be read."""


def save(
    state: Any,
    step: int,
    *,
    keep: int = DEFAULT_KEEP,
    directory: str | os.PathLike[str] | None = None,
    all_ranks: bool = False,
) -> Path | None:
    """Writes `state` as the checkpoint of `step` and removes all but the newest `keep`
    checkpoints; returns its path.

    Only rank 0 (the `RANK` variable, 0 when unset) writes, since data-parallel ranks hold the
    same state; the others return None. With `all_ranks`, every rank writes: give each rank a
    `directory` of its own when their states differ, or they overwrite one another.
    """
    step = _non_negative_integer("step", step)
    keep = _non_negative_integer("keep", keep)
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    if not all_ranks and _rank() != 0:
        return None
    target = _directory(directory)
    target.mkdir(parents=True, exist_ok=True)
    suffix, serialise = _serialiser()
    path = target / f"checkpoint-{step:012d}{suffix}"
    _write_atomically(path, lambda handle: serialise(state, handle))
    _remove_older(target, keep, just_written=path)
    _remove_stale_temporaries(target)
    return path


def load_latest(
    *, directory: str | os.PathLike[str] | None = None, map_location: Any = None
) -> tuple[Any, int] | None:
    """The state and step of the newest readable checkpoint, or None when there is none.

    A newest file that is damaged (truncated) is skipped with a warning on stderr, so the job
    resumes from the one before. `map_location` is passed to `torch.load`. Raises
    CheckpointError when checkpoints exist but none can be read (a job must not silently start
    over when, say, torch is missing or the state's classes moved).
    """
    failure: Exception | None = None
    for step, path in _checkpoints(_directory(directory)):
        if not _looks_complete(path):
            _warn(f"{path} is incomplete (truncated?); trying an older checkpoint")
            continue
        try:
            return _load(path, map_location), step
        except Exception as error:  # noqa: BLE001 - whatever unpickling raises, the file is unreadable
            _warn(f"{path} could not be read ({type(error).__name__}: {error}); trying an older checkpoint")
            failure = failure or error
    if failure is not None:
        raise CheckpointError(f"no checkpoint in {_directory(directory)} could be read") from failure
    return None


def latest_step(*, directory: str | os.PathLike[str] | None = None) -> int | None:
    """The step of the newest checkpoint that is complete on disk, without reading it."""
    for step, path in _checkpoints(_directory(directory)):
        if _looks_complete(path):
            return step
    return None


def restart_count() -> int:
    """How many times the job was restarted before this attempt (0 on the first)."""
    value = os.environ.get(RESTART_COUNT_VARIABLE) or "0"
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{RESTART_COUNT_VARIABLE} must be an integer, not {value!r}") from None


# --------------------------------------------------------------------------- internals


def _non_negative_integer(name: str, value: Any) -> int:
    # bool is an int, but save(state, True) is a mistake, not step 1. ValueError for every bad
    # argument, so one `except ValueError` covers them.
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not {value!r}")  # noqa: TRY004
    try:
        number = value.__index__()  # numpy and 0-d torch integers count as integers
    except (AttributeError, TypeError, RuntimeError):
        raise ValueError(f"{name} must be an integer, not {value!r}") from None
    if number < 0:
        raise ValueError(f"{name} must not be negative, not {number}")
    return number


def _rank() -> int:
    value = os.environ.get(RANK_VARIABLE) or "0"
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{RANK_VARIABLE} must be an integer, not {value!r}") from None


def _directory(directory: str | os.PathLike[str] | None) -> Path:
    if directory is not None:
        return Path(directory)
    return Path(os.environ.get(DIRECTORY_VARIABLE) or DEFAULT_DIRECTORY)


def _serialiser() -> tuple[str, Callable[[Any, IO[bytes]], None]]:
    try:
        import torch
    except ImportError:
        return PICKLE_SUFFIX, lambda state, handle: pickle.dump(state, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return TORCH_SUFFIX, torch.save


def _load(path: Path, map_location: Any) -> Any:
    if path.suffix == PICKLE_SUFFIX:
        with open(path, "rb") as handle:
            return pickle.load(handle)  # safe: in the job, on its own save()s; never the server
    import torch

    # The files are the job's own, in its private checkpoint directory, and states hold what
    # torch's restricted unpickler refuses (numpy arrays, RNG states, the user's classes).
    return torch.load(path, map_location=map_location, weights_only=False)


def _write_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    # os.open rather than mkstemp: the checkpoint gets the job's umask, not mode 0600.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Makes the rename itself durable: without it a power loss may leave the old name."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        # Some file systems cannot sync a directory; the rename is atomic all the same.
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(descriptor)


def _checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file, newest first; the later write wins a tie."""
    found = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _CHECKPOINT_NAME.fullmatch(entry.name)
        if match is None:
            continue
        try:
            modified = entry.stat().st_mtime_ns
        except FileNotFoundError:  # pruned by another writer meanwhile
            continue
        found.append((int(match.group(1)), modified, Path(entry.path)))
    found.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [(step, path) for step, _, path in found]


def _looks_complete(path: Path) -> bool:
    """A cheap test that catches a truncated file without deserialising it."""
    try:
        if path.suffix == TORCH_SUFFIX:
            # torch.save writes a zip archive, whose directory is at the very end.
            return zipfile.is_zipfile(path)
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == pickle.STOP
    except OSError:
        return False


def _remove_older(directory: Path, keep: int, *, just_written: Path) -> None:
    # The file just written stays even when older runs left higher steps behind.
    others = [path for _, path in _checkpoints(directory) if path != just_written]
    for path in others[keep - 1:]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _remove_stale_temporaries(directory: Path) -> None:
    now = time.time()
    for entry in os.scandir(directory):
        if not _TEMPORARY_NAME.fullmatch(entry.name):
            continue
        with contextlib.suppress(FileNotFoundError):
            if now - entry.stat().st_mtime > STALE_TEMPORARY_SECONDS:
                os.unlink(entry.path)


def _warn(message: str) -> None:
    print(f"mlyard checkpoint: {message}", file=sys.stderr, flush=True)
