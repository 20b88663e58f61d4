"""The data-pipeline benchmark: images per second of four ways to feed a model, on one device, in one run.

    python -m helpers.bench                 # MNIST on the device pick_device() chooses
    python -m helpers.bench --quick --dataset FashionMNIST --device cpu

Each pipeline is timed three ways: data only (batches arrive on the device), training the linear model, and
training the CNN. Every figure is the median of repeats after a warm-up, synchronising the device before each clock
read, and is compared with the lab's setup: a DataLoader applying ToTensor and Normalize to one image at a time,
batch 128, no worker processes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

from helpers import data, devices
from helpers.models import build_model
from helpers.timing import time_on_device
from helpers.transfer import DeviceDataLoader, DeviceResidentLoader, to_device

PIPELINES = ("lab", "workers", "wrapper", "resident")
TASKS = ("data", "linear", "cnn")
TASK_TITLES = {"data": "data only", "linear": "linear model", "cnn": "CNN"}
GOALS = {"data": 100.0, "linear": 10.0, "cnn": 2.0}
"""Speed-ups over the lab's setup the device-resident pipeline should reach, per task."""


def pipeline_title(name: str, workers: int = 2, pinned: bool = False) -> str:
    """A short description of a pipeline, for tables and plots."""
    return {
        "lab": "DataLoader, per-sample transforms (the lab)",
        "workers": f"DataLoader, {workers} workers" + (", pinned memory" if pinned else ""),
        "wrapper": "DeviceDataLoader, tensors converted once",
        "resident": "DeviceResidentLoader, all on the device",
    }[name]


@dataclass
class Measurement:
    """One pipeline on one task: seconds per run of ``images`` images (median of repeats)."""

    pipeline: str
    task: str
    images: int
    seconds: float
    times: list[float] = field(repr=False, default_factory=list)

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds


def make_pipeline(
    name: str, dataset: Any, device: torch.device, batch_size: int = 128, workers: int = 2, seed: int = 0
) -> Iterable:
    """The iterable of (X, y) batches for pipeline ``name``; batches of "lab" and "workers" are still on the CPU.

    ``dataset`` is a torchvision MNIST-style dataset whose transform is ToTensor + Normalize (or a Subset of one).
    """
    g = torch.Generator().manual_seed(seed)
    if name == "lab":
        return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=g)
    if name == "workers":
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            generator=g,
            num_workers=workers,
            persistent_workers=workers > 0,  # start the worker processes once, not every epoch
            pin_memory=device.type == "cuda",  # page-locked batches copy faster and can overlap with compute
        )
    if name == "wrapper":
        cpu = DeviceResidentLoader.from_dataset(dataset, "cpu", batch_size, shuffle=False)  # convert once, on the CPU
        tensors = TensorDataset(cpu.images, cpu.labels)
        return DeviceDataLoader(DataLoader(tensors, batch_size=batch_size, shuffle=True, generator=g), device)
    if name == "resident":
        return DeviceResidentLoader.from_dataset(dataset, device, batch_size, shuffle=True, seed=seed)
    raise ValueError(f"Unknown pipeline {name!r}; choose one of {', '.join(PIPELINES)}.")


def _step_fn(task: str, device: torch.device, seed: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """What is done with each batch: nothing (data only) or one SGD training step of the named model."""
    if task == "data":
        return lambda X, y: None
    torch.manual_seed(seed)
    model = build_model(task).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(X: torch.Tensor, y: torch.Tensor) -> None:
        loss = F.cross_entropy(model(X), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


class _Runner:
    """Runs a number of batches of one pipeline through one task, moving each batch to the device first."""

    def __init__(self, loader: Iterable, task: str, device: torch.device, seed: int = 0) -> None:
        self.loader, self.device = loader, device
        self.step = _step_fn(task, device, seed)
        self.non_blocking = bool(getattr(loader, "pin_memory", False))
        self.images = 0

    def __call__(self, batches: int | None) -> None:
        count = 0
        for X, y in islice(iter(self.loader), batches):  # each call starts a new pass: a new shuffle
            X, y = to_device((X, y), self.device, self.non_blocking)
            self.step(X, y)
            count += len(y)
        self.images = count


def measure(
    loader: Iterable,
    task: str,
    device: torch.device,
    batches: int | None = None,
    repeats: int = 3,
    warmup_batches: int = 3,
    seed: int = 0,
    pipeline: str = "",
) -> Measurement:
    """Time ``batches`` batches (None: a whole epoch) of ``loader`` on ``task``; median of ``repeats`` runs.

    Each run starts a new pass over the loader, moves every batch to ``device`` (a no-op when it is there already)
    and applies the task. A few warm-up batches first start worker processes and let the device settle.
    """
    run = _Runner(loader, task, device, seed)
    run(warmup_batches)
    timing = time_on_device(lambda: run(batches), device, repeats=repeats, warmup=0)
    return Measurement(pipeline, task, run.images, timing.median, timing.times)


def run_benchmark(
    dataset: Any,
    device: torch.device,
    batches: int | None = 200,
    repeats: int = 3,
    workers: int = 2,
    pipelines: Iterable[str] = PIPELINES,
    tasks: Iterable[str] = TASKS,
    batch_size: int = 128,
    warmup_batches: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[Measurement]:
    """Every pipeline on every task, on one device, in this process.

    The repeats are interleaved (round 1 of every pipeline and task, then round 2, ...), so that a machine whose load
    changes during the run slows every figure alike instead of a few; each figure is the median of its rounds.
    """
    loaders = {name: make_pipeline(name, dataset, device, batch_size, workers) for name in pipelines}
    jobs = [(name, task) for name in loaders for task in tasks]
    runners = {job: _Runner(loaders[job[0]], job[1], device) for job in jobs}
    for job, run in runners.items():
        if progress is not None:
            progress(f"warming up {job[0]} / {job[1]}")
        run(warmup_batches)
    times: dict[tuple[str, str], list[float]] = {job: [] for job in jobs}
    for r in range(repeats):
        if progress is not None:
            progress(f"round {r + 1} of {repeats}")
        for job, run in runners.items():
            times[job] += time_on_device(lambda run=run: run(batches), device, repeats=1, warmup=0).times
    return [Measurement(p, t, runners[(p, t)].images, statistics.median(times[(p, t)]), times[(p, t)]) for p, t in jobs]


def speedups(results: list[Measurement], baseline: str = "lab") -> dict[tuple[str, str], float]:
    """Images/s of each (pipeline, task) divided by the baseline pipeline's on the same task."""
    base = {m.task: m.images_per_second for m in results if m.pipeline == baseline}
    return {(m.pipeline, m.task): m.images_per_second / base[m.task] for m in results if m.task in base}


def format_table(results: list[Measurement], epoch_images: int, workers: int = 2, pinned: bool = False) -> str:
    """The benchmark table: images/s and the ratio to the lab's setup per task, and the CNN's epoch time."""
    ratio = speedups(results)
    tasks = [t for t in TASKS if any(m.task == t for m in results)]
    by = {(m.pipeline, m.task): m for m in results}
    pipes = [p for p in PIPELINES if any(m.pipeline == p for m in results)]
    titles = {p: pipeline_title(p, workers, pinned) for p in pipes}
    head = ["pipeline"] + [f"{TASK_TITLES[t]} img/s (x lab)" for t in tasks] + [f"{TASK_TITLES[tasks[-1]]} epoch"]
    rows = []
    for p in pipes:
        cells = [titles[p]]
        for t in tasks:
            m = by[(p, t)]
            cells.append(f"{m.images_per_second:>10,.0f} ({ratio[(p, t)]:.1f}x)")
        cells.append(f"{epoch_images / by[(p, tasks[-1])].images_per_second:.1f} s")
        rows.append(cells)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{widths[0]}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)])


def goal_lines(results: list[Measurement]) -> list[str]:
    """One line per task: the resident pipeline's speed-up against its goal."""
    ratio = speedups(results)
    lines: list[str] = []
    for task, goal in GOALS.items():
        if ("resident", task) in ratio:
            got = ratio[("resident", task)]
            verdict = "met" if got >= goal else "not met"
            title = TASK_TITLES[task]
            lines.append(f"  {title:<13} resident {got:7.1f}x the lab's images/s (goal >= {goal:g}x: {verdict})")
    return lines


def findings(results: list[Measurement], workers: int = 2) -> list[str]:
    """Sentences on what this run measured, each chosen from its own numbers (not written in advance)."""
    r = speedups(results)
    lines: list[str] = []
    if ("resident", "data") in r:
        res = r[("resident", "data")]
        lines.append(f"Data only, the device-resident pipeline delivered {res:,.1f}x the lab's images/s.")
    if ("workers", "data") in r:
        w = r[("workers", "data")]
        if w < 0.9:
            how = f"slowed the DataLoader down ({w:.1f}x the lab's rate): on {os.cpu_count()} CPU cores they compete"
            how += " with the main process instead of running beside it"
        elif w <= 1.1:
            how = f"made little difference ({w:.1f}x the lab's rate) on {os.cpu_count()} CPU cores"
        else:
            how = f"sped the DataLoader up {w:.1f}x by preparing batches on other cores ({os.cpu_count()} here)"
        lines.append(f"{workers} worker processes {how}.")
    if ("wrapper", "data") in r and ("resident", "data") in r:
        wr, res = r[("wrapper", "data")], r[("resident", "data")]
        tail = (
            f"batching by index on the device was {res / wr:.1f}x faster again"
            if res > wr
            else "batching by index on the device was no faster here"
        )
        lines.append(f"Converting the images once (the wrapper) gave {wr:.1f}x the lab's rate; {tail}.")
    if ("resident", "linear") in r and ("resident", "cnn") in r:
        lin, cnn = r[("resident", "linear")], r[("resident", "cnn")]
        if cnn < lin:
            lines.append(
                f"With a model to train, the gain shrinks to what the model's own step allows: {lin:.1f}x with the "
                f"linear model, {cnn:.1f}x with the CNN, whose arithmetic per image now dominates."
            )
        else:
            lines.append(f"With a model to train, the resident pipeline gave {lin:.1f}x (linear) and {cnn:.1f}x (CNN).")
    return lines


def grid_findings(rates: dict[str, dict[int, float]]) -> list[str]:
    """Sentences on the batch-size experiment, ``rates[device][batch_size]`` in images/s, from its own numbers."""
    lines = []
    for dev, per_size in rates.items():
        small, large = min(per_size), max(per_size)
        gain = per_size[large] / per_size[small]
        lines.append(f"{dev}: batch {large} trained {gain:.1f}x as many images/s as batch {small}.")
    if "cpu" in rates and len(rates) > 1:
        for dev, per_size in rates.items():
            if dev == "cpu":
                continue
            shared = sorted(set(per_size) & set(rates["cpu"]))
            ratios = ", ".join(f"{per_size[b] / rates['cpu'][b]:.1f}x at batch {b}" for b in shared)
            lines.append(f"{dev} against the CPU: {ratios}.")
    return lines


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m helpers.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="device to run on (default: auto, as pick_device chooses)")
    parser.add_argument("--dataset", default="MNIST", help="MNIST (default) or FashionMNIST (available offline)")
    parser.add_argument("--quick", action="store_true", help="a short run: 30 batches per measurement")
    parser.add_argument("--batches", type=int, help="batches per timed run (default 200, 30 with --quick; 0: an epoch)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure; the median is reported")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (default 2)")
    parser.add_argument("--batch-size", type=int, default=128, help="images per batch (default 128, as in the lab)")
    parser.add_argument("--subset", type=int, help="use only the first N training images (for tests)")
    parser.add_argument("--data-dir", help=f"data root (default ${data.ENV_DATA_DIR} or ./data)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.workers < 0 or args.batch_size < 1 or (args.batches or 0) < 0:
        parser.error("--repeats and --batch-size must be at least 1; --batches and --workers at least 0.")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table; returns the exit status."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    try:
        device = devices.pick_device(args.device)
        dataset = data.load_dataset(args.dataset, train=True, root=args.data_dir, verbose=False)
    except (ValueError, devices.DeviceUnavailableError, data.DatasetUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.subset:
        dataset = Subset(dataset, range(min(args.subset, len(dataset))))
    batches = args.batches if args.batches is not None else (30 if args.quick else 200)
    batches = batches or None  # 0 means a whole epoch
    pinned = device.type == "cuda"
    print(
        f"Pipeline benchmark: {data.canonical_name(args.dataset)} ({len(dataset):,} training images) on {device}, "
        f"batch {args.batch_size}, {'a whole epoch' if batches is None else f'{batches} batches'} per run, "
        f"median of {args.repeats} interleaved runs after warm-up; torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads, {os.cpu_count()} CPUs",
        flush=True,
    )
    results = run_benchmark(
        dataset,
        device,
        batches,
        args.repeats,
        args.workers,
        batch_size=args.batch_size,
        progress=lambda what: print(f"  {what} ...", file=sys.stderr, flush=True),
    )
    print(format_table(results, len(dataset), args.workers, pinned))
    print("Epoch: time for all training images at the CNN's rate. Resident pipeline against the goals:")
    print("\n".join(goal_lines(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
