"""Lesson 01's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from exercises.core import Recorder, exercise, learner_code
from helpers.placement import same_device


@exercise("01_move_with_dtype", "move with a dtype", answers=2)
def check_moved_copy(
    moved: torch.Tensor | None, values: list | None, data: torch.Tensor, device: torch.device
) -> str | None:
    """``data`` on ``device`` as float16 (every device has it; an Apple GPU has no float64), and its values back as a
    Python list. Only the results are checked, not how many calls made them, and the exercise asks for no more."""
    if not isinstance(moved, torch.Tensor):
        return f"moved should be a tensor, got {type(moved).__name__}"
    if not same_device(moved.device, device):
        return f"moved lives on {moved.device}, not on {device}: did you reassign the result?"
    if moved.dtype != torch.float16:
        return f"moved has dtype {moved.dtype}; pass torch.float16 too: x.to(device, dtype)"
    if tuple(moved.shape) != tuple(data.shape):
        return f"moved has shape {tuple(moved.shape)}, data has {tuple(data.shape)}"
    if not isinstance(values, list):
        return f"values should be a Python list (.tolist()), got {type(values).__name__}"
    if values != data.half().tolist():
        return "values differ from data; read them back from moved with .tolist()"
    if moved.device.type != "meta" and not torch.equal(moved.cpu(), data.half()):
        return "moved holds other numbers than data"
    return None


@exercise("01_copy_bandwidth", "copy bandwidth")
def check_bandwidth(gb_per_s: float | None, x: torch.Tensor, seconds: float) -> str | None:
    """The bandwidth of copying ``x`` in ``seconds``, in GB/s (1e9 bytes per second)."""
    if not isinstance(gb_per_s, (int, float)) or isinstance(gb_per_s, bool):
        return f"expected a number, got {type(gb_per_s).__name__}"
    expected = x.numel() * x.element_size() / seconds / 1e9
    if abs(gb_per_s - expected) > 0.01 * expected:
        return "bandwidth = bytes / seconds / 1e9, and bytes = numel() * element_size()"
    return None


@exercise("01_device_agnostic_noise", "device-agnostic noise", function=True)
def check_add_noise(
    add_noise: Callable[[torch.Tensor, float], torch.Tensor] | None, device: torch.device
) -> str | None:
    """``add_noise(x, std)`` returns ``x`` plus Gaussian noise of standard deviation ``std``, the noise made on
    ``x``'s device in ``x``'s dtype. Run on ``device`` in float32 (the noise measured), then in bfloat16 on the GPU
    when ``device`` is one, else on the meta device, which refuses a tensor made on the CPU as a GPU does. Off the
    CPU, every tensor the function makes is recorded: noise made on the CPU and copied over is refused too."""
    from helpers.placement import gpu_or_meta

    for where, dtype in ((torch.device(device), torch.float32), (gpu_or_meta(device), torch.bfloat16)):
        x = torch.zeros(100_000, device=where, dtype=dtype)
        fix = "; make the noise with device=x.device, dtype=x.dtype (or torch.randn_like(x))"
        with Recorder() as recorder, learner_code(f"for x on {where} ({dtype}) it raised ", fix):
            out = add_noise(x, 0.5)
        if not isinstance(out, torch.Tensor):
            return f"add_noise should return a tensor, got {type(out).__name__}"
        if not same_device(out.device, where) or out.dtype != dtype or out.shape != x.shape:
            got = f"{out.device}, {out.dtype}, {tuple(out.shape)}"
            return f"for x on {where} in {dtype} it returned {got}: the noise must follow x"
        on_cpu = [func for func, device_type, numel in recorder.made if device_type == "cpu" and numel > 1]
        if where.type != "cpu" and on_cpu:
            return (
                f"for x on {where}, {on_cpu[0]} made a tensor of noise on the CPU, which was then copied over: "
                "a copy on every call; make it where x is, with device=x.device, dtype=x.dtype (or torch.randn_like(x))"
            )
        if where.type != "meta":
            noise = (out - x).float()
            mean, std = noise.mean().item(), noise.std().item()
            if abs(mean) > 0.05 or not 0.45 < std < 0.55:
                how = "torch.randn(...) * std, added to x and not written into it"
                return f"the noise had mean {mean:.3f} and std {std:.3f}, not 0 and 0.5: {how}"
    return None
