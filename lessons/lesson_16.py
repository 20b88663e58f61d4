"""Sharded checkpoints with torch.distributed.checkpoint (DCP): each rank saves its own shards, any number of ranks
loads them, a sharded job resumes from them after a crash, and one full copy goes out for inference.

    torchrun --standalone --nproc-per-node 2 -m lessons.lesson_16 --task demo --out checkpoints/16_sharded/demo
    torchrun --standalone --nproc-per-node 3 -m lessons.lesson_16 --task load --load checkpoints/16_sharded/demo
    torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m lessons.lesson_16 --task train --fail-at-step 7

``--task train`` trains lesson 14's MLP, sharded with ``fully_shard``, and writes a DCP checkpoint every ``--every``
steps into a folder of its own (``step_00008``): the model, the optimizer, the position in the data and each rank's
random state. Every start resumes from the newest folder whose ``.metadata`` exists; DCP writes that file last, once
every rank's shards are on disk, so a folder without it is a save that a crash cut short. ``--fail-at-step S`` kills
``--fail-rank`` (default 1) at step S in the group's first attempt. At the end, rank 0 saves the full, unsharded
weights (``final.pt``).

``--task demo`` does the same training, then, on the trained model: lesson 13's save (rank 0's ``torch.save`` of
``model.state_dict()``), the DCP save, a full copy for inference, and ``dcp.async_save`` timed against ``dcp.save``.
``--task load`` loads the demo's DCP checkpoint into a freshly built model on however many processes it runs on, and
compares the weights and the optimizer's state with the ones saved.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler

from helpers import arguments, distributed
from helpers.distributed import say
from helpers.single_train import SUMMARY_FILE, load_data, parser
from lessons.lesson_07 import train_in_group
from lessons.lesson_14 import shard_of, wide_mlp

FULL_MODEL = "full_model.pt"  # the full, unsharded weights that rank 0 saves with torch.save
FULL_OPTIMIZER = "full_optimizer.pt"  # the optimizer's state, unsharded, keyed by parameter name (demo only)
FINAL = "final.pt"  # the full weights at the end of --task train
RANK0_FILE = "rank0_state_dict.pt"  # lesson 13's pattern applied to a sharded model
SAMPLE = "sample.pt"  # a batch and the sharded model's outputs for it, to check the full copy against


def parse_args(argv: Sequence[str] | None = None):
    p = parser("python -m lessons.lesson_16", __doc__.splitlines()[0])
    p.set_defaults(out="checkpoints/16_sharded/run", batch_size=16, lr=0.01, synthetic_size=256)
    p.add_argument("--task", choices=("train", "demo", "load"), default="train", help="what to do (default train)")
    p.add_argument("--width", type=arguments.positive_int, default=64, help="hidden layers' width (default 64)")
    p.add_argument("--depth", type=arguments.positive_int, default=2, help="hidden layers (default 2)")
    p.add_argument("--steps", type=arguments.positive_int, default=12, help="optimizer steps (default 12)")
    p.add_argument("--every", type=arguments.positive_int, default=4, help="steps between checkpoints (default 4)")
    p.add_argument("--fail-at-step", type=arguments.count, default=0, help="a rank dies at this step (0: none)")
    p.add_argument("--fail-rank", type=arguments.count, default=1, help="... this rank (default 1)")
    p.add_argument("--load", default=None, help="--task load: the folder --task demo wrote")
    p.add_argument("--async-width", type=arguments.positive_int, default=1024, help="async_save's model (default 1024)")
    p.add_argument("--saves", type=arguments.positive_int, default=3, help="saves of each kind timed (default 3)")
    p.add_argument("--timeout", type=arguments.seconds, default=60.0, help="seconds a collective may wait (default 60)")
    return p.parse_args(argv)


def sharded_mlp(width: int, depth: int, device: torch.device, seed: int) -> nn.Sequential:
    """Lesson 14's MLP, built from ``seed`` and sharded as lesson 14 shards it: each linear layer, then the whole."""
    torch.manual_seed(seed)
    model = wide_mlp(width, depth).to(device)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def generators(rank: int, device: torch.device) -> dict[str, torch.Tensor]:
    """This rank's random state under keys of its own (``rng_0``, and on a GPU ``cuda_rng_0``): DCP saves a plain
    tensor whose key every rank shares only once, taking it to be the same everywhere."""
    state = {f"rng_{rank}": torch.get_rng_state()}
    if device.type == "cuda":  # dropout on a GPU draws from the GPU's generator
        state[f"cuda_rng_{rank}"] = torch.cuda.get_rng_state(device)
    return state


def put_back_generators(state: dict, rank: int, device: torch.device) -> None:
    """Restore what ``generators`` saved, from the state dict ``dcp.load`` filled."""
    torch.set_rng_state(state[f"rng_{rank}"].cpu())
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[f"cuda_rng_{rank}"].cpu(), device)


def newest_checkpoint(folder: Path) -> Path | None:
    """The newest complete DCP checkpoint under ``folder`` (``step_NNNNN`` with its ``.metadata``), or None."""
    done = sorted(p.parent for p in folder.glob("step_*/.metadata"))
    return done[-1] if done else None


def written_files(folder: Path) -> list[dict]:
    """Every file DCP wrote into ``folder``: its name and size in bytes, by name."""
    return [{"name": p.name, "bytes": p.stat().st_size} for p in sorted(folder.iterdir()) if p.is_file()]


def largest_state_difference(saved: dict, loaded: dict) -> float:
    """The largest absolute difference between two state dicts of the same keys, nested dicts included; a key or a
    shape missing from ``loaded`` is infinitely different."""
    gap = 0.0
    for key, value in saved.items():
        other = loaded.get(key) if isinstance(loaded, dict) else None
        if isinstance(value, dict):
            gap = max(gap, largest_state_difference(value, other if isinstance(other, dict) else {}))
        elif isinstance(value, torch.Tensor):
            if not isinstance(other, torch.Tensor) or other.shape != value.shape:
                return float("inf")
            gap = max(gap, (value.double() - other.double()).abs().max().item() if value.numel() else 0.0)
    return gap


def async_verdict(save_seconds: float, async_seconds: float, margin: float = 0.2) -> str:
    """One sentence from two measured times the training loop was blocked per save, by dcp.save and by
    dcp.async_save on the same model: which blocked it less, or that they were within ``margin`` of each other."""
    if save_seconds <= 0 or async_seconds <= 0:
        raise ValueError(f"blocked times must be positive, got {save_seconds} and {async_seconds}")
    ratio = async_seconds / save_seconds
    if ratio < 1 / (1 + margin):
        return (
            f"async_save blocked the loop {ratio:.2f}x as long as dcp.save: the write to disk ran in the background "
            "while training went on"
        )
    if ratio > 1 + margin:
        return (
            f"async_save blocked the loop {ratio:.1f}x as long as dcp.save: on a checkpoint this small its set-up "
            "costs more than the write it moves to the background"
        )
    return f"async_save and dcp.save blocked the loop about as long ({ratio:.2f}x): the write was too short to matter"


@record
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    distributed.check_out_folder(args.out, "lessons.lesson_16")  # a bad --out: one line with the fix, exit 2
    return train_in_group(args, run_task, load_data(args)[0])  # nccl on a GPU of its own, else gloo


def run_task(args, data, device: torch.device) -> None:
    if args.task == "load":
        load_elsewhere(args, device)
        return
    model, optimizer, summary = train(args, data, device)
    if args.task == "demo":
        summary.update(demo(args, model, optimizer, device))
    if dist.get_rank() == 0:
        (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))


def train(args, data, device: torch.device):
    """Train with a DCP checkpoint every ``--every`` steps, resuming from the newest; the model, its optimizer and
    rank 0's summary."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))  # one node: its agent's count is the group's
    out = Path(args.out)
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, generator=torch.Generator())
    model = sharded_mlp(args.width, args.depth, device, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    progress = {"step": 0, "epoch": 0, "position": 0}  # steps done; the epoch under way and its batches used

    found = newest_checkpoint(out)
    if found is not None:
        model_state, optim_state = get_state_dict(model, optimizer)  # the shapes and shards to load into
        state = {"model": model_state, "optim": optim_state, "progress": progress, **generators(rank, device)}
        dcp.load(state, checkpoint_id=found)  # each rank reads the pieces of its own shards
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        put_back_generators(state, rank, device)
        progress = state["progress"]
        say(f"[rank {rank}] attempt {attempt}: resumed from {found.name} at step {progress['step']}")
    elif rank == 0:
        say(f"[rank {rank}] attempt {attempt}: no checkpoint in {out}, starting at step 0")

    loss_fn = nn.CrossEntropyLoss()
    step, epoch, position = progress["step"], progress["epoch"], progress["position"]
    while step < args.steps:
        sampler.set_epoch(epoch)
        for index, (X, y) in enumerate(loader):
            if index < position:  # used before the restart
                continue
            if args.fail_at_step and step == args.fail_at_step and rank == args.fail_rank and attempt == 0:
                say(f"[rank {rank}] dies at step {step} (SIGKILL)")
                os.kill(os.getpid(), signal.SIGKILL)
            X = nn.functional.dropout(X.to(device), 0.1)  # a random op: the resumed random state must match
            loss = loss_fn(model(X), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step, position = step + 1, index + 1
            if step % args.every == 0:
                model_state, optim_state = get_state_dict(model, optimizer)
                progress = {"step": step, "epoch": epoch, "position": position}
                state = {"model": model_state, "optim": optim_state, "progress": progress, **generators(rank, device)}
                dcp.save(state, checkpoint_id=out / f"step_{step:05d}")  # a collective: every rank writes its part
            if step == args.steps:
                break
        else:
            epoch, position = epoch + 1, 0

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:  # with cpu_offload, only rank 0 receives the full tensors
        torch.save(full, out / FINAL)
        say(f"[rank 0] finished {step} steps in attempt {attempt}")
    return model, optimizer, {"world_size": world_size, "steps": step, "attempt": attempt}


def demo(args, model: nn.Module, optimizer, device: torch.device) -> dict:
    """The trained model saved four ways; what each wrote, and async_save's blocked time against dcp.save's."""
    rank, out = dist.get_rank(), Path(args.out)
    summary: dict = {}

    # 1. Lesson 13's pattern: rank 0 saves what it holds.
    weight = model[1].weight
    if rank == 0:
        torch.save(model.state_dict(), out / RANK0_FILE)
    summary["trap"] = {"type": type(weight).__name__, "local": list(weight.to_local().shape)}
    summary["trap"]["full"] = list(weight.shape)

    # 2. DCP: every rank writes its own shards of the model and the optimizer.
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=out / "dcp")
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, shard_of(weight))
    summary["dcp"] = {"files": written_files(out / "dcp") if rank == 0 else [], "shards": everyone}

    # 3. A full copy: every rank takes part in gathering, rank 0 keeps it and saves it.
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full_model, full_optim = get_state_dict(model, optimizer, options=full)
    torch.manual_seed(1)
    X = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        outputs = model(X.to(device)).cpu()
    if rank == 0:
        torch.save(full_model, out / FULL_MODEL)
        torch.save(full_optim, out / FULL_OPTIMIZER)
        torch.save({"X": X, "outputs": outputs}, out / SAMPLE)

    # 4. async_save against save, on a wider model.
    summary["async"] = time_async_save(args, device, out / "async")
    return summary


def time_async_save(args, device: torch.device, folder: Path) -> dict:
    """Seconds the loop is blocked per ``dcp.save`` and per ``dcp.async_save`` of the same wide model, a training step
    after each; the last async checkpoint loaded into a fresh model and compared with the weights it was given."""
    model = sharded_mlp(args.async_width, 4, device, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    X, y = torch.randn(args.batch_size, 1, 28, 28, device=device), torch.randint(0, 10, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(X), y.to(device)).backward()
        optimizer.step()

    def state() -> dict:
        model_state, optim_state = get_state_dict(model, optimizer)
        return {"model": model_state, "optim": optim_state}

    step()  # the optimizer's state exists from here on
    writers = dist.new_group(backend="gloo")  # async_save's background collectives: apart from training's
    blocked: dict[str, list[float]] = {"save": [], "async_save": []}
    for i in range(args.saves):
        started = time.perf_counter()
        dcp.save(state(), checkpoint_id=folder / f"save_{i}")
        blocked["save"].append(time.perf_counter() - started)
        step()
    pending, waited = None, []
    try:
        for i in range(args.saves):
            if pending is not None:
                started = time.perf_counter()
                pending.result()  # the previous save must be on disk before the next one starts
                waited.append(time.perf_counter() - started)
            saved = {k: v.full_tensor() for k, v in model.state_dict().items()}  # what this save is given
            started = time.perf_counter()
            pending = dcp.async_save(state(), checkpoint_id=folder / f"async_{i}", process_group=writers)
            blocked["async_save"].append(time.perf_counter() - started)
            step()  # runs while the checkpoint is written
        pending.result()
    except Exception as exc:  # an older torch's async_save may refuse this group; the lesson says so
        return {"error": f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"}
    fresh = sharded_mlp(args.async_width, 4, device, args.seed + 1)
    loaded = {"model": get_model_state_dict(fresh)}
    dcp.load(loaded, checkpoint_id=folder / f"async_{args.saves - 1}")
    gap = max((v.full_tensor() - saved[k]).abs().max().item() for k, v in loaded["model"].items())
    now = max((v.full_tensor() - saved[k]).abs().max().item() for k, v in model.state_dict().items())
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "save_seconds": statistics.median(blocked["save"]),
        "async_seconds": statistics.median(blocked["async_save"]),
        "wait_seconds": statistics.median(waited) if waited else 0.0,
        "loaded_gap": gap,
        "moved_since": now,
    }


def load_elsewhere(args, device: torch.device) -> None:
    """Load the demo's DCP checkpoint into a model built from another seed, on this run's number of processes, and
    compare the weights and the optimizer's state with the full copies the demo saved."""
    rank, world_size, source = dist.get_rank(), dist.get_world_size(), Path(args.load)
    model = sharded_mlp(args.width, args.depth, device, args.seed + 1)  # other weights than the saved ones
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=source / "dcp")  # each rank reads the parts of the files its shards need
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    shards = [None] * world_size
    dist.all_gather_object(shards, shard_of(model[1].weight))
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)  # rank 0 receives the whole, in CPU memory
    full_model, full_optim = get_state_dict(model, optimizer, options=full)
    if rank == 0:
        saved_model = torch.load(source / FULL_MODEL, map_location="cpu", weights_only=True)
        saved_optim = torch.load(source / FULL_OPTIMIZER, map_location="cpu", weights_only=True)
        summary = {"world_size": world_size, "shards": shards}
        summary["model_gap"] = largest_state_difference(saved_model, full_model)
        summary["optim_gap"] = largest_state_difference(saved_optim["state"], full_optim["state"])
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        say(
            f"[rank 0] loaded into {world_size} processes: largest difference, model {summary['model_gap']}, "
            f"optimizer {summary['optim_gap']}"
        )


if __name__ == "__main__":
    distributed.end_process(main())  # no interpreter teardown for gloo's threads to abort in
