"""Timing code on a device honestly: synchronise before reading the clock, warm up, take the median of repeats.

The rules that read the measurements (is a change faster beyond the noise, what bounds a step) are in
``helpers.readings``, with ``Timing``, what every timing here returns."""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
import timeit
from collections.abc import Callable
from typing import Any

import torch

from helpers.devices import synchronize
from helpers.readings import Timing


def time_on_device(
    fn: Callable[[], Any],
    device: str | torch.device = "cpu",
    repeats: int = 5,
    warmup: int = 1,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    min_repeat_time: float = 0.0,
    max_calls: int = 10_000,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed repeats, each between two synchronisations.
    With ``min_repeat_time`` > 0, a repeat is as many calls (at most ``max_calls``) as make it last that long, so
    clock and device jitter do not dominate a fast call; times are per call. Tests replace ``sync`` and ``clock``."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}.")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"Need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}.")
    if min_repeat_time < 0 or max_calls < 1:
        raise ValueError(f"Need min_repeat_time >= 0 and max_calls >= 1, got {min_repeat_time} and {max_calls}.")
    if sync is None:

        def sync() -> None:
            synchronize(device)

    def timed(calls: int) -> float:
        sync()  # work queued before the timer starts must not be counted
        start = clock()
        for _ in range(calls):
            fn()
        sync()  # and work fn queued must have finished before the clock is read
        return clock() - start

    for _ in range(warmup):
        fn()
    calls = 1
    if min_repeat_time > 0:
        one = timed(1)
        calls = max(1, min(max_calls, math.ceil(min_repeat_time / one))) if one > 0 else max_calls
    times = [timed(calls) / calls for _ in range(repeats)]
    return Timing(median=statistics.median(times), times=times, warmup=warmup, calls=calls)


class DeviceTimer:
    """``with DeviceTimer(device) as t: ...`` then ``t.seconds``; synchronises on entry and exit (lesson 08)."""

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
    """Measure ``fn()`` with ``torch.utils.benchmark.Timer.blocked_autorange``. The Timer synchronises CUDA itself
    around each block of calls (torch 2.8 does not synchronise MPS), so on devices other than the CPU and CUDA each call
    is followed by a synchronise of ``device``. On the CPU the Timer reads a plain clock: its default clock synchronises
    the GPU whenever one is present, which would start CUDA on a GPU machine to time CPU code."""
    # torch.utils.benchmark imports cpp_extension, which logs "No CUDA runtime is found" without CUDA: harmless here.
    cpp_extension_log = logging.getLogger("torch.utils.cpp_extension")
    level = cpp_extension_log.level
    cpp_extension_log.setLevel(logging.ERROR)
    try:
        from torch.utils import benchmark as tb
    finally:
        cpp_extension_log.setLevel(level)

    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}.")
    if min_run_time <= 0:
        raise ValueError(f"min_run_time must be positive, got {min_run_time}.")
    device = torch.device(device)
    if device.type in ("cpu", "cuda"):  # nothing to wait for on the CPU; the Timer synchronises CUDA itself
        stmt_fn = fn
    else:

        def stmt_fn() -> None:
            fn()
            synchronize(device)

    # Timer's default clock synchronises CUDA (torch 2.8) or the current accelerator (later releases) if there is one.
    clock = {"timer": timeit.default_timer} if device.type == "cpu" else {}
    timer = tb.Timer(
        stmt="stmt_fn()",
        globals={"stmt_fn": stmt_fn},
        **clock,
        label=label,
        description=description,
        num_threads=torch.get_num_threads(),
    )
    # The Timer synchronises the current CUDA device only: make it the one measured.
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        return timer.blocked_autorange(min_run_time=min_run_time)
