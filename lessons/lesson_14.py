"""When the model no longer fits: FSDP2 (``fully_shard``) against DDP on the same model, and the same check as lesson
07's, N sharded processes against one process on the global batch.

    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_14 --wrap fsdp --check
    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_14 --wrap ddp

``fully_shard`` on each linear layer and then on the whole model splits every parameter along its first dimension
across the ranks of a device mesh: each rank keeps 1/N of the parameters, of their gradients and of the optimizer's
state, gathers a layer's full weights just before using it, and frees them after. The script prints the bytes each
rank holds of the three, so they can be set against DDP's full copy on every rank, and, under DDP, the bytes of its
gradient buckets: the flat tensors DDP copies the gradients into to all-reduce them, as large again as the gradients
unless ``--bucket-view`` (``gradient_as_bucket_view=True``) makes the gradients views into them.

The mesh is named with this process's device type: ``init_device_mesh`` without one picks CUDA whenever CUDA is
present, even for a gloo group of CPU processes.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers import arguments, ddp_check, distributed
from helpers.distributed import say
from helpers.single_train import SUMMARY_FILE, load_data, parser
from lessons.lesson_07 import train_in_group


def parse_args(argv: Sequence[str] | None = None):
    p = parser("python -m lessons.lesson_14", __doc__.splitlines()[0])
    p.set_defaults(out="checkpoints/fsdp", batch_size=16, lr=0.05, equivalence_steps=0)  # --check: every step
    p.add_argument("--wrap", choices=("fsdp", "ddp"), default="fsdp", help="shard with FSDP2, or replicate with DDP")
    p.add_argument("--width", type=arguments.positive_int, default=512, help="hidden layers' width (default 512)")
    p.add_argument("--depth", type=arguments.positive_int, default=4, help="hidden layers (default 4)")
    p.add_argument("--steps", type=arguments.positive_int, default=10, help="optimizer steps (default 10)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum: optimizer state to shard (default 0.9)")
    p.add_argument("--bucket-view", action="store_true", help="DDP: gradients as views into its buckets")
    p.add_argument("--check", action="store_true", help="compare with one process on the global batch (rank 0)")
    p.add_argument("--divide-loss", action="store_true", help="divide the loss by the world size (a torch that sums)")
    p.add_argument("--timeout", type=arguments.seconds, default=60.0, help="seconds a collective may wait (default 60)")
    return p.parse_args(argv)


def wide_mlp(width: int, depth: int) -> nn.Sequential:
    """784 -> width -> ... (``depth`` hidden layers) -> 10, big enough that its parameters are worth sharding."""
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(28 * 28, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def local(tensor: torch.Tensor) -> torch.Tensor:
    """The part of ``tensor`` this rank stores: its shard for FSDP's DTensors, the whole tensor otherwise."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def bucket_bytes(model: DDP) -> int:
    """Bytes of DDP's gradient buckets that the gradients do not already hold: every bucket's size (as DDP logs them)
    where the gradients are separate tensors, none where they are views into the buckets (gradient_as_bucket_view)."""
    logged = model._get_ddp_logging_data()  # the reducer's own record; its buckets are not reachable from Python
    if logged.get("gradient_as_bucket_view"):
        return 0
    return sum(int(size) for size in str(logged.get("bucket_sizes", "")).split(",") if size.strip())


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank stores of the parameters, their gradients and the optimizer's state, and for a DDP model of its
    gradient buckets beyond the gradients (``bucket_bytes``)."""

    def size(tensor: torch.Tensor) -> int:
        part = local(tensor)
        return part.numel() * part.element_size()

    parameters = list(model.parameters())
    states = [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    held = {
        "parameters": sum(size(p) for p in parameters),
        "gradients": sum(size(p.grad) for p in parameters if p.grad is not None),
        "optimizer state": sum(size(s) for s in states if s.dim() > 0),  # not the scalar step counters
    }
    if isinstance(model, DDP):
        held["DDP's buckets"] = bucket_bytes(model)
    return held


def full_weights(model: nn.Module) -> torch.Tensor:
    """Every parameter, whole, flattened into one tensor on every rank (FSDP gathers the shards: a collective)."""
    return torch.cat(
        [(p.full_tensor() if hasattr(p, "full_tensor") else p).detach().flatten() for p in model.parameters()]
    )


def shard_of(parameter: torch.Tensor) -> dict | None:
    """How ``parameter`` is stored on this rank: its placement on the mesh, the shape of the part this rank holds and of
    the whole; None for a plain tensor (DDP: every rank holds all of it)."""
    if not hasattr(parameter, "placements"):
        return None
    return {
        "type": type(parameter).__name__,
        "placements": str(tuple(parameter.placements)),
        "mesh": str(parameter.device_mesh.device_type),
        "local_shape": list(parameter.to_local().shape),
        "full_shape": list(parameter.shape),
    }


def speed_verdict(fsdp_seconds: float, ddp_seconds: float, margin: float = 0.1) -> str:
    """One sentence from two measured times per step on the same model: which wrap was faster, or that they were
    within ``margin`` (a fraction) of each other."""
    if fsdp_seconds <= 0 or ddp_seconds <= 0:
        raise ValueError(f"times per step must be positive, got {fsdp_seconds} and {ddp_seconds}")
    ratio = fsdp_seconds / ddp_seconds
    if ratio > 1 + margin:
        return f"FSDP took {ratio:.1f}x DDP's time per step: sharding cost time here, and DDP's full copy fit too"
    if ratio < 1 / (1 + margin):
        return f"FSDP took {ratio:.2f}x DDP's time per step: sharding was faster here, not only smaller"
    return f"FSDP and DDP took about the same time per step ({ratio:.2f}x): sharding cost no time here"


def gradient_rule(ratio: float, world_size: int) -> str:
    """How the ranks' gradients were combined, from the ratio of a sharded step's weight change to one process's on
    the global batch: "averaged" (about 1), "summed" (about the world size), else "other"."""
    if abs(ratio - 1) < 0.01:
        return "averaged"
    if world_size > 1 and abs(ratio - world_size) < 0.01 * world_size:
        return "summed"
    return "other"


def gradient_sentence(rule: str, ratio: float, world_size: int, torch_version: str) -> str:
    """What a --check run's gradient rule means for the learner, and what to do about it."""
    if rule == "averaged":
        return (
            f"torch {torch_version} averaged the {world_size} ranks' gradients, as DDP does: the sharded processes "
            "took one process's step on the global batch, and the loss needs no change."
        )
    if rule == "summed":
        return (
            f"torch {torch_version} summed the {world_size} ranks' gradients instead of averaging them, so every step "
            f"was {world_size} times too large (pytorch/pytorch#162338: FSDP2 with gloo in torch 2.8). Divide the loss "
            "by the world size (the script's --divide-loss), or install a torch that averages."
        )
    return (
        f"the first step changed the weights {ratio:.3f}x as much as one process on the global batch did: neither "
        "averaged nor summed; compare the data each rank saw and the loss with one process's."
    )


@record
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    distributed.check_out_folder(args.out, "lessons.lesson_14")  # a bad --out: one line with the fix, exit 2
    return train_in_group(args, train, load_data(args)[0])  # nccl on a GPU of its own, else gloo


def train(args, data, device: torch.device) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(args.seed)
    model = wide_mlp(args.width, args.depth).to(device)
    reference = ddp_check.Reference(model, args, data, world_size) if args.check and rank == 0 else None
    if args.wrap == "fsdp":
        mesh = init_device_mesh(device.type, (world_size,))  # named: without it, CUDA whenever CUDA is present
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)  # each layer's weights gathered just before it runs, freed after
        fully_shard(model, mesh=mesh)
    else:
        ids = [device.index] if device.type == "cuda" else None
        model = DDP(model, device_ids=ids, gradient_as_bucket_view=args.bucket_view)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()

    step, epoch, ratio, seconds = 0, 0, None, []
    before = full_weights(model) if args.check else None  # every rank takes part in the gathering
    while step < args.steps:
        sampler.set_epoch(epoch)  # a new shuffle for each pass over the data
        for X, y in loader:
            started = time.perf_counter()
            loss = loss_fn(model(X.to(device)), y.to(device))
            if args.divide_loss:
                loss = loss / world_size
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the step's kernels finished, not only queued
            seconds.append(time.perf_counter() - started)  # with --check, without the comparison below
            step += 1
            if args.check:
                weights = full_weights(model)  # every rank takes part in the gathering
                if reference is not None:
                    reference.step(weights, epoch)
                    if ratio is None:
                        change = (weights - before).abs()
                        expected = (ddp_check.flat_parameters(reference.model) - before).abs()
                        ratio = (change[expected > 1e-8] / expected[expected > 1e-8]).median().item()
            if step == args.steps:
                break
        epoch += 1

    held = held_bytes(model, optimizer)
    timed = seconds[2:] or seconds  # the first steps include one-time set-up
    summary = {"wrap": args.wrap, "world_size": world_size, "held_bytes": held, "steps": step}
    summary["bucket_view"] = args.bucket_view
    summary.update(step_seconds=statistics.median(timed), shard=shard_of(next(model.parameters())))
    if device.type == "cuda":
        summary["peak_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
    everyone = [None] * world_size
    dist.all_gather_object(everyone, summary)
    if rank == 0:
        for r, found in enumerate(everyone):
            parts = ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in found["held_bytes"].items())
            say(f"[rank {r}] {args.wrap}: holds {parts}; median step {found['step_seconds'] * 1e3:.1f} ms")
        if reference is not None:
            report, line = reference.report()
            summary.update(report, gradient_ratio=ratio, gradients=gradient_rule(ratio, world_size))
            say(line)
            say(f"first step's weight change against one process's: {ratio:.3f}x, gradients {summary['gradients']}")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / SUMMARY_FILE).write_text(json.dumps({**summary, "ranks": everyone}, indent=2))
    return summary


if __name__ == "__main__":
    distributed.end_process(main())  # no interpreter teardown for gloo's threads to abort in
