"""Moving batches to a device: nested batches, a loader wrapper, device-resident data."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

LEAF_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
"""Values ``to_device`` passes through unchanged."""


def map_batch(batch: Any, fn: Callable[[str, Any], Any], path: str = "batch") -> Any:
    """Apply ``fn(path, leaf)`` to every leaf of a nested batch (paths like ``batch['y'][0].labels``), rebuilding each
    mapping, list, tuple and named tuple as its own type (a mapping whose type cannot take a dict becomes a dict)."""
    if isinstance(batch, Mapping):
        mapped = {k: map_batch(v, fn, f"{path}[{k!r}]") for k, v in batch.items()}
        try:
            return type(batch)(mapped)
        except TypeError:
            return mapped
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a named tuple takes its fields as arguments
        return type(batch)(*(map_batch(v, fn, f"{path}.{f}") for f, v in zip(batch._fields, batch, strict=True)))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_batch(v, fn, f"{path}[{i}]") for i, v in enumerate(batch))
    return fn(path, batch)


def to_device(batch: Any, device: str | torch.device, non_blocking: bool = False) -> Any:
    """Return ``batch`` with every tensor moved to ``device``; lists, tuples, named tuples and dicts keep their type.
    Numbers, strings, None, dtypes and devices pass through; anything else raises a TypeError naming where it is.
    ``non_blocking=True``: a copy from pinned memory returns at once; kernels queued later on its stream still wait."""

    def move(path: str, leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            return leaf.to(device, non_blocking=non_blocking)
        if isinstance(leaf, LEAF_TYPES):
            return leaf
        raise TypeError(
            f"to_device cannot move {path} of type {type(leaf).__name__}: use tensors inside lists, tuples, "
            "named tuples or dicts (numbers, strings and None are passed through), or convert it with torch.as_tensor."
        )

    return map_batch(batch, move)


class DeviceDataLoader:
    """Wrap a DataLoader (or any iterable of batches) so that each batch arrives already on ``device``.
    ``non_blocking=None`` means True when the loader pins memory and ``device`` is not the CPU (see ``to_device``)."""

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


# --- device-resident batches ---
def _find_normalize(transform: Any) -> tuple[float, float] | None:
    """The (mean, std) of the single-channel Normalize in ``transform`` (ToTensor, optionally then Normalize), or None;
    any other step (augmentation, resizing) could not be applied once to the whole data set, so it raises."""
    from torchvision import transforms as T

    found = None
    for t in getattr(transform, "transforms", [transform]):
        if isinstance(t, T.Normalize):
            mean = t.mean if isinstance(t.mean, (list, tuple)) else [t.mean]
            std = t.std if isinstance(t.std, (list, tuple)) else [t.std]
            if len(mean) != 1 or len(std) != 1:
                raise ValueError(f"Expected a single-channel Normalize, got mean={t.mean}, std={t.std}.")
            found = float(mean[0]), float(std[0])
        elif not isinstance(t, T.ToTensor):
            raise ValueError(
                f"The dataset's transform contains {type(t).__name__}; DeviceResidentLoader can only reproduce "
                "ToTensor and Normalize. Pass converted images to DeviceResidentLoader directly."
            )
    return found


def _images_and_labels(dataset: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """The raw uint8 images, the labels and the transform of an MNIST-style dataset or a Subset of one."""
    indices = None
    while isinstance(dataset, torch.utils.data.Subset):  # random_split returns Subsets; they may nest
        sub = torch.as_tensor(dataset.indices, dtype=torch.long)
        indices = sub if indices is None else sub[indices]
        dataset = dataset.dataset
    if not hasattr(dataset, "data") or not hasattr(dataset, "targets"):
        raise TypeError(
            f"{type(dataset).__name__} has no .data and .targets tensors; pass images and labels to "
            "DeviceResidentLoader directly."
        )
    images, labels = torch.as_tensor(dataset.data), torch.as_tensor(dataset.targets)
    if indices is not None:
        images, labels = images[indices], labels[indices]
    return images, labels, getattr(dataset, "transform", None)


class DeviceResidentLoader:
    """Every image on the device at once, converted once; each epoch is a device-made permutation cut into batches.

    ``images`` (uint8, (N, H, W) or (N, C, H, W)) go to ``device`` as uint8, a quarter of the bytes of float32, and are
    converted there exactly as ToTensor then Normalize would (``x / 255``, then ``(x - mean) / std`` if both are given).
    ``seed=None`` draws the seed from PyTorch's global generator, so ``torch.manual_seed`` fixes the order. Taught in
    lesson 05 (notebooks/05_mnist_on_gpu.ipynb, the section on data resident on the device)."""

    def __init__(
        self,
        images: torch.Tensor,
        labels: torch.Tensor,
        device: str | torch.device,
        batch_size: int = 128,
        shuffle: bool = True,
        drop_last: bool = False,
        mean: float | None = None,
        std: float | None = None,
        seed: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels.")
        if images.dtype != torch.uint8:
            raise TypeError(f"images must be uint8 (raw pixels), got {images.dtype}.")
        self.device = torch.device(device)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        X = images.to(self.device)
        X = X.unsqueeze(1) if X.dim() == 3 else X  # (N, H, W) -> (N, 1, H, W), the layout ToTensor gives
        X = X.to(torch.float32).div(255)  # the same operations, in the same order, as ToTensor and Normalize
        if mean is not None and std is not None:
            X = X.sub(mean).div(std)
        self.images = X  # (N, C, H, W) float32 on the device
        self.labels = labels.to(self.device, torch.long)
        seed = int(torch.randint(2**62, ()).item()) if seed is None else seed
        try:  # a generator on the device, so that the permutation is made there
            self.generator = torch.Generator(device=self.device).manual_seed(seed)
            torch.randperm(2, device=self.device, generator=self.generator)  # does randperm accept it on this backend?
            self.generator.manual_seed(seed)
        except (RuntimeError, NotImplementedError):  # e.g. no device generators: permute on the CPU, then copy
            self.generator = torch.Generator().manual_seed(seed)
        self.epoch_indices: torch.Tensor | None = None
        """The order of the epoch being (or last) iterated: sample ids, on the device."""

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        device: str | torch.device,
        batch_size: int = 128,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int | None = None,
    ) -> DeviceResidentLoader:
        """Build from a torchvision MNIST-style dataset (or a Subset of one), using the Normalize of its transform."""
        images, labels, transform = _images_and_labels(dataset)
        stats = _find_normalize(transform) if transform is not None else None
        mean, std = stats or (None, None)
        return cls(images, labels, device, batch_size, shuffle, drop_last, mean, std, seed)

    def __len__(self) -> int:
        n = len(self.labels)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.labels)
        if self.shuffle:
            # randperm refuses a generator of another device type than its output: made where the generator lives
            order = torch.randperm(n, device=self.generator.device, generator=self.generator).to(self.device)
        else:
            order = torch.arange(n, device=self.device)
        self.epoch_indices = order
        for b in range(len(self)):
            batch = slice(b * self.batch_size, (b + 1) * self.batch_size)
            if self.shuffle:
                idx = order[batch]
                # index_select on the flat (N, C*H*W) view: one contiguous row gather, much faster than X[idx]
                X = self.images.view(len(self.images), -1).index_select(0, idx)
                yield X.view(-1, *self.images.shape[1:]), self.labels.index_select(0, idx)
            else:
                yield self.images[batch], self.labels[batch]  # views, no copy at all

    def __repr__(self) -> str:
        return (
            f"DeviceResidentLoader({len(self.labels)} samples of {tuple(self.images.shape[1:])} on {self.device}, "
            f"batch_size={self.batch_size}, shuffle={self.shuffle}, drop_last={self.drop_last})"
        )
