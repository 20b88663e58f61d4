"""Lesson 05's own code: the data-pipeline benchmark (images per second of ways to feed a model, one change per row, on
one device) and the lesson's plots.

Lesson 05 runs the benchmark; ``python -m tools.bench`` runs it from a terminal in a clone of the course. Row 1 is the
lab's setup (a DataLoader applying ToTensor and Normalize per image, batch 128, no workers). Each row is timed on data
only, the linear model and the CNN (median of repeats after a warm-up); the sentences under the table are chosen from
the run's own numbers by the course's rules (``readings.compare``, ``batch_scaling``, ``rate_trend``). The readers
of what bounds a step (``launch_diagnosis``) and the profiler summary that reads the same on a CPU and on a GPU
(``profile_summary``) live here too.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers import devices, readings
from helpers.models import build_model
from helpers.plotting import new_axes
from helpers.readings import KEPT, MIN_NOISE, SLOWER, Diagnosis, Timing, as_timing, compare
from helpers.text import format_rows, format_seconds, ratio_text
from helpers.timing import time_on_device
from helpers.transfer import DeviceDataLoader, DeviceResidentLoader

# What bounds a step, and how its time grows with the batch: the rules the benchmark and the lesson read by.

LAUNCH_BOUND, DEVICE_BOUND, PARTLY_LAUNCH_BOUND, NO_DEVICE_TIMELINE = (
    "launch-bound",
    "device-bound",
    "partly launch-bound",
    "no device timeline",
)


def launch_diagnosis(
    step_s: float,
    device_s: float | None,
    launch_ratio: float = 2.0,
    busy_fraction: float = 0.8,
    steps: int | None = None,
) -> Diagnosis:
    """Read the wall time of some steps against the device's busy time in them (None: no device timeline, as on a
    CPU). Steps ``launch_ratio`` times the device time or longer: launch-bound (the device waits for launches). The
    device busy for ``busy_fraction`` of them or more: device-bound. In between: partly launch-bound. ``steps``: how
    many profiled steps the two times add up; given, the sentence says so, prints the times per step and says that the
    profiler's own overhead is in the step time."""
    if step_s <= 0:
        raise ValueError(f"step_s must be positive, got {step_s}.")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps must be a positive integer or None, got {steps!r}.")
    profiled = "" if steps is None else f"{steps} profiled step{'' if steps == 1 else 's'}"
    if device_s is None:
        took = f"The steps took {format_seconds(step_s)}"
        if steps is not None:
            took = (
                f"{profiled} took {format_seconds(step_s)}, {format_seconds(step_s / steps)} a step (the profiler's "
                "own overhead included),"
            )
        return Diagnosis(
            NO_DEVICE_TIMELINE,
            (
                f"{took} and the profiler recorded no device timeline: on this "
                "device the CPU runs the arithmetic itself, so there are no launches for it to wait on. Use the step "
                "time against the batch size instead."
            ),
        )
    busy = f"the device was busy {device_s / step_s:.0%} of it"
    if steps is None:
        figures = f"{format_seconds(step_s)} of steps against {format_seconds(device_s)} of device time ({busy})"
    else:
        figures = (
            f"{profiled}: {format_seconds(step_s / steps)} a step against {format_seconds(device_s / steps)} of device "
            f"time a step ({busy}; the step time includes the profiler's own overhead, so an unprofiled step is "
            "shorter and the device's share of it larger)"
        )
    if step_s >= launch_ratio * device_s:
        return Diagnosis(
            LAUNCH_BOUND,
            f"{figures}: launch-bound. The device waits for Python and kernel launches; "
            "cut launches first (larger batches, CUDA graphs, fused optimizers, fewer "
            "host syncs).",
        )
    if device_s >= busy_fraction * step_s:
        return Diagnosis(
            DEVICE_BOUND,
            f"{figures}: device-bound. The kernels themselves take the time; make them "
            "cheaper (mixed precision, channels_last, TF32) rather than fewer.",
        )
    return Diagnosis(
        PARTLY_LAUNCH_BOUND,
        f"{figures}: partly launch-bound. Both fewer launches and cheaper kernels can help; measure each.",
    )


OVERHEAD_BOUND, COMPUTE_BOUND, IN_BETWEEN, UNCLEAR = "overhead-bound", "compute-bound", "in between", "unclear"
FLAT, PROPORTIONAL = 0.3, 0.7
"""Step time ~ batch**k: k at most FLAT reads as flat (fixed costs per step), k at least PROPORTIONAL as arithmetic."""
SMALL_GROWTH = 0.25
"""A flat step time that grew by more than this fraction, outside the spread, costs something: not "almost for free"."""
WIDE_SPREAD = 1.0
"""Repeats at one batch size that spread more than this, (slowest - fastest) / median, leave the reading unclear."""


def _scaling_reading(small: int, t_small: Timing, large: int, t_large: Timing, within: str) -> tuple[str, str]:
    """What bounds a step, from its step times at two batch sizes: the kind and the sentence (without a label).
    ``within`` narrows the advice to the sizes read (" (up to batch 512)", say), or is empty."""
    growth, size = t_large.median / t_small.median, large / small
    c = compare(t_large, t_small, MIN_NOISE)  # clear: the step time did change with the batch
    away = compare(t_large, [t * size for t in t_small.times], MIN_NOISE)  # clear: it did not grow in proportion
    exponent = math.log(growth) / math.log(size) if c.clear else 0.0
    seen = (
        f"{format_seconds(t_small.median)} a step at batch {small}, {format_seconds(t_large.median)} at batch "
        f"{large}, {ratio_text(growth)} the time for {size:g}x the images"
    )
    seen += "" if c.clear else f" ({c.why_unclear})"
    fixed = "Fixed costs per step (Python, dispatching or launching each operation, the optimizer) set"
    if not c.clear and not away.clear:
        return UNCLEAR, (
            f"the repeats spread too widely to tell a flat step time from one in proportion to the batch: {seen}. "
            "Time more images per run, on a quieter machine, before drawing a conclusion"
        )
    if not c.clear or (away.clear and exponent <= FLAT):
        if not c.clear or growth <= 1 + SMALL_GROWTH:
            shape = "did not grow with the batch" if growth < 1 else "stayed nearly flat"
            return OVERHEAD_BOUND, (
                f"step time {shape}: {seen}. {fixed} the pace, not arithmetic, so a larger batch{within} trains more "
                "images per second almost for free"
            )
        return OVERHEAD_BOUND, (
            f"step time grew far less than the batch did: {seen}. {fixed} most of the pace, not arithmetic, so a "
            f"larger batch{within} trains more images per second ({ratio_text(size / growth)} here), though each "
            "step takes longer"
        )
    if not away.clear or exponent >= PROPORTIONAL:
        return COMPUTE_BOUND, (
            f"step time grew about in proportion to the batch: {seen}. The arithmetic sets the pace, so a larger "
            f"batch{within} brings few extra images per second"
        )
    return IN_BETWEEN, (
        f"step time grew, but less than the batch did: {seen}. Part of each step is a fixed cost and part is "
        f"arithmetic that grows with the batch, so a larger batch{within} raises images per second, less than in "
        "proportion"
    )


def batch_scaling(steps: dict[int, Timing | Sequence[float]], label: str = "") -> Diagnosis:
    """What bounds a training step, from its seconds per step (repeats) at two or more batch sizes. Flat step time:
    fixed costs per step set the pace (overhead-bound); time in proportion to the batch: arithmetic does
    (compute-bound). Growth inside the spread counts as flat, growth whose repeats overlap the proportional one as
    proportional; both at once: unclear, as are repeats at any size that spread more than WIDE_SPREAD. The reading
    runs from the smallest batch to the largest, or, where images per second clearly fell from one size to the next,
    only up to the size before the first fall; the sentence then names each fall and the size that trained the most
    images per second. ``label`` starts the sentence."""
    if len(steps) < 2:
        raise ValueError(f"Need step times at two or more batch sizes, got {sorted(steps)}.")
    timings = {size: as_timing(steps[size]) for size in sorted(steps)}
    sizes = list(timings)
    wide = [size for size in sizes if timings[size].spread > WIDE_SPREAD]
    if wide:
        spreads = ", ".join(f"{timings[size].spread:.0%} at batch {size}" for size in wide)
        what = (
            f"the reading is unclear: the repeats spread {spreads} (slowest minus fastest over the median, above "
            f"{WIDE_SPREAD:.0%}: they differ by more than the median itself). Time more images per run, on a quieter "
            "machine, before drawing a conclusion"
        )
        return Diagnosis(UNCLEAR, f"{label}: {what}." if label else f"{what[0].upper()}{what[1:]}.")
    falls = [  # neighbouring sizes where the larger batch clearly trained fewer images per second
        (a, b)
        for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        if compare(timings[a].per(a), timings[b].per(b), MIN_NOISE).verdict == SLOWER
    ]
    top = falls[0][0] if falls else sizes[-1]
    if top == sizes[0]:
        kind = COMPUTE_BOUND
        what = (
            "step time grew more than in proportion to the batch: the arithmetic, and the memory it moves, set the pace"
        )
    else:
        kind, what = _scaling_reading(
            sizes[0], timings[sizes[0]], top, timings[top], f" (up to batch {top})" if falls else ""
        )
    if falls:
        parts = []
        for a, b in falls:
            t_a, t_b = timings[a].median, timings[b].median
            parts.append(
                f"from batch {a} to batch {b} ({format_seconds(t_a)} to {format_seconds(t_b)} a step, "
                f"{ratio_text(t_b / t_a)} the time for {b / a:g}x the images)"
            )
        best = max(sizes, key=lambda size: size / timings[size].median)
        what += (
            f". Images per second fell {' and '.join(parts)}: there the step grew more than the batch did. Of the "
            f"sizes timed, batch {best} trained the most images per second ({best / timings[best].median:,.0f})"
        )
    return Diagnosis(kind, f"{label}: {what}." if label else f"{what[0].upper()}{what[1:]}.")


@dataclass(frozen=True)
class ProfileRow:
    name: str
    calls: int
    self_cpu_s: float
    self_device_s: float


@dataclass(frozen=True)
class ProfileSummary:
    """The profiler's operators, with totals that do not count a time twice."""

    rows: list[ProfileRow]
    """Operators (no user ranges), sorted by self device time where there is a device timeline, else self CPU."""
    cpu_side_s: float
    """All self CPU time recorded, ranges included, on every thread. On a GPU, autograd runs the backward on a thread
    of its own while the calling thread waits inside ``backward()``, so this can exceed the steps' wall time."""
    device_s: float | None
    """Busy time of the device's kernels and copies; None where no device timeline was recorded."""
    step_s: float | None = None
    """Wall time of the profiled steps (the ``ProfilerStep`` ranges a schedule records, on the calling thread only);
    None without a schedule."""
    ranges_cpu_s: dict[str, float] = field(default_factory=dict)
    """Each ``record_function`` range's total CPU time (children included), from its CPU-side entry. On a GPU
    ``key_averages`` also lists every range on the device timeline, under the same name, with no CPU time."""
    launch_calls: int = 0
    launch_cpu_s: float = 0.0
    """Calls of the runtime's kernel-launch functions (``cudaLaunchKernel`` and the like) and their self CPU time: the
    CPU's cost of launching kernels. They run no kernel themselves, so a table sorted by device time leaves them out."""

    def table(self, limit: int = 12) -> str:
        """The top ``limit`` rows; the percentages are shares of the totals printed beneath (never above 100%)."""
        on_device = self.device_s is not None
        head = ["operator", "calls", "self CPU", "% CPU"] + (["self device", "% device"] if on_device else [])
        rows = []
        for row in self.rows[:limit]:
            cells = [row.name if len(row.name) <= 44 else row.name[:41] + "...", row.calls]
            cells += [format_seconds(row.self_cpu_s), _share(row.self_cpu_s, self.cpu_side_s)]
            if on_device:
                cells += [format_seconds(row.self_device_s), _share(row.self_device_s, self.device_s)]
            rows.append(cells)
        totals = f"CPU-side time: {format_seconds(self.cpu_side_s)}   " + (
            f"device time: {format_seconds(self.device_s)}" if on_device else "(no device timeline)"
        )
        if self.launch_calls:
            totals += (
                f"\nkernel launches (cudaLaunchKernel and the like): {self.launch_calls:,} calls, "
                f"{format_seconds(self.launch_cpu_s)} of self CPU time, {_share(self.launch_cpu_s, self.cpu_side_s)} "
                "of the CPU-side time"
            )
        return f"{format_rows([head, *rows], right=range(1, len(head)))}\n{totals}"


def _share(part: float, whole: float | None) -> str:
    return f"{part / whole:.1%}" if whole else "-"


LAUNCH_CALLS = ("cudaLaunch", "cuLaunch", "cudaGraphLaunch", "hipLaunch", "hipModuleLaunch", "hipExtModuleLaunch")
"""How the names of the runtime's kernel-launch functions begin (CUDA runtime and driver, CUDA graphs, ROCm)."""


def profile_summary(events: Iterable[Any], device_timeline: bool) -> ProfileSummary:
    """Summarise ``prof.key_averages()`` (event times in microseconds): operators by self time, the CPU-side total and
    the device total. The CPU side counts ``record_function`` ranges too (their self time is the Python between
    operators); the device time leaves out user ranges mirrored on the device timeline, which would count their kernels
    twice. Rows are the CPU operators, with the self device time of the kernels they launched. The steps' wall time
    adds up the ``ProfilerStep`` ranges' total time; each range's CPU total and the kernel launches' calls and self CPU
    time come from CPU-side events only."""
    cpu_side = device = steps = launch_cpu = 0.0
    stepped = False
    launches = 0
    rows, ranges = [], {}
    for event in events:
        on_cpu = getattr(event, "device_type", torch.autograd.DeviceType.CPU) == torch.autograd.DeviceType.CPU
        step = event.key.startswith("ProfilerStep")
        user_range = bool(getattr(event, "is_user_annotation", False)) or step
        self_cpu = event.self_cpu_time_total / 1e6
        self_device = getattr(event, "self_device_time_total", 0) / 1e6
        if on_cpu:
            cpu_side += self_cpu
            if step:
                steps += event.cpu_time_total / 1e6
                stepped = True
            elif user_range:
                ranges[event.key] = ranges.get(event.key, 0.0) + event.cpu_time_total / 1e6
            else:
                rows.append(ProfileRow(event.key, event.count, self_cpu, self_device))
                if event.key.startswith(LAUNCH_CALLS):
                    launches += event.count
                    launch_cpu += self_cpu
        elif not user_range:
            device += self_device
    key = (lambda r: r.self_device_s) if device_timeline else (lambda r: r.self_cpu_s)
    rows.sort(key=key, reverse=True)
    return ProfileSummary(
        rows, cpu_side, device if device_timeline else None, steps if stepped else None, ranges, launches, launch_cpu
    )


PIPELINES = ("lab", "workers", "pinned", "wrapper", "indexed", "resident")
"""Every row the benchmark knows, in table order; ``default_pipelines`` picks those that mean something on a device."""
TASKS = ("data", "linear", "cnn")
TASK_TITLES = {"data": "data only", "linear": "linear model", "cnn": "CNN"}
GOALS = {"data": 100.0, "linear": 10.0, "cnn": 2.0}
"""Speed-ups over the lab's setup the last row (data kept on the device) should reach, per task."""

_PARENT = {"workers": "lab", "pinned": "workers", "wrapper": "lab", "indexed": "wrapper", "resident": "indexed"}


def default_pipelines(device: str | torch.device) -> tuple[str, ...]:
    """The rows worth timing on ``device``: pinned memory needs a CUDA GPU, and on the CPU "indexed" is "resident"."""
    kind = torch.device(device).type
    return tuple(p for p in PIPELINES if (p != "pinned" or kind == "cuda") and (p != "indexed" or kind != "cpu"))


def absent_rows(device: str | torch.device) -> list[str]:
    """One line for each row ``default_pipelines`` leaves out on ``device``, and why."""
    kind = torch.device(device).type
    lines = []
    if kind != "cuda":
        lines.append(
            f"No pinned-memory row: page-locked batches speed up copies from the CPU to a CUDA GPU, and this run's "
            f"device is {kind}."
        )
    if kind == "cpu":
        lines.append(
            "No separate row for indexing in CPU memory with a copy per batch: on the CPU that is the same as keeping "
            "the data on the device."
        )
    return lines


def parent_of(name: str, present: Sequence[str]) -> str | None:
    """The row that ``name`` changes one thing from (None for the lab's), skipping rows absent from ``present``."""
    parent = _PARENT.get(name)
    while parent is not None and parent not in present:
        parent = _PARENT.get(parent)
    return parent


def change_of(name: str, present: Sequence[str], workers: int = 2) -> str:
    """What row ``name`` changes from its parent, in a few words."""
    if name == "resident" and parent_of(name, present) == "wrapper":
        return "batched by index (DeviceResidentLoader)"
    return {
        "lab": "DataLoader, per-sample transforms (the lab)",
        "workers": f"{workers} worker processes",
        "pinned": "pinned memory, non-blocking copies",
        "wrapper": "converted once (DeviceDataLoader)",
        "indexed": "batched by index, copied per batch",
        "resident": "all on the device (DeviceResidentLoader)",
    }[name]


def pipeline_title(name: str, present: Sequence[str] = PIPELINES, workers: int = 2) -> str:
    """A row's title for tables and plots: "3. row 1 + converted once (DeviceDataLoader)"."""
    number = {p: i + 1 for i, p in enumerate(present)}
    parent = parent_of(name, present)
    change = change_of(name, present, workers)
    return f"{number[name]}. {change}" if parent is None else f"{number[name]}. row {number[parent]} + {change}"


@dataclass
class Measurement:
    """One pipeline on one task: ``timing`` holds the seconds per run of ``batches`` batches, ``images`` images;
    ``busy``: the seconds per batch the device itself was busy (from the profiler), where that was measured."""

    pipeline: str
    task: str
    images: int
    timing: Timing
    batches: int = 0
    busy: float | None = None

    @property
    def seconds(self) -> float:
        """Median seconds per run."""
        return self.timing.median

    @property
    def images_per_second(self) -> float:
        return self.images / self.seconds

    @property
    def step_seconds(self) -> float:
        """Median seconds per batch."""
        return self.seconds / self.batches

    def per_batch(self) -> list[float]:
        """Each repeat's seconds per batch."""
        return self.timing.per(self.batches).times

    def per_image(self) -> list[float]:
        """Each repeat's seconds per image."""
        return self.timing.per(self.images).times


# --- judging measurements (by the rules in helpers.readings) -----------------------------------------------------


def rate_trend(per_image: dict[int, Sequence[float]], label: str = "") -> str:
    """One sentence on images/s across batch sizes, from seconds per image (repeats) at each size: each step is a rise,
    a fall or level (no clear difference), and runs of one kind are joined: "rose from batch 32 to batch 512 (3.10x),
    then levelled off to batch 2048 (1.02x)"."""
    if len(per_image) < 2:
        raise ValueError(f"Need images/s at two or more batch sizes, got {sorted(per_image)}.")
    sizes = sorted(per_image)
    steps = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        c = compare(per_image[a], per_image[b], MIN_NOISE)  # faster: batch b trained more images per second
        steps.append((c.verdict, a, b))
    runs: list[list[Any]] = []
    for verdict, a, b in steps:
        if runs and runs[-1][0] == verdict:
            runs[-1][2] = b
        else:
            runs.append([verdict, a, b])
    parts = []
    for i, (verdict, a, b) in enumerate(runs):
        gain = statistics.median(per_image[a]) / statistics.median(per_image[b])
        if verdict == KEPT:
            word = "rose"
        elif verdict == SLOWER:
            word = "fell"
        else:
            word = "levelled off" if i > 0 and runs[i - 1][0] == KEPT else "stayed level"
        if i == 0:
            parts.append(f"{word} from batch {a} to batch {b} ({ratio_text(gain)})")
        else:
            parts.append(f"then {word} to batch {b} ({ratio_text(gain)})")
    head = f"{label}: " if label else ""
    return f"{head}images per second {', '.join(parts)}."


def agreement(label: str, times: Sequence[float], other: str, other_times: Sequence[float]) -> str:
    """A sentence saying whether two measurements of the same thing (seconds, repeats) agree within their spread."""
    c = compare(other_times, times, MIN_NOISE)
    mine, theirs = statistics.median(times), statistics.median(other_times)
    seen = f"{label} ({format_seconds(mine)}) and {other} ({format_seconds(theirs)})"
    if not c.clear:
        return f"{seen} agree within the spread of their repeats."
    return (
        f"{seen} differ by {ratio_text(max(c.speedup, 1 / c.speedup))}, more than the spread of their repeats: they "
        "ran at different moments, so treat both with care and rerun the two cells to compare them."
    )


# --- running the pipelines -------------------------------------------------------------------------------------


def make_pipeline(
    name: str, dataset: Any, device: torch.device, batch_size: int = 128, workers: int = 2, seed: int = 0
) -> Iterable:
    """The (X, y) batches of row ``name`` from an MNIST-style ``dataset`` (ToTensor + Normalize, or a Subset of one);
    those of "lab", "workers", "pinned" and "indexed" are still on the CPU (the runner copies them)."""
    g = torch.Generator().manual_seed(seed)
    if name == "lab":
        return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=g)
    if name in ("workers", "pinned"):
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            generator=g,
            num_workers=workers,
            persistent_workers=workers > 0,  # start the worker processes once, not every epoch
            pin_memory=name == "pinned",  # page-locked batches copy faster and can overlap with compute
        )
    if name == "wrapper":
        cpu = DeviceResidentLoader.from_dataset(dataset, "cpu", batch_size, shuffle=False)  # convert once, on the CPU
        tensors = TensorDataset(cpu.images, cpu.labels)
        return DeviceDataLoader(DataLoader(tensors, batch_size=batch_size, shuffle=True, generator=g), device)
    if name == "indexed":
        return DeviceResidentLoader.from_dataset(dataset, "cpu", batch_size, shuffle=True, seed=seed)
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
    """Runs a number of batches of one pipeline through one task, each batch moved to the device first (by
    ``DeviceDataLoader``, whose rule makes the copies non-blocking where the loader pins memory)."""

    def __init__(self, loader: Iterable, task: str, device: torch.device, seed: int = 0) -> None:
        self.loader = DeviceDataLoader(loader, device)  # a batch already on the device is left where it is
        self.step = _step_fn(task, device, seed)
        self.images = self.batches = 0

    def __call__(self, batches: int | None) -> None:
        images = count = 0
        for X, y in islice(iter(self.loader), batches):  # each call starts a new pass: a new shuffle
            self.step(X, y)
            images += len(y)
            count += 1
        self.images, self.batches = images, count


def device_busy(fn: Callable[[], None], device: torch.device) -> float | None:
    """Seconds a CUDA device was busy during one call of ``fn``, from torch.profiler; None on other devices (a CPU
    runs the Python and the arithmetic on the same cores: busy time is wall time)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    devices.synchronize(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's notes on its own set-up are not the lesson's subject
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            devices.synchronize(device)
    return profile_summary(prof.key_averages(), device_timeline=True).device_s


def measure_feed(
    loader: Iterable,
    task: str,
    device: torch.device,
    batches: int | None = None,
    repeats: int = 3,
    warmup_batches: int = 3,
    seed: int = 0,
    pipeline: str = "",
    profile_batches: int = 0,
) -> Measurement:
    """Time ``batches`` batches (None: a whole epoch) of ``loader`` on ``task``, moved to ``device``; median of
    ``repeats`` new passes after a warm-up. ``profile_batches`` more batches on a CUDA device give ``busy``."""
    run = _Runner(loader, task, device, seed)
    run(warmup_batches)
    timing = time_on_device(lambda: run(batches), device, repeats, 0)  # first: run.images then counts a timed pass
    m = Measurement(pipeline, task, run.images, timing, run.batches)
    if profile_batches > 0:
        busy = device_busy(lambda: run(profile_batches), device)
        m.busy = None if busy is None else busy / run.batches
    return m


def run_benchmark(
    dataset: Any,
    device: torch.device,
    batches: int | None = 200,
    repeats: int = 3,
    workers: int = 2,
    pipelines: Iterable[str] | None = None,
    tasks: Iterable[str] = TASKS,
    batch_size: int = 128,
    warmup_batches: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[Measurement]:
    """Every pipeline (default: ``default_pipelines(device)``) on every task, on one device, in this process. Repeats
    are interleaved (round 1 of every job, then round 2, ...), so a change in the machine's load slows all alike."""
    pipelines = default_pipelines(device) if pipelines is None else tuple(pipelines)
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
    return [
        Measurement(p, t, run.images, readings.as_timing(times[(p, t)]), run.batches) for (p, t), run in runners.items()
    ]


# --- what the pipeline table and its sentences say -------------------------------------------------------------


def present_rows(results: list[Measurement]) -> list[str]:
    """The pipelines ``results`` holds, in table order."""
    return [p for p in PIPELINES if any(m.pipeline == p for m in results)]


def row_comparisons(results: list[Measurement]) -> dict[tuple[str, str], readings.Comparison]:
    """Each (row, task) against the same task in the row it changes one thing from: what table and sentences use."""
    by = {(m.pipeline, m.task): m for m in results}
    present = present_rows(results)
    out = {}
    for (p, t), m in by.items():
        parent = parent_of(p, present)
        if parent is not None and (parent, t) in by:
            out[(p, t)] = compare(by[(parent, t)].per_image(), m.per_image(), MIN_NOISE)
    return out


def speedups(results: list[Measurement], baseline: str = "lab") -> dict[tuple[str, str], float]:
    """Images/s of each (pipeline, task) divided by the baseline pipeline's on the same task."""
    base = {m.task: m.images_per_second for m in results if m.pipeline == baseline}
    return {(m.pipeline, m.task): m.images_per_second / base[m.task] for m in results if m.task in base}


def format_table(results: list[Measurement], epoch_images: int | None = None, workers: int = 2) -> str:
    """Per task "img/s (spread) ratio", the ratio to the row it changes from; with ``epoch_images``, a last column
    gives the time of an epoch of that many images at the CNN's rate."""
    present = present_rows(results)
    tasks = [t for t in TASKS if any(m.task == t for m in results)]
    by = {(m.pipeline, m.task): m for m in results}
    versus = row_comparisons(results)
    head = ["row: one change from an earlier row"] + [TASK_TITLES[t] for t in tasks]
    if epoch_images:
        head.append(f"{TASK_TITLES[tasks[-1]]} epoch")
    rows = []
    for p in present:
        cells = [pipeline_title(p, present, workers)]
        for t in tasks:
            m = by[(p, t)]
            ratio = ratio_text(versus[(p, t)].speedup) if (p, t) in versus else "-"
            cells.append(f"{m.images_per_second:,.0f} ({m.timing.spread:.0%}) {ratio:>6}")
        if epoch_images:
            cells.append(f"{epoch_images / by[(p, tasks[-1])].images_per_second:.1f} s")
        rows.append(cells)
    return format_rows([head, *rows], right=range(1, len(head)))


def _verdict_text(c: readings.Comparison) -> str:
    return c.direction if c.clear else f"no clear difference ({c.why_unclear})"


def findings(results: list[Measurement], workers: int = 2) -> list[str]:
    """Sentences decided from this run's numbers: each row against the row it changes from (the table's ratios),
    then how much of a training step feeding the data took in the last row."""
    present = present_rows(results)
    tasks = [t for t in TASKS if any(m.task == t for m in results)]
    number = {p: i + 1 for i, p in enumerate(present)}
    versus = row_comparisons(results)
    lines = []
    for p in present:
        parent = parent_of(p, present)
        if parent is None:
            continue
        parts = [
            f"{TASK_TITLES[t]} {ratio_text(versus[(p, t)].speedup)}, {_verdict_text(versus[(p, t)])}"
            for t in tasks
            if (p, t) in versus
        ]
        lines.append(
            f"Row {number[p]}, {change_of(p, present, workers)}, against row {number[parent]} (images/s ratio): "
            f"{'; '.join(parts)}."
        )
    by = {(m.pipeline, m.task): m for m in results}
    last = present[-1]
    if (last, "data") in by:
        for t in ("linear", "cnn"):
            if (last, t) not in by or not by[(last, t)].batches or not by[(last, "data")].batches:
                continue
            lines.append(feeding_line(by[(last, "data")], by[(last, t)], number[last]))
    return lines


def feeding_line(feed: Measurement, whole: Measurement, row: int) -> str:
    """How much of a training step feeding the data takes in one row: its data-only pass against its pass with the
    model, both per batch over the same pipeline. A share is given only where feeding alone is clearly the shorter
    (beyond the repeats' spread); two separate passes can also come out the other way, and the line then says so."""
    f, w = feed.step_seconds, whole.step_seconds
    head = (
        f"In row {row} with the {TASK_TITLES[whole.task]}, a batch took {format_seconds(f)} to feed alone and "
        f"{format_seconds(w)} to feed and train on"
    )
    c = compare(whole.per_batch(), feed.per_batch(), MIN_NOISE)  # "faster": feeding alone is clearly the shorter
    if c.direction == "faster":
        share = f / w
        if share < 0.2:
            verdict = "the model's own step, not the data, sets the pace"
        elif share > 0.5:
            verdict = "feeding the data is still most of the step"
        else:
            verdict = "feeding the data and the model's step both matter"
        return f"{head}, so feeding is {share:.0%} of the step: {verdict}."
    if not c.clear:
        return (
            f"{head}, no clear difference ({c.why_unclear}): this run cannot tell how much the model's work adds to "
            "feeding, so it gives no share of the step."
        )
    return (
        f"{head}: feeding alone measured slower than feeding and training, which only a change in the machine's load "
        "between the two passes explains, so this run cannot split the step; run the benchmark again on a quieter "
        "machine."
    )


def goal_lines(results: list[Measurement]) -> list[str]:
    """One line per task: the last row's speed-up over the lab's setup against its goal."""
    present = present_rows(results)
    ratio = speedups(results)
    by = {(m.pipeline, m.task): m for m in results}
    last = present[-1]
    lines: list[str] = []
    for task, goal in GOALS.items():
        if (last, task) in ratio and ("lab", task) in by and last != "lab":
            got = ratio[(last, task)]
            verdict = "met" if got >= goal else "not met"
            mine, lab = by[(last, task)].images_per_second, by[("lab", task)].images_per_second
            rates = f"{mine:,.0f} against {lab:,.0f} img/s"
            lines.append(
                f"  {TASK_TITLES[task]:<13} row {len(present)} {ratio_text(got):>7} the lab's images/s ({rates}; "
                f"goal >= {goal:g}x: {verdict})"
            )
    return lines


# --- the batch-size experiment ---------------------------------------------------------------------------------


def format_grid(grid: dict[str, dict[int, Measurement]], epoch_images: int | None = None) -> str:
    """A table of step time per batch size and device: median, spread of the repeats, images/s, busy share."""
    head = ["device", "batch", "ms per step", "spread", "images/s"]
    busy = any(m.busy is not None for per in grid.values() for m in per.values())
    if busy:
        head.append("device busy")
    if epoch_images:
        head.append("epoch")
    rows = []
    for dev, per_size in grid.items():
        for bs in sorted(per_size):
            m = per_size[bs]
            cells = [
                dev,
                str(bs),
                f"{m.step_seconds * 1e3:.2f}",
                f"{m.timing.spread:.0%}",
                f"{m.images_per_second:,.0f}",
            ]
            if busy:
                cells.append("-" if m.busy is None else f"{m.busy / m.step_seconds:.0%}")
            if epoch_images:
                cells.append(f"{epoch_images / m.images_per_second:.1f} s")
            rows.append(cells)
    return format_rows([head, *rows], right=range(len(head)))


def grid_findings(grid: dict[str, dict[int, Measurement]]) -> list[str]:
    """Sentences on the batch-size experiment, ``grid[device][batch_size]``, each decided from its own numbers."""
    lines = []
    for dev, per_size in grid.items():
        if len(per_size) < 2:
            continue
        lines.append(rate_trend({bs: m.per_image() for bs, m in per_size.items()}, dev))
        lines.append(str(batch_scaling({bs: m.per_batch() for bs, m in per_size.items()}, dev)))
        for bs, m in sorted(per_size.items()):
            if m.busy is not None:  # the profiler's busy time: did the device wait for the CPU?
                lines.append(f"{dev}: at batch {bs}, {launch_diagnosis(m.step_seconds, m.busy).sentence}")
    if "cpu" in grid and len(grid) > 1:
        for dev, per_size in grid.items():
            if dev == "cpu":
                continue
            shared = sorted(set(per_size) & set(grid["cpu"]))
            parts = []
            for b in shared:
                c = compare(grid["cpu"][b].per_image(), per_size[b].per_image(), MIN_NOISE)
                parts.append(f"{ratio_text(c.speedup)} at batch {b}" + ("" if c.clear else " (no clear difference)"))
            lines.append(f"{dev} against the CPU, images per second: {', '.join(parts)}.")
    return lines


# --- the lesson's plots ---
def pipeline_bars(rates: dict[str, dict[str, float]], ax: plt.Axes | None = None) -> plt.Axes:
    """Grouped horizontal bars of images/s: ``rates[pipeline][task]``, on a log scale (they differ 1000-fold)."""
    ax = new_axes(ax, figsize=(7.4, 3.8))
    pipelines = list(rates)
    tasks = list(dict.fromkeys(t for per_task in rates.values() for t in per_task))
    height = 0.8 / len(tasks)
    for j, task in enumerate(tasks):
        ys = [i + (j - (len(tasks) - 1) / 2) * height for i in range(len(pipelines))]
        ax.barh(ys, [rates[p].get(task, float("nan")) for p in pipelines], height=height, label=task)
    ax.set_yticks(range(len(pipelines)), pipelines)
    ax.invert_yaxis()  # the lab's setup on top, as in the table
    ax.set(xscale="log", xlabel="images per second (log scale)")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(axis="x", which="major", alpha=0.3)
    return ax


def batch_size_curves(rates: dict[str, dict[int, float]], ax: plt.Axes | None = None) -> plt.Axes:
    """Images/s against batch size, one line per device: ``rates[device][batch_size]``."""
    ax = new_axes(ax)
    for device, per_size in rates.items():
        sizes = sorted(per_size)
        ax.plot(sizes, [per_size[s] for s in sizes], marker="o", label=device)
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel="batch size", ylabel="training images per second")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax


def step_time_curves(step_seconds: dict[str, dict[int, float]], ax: plt.Axes | None = None) -> plt.Axes:
    """Milliseconds per training step against batch size, one line per device: ``step_seconds[device][batch]``. Grey
    guides from each device's smallest batch, flat (fixed costs per step set the pace) and in proportion to the batch
    (arithmetic does), show by where the line runs what bounds the step."""
    ax = new_axes(ax)
    for i, (device, per_size) in enumerate(step_seconds.items()):
        sizes = sorted(per_size)
        ms = [per_size[s] * 1e3 for s in sizes]
        ax.plot(sizes, ms, marker="o", color=f"C{i}", label=device)
        ax.plot(sizes, [ms[0]] * len(sizes), color="grey", linestyle=":", linewidth=1)
        ax.plot(sizes, [ms[0] * s / sizes[0] for s in sizes], color="grey", linestyle="--", linewidth=1)
    ax.plot([], [], color="grey", linestyle=":", label="flat: fixed costs per step")
    ax.plot([], [], color="grey", linestyle="--", label="in proportion: arithmetic")
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel="batch size", ylabel="milliseconds per training step")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return ax


def training_curves(history: dict[str, list[float]], axes=None) -> list[plt.Axes]:
    """Loss and accuracy per epoch, training and validation: ``history["train_loss"]``, ``["val_accuracy"]`` and so
    on, one value per epoch, as the lesson's training loop records them."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(9.6, 3.4), layout="constrained")
    epochs = range(1, len(history["train_loss"]) + 1)
    for ax, metric in zip(axes, ("loss", "accuracy"), strict=True):
        for split, label in (("train", "training"), ("val", "validation")):
            values = history.get(f"{split}_{metric}", [])
            if values:
                ax.plot(epochs[: len(values)], values, marker="o", label=label)
        ax.set(xlabel="epoch", ylabel=metric, xticks=list(epochs))
        ax.legend()
        ax.grid(alpha=0.3)
    return list(axes)


def prediction_grid(images, labels, predictions, class_names: list[str], ncols: int = 8) -> plt.Figure:
    """Images with their predicted class; a wrong prediction is titled in red with the true class after it."""
    nrows = -(-len(images) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.35 * ncols, 1.55 * nrows), layout="constrained", squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, img, true, pred in zip(axes.flat, images, labels, predictions, strict=False):
        ax.imshow(img.squeeze().cpu().numpy(), cmap="gray")  # (1, H, W) -> (H, W); normalising only shifts colours
        ok = int(true) == int(pred)
        title = class_names[int(pred)] if ok else f"{class_names[int(pred)]}\n(is {class_names[int(true)]})"
        ax.set_title(title, fontsize=8, color="black" if ok else "red")
    return fig
