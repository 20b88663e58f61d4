"""Saving and loading checkpoints safely: atomic writes, and loads that say where tensors go and refuse code."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

import torch

MapLocation: TypeAlias = (
    str | torch.device | dict[str, str] | Callable[[torch.UntypedStorage, str], torch.UntypedStorage | None] | None
)
"""What ``torch.load`` accepts as ``map_location``: a device, a {saved: wanted} dict, or a function (storage, tag)."""


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable; POSIX only (Windows cannot open a folder as a file)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temporary(path: Path) -> tuple[int, Path]:
    """Create a new, empty file next to ``path``, with the permissions a plain ``open(path, "wb")`` would give it."""
    # O_EXCL guarantees the file is new; mode 0o666 lets the kernel apply the user's umask, as open() does.
    # (tempfile.mkstemp would create it 0o600, and the checkpoint would keep that mode after the rename.)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # a leftover from another save with the same random name: draw again
            continue


def save_checkpoint(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Save ``obj`` with torch.save atomically: an interrupted save leaves the previous file at ``path`` intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file sits in the same folder so that os.replace is a rename on one file system, which is atomic.
    fd, tmp_name = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())  # the bytes must be on disk before the name points at them
        os.replace(tmp_name, path)
    except BaseException:  # KeyboardInterrupt included: never leave a half-written temporary file behind
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_folder(path.parent)
    return path


def load_checkpoint(path: str | os.PathLike[str], map_location: MapLocation) -> Any:
    """``torch.load(path, map_location=..., weights_only=True)``; a missing file gives an error that names the fix."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No checkpoint at {path}. Run the cell that saves it first (save_checkpoint), or check the path: "
            f"relative paths start from the working directory, {Path.cwd().name!r}."
        )
    return torch.load(path, map_location=map_location, weights_only=True)
