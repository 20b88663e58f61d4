"""Lesson 10's largest-batch search: halve, double and bisect a batch size on ``torch.cuda.OutOfMemoryError``
(``largest_batch_size``, its outcome ``BatchSearch`` and its figure ``plot_batch_search``), and the bound that
max_pool2d's 32-bit element count puts on the batch, worked out on the meta device (``largest_batch_within_int32``).
The lesson prints the search where it walks through it."""

from __future__ import annotations

import copy
import functools
import gc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.plotting import new_axes

INT32_MAX = 2**31 - 1
"""The most elements a CUDA kernel that counts them in a 32-bit ``int`` can take."""

INT32_COUNTED = frozenset({"aten::max_pool2d_with_indices"})
"""Operators whose CUDA kernel counts the elements of its output in a 32-bit ``int``: above ``INT32_MAX`` it raises
``RuntimeError: integer out of range`` (``safe_downcast<int, int64_t>(output.numel())`` in PyTorch's
``aten/src/ATen/native/cuda/DilatedMaxPool2d.cu``), however much memory is free. The lesson's CNN calls no other
operator with such a limit: PyTorch splits a cuDNN convolution's batch when a tensor passes it, and its element-wise
kernels split or index in 64 bits."""


def release_cached_memory(device: str | torch.device) -> None:
    """Section 1's two calls: ``gc.collect()``, then, on a CUDA device, ``torch.cuda.empty_cache()``."""
    gc.collect()  # tensors kept alive only by reference cycles are freed here, before the cache is emptied
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        torch.cuda.empty_cache()


class _Outputs(TorchDispatchMode):
    """Notes the number of elements of every output of the operators named in ``names``."""

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__()
        self.names = frozenset(names)
        self.sizes: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        if name in self.names:
            outputs = out if isinstance(out, (tuple, list)) else (out,)
            largest = max((t.numel() for t in outputs if isinstance(t, torch.Tensor)), default=0)
            self.sizes[name] = max(self.sizes.get(name, 0), largest)
        return out


def elements_per_sample(
    model: torch.nn.Module, sample_shape: Iterable[int], operators: Iterable[str] = INT32_COUNTED
) -> dict[str, int]:
    """The elements of the largest output of each operator in ``operators`` (aten names, "aten::...") when ``model``
    runs forward on one sample of ``sample_shape``; operators the forward does not call are left out. It runs on a
    copy of the model on the meta device: shapes only, no memory and no arithmetic, on any machine."""
    meta_model = copy.deepcopy(model).to("meta")
    with _Outputs(operators) as outputs:
        meta_model(torch.empty(1, *sample_shape, device="meta"))
    return outputs.sizes


def largest_batch_within_int32(
    model: torch.nn.Module, sample_shape: Iterable[int], operators: Iterable[str] = INT32_COUNTED
) -> int | None:
    """The largest batch for which every output of ``operators`` in ``model``'s forward has at most ``INT32_MAX``
    elements (by default the outputs of max_pool2d, whose CUDA kernel stops with "integer out of range" above it);
    None when the forward calls none of them. Outputs grow in proportion to the batch, so this is
    ``INT32_MAX // elements per sample``: a bound for the largest-batch search that memory alone does not give on a
    GPU with a lot of it."""
    sizes = elements_per_sample(model, sample_shape, operators)
    return INT32_MAX // max(sizes.values()) if sizes else None


@dataclass(frozen=True)
class BatchSearch:
    """The outcome of ``largest_batch_size``: the answer, every (batch size, fitted) tried, in order, and the
    ``max_size`` the search was given."""

    largest: int
    tried: list[tuple[int, bool]] = field(repr=False)
    max_size: int | None = None

    @property
    def stopped_at_max_size(self) -> bool:
        """Whether ``max_size`` fitted, so that the search stopped there and not at the memory's limit."""
        return self.max_size is not None and self.largest == self.max_size and self.smallest_failed is None

    @property
    def smallest_failed(self) -> int | None:
        """The smallest batch size that ran out of memory; None when every size tried fitted."""
        failed = [size for size, ok in self.tried if not ok]
        return min(failed) if failed else None

    def __str__(self) -> str:
        steps = ", ".join(f"{size} {'fits' if ok else 'OOM'}" for size, ok in self.tried)
        failed = self.smallest_failed
        bound = "no size tried ran out" if failed is None else f"{failed} ran out, {failed / self.largest - 1:.1%} more"
        largest = f"{self.largest}, the max_size" if self.stopped_at_max_size else f"{self.largest}"
        return f"largest batch size that fits: {largest}; {bound} ({len(self.tried)} tries: {steps})"


def largest_batch_size(
    step_fn: Callable[[int], Any],
    start: int,
    *,
    min_size: int = 1,
    max_size: int | None = None,
    refine: bool = True,
    resolution: int = 1,
    relative: float = 0.0,
    device: str | torch.device = "cuda",
    clear: Callable[[], None] | None = None,
) -> BatchSearch:
    """Find the largest batch size for which ``step_fn(batch_size)`` runs without ``torch.cuda.OutOfMemoryError``.

    From ``start``, halves the size until one fits (down to ``min_size``), or doubles it until a try fails or
    ``max_size`` (default: ``start``) has fitted; with ``refine``, then bisects until the size that fitted and the one
    that ran out are at most ``resolution`` apart, or at most ``relative`` times the size that fitted (1/16: within
    6.25%; each try near the limit runs a step as large as memory allows, so the last few tries are the slow ones).
    ``clear`` runs after every try (default: ``release_cached_memory(device)``). Other exceptions propagate; if even
    ``min_size`` does not fit, the last out-of-memory error is raised again."""
    for name, value in (("start", start), ("min_size", min_size), ("resolution", resolution)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if isinstance(relative, bool) or not isinstance(relative, int | float) or not 0 <= relative < 1:
        raise ValueError(f"relative must be a fraction in [0, 1), got {relative!r}.")
    if min_size > start:
        raise ValueError(f"min_size ({min_size}) must not exceed start ({start}).")
    if max_size is not None and (isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < start):
        raise ValueError(f"max_size must be an integer no smaller than start ({start}), got {max_size!r}.")
    if clear is None:
        clear = functools.partial(release_cached_memory, device)
    tried: list[tuple[int, bool]] = []
    last_error: BaseException | None = None

    def fits(size: int) -> bool:
        nonlocal last_error
        ok = True
        try:
            step_fn(size)
        except torch.cuda.OutOfMemoryError as error:
            last_error = type(error)(str(error))  # only the message: the traceback would keep the try's tensors alive
            ok = False
        clear()  # outside the except block, so that nothing of the failed try is still referenced
        tried.append((size, ok))
        return ok

    good: int
    bad: int | None = None
    size = start
    if fits(size):
        good = size
        while max_size is not None and size < max_size:
            size = min(size * 2, max_size)
            if not fits(size):
                bad = size
                break
            good = size
    else:
        while True:
            bad = size
            if size == min_size:
                assert last_error is not None
                raise last_error
            size = max(size // 2, min_size)
            if fits(size):
                good = size
                break
    while refine and bad is not None and bad - good > max(resolution, relative * good):
        middle = (good + bad) // 2
        good, bad = (middle, bad) if fits(middle) else (good, middle)
    return BatchSearch(largest=good, tried=tried, max_size=max_size)


def plot_batch_search(
    tried: list[tuple[int, bool]], limit: int | None = None, title: str = "", ax: plt.Axes | None = None
) -> plt.Axes:
    """The batch sizes a largest-batch search tried, in order: green where the step fitted, red where it ran out; a
    known ``limit`` (a simulated budget) is drawn as a dashed line."""
    ax = new_axes(ax)
    if limit is not None:
        ax.axhline(limit, color="grey", linestyle="--", linewidth=1, label=f"limit ({limit})")
    tries = list(range(1, len(tried) + 1))
    ax.plot(tries, [size for size, _ in tried], color="grey", linewidth=1, zorder=1)
    for ok, label, color in ((True, "fits", "tab:green"), (False, "out of memory", "tab:red")):
        points = [(t, s) for t, (s, fit) in zip(tries, tried, strict=True) if fit == ok]
        if points:
            ax.scatter(*zip(*points, strict=True), color=color, label=label, zorder=2)
    ax.set_yscale("log", base=2)
    ax.set(xticks=tries, xlabel="try", ylabel="batch size", title=title)
    ax.legend()
    return ax
