"""Lesson 07: N DDP processes take the step one process takes on the global batch (``ddp_train --check-equivalence``).
Rank 0 trains a plain copy of the model on each step's global batch (every rank's batch together) and compares."""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DistributedSampler, TensorDataset

TOLERANCE = 1e-6
STEPS = 50
"""Steps compared by default: float32 rounding differences grow with the number of steps."""


def global_batches(
    dataset: TensorDataset, world_size: int, batch_size: int, seed: int, epoch: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Each step's global batch: rank 0's batch, then rank 1's, ..., as DistributedSampler splits them.

    A sampler given ``num_replicas`` and ``rank`` needs no process group, so one process rebuilds every rank's share.
    """
    shares = []
    for r in range(world_size):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=r, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    for step in range(math.ceil(len(shares[0]) / batch_size)):  # every share has the same length (the sampler pads)
        yield dataset[[i for share in shares for i in share[step * batch_size : (step + 1) * batch_size]]]


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters in one detached 1-D tensor."""
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def replica_gap(model: nn.Module) -> float:
    """The largest difference between any rank's weights and rank 0's; every rank must call it."""
    mine = flat_parameters(model)
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    gap = (mine - rank0).abs().max()
    dist.all_reduce(gap, op=dist.ReduceOp.MAX)
    return gap.item()


class Reference:
    """A plain copy of the model (made before DDP wraps it), trained in one process on each step's global batch."""

    def __init__(self, model: nn.Module, args: argparse.Namespace, train_set: TensorDataset, world_size: int) -> None:
        self.model, self.args, self.train_set, self.world_size = copy.deepcopy(model), args, train_set, world_size
        momentum = getattr(args, "momentum", 0.0)  # the scripts' optimizer: plain SGD (ddp_train), with momentum (fsdp)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=momentum)
        self.loss_fn = nn.CrossEntropyLoss()  # the same mean loss as the script's
        self.gaps: list[float] = []  # after each compared step: largest |DDP weight - reference weight|
        self.epoch, self.batches = -1, iter(())

    def step(self, trained: nn.Module | torch.Tensor, epoch: int) -> None:
        """Take the step of the script's step just taken, on the global batch; compare with ``trained``'s weights
        (a model, or its weights already flattened, as a sharded script gathers them)."""
        if 0 < self.args.equivalence_steps <= len(self.gaps):
            return
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches = global_batches(self.train_set, self.world_size, self.args.batch_size, self.args.seed, epoch)
        X, y = next(self.batches)
        device = next(self.model.parameters()).device
        loss = self.loss_fn(self.model(X.to(device)), y.to(device))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        weights = trained if isinstance(trained, torch.Tensor) else flat_parameters(trained)
        self.gaps.append((weights - flat_parameters(self.model)).abs().max().item())

    def report(self) -> tuple[dict, str]:
        """The summary's entries and the line rank 0 logs."""
        found = dict(reference_steps=len(self.gaps), reference_diffs=self.gaps, reference_max_abs_diff=self.gaps[-1])
        return found, (
            f"one process on the global batch, after the first {len(self.gaps)} steps: largest weight difference "
            f"{self.gaps[-1]:.1e} (below {TOLERANCE:g}: {self.gaps[-1] < TOLERANCE})"
        )
