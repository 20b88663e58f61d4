"""The rules by which lessons 05, 08, 09 and 11 and the benchmarks read their measurements: one verdict on a change
(``Verdict``, ``keep_verdict``, ``compare``), whether a step is bound by launches or by arithmetic
(``launch_diagnosis``, ``batch_scaling``), and a profiler summary that reads the same on a CPU and on a GPU
(``profile_summary``). The clock that takes the measurements is ``helpers.timing``."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from helpers.text import format_rows, format_seconds, ratio_text


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and every repeat it came from."""

    median: float
    times: list[float] = field(repr=False)
    warmup: int = 0
    calls: int = 1
    """Calls of the timed function in each repeat; ``times`` are per call (each repeat's time divided by this)."""

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repeats were."""
        return (max(self.times) - min(self.times)) / self.median if self.median else 0.0

    def per(self, units: float) -> Timing:
        """The same repeats divided by ``units`` (images in a batch, say): seconds per unit."""
        if units <= 0:
            raise ValueError(f"units must be positive, got {units}.")
        return Timing(self.median / units, [t / units for t in self.times], self.warmup, self.calls)

    def __str__(self) -> str:
        calls = f", {self.calls} calls each" if self.calls > 1 else ""
        return f"{format_seconds(self.median)} (median of {len(self.times)}{calls}, spread {self.spread:.0%})"


def as_timing(times: Timing | Sequence[float]) -> Timing:
    """``times`` as a Timing: repeats of seconds, one or more, each positive."""
    if isinstance(times, Timing):
        return times
    if len(times) == 0 or not all(t > 0 and math.isfinite(t) for t in times):
        raise ValueError(f"Timings must be one or more positive, finite seconds, got {list(times)}.")
    return Timing(statistics.median(times), list(times))


class Verdict(str, Enum):
    """The course's one verdict on a change against what it changes. Its value is the word the ladders print (lesson
    08's table, the speedrun's); ``direction`` is the word the benchmarks' sentences use."""

    KEPT = "kept"
    SLOWER = "not kept: slower"
    NO_CLEAR_DIFFERENCE = "no clear difference"
    NOT_REACHED = "not kept: target not reached in every run"

    __str__ = str.__str__
    __format__ = str.__format__

    @property
    def kept(self) -> bool:
        return self is Verdict.KEPT

    @property
    def direction(self) -> str:
        """ "faster", "slower", "no clear difference" or "missed the target"."""
        return _DIRECTIONS[self]


_DIRECTIONS = {
    Verdict.KEPT: "faster",
    Verdict.SLOWER: "slower",
    Verdict.NO_CLEAR_DIFFERENCE: "no clear difference",
    Verdict.NOT_REACHED: "missed the target",
}
KEPT, SLOWER, NO_CLEAR_DIFFERENCE, NOT_REACHED = Verdict
MIN_NOISE = 0.05
"""The benchmarks' floor: medians less than this fraction apart are never called different, whatever their spread."""


def ranges_verdict(before: Sequence[float], after: Sequence[float]) -> Verdict:
    """The ranges of the repeats of two measurements (seconds): KEPT when every repeat of ``after`` beat every repeat
    of ``before``, SLOWER for the reverse; otherwise they overlap, noise alone could explain the difference:
    NO_CLEAR_DIFFERENCE, whatever the medians say."""
    if max(after) < min(before):
        return KEPT
    if min(after) > max(before):
        return SLOWER
    return NO_CLEAR_DIFFERENCE


def keep_verdict(before: Sequence[float], after: Sequence[float], min_noise: float = 0.0) -> Verdict:
    """The course's one ladder rule: one change, kept only beyond the noise. ``before`` and ``after`` are repeats of
    seconds for the same work (or times to a target, one per seed); ``ranges_verdict`` decides, and medians closer than
    the fraction ``min_noise`` are NO_CLEAR_DIFFERENCE too. ``math.inf`` marks a run that missed a target: ``after``
    with one is NOT_REACHED; otherwise ``before`` with one is beaten (KEPT)."""
    if len(before) == 0 or len(after) == 0:
        raise ValueError("need at least one time on each side.")
    if any(math.isinf(t) for t in after):
        return NOT_REACHED
    if any(math.isinf(t) for t in before):
        return KEPT  # the candidate reached the target every time, the rung before did not
    if abs(math.log(statistics.median(before) / statistics.median(after))) <= math.log1p(min_noise):
        return NO_CLEAR_DIFFERENCE
    return ranges_verdict(before, after)


@dataclass(frozen=True)
class Comparison:
    """``after`` measured against ``before`` (repeats of seconds for the same work): the verdict and its figures."""

    before: Timing
    after: Timing
    verdict: Verdict
    min_noise: float = 0.0

    @property
    def speedup(self) -> float:
        """How many times faster ``after`` is than ``before`` (medians)."""
        return self.before.median / self.after.median

    @property
    def kept(self) -> bool:
        return self.verdict.kept

    @property
    def clear(self) -> bool:
        return self.verdict != NO_CLEAR_DIFFERENCE

    @property
    def spread(self) -> float:
        """The larger spread, (slowest - fastest) / median, of the two sets of repeats."""
        return max(self.before.spread, self.after.spread)

    @property
    def why_unclear(self) -> str:
        """Why no difference is called: inside the spread, or smaller than ``min_noise``."""
        if ranges_verdict(self.before.times, self.after.times) == NO_CLEAR_DIFFERENCE:
            return f"inside the {self.spread:.0%} spread of the repeats"
        return f"less than the {self.min_noise:.0%} below which no difference is called"

    @property
    def direction(self) -> str:
        """ "faster", "slower" or "no clear difference": the verdict as the benchmarks' sentences say it."""
        return self.verdict.direction

    def __str__(self) -> str:
        return f"{self.speedup:.2f}x (spreads {self.before.spread:.0%} and {self.after.spread:.0%}): {self.verdict}"


def compare(before: Timing | Sequence[float], after: Timing | Sequence[float], min_noise: float = 0.0) -> Comparison:
    """``keep_verdict`` on two measurements (Timings or repeats of seconds for the same amount of work), with the
    figures it came from; the benchmarks pass ``min_noise=MIN_NOISE``."""
    before, after = as_timing(before), as_timing(after)
    return Comparison(before, after, keep_verdict(before.times, after.times, min_noise), min_noise)


def speed_comparison(name: str, times: Sequence[float], other: str, other_times: Sequence[float]) -> str:
    """One sentence comparing two timed ways of doing the same job, decided by ``compare`` from their repeats."""
    for label, values in ((name, times), (other, other_times)):
        if len(values) == 0:
            raise ValueError(f"No timings for {label!r}: time it at least once before comparing.")
        if any(not t > 0 for t in values):
            raise ValueError(f"Timings for {label!r} must be positive seconds, got {list(values)}.")
    c = compare(other_times, times)
    if not c.clear:
        return (
            f"no clear difference between {name} and {other}: their repeats overlap "
            f"(medians {c.speedup:.2f}x apart, inside the spread)"
        )
    if c.kept:
        return f"{name} was {ratio_text(c.speedup)} faster than {other}"
    return f"{name} was {ratio_text(1 / c.speedup)} slower than {other}"


@dataclass(frozen=True)
class Diagnosis:
    """What bounds a step (``kind``) and the sentence that says so, with the figures it came from."""

    kind: str
    sentence: str

    def __str__(self) -> str:
        return self.sentence


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


def reference_drift(
    earlier: Timing | Sequence[float], again: Timing | Sequence[float], name: str = "the reference"
) -> Diagnosis:
    """The same step timed twice, at two moments of a run (seconds per unit, repeats): "drifted" when the medians are
    further apart than the larger spread of the two measurements and than ``MIN_NOISE``, else "steady". A step compared
    in turns with one whose own time drifted was compared under conditions unlike those of its earlier measurement;
    the sentence says by how much, starting with ``name``."""
    earlier, again = as_timing(earlier), as_timing(again)
    ratio = again.median / earlier.median  # above 1: slower now than before
    noise = max(earlier.spread, again.spread, MIN_NOISE)
    took = f"{name} took {ratio_text(ratio)} the time it took when timed before"
    if abs(ratio - 1) > noise:
        return Diagnosis(
            "drifted",
            f"{took} ({'slower' if ratio > 1 else 'faster'} by {abs(ratio - 1):.0%}, beyond the spreads of "
            f"{earlier.spread:.0%} and {again.spread:.0%}): the conditions changed between the two measurements",
        )
    return Diagnosis("steady", f"{took}, within the noise ({noise:.0%})")
