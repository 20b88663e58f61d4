"""Lesson 04's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import exercise, learner_code
from helpers.placement import same_device


@exercise("04_one_hot", "one_hot follows its input", function=True)
def check_one_hot(one_hot: Callable[[torch.Tensor, int], torch.Tensor] | None) -> str | None:
    """``one_hot(labels, num_classes)`` returns float32 (B, num_classes) rows on the labels' device."""
    labels = torch.tensor([2, 0, 1, 2])
    expected = torch.tensor([[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=torch.float32)
    out = one_hot(labels, 3)
    # The meta device plays "another device" on any machine: a result left on the CPU gives itself away.
    meta_out = one_hot(labels.to("meta"), 3)
    if not isinstance(out, torch.Tensor) or not isinstance(meta_out, torch.Tensor):
        return "it should return a tensor"
    if tuple(out.shape) != (4, 3) or out.dtype != torch.float32:
        return f"got shape {tuple(out.shape)} and {out.dtype}, expected (4, 3) float32"
    if not torch.equal(out, expected):
        return "the values are wrong: row i should have a 1 in column labels[i]"
    if meta_out.device != labels.to("meta").device:
        return (
            f"given labels on another device it returned a tensor on {meta_out.device}; "
            "create it with labels.new_zeros(...) or device=labels.device"
        )
    return None


@exercise("04_device_loader", "batches arrive on the device")
def check_device_loader(wrapped: Any, loader: Any, device: torch.device) -> str | None:
    """A wrapper around ``loader`` with the same length whose batches arrive on ``device``."""
    if wrapped is loader:
        return "that is the loader itself; wrap it in DeviceDataLoader(loader, device)"
    with learner_code("could not take its length and first batch: "):
        length = len(wrapped)
        first = next(iter(wrapped))
    if length != len(loader):
        return f"it has {length} batches, the loader has {len(loader)}"
    tensors = first if isinstance(first, (list, tuple)) else [first]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    if not tensors:
        return "its batches hold no tensors"
    if not all(same_device(t.device, device) for t in tensors):
        return f"a batch tensor is on {tensors[0].device}, not {device}"
    return None


@exercise("04_padding_mask", "padding mask follows its input", function=True)
def check_padding_mask(
    padding_mask: Callable[[torch.Tensor, int], torch.Tensor] | None, device: torch.device
) -> str | None:
    """``padding_mask(lengths, max_len)``, a bool (B, max_len) mask True where position < length, made on the
    lengths' device (checked on ``device``, then on the GPU or the meta device)."""
    from helpers.placement import gpu_or_meta

    hint = "make the positions on lengths.device: torch.arange(max_len, device=lengths.device)"
    on_accelerator = f"; {hint}" if torch.device(device).type != "cpu" else ""  # a mismatch there is the likely cause
    cases = [([3, 0, 5, 1], 5), ([2], 2), ([0, 4], 4)]  # an empty sequence, and sequences as long as max_len
    for values, max_len in cases:
        lengths = torch.tensor(values, device=device)
        expected = torch.arange(max_len, device=device)[None, :] < lengths[:, None]  # (B, max_len)
        with learner_code(f"with lengths {values} it raised ", on_accelerator):
            out = padding_mask(lengths, max_len)
        if not isinstance(out, torch.Tensor):
            return f"it should return a tensor, got {type(out).__name__}"
        if out.dtype != torch.bool:
            return f"dtype is {out.dtype}, expected torch.bool; a comparison gives bools"
        if tuple(out.shape) != tuple(expected.shape):
            return (
                f"lengths {values}, max_len {max_len}: shape {tuple(out.shape)}, "
                f"expected {tuple(expected.shape)}, one row per sequence"
            )
        if not same_device(out.device, device):
            return f"given lengths on {device} it returned a tensor on {out.device}"
        if not torch.equal(out, expected):
            return (
                f"wrong values for lengths {values}: row i should be True in its first "
                "lengths[i] positions only (position < length)"
            )
    # The real GPU where there is one, else the meta device: a tensor made on the CPU inside the function shows up.
    other = gpu_or_meta(device)
    lengths = torch.tensor([3, 0, 5, 1], device=other)
    with learner_code(f"with lengths on {other} it raised ", f"; {hint}"):
        out = padding_mask(lengths, 5)
    if not isinstance(out, torch.Tensor) or not same_device(out.device, other):
        where = out.device if isinstance(out, torch.Tensor) else type(out).__name__
        return f"given lengths on {other} it returned {where}; {hint}"
    return None
