"""Lesson 07: train a lesson model with DistributedDataParallel, one process per GPU (nccl) or CPU processes (gloo).

    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_07.ddp_train --epochs 2  # two processes, by torchrun
    python -m lessons.lesson_07.ddp_train --epochs 2                                    # one process: a world of one

torchrun gives each process RANK, LOCAL_RANK, WORLD_SIZE and the address where they meet; started without it, the
script is rank 0 of a world of one (nanoGPT's train.py checks for RANK the same way). Only rank 0 logs and saves.
helpers/single_train.py holds the same loop without DDP, and the data and options both scripts share.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from helpers import arguments
from helpers.checkpoints import save_checkpoint
from helpers.models import build_model
from helpers.single_train import CHECKPOINT_FILE, SUMMARY_FILE, load_data, parser
from helpers.training import evaluate


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """single_train's options, plus the timeout of a job of several processes."""
    p = parser("python -m lessons.lesson_07.ddp_train", __doc__.splitlines()[0])
    p.add_argument("--timeout", type=arguments.seconds, default=60.0, help="seconds a collective may wait (default 60)")
    return p.parse_args(argv)


def setup(choice: str, timeout: float) -> torch.device:
    """Join the process group; returns this process's device: GPU LOCAL_RANK, or the CPU ("auto", "cuda", "cpu")."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))  # this process's number on this machine
    gpus_needed = int(os.environ.get("LOCAL_WORLD_SIZE", 1))  # one GPU for each process on this machine
    cuda = choice == "cuda" or (choice == "auto" and torch.cuda.device_count() >= gpus_needed)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)  # this process's "current GPU": its own, not GPU 0 for every process
    alone = {} if "RANK" in os.environ else {"store": dist.HashStore(), "rank": 0, "world_size": 1}  # no torchrun
    dist.init_process_group(
        "nccl" if cuda else "gloo",  # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from torchrun
        timeout=timedelta(seconds=timeout),  # a dead or stuck peer: an error in seconds, not 10 or 30 minutes
        device_id=device if cuda else None,  # binds the group to this GPU: nccl connects at once
        **alone,
    )
    return device


def train(args: argparse.Namespace, data: tuple[TensorDataset, TensorDataset], device: torch.device) -> dict:
    """The DDP training loop, run by every rank inside an initialised process group."""
    rank, world_size, backend = dist.get_rank(), dist.get_world_size(), dist.get_backend()
    train_set, test_set = data
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    print(
        f"[rank {rank}] of {world_size} on {device} ({backend}): {len(sampler)} images per epoch, {len(loader)} steps",
        flush=True,
    )

    torch.manual_seed(args.seed)  # same start on every rank; DDP also broadcasts rank 0's weights when it wraps
    model = build_model(args.model).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()  # a mean: DDP averages the ranks' gradients, so the step is the global batch's

    Path(args.out).mkdir(parents=True, exist_ok=True)
    start, history = time.perf_counter(), []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        totals = torch.zeros(2, device=device)  # (sum of losses, number of images) on this rank
        for X, y in loader:
            X, y = X.to(device), y.to(device)
            loss = loss_fn(model(X), y)
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces (averages) the gradients here, overlapping with the backward pass
            optimizer.step()
            totals[0] += loss.detach() * len(y)
            totals[1] += len(y)
        dist.all_reduce(totals)  # sum over ranks: the loss over every rank's images
        history.append((totals[0] / totals[1]).item())
        if rank == 0:  # one voice and one writer: N processes writing one file can leave it corrupt
            print(f"epoch {epoch + 1}/{args.epochs}: mean training loss {history[-1]:.4f}", flush=True)
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1}
            save_checkpoint(state, Path(args.out) / CHECKPOINT_FILE)  # .module: keys without "module."
    seconds = time.perf_counter() - start

    summary = {"world_size": world_size, "losses": history, "seconds": seconds, "checkpoint": CHECKPOINT_FILE}
    summary.update(backend=backend, dataset=args.dataset, epochs=args.epochs, global_batch=args.batch_size * world_size)
    if rank == 0:
        summary["test_accuracy"] = evaluate(model.module, DataLoader(test_set, batch_size=1000))["accuracy"]
        print(f"test accuracy {summary['test_accuracy']:.1%}, {seconds:.1f} s of training", flush=True)
        (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


@record  # on failure, torchrun's summary shows this process's traceback, not only an exit code
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data = load_data(args)  # before the process group: a download may take longer than the collective timeout
    device = setup(args.device, args.timeout)
    try:
        train(args, data, device)
        dist.barrier()  # leave together: a rank that exits right after its last collective can abort a peer (gloo)
    finally:
        dist.destroy_process_group()  # whatever happened, no process exits holding the group
    return 0


if __name__ == "__main__":
    sys.exit(main())
