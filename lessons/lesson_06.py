"""Models wrapped in ``nn.DataParallel`` or ``DistributedDataParallel`` (lesson 06): the key prefix a wrapper adds to
a state dict, how DataParallel splits a batch, and the lesson's figure of step times. Processes that train together
are in ``helpers.distributed``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

import torch

if TYPE_CHECKING:
    import matplotlib.pyplot as plt

PREFIX = "module."  # what a wrapper adds in front of every key of the wrapped model's state dict

V = TypeVar("V")


def strip_module_prefix(state_dict: Mapping[str, V]) -> OrderedDict[str, V]:
    """A copy of ``state_dict`` with a leading "module." removed from each key (not a later one: ``enc.module.w``)."""
    stripped: OrderedDict[str, V] = OrderedDict((key.removeprefix(PREFIX), value) for key, value in state_dict.items())
    if len(stripped) != len(state_dict):
        raise ValueError('Stripping "module." would merge two keys; this state dict mixes wrapped and unwrapped keys.')
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        # load_state_dict reads per-module versions from _metadata, keyed by module path; "module" becomes the root "".
        paths = (("" if k == PREFIX[:-1] else k.removeprefix(PREFIX), v) for k, v in metadata.items())
        stripped._metadata = OrderedDict(paths)  # type: ignore[attr-defined]
    return stripped


def replica_split(batch_size: int, num_gpus: int) -> list[int]:
    """Batch sizes DataParallel hands each GPU: its scatter uses ``tensor.chunk(num_gpus)``, which may make fewer."""
    if batch_size < 1 or num_gpus < 1:
        raise ValueError(f"Need batch_size >= 1 and num_gpus >= 1, got {batch_size} and {num_gpus}.")
    return [len(chunk) for chunk in torch.arange(batch_size).chunk(num_gpus)]


def plot_step_times(
    seconds: dict[str, float], title: str = "One training step", ax: plt.Axes | None = None
) -> plt.Axes:
    """Horizontal bars of milliseconds per step, one per setup ("1 GPU", "DataParallel, 2 GPUs"), labelled."""
    from helpers.plotting import new_axes

    ax = new_axes(ax, figsize=(6.4, 0.6 + 0.5 * len(seconds)))
    ms = [s * 1e3 for s in seconds.values()]
    bars = ax.barh(list(seconds), ms, color=[f"C{i}" for i in range(len(ms))])
    ax.bar_label(bars, labels=[f"{v:.1f} ms" for v in ms], padding=3)
    ax.invert_yaxis()  # first entry on top
    ax.set(xlabel="milliseconds per step (median)", xlim=(0, max(ms) * 1.25), title=title)
    return ax
