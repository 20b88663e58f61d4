"""Lesson 08's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from exercises.core import Recorder, exercise


@exercise("08_hidden_sync", "find the hidden synchronisation", function=True)
def check_hidden_sync(evaluate: Callable | None, device: torch.device) -> str | None:
    """``evaluate(model, batches)`` returns the accuracy over the batches and reads the device once."""
    g = torch.Generator().manual_seed(8)
    model = torch.nn.Linear(12, 5).to(device)
    batches = [
        (torch.randn(32, 12, generator=g).to(device), torch.randint(0, 5, (32,), generator=g).to(device))
        for _ in range(10)
    ]
    with torch.no_grad():
        correct = sum(int((model(X).argmax(dim=1) == y).sum()) for X, y in batches)
    expected = correct / (32 * len(batches))
    with torch.no_grad(), Recorder() as recorder:
        got = evaluate(model, batches)
    if isinstance(got, torch.Tensor):
        return "it returned a tensor: read the total back once, at the end, with .item()"
    if not isinstance(got, (int, float)) or abs(got - expected) > 1e-6:
        return f"it returned {got!r}, the accuracy is {expected:.4f}"
    if len(recorder.host_reads) > 2:
        reads = ", ".join(sorted(set(recorder.host_reads)))
        return (
            f"it read values back to the host {len(recorder.host_reads)} times over {len(batches)} batches "
            f"({reads}): keep the running count on the device"
        )
    return None
