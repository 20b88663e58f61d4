"""Lesson 02's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import exercise, learner_code
from helpers.placement import same_device


def _parse_mismatch(message: str) -> tuple[str, str] | None:
    """(argument, its device) from a device-mismatch message that names the argument, in either wording."""
    import re  # only this checker needs it

    if m := re.search(r"but got (\w+) is on (\S+), different from other tensors on (\S+) \(", message):
        return m.group(1), m.group(2)
    if m := re.search(r"at least two devices, (\S+) and (\S+)! \(when checking argument for argument (\w+)", message):
        return m.group(3), m.group(2)
    return None


@exercise("02_read_the_error", "read the error", answers=2)
def check_error_reading(argument: str | None, argument_device: str | None, message: str) -> str | None:
    """Which argument the mismatch message names, and the device that argument is on."""
    truth = _parse_mismatch(message)
    if truth is None:
        return "this message names no argument; pick one from the lesson"
    if str(argument).strip() != truth[0]:
        return f"{argument!r} is not the argument: look for the word after 'but got'"
    if str(argument_device).strip() != truth[1]:
        return f"{truth[0]} is not on {argument_device!r}: look for the device after 'is on'"
    return None


@exercise("02_batch_on_device", "whole batch on the device", function=True)
def check_batch_on_device(
    move: Callable[[Any, torch.device], Any] | None, original: Any, device: torch.device
) -> str | None:
    """``move(obj, target)`` returns the structure of ``original`` with every tensor on ``target`` and everything else
    as it was, and leaves ``original`` itself alone. Called with the lesson's device (values compared), then with the
    GPU when ``device`` is one, else the meta device (shapes only), which no tensor reaches unless it is moved there."""
    from helpers.placement import batch_leaves, gpu_or_meta  # the walker lesson 02's report uses

    for target in dict.fromkeys([torch.device(device), gpu_or_meta(device)]):  # one run when both are the same GPU
        given = batch_leaves(original)
        with learner_code(f"move(sample, {target}) raised "):
            moved = move(original, target)
        if [(path, id(leaf)) for path, leaf in batch_leaves(original)] != [(path, id(leaf)) for path, leaf in given]:
            return (
                "it changed the batch it was given: build a new dict (or list, or tuple) and leave the original alone"
            )
        if hint := _moved_batch_hint(moved, original, target):
            return f"with target {target}, {hint}"
    return None


def _moved_batch_hint(moved: Any, original: Any, target: torch.device) -> str | None:
    """What is wrong with ``moved`` as ``original`` with every tensor on ``target``, or None."""
    from helpers.placement import batch_leaves

    if type(moved) is not type(original):
        return f"expected a {type(original).__name__}, got {type(moved).__name__}"
    got, want = dict(batch_leaves(moved)), dict(batch_leaves(original))
    if got.keys() != want.keys():
        lost, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
        return f"the structure changed: missing {lost or 'nothing'}, new {extra or 'nothing'}"
    for path, w in want.items():
        g = got[path]
        if not isinstance(w, torch.Tensor):
            try:
                same = g is w or bool(g == w)
            except Exception:  # e.g. an array leaf, whose == gives no single truth value
                same = False
            if not same:
                return f"{path} is not a tensor and should stay as it was: {w!r} became {g!r}"
            continue
        if not isinstance(g, torch.Tensor):
            return f"{path} became a {type(g).__name__}"
        if not same_device(g.device, target):
            return f"{path} is still on {g.device}: move every tensor, however deep"
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{path} changed shape or dtype: was {tuple(w.shape)} {w.dtype}"
        if g.device.type != "meta" and w.device.type != "meta" and not torch.equal(g.cpu(), w.cpu()):
            return f"{path} holds other values than the original: move the tensor with .to(target), do not remake it"
    return None


@exercise("02_fix_the_train_step", "fix the training step", function=True)
def check_train_step(train_step: Callable | None, device: torch.device, steps: int = 5) -> str | None:
    """``train_step(model, images, labels, optimizer)`` takes a batch on the CPU for a model on any device, uses class
    weights ``linspace(0.5, 1.5, 10)`` in its cross-entropy and returns the loss tensor. Run for real on ``device``
    (the loss must match, be finite and go down, the parameters change), then with the model on the GPU when
    ``device`` is one, else on the meta device, which refuses a tensor left on the CPU as a GPU does."""
    import copy
    import math

    import torch.nn.functional as F
    from torch import nn

    from helpers.placement import gpu_or_meta

    gen = torch.Generator().manual_seed(0)
    images = torch.randn(64, 1, 8, 8, generator=gen)  # (B, 1, 8, 8), on the CPU as a DataLoader hands it over
    labels = torch.randint(0, 10, (64,), generator=gen)  # (B,)
    with torch.random.fork_rng(devices=[]):  # the same model every time, without touching the learner's seed
        torch.manual_seed(0)
        template = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        expected = F.cross_entropy(template(images), labels, weight=torch.linspace(0.5, 1.5, 10)).item()
    for where in dict.fromkeys([torch.device(device), gpu_or_meta(device)]):  # one run when both are the same GPU
        model = copy.deepcopy(template).to(where)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        before = [p.detach().clone() for p in model.parameters()]
        with learner_code(f"with the model on {where} and the batch on the CPU: "):
            losses = [train_step(model, images, labels, optimizer) for _ in range(steps)]
        if not all(isinstance(loss, torch.Tensor) and loss.dim() == 0 for loss in losses):
            return "return the loss as a 0-dim tensor (loss.detach()), not a number"
        if not same_device(losses[0].device, where):
            return f"the loss is on {losses[0].device}, the model on {where}: compute it there"
        if where.type == "meta":
            continue  # shapes only: the numbers were checked on the lesson's device
        values = [loss.item() for loss in losses]
        if abs(values[0] - expected) > 1e-4 * max(1.0, abs(expected)):
            return f"first loss {values[0]:.4f}, expected {expected:.4f}: keep the class weights"
        if not all(math.isfinite(v) for v in values):
            return f"the loss is not finite: {values}"
        if all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True)):
            return "the parameters did not change: call loss.backward() and optimizer.step()"
        if not values[-1] < values[0]:
            return f"the loss did not go down over {steps} steps on one batch: {values}"
    return None


@exercise("02_tensor_made_in_forward", "a tensor made inside forward")
def check_made_in_forward(module_class: type | None, device: torch.device) -> str | None:
    """A class like the lesson's ``AddPositions`` (``self.linear(x) + arange(T)[:, None]`` for ``x`` of shape
    (B, T, D), ``dim=4`` by default) whose forward makes nothing on the CPU. Built with its defaults, it must compute
    that on the CPU, the same output on every call; then it runs on ``device``, and, when that is not a CUDA GPU, on
    the meta device, which refuses a tensor that ``forward`` made on the CPU as a GPU does."""
    import copy

    from torch import nn

    from helpers.placement import gpu_or_meta

    if isinstance(module_class, nn.Module):
        return "pass the class itself (AddPositionsFixed), not an instance of it"
    if not (isinstance(module_class, type) and issubclass(module_class, nn.Module)):
        return f"expected a class derived from nn.Module, got {type(module_class).__name__}"
    x = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))  # (B, T, D), on the CPU
    with torch.random.fork_rng(devices=[]), torch.no_grad():  # the learner's seed stays as it was
        torch.manual_seed(0)
        with learner_code("building the module with its defaults raised "):
            module = module_class()
        with learner_code("on the CPU, forward raised "):
            first, second = module(x), module(x)
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return f"forward should return a tensor, got {type(first).__name__}"
    if first.shape != second.shape or not torch.equal(first, second):
        return (
            "two calls on the same input gave different outputs: a layer built inside forward gets new random "
            "weights on every call; build it once in __init__"
        )
    linear = getattr(module, "linear", None)
    if not isinstance(linear, nn.Linear):
        return "keep the layer as self.linear, an nn.Linear built in __init__"
    with torch.no_grad():
        expected = linear(x) + torch.arange(x.shape[1])[:, None]  # (B, T, D)
    if first.shape != expected.shape or not torch.allclose(first, expected):
        return "on the CPU it does not compute self.linear(x) + positions[:, None] as AddPositions does"
    for where in dict.fromkeys([torch.device(device), gpu_or_meta(device)]):  # one run when both are the same GPU
        moved = copy.deepcopy(module).to(where)
        hint = learner_code(f"with the module and its input on {where}: ", "; make it where the input is")
        with hint, torch.no_grad():
            out = moved(x.to(where))
        if not same_device(out.device, where):
            return f"the output is on {out.device}, the input on {where}: make every tensor of forward there"
        if where.type != "meta" and not torch.allclose(out.cpu(), expected, rtol=1e-3, atol=1e-3):
            return f"on {where} the output differs from the CPU's"
    return None
