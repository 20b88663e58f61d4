"""Lesson 07 checkers: reference solutions pass, wrong answers do not, and every 07_ checker is covered."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from exercises.checks import CHECKERS

COVERED = {"07_rank_indices", "07_steps_per_epoch", "07_shard", "07_global_mean"}


def test_every_lesson_07_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("07_")} == COVERED


def test_rank_indices() -> None:
    check = CHECKERS["07_rank_indices"]
    assert check([1, 5, 9], 10, 4, 1)
    assert check([2, 6, 0], 10, 4, 2)  # padding repeats index 0
    assert not check([1, 5], 10, 4, 1)  # forgot the padding
    assert not check([2, 3, 4], 10, 4, 1)  # a contiguous block is not how the sampler splits
    assert not check("1, 5, 9", 10, 4, 1)
    assert not check(None, 10, 4, 1)


def test_steps_per_epoch() -> None:
    check = CHECKERS["07_steps_per_epoch"]
    assert check(235, 60_000, 4, 64)
    assert not check(938, 60_000, 4, 64)  # one process on everything
    assert not check(234, 60_000, 4, 64)  # the last, smaller batch is a step too
    assert not check(235.0, 60_000, 4, 64)
    assert not check(None, 60_000, 4, 64)


def test_shard() -> None:
    check = CHECKERS["07_shard"]

    def shard(n: int, rank: int, world_size: int) -> list[int]:
        indices = list(range(n))
        total = math.ceil(n / world_size) * world_size
        indices += (indices * world_size)[: total - n]
        return indices[rank::world_size]

    assert check(shard)
    assert not check(lambda n, rank, world_size: list(range(n))[rank::world_size])  # no padding
    per_rank = lambda n, world_size: math.ceil(n / world_size)  # noqa: E731
    assert not check(lambda n, rank, w: [i % n for i in range(rank * per_rank(n, w), (rank + 1) * per_rank(n, w))])
    assert not check(lambda n, rank, world_size: [*range(n), *range(n)][rank::world_size])  # pads too much
    assert not check(lambda n, rank, world_size: 1 / 0)
    assert not check(None)


def _global_mean(losses: torch.Tensor) -> float:
    totals = torch.stack([losses.sum(), torch.tensor(float(len(losses)))])
    dist.all_reduce(totals)
    return (totals[0] / totals[1]).item()


def _local_mean(losses: torch.Tensor) -> float:
    return losses.mean().item()


def _mean_of_means(losses: torch.Tensor) -> float:
    mean = losses.mean()
    dist.all_reduce(mean)
    return (mean / dist.get_world_size()).item()


def _only_rank_0_reduces(losses: torch.Tensor) -> float:
    totals = torch.stack([losses.sum(), torch.tensor(float(len(losses)))])
    if dist.get_rank() == 0:
        dist.all_reduce(totals)
    return (totals[0] / totals[1]).item()


def test_global_mean() -> None:
    check = CHECKERS["07_global_mean"]
    assert check(_global_mean)
    assert not dist.is_initialized()  # the ranks ran in their own processes
    assert not check(_local_mean)  # each rank its own mean: 2 and 10
    assert not check(_mean_of_means)  # 6, not 7: the ranks hold 3 and 5 losses
    assert not check(_only_rank_0_reduces)  # rank 0 waits in vain: the group's timeout ends it
    assert not check(None)
