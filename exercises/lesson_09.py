"""Lesson 09's exercise checkers."""

from __future__ import annotations

import torch

from exercises.core import exercise
from helpers.placement import same_device


@exercise("09_channels_last", "channels_last")
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


@exercise("09_autocast_dtypes", "autocast dtypes", answers=2)
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
