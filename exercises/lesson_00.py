"""Lesson 00's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from exercises.core import Recorder, exercise, learner_code
from helpers.placement import same_device


@exercise("00_zeros_on_device", "zeros on the device", function=True)
def check_zeros_on_device(
    make_zeros: Callable[[torch.device], torch.Tensor] | None, device: torch.device
) -> str | None:
    """``make_zeros(device)`` returns a (2, 3) float32 tensor of zeros made on ``device`` by the call that creates it.
    Called with the lesson's device (the tensor checked), then with the meta device, a device no tensor lands on
    by accident: a tensor the function makes on the CPU there, to move it afterwards, is recorded and refused."""
    fix = "pass device=device to the call that creates it: torch.zeros(2, 3, device=device)"
    for where in dict.fromkeys([torch.device(device), torch.device("meta")]):  # one run when the lesson uses meta
        with Recorder() as recorder, learner_code(f"make_zeros({where}) raised "):
            x = make_zeros(where)
        if not isinstance(x, torch.Tensor):
            return f"make_zeros should return a torch.Tensor, got {type(x).__name__}"
        if tuple(x.shape) != (2, 3):
            return f"shape is {tuple(x.shape)}, expected (2, 3)"
        if x.dtype != torch.float32:
            return f"dtype is {x.dtype}, expected torch.float32 (the default)"
        if not same_device(x.device, where):
            return f"make_zeros({where}) returned a tensor on {x.device}: use the device it is given; {fix}"
        made_on_cpu = [func for func, device_type, _ in recorder.made if device_type == "cpu"]
        if where.type != "cpu" and made_on_cpu:
            return f"asked for {where}, {made_on_cpu[0]} first made it on the CPU and it was copied over; {fix}"
        if where.type != "meta" and not bool((x == 0).all()):
            return "not every element is zero"
    return None
