"""Train a lesson model with DistributedDataParallel: one process per GPU (nccl), or CPU processes (gloo).

torchrun starts the processes and gives each its RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT:

    torchrun --standalone --nproc_per_node=2 -m helpers.ddp_train --epochs 2 --check-equivalence

Only rank 0 logs and saves. ``--check-equivalence`` makes rank 0 also train a plain copy of the model, in one process,
on each step's global batch (the union of every rank's batch) for the first ``--equivalence-steps`` steps, and print
how far its weights are from the DDP model's after them.
``--fail-rank R`` makes rank R raise on its first step, to see how a failure ends the whole job; R must be one of the
job's ranks, 0 to N-1 (or -1, the default, for none).

``process_plan`` decides how many processes a lesson starts and with which backend: one per visible GPU with nccl
when the lesson's device is a CUDA GPU (a single GPU runs one nccl process), two CPU processes with gloo otherwise.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import IO, NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from helpers.checkpoints import save_checkpoint
from helpers.models import build_model
from helpers.training import evaluate
from helpers.transfer import DeviceResidentLoader

MODULE = "helpers.ddp_train"
SUMMARY_FILE = "summary.json"
CHECKPOINT_FILE = "checkpoint.pt"
EQUIVALENCE_TOLERANCE = 1e-6
EQUIVALENCE_STEPS = 50
"""Steps over which --check-equivalence compares: float32 rounding differences grow with the number of steps."""
STOP_GRACE = 40.0
"""Seconds torchrun gets to stop its workers after SIGTERM (it gives them 30 s) before it is killed."""


def _torchrun_args(nproc: int, script_args: Sequence[str], module: str) -> list[str]:
    """What follows ``torchrun`` on the command line."""
    return [
        "--standalone",  # a rendezvous on this machine, on a free port
        f"--nproc_per_node={nproc}",
        "-m",
        module,
        *script_args,
    ]


def torchrun_command(nproc: int, script_args: Sequence[str] = (), module: str = MODULE) -> list[str]:
    """``torchrun --standalone --nproc_per_node=N -m helpers.ddp_train ...`` run by this Python (same environment)."""
    # python -m torch.distributed.run is what the torchrun command runs; no PATH lookup can pick another Python.
    return [sys.executable, "-m", "torch.distributed.run", *_torchrun_args(nproc, script_args, module)]


def torchrun_line(nproc: int, script_args: Sequence[str] = (), module: str = MODULE) -> str:
    """The same launch as one would type it in a terminal: ``torchrun --standalone ...``."""
    return shlex.join(["torchrun", *_torchrun_args(nproc, script_args, module)])


class ProcessPlan(NamedTuple):
    """How many processes a launch starts, the backend that connects them, and the script's ``--device``."""

    nproc: int
    backend: str
    device: str

    def describe(self) -> str:
        """One line a learner reads: what will run, and why."""
        if self.backend == "nccl":
            gpus = f"{self.nproc} GPU{'s' if self.nproc > 1 else ''}"
            return f"{self.nproc} process{'es' if self.nproc > 1 else ''} with nccl, one per visible GPU ({gpus})"
        return f"{self.nproc} CPU processes with gloo"


CPU_PROCESSES = 2
"""How many gloo processes a plan without GPUs starts: the fewest that have something to synchronise."""


def process_plan(device_type: str, gpu_count: int) -> ProcessPlan:
    """One process per visible GPU with nccl when the lesson's device is a CUDA GPU; else two CPU processes, gloo.

    A machine with one GPU runs one nccl process: DDP over a world of one, with the same ``set_device`` and nccl
    set-up as on eight GPUs. Other accelerators (MPS, XPU) and the CPU get gloo on CPU processes.
    """
    if gpu_count < 0:
        raise ValueError(f"gpu_count cannot be negative, got {gpu_count}.")
    if device_type == "cuda" and gpu_count >= 1:
        return ProcessPlan(gpu_count, "nccl", "cuda")
    return ProcessPlan(CPU_PROCESSES, "gloo", "cpu")


def failure_demo_plan(plan: ProcessPlan) -> ProcessPlan:
    """The plan for a failing-rank demo: ``plan`` when it has a second process to be left waiting, else two on CPUs."""
    return plan if plan.nproc >= 2 else ProcessPlan(CPU_PROCESSES, "gloo", "cpu")


def fail_rank_problem(fail_rank: int, world_size: int) -> str | None:
    """Why ``--fail-rank`` cannot work with ``world_size`` processes, with the fix; None when it can."""
    if fail_rank == -1 or 0 <= fail_rank < world_size:
        return None
    ranks = "0" if world_size == 1 else f"0 to {world_size - 1}"
    return (
        f"--fail-rank {fail_rank} names no rank of this job: with {world_size} process"
        f"{'es' if world_size != 1 else ''} the ranks are {ranks}. Pick one of them, or -1 (the default) for no "
        "failing rank."
    )


def _stop(process: subprocess.Popen) -> None:
    """End torchrun so that it takes its workers with it: SIGTERM first, SIGKILL only if it does not exit."""
    # SIGKILL (what subprocess.run sends on a timeout) cannot be caught: torchrun would die at once and leave its
    # workers, which run in sessions of their own, alive. On SIGTERM it stops them (SIGTERM, then SIGKILL after its
    # own 30 s) and exits.
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def launch(
    nproc: int, script_args: Sequence[str] = (), timeout: float = 120.0, module: str = MODULE
) -> subprocess.CompletedProcess[str]:
    """Run the script under torchrun and capture its output.

    After ``timeout`` seconds (or on Ctrl-C / a kernel interrupt) torchrun is asked to stop its workers and exit;
    a timeout then raises subprocess.TimeoutExpired carrying the output so far. No worker is left running.
    A ``--fail-rank`` that names no rank of ``nproc`` processes raises ValueError before anything starts.
    """
    fail_rank = _fail_rank_in(script_args)
    if module == MODULE and fail_rank is not None:  # refuse what the script would refuse, before anything starts
        problem = fail_rank_problem(fail_rank, nproc)
        if problem:
            raise ValueError(problem)
    command = torchrun_command(nproc, script_args, module)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # what torchrun would set anyway, minus its warning about it
    # Files rather than pipes: reading a pipe waits until every process holding it has exited.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            raise subprocess.TimeoutExpired(command, timeout, output=_read(out), stderr=_read(err)) from None
        except BaseException:  # KeyboardInterrupt: the notebook's stop button
            _stop(process)
            raise
        return subprocess.CompletedProcess(command, process.returncode, _read(out), _read(err))


def _fail_rank_in(script_args: Sequence[str]) -> int | None:
    """The value of ``--fail-rank`` in ``script_args``, if it is there and an integer (else the script complains)."""
    found = None
    for i, arg in enumerate(script_args):
        if arg == "--fail-rank" and i + 1 < len(script_args):
            found = script_args[i + 1]
        elif arg.startswith("--fail-rank="):
            found = arg.partition("=")[2]
    try:
        return int(found) if found is not None else None
    except ValueError:
        return None


def _read(file: IO[str]) -> str:
    """Everything written to a temporary file so far."""
    file.seek(0)
    return file.read()


def root_cause(stderr: str) -> list[str]:
    """From torchrun's failure report: the failed rank, its exit code and its last error line (no paths or times)."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Root Cause")]
    if not starts:
        return []
    block = []
    for line in lines[starts[-1] + 1 :]:
        if line.startswith("="):
            break
        block.append(line.strip())
    found = []
    for text in block:
        key, _, value = text.partition(":")
        if key.strip() in ("rank", "exitcode"):
            found.append(f"{key.strip()}: {value.split('(pid')[0].strip()}")
    last = [text for text in block if text]
    if last:
        found.append(last[-1])  # with @record in the worker, the traceback ends with the exception itself
    return found


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; every option has a default that runs in seconds on two CPU processes."""
    p = argparse.ArgumentParser(prog="python -m helpers.ddp_train", description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synthetic", help="synthetic, MNIST or FashionMNIST (default: synthetic)")
    p.add_argument("--data-dir", default=None, help="data root (default: $COURSE_DATA_DIR, else data/ in the clone)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N training images (0: all)")
    p.add_argument("--synthetic-size", type=int, default=512, help="images in the synthetic training set")
    p.add_argument("--model", default="mlp", help="linear, mlp or cnn (helpers.models)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32, help="per process; the global batch is this times N")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="checkpoints/ddp", help="folder for the checkpoint and summary (rank 0)")
    p.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto: a GPU per process if enough"
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait before failing")
    p.add_argument("--check-equivalence", action="store_true", help="compare with one process on the global batch")
    p.add_argument(
        "--equivalence-steps",
        type=int,
        default=EQUIVALENCE_STEPS,
        help=f"how many first steps --check-equivalence compares (default {EQUIVALENCE_STEPS}; 0: all)",
    )
    p.add_argument(
        "--fail-rank",
        type=int,
        default=-1,
        help="this rank (0 to N-1) raises on its first step, a failure demo; -1: none",
    )
    args = p.parse_args(argv)
    if args.fail_rank < -1:
        p.error(f"--fail-rank {args.fail_rank} names no rank: ranks start at 0; -1 (the default) means none.")
    return args


def synthetic_data(size: int, image_seed: int, teacher_seed: int) -> TensorDataset:
    """Random 28x28 images labelled by a fixed random linear "teacher", so there is something to learn."""
    X = torch.randn(size, 1, 28, 28, generator=torch.Generator().manual_seed(image_seed))  # (N, 1, 28, 28)
    teacher = torch.randn(28 * 28, 10, generator=torch.Generator().manual_seed(teacher_seed))
    y = (X.flatten(1) @ teacher).argmax(dim=1)  # (N,)
    return TensorDataset(X, y)


def image_data(name: str, train: bool, root: str | None, limit: int) -> TensorDataset:
    """MNIST or FashionMNIST as normalised tensors: indexing a tensor is much faster than decoding images one by one."""
    from helpers.data import load_dataset  # imports torchvision, so only when needed

    raw = load_dataset(name, train=train, root=root, verbose=False)
    # The device-resident loader converts the raw uint8 images exactly as the dataset's own transform would
    # (ToTensor, then Normalize); here it is used on the CPU only for that conversion.
    converted = DeviceResidentLoader.from_dataset(raw, "cpu", shuffle=False, seed=0)
    X, y = converted.images, converted.labels  # (N, 1, 28, 28) float32, (N,) int64
    if limit > 0:
        X, y = X[:limit], y[:limit]
    return TensorDataset(X, y)


def load_data(args: argparse.Namespace) -> tuple[TensorDataset, TensorDataset]:
    """Train and test sets. Called before the process group exists, so a first download is under no collective timeout.

    When the files are missing, a lock file next to them lets one process download (or unpack) while the others wait
    for it and then find the files; every process on the machine shares the data folder.
    """
    if args.dataset.lower() == "synthetic":
        train = synthetic_data(args.synthetic_size, args.seed, args.seed)
        test = synthetic_data(max(args.synthetic_size // 4, 1), args.seed + 1, args.seed)  # same teacher
        return train, test
    from filelock import FileLock  # a dependency of torch itself

    from helpers.data import canonical_name, data_dir, is_present

    name, root = canonical_name(args.dataset), data_dir(args.data_dir)
    if is_present(name, root):
        lock = nullcontext()  # nothing to write, so the folder may even be read-only
    else:
        root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(root / f".{name}.lock")
    with lock:
        train = image_data(name, True, args.data_dir, args.limit)
        test = image_data(name, False, args.data_dir, args.limit // 5 if args.limit > 0 else 0)
    return train, test


def device_for_local_rank(requested: str, local_rank: int, local_world_size: int) -> torch.device:
    """cuda:LOCAL_RANK when every local process can have its own GPU (or "cuda" is asked for), else the CPU."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "cuda" or (requested == "auto" and gpus >= local_world_size):
        if local_rank >= gpus:
            raise RuntimeError(f"Local rank {local_rank} needs its own GPU, but only {gpus} are visible.")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def global_batches(
    dataset: TensorDataset, world_size: int, batch_size: int, seed: int, epoch: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield each step's global batch: rank 0's batch, then rank 1's, ..., exactly as DistributedSampler splits them.

    A sampler built with ``num_replicas`` and ``rank`` needs no process group, so one process can rebuild every
    rank's share: all of them shuffle with the same generator (seed + epoch), then rank r takes every N-th index.
    """
    shares = []
    for r in range(world_size):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=r, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    steps = math.ceil(len(shares[0]) / batch_size)  # every share has the same length (the sampler pads)
    for step in range(steps):
        index = [i for share in shares for i in share[step * batch_size : (step + 1) * batch_size]]
        yield dataset[index]


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters in one detached 1-D tensor."""
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@record  # on failure, torchrun's summary shows this process's traceback, not only an exit code
def main(argv: Sequence[str] | None = None) -> int:
    """Train with DDP under torchrun; returns the exit code."""
    args = parse_args(argv)
    if "RANK" not in os.environ:
        print(
            "helpers.ddp_train must be started by torchrun, which sets RANK and WORLD_SIZE, e.g.\n"
            "  torchrun --standalone --nproc_per_node=2 -m helpers.ddp_train",
            file=sys.stderr,
        )
        return 2
    problem = fail_rank_problem(args.fail_rank, int(os.environ["WORLD_SIZE"]))
    if problem:
        if int(os.environ["RANK"]) == 0:  # every rank refuses; one says why
            say(f"helpers.ddp_train: {problem}", sys.stderr)
        return 2
    local_rank, local_world_size = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    device = device_for_local_rank(args.device, local_rank, local_world_size)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)  # "the current GPU" of this process: its own, not GPU 0 for everyone
    data = load_data(args)  # before the process group: a download may take longer than the collective timeout
    # DDP imports torch._dynamo the first time it wraps a model. Imported while a process group exists, dynamo keeps
    # references to that group, so destroy_process_group cannot free it: gloo's worker threads then live on into
    # interpreter shutdown, where now and then one of them aborts the process (exit -6, "terminate called without an
    # active exception") after training has finished. Imported before the group exists, it holds no reference, and
    # destroy_process_group stops those threads while Python is still fully alive.
    importlib.import_module("torch._dynamo")
    # The timeout turns a collective that waits for a dead or stuck peer into an error within seconds; the defaults
    # are 10 minutes (nccl) and 30 minutes (gloo). device_id binds the group to this GPU (nccl connects at once).
    dist.init_process_group(
        backend,
        timeout=timedelta(seconds=args.timeout),
        device_id=device if device.type == "cuda" else None,
    )
    try:
        train(args, data, device, backend)
        # Wait for every rank before tearing down: a process that leaves right after its last collective can abort
        # its peer (gloo, two CPU processes: SIGABRT in about one run in four without this barrier).
        dist.barrier()
    except Exception as exc:
        if lost_a_peer(exc):
            # Not this rank's own failure: a peer has gone and closed its connections. Report it as such and leave
            # the stopping to torchrun, which ends every process once the failed one has exited, so that its report
            # names the rank that failed first rather than whichever process happened to exit first.
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            say(f"[rank {dist.get_rank()}] lost a peer ({first_line}); waiting for torchrun to stop the job")
            time.sleep(args.timeout)
        raise
    finally:
        dist.destroy_process_group()  # also after an error, so the process exits without leaking the group
    return 0


def say(line: str, stream: IO[str] | None = None) -> None:
    """Print one line with a single write, so that lines of processes sharing a terminal or file never interleave.

    ``print`` writes the text and the newline separately when the stream is unbuffered (``python -u``,
    ``PYTHONUNBUFFERED=1``), and another rank's line can land between the two.
    """
    stream = sys.stdout if stream is None else stream
    stream.flush()  # whatever this process printed before goes out first
    data = (line + "\n").encode(getattr(stream, "encoding", None) or "utf-8", errors="replace")
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a notebook's or a test's captured stream)
        stream.write(line + "\n")
        stream.flush()
        return
    while data:  # a regular file or a pipe takes a short line in one write; loop only if it did not
        data = data[os.write(fd, data) :]


PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
"""How gloo words a collective whose peer process has exited (torch 2.8 says it at once; 2.14 may just wait)."""


def lost_a_peer(exc: BaseException) -> bool:
    """Whether a collective failed because another rank's process went away, not because of this rank."""
    return any(text in str(exc) for text in PEER_GONE)


def train(
    args: argparse.Namespace, data: tuple[TensorDataset, TensorDataset], device: torch.device, backend: str
) -> None:
    """The DDP training loop, run by every rank inside an initialised process group."""
    rank, world_size = dist.get_rank(), dist.get_world_size()

    def log(message: str) -> None:
        if rank == 0:  # one voice: N processes printing the same line N times helps nobody
            say(message)

    train_set, test_set = data
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    say(
        f"[rank {rank}] of {world_size} on {device} ({backend}): {sampler.num_samples} of {len(train_set)} "
        f"images per epoch, {len(loader)} steps"
    )

    torch.manual_seed(args.seed)  # same start on every rank; DDP also broadcasts rank 0's weights when it wraps
    model = build_model(args.model).to(device)
    reference = copy.deepcopy(model) if args.check_equivalence and rank == 0 else None
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)
    # A mean over the local batch: DDP averages gradients over ranks, and the average of N equal-sized means is the
    # mean over the global batch, so the step equals one process's step on all N batches together.
    loss_fn = nn.CrossEntropyLoss()
    if reference is not None:
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=args.lr)
    ref_diffs: list[float] = []  # after each compared step: largest |DDP weight - reference weight|
    log(
        f"DDP: world size {world_size}, backend {backend}, {args.dataset} ({len(train_set)} images), "
        f"global batch {args.batch_size} x {world_size} = {args.batch_size * world_size}"
    )

    if rank == 0:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    history = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        ref_batches = (
            global_batches(train_set, world_size, args.batch_size, args.seed, epoch) if reference is not None else None
        )
        totals = torch.zeros(2, device=device)  # (sum of losses, number of images) on this rank
        for X, y in loader:
            if rank == args.fail_rank:
                raise RuntimeError(f"rank {rank} fails on purpose (--fail-rank {rank})")
            X, y = X.to(device), y.to(device)
            loss = loss_fn(ddp_model(X), y)
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces (averages) the gradients here, overlapping with the backward pass
            optimizer.step()
            totals[0] += loss.detach() * len(y)
            totals[1] += len(y)
            if ref_batches is not None and (args.equivalence_steps <= 0 or len(ref_diffs) < args.equivalence_steps):
                X_all, y_all = next(ref_batches)
                ref_loss = loss_fn(reference(X_all.to(device)), y_all.to(device))
                ref_optimizer.zero_grad()
                ref_loss.backward()
                ref_optimizer.step()
                gap = (flat_parameters(ddp_model.module) - flat_parameters(reference)).abs().max().item()
                ref_diffs.append(gap)
        dist.all_reduce(totals)  # sum over ranks, so rank 0 can report the loss over all images
        mean_loss = (totals[0] / totals[1]).item()
        history.append(mean_loss)
        log(f"epoch {epoch + 1}/{args.epochs}: mean training loss {mean_loss:.4f}")
        if rank == 0:
            state = {"model": ddp_model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1}
            save_checkpoint(state, Path(args.out) / CHECKPOINT_FILE)  # .module: keys without "module."
    seconds = time.perf_counter() - start

    # Every replica must hold the same weights: compare each with rank 0's, and keep the largest gap.
    mine = flat_parameters(ddp_model.module)
    rank0 = mine.clone()
    dist.broadcast(rank0, src=0)
    replica_gap = (mine - rank0).abs().max()
    dist.all_reduce(replica_gap, op=dist.ReduceOp.MAX)

    if rank == 0:
        summary = {
            "world_size": world_size,
            "backend": backend,
            "dataset": args.dataset,
            "epochs": args.epochs,
            "global_batch": args.batch_size * world_size,
            "losses": history,
            "seconds": seconds,
            "test_accuracy": evaluate(ddp_model.module, DataLoader(test_set, batch_size=1000))["accuracy"],
            "replica_max_abs_diff": replica_gap.item(),
            "checkpoint": CHECKPOINT_FILE,
        }
        log(f"replicas agree: largest difference from rank 0's weights {summary['replica_max_abs_diff']:.1e}")
        if ref_diffs:
            summary["reference_steps"] = len(ref_diffs)
            summary["reference_diffs"] = ref_diffs
            summary["reference_max_abs_diff"] = ref_diffs[-1]
            log(
                f"one process on the global batch, after the first {len(ref_diffs)} steps: largest weight "
                f"difference {ref_diffs[-1]:.1e} (below {EQUIVALENCE_TOLERANCE:g}: "
                f"{ref_diffs[-1] < EQUIVALENCE_TOLERANCE})"
            )
        log(f"test accuracy {summary['test_accuracy']:.1%}, {seconds:.1f} s of training")
        (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    sys.exit(main())
