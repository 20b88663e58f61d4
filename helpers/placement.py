"""Where does every tensor of a model and a batch live? A table that names the odd ones out of a device mismatch.

Also the second device lessons 02 to 04 raise mismatch errors with (the real GPU, else fake CUDA tensors or the
``meta`` device), and the line that says which of the two raised an error."""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from helpers.text import format_rows
from helpers.transfer import map_batch


@dataclass(frozen=True)
class Placement:
    """Where one tensor lives; ``kind``: "parameter", "buffer", "attribute" (``.to()`` leaves it behind) or "batch"."""

    name: str
    kind: str
    device: torch.device
    shape: tuple[int, ...]
    dtype: torch.dtype


def batch_leaves(batch: Any, prefix: str = "batch") -> list[tuple[str, Any]]:
    """Every leaf of a nested batch (mappings, lists, tuples, named tuples), with the path that reaches it."""
    found: list[tuple[str, Any]] = []
    map_batch(batch, lambda path, leaf: found.append((path, leaf)) or leaf, prefix)  # the walker to_device uses
    return found


def module_tensors(module: nn.Module, prefix: str = "model") -> Iterator[tuple[str, str, torch.Tensor]]:
    """(name, kind, tensor) for every parameter, buffer and plain tensor attribute of ``module`` and its children."""
    for name, param in module.named_parameters():
        yield f"{prefix}.{name}", "parameter", param
    for name, buf in module.named_buffers():
        yield f"{prefix}.{name}", "buffer", buf
    for sub_name, sub in module.named_modules():
        # Registered parameters and buffers live in _parameters/_buffers, so vars() shows only the unregistered ones.
        for attr, value in vars(sub).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                yield f"{prefix}.{sub_name + '.' if sub_name else ''}{attr}", "attribute", value


def placements(model: nn.Module | None = None, batch: Any = None, **more: Any) -> list[Placement]:
    """Where each tensor of ``model``, ``batch`` and any named extra modules or batches (``loss_fn=...``) lives."""
    found = []
    for prefix, source in {"model": model, "batch": batch, **more}.items():  # a None source has no tensors
        if isinstance(source, nn.Module):
            entries = module_tensors(source, prefix)
        else:
            entries = ((name, "batch", t) for name, t in batch_leaves(source, prefix) if isinstance(t, torch.Tensor))
        found += [Placement(name, kind, t.device, tuple(t.shape), t.dtype) for name, kind, t in entries]
    return found


def same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """Device equality that treats a device without an index ("cuda", the current GPU) as any index of its type."""
    a, b = torch.device(a), torch.device(b)
    return a.type == b.type and (a.type == "cpu" or a.index is None or b.index is None or a.index == b.index)


def majority_device(entries: list[Placement]) -> torch.device | None:
    """The device most tensors are on; a tie goes to the device seen first (a model's parameters come first)."""
    if not entries:
        return None
    counts = Counter(e.device for e in entries)
    best = max(counts.values())
    return next(e.device for e in entries if counts[e.device] == best)


def odd_ones_out(entries: list[Placement], expected: str | torch.device | None = None) -> list[Placement]:
    """The entries not on ``expected`` (default: the majority device)."""
    target = torch.device(expected) if expected is not None else majority_device(entries)
    if target is None:
        return []
    return [e for e in entries if not same_device(e.device, target)]


def format_placements(entries: list[Placement], expected: str | torch.device | None = None) -> str:
    """A plain-text table, one row per tensor; when some tensors are odd ones out, a "note" column marks them with
    ``<- odd one out``."""

    if not entries:
        return "(no tensors)"
    odd = {id(e) for e in odd_ones_out(entries, expected)}
    rows = [["name", "kind", "device", "shape", "dtype"] + (["note"] if odd else [])]
    for e in entries:
        row = [e.name, e.kind, str(e.device), str(e.shape), str(e.dtype).removeprefix("torch.")]
        rows.append(row + (["<- odd one out" if id(e) in odd else ""] if odd else []))
    return format_rows(rows)


def report(
    model: nn.Module | None = None, batch: Any = None, expected: str | torch.device | None = None, **more: Any
) -> list[Placement]:
    """Print the table and a verdict naming the odd ones out; return them (empty when all agree)."""
    entries = placements(model, batch, **more)
    target = torch.device(expected) if expected is not None else majority_device(entries)
    odd = odd_ones_out(entries, target)
    print(format_placements(entries, target))
    if target is None:
        print("No tensors found.")
    elif odd:
        names = ", ".join(f"{e.name} ({e.device})" for e in odd)
        how = "expected" if expected is not None else "where most tensors are"
        print(f"Not on {target} ({how}): {names}")
    else:
        print(f"All {len(entries)} tensors are on {target}.")
    return odd


def error_origin(device: str | torch.device, fake: bool = False) -> str:
    """The line a lesson prints above an error about ``device``: a real CUDA error, or which stand-in raised it and
    why (no GPU on this machine, or a lesson that runs on another device)."""
    device = torch.device(device)
    if device.type == "cuda" and not fake:
        return "Real error, with the real GPU as the second device:"
    what = "fake CUDA tensors" if device.type == "cuda" else f"the {device.type} device"
    why = "the lesson does not run on the GPU" if torch.cuda.is_available() else "this machine has no GPU"
    return f"Stand-in error from {what} ({why}):"


# Errors ``cuda_or_fake`` labels as real or stand-in: device mismatches, and the index-device check on a GPU.
ANNOUNCED = (RuntimeError, IndexError)


def _real_gpu(device: str | torch.device) -> torch.device | None:
    """The CUDA GPU that plays the second device: the lesson's when it runs on CUDA; None when none is visible or the
    lesson runs on another device, where a stand-in plays it."""
    if not torch.cuda.is_available():
        return None
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)


def gpu_or_meta(device: str | torch.device) -> torch.device:
    """The CUDA GPU when one is visible and the lesson runs on it (``device``), else the ``meta`` device (shapes, no
    data) as a stand-in."""
    gpu = _real_gpu(device)
    return torch.device("meta") if gpu is None else gpu


@functools.cache
def _fake_mode() -> Any:
    """One FakeTensorMode per process, so fake tensors made in one ``with`` block can be used in the next."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # private: imported only when needed

    class MovesRealTensorsAsFakes(FakeTensorMode):
        """Fakes a real tensor before copying it to another device: older releases (2.8) copy it, needing a driver."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten._to_copy.default and args and not isinstance(args[0], FakeTensor):
                args = (self.from_tensor(args[0]), *args[1:])
            return super().__torch_dispatch__(func, types, args, kwargs)

    return MovesRealTensorsAsFakes(allow_non_fake_inputs=True)


def _index_fakes_with_aten() -> Any:
    """Runs ``fake[index_tensor]`` as ``aten.index``: Python indexing touches the CUDA driver on older releases."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.overrides import TorchFunctionMode

    class IndexFakesWithAten(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            fake_getitem = func is torch.Tensor.__getitem__ and isinstance(args[0], FakeTensor)
            if fake_getitem and isinstance(args[1], torch.Tensor) and args[1].dtype in (torch.int64, torch.int32):
                return torch.ops.aten.index.Tensor(args[0], [args[1]])
            return func(*args, **(kwargs or {}))

    return IndexFakesWithAten()


@contextlib.contextmanager
def cuda_or_fake(device: str | torch.device) -> Iterator[torch.device]:
    """Yield a CUDA device: the real GPU when one is visible and the lesson runs on it (``device``),
    else fake CUDA tensors (FakeTensorMode) inside the block.

    Fake tensors have no data, but PyTorch checks their devices as the CUDA kernels do. Autograd is off inside (older
    releases, 2.8 among them, abort the process when it records an operation on a fake CUDA tensor). A fake device
    mismatch is re-raised as the plain RuntimeError a GPU raises, with PyTorch's message (older releases word it
    differently, see lesson 02). Before a RuntimeError or IndexError leaves the block, the line of ``error_origin`` is
    printed on stdout."""
    gpu = _real_gpu(device)
    if gpu is not None:
        try:
            yield gpu
        except ANNOUNCED:
            print(error_origin(gpu), flush=True)  # on stdout before the error reaches stderr
            raise
        return
    # Module.to() must make new Parameters: older releases set param.data to the fake, leaving a real Parameter on meta.
    overwrite = torch.__future__.get_overwrite_module_params_on_conversion()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        with _fake_mode(), _index_fakes_with_aten(), torch.no_grad():
            yield torch.device("cuda", 0)
    except ANNOUNCED as err:
        print(error_origin("cuda", fake=True), flush=True)
        if type(err).__name__ == "FakeTensorDeviceMismatchError":  # the traceback still points at the block's line
            raise RuntimeError(str(err)).with_traceback(err.__traceback__) from None
        raise
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
