"""Lesson 08's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from exercises.core import Recorder, exercise
from helpers.placement import same_device


@exercise("08_channels_last", "channels_last")
def check_channels_last(images_cl: torch.Tensor | None, images: torch.Tensor) -> str | None:
    """``images`` (B, C, H, W) converted to the channels_last memory format, shape and values unchanged."""
    if not isinstance(images_cl, torch.Tensor):
        return f"expected a torch.Tensor, got {type(images_cl).__name__}"
    if images_cl.shape != images.shape:
        return (
            f"shape is {tuple(images_cl.shape)}, expected {tuple(images.shape)}: channels_last changes the order "
            "in memory, not the shape (no permute)"
        )
    if not same_device(images_cl.device, images.device):
        return f"it lives on {images_cl.device}, not on {images.device} like the input"
    if not images_cl.is_contiguous(memory_format=torch.channels_last):
        return "not channels_last in memory; use .contiguous(memory_format=torch.channels_last)"
    if not torch.equal(images_cl, images):
        return "the values differ from the input's"
    return None


@exercise("08_autocast_dtypes", "autocast dtypes", answers=2)
def check_autocast_dtypes(
    output_dtype: torch.dtype | None, weight_dtype: torch.dtype | None, autocast_dtype: torch.dtype
) -> str | None:
    """Inside autocast a linear layer computes in ``autocast_dtype`` while its weight stays float32."""
    if not isinstance(output_dtype, torch.dtype) or not isinstance(weight_dtype, torch.dtype):
        return "answer with dtypes, e.g. out.dtype and layer.weight.dtype"
    if output_dtype != autocast_dtype:
        return f"output dtype {output_dtype}: inside autocast a linear layer's output is {autocast_dtype}"
    if weight_dtype != torch.float32:
        return (
            f"weight dtype {weight_dtype}: autocast casts copies for the computation; the weight itself "
            "is not converted"
        )
    return None


@exercise("08_hidden_sync", "find the hidden synchronisation", function=True)
def check_hidden_sync(evaluate: Callable | None, device: torch.device) -> str | None:
    """``evaluate(model, batches)`` returns the accuracy over the batches and reads the device once."""
    g = torch.Generator().manual_seed(8)
    model = torch.nn.Linear(12, 5).to(device)
    batches = [
        (torch.randn(32, 12, generator=g).to(device), torch.randint(0, 5, (32,), generator=g).to(device))
        for _ in range(10)
    ]
    with torch.no_grad():
        correct = sum(int((model(X).argmax(dim=1) == y).sum()) for X, y in batches)
    expected = correct / (32 * len(batches))
    with torch.no_grad(), Recorder() as recorder:
        got = evaluate(model, batches)
    if isinstance(got, torch.Tensor):
        return "it returned a tensor: read the total back once, at the end, with .item()"
    if not isinstance(got, (int, float)) or abs(got - expected) > 1e-6:
        return f"it returned {got!r}, the accuracy is {expected:.4f}"
    if len(recorder.host_reads) > 2:
        reads = ", ".join(sorted(set(recorder.host_reads)))
        return (
            f"it read values back to the host {len(recorder.host_reads)} times over {len(batches)} batches "
            f"({reads}): keep the running count on the device"
        )
    return None
