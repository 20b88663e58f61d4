"""Lesson 13's training script, which survives a crashed worker (lesson 12 runs it across two nodes): DDP with a
checkpoint every K steps, resumed from on every start.

    torchrun --nnodes 1 --nproc-per-node 2 --max-restarts 2 -m lessons.lesson_13 --steps 60 --every 10

torchrun restarts every worker of the group when one of them dies (``--max-restarts``). Each start of this script
loads the newest checkpoint, if there is one, and goes on from there: the model, the optimizer and the learning-rate
schedule, the epoch and the position inside it, and each rank's random state (its CPU generator's and, on a GPU, that
GPU's). Rank 0 writes the checkpoint atomically (helpers.checkpoints: a temporary file, then a rename), and every rank
waits at a barrier until it is written, so no rank runs ahead of a checkpoint that might not exist. ``--crash-rank R
--crash-at S`` kills rank R at step S in the group's first attempt (the rehearsal of a worker that dies); the loss of
every step goes to ``losses.jsonl`` with the attempt that computed it.

A cluster also stops jobs: SLURM sends SIGTERM when it preempts a job or the time limit comes (and SIGUSR1 ahead of
time when asked, ``#SBATCH --signal=B:USR1@120``), then kills. On SIGTERM or SIGUSR1 each rank finishes the step under
way, all ranks agree to stop after the same step, rank 0 writes the checkpoint, and every process exits with status
75 (``STOPPED``: stopped, resume me). The same command started again resumes from that checkpoint. Outside the
training loop (joining the group, the final save) and after a failed step, the signals end the process at once, as by
default: torchrun stopping the workers left after a crash does not wait for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
import torch._dynamo  # noqa: F401  before any process group (helpers.distributed.leaving_cleanly says why)
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers import arguments, ddp_check, distributed
from helpers.checkpoints import load_checkpoint, remove_leftovers, save_checkpoint
from helpers.distributed import say
from helpers.models import build_model
from helpers.single_train import load_data, parser
from lessons.lesson_07 import train_in_group

CHECKPOINT = "resume.pt"
LOSSES = "losses.jsonl"
FINAL = "final.pt"
RESUME_KEYS = ("model", "optimizer", "schedule", "step", "epoch", "position", "rng")  # what checkpoint() saves
STOPPED = 75  # the exit status of a run stopped by a signal, with a checkpoint to resume from (EX_TEMPFAIL: try again)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # a cluster's "stop now" and SLURM's early warning

stop_requested = False  # set by request_stop, read after every step


class Stopped(Exception):
    """Every rank stopped after the same step on a signal, and the checkpoint of that step is on disk."""


def request_stop(signum: int, frame: object) -> None:
    """The handler of SIGTERM and SIGUSR1: note the request; the training loop acts on it after the step under way."""
    global stop_requested
    stop_requested = True


@contextlib.contextmanager
def stop_signals_caught() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGUSR1 only request a stop (``request_stop``); after it, they end the process at
    once again. A step that fails after a signal came (a collective whose peer is gone) ends the process with SIGTERM
    too, as it would have ended without the handler: torchrun stopping its workers after a crash waits for no one."""
    global stop_requested
    stop_requested = False
    previous = {signum: signal.signal(signum, request_stop) for signum in STOP_SIGNALS}
    try:
        yield
    except Exception as exc:
        if stop_requested and not isinstance(exc, Stopped):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def all_agree_to_stop(requested: bool, device: torch.device) -> bool:
    """Whether any rank was asked to stop: every rank's flag goes into one all-reduce (MAX), so every rank gets the
    same answer after the same step and none is left waiting in the next step's all-reduce for a peer that left."""
    flag = torch.tensor(int(requested), device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def parse_args(argv: Sequence[str] | None = None):
    p = parser("python -m lessons.lesson_13", __doc__.splitlines()[0])
    p.set_defaults(out="checkpoints/elastic")
    p.add_argument("--steps", type=arguments.positive_int, default=60, help="optimizer steps in all (default 60)")
    p.add_argument("--every", type=arguments.positive_int, default=10, help="steps between checkpoints (default 10)")
    p.add_argument("--timeout", type=arguments.seconds, default=60.0, help="seconds a collective may wait (default 60)")
    p.add_argument("--crash-rank", type=arguments.rank_or_none, default=-1, help="this rank dies (-1: none)")
    p.add_argument("--crash-at", type=arguments.count, default=0, help="... at this step, in the first attempt only")
    return p.parse_args(argv)


def local_restarts() -> int:
    """How many times this node's agent has restarted its workers (torchrun counts on each node apart: a node whose
    worker failed counts a restart, the others rejoin without counting one)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def group_attempt(device: torch.device) -> int:
    """Which start of the whole group this is (0 the first): the largest count of any node."""
    count = torch.tensor(local_restarts(), device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


@record
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    distributed.check_out_folder(args.out, "lessons.lesson_13")  # a bad --out: one line with the fix, exit 2
    try:
        return train_in_group(args, train, load_data(args)[0])  # nccl on a GPU of its own, else gloo
    except Stopped:
        return STOPPED


def train(args, data, device: torch.device) -> None:
    rank, world_size, attempt = dist.get_rank(), dist.get_world_size(), group_attempt(device)
    out = Path(args.out)  # main made it (check_out_folder)
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = batches(data, sampler, args.batch_size)
    node, local = os.environ.get("GROUP_RANK", "0"), os.environ.get("LOCAL_RANK", "0")  # torchrun sets both
    where = f"{os.environ.get('MASTER_ADDR', 'this process')}:{os.environ.get('MASTER_PORT', '-')}"
    say(f"[node {node}, local rank {local}] rank {rank} of {world_size} on {device}, group's store at {where}")

    torch.manual_seed(args.seed)
    model = DDP(build_model(args.model).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    step, epoch, position = 0, 0, 0  # steps done; the epoch under way and the batches of it already used

    if rank == 0:
        clear_leftovers(out)  # before any save of this attempt
    if (out / CHECKPOINT).exists():
        state = load_checkpoint(out / CHECKPOINT, map_location=device)  # each rank onto its own device
        check_resumable(state, model.module, out / CHECKPOINT, world_size)  # else one line with the fix, exit 2
        step, epoch, position = resume(state, model.module, optimizer, schedule, rank, device)
        say(f"[rank {rank}] attempt {attempt}: resumed at step {step} (epoch {epoch}, batch {position})")
    elif rank == 0:
        say(f"[rank {rank}] attempt {attempt}: no checkpoint in {out}, starting at step 0")

    loss_fn = nn.CrossEntropyLoss()
    with stop_signals_caught():  # SIGTERM or SIGUSR1 now stops the loop after the step under way
        while step < args.steps:
            sampler.set_epoch(epoch)  # the same shuffle as an uninterrupted run's for this epoch
            for index, (X, y) in enumerate(loader):
                if index < position:  # used before the restart
                    continue
                if rank == args.crash_rank and step == args.crash_at and attempt == 0:
                    say(f"[rank {rank}] dies at step {step} (SIGKILL: no cleanup, no last words)")
                    os.kill(os.getpid(), signal.SIGKILL)
                loss = loss_fn(model(X.to(device)), y.to(device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
                step, position = step + 1, index + 1
                mean = loss.detach().clone()
                dist.all_reduce(mean)
                if rank == 0:
                    with open(out / LOSSES, "a") as log:
                        log.write(
                            json.dumps({"step": step, "loss": mean.item() / world_size, "attempt": attempt}) + "\n"
                        )
                if step % args.every == 0 or step == args.steps:
                    checkpoint(out, model, optimizer, schedule, step, epoch, position, device)
                if step == args.steps:
                    break
                if all_agree_to_stop(stop_requested, device):  # SIGTERM or SIGUSR1 reached at least one rank
                    checkpoint(out, model, optimizer, schedule, step, epoch, position, device)
                    say(
                        f"[rank {rank}] stopped by a signal after step {step}; exit {STOPPED}, the same command resumes"
                    )
                    raise Stopped
            else:
                epoch, position = epoch + 1, 0
    gap = ddp_check.replica_gap(model.module)  # every rank's weights against rank 0's (a collective)
    if rank == 0:
        save_checkpoint(model.module.state_dict(), out / FINAL)
        say(f"[rank 0] finished {step} steps in attempt {attempt}; largest difference from rank 0's weights {gap:.1e}")


def batches(data, sampler: DistributedSampler, batch_size: int) -> DataLoader:
    """The loader of this rank's batches. It draws its seed from a generator of its own: by default every pass over a
    DataLoader takes one number from the global generator, and a resumed run, which starts its pass over the epoch
    again after restoring the random state, would then be one draw ahead of a run that never stopped."""
    return DataLoader(data, batch_size=batch_size, sampler=sampler, generator=torch.Generator())


def random_state(device: torch.device) -> dict[str, torch.Tensor]:
    """This process's random state: the CPU generator's and, on a GPU, that GPU's, from which dropout and every other
    random op on the GPU draw."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_random_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    """Put back what ``random_state`` saved: the CPU generator's state, and the GPU's onto this process's GPU."""
    torch.set_rng_state(state["cpu"].cpu())  # map_location moved it to the device; the generators take a CPU one
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


def resume(state: dict, model: nn.Module, optimizer, schedule, rank: int, device: torch.device) -> tuple[int, int, int]:
    """Put a checkpoint's state back into a fresh model, optimizer and schedule, and this rank's random state onto
    ``device``; the steps done, the epoch under way and the batches of it already used."""
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    set_random_state(state["rng"][rank], device)
    return state["step"], state["epoch"], state["position"]


def clear_leftovers(out: Path) -> None:
    """Delete the temporary files that saves of the checkpoint killed mid-write left in ``out``, and say so; the
    checkpoint itself is whole (helpers.checkpoints saves atomically)."""
    for leftover in remove_leftovers(out / CHECKPOINT):
        say(f"[rank 0] removed {leftover.name}, left by a save of {CHECKPOINT} that was killed mid-write")


def resume_problem(state: object, model: nn.Module, world_size: int) -> str | None:
    """Why ``state`` cannot resume this job (another script's checkpoint, another model's weights, another number of
    processes); None when it can."""
    missing = [key for key in RESUME_KEYS if key not in state] if isinstance(state, dict) else list(RESUME_KEYS)
    if missing:
        return f"it lacks {', '.join(map(repr, missing))}: it was not saved by lessons.lesson_13"
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    saved = {name: tuple(t.shape) for name, t in state["model"].items()} if isinstance(state["model"], dict) else {}
    if saved != expected:
        differ = sorted(expected.keys() ^ saved.keys()) or [k for k in expected if expected[k] != saved[k]]
        return f"it holds another model's weights ({differ[0]!r} differs): it was saved with another --model"
    if not isinstance(state["rng"], list) or len(state["rng"]) != world_size:
        saved_by = len(state["rng"]) if isinstance(state["rng"], list) else "another number of"
        return (
            f"it was saved by a job of {saved_by} processes and this one has {world_size}; each rank resumes its own "
            "random state, so resume with as many processes (nnodes x nproc-per-node) as saved it"
        )
    return None


def check_resumable(state: object, model: nn.Module, path: Path, world_size: int) -> None:
    """Refuse a checkpoint this job cannot resume from before any training: every rank exits with status 2 and rank 0
    says why, with the fix."""
    problem = resume_problem(state, model, world_size)
    if problem:
        if dist.get_rank() == 0:
            fix = f"Fix: give another --out to start at step 0, or delete {path}"
            say(f"lessons.lesson_13: cannot resume from {path}: {problem}. {fix}.", sys.stderr)
        raise SystemExit(2)


def checkpoint(
    out: Path, model: DDP, optimizer, schedule, step: int, epoch: int, position: int, device: torch.device
) -> None:
    """Rank 0 writes everything a restart needs; every rank waits until it is on disk."""
    rng = [None] * dist.get_world_size()
    dist.all_gather_object(rng, random_state(device))  # each rank's own random state, its GPU's too
    if dist.get_rank() == 0:
        state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
        state.update(schedule=schedule.state_dict(), step=step, epoch=epoch, position=position, rng=rng)
        save_checkpoint(state, out / CHECKPOINT)
    dist.barrier()


if __name__ == "__main__":
    distributed.end_process(main())  # no interpreter teardown for gloo's threads to abort in
