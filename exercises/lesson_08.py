"""Lesson 08's exercise checkers."""

from __future__ import annotations

import time
from collections.abc import Callable
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from exercises.core import Recorder, exercise, learner_code
from helpers import devices

_SHAPE_FROM_DATA = {
    "nonzero": "nonzero() (torch.where(mask) and argwhere call it too)",
    "index": "indexing with a boolean mask, as in y[pred == y]",
    "masked_select": "masked_select",
    "_unique2": "unique",
    "unique_dim": "unique",
    "unique_consecutive": "unique_consecutive",
    "bincount": "bincount",
    "repeat_interleave": "repeat_interleave",
}
"""How the hint names the aten operators whose output's size depends on the values of their input."""


class ShapeWaits(TorchDispatchMode):
    """Notes every operator whose output's size, or a Python value it returns, depends on the data: to size the
    output, or to return the value, the host waits until the device has computed its input, as with ``.item()``.

    PyTorch tags these operators (``dynamic_output_shape``, ``data_dependent_output``), which is what the meta and
    fake tensors of ``torch.compile`` refuse to run; ``_local_scalar_dense``, the reading behind ``.item()``,
    ``float()`` and ``if t:``, is left to the ``Recorder``, which names the call that made it. Indexing waits only
    with a boolean mask: integer indices give an output of their own size."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name, tags = func._schema.name.split("::")[-1], getattr(func, "tags", ())
        if torch.Tag.dynamic_output_shape in tags:
            masks = [
                i
                for i in (args[1] if name == "index" and len(args) > 1 else [])
                if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
            ]
            if name != "index" or masks:
                self.ops.append(name)
        elif torch.Tag.data_dependent_output in tags and name != "_local_scalar_dense":
            self.ops.append(name)
        return func(*args, **kwargs)

    def named(self) -> str:
        """The operators noted, as the hint names them."""
        return ", ".join(sorted({_SHAPE_FROM_DATA.get(op, op) for op in self.ops}))


@exercise("08_hidden_sync", "find the hidden synchronisation", function=True)
def check_hidden_sync(evaluate: Callable | None, device: torch.device) -> str | None:
    """``evaluate(model, batches)`` returns the accuracy over the batches and waits for the device once: no read to
    the host on every batch, and no tensor whose size depends on the data."""
    g = torch.Generator().manual_seed(8)
    model = torch.nn.Linear(12, 5).to(device)
    batches = [
        (torch.randn(32, 12, generator=g).to(device), torch.randint(0, 5, (32,), generator=g).to(device))
        for _ in range(10)
    ]
    with torch.no_grad():
        correct = sum(int((model(X).argmax(dim=1) == y).sum()) for X, y in batches)
    expected = correct / (32 * len(batches))
    with torch.no_grad(), Recorder() as recorder, ShapeWaits() as shapes:
        got = evaluate(model, batches)
    if isinstance(got, torch.Tensor):
        return "it returned a tensor: read the total back once, at the end, with .item()"
    if not isinstance(got, (int, float)) or abs(got - expected) > 1e-6:
        return f"it returned {got!r}, the accuracy is {expected:.4f}"
    if len(shapes.ops) + len(recorder.host_reads) <= 2:
        return None
    if shapes.ops:
        return (
            f"it made a tensor whose size depends on the data {len(shapes.ops)} times over {len(batches)} batches "
            f"({shapes.named()}): to learn that size the host waits for the device, as .item() does; count the "
            "hits with (pred == y).sum(), whose size is known before it runs, and keep the count on the device"
        )
    reads = ", ".join(sorted(set(recorder.host_reads)))
    return (
        f"it read values back to the host {len(recorder.host_reads)} times over {len(batches)} batches "
        f"({reads}): keep the running count on the device"
    )


TIMED_WORK, EARLIER_WORK = 0.05, 0.2
"""Seconds of queued work the timing checker times, and of the work it queues before the call, off CUDA."""


class _Queue:
    """A stand-in for a device's queue, off CUDA: work is queued at once and done when someone synchronises."""

    def __init__(self) -> None:
        self.pending = 0.0

    def enqueue(self, seconds: float) -> None:
        self.pending += seconds

    def synchronize(self, device: str | torch.device | None = None) -> None:
        time.sleep(self.pending)
        self.pending = 0.0


def _reading(got: object, expected: float, earlier: float) -> str | None:
    """The hint for a timing ``got`` of work that takes ``expected`` seconds, with ``earlier`` seconds queued before."""
    if isinstance(got, torch.Tensor) or not isinstance(got, (int, float)):
        return f"it returned {got!r}: return the seconds as a number"
    if got > 200 * expected:
        return f"it returned {got:.1f}: elapsed_time is in milliseconds, so divide it by 1000"
    if got < 0.5 * expected:
        return (
            f"it returned {got * 1e3:.1f} ms for work that takes {expected * 1e3:.0f} ms: the clock was read before "
            "the work ran; wait for the device before stopping the clock"
        )
    if got > expected + 0.5 * earlier:
        return (
            f"it returned {got * 1e3:.1f} ms for work that takes {expected * 1e3:.0f} ms: it also timed the work "
            "queued before the call; wait for the device before starting the clock"
        )
    return None


@exercise("08_time_call", "time a call on the device's clock", function=True)
def check_time_call(time_call: Callable | None, device: torch.device) -> str | None:
    """``time_call(fn, device)`` returns the seconds ``fn``'s work takes on ``device``, not counting work queued
    before the call: with CUDA events on a CUDA GPU, elsewhere between two ``devices.synchronize`` calls."""
    device = torch.device(device)
    if device.type == "cuda":
        return _check_on_cuda(time_call, device)
    queue = _Queue()
    with mock.patch.object(devices, "synchronize", queue.synchronize):
        queue.enqueue(EARLIER_WORK)  # other work, queued before the call and not waited for
        with learner_code("time_call raised "):
            got = time_call(lambda: queue.enqueue(TIMED_WORK), device)
        queue.synchronize()
    return _reading(got, TIMED_WORK, EARLIER_WORK)


def _check_on_cuda(time_call: Callable, device: torch.device) -> str | None:
    """The same on a real CUDA queue: matrix products, timed by the checker with CUDA events first."""
    with torch.cuda.device(device):
        A = torch.randn(2048, 2048, device=device)

        def work() -> None:
            for _ in range(10):
                A @ A

        work()  # warm-up
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        work()
        end.record()
        torch.cuda.synchronize(device)
        expected = begin.elapsed_time(end) / 1e3
        for _ in range(30):  # other work, queued before the call and not waited for
            A @ A
        with learner_code("time_call raised "):
            got = time_call(work, device)
        torch.cuda.synchronize(device)
    return _reading(got, expected, 3 * expected)
