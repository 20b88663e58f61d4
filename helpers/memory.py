"""GPU memory: what the caching allocator holds, the peak, and the largest batch size that fits.

PyTorch reports these figures for CUDA devices; on any other device the functions here say so instead of guessing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class MemoryStats:
    """Bytes held by PyTorch's CUDA caching allocator on one device."""

    allocated: int
    """Bytes in live tensors right now."""
    reserved: int
    """Bytes the allocator holds from the driver: allocated plus its cache of freed blocks."""
    peak_allocated: int
    """Most bytes in live tensors since the last ``reset_peak``."""
    peak_reserved: int
    """Most bytes reserved since the last ``reset_peak``."""

    @property
    def cached(self) -> int:
        """Reserved but not allocated: freed blocks kept for reuse, which ``empty_cache`` can hand back."""
        return self.reserved - self.allocated

    def __str__(self) -> str:
        return (
            f"allocated {format_bytes(self.allocated)} | reserved {format_bytes(self.reserved)} | "
            f"peak allocated {format_bytes(self.peak_allocated)} | peak reserved {format_bytes(self.peak_reserved)}"
        )


def format_bytes(n: int | float) -> str:
    """1536 -> '1.5 KiB', 3 * 2**30 -> '3.0 GiB'."""
    if n < 0:
        return "-" + format_bytes(-n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def has_memory_stats(device: str | torch.device) -> bool:
    """True when PyTorch can report allocator statistics for ``device`` (a CUDA device on a machine that has one)."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def memory_stats(device: str | torch.device) -> MemoryStats | None:
    """The allocator's current and peak figures for ``device``; None where PyTorch does not report them."""
    if not has_memory_stats(device):
        return None
    device = torch.device(device)
    return MemoryStats(
        allocated=torch.cuda.memory_allocated(device),
        reserved=torch.cuda.memory_reserved(device),
        peak_allocated=torch.cuda.max_memory_allocated(device),
        peak_reserved=torch.cuda.max_memory_reserved(device),
    )


def memory_report(device: str | torch.device, label: str = "") -> str:
    """One line: the figures of ``memory_stats``, or why there are none on this device."""
    prefix = f"{label}: " if label else ""
    stats = memory_stats(device)
    if stats is None:
        return f"{prefix}memory statistics not available on {torch.device(device)} (PyTorch reports them for CUDA)"
    return prefix + str(stats)


def reset_peak(device: str | torch.device) -> None:
    """Start a new peak measurement on ``device``; does nothing where there are no statistics."""
    if has_memory_stats(device):
        torch.cuda.reset_peak_memory_stats(device)


def release_cached_memory(device: str | torch.device | None = None) -> None:
    """Collect Python garbage, then hand the allocator's unused cached blocks back to the driver.

    Live tensors are untouched: ``empty_cache`` only returns memory nothing refers to any more.
    """
    gc.collect()  # tensors kept alive only by reference cycles are freed here, before the cache is emptied
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.empty_cache()


def is_out_of_memory(error: BaseException) -> bool:
    """True for PyTorch's out-of-memory error (``torch.cuda.OutOfMemoryError``, also ``torch.OutOfMemoryError``)."""
    return isinstance(error, torch.cuda.OutOfMemoryError)


@dataclass(frozen=True)
class BatchSearch:
    """The outcome of ``largest_batch_size``: the answer and every size tried, in order."""

    largest: int
    tried: list[tuple[int, bool]] = field(repr=False)
    """(batch size, fitted) for each try."""

    @property
    def smallest_failure(self) -> int | None:
        """The smallest size that ran out of memory, or None if every size tried fitted."""
        failed = [size for size, ok in self.tried if not ok]
        return min(failed) if failed else None

    def __str__(self) -> str:
        steps = ", ".join(f"{size} {'fits' if ok else 'OOM'}" for size, ok in self.tried)
        return f"largest batch size that fits: {self.largest} (tried {steps})"


def largest_batch_size(
    step_fn: Callable[[int], Any],
    start: int,
    *,
    min_size: int = 1,
    refine: bool = True,
    resolution: int = 1,
    device: str | torch.device | None = None,
    clear: Callable[[], None] | None = None,
) -> BatchSearch:
    """Find the largest batch size for which ``step_fn(batch_size)`` runs without ``torch.cuda.OutOfMemoryError``.

    Tries ``start``, halving after each out-of-memory error until a size fits. With ``refine``, it then bisects
    between that size and the smallest failure until they are at most ``resolution`` apart. ``start`` is the
    upper bound: if it fits, it is the answer. Cached memory is released between tries (``clear``, by default
    ``release_cached_memory(device)``). Any other exception propagates; if even ``min_size`` does not fit, the
    last out-of-memory error is raised again.
    """
    for name, value in (("start", start), ("min_size", min_size), ("resolution", resolution)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if min_size > start:
        raise ValueError(f"min_size ({min_size}) must not exceed start ({start}).")
    if clear is None:

        def clear() -> None:
            release_cached_memory(device)

    tried: list[tuple[int, bool]] = []
    last_error: BaseException | None = None

    def fits(size: int) -> bool:
        nonlocal last_error
        ok = True
        try:
            step_fn(size)
        except torch.cuda.OutOfMemoryError as error:
            # Keep only the message: the traceback's frames would keep the failed try's tensors alive.
            last_error = type(error)(str(error))
            ok = False
        # Outside the except block, so nothing from the failed try is still referenced when the cache is emptied.
        clear()
        tried.append((size, ok))
        return ok

    size = start
    while not fits(size):
        if size == min_size:
            assert last_error is not None
            raise last_error
        size = max(size // 2, min_size)
    good, bad = size, (tried[-2][0] if len(tried) > 1 else None)
    if refine and bad is not None:
        while bad - good > resolution:
            middle = (good + bad) // 2
            if fits(middle):
                good = middle
            else:
                bad = middle
    return BatchSearch(largest=good, tried=tried)
