"""Training and evaluation loops that move every batch to the model's device (a no-op for batches already there).

Losses and accuracies are summed on the device and read once per epoch, as each ``.item()`` makes the CPU wait for
the GPU."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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


@dataclass
class History:
    """Per-epoch figures from ``fit``: losses, accuracies (fractions in [0, 1]) and seconds."""

    train_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.train_loss)


def train_epoch(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn = F.cross_entropy,
    scheduler: Any | None = None,
    progress: Any | None = None,
) -> dict[str, float]:
    """One pass over ``loader`` in training mode; returns the mean loss and the accuracy over the samples seen.
    ``scheduler`` is stepped after every batch, as OneCycleLR expects; ``progress`` (a tqdm bar) advances per batch."""
    device = model_device(model)
    model.train()  # dropout and batch-norm layers behave as in training
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    seen = 0
    for X, y in loader:
        X, y = to_device(X, device), to_device(y, device)  # the one place a batch changes device
        logits = model(X)
        loss = loss_fn(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        loss_sum += loss.detach() * len(y)  # stays on the device: no synchronisation per batch
        correct += (logits.argmax(dim=1) == y).sum()
        seen += len(y)
        if progress is not None:
            progress.update(1)
    if seen == 0:
        raise ValueError("The loader yielded no batches.")
    return {"loss": loss_sum.item() / seen, "accuracy": correct.item() / seen}


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


def fit(
    model: nn.Module,
    train_loader: Iterable,
    val_loader: Iterable | None,
    optimizer: torch.optim.Optimizer,
    epochs: int,
    loss_fn: LossFn = F.cross_entropy,
    scheduler: Any | None = None,
    seed: int | None = None,
    progress: bool = True,
) -> History:
    """Train for ``epochs`` epochs, evaluating on ``val_loader`` (unless None) after each; returns the History.
    ``seed`` re-seeds PyTorch first, so that dropout and a DataLoader without a generator of its own repeat (a
    ``DeviceResidentLoader`` keeps the one it was built with). A CPU run then repeats exactly; on CUDA some kernels
    (cuDNN convolutions' backward among them) repeat only under ``torch.use_deterministic_algorithms(True)``."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}.")
    if seed is not None:
        torch.manual_seed(seed)
    history = History()
    try:
        per_epoch = len(train_loader)  # type: ignore[arg-type]
    except TypeError:  # an iterable without a length: the bar counts without a total
        per_epoch = None
    bar = progress_bar(total=per_epoch * epochs if per_epoch else None, unit="batch", disable=not progress)
    try:
        for epoch in range(1, epochs + 1):
            bar.set_description(f"epoch {epoch}/{epochs}")
            start = time.perf_counter()
            train = train_epoch(model, train_loader, optimizer, loss_fn, scheduler, bar)
            history.train_loss.append(train["loss"])
            history.train_accuracy.append(train["accuracy"])
            shown = {"loss": f"{train['loss']:.3f}", "acc": f"{train['accuracy']:.1%}"}
            if val_loader is not None:
                val = evaluate(model, val_loader, loss_fn)
                history.val_loss.append(val["loss"])
                history.val_accuracy.append(val["accuracy"])
                shown["val_acc"] = f"{val['accuracy']:.1%}"
            history.seconds.append(time.perf_counter() - start)  # .item() above has synchronised the device
            bar.set_postfix(shown)
    finally:
        bar.close()
    return history
