"""Lesson 10's exercise checkers."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F

from exercises.core import exercise, learner_code

ACCUMULATION_BATCH, ACCUMULATION_STEPS = 32, 4
"""The checker's batch and the number of chunks it is split into."""


@exercise("10_gradient_accumulation", "gradient accumulation", function=True)
def check_accumulation(accumulate: Callable | None, device: torch.device) -> str | None:
    """``accumulate(model, X, y, k)`` leaves in each parameter's ``.grad`` the gradient of the mean cross-entropy over
    the whole batch, running the model on ``k`` chunks of it and never on the whole batch at once."""
    g = torch.Generator().manual_seed(10)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5)).to(device)
    X = torch.randn(ACCUMULATION_BATCH, 12, generator=g).to(device)  # (B, features)
    y = torch.randint(0, 5, (ACCUMULATION_BATCH,), generator=g).to(device)
    reference = copy.deepcopy(model)
    F.cross_entropy(reference(X), y).backward()
    expected = [p.grad for p in reference.parameters()]

    sizes: list[int] = []
    model.register_forward_hook(lambda module, inputs, output: sizes.append(len(inputs[0])))
    with learner_code("accumulate raised "):
        accumulate(model, X, y, ACCUMULATION_STEPS)
    if any(size > ACCUMULATION_BATCH // ACCUMULATION_STEPS for size in sizes):
        return "the model ran on more than one chunk at once: run it on each of the k chunks, one at a time"
    if len(sizes) != ACCUMULATION_STEPS:
        return f"the model ran {len(sizes)} times; it should run once per chunk, {ACCUMULATION_STEPS} times"
    got = [p.grad for p in model.parameters()]
    if any(grad is None for grad in got):
        return "some parameters have no gradient: call backward() on each chunk's loss"
    if all(torch.allclose(a, b, atol=1e-6) for a, b in zip(got, expected, strict=True)):
        return None
    if all(torch.allclose(a, ACCUMULATION_STEPS * b, atol=1e-5) for a, b in zip(got, expected, strict=True)):
        return (
            f"the gradients are {ACCUMULATION_STEPS} times too large: each chunk's mean loss is one of k parts of the "
            "batch's mean, so divide it by k before backward()"
        )
    return (
        "the gradients differ from the whole batch's: backward() adds to .grad, so do not zero the gradients "
        "between chunks, and scale each chunk's loss by 1/k"
    )
