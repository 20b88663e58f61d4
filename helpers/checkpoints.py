"""Saving and loading checkpoints safely: atomic writes, and loads that say where tensors go and refuse code."""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import secrets
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

import torch

MapLocation: TypeAlias = (
    str | torch.device | dict[str, str] | Callable[[torch.UntypedStorage, str], torch.UntypedStorage | None] | None
)
"""What ``torch.load`` accepts as ``map_location``: a device, a {saved: wanted} dict, or a function (storage, tag)."""


class CorruptCheckpointError(RuntimeError):
    """The file is not a complete PyTorch checkpoint (cut short, damaged, or some other kind of file)."""


def _folder_for(path: Path) -> None:
    """Create the folder ``path`` goes in; a file in the way or a folder at ``path`` gets a message with the fix."""
    blocker = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise NotADirectoryError(
            f"Cannot save the checkpoint {path}: {blocker} is a file, not a folder. "
            "Fix: choose a path in a folder, or rename that file."
        )
    if path.is_dir():
        raise IsADirectoryError(
            f"Cannot save the checkpoint {path}: that is a folder. Fix: give a file name inside it, "
            f"such as {path / 'model.pt'}."
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        raise PermissionError(
            f"Cannot save the checkpoint {path}: no permission to create the folder {path.parent}. "
            "Fix: save it under a folder you can write to."
        ) from None


@contextlib.contextmanager
def _noticing_sigint() -> Iterator[list[bool]]:
    """Record whether SIGINT arrived inside the block (its usual handler still runs): Ctrl-C inside torch.save's C++
    writer comes out as a RuntimeError, and the record lets the caller raise KeyboardInterrupt instead."""
    seen = [False]
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if not callable(previous):  # another thread (signals go to the main one), or SIGINT ignored or left to the OS
        yield seen
        return

    def handler(signum, frame):
        seen[0] = True
        previous(signum, frame)

    signal.signal(signal.SIGINT, handler)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def save_checkpoint(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Save ``obj`` with torch.save atomically: an interrupted save leaves the previous file at ``path`` intact."""
    path = Path(path).expanduser()
    _folder_for(path)
    # Same folder, so os.replace is an atomic rename; mode 0o666 lets the umask apply (mkstemp's 0o600 would be kept).
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp_name = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp_name, flags, 0o666)
            break
        except FileExistsError:  # a leftover from another save with the same random name: draw again
            continue
        except PermissionError:
            raise PermissionError(
                f"Cannot save the checkpoint {path}: no permission to write in {path.parent}. "
                "Fix: save it under a folder you can write to."
            ) from None
    with _noticing_sigint() as interrupted:
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(obj, f)
                f.flush()
                os.fsync(f.fileno())  # the bytes must be on disk before the name points at them
            os.replace(tmp_name, path)
        except BaseException as exc:  # KeyboardInterrupt included: never leave a half-written temporary file behind
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            if interrupted[0] and not isinstance(exc, KeyboardInterrupt):
                raise KeyboardInterrupt(f"save of {path} interrupted; the previous file is unchanged") from None
            raise
    if os.name == "posix":  # make the rename itself durable (Windows cannot open a folder as a file)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return path


def _temporary_name(path: Path) -> re.Pattern[str]:
    """The names ``save_checkpoint`` gives its temporary files for ``path``: ``.NAME.<8 hex digits>.tmp``."""
    return re.compile(rf"\.{re.escape(path.name)}\.[0-9a-f]{{8}}\.tmp")


def remove_leftovers(path: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files that saves of ``path`` killed mid-write (SIGKILL: no cleanup) left beside it, and
    return them. Only ``save_checkpoint``'s own names for this checkpoint are touched, never any other file; call it
    when no save of ``path`` is running, such as at the start of a job."""
    path = Path(path).expanduser()
    if not path.parent.is_dir():
        return []
    pattern = _temporary_name(path)
    removed = []
    for candidate in sorted(path.parent.iterdir()):
        if pattern.fullmatch(candidate.name) and candidate.is_file() and not candidate.is_symlink():
            with contextlib.suppress(FileNotFoundError):  # another process removed it first
                candidate.unlink()
                removed.append(candidate)
    return removed


def folder_problem(folder: str | os.PathLike[str]) -> str | None:
    """Create ``folder`` (and its parents) for a script's output and check that a file can be written in it; what is
    wrong, with the fix, or None when it is ready."""
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        return f"{folder} is a file, not a folder. Fix: give a folder's path, or rename that file."
    blocker = next((p for p in reversed(folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        return f"{folder} cannot be a folder: {blocker} is a file. Fix: give a path outside it, or rename that file."
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        return f"{folder} cannot be written to ({reason}). Fix: give a folder you can write to."
    return None


def _describe(exc: BaseException) -> str:
    """The first sentence of what went wrong, as PyTorch or Python put it."""
    if isinstance(exc, EOFError):
        return "the file ends too early"
    text = " ".join(str(exc).split())
    if "Unsupported operand" in text:  # weights_only's unpickler met bytes that are no pickle it knows
        text = text[text.index("Unsupported operand") :]
    first = text.split(". ")[0].rstrip(".")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _not_the_files_fault(exc: BaseException) -> bool:
    """Whether torch.load failed over what a complete file holds (a weights_only refusal) or where its tensors go."""
    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError):
        return "Weights only load failed" in text and "operand" not in text
    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError)
        and any(word in text for word in ("CUDA", "MPS", "XPU", "device", "data location", "out of memory"))
    )


def load_checkpoint(path: str | os.PathLike[str], map_location: MapLocation) -> Any:
    """``torch.load(path, map_location=..., weights_only=True)``, with errors that name the file and the fix. An
    incomplete file raises CorruptCheckpointError (a RuntimeError); one holding more than tensors and plain containers
    is refused by ``weights_only`` with PyTorch's own UnpicklingError."""
    path = Path(path).expanduser()
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.pt"))[:3]
        hint = f" It holds {', '.join(inside)}." if inside else ""
        raise IsADirectoryError(
            f"{path} is a folder, not a checkpoint file.{hint} Fix: pass the path of the file itself."
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"No checkpoint at {path}. Run the cell that saves it first (save_checkpoint), or check the path: "
            f"relative paths start from the working directory, {Path.cwd().name!r}."
        )
    for name in list(map_location.values()) if isinstance(map_location, dict) else [map_location]:
        if isinstance(name, str):
            try:
                torch.device(name)
            except RuntimeError:
                raise ValueError(
                    f"map_location={map_location!r}: {name!r} is not a device name. "
                    "Use a device such as 'cpu', 'cuda', 'cuda:0' or 'mps', or the device you picked "
                    "(map_location=device)."
                ) from None
    mapper_failed = [False]
    if callable(map_location):
        user_map = map_location

        def map_location(storage, tag):  # an error in the caller's own function is theirs, not the file's
            try:
                return user_map(storage, tag)
            except BaseException:
                mapper_failed[0] = True
                raise

    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        if mapper_failed[0] or _not_the_files_fault(exc):
            raise
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
            raise PermissionError(f"Cannot read the checkpoint {path}: permission denied.") from None
        size = path.stat().st_size
        raise CorruptCheckpointError(
            f"{path} is not a complete checkpoint ({_describe(exc) if size else 'the file is empty'}; "
            f"{size:,} bytes). It was cut short or damaged (an interrupted copy or download, or a save with plain "
            "torch.save that failed), or it is not a file torch.save wrote. Fix: delete it and run the cell that "
            "saves it again (save_checkpoint), or copy it again from where it came."
        ) from None
