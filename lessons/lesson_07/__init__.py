"""Lesson 07's own code. Here: what the lesson's cells call (the figure of which rank trains on which sample, the
children's standard error collected, the model with a head the loss never uses and the two processes that train it),
and ``train_in_group``, through which the scripts of lessons 13 and 14 join their groups with the script's own
``setup``. Beside it: ``ddp_train.py``, the DDP script the lesson prints and torchrun runs, and ``harness.py``, which
runs that script's own ``setup`` and ``train`` with the course's checks and its failure demonstration around them."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.distributed import leaving_cleanly, start_method, stop_with_agent, wait_for_exit

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    import matplotlib.pyplot as plt


def train_in_group(args: argparse.Namespace, train: Callable[..., Any], data: Any) -> int:
    """A training script's process from start to end: the group joined with ``ddp_train.setup`` (the lines lesson 07
    prints), ``train(args, data, device)``, the group left cleanly (``leaving_cleanly``); 0 for the exit status. Under
    torchrun the worker also ends when its agent is gone (``stop_with_agent``)."""
    from lessons.lesson_07.ddp_train import setup

    stop_with_agent()
    device = setup(args.device, args.timeout)
    with leaving_cleanly(args.timeout):
        train(args, data, device)
    return 0


def plot_rank_assignment(owners: list[list[int]], title: str = "Which rank gets each sample") -> plt.Axes:
    """One row per epoch, one column per dataset index, coloured by the rank that trains on that sample."""
    import matplotlib.pyplot as plt  # here, not above: torchrun's workers import this package and draw nothing
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    grid = np.asarray(owners)  # (epochs, samples)
    ranks = int(grid.max()) + 1
    _, ax = plt.subplots(figsize=(6.4, 0.9 + 0.45 * len(owners)), layout="constrained")
    ax.imshow(grid, cmap=ListedColormap([f"C{r}" for r in range(ranks)]), vmin=-0.5, vmax=ranks - 0.5, aspect="auto")
    ax.set_xticks(range(grid.shape[1]))
    ax.set_yticks(range(grid.shape[0]), [f"epoch {e}" for e in range(grid.shape[0])])
    ax.set(xlabel="dataset index", title=title)
    handles = [Patch(color=f"C{r}", label=f"rank {r}") for r in range(ranks)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return ax


@contextlib.contextmanager
def child_stderr() -> Iterator[list[str]]:
    """Collect the lines child processes started in the block write to descriptor 2 (not ``sys.stderr``), on exit."""
    lines: list[str] = []
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    level = spawn_log.level
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        spawn_log.setLevel(logging.ERROR)  # its warning that it terminates the other children names process ids
        try:
            yield lines
        finally:
            spawn_log.setLevel(level)
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


class TwoHeads(nn.Module):
    """A body and two heads; forward uses only `head`, so `extra` takes no part in the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head, self.extra = nn.Linear(8, 16), nn.Linear(16, 2), nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).relu())


def three_steps(rank: int, store: str, errors: Any, ddp_options: dict) -> None:
    """Rank `rank` of two trains TwoHeads under DDP on the CPU for three steps; an error it raises goes back to the
    parent through `errors`."""
    timeout = timedelta(seconds=30)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=timeout)
    try:
        model = DDP(TwoHeads(), **ddp_options)
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
    except RuntimeError as err:
        errors.put((rank, err))
    finally:
        dist.destroy_process_group()


def on_two_ranks(**ddp_options: Any) -> list[RuntimeError]:
    """Run three_steps in two processes; the errors they raised, rank 0's first. The processes are forked where a
    forked process can still run autograd, else spawned (they then import this module, as torchrun's processes do)."""
    context = mp.get_context(start_method(backward=True))
    errors = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as folder:
        ranks = [context.Process(target=three_steps, args=(r, f"{folder}/store", errors, ddp_options)) for r in (0, 1)]
        for process in ranks:
            process.start()
        wait_for_exit(ranks, timeout=60)
    found = []
    while not errors.empty():
        found.append(errors.get())
    return [err for _, err in sorted(found, key=lambda pair: pair[0])]
