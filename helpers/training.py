"""The evaluation loop the training scripts share, which moves every batch to the model's device (a no-op for batches
already there) and sums losses and accuracies on the device, read once at the end, as each ``.item()`` makes the CPU
wait for the GPU; and the progress bar the lessons and the runner draw."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from helpers.models import model_device
from helpers.transfer import to_device

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


SPARSE_INTERVAL = 10.0
"""Seconds between two redraws of the text bar where its stream is no terminal (a notebook without ipywidgets)."""


def progress_bar(**kwargs: Any) -> Any:
    """A tqdm bar: the notebook widget where ipywidgets imports, else tqdm's text bar. Never ``tqdm.auto`` without
    ipywidgets: in a notebook it would warn "IProgress not found" and fall back to the text bar anyway. Where the bar's
    stream is no terminal, as in a notebook, every redraw of the text bar is stored as one more piece of the cell's
    output, so there it redraws at most every ``SPARSE_INTERVAL`` seconds and not for a new description or postfix
    (the next redraw shows them); it always draws when it starts and when it closes."""
    try:
        import ipywidgets  # noqa: F401  (only whether it imports matters)
    except ImportError:
        pass
    else:
        from tqdm.auto import tqdm

        return tqdm(**kwargs)
    from tqdm.std import tqdm

    stream = kwargs.get("file") or sys.stderr
    if getattr(stream, "isatty", lambda: False)():
        return tqdm(**kwargs)

    class SparseBar(tqdm):
        def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
            super().set_description(desc, refresh=False)

        def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **fields: Any) -> None:
            super().set_postfix(ordered_dict, refresh=False, **fields)

    return SparseBar(**{"mininterval": SPARSE_INTERVAL, **kwargs})


def evaluate(model: nn.Module, loader: Iterable, loss_fn: LossFn = F.cross_entropy) -> dict[str, float]:
    """Mean loss and accuracy of ``model`` over ``loader``, in eval mode and without building a graph."""
    device = model_device(model)
    was_training = model.training
    model.eval()  # dropout off, batch norm uses its running statistics
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    seen = 0
    with torch.no_grad():  # no graph: less memory, less time
        for X, y in loader:
            X, y = to_device(X, device), to_device(y, device)
            logits = model(X)
            loss_sum += loss_fn(logits, y) * len(y)
            correct += (logits.argmax(dim=1) == y).sum()
            seen += len(y)
    model.train(was_training)
    if seen == 0:
        raise ValueError("The loader yielded no batches.")
    return {"loss": loss_sum.item() / seen, "accuracy": correct.item() / seen}
