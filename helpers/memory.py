"""Accelerator memory: what the caching allocator holds, the peak, and the largest batch size that fits.

PyTorch reports these figures for CUDA devices (current and peak), for Apple's MPS (current only) and, through
``torch.accelerator``, for other accelerators; on the CPU the functions here say so instead of guessing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class MemoryStats:
    """Bytes held by PyTorch's caching allocator on one device; a peak is None where the backend does not track it."""

    allocated: int
    """Bytes in live tensors right now."""
    reserved: int
    """Bytes the allocator holds from the driver: allocated plus its cache of freed blocks.

    On MPS this is ``torch.mps.driver_allocated_memory()``: what the Metal driver holds for the process, which also
    counts memory used by Apple's frameworks."""
    peak_allocated: int | None = None
    """Most bytes in live tensors since the last peak reset (``torch.cuda.reset_peak_memory_stats``)."""
    peak_reserved: int | None = None
    """Most bytes reserved since the last peak reset (``torch.cuda.reset_peak_memory_stats``)."""

    def __str__(self) -> str:
        parts = [f"allocated {format_bytes(self.allocated)}", f"reserved {format_bytes(self.reserved)}"]
        if self.peak_allocated is not None:
            parts.append(f"peak allocated {format_bytes(self.peak_allocated)}")
        if self.peak_reserved is not None:
            parts.append(f"peak reserved {format_bytes(self.peak_reserved)}")
        if self.peak_allocated is None and self.peak_reserved is None:
            parts.append("no peak figures on this backend")
        return " | ".join(parts)


def format_bytes(n: int | float) -> str:
    """1536 -> '1.5 KiB', 3 * 2**30 -> '3.0 GiB'."""
    if n < 0:
        return "-" + format_bytes(-n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _backend(device: str | torch.device) -> str | None:
    """Which API reports memory for ``device``: "cuda", "mps", "accelerator", or None where none does."""
    device = torch.device(device)
    if device.type == "cuda":
        return "cuda" if torch.cuda.is_available() else None
    if device.type == "mps":
        mps_ok = torch.backends.mps.is_available() and hasattr(torch.mps, "current_allocated_memory")
        return "mps" if mps_ok else None
    if device.type == "cpu":
        return None
    # Other accelerators (XPU, ...) on a torch that has the device-generic memory API (torch >= 2.9; 2.8 lacks it).
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not hasattr(accelerator, "memory_allocated") or not accelerator.is_available():
        return None
    current = accelerator.current_accelerator()
    return "accelerator" if current is not None and current.type == device.type else None


def memory_stats(device: str | torch.device) -> MemoryStats | None:
    """The allocator's current (and, where tracked, peak) figures for ``device``; None where PyTorch has none."""
    backend = _backend(device)
    device = torch.device(device)
    if backend == "cuda":
        return MemoryStats(
            allocated=torch.cuda.memory_allocated(device),
            reserved=torch.cuda.memory_reserved(device),
            peak_allocated=torch.cuda.max_memory_allocated(device),
            peak_reserved=torch.cuda.max_memory_reserved(device),
        )
    if backend == "mps":  # the MPS allocator keeps no peak figures
        return MemoryStats(allocated=torch.mps.current_allocated_memory(), reserved=torch.mps.driver_allocated_memory())
    if backend == "accelerator":
        index = device.index if device.index is not None else torch.accelerator.current_device_index()
        return MemoryStats(
            allocated=torch.accelerator.memory_allocated(index),
            reserved=torch.accelerator.memory_reserved(index),
            peak_allocated=torch.accelerator.max_memory_allocated(index),
            peak_reserved=torch.accelerator.max_memory_reserved(index),
        )
    return None


def memory_report(device: str | torch.device, label: str = "") -> str:
    """One line: the figures of ``memory_stats``, or why there are none on this device."""
    prefix = f"{label}: " if label else ""
    stats = memory_stats(device)
    if stats is None:
        return (
            f"{prefix}memory statistics not available on {torch.device(device)} "
            "(PyTorch reports them for accelerators such as CUDA and MPS GPUs)"
        )
    return prefix + str(stats)


def release_cached_memory(device: str | torch.device | None = None) -> None:
    """Collect Python garbage, then hand the allocator's unused cached blocks back to the driver.

    Live tensors are untouched: ``empty_cache`` only returns memory nothing refers to any more. With ``device``
    None, every CUDA device's cache is emptied.
    """
    gc.collect()  # tensors kept alive only by reference cycles are freed here, before the cache is emptied
    backend = "cuda" if device is None else _backend(device)
    if backend == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()
    elif backend == "mps":
        torch.mps.empty_cache()
    elif backend == "accelerator":
        torch.accelerator.empty_cache()


@dataclass(frozen=True)
class BatchSearch:
    """The outcome of ``largest_batch_size``: the answer and every size tried, in order."""

    largest: int
    tried: list[tuple[int, bool]] = field(repr=False)
    """(batch size, fitted) for each try."""

    def __str__(self) -> str:
        steps = ", ".join(f"{size} {'fits' if ok else 'OOM'}" for size, ok in self.tried)
        return f"largest batch size that fits: {self.largest} (tried {steps})"


def largest_batch_size(
    step_fn: Callable[[int], Any],
    start: int,
    *,
    min_size: int = 1,
    max_size: int | None = None,
    refine: bool = True,
    resolution: int = 1,
    device: str | torch.device | None = None,
    clear: Callable[[], None] | None = None,
) -> BatchSearch:
    """Find the largest batch size for which ``step_fn(batch_size)`` runs without ``torch.cuda.OutOfMemoryError``.

    Tries ``start``. If it runs out of memory, the size is halved until one fits (down to ``min_size``). If it
    fits and ``max_size`` is given, the size is doubled until a try fails or ``max_size`` has fitted; without
    ``max_size``, ``start`` is the upper bound. With ``refine``, it then bisects between the largest size that
    fitted and the smallest that failed until they are at most ``resolution`` apart. Cached memory is released
    between tries (``clear``, by default ``release_cached_memory(device)``). Any other exception propagates; if
    even ``min_size`` does not fit, the last out-of-memory error is raised again.
    """
    for name, value in (("start", start), ("min_size", min_size), ("resolution", resolution)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if min_size > start:
        raise ValueError(f"min_size ({min_size}) must not exceed start ({start}).")
    if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < start):
        raise ValueError(f"max_size must be an integer no smaller than start ({start}), got {max_size!r}.")
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

    good: int
    bad: int | None = None
    size = start
    if fits(size):
        good = size
        while max_size is not None and size < max_size:
            size = min(size * 2, max_size)
            if not fits(size):
                bad = size
                break
            good = size
    else:
        while True:
            bad = size
            if size == min_size:
                assert last_error is not None
                raise last_error
            size = max(size // 2, min_size)
            if fits(size):
                good = size
                break
    if refine and bad is not None:
        while bad - good > resolution:
            middle = (good + bad) // 2
            if fits(middle):
                good = middle
            else:
                bad = middle
    return BatchSearch(largest=good, tried=tried)
