"""Lesson 07's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import exercise, first_line, learner_code, ranks_in_processes


def _sampler_indices(dataset_len: int, world_size: int, rank: int) -> list[int]:
    """What DistributedSampler(shuffle=False) gives ``rank`` of ``world_size`` on ``dataset_len`` samples."""
    from torch.utils.data import DistributedSampler

    return list(DistributedSampler(range(dataset_len), num_replicas=world_size, rank=rank, shuffle=False))


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
    import tempfile
    from pathlib import Path

    shares = [torch.tensor([1.0, 2.0, 3.0]), torch.full((5,), 10.0)]  # rank means 2 and 10; all 8 samples: 7
    with tempfile.TemporaryDirectory() as folder:
        store = str(Path(folder) / "store")
        answers = ranks_in_processes(
            _global_mean_rank,
            lambda r: (global_mean, r, store, shares[r]),
            len(shares),
            timeout=60,
            stuck="does every rank call all_reduce the same times?",
        )
    if isinstance(answers, str):
        return answers
    for rank, (status, value) in enumerate(answers):
        if status != "ok":
            return f"rank {rank}: {value}"
    got = [value for _, value in answers]
    if all(abs(v - 6.0) < 1e-5 for v in got):
        return "that is the mean of the ranks' means; sum losses and counts over ranks instead"
    if not all(abs(v - 7.0) < 1e-5 for v in got):
        return f"the ranks returned {got}, the mean over all 8 losses is 7.0; use dist.all_reduce"
    return None


DDP_SAMPLES, DDP_WORLD, DDP_EPOCHS, DDP_BATCH, DDP_LR = 64, 2, 2, 8, 0.1
"""The DDP exercise's run: 64 samples on 2 ranks, 2 epochs of batches of 8 per rank, SGD with lr 0.1 as in its cell."""
DDP_TOLERANCE = 1e-6


class _Stop(BaseException):
    """Ends the dry run where the process group would be made (a BaseException: the learner's ``except Exception``
    lets it by)."""


def _group() -> str:
    """The process group this process is in: "none", or its size and backend ("2 gloo")."""
    import torch.distributed as dist

    return f"{dist.get_world_size()} {dist.get_backend()}" if dist.is_initialized() else "none"


class _SeenData(torch.utils.data.Dataset):
    """A data set of tensors that notes, for each sample a loader reads, its index and the process group the reading
    process is in (``_group``), one line each in the file ``log``: what each rank trained on, and in which group. A
    file, so that the reads of a DataLoader's worker processes are noted too."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor, log: str) -> None:
        self.X, self.y, self.log = X, y, log

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        # a loader's worker process is in no group of its own, whichever group its rank is in
        group = "worker" if torch.utils.data.get_worker_info() is not None else _group()
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"{int(index)} {group}\n")
        return self.X[index], self.y[index]


def _reads(log: str) -> tuple[list[int], set[str]]:
    """The indices a rank's loader read, in order, and the groups it read them in ("worker" for its loader's worker
    processes; see ``_SeenData``)."""
    from pathlib import Path

    lines = Path(log).read_text(encoding="utf-8").splitlines() if Path(log).is_file() else []
    return [int(line.split(" ", 1)[0]) for line in lines], {line.split(" ", 1)[1] for line in lines}


def _ddp_problem() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """The exercise's model and data: a linear classifier of 10 features into 3 classes, and 64 labelled samples."""
    X = torch.randn(DDP_SAMPLES, 10, generator=torch.Generator().manual_seed(0))
    y = (X @ torch.randn(10, 3, generator=torch.Generator().manual_seed(1))).argmax(dim=1)
    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(0)
        return torch.nn.Linear(10, 3), X, y


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _one_process(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The weights one process reaches on each step's global batch (every rank's batch together)."""
    import copy

    from helpers.ddp_check import global_batches

    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=DDP_LR)
    for epoch in range(DDP_EPOCHS):
        for X_step, y_step in global_batches(torch.utils.data.TensorDataset(X, y), DDP_WORLD, DDP_BATCH, 0, epoch):
            loss = torch.nn.functional.cross_entropy(model(X_step), y_step)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return _flat(model)


def _ddp_rank(worker: Callable, rank: int, folder: str, device: str, dry: bool, conn: Any) -> None:
    """One rank of check_ddp_worker: run ``worker`` with ``out`` in a folder of this rank's own, then send back what
    the rank did, observed rather than asked of the names it called: the group it was in when its code raised, what
    it printed, the weights it ended with, whether its group is still open (its reads go to ``_SeenData``'s log, its
    checkpoint to its folder). A dry run stops where the process group would be made, and notes its backend."""
    import contextlib
    import io
    import os
    import sys
    from datetime import timedelta
    from pathlib import Path
    from unittest import mock

    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    torch.set_num_threads(1)
    report: dict[str, Any] = {"backend": None, "error": None, "group_at_error": "none"}
    printed = io.StringIO()
    sys.stdout, sys.stderr = printed, open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    out = Path(folder) / f"rank{rank}" / "model.pt"
    out.parent.mkdir(parents=True, exist_ok=True)

    def make_group(*args: Any, **kwargs: Any) -> None:
        # every spelling of init_process_group comes here; its fourth argument is the normalised backend
        report["backend"] = str(kwargs.get("backend", args[3] if len(args) > 3 else None))
        raise _Stop

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.cuda, "set_device", lambda *args: None))  # a CPU-only machine
        if dry:
            stack.enter_context(mock.patch.object(distributed_c10d, "_new_process_group_helper", make_group))
        else:  # a rank left waiting in a collective raises after 20 s instead of gloo's default 30 minutes
            stack.enter_context(mock.patch.object(distributed_c10d, "default_pg_timeout", timedelta(seconds=20)))
        model, X, y = _ddp_problem()
        data = _SeenData(X, y, str(Path(folder) / f"reads{rank}.log"))
        try:
            worker(rank, DDP_WORLD, f"file://{folder}/store", model, data, torch.device(device), str(out))
        except _Stop:
            pass
        except Exception as err:  # the learner's code, in another process: the error goes back as text
            report.update(error=first_line(err), group_at_error=_group())
    report.update(printed=printed.getvalue(), weights=_flat(model).tolist(), open=dist.is_initialized())
    conn.send(report)
    if dist.is_initialized():
        dist.destroy_process_group()


DDP_FORKED_LIMIT, DDP_SPAWNED_LIMIT = 60, 240
"""Seconds the ranks of one run get, forked or spawned. The reference answer took 4.4 s forked and 42 s spawned on a
GPU machine (each spawned rank imports torch first); a rank left waiting in a collective raises after 20 s."""


def _run_ranks(worker: Callable, folder: str, device: str, dry: bool) -> list[dict] | str:
    """Each rank's report (one rank for a dry run), or why there is none; no process outlives the call."""
    return ranks_in_processes(
        _ddp_rank,
        lambda r: (worker, r, folder, device, dry),
        1 if dry else DDP_WORLD,
        timeout=DDP_FORKED_LIMIT,
        spawned_timeout=DDP_SPAWNED_LIMIT,
        stuck=(
            "that is usually a rank that never returns: a loop without an end, or a process group or collective "
            "given a long timeout and waiting for a peer that never comes"
        ),
        backward=True,
    )


def _shuffled_as(order: list[int], rank: int) -> int | None:
    """The epoch whose shuffle (DistributedSampler, seed 0, ``set_epoch(epoch)``) gives ``rank`` this ``order``."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(DDP_SAMPLES), num_replicas=DDP_WORLD, rank=rank, shuffle=True, seed=0)
    for epoch in range(4 * DDP_EPOCHS):
        sampler.set_epoch(epoch)
        if list(sampler) == order:
            return epoch
    return None


def _uses_gloo(backend: str) -> bool:
    """Whether a group with ``backend`` reduces CPU tensors with gloo ("undefined": PyTorch picks it per device)."""
    return backend in ("gloo", "undefined") or "cpu:gloo" in backend


def _ddp_hint(reports: list[dict], folder: str, reference: torch.Tensor) -> str | None:
    """The first thing missing from a CPU run of the learner's ddp_worker, in the order the function does them."""
    from pathlib import Path

    share = DDP_SAMPLES // DDP_WORLD
    reads = [_reads(f"{folder}/reads{rank}.log") for rank in range(DDP_WORLD)]
    for rank, (report, (_, read_in)) in enumerate(zip(reports, reads, strict=True)):
        error = report["error"]
        joined = (read_in | {report["group_at_error"]}) - {"none", "worker"}
        if not joined and not error and read_in == {"worker"}:
            continue  # read by loader workers only: the averaged weights, compared below, show whether it joined
        if not joined and error and "not been initialized" not in error:
            gloo = "; on the CPU the backend is gloo" if "nccl" in error.lower() else ""
            return f"rank {rank} raised {error} before joining a process group{gloo}"
        if not joined:
            return (
                f"rank {rank} never joined a process group: call dist.init_process_group(backend, "
                "init_method=init_method, rank=rank, world_size=world_size) first"
            )
        if "none" in read_in:
            return f"rank {rank} read training samples before it joined the process group: join it first"
        for size, backend in (group.split(" ", 1) for group in joined):
            if int(size) != DDP_WORLD:
                return f"rank {rank} was in a group of {size} processes: pass world_size=world_size"
            if not _uses_gloo(backend):
                return f"on the CPU the backend is gloo, got {backend!r}"
        if error and "device_ids" in error:
            return "device_ids is for a model on a GPU (device_ids=[device.index]); for a model on the CPU leave it out"
        if error:
            return f"rank {rank} raised {error}"
    for rank, (seen, _) in enumerate(reads):
        if len(seen) == DDP_EPOCHS * DDP_SAMPLES:
            return (
                f"no sampler: each rank saw the whole data set ({DDP_SAMPLES} samples an epoch, not its share of "
                f"{share}); give the DataLoader sampler=DistributedSampler(train_set)"
            )
        if len(seen) != DDP_EPOCHS * share:
            return f"rank {rank} trained on {len(seen)} samples in {DDP_EPOCHS} epochs; its share is {share} an epoch"
    seen = reads[0][0]
    shuffles = [_shuffled_as(seen[e * share : (e + 1) * share], 0) for e in range(DDP_EPOCHS)]
    if shuffles == [0] * DDP_EPOCHS:
        return "every epoch repeated the first epoch's order: call sampler.set_epoch(epoch) at the start of each epoch"
    if None not in shuffles and shuffles != list(range(DDP_EPOCHS)):
        return (
            f"the epochs were shuffled as the sampler's epochs {shuffles}: call sampler.set_epoch(epoch) at the start "
            "of epoch 0, 1, ..."
        )
    weights = [torch.tensor(report["weights"]) for report in reports]
    gap = max((w - weights[0]).abs().max().item() for w in weights)
    if gap > DDP_TOLERANCE:
        return (
            f"the ranks ended with different weights (largest difference {gap:.1e}): wrap the model in DDP, which "
            "averages the gradients in backward()"
        )
    gap = (weights[0] - reference).abs().max().item()
    if gap > DDP_TOLERANCE:
        return (
            f"the weights differ from one process trained on the same global batches by {gap:.1e}: keep the loop as "
            "given and the sampler's defaults (shuffle=True, seed=0)"
        )
    if reports[1]["printed"]:
        return "rank 1 printed too: print on rank 0 only (if rank == 0)"
    if not reports[0]["printed"]:
        return "rank 0 printed nothing: keep the epoch line, on rank 0"
    if any(any(Path(folder, f"rank{rank}").iterdir()) for rank in range(1, DDP_WORLD)):
        return "rank 1 saved too: save on rank 0 only, or the ranks write one file at once"
    saved = _saved_hint(f"{folder}/rank0/model.pt")
    if saved:
        return saved
    if any(report["open"] for report in reports):
        return "the process group is still open when ddp_worker returns: end with dist.destroy_process_group()"
    return None


def _saved_hint(out: str) -> str | None:
    """What is wrong with the checkpoint rank 0 saved at ``out``, if anything."""
    from pathlib import Path

    if not Path(out).is_file():
        return "rank 0 saved nothing at out: save the trained weights there"
    state = torch.load(out, weights_only=True)
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        return f"rank 0 saved a {type(state).__name__}, not a state_dict: save model.module.state_dict()"
    if any(key.startswith("module.") for key in state):
        return "the saved keys start with 'module.': save model.module.state_dict(), the model inside the DDP wrap"
    return None


@exercise("07_ddp_worker", "turn the single-process loop into DDP", function=True)
def check_ddp_worker(ddp_worker: Callable | None) -> str | None:
    """``ddp_worker(rank, world_size, init_method, model, train_set, device, out)`` trains like one process on the
    global batch: run in two CPU processes (gloo), each with ``out`` in a folder of its own, and compared with one
    process on the same data; then run with a CUDA device up to where its process group would be made, for the backend
    it picks there. What each rank did is observed (the group it read its samples in, the files it wrote), whatever
    names its code calls."""
    import tempfile

    import torch._dynamo  # noqa: F401  before any process group: DDP imports it (helpers.distributed.leaving_cleanly)

    model, X, y = _ddp_problem()
    reference = _one_process(model, X, y)
    with tempfile.TemporaryDirectory() as folder:
        reports = _run_ranks(ddp_worker, folder, "cpu", dry=False)
        if isinstance(reports, str):
            return reports
        hint = _ddp_hint(reports, folder, reference)
        if hint:
            return hint
    with tempfile.TemporaryDirectory() as folder:
        reports = _run_ranks(ddp_worker, folder, "cuda:0", dry=True)
        if isinstance(reports, str):
            return reports
        backend, error = reports[0]["backend"], reports[0]["error"]
        if backend is None:
            ended = f"raised {error}" if error else "returned"
            return f"with device cuda:0, ddp_worker {ended} before it made a process group"
        if backend != "undefined" and "nccl" not in backend:
            return f"with device cuda:0 the backend was {backend!r}: a model on a CUDA GPU uses nccl (test device.type)"
    return None
