"""Lesson 07 checkers: reference solutions pass, wrong answers do not, and every 07_ checker is covered."""

from __future__ import annotations

import functools
import json
import linecache
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn, save
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.functional import cross_entropy
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from exercises import core, lesson_07
from exercises.checks import CHECKERS
from helpers import distributed

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "07_distributed_data_parallel.ipynb"
COVERED = {"07_steps_per_epoch", "07_shard", "07_global_mean", "07_ddp_worker"}


def test_every_lesson_07_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("07_")} == COVERED


def test_steps_per_epoch() -> None:
    check = CHECKERS["07_steps_per_epoch"]
    assert check(235, 60_000, 4, 64)
    assert not check(938, 60_000, 4, 64)  # one process on everything
    assert not check(234, 60_000, 4, 64)  # the last, smaller batch is a step too
    assert not check(235.0, 60_000, 4, 64)
    assert not check(None, 60_000, 4, 64)


def test_shard() -> None:
    check = CHECKERS["07_shard"]

    def shard(n: int, rank: int, world_size: int) -> list[int]:
        indices = list(range(n))
        total = math.ceil(n / world_size) * world_size
        indices += (indices * world_size)[: total - n]
        return indices[rank::world_size]

    assert check(shard)
    assert not check(lambda n, rank, world_size: list(range(n))[rank::world_size])  # no padding
    per_rank = lambda n, world_size: math.ceil(n / world_size)  # noqa: E731
    assert not check(lambda n, rank, w: [i % n for i in range(rank * per_rank(n, w), (rank + 1) * per_rank(n, w))])
    assert not check(lambda n, rank, world_size: [*range(n), *range(n)][rank::world_size])  # pads too much
    assert not check(lambda n, rank, world_size: 1 / 0)
    assert not check(None)


def _global_mean(losses: torch.Tensor) -> float:
    totals = torch.stack([losses.sum(), torch.tensor(float(len(losses)))])
    dist.all_reduce(totals)
    return (totals[0] / totals[1]).item()


def _local_mean(losses: torch.Tensor) -> float:
    return losses.mean().item()


def _mean_of_means(losses: torch.Tensor) -> float:
    mean = losses.mean()
    dist.all_reduce(mean)
    return (mean / dist.get_world_size()).item()


def _only_rank_0_reduces(losses: torch.Tensor) -> float:
    totals = torch.stack([losses.sum(), torch.tensor(float(len(losses)))])
    if dist.get_rank() == 0:
        dist.all_reduce(totals)
    return (totals[0] / totals[1]).item()


def test_global_mean() -> None:
    check = CHECKERS["07_global_mean"]
    assert check(_global_mean)
    assert not dist.is_initialized()  # the ranks ran in their own processes
    assert not check(_local_mean)  # each rank its own mean: 2 and 10
    assert not check(_mean_of_means)  # 6, not 7: the ranks hold 3 and 5 losses
    assert not check(_only_rank_0_reduces)  # rank 0 waits in vain: the group's timeout ends it
    assert not check(None)


def _ddp_worker(rank, world_size, init_method, model, train_set, device, out, epochs=2, batch_size=8, **mistakes):
    """The reference answer; each keyword of ``mistakes`` leaves out or gets wrong one piece of it."""
    backend = mistakes.get("backend", "nccl" if device.type == "cuda" else "gloo")
    if not mistakes.get("no_init"):
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
    sampler = (
        None if mistakes.get("no_sampler") else DistributedSampler(train_set, shuffle=mistakes.get("shuffle", True))
    )
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)
    model = model.to(device)
    if not mistakes.get("no_ddp"):
        device_ids = mistakes.get("device_ids", [device.index] if device.type == "cuda" else None)
        model = DDP(model, device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        if sampler is not None and not mistakes.get("no_set_epoch"):
            sampler.set_epoch(epoch)
        for X, y in loader:
            X, y = X.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0 or mistakes.get("every_rank_prints"):
            print(f"epoch {epoch + 1}: last loss {loss.item():.4f}")
    if rank == 0 or mistakes.get("every_rank_saves"):
        plain = model if mistakes.get("no_ddp") or mistakes.get("prefix") else model.module
        torch.save(plain.state_dict(), out)
    if not mistakes.get("no_destroy") and dist.is_initialized():
        dist.destroy_process_group()
    return model


def _ddp_worker_from_imports(
    rank, world_size, init_method, model, train_set, device, out, epochs=2, batch_size=8, num_workers=0
):
    """The reference written with names imported from their modules when this file loads, as a notebook's first cell
    imports them: the checker must see the group joined and the file saved whatever the names are."""
    init_process_group(
        "nccl" if device.type == "cuda" else "gloo", init_method=init_method, rank=rank, world_size=world_size
    )
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, num_workers=num_workers)
    model = DDP(model.to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for X, y in loader:
            loss = cross_entropy(model(X.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch + 1}: last loss {loss.item():.4f}")
    if rank == 0:
        save(model.module.state_dict(), out)
    destroy_process_group()


def _every_rank_saves_with_save_imported(rank, world_size, init_method, model, train_set, device, out, **kwargs):
    """Right but for one thing: every rank saves, through ``save`` imported from torch when this file loads."""
    model = _ddp_worker(rank, world_size, init_method, model, train_set, device, out, no_destroy=True, **kwargs)
    save(model.module.state_dict(), out)
    dist.destroy_process_group()


def _set_epoch_off_by_one(rank, world_size, init_method, model, train_set, device, out, epochs=2, batch_size=8):
    """Right but for one thing: the sampler's epochs are counted from 1."""
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
    sampler = DistributedSampler(train_set)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler)
    model = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch + 1)
        for X, y in loader:
            loss = nn.functional.cross_entropy(model(X), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    dist.destroy_process_group()


def _never_returns(*args, **kwargs):
    import time

    while True:
        time.sleep(1)


def _from_notebook(marker: str) -> Callable:
    """The lesson's ``ddp_worker`` from its code cell that holds ``marker`` (the exercise cell as handed out, its DDP
    lines still to write, or the reference solution), defined as Jupyter defines it: in ``__main__``, its source in
    ``linecache`` under the cell's file name."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    sources = ["".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "code"]
    cell = next(source for source in sources if "def ddp_worker" in source and marker in source)
    source = cell.split("checks.check_ddp_worker")[0]
    filename = f"/tmp/ipykernel_test/{abs(hash(marker))}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    names = {"__name__": "__main__", "torch": torch, "nn": nn, "dist": dist, "DDP": DDP}
    namespace = {**names, "DataLoader": DataLoader, "Dataset": Dataset, "DistributedSampler": DistributedSampler}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["ddp_worker"]


def _with(**mistakes):
    """The reference with ``mistakes``; a partial of a module's function, which a spawned rank can import."""
    return functools.partial(_ddp_worker, **mistakes)


def _divides_by_zero(*args):
    return 1 / 0


@pytest.mark.slow  # forks or spawns two training processes, twice
def test_ddp_worker_reference_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["07_ddp_worker"](_ddp_worker)
    assert CHECKERS["07_ddp_worker"](_from_notebook("dist.destroy_process_group()"))  # the lesson's solution cell
    assert capsys.readouterr().out.count("[pass]") == 2
    assert not dist.is_initialized()  # the ranks ran in their own processes


@pytest.mark.parametrize(
    "answer",
    [_ddp_worker_from_imports, functools.partial(_ddp_worker_from_imports, num_workers=1), _with(backend=None)],
    ids=["names imported from their modules", "a loader worker", "no backend: PyTorch picks gloo and nccl per device"],
)
@pytest.mark.slow  # forks or spawns two training processes, twice
def test_ddp_worker_right_answers_written_differently_pass(answer, capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["07_ddp_worker"](answer), capsys.readouterr().out


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_from_notebook("# DDP: join"), "never joined a process group"),
        (_with(no_init=True), "never joined a process group"),
        (_with(backend="nccl"), "on the CPU the backend is gloo"),
        (_with(backend="gloo"), "a model on a CUDA GPU uses nccl"),  # right on the CPU, wrong on a GPU
        (_with(no_sampler=True), "no sampler: each rank saw the whole data set"),
        (_with(no_set_epoch=True), "every epoch repeated the first epoch's order"),
        (_set_epoch_off_by_one, "shuffled as the sampler's epochs [1, 2]"),
        (_with(no_ddp=True), "the ranks ended with different weights"),
        (_with(device_ids=[0]), "device_ids is for a model on a GPU"),
        (_with(every_rank_prints=True), "rank 1 printed too"),
        (_with(every_rank_saves=True), "rank 1 saved too"),
        (_every_rank_saves_with_save_imported, "rank 1 saved too"),
        (_with(prefix=True), "the saved keys start with 'module.'"),
        (_with(no_destroy=True), "end with dist.destroy_process_group()"),
        (_with(shuffle=False), "the weights differ from one process trained on the same global batches"),
        (_divides_by_zero, "rank 0 raised ZeroDivisionError: division by zero before joining"),
    ],
)
@pytest.mark.slow  # forks or spawns two training processes
def test_ddp_worker_mistakes(answer, hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["07_ddp_worker"](answer)
    out = capsys.readouterr().out
    assert "[not yet]" in out and hint in out, out


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_from_notebook("dist.destroy_process_group()"), None),
        (_from_notebook("# DDP: join"), "never joined a process group"),
        (_with(no_set_epoch=True), "every epoch repeated the first epoch's order"),
        (_ddp_worker_from_imports, None),
    ],
    ids=["solution cell", "exercise cell", "a mistake", "names imported"],
)
@pytest.mark.slow  # spawns two training processes, each importing torch
def test_ddp_worker_where_a_fork_cannot_run_autograd_spawns_its_ranks(answer, hint, monkeypatch, capsys) -> None:
    """On a GPU machine, autograd run in the notebook before the check leaves forked processes unable to run it; the
    ranks are then spawned, a notebook's function sent as its source."""
    monkeypatch.setattr(distributed, "fork_keeps_autograd", lambda: False)
    spawned = []
    real = core.multiprocessing_context

    def context(method):
        spawned.append(method)
        return real(method)

    monkeypatch.setattr(core, "multiprocessing_context", context)
    start = time.perf_counter()
    assert CHECKERS["07_ddp_worker"](answer) is (hint is None)
    seconds = time.perf_counter() - start
    out = capsys.readouterr().out
    assert ("[pass]" in out) if hint is None else ("[not yet]" in out and hint in out), out
    assert spawned and set(spawned) == {"spawn"}
    # both runs together (two ranks, then one) within a third of the limit each run has: 18 to 33 s on two busy cores
    assert seconds < lesson_07.DDP_SPAWNED_LIMIT / 3, f"spawned check took {seconds:.0f} s"


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.slow  # starts two processes that run until the limit stops them
def test_ddp_worker_past_the_time_limit_says_it_was_the_limit(method, monkeypatch, capsys) -> None:
    monkeypatch.setattr(distributed, "start_method", lambda backward: method)
    monkeypatch.setattr(lesson_07, "DDP_FORKED_LIMIT", 2)
    monkeypatch.setattr(lesson_07, "DDP_SPAWNED_LIMIT", 3)
    assert not CHECKERS["07_ddp_worker"](_never_returns)
    out = capsys.readouterr().out
    how = "2 s (forked" if method == "fork" else "3 s (spawned, each importing torch first)"
    assert f"ran past the check's time limit of {how}" in out and "a rank that never returns" in out, out


def test_ddp_worker_none_is_waiting() -> None:
    assert not CHECKERS["07_ddp_worker"](None)
