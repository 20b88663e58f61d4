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
    """Ends the dry run at init_process_group (a BaseException: the learner's ``except Exception`` lets it by)."""


class _SeenData(torch.utils.data.Dataset):
    """A data set of tensors that notes each index a loader asks for, so the checker knows what each rank trained on."""

    def __init__(self, X: torch.Tensor, y: torch.Tensor) -> None:
        self.X, self.y, self.seen = X, y, []

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.seen.append(int(index))
        return self.X[index], self.y[index]


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
    """One rank of check_ddp_worker, in a forked process: run ``worker`` with its calls to the process group, the
    sampler and torch.save noted, then send back what it did. A dry run stops at init_process_group."""
    import io
    import os
    import sys
    from datetime import timedelta
    from unittest import mock

    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    torch.set_num_threads(1)
    report: dict[str, Any] = {"backend": None, "joined": False, "set_epoch": [], "saved": 0, "error": None}
    printed = io.StringIO()
    sys.stdout, sys.stderr = printed, open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    real_init, real_save, real_set_epoch = dist.init_process_group, torch.save, DistributedSampler.set_epoch

    def init(*args: Any, **kwargs: Any) -> None:
        report["joined"], report["backend"] = True, kwargs.get("backend", args[0] if args else None)
        if dry:
            raise _Stop
        if "timeout" not in kwargs and len(args) < 3:
            kwargs["timeout"] = timedelta(seconds=20)  # a rank left waiting: an error, not a hang
        real_init(*args, **kwargs)

    def save(*args: Any, **kwargs: Any) -> None:
        report["saved"] += 1
        real_save(*args, **kwargs)

    def set_epoch(sampler: DistributedSampler, epoch: int) -> None:
        report["set_epoch"].append(int(epoch))
        real_set_epoch(sampler, epoch)

    model, X, y = _ddp_problem()
    data = _SeenData(X, y)
    with (
        mock.patch.object(dist, "init_process_group", init),
        mock.patch.object(torch, "save", save),
        mock.patch.object(DistributedSampler, "set_epoch", set_epoch),
        mock.patch.object(torch.cuda, "set_device", lambda *args: None),
    ):
        try:
            worker(rank, DDP_WORLD, f"file://{folder}/store", model, data, torch.device(device), f"{folder}/model.pt")
        except _Stop:
            pass
        except Exception as err:  # the learner's code, in another process: the error goes back as text
            report["error"] = first_line(err)
    report.update(printed=printed.getvalue(), seen=data.seen, weights=_flat(model).tolist())
    report["open"] = dist.is_initialized()
    conn.send(report)
    if dist.is_initialized():
        dist.destroy_process_group()


def _run_ranks(worker: Callable, folder: str, device: str, dry: bool) -> list[dict] | str:
    """Each rank's report (one rank for a dry run), or why there is none; no process outlives the call."""
    return ranks_in_processes(
        _ddp_rank,
        lambda r: (worker, r, folder, device, dry),
        1 if dry else DDP_WORLD,
        timeout=60,
        stuck="does every rank make the same collective calls?",
        backward=True,
    )


def _ddp_hint(reports: list[dict], out: str, reference: torch.Tensor) -> str | None:
    """The first thing missing from a CPU run of the learner's ddp_worker, in the order the function does them."""
    epochs, share = list(range(DDP_EPOCHS)), DDP_SAMPLES // DDP_WORLD
    for rank, report in enumerate(reports):
        if not report["joined"] and report["error"] and "not been initialized" not in report["error"]:
            return f"rank {rank} raised {report['error']} before joining a process group"
        if not report["joined"]:
            return (
                f"rank {rank} never joined a process group: call dist.init_process_group(backend, "
                "init_method=init_method, rank=rank, world_size=world_size) first"
            )
        if report["backend"] != "gloo":
            return f"on the CPU the backend is gloo, got {report['backend']!r}"
        error = report["error"]
        if error and "device_ids" in error:
            return "device_ids is for a model on a GPU (device_ids=[device.index]); for a model on the CPU leave it out"
        if error:
            return f"rank {rank} raised {error}"
    for rank, report in enumerate(reports):
        seen = len(report["seen"])
        if seen == DDP_EPOCHS * DDP_SAMPLES:
            return (
                f"no sampler: each rank saw the whole data set ({DDP_SAMPLES} samples an epoch, not its share of "
                f"{share}); give the DataLoader sampler=DistributedSampler(train_set)"
            )
        if seen != DDP_EPOCHS * share:
            return f"rank {rank} trained on {seen} samples in {DDP_EPOCHS} epochs; its share is {share} an epoch"
    calls = reports[0]["set_epoch"]
    if calls != epochs:
        if not calls:
            return "sampler.set_epoch(epoch) is never called: every epoch repeats the first epoch's order"
        return f"set_epoch was called with {calls}: call sampler.set_epoch(epoch) at the start of epoch 0, 1, ..."
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
    if reports[1]["saved"]:
        return "rank 1 saved too: save on rank 0 only, or the ranks write one file at once"
    saved = _saved_hint(out)
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
    global batch: run in two forked CPU processes (gloo) and compared with one process on the same data; then run to
    its init_process_group with a CUDA device, for the backend it picks there."""
    import tempfile

    import torch._dynamo  # noqa: F401  before any process group: DDP imports it (helpers.distributed.leaving_cleanly)

    model, X, y = _ddp_problem()
    reference = _one_process(model, X, y)
    with tempfile.TemporaryDirectory() as folder:
        reports = _run_ranks(ddp_worker, folder, "cpu", dry=False)
        if isinstance(reports, str):
            return reports
        hint = _ddp_hint(reports, f"{folder}/model.pt", reference)
        if hint:
            return hint
    with tempfile.TemporaryDirectory() as folder:
        reports = _run_ranks(ddp_worker, folder, "cuda:0", dry=True)
        if isinstance(reports, str):
            return reports
        backend, error = reports[0]["backend"], reports[0]["error"]
        if not reports[0]["joined"]:
            return f"with device cuda:0, ddp_worker raised {error} before init_process_group"
        if backend != "nccl":
            return f"with device cuda:0 the backend was {backend!r}: a model on a CUDA GPU uses nccl (test device.type)"
    return None
