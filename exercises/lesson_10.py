"""Lesson 10's exercise checkers."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F

from exercises.core import exercise, learner_code

ACCUMULATION_BATCH, ACCUMULATION_STEPS = 32, 4
"""The checker's batch and the number of chunks it is split into."""


class _Saved:
    """One tensor that autograd saved for a backward pass, wrapped so that the checker can see when it is freed."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class SavedForBackward:
    """While active, knows how many tensors saved for a backward pass are still held: backward() frees a graph's
    saved tensors (unless told to retain the graph); a graph that is only built keeps them until it is dropped."""

    def __init__(self) -> None:
        self.live: weakref.WeakSet[_Saved] = weakref.WeakSet()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def _pack(self, tensor: torch.Tensor) -> _Saved:
        saved = _Saved(tensor)
        self.live.add(saved)
        return saved

    @staticmethod
    def _unpack(saved: _Saved) -> torch.Tensor:
        return saved.tensor

    def __enter__(self) -> SavedForBackward:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


@exercise("10_gradient_accumulation", "gradient accumulation", function=True)
def check_accumulation(accumulate: Callable | None, device: torch.device) -> str | None:
    """``accumulate(model, X, y, k)`` leaves in each parameter's ``.grad`` the gradient of the mean cross-entropy over
    the whole batch, running the model on ``k`` chunks of it, one at a time: each chunk's graph, with the activations
    it saved, is freed by its backward() before the model runs on the next chunk."""
    g = torch.Generator().manual_seed(10)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 5)).to(device)
    X = torch.randn(ACCUMULATION_BATCH, 12, generator=g).to(device)  # (B, features)
    y = torch.randint(0, 5, (ACCUMULATION_BATCH,), generator=g).to(device)
    reference = copy.deepcopy(model)
    F.cross_entropy(reference(X), y).backward()
    expected = [p.grad for p in reference.parameters()]

    sizes: list[int] = []
    backwards = [0]  # backward passes that reached the first layer's weight
    held: list[tuple[int, int]] = []  # per run of the model: (tensors saved by earlier chunks still held, backwards)
    saved = SavedForBackward()

    def count_backward(parameter: torch.Tensor) -> None:
        backwards[0] += 1

    model.register_forward_hook(lambda module, inputs, output: sizes.append(len(inputs[0])))
    model.register_forward_pre_hook(lambda module, inputs: held.append((len(saved.live), backwards[0])))
    next(model.parameters()).register_post_accumulate_grad_hook(count_backward)
    with learner_code("accumulate raised "), saved:
        accumulate(model, X, y, ACCUMULATION_STEPS)
    if any(size > ACCUMULATION_BATCH // ACCUMULATION_STEPS for size in sizes):
        return "the model ran on more than one chunk at once: run it on each of the k chunks, one at a time"
    if len(sizes) != ACCUMULATION_STEPS:
        return f"the model ran {len(sizes)} times; it should run once per chunk, {ACCUMULATION_STEPS} times"
    kept = [(chunk, live, done) for chunk, (live, done) in enumerate(held, start=1) if live]
    if kept:
        chunk, live, done = kept[0]
        why = (
            "backward() had not run on the chunk before it, so its graph was still alive"
            if done < chunk - 1
            else "the graph of a chunk before it was still alive after its backward() (retain_graph=True keeps it)"
        )
        return (
            f"the model ran on chunk {chunk} while {live} tensors saved by the earlier chunks for their backward pass "
            f"were still held: {why}. With every chunk's graph alive at once the step needs the memory of the whole "
            "batch, which accumulating is meant to avoid; call backward() on each chunk's loss before running the "
            "next chunk"
        )
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
