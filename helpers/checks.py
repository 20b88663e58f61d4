"""Exercise checkers. Each prints one line, a pass or a hint, and returns True or False; none raises,
so a notebook with an unfinished exercise still runs to the end.

An exercise cell starts with its answer variables set to ``None``: the checker then says it is waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

CHECKERS: dict[str, Callable[..., bool]] = {}
"""Every checker by exercise id ("NN_name"); the tests run each against a reference solution and a wrong answer."""


def exercise(exercise_id: str) -> Callable[[Callable[..., bool]], Callable[..., bool]]:
    """Register a checker under ``exercise_id``."""

    def register(fn: Callable[..., bool]) -> Callable[..., bool]:
        if exercise_id in CHECKERS:
            raise ValueError(f"Two checkers for exercise {exercise_id!r}.")
        CHECKERS[exercise_id] = fn
        return fn

    return register


def _verdict(exercise: str, ok: bool, hint: str) -> bool:
    print(f"[pass] {exercise}" if ok else f"[not yet] {exercise}: {hint}")
    return ok


def _unanswered(exercise: str, *answers: Any) -> bool:
    if any(a is None for a in answers):
        print(f"[waiting] {exercise}: replace the None placeholders with your answer and run the cell again.")
        return True
    return False


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Device equality that treats "cuda" and "cuda:0" (the current device) as one."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type == "cpu" or a.index is None or b.index is None:
        return True
    return a.index == b.index


# --- lesson 00 -------------------------------------------------------------------------------------------------


@exercise("00_zeros_on_device")
def check_zeros_on_device(x: torch.Tensor | None, device: torch.device) -> bool:
    """Lesson 00: a (2, 3) float32 tensor of zeros, created directly on ``device``."""
    name = "zeros on the device"
    if _unanswered(name, x):
        return False
    if not isinstance(x, torch.Tensor):
        return _verdict(name, False, f"expected a torch.Tensor, got {type(x).__name__}")
    if tuple(x.shape) != (2, 3):
        return _verdict(name, False, f"shape is {tuple(x.shape)}, expected (2, 3)")
    if x.dtype != torch.float32:
        return _verdict(name, False, f"dtype is {x.dtype}, expected torch.float32 (the default)")
    if not _same_device(x.device, device):
        return _verdict(name, False, f"it lives on {x.device}, not on {device}; pass device=device when creating it")
    return _verdict(name, bool((x == 0).all()), "not every element is zero")


# --- lesson 01 -------------------------------------------------------------------------------------------------

# --- lesson 02 -------------------------------------------------------------------------------------------------

# --- lesson 03 -------------------------------------------------------------------------------------------------

# --- lesson 04 -------------------------------------------------------------------------------------------------

# --- lesson 05 -------------------------------------------------------------------------------------------------

# --- lesson 06 -------------------------------------------------------------------------------------------------

# --- lesson 07 -------------------------------------------------------------------------------------------------

# --- lesson 08 -------------------------------------------------------------------------------------------------
