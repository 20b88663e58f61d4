"""Lesson 00's exercise checkers."""

from __future__ import annotations

import torch

from exercises.core import exercise
from helpers.placement import same_device


@exercise("00_zeros_on_device", "zeros on the device")
def check_zeros_on_device(x: torch.Tensor | None, device: torch.device) -> str | None:
    """A (2, 3) float32 tensor of zeros on ``device``. Only the tensor is checked: one made on the CPU and moved there
    passes too, and the exercise asks for no more."""
    if not isinstance(x, torch.Tensor):
        return f"expected a torch.Tensor, got {type(x).__name__}"
    if tuple(x.shape) != (2, 3):
        return f"shape is {tuple(x.shape)}, expected (2, 3)"
    if x.dtype != torch.float32:
        return f"dtype is {x.dtype}, expected torch.float32 (the default)"
    if not same_device(x.device, device):
        return f"it lives on {x.device}, not on {device}; pass device=device when creating it"
    if not (x == 0).all():
        return "not every element is zero"
    return None
