"""Moving batches to a device: nested containers, a loader wrapper, and (below) a device-resident batch iterator."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

LEAF_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
"""Values ``to_device`` passes through unchanged."""


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def to_device(batch: Any, device: str | torch.device, non_blocking: bool = False, _path: str = "batch") -> Any:
    """Return ``batch`` with every tensor moved to ``device``; lists, tuples, named tuples and dicts keep their type.

    Numbers, strings, None, dtypes and devices are left alone; anything else raises a TypeError naming where it is.
    ``non_blocking=True`` lets a copy from pinned CPU memory overlap with GPU work.
    """
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, LEAF_TYPES):
        return batch
    if isinstance(batch, Mapping):
        moved = {k: to_device(v, device, non_blocking, f"{_path}[{k!r}]") for k, v in batch.items()}
        try:
            return type(batch)(moved)
        except TypeError:  # a Mapping whose constructor takes other arguments (e.g. defaultdict)
            return moved
    if _is_namedtuple(batch):
        return type(batch)(
            *(to_device(v, device, non_blocking, f"{_path}.{f}") for f, v in zip(batch._fields, batch, strict=True))
        )
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking, f"{_path}[{i}]") for i, v in enumerate(batch))
    raise TypeError(
        f"to_device cannot move {_path} of type {type(batch).__name__}: use tensors inside lists, tuples, "
        "named tuples or dicts (numbers, strings and None are passed through), or convert it with torch.as_tensor."
    )


class DeviceDataLoader:
    """Wrap a DataLoader (or any iterable of batches) so that each batch arrives already on ``device``.

    ``non_blocking`` defaults to True when the loader pins memory and the device is a GPU, the one case where an
    asynchronous copy can overlap with computation.
    """

    def __init__(self, loader: Iterable, device: str | torch.device, non_blocking: bool | None = None) -> None:
        self.loader = loader
        self.device = torch.device(device)
        if non_blocking is None:
            non_blocking = bool(getattr(loader, "pin_memory", False)) and self.device.type != "cpu"
        self.non_blocking = non_blocking

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield to_device(batch, self.device, self.non_blocking)

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"DeviceDataLoader({type(self.loader).__name__}, device={self.device}, non_blocking={self.non_blocking})"
