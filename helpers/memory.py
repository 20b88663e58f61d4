"""Accelerator memory: what the caching allocator holds and the peak.

PyTorch reports these figures for CUDA, MPS (no peaks) and, through ``torch.accelerator``, other accelerators."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.text import format_bytes


@dataclass(frozen=True)
class MemoryStats:
    """Bytes held by PyTorch's caching allocator on one device: ``allocated`` in live tensors, ``reserved`` from the
    driver, allocated plus cached freed blocks (on MPS, what the Metal driver holds for the process, Apple's frameworks
    included); peaks since ``reset_peak_memory_stats``, None where the backend does not track them."""

    allocated: int
    reserved: int
    peak_allocated: int | None = None
    peak_reserved: int | None = None

    def __str__(self) -> str:
        parts = [f"allocated {format_bytes(self.allocated)}", f"reserved {format_bytes(self.reserved)}"]
        peaks = (("peak allocated", self.peak_allocated), ("peak reserved", self.peak_reserved))
        parts += [f"{name} {format_bytes(value)}" for name, value in peaks if value is not None]
        if len(parts) == 2:
            parts.append("no peak figures on this backend")
        return " | ".join(parts)


def _backend(device: str | torch.device) -> str | None:
    """Which API reports memory for ``device``: "cuda", "mps", "accelerator", or None where none does."""
    device = torch.device(device)
    if device.type == "cuda":
        return "cuda" if torch.cuda.is_available() else None
    if device.type == "mps":
        return "mps" if torch.backends.mps.is_available() else None
    if device.type == "cpu":
        return None
    # Other accelerators (XPU, ...) on a torch that has the device-generic memory API (torch >= 2.9; 2.8 lacks it).
    if not hasattr(torch.accelerator, "memory_allocated") or not torch.accelerator.is_available():
        return None
    current = torch.accelerator.current_accelerator()
    return "accelerator" if current is not None and current.type == device.type else None


def memory_stats(device: str | torch.device) -> MemoryStats | None:
    """The allocator's current (and, where tracked, peak) figures for ``device``; None where PyTorch has none."""
    backend = _backend(device)
    device = torch.device(device)
    if backend == "mps":  # the MPS allocator keeps no peak figures
        return MemoryStats(allocated=torch.mps.current_allocated_memory(), reserved=torch.mps.driver_allocated_memory())
    if backend == "cuda":
        api, where = torch.cuda, device
    elif backend == "accelerator":
        api = torch.accelerator
        where = device.index if device.index is not None else api.current_device_index()
    else:
        return None
    return MemoryStats(
        allocated=api.memory_allocated(where),
        reserved=api.memory_reserved(where),
        peak_allocated=api.max_memory_allocated(where),
        peak_reserved=api.max_memory_reserved(where),
    )
