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


class _CountedSamples(torch.utils.data.Dataset):
    """Ten samples, (features (2,), label), that count how often they are read: a loader over them shows when a
    wrapper draws its batches."""

    def __init__(self) -> None:
        self.reads = 0

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        return torch.tensor([2.0 * i, 2.0 * i + 1]), torch.tensor(i)


def _batch_tensors(batch: Any) -> list[torch.Tensor]:
    items = batch if isinstance(batch, (list, tuple)) else [batch]
    return [t for t in items if isinstance(t, torch.Tensor)]


@exercise("04_device_loader", "batches arrive on the device", function=True)
def check_device_loader(
    on_device: Callable[[Any, torch.device], Any] | None, loader: Any, device: torch.device
) -> str | None:
    """``on_device(loader, device)`` wraps ``loader``: the same length, and each batch moved to ``device`` as it is
    drawn, every pass. Called with the lesson's loader and device (first batch checked, values included), then with a
    loader of ten counted samples and the meta device, a device no batch reaches unless it is moved there: on a
    CPU-only machine that is what tells a wrapper that moves its batches from one that hands them on as they are."""
    from torch.utils.data import DataLoader

    device = torch.device(device)
    fix = "wrap it: a class whose __len__ is len(loader) and whose __iter__ yields each batch moved, X.to(device)"
    with learner_code(f"on_device(loader, {device}) raised "):
        wrapped = on_device(loader, device)
    if wrapped is loader:
        return f"that is the loader itself; {fix}"
    with learner_code("could not take the length and first batch of what it returned: "):
        length = len(wrapped)
        first = next(iter(wrapped))
    if length != len(loader):
        return f"it has {length} batches, the loader has {len(loader)}"
    tensors, expected = _batch_tensors(first), _batch_tensors(next(iter(loader)))
    if not tensors:
        return "its batches hold no tensors"
    if len(tensors) != len(expected):
        return f"a batch holds {len(tensors)} tensors, the loader's hold {len(expected)}: move every one"
    if elsewhere := [str(t.device) for t in tensors if not same_device(t.device, device)]:
        return f"a batch tensor is on {elsewhere[0]}, not {device}; {fix}"
    if device.type != "meta" and not all(torch.equal(t.cpu(), e.cpu()) for t, e in zip(tensors, expected, strict=True)):
        return "its first batch holds other values than the loader's first batch: move the batches, do not remake them"

    samples = _CountedSamples()
    probe, meta = DataLoader(samples, batch_size=4), torch.device("meta")  # batches of 4, 4 and 2 samples
    with learner_code("given a loader and the meta device it raised "):
        wrapped = on_device(probe, meta)
        if samples.reads:
            return (
                f"it read {samples.reads} samples before anything asked for a batch: a wrapper draws each batch "
                f"from the loader when the loop asks for it, so a shuffling loader reshuffles every epoch; {fix}"
            )
        length = len(wrapped)
        passes = [[_batch_tensors(b) for b in wrapped] for _ in range(2)]
    if length != len(probe):
        return f"given a loader of {len(probe)} batches, it has {length}"
    for n, batches in enumerate(passes, start=1):
        if [len(b[-1]) if b else 0 for b in batches] != [4, 4, 2]:
            return f"pass {n} over it gave {len(batches)} batches, not the loader's 3: every epoch goes through all"
        if left := sorted({str(t.device) for b in batches for t in b if t.device != meta}):
            return (
                f"given the meta device, some batch tensors stayed on {', '.join(left)}: move every tensor of each "
                f"batch to the device the function is given; {fix}"
            )
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
