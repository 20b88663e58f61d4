"""When the model no longer fits: FSDP2 (``fully_shard``) against DDP on the same model, and the same check as lesson
07's, N sharded processes against one process on the global batch.

    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_14 --wrap fsdp --check
    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_14 --wrap ddp
    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_14 --meta --param-dtype bfloat16
    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d ... -m lessons.lesson_14 --replicas 2 --check  # per node

``fully_shard`` on each linear layer and then on the whole model splits every parameter along its first dimension
across the ranks of a device mesh: each rank keeps 1/N of the parameters, of their gradients and of the optimizer's
state, gathers a layer's full weights just before using it, and frees them after. The script prints the bytes each
rank holds of the three, so they can be set against DDP's full copy on every rank, and, under DDP, the bytes of its
gradient buckets: the flat tensors DDP copies the gradients into to all-reduce them, as large again as the gradients
unless ``--bucket-view`` (``gradient_as_bucket_view=True``) makes the gradients views into them.

The mesh is named with this process's device type: ``init_device_mesh`` without one picks CUDA whenever CUDA is
present, even for a gloo group of CPU processes.

``--meta`` builds the model on the meta device (shapes, no memory), shards it, and only then gives each rank memory
for its own shards (``to_empty``) and fills them; ``--param-dtype`` passes a ``MixedPrecisionPolicy`` (gathered
parameters in that dtype, gradients reduced in float32); ``--replicas R`` shards over a 2-D mesh, replicated across R
groups and sharded within each (HSDP). Every FSDP run also measures one forward and backward with
``reshard_after_forward`` True and False: the all-gathers counted and the gathered bytes kept between the two.
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
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.debug import CommDebugMode
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
    p.add_argument(
        "--divide-loss", action="store_true", help="divide the loss by the processes a shard spans (a torch that sums)"
    )
    p.add_argument("--timeout", type=arguments.seconds, default=60.0, help="seconds a collective may wait (default 60)")
    p.add_argument("--meta", action="store_true", help="FSDP: build on the meta device, shard, then allocate and init")
    p.add_argument("--param-dtype", choices=tuple(DTYPES), default="float32", help="FSDP: dtype of gathered params")
    p.add_argument("--replicas", type=arguments.positive_int, default=1, help="FSDP: replicated groups (HSDP if > 1)")
    p.add_argument("--no-reshard-trade", action="store_true", help="FSDP: skip reshard_trade (it gathers the model)")
    args = p.parse_args(argv)
    if args.wrap == "ddp" and (args.meta or args.param_dtype != "float32" or args.replicas > 1):
        p.error("--meta, --param-dtype and --replicas are FSDP's options: use them with --wrap fsdp")
    if args.check and (args.meta or args.param_dtype != "float32"):
        p.error("--check compares with a float32 copy built on this process: leave out --meta and --param-dtype")
    return args


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def initialise(model: nn.Module) -> None:
    """Fill every linear layer's parameters as ``nn.Linear`` does when it is built, from the current random state."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.reset_parameters()


def shards_repeat(weight: torch.Tensor, shards: int) -> bool:
    """Whether the ``shards`` blocks of rows of a sharded ``weight`` are all equal (every rank drew the same values);
    a collective: it gathers this one weight on every rank."""
    blocks = weight.full_tensor().detach().tensor_split(shards)
    return all(torch.equal(blocks[0], block) for block in blocks[1:])


def materialise(model: nn.Module, mesh, device: torch.device, seed: int) -> dict:
    """A model built on the meta device and sharded: give each rank memory for its own shards on ``device``
    (``to_empty``) and fill them. Returns the bytes allocated for them against the whole model's, and whether the
    first layer's shards came out equal with one seed on every rank, then with a seed of each shard's own."""
    model.to_empty(device=device)  # memory for this rank's shards only, not yet initialised
    allocated = sum(local(p).numel() * local(p).element_size() for p in model.parameters())
    whole = sum(p.numel() * p.element_size() for p in model.parameters())  # a DTensor's numel is the whole tensor's
    shards = mesh.size(mesh.ndim - 1)  # the mesh's last dimension shards; a first one, if any, replicates
    first = next(m for m in model.modules() if isinstance(m, nn.Linear)).weight
    torch.manual_seed(seed)  # the same seed on every rank: the pitfall
    initialise(model)
    same_seed = shards_repeat(first, shards)
    torch.manual_seed(seed + mesh.get_local_rank(mesh.ndim - 1))  # a seed per shard, shared by its replicas
    initialise(model)
    return {
        "allocated": allocated,
        "whole": whole,
        "same_seed_repeats": same_seed,
        "own_seed_repeats": shards_repeat(first, shards),
    }


def gathered(model: nn.Module) -> int:
    """Bytes of the parameters now held whole (gathered by FSDP and not yet freed): those that are not DTensors."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not hasattr(p, "placements"))


def reshard_trade(model: nn.Module, X: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module) -> dict:
    """One forward and backward, without a step, under ``reshard_after_forward`` True and then False: the collectives
    CommDebugMode counts, and the bytes of gathered parameters still held between the forward and the backward."""
    found = {}
    for reshard in (False, True):  # ends on True, fully_shard's default
        model.set_reshard_after_forward(reshard)  # every unit below the root too
        with CommDebugMode() as comms:
            loss = loss_fn(model(X), y)
            held = gathered(model)
            loss.backward()
        model.zero_grad()
        counts = {str(op).split(".")[-1]: n for op, n in comms.get_comm_counts().items()}
        found[str(reshard)] = {
            "held_after_forward": held,
            "collectives": counts,
            "all_gathers": sum(n for op, n in counts.items() if "gather" in op),
        }
    return found


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
    """What a --check run's gradient rule means for the learner, and what to do about it; ``world_size``: the
    processes a parameter is sharded across (all of them on a 1-D mesh, one replica group's under HSDP)."""
    if rule == "averaged":
        return (
            f"torch {torch_version} averaged the gradients over every process, as DDP does: the sharded processes "
            "took one process's step on the global batch, and the loss needs no change."
        )
    if rule == "summed":
        return (
            f"torch {torch_version} summed the {world_size} ranks' gradients instead of averaging them, so every step "
            f"was {world_size} times too large (pytorch/pytorch#162338: FSDP2 with gloo in torch 2.8). Divide the loss "
            f"by {world_size}, the processes a shard spans (the script's --divide-loss), or install a torch that "
            "averages."
        )
    return (
        f"the first step changed the weights {ratio:.3f}x as much as one process on the global batch did: neither "
        "averaged nor summed; compare the data each rank saw and the loss with one process's."
    )


def meta_sentence(allocated: int, whole: int, world_size: int) -> str:
    """What building on the meta device saved, from the bytes a rank allocated against the whole model's."""
    if whole <= 0:
        raise ValueError(f"the whole model must have bytes, got {whole}")
    share = allocated / whole
    if share >= 1:
        return f"this rank allocated {share:.2f} of the whole model's bytes: it held the whole model after all"
    return (
        f"this rank allocated {allocated / 2**20:.2f} MiB for its shards, {share:.3f} of the whole model's "
        f"{whole / 2**20:.2f} MiB (1/{world_size} = {1 / world_size:.3f}): no process held the whole model"
    )


def init_sentence(same_seed_repeats: bool, own_seed_repeats: bool, shards: int) -> str:
    """What seeding did to a sharded initialisation, from whether the shards came out equal under each seeding."""
    same = (
        f"with one seed on every rank, the {shards} shards of the first weight came out equal: the whole weight is "
        "one block of random rows repeated, not a random matrix"
        if same_seed_repeats
        else f"with one seed on every rank, the {shards} shards of the first weight came out different: this "
        "mesh's random numbers keep the shards apart"
    )
    own = "different" if not own_seed_repeats else "equal all the same"
    return f"{same}; with a seed of each shard's own they came out {own}"


def precision_sentence(seen: dict) -> str:
    """What a MixedPrecisionPolicy changed, from the dtypes and bytes a run recorded (``run_training``'s
    "precision"): the gathered weight's dtype and bytes against the float32 bytes of the same weight, and the dtypes
    of what stays sharded."""
    kept = {seen[k] for k in ("sharded", "gradient", "optimizer state")}
    ratio = seen["gathered_bytes"] / seen["float32_bytes"]
    stays = f"the shards, their gradients and the optimizer state stayed {'/'.join(sorted(kept))}"
    if seen["gathered"] == "float32":
        return f"the gathered weight was float32, as stored ({ratio:.2f}x float32's bytes); {stays}"
    return (
        f"the gathered weight was {seen['gathered']}, {ratio:.2f}x the bytes of its float32 copy: forward and backward "
        f"ran in {seen['gathered']} with half the all-gather traffic; {stays}"
    )


def reshard_sentence(trade: dict) -> str:
    """What ``reshard_after_forward=False`` traded, from ``reshard_trade``'s counts and bytes."""
    on, off = trade["True"], trade["False"]
    saved = on["all_gathers"] - off["all_gathers"]
    kept = off["held_after_forward"] - on["held_after_forward"]
    if saved <= 0 and kept <= 0:
        return "reshard_after_forward=False changed neither the all-gathers nor the bytes held here"
    return (
        f"reshard_after_forward=False ran {off['all_gathers']} all-gathers a step instead of {on['all_gathers']}, "
        f"and held {off['held_after_forward'] / 2**20:.2f} MiB of gathered parameters between forward and backward "
        f"instead of {on['held_after_forward'] / 2**20:.2f} MiB"
    )


def width_for(memory_bytes: int, depth: int, share: float = 0.3) -> int:
    """The hidden width (a multiple of 256) at which ``wide_mlp``'s float32 parameters take about ``share`` of
    ``memory_bytes``: with 0.3, DDP's parameters, gradients, momentum and buckets (4 copies) need 1.2 of it."""
    if depth < 2:
        raise ValueError(f"depth must be 2 or more, got {depth}")
    width = int((share * memory_bytes / 4 / (depth - 1)) ** 0.5)  # the (depth - 1) width x width layers dominate
    return max(256, width // 256 * 256)


@record
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    distributed.check_out_folder(args.out, "lessons.lesson_14")  # a bad --out: one line with the fix, exit 2
    return train_in_group(args, train, load_data(args)[0])  # nccl on a GPU of its own, else gloo


def train(args, data, device: torch.device) -> dict:
    """``run_training``, except that a GPU running out of memory (the lesson's DDP run sized to fail) is caught and
    rank 0 writes its first line to the summary instead."""
    try:
        return run_training(args, data, device)
    except torch.OutOfMemoryError as err:
        summary = {"wrap": args.wrap, "out_of_memory": str(err).splitlines()[0]}
        if dist.get_rank() == 0:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        say(f"[rank {dist.get_rank()}] {args.wrap}: torch.OutOfMemoryError: {summary['out_of_memory']}")
        return summary


def run_training(args, data, device: torch.device) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    torch.manual_seed(args.seed)
    if args.meta:
        with torch.device("meta"):  # shapes and dtypes only: no memory yet, on any process
            model = wide_mlp(args.width, args.depth)
    else:
        model = wide_mlp(args.width, args.depth).to(device)
    reference = ddp_check.Reference(model, args, data, world_size) if args.check and rank == 0 else None
    found, shards = {}, world_size  # shards: the processes a parameter is cut across
    if args.wrap == "fsdp":
        if world_size % args.replicas:
            raise ValueError(f"--replicas {args.replicas} does not divide the {world_size} processes")
        if args.replicas > 1:  # HSDP: a full copy in each replica group, sharded within it
            shape = (args.replicas, world_size // args.replicas)
            mesh = init_device_mesh(device.type, shape, mesh_dim_names=("replicate", "shard"))
        else:
            mesh = init_device_mesh(device.type, (world_size,))  # named: without it, CUDA whenever CUDA is present
        policy = MixedPrecisionPolicy(param_dtype=DTYPES[args.param_dtype], reduce_dtype=torch.float32)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh, mp_policy=policy)  # gathered just before it runs, freed after
        fully_shard(model, mesh=mesh, mp_policy=policy)
        shards = mesh.size(mesh.ndim - 1)
        if args.meta:
            found["meta"] = materialise(model, mesh, device, args.seed)  # to_empty, then each shard its own values
            if device.type == "cuda":
                found["meta"]["peak_allocated"] = torch.cuda.max_memory_allocated(device)
    else:
        ids = [device.index] if device.type == "cuda" else None
        model = DDP(model, device_ids=ids, gradient_as_bucket_view=args.bucket_view)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()

    seen = {}

    def note(module: nn.Module, inputs) -> None:  # runs after FSDP's own hook has gathered the layer's weight
        weight = module.weight
        seen.update(gathered=dtype_name(weight.dtype), gathered_bytes=weight.numel() * weight.element_size())
        seen.update(float32_bytes=weight.numel() * 4)

    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    hook = first.register_forward_pre_hook(note) if args.wrap == "fsdp" else None

    step, epoch, ratio, seconds = 0, 0, None, []
    before = full_weights(model) if args.check else None  # every rank takes part in the gathering
    while step < args.steps:
        sampler.set_epoch(epoch)  # a new shuffle for each pass over the data
        for X, y in loader:
            started = time.perf_counter()
            loss = loss_fn(model(X.to(device)), y.to(device))
            if hook is not None:  # the first forward is enough
                hook.remove()
                hook = None
            if args.divide_loss:
                loss = loss / shards
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
    if args.wrap == "fsdp":
        states = [v for state in optimizer.state.values() for v in state.values() if v.dim() > 0]
        seen.update(sharded=dtype_name(local(first.weight).dtype), gradient=dtype_name(local(first.weight.grad).dtype))
        seen["optimizer state"] = dtype_name(local(states[0]).dtype)
        found["precision"] = seen
        if not args.no_reshard_trade:  # with reshard_after_forward=False it holds the whole model gathered
            found["reshard"] = reshard_trade(model, X.to(device), y.to(device), loss_fn)
    timed = seconds[2:] or seconds  # the first steps include one-time set-up
    summary = {"wrap": args.wrap, "world_size": world_size, "shards": shards, "held_bytes": held, "steps": step}
    summary.update(found)
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
            summary.update(report, gradient_ratio=ratio, gradients=gradient_rule(ratio, shards))
            say(line)
            say(f"first step's weight change against one process's: {ratio:.3f}x, gradients {summary['gradients']}")
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / SUMMARY_FILE).write_text(json.dumps({**summary, "ranks": everyone}, indent=2))
    return summary


if __name__ == "__main__":
    distributed.end_process(main())  # no interpreter teardown for gloo's threads to abort in
