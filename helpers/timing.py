"""Timing code on a device honestly: synchronise before reading the clock, warm up, take the median of repeats."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from helpers.devices import synchronize


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and every repeat it came from."""

    median: float
    times: list[float] = field(repr=False)
    warmup: int = 0

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repeats were."""
        return (max(self.times) - min(self.times)) / self.median if self.median else 0.0

    def __str__(self) -> str:
        return f"{format_seconds(self.median)} (median of {len(self.times)}, spread {self.spread:.0%})"


def format_seconds(seconds: float) -> str:
    """1.5e-5 -> '15.0 us', 0.25 -> '250.0 ms'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds / 1e-9:.0f} ns"


def time_on_device(
    fn: Callable[[], Any],
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed ones, each between two synchronisations.

    ``sync`` defaults to synchronising ``device``; tests replace it (and ``clock``) to watch what happens.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}.")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"Need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}.")
    if sync is None:

        def sync() -> None:
            synchronize(device)

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()  # work queued before the timer starts must not be counted
        start = clock()
        fn()
        sync()  # and work fn queued must have finished before the clock is read
        times.append(clock() - start)
    return Timing(median=statistics.median(times), times=times, warmup=warmup)


class DeviceTimer:
    """``with DeviceTimer(device) as t: ...`` then ``t.seconds``; synchronises on entry and exit.

    ``sync`` and ``clock`` default to synchronising ``device`` and ``time.perf_counter``; tests replace them.
    """

    def __init__(
        self,
        device: str | torch.device = "cpu",
        sync: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.device = torch.device(device)
        self.seconds = float("nan")
        self._sync = sync if sync is not None else (lambda: synchronize(self.device))
        self._clock = clock

    def __enter__(self) -> DeviceTimer:
        self._sync()  # work queued before the block must not be counted
        self._start = self._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sync()  # the block's queued work must finish before the clock is read
        self.seconds = self._clock() - self._start


def benchmark(
    fn: Callable[[], Any],
    device: str | torch.device = "cpu",
    label: str = "",
    description: str = "",
    min_run_time: float = 0.5,
) -> torch.utils.benchmark.Measurement:
    """Measure ``fn()`` with ``torch.utils.benchmark.Timer.blocked_autorange``.

    The Timer's clock synchronises before each reading, around each block of calls: in recent PyTorch releases the
    current accelerator (through ``torch.accelerator``), in torch 2.8 CUDA, XPU and PrivateUse1 devices but not MPS.
    For devices other than the CPU and CUDA each call is also wrapped with a synchronise, so the figures are right on
    every release the course supports.
    """
    from torch.utils import benchmark as tb

    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}.")
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be positive, got {min_run_time}.")
    device = torch.device(device)
    if device.type == "cpu":
        stmt_fn = fn
    else:

        def stmt_fn() -> None:
            fn()
            synchronize(device)

    timer = tb.Timer(
        stmt="stmt_fn()",
        globals={"stmt_fn": stmt_fn},
        label=label,
        description=description,
        num_threads=torch.get_num_threads(),
    )
    return timer.blocked_autorange(min_run_time=min_run_time)
