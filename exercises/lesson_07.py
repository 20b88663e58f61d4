"""Lesson 07's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import exercise, first_line, learner_code


def _sampler_indices(dataset_len: int, world_size: int, rank: int) -> list[int]:
    """What DistributedSampler(shuffle=False) gives ``rank`` of ``world_size`` on ``dataset_len`` samples."""
    from torch.utils.data import DistributedSampler

    return list(DistributedSampler(range(dataset_len), num_replicas=world_size, rank=rank, shuffle=False))


@exercise("07_rank_indices", "rank {rank} of {world_size} on {dataset_len} samples")
def check_rank_indices(indices: list[int] | None, dataset_len: int, world_size: int, rank: int) -> str | None:
    """The dataset indices DistributedSampler(shuffle=False) gives ``rank`` of ``world_size``."""
    try:
        answer = [int(i) for i in indices]
    except (TypeError, ValueError):
        return f"expected a list of whole numbers, got {indices!r}"
    expected = _sampler_indices(dataset_len, world_size, rank)
    if answer == expected:
        return None
    if len(answer) != len(expected):
        return (
            f"each rank gets ceil({dataset_len} / {world_size}) = {len(expected)} indices: the sampler pads the "
            "list by repeating its first indices until it divides evenly"
        )
    return "rank r takes every world_size-th index, starting at index r"


@exercise(
    "07_steps_per_epoch", "steps per epoch for {dataset_len:,} samples, {world_size} processes, batch {batch_size} each"
)
def check_steps_per_epoch(steps: int | None, dataset_len: int, world_size: int, batch_size: int) -> str | None:
    """Optimizer steps per epoch for each process (DistributedSampler, then a DataLoader)."""
    import math

    if isinstance(steps, bool) or not isinstance(steps, int):
        return f"expected a whole number, got {type(steps).__name__}"
    if steps == math.ceil(dataset_len / batch_size):
        return "that is one process on the whole dataset; each process sees only its share"
    if steps != math.ceil(math.ceil(dataset_len / world_size) / batch_size):
        return "each process gets ceil(samples / processes) samples, in batches of batch_size"
    return None


@exercise("07_shard", "shard a data set by rank", function=True)
def check_shard(shard: Callable[[int, int, int], list[int]] | None) -> str | None:
    """``shard(n, rank, world_size)`` lists the indices DistributedSampler(shuffle=False) gives ``rank``, padding
    included, for data sets of 1 to 40 samples on 1 to 8 ranks."""
    for n in range(1, 41):
        for world_size in (1, 2, 3, 4, 8):
            for rank in range(world_size):
                expected = _sampler_indices(n, world_size, rank)
                case = f"shard({n}, {rank}, {world_size})"
                with learner_code(f"{case} raised "):
                    got = [int(i) for i in shard(n, rank, world_size)]
                if got == expected:
                    continue
                if len(got) != len(expected):
                    hint = f"every rank gets ceil(n / world_size) = {len(expected)}: pad by repeating the first indices"
                else:
                    hint = "rank r takes every world_size-th index of the padded list, starting at r"
                return f"{case} returned {got}, the sampler gives {expected}; {hint}"
    return None


def _global_mean_rank(fn: Callable, rank: int, store: str, losses: torch.Tensor, conn: Any) -> None:
    """One rank of check_global_mean: join a two-process gloo group, call ``fn``, send back its answer."""
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    try:
        timeout = timedelta(seconds=10)  # a rank that skips a collective: an error, not a hang
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=timeout)
        try:
            conn.send(("ok", float(fn(losses))))
            dist.barrier()  # an answer that runs no collective: neither rank leaves while the other still connects
        finally:
            dist.destroy_process_group()
    except Exception as err:  # the learner's code, in another process: the error goes back as text
        conn.send(("error", first_line(err)))


@exercise("07_global_mean", "average a metric across ranks", function=True)
def check_global_mean(global_mean: Callable[[torch.Tensor], float] | None) -> str | None:
    """``global_mean(losses)``, called on every rank with that rank's per-sample losses, returns the mean over all
    ranks' samples, the same on every rank. Run in two forked CPU processes (gloo) with 3 and 5 losses."""
    import multiprocessing
    import tempfile
    from pathlib import Path

    from helpers.distributed import wait_for_exit

    if "fork" not in multiprocessing.get_all_start_methods():
        return "this checker forks two processes, which this system cannot; run it on Linux"
    shares = [torch.tensor([1.0, 2.0, 3.0]), torch.full((5,), 10.0)]  # rank means 2 and 10; all 8 samples: 7
    context = multiprocessing.get_context("fork")  # the learner's function is copied, not pickled by name
    with tempfile.TemporaryDirectory() as folder:
        pipes = [context.Pipe(duplex=False) for _ in shares]
        args = [(global_mean, r, str(Path(folder) / "store"), shares[r], pipes[r][1]) for r in range(len(shares))]
        ranks = [context.Process(target=_global_mean_rank, args=a, daemon=True) for a in args]
        for process in ranks:
            process.start()
        try:
            wait_for_exit(ranks, timeout=60)
        except TimeoutError:
            return "the ranks did not finish: does every rank call all_reduce the same times?"
        answers = [receive.recv() if receive.poll() else ("error", "no answer") for receive, _ in pipes]
    for rank, (status, value) in enumerate(answers):
        if status != "ok":
            return f"rank {rank}: {value}"
    got = [value for _, value in answers]
    if all(abs(v - 6.0) < 1e-5 for v in got):
        return "that is the mean of the ranks' means; sum losses and counts over ranks instead"
    if not all(abs(v - 7.0) < 1e-5 for v in got):
        return f"the ranks returned {got}, the mean over all 8 losses is 7.0; use dist.all_reduce"
    return None
