"""Splitting a layer: tensor parallelism with DTensor and ``parallelize_module``, checked against one process.

    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_17 --demo tp
    torchrun --standalone --nproc-per-node 4 -m lessons.lesson_17 --demo 2d

``--demo tp`` runs on two processes (or more: every rank is one tensor-parallel rank) and does, in one launch, what
the lesson shows: DTensors with each placement and what ``redistribute`` runs between them; a transformer block split
by ``parallelize_module``, with the collectives ``CommDebugMode`` counted in each submodule; its outputs and
gradients set against an unsharded copy with the same weights; the same again with sequence parallelism; and the time
of a step and the bytes each collective carried. ``--demo 2d`` runs on four processes, a (2, 2) mesh named ("dp",
"tp"): tensor parallelism within "tp", ``fully_shard`` over "dp", a few steps of training checked against one process
on the global batch. Rank 0 writes what it found to ``--out``/summary.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import arguments, distributed
from helpers.distributed import say

SUMMARY_FILE = "summary.json"


class Attention(nn.Module):
    """Causal self-attention with separate q, k, v and output projections. The number of heads is read from q's
    output, never stored: split column-wise over N processes, q gives each process 1/N of the heads."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} does not split into {heads} heads")
        self.head_dim = dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq = x.shape[0], x.shape[1]

        def heads(t: torch.Tensor) -> torch.Tensor:  # (batch, seq, local heads * head_dim) -> (batch, heads, seq, hd)
            return t.view(batch, seq, -1, self.head_dim).transpose(1, 2)

        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), is_causal=True)
        return self.o(y.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """Linear, GELU, Linear: dim -> 4 dim -> dim."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm transformer block: x + attention(norm1(x)), then + mlp(norm2(...))."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim), FeedForward(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def tp_plan(sequence_parallel: bool = False) -> dict:
    """The block's plan for ``parallelize_module``: q, k, v and fc1 split by columns (each rank computes its own
    heads, its own hidden units), o and fc2 by rows (each rank's partial sums, added by one all-reduce). With
    ``sequence_parallel`` the layer norms run on each rank's part of the sequence, and the block's input and output
    stay split along the sequence (dimension 1): an all-gather before attention and the MLP, a reduce-scatter after."""
    if not sequence_parallel:
        return {
            **{f"attn.{name}": ColwiseParallel() for name in ("q", "k", "v")},
            "attn.o": RowwiseParallel(),
            "mlp.fc1": ColwiseParallel(),
            "mlp.fc2": RowwiseParallel(),
        }
    gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    return {
        "norm1": SequenceParallel(),
        "attn": gather,
        **{f"attn.{name}": ColwiseParallel() for name in ("q", "k", "v")},
        "attn.o": RowwiseParallel(output_layouts=Shard(1)),
        "norm2": SequenceParallel(),
        "mlp": copy.deepcopy(gather),
        "mlp.fc1": ColwiseParallel(),
        "mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
    }


COLLECTIVES = {
    "all_reduce": "all-reduce",
    "all_gather_into_tensor": "all-gather",
    "reduce_scatter_tensor": "reduce-scatter",
    "all_to_all_single": "all-to-all",
    "broadcast": "broadcast",
    "allreduce": "all-reduce",
    "allgather": "all-gather",
    "_allgather_base": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "_reduce_scatter_base": "reduce-scatter",
    "alltoall_base": "all-to-all",
}
"""The collectives by the name the lesson uses: the functional ones DTensor runs (``torch.ops._c10d_functional``),
then the in-place ``torch.ops.c10d`` ones ``torch.distributed``'s calls run (``allreduce_``)."""


def collective_name(op: object) -> str:
    """A collective's name for a person ("all-gather") from the op or the key CommDebugMode counts it under
    ("c10d_functional.all_gather_into_tensor", or the op itself); the op's own name when it is not one of them."""
    for part in reversed(str(op).split(".")):
        if part.removesuffix("_") in COLLECTIVES:
            return COLLECTIVES[part.removesuffix("_")]
    return str(op)


def named_counts(counts: dict) -> dict[str, int]:
    """CommDebugMode's counts ({op: n}) by collective name, sorted; the ops that are no collective are left out."""
    named: dict[str, int] = {}
    for op, n in counts.items():
        name = collective_name(op)
        if name in COLLECTIVES.values() and n:
            named[name] = named.get(name, 0) + int(n)
    return dict(sorted(named.items()))


def counts_line(counts: dict[str, int]) -> str:
    """Named counts in words, as "1 all-gather, 2 all-reduces"; "none" when empty."""
    parts = [f"{n} {name}{'s' if n != 1 else ''}" for name, n in counts.items() if n]
    return ", ".join(parts) or "none"


class CollectiveBytes(TorchDispatchMode):
    """Notes, while active, each functional collective this process starts and the bytes of its input tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = collective_name(func.overloadpacket.__name__)
        if name in COLLECTIVES.values() and args and isinstance(args[0], torch.Tensor):
            self.seen.append((name, args[0].numel() * args[0].element_size()))
        return func(*args, **(kwargs or {}))


def _parent(name: str) -> str:
    """The enclosing module's name: "attn" for "attn.o", the root ("") for "attn"."""
    return name.rpartition(".")[0]


def module_counts(mode: CommDebugMode, order: Sequence[str]) -> dict[str, dict[str, dict[str, int]]]:
    """Per submodule, the collectives its own code ran (its hooks included, its children's left out), named and in
    the order of ``order`` (``named_modules()``' names), forward then backward: {"attn.o": {"forward": {...}}}.
    CommDebugMode counts a collective under every module that was running, the root and "Global" included."""
    raw: dict[str, dict[str, dict[str, int]]] = {}
    for fqn, passes in getattr(mode, "comm_module_counts", {}).items():
        if fqn != "Global":
            name = fqn.partition(".")[2]  # "Block.attn.o" -> "attn.o"; the root -> ""
            raw[name] = {phase: named_counts(passes.get(phase, {})) for phase in ("forward", "backward")}
    found: dict[str, dict[str, dict[str, int]]] = {}
    for name in order:
        if name not in raw:
            continue
        children = [child for child in raw if child and _parent(child) == name]
        for phase, counts in raw[name].items():
            own = dict(counts)
            for child in children:
                for collective, n in raw[child][phase].items():
                    own[collective] = own.get(collective, 0) - n
            own = {collective: n for collective, n in own.items() if n > 0}
            if own:
                found.setdefault(name, {})[phase] = own
    return found


def largest_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().float() - b.detach().float()).abs().max().item()


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor on every rank: ``full_tensor()`` for a DTensor (a collective), the tensor itself otherwise."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def stored(parameter: DTensor) -> dict:
    """How a DTensor parameter is stored: its placements, the shape this rank holds, the whole shape."""
    return {
        "placements": str(tuple(parameter.placements)),
        "local": list(parameter.to_local().shape),
        "full": list(parameter.shape),
    }


def placements_demo(mesh) -> dict:
    """DTensors with each placement on a 1-D mesh: what each rank holds, and what redistributing runs."""
    rank = dist.get_rank()
    whole = torch.arange(8.0, device=mesh.device_type).reshape(4, 2)
    held = {
        "Shard(0)": distribute_tensor(whole, mesh, [Shard(0)]),
        "Shard(1)": distribute_tensor(whole, mesh, [Shard(1)]),
        "Replicate()": distribute_tensor(whole, mesh, [Replicate()]),
        "Partial()": DTensor.from_local(torch.full((2, 2), rank + 1.0, device=mesh.device_type), mesh, [Partial()]),
    }
    pieces = {name: t.to_local().tolist() for name, t in held.items()}
    targets = {"Replicate()": Replicate(), "Shard(0)": Shard(0), "Shard(1)": Shard(1)}
    moves = []
    for start, target in (
        ("Shard(0)", "Replicate()"),
        ("Partial()", "Replicate()"),
        ("Partial()", "Shard(0)"),
        ("Replicate()", "Shard(0)"),
        ("Shard(0)", "Shard(1)"),
    ):
        with CommDebugMode() as mode:
            moved = held[start].redistribute(mesh, [targets[target]])
            local = moved.to_local()
        moves.append(
            {"from": start, "to": target, "ran": named_counts(mode.get_comm_counts()), "local": local.tolist()}
        )
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, {"pieces": pieces, "moved": [move["local"] for move in moves]})
    return {"ranks": everyone, "moves": moves, "partial_full": held["Partial()"].full_tensor().tolist()}


def step_once(block: nn.Module, x: torch.Tensor, elements: int | None = None) -> torch.Tensor:
    """One forward and backward of ``block`` on ``x``; the loss is the mean square of the output over ``elements``
    values: the whole output's count where this rank holds only its part of the sequence (default: the output's)."""
    out = block(x)
    (out.pow(2).sum() / (elements or out.numel())).backward()
    return out


def gradients(block: nn.Module) -> dict[str, torch.Tensor]:
    return {name: full(p.grad) for name, p in block.named_parameters() if p.grad is not None}


def tp_check(args, mesh, sequence_parallel: bool) -> dict:
    """A block split by ``tp_plan(sequence_parallel)`` against an unsharded copy with the same weights: one forward
    and backward of each on the same batch, the collectives counted, the largest differences."""
    torch.manual_seed(args.seed)
    reference = Block(args.dim, args.heads).to(mesh.device_type)
    block = parallelize_module(copy.deepcopy(reference), mesh, tp_plan(sequence_parallel))
    x = torch.randn(args.batch, args.seq, args.dim, device=mesh.device_type)  # the same batch on every rank
    part = x.chunk(mesh.size(), dim=1)[mesh.get_local_rank()] if sequence_parallel else x
    with CommDebugMode() as mode, CollectiveBytes() as sizes:
        out = step_once(block, part, elements=x.numel())  # each rank's share of the whole batch's mean
    totals = named_counts(mode.get_comm_counts())
    out = DTensor.from_local(out, mesh, [Shard(1)]).full_tensor() if sequence_parallel else out
    expected = step_once(reference, x)
    grads, expected_grads = gradients(block), gradients(reference)
    return {
        "sequence_parallel": sequence_parallel,
        "totals": totals,
        "modules": module_counts(mode, [name for name, _ in block.named_modules()]),
        "bytes": sizes.seen,
        "output_diff": largest_difference(out, expected),
        "gradient_diff": max(largest_difference(grads[n], expected_grads[n]) for n in expected_grads),
        "gradients_compared": len(expected_grads),
        "tokens": args.batch * args.seq,
        "fc1_weight": stored(block.mlp.fc1.weight),
        "norm_grad": str(tuple(getattr(block.norm1.weight.grad, "placements", ()))) or "a plain tensor",
        "parameter_bytes": sum(p.to_local().nbytes if isinstance(p, DTensor) else p.nbytes for p in block.parameters()),
        "full_parameter_bytes": sum(p.nbytes for p in reference.parameters()),
    }


def median_step_seconds(block: nn.Module, x: torch.Tensor, repeats: int) -> float:
    """The median time of a forward and backward of ``block`` on ``x`` (after two untimed ones)."""
    seconds = []
    for i in range(repeats + 2):
        block.zero_grad(set_to_none=True)
        started = time.perf_counter()
        step_once(block, x)
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        if i >= 2:
            seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def timing(args, mesh, all_reduces: int) -> dict:
    """The median step of the block split over the mesh, of the whole block in one process, and of ``all_reduces``
    plain all-reduces of one activation's size (the split block's collectives without the work around them)."""
    torch.manual_seed(args.seed)
    whole = Block(args.dim, args.heads).to(mesh.device_type)
    split = parallelize_module(copy.deepcopy(whole), mesh, tp_plan())
    x = torch.randn(args.batch, args.seq, args.dim, device=mesh.device_type)
    dist.barrier()
    tp_seconds = median_step_seconds(split, x, args.repeats)
    dist.barrier()
    one_seconds = median_step_seconds(whole, x, args.repeats)
    dist.barrier()
    activation, seconds = torch.zeros_like(x), []
    for i in range(args.repeats + 2):
        started = time.perf_counter()
        for _ in range(all_reduces):
            dist.all_reduce(activation)
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
        if i >= 2:
            seconds.append(time.perf_counter() - started)
    return {"tp_seconds": tp_seconds, "one_seconds": one_seconds, "all_reduce_seconds": statistics.median(seconds)}


def tp_demo(args, device: torch.device) -> dict:
    mesh = init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("tp",))
    found = {"placements": placements_demo(mesh)}
    found["tp"] = tp_check(args, mesh, sequence_parallel=False)
    found["sp"] = tp_check(args, mesh, sequence_parallel=True)
    found["timing"] = timing(args, mesh, sum(found["tp"]["totals"].values()))
    return found


def two_d_demo(args, device: torch.device) -> dict:
    """Tensor parallelism within "tp", FSDP2 over "dp", trained ``args.steps`` steps next to one process."""
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    if world % args.tp:
        raise SystemExit(f"{world} processes do not make a mesh with tp={args.tp}")
    mesh = init_device_mesh(device.type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
    dp_rank, dp_size = mesh.get_local_rank("dp"), mesh.size(0)
    torch.manual_seed(args.seed)
    model = nn.Sequential(*(Block(args.dim, args.heads) for _ in range(2))).to(device)
    reference = copy.deepcopy(model)
    for block in model:
        parallelize_module(block, mesh["tp"], tp_plan())  # split within a "tp" row of the mesh
        fully_shard(block, mesh=mesh["dp"])  # and sharded across the "dp" column
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=args.lr)
    data = torch.Generator().manual_seed(args.seed + 1)
    before = torch.cat([full(p).detach().flatten() for p in model.parameters()])
    ratio, losses = None, []
    for _ in range(args.steps):
        x = torch.randn(args.batch * dp_size, args.seq, args.dim, generator=data).to(device)  # the global batch
        loss = model(x.chunk(dp_size)[dp_rank]).pow(2).mean()  # this "dp" row's part of it
        if args.divide_loss:
            loss = loss / dp_size
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ref_optimizer.zero_grad()
        ref_loss = reference(x).pow(2).mean()
        ref_loss.backward()
        ref_optimizer.step()
        losses.append(ref_loss.item())
        weights = torch.cat([full(p).detach().flatten() for p in model.parameters()])
        expected = torch.cat([p.detach().flatten() for p in reference.parameters()])
        if ratio is None:
            moved, should = (weights - before).abs(), (expected - before).abs()
            ratio = (moved[should > 1e-8] / should[should > 1e-8]).median().item()
    return {
        "mesh": {"shape": list(mesh.shape), "names": list(mesh.mesh_dim_names)},
        "dp_size": dp_size,
        "tp_size": args.tp,
        "steps": args.steps,
        "losses": losses,
        "weight_diff": largest_difference(weights, expected),
        "gradient_ratio": ratio,
        "fc1_weight": stored(block.mlp.fc1.weight),
    }


def check_verdict(difference: float, tolerance: float) -> str:
    """The check against one process, in words: whether the largest difference is within the tolerance."""
    if difference < 0 or tolerance <= 0:
        raise ValueError(f"a difference is at least 0 and a tolerance above 0, got {difference} and {tolerance}")
    if difference <= tolerance:
        return f"largest difference {difference:.1e}, within the tolerance {tolerance:.0e}: the same"
    return f"largest difference {difference:.1e}, above the tolerance {tolerance:.0e}: NOT the same"


def split_speed_verdict(tp_seconds: float, one_seconds: float, collectives: int, margin: float = 0.1) -> str:
    """One sentence from a measured step of the split block and of the whole block in one process: which took
    longer, by how much, and the collectives each step of the split block waited for."""
    if tp_seconds <= 0 or one_seconds <= 0:
        raise ValueError(f"times per step must be positive, got {tp_seconds} and {one_seconds}")
    ratio = tp_seconds / one_seconds
    waits = f"{collectives} collective{'s' if collectives != 1 else ''} a step"
    added = f"the {waits} and DTensor's work around them"
    if ratio > 1 + margin:
        return (
            f"the split block took {ratio:.1f}x one process's time per step: here what splitting added ({added}) "
            "cost more than computing half of each layer saved"
        )
    if ratio < 1 / (1 + margin):
        return (
            f"the split block took {ratio:.2f}x one process's time per step: computing half of each layer saved more "
            f"than {added} cost"
        )
    return f"the split block took about one process's time per step ({ratio:.2f}x): {added} cost what halving saved"


def traffic_verdict(tp_bytes: int, gradient_bytes: int, tokens: int) -> str:
    """One sentence from the bytes one rank handed to collectives in a step of the split block (forward and
    backward) and the bytes of the block's gradients, which data parallelism all-reduces each step whatever the batch
    holds."""
    if tp_bytes < 0 or gradient_bytes <= 0 or tokens <= 0:
        raise ValueError(
            f"expected bytes >= 0, gradient bytes > 0 and tokens > 0, got {tp_bytes}, {gradient_bytes}, {tokens}"
        )
    ratio = tp_bytes / gradient_bytes
    compared = "more than" if ratio > 1 else "less than" if ratio < 1 else "as much as"
    return (
        f"a step of the split block handed its collectives {tp_bytes / 1024:.0f} KiB per rank for {tokens} tokens, "
        f"{compared} the {gradient_bytes / 1024:.0f} KiB of gradients data parallelism would all-reduce for the "
        f"same block ({ratio:.2f}x); the first grows with the tokens in a step, the second with the parameters"
    )


def dp_gradient_sentence(rule: str, ratio: float, dp_size: int, torch_version: str) -> str:
    """What the 2-D run's first step says about how FSDP2 combined the "dp" ranks' gradients (``rule`` as lesson 14's
    ``gradient_rule`` gives it from ``ratio``), and what to do about it."""
    if rule == "averaged":
        return (
            f'torch {torch_version}: FSDP2 averaged the gradients of the {dp_size} "dp" ranks, and the 2-D processes '
            "took one process's step on the global batch"
        )
    if rule == "summed":
        return (
            f'torch {torch_version}: FSDP2 summed the gradients of the {dp_size} "dp" ranks instead of averaging them, '
            f"a step {ratio:.2f}x one process's (pytorch/pytorch#162338, FSDP2 with gloo in torch 2.8): the run is "
            f'repeated with the loss divided by the size of "dp", {dp_size}, not by the number of processes'
        )
    return (
        f"torch {torch_version}: the first step changed the weights {ratio:.3f}x as much as one process's did, neither "
        'averaged nor summed over "dp"; compare the batch each "dp" rank saw with one process\'s'
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lessons.lesson_17", description=__doc__.splitlines()[0])
    p.add_argument("--demo", choices=("tp", "2d"), default="tp", help="what to run (default tp)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="a GPU per process, or the CPU")
    p.add_argument("--out", default="checkpoints/tp", help="folder for rank 0's summary.json")
    p.add_argument("--dim", type=arguments.positive_int, default=64, help="the block's width (default 64)")
    p.add_argument("--heads", type=arguments.positive_int, default=4, help="attention heads (default 4)")
    p.add_argument("--seq", type=arguments.positive_int, default=16, help="tokens per sequence (default 16)")
    p.add_argument("--batch", type=arguments.positive_int, default=4, help="sequences per rank (default 4)")
    p.add_argument("--repeats", type=arguments.positive_int, default=20, help="timed steps (default 20)")
    p.add_argument("--tp", type=arguments.positive_int, default=2, help="2d: the tp dimension's size (default 2)")
    p.add_argument("--steps", type=arguments.positive_int, default=4, help="2d: training steps (default 4)")
    p.add_argument("--lr", type=float, default=0.1, help="2d: SGD's learning rate (default 0.1)")
    p.add_argument("--divide-loss", action="store_true", help="2d: divide the loss by the dp size (a torch that sums)")
    p.add_argument("--seed", type=int, default=0, help="weights and data (default 0)")
    p.add_argument("--timeout", type=arguments.seconds, default=60.0, help="seconds a collective may wait (default 60)")
    return p.parse_args(argv)


@record
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    distributed.stop_with_agent()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    cuda = args.device == "cuda" or (
        args.device == "auto" and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    )
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(1)  # every process on its own core, however many the machine has
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=args.timeout))
    with distributed.leaving_cleanly(args.timeout):
        found = tp_demo(args, device) if args.demo == "tp" else two_d_demo(args, device)
        found.update(
            demo=args.demo,
            world_size=dist.get_world_size(),
            backend=dist.get_backend(),
            device=device.type,
            torch=torch.__version__,
        )
        if dist.get_rank() == 0:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(found, indent=2))
            say(f"[rank 0] {args.demo}: wrote {Path(args.out) / SUMMARY_FILE}")
    return 0


if __name__ == "__main__":
    distributed.end_process(main())  # no interpreter teardown for gloo's threads to abort in
