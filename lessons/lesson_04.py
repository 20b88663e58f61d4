"""Lesson 04's pinned-memory experiment: a CPU batch copied to a CUDA GPU three ways, timed in turns, and the
sentences its figures decide."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence

import torch

from helpers.readings import KEPT, NO_CLEAR_DIFFERENCE, SLOWER, Verdict, as_timing
from helpers.text import format_seconds
from helpers.timing import time_on_device

COPY_WAYS = {
    "plain": "plain copy from pageable memory: batch.to(device)",
    "pin in the loop": "pin each batch, then copy: batch.pin_memory().to(device, non_blocking=True)",
    "pinned already": "copy a batch pinned ahead of time (what a DataLoader with pin_memory=True hands over)",
}
"""The ways ``time_batch_copies`` copies a CPU batch to a GPU, by name, with what each does."""


def time_batch_copies(
    batch: torch.Tensor, device: str | torch.device, copies: int = 20, repeats: int = 7
) -> dict[str, list[float]]:
    """Seconds per batch, one figure per repeat, for each way in ``COPY_WAYS`` of copying the CPU tensor ``batch`` to
    the CUDA ``device``, each repeat timing ``copies`` copies between two synchronisations."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"Pinned memory serves copies to a CUDA GPU; got device {device}.")
    if copies < 1 or repeats < 1:
        raise ValueError(f"Need copies >= 1 and repeats >= 1, got copies={copies}, repeats={repeats}.")
    batch = batch.cpu()
    pinned = batch.pin_memory()
    ways: dict[str, Callable[[], torch.Tensor]] = {
        "plain": lambda: batch.to(device),
        "pin in the loop": lambda: batch.pin_memory().to(device, non_blocking=True),
        "pinned already": lambda: pinned.to(device, non_blocking=True),
    }

    def copy_many(way: Callable[[], torch.Tensor]) -> None:
        for _ in range(copies):
            way()

    times: dict[str, list[float]] = {name: [] for name in ways}
    # The ways take turns, so a slow moment hits all alike; round 0 warms up (a first pinned allocation is slow).
    for _ in range(repeats + 1):
        for name, way in ways.items():
            measured = time_on_device(lambda way=way: copy_many(way), device, repeats=1, warmup=0)
            times[name].append(measured.median / copies)
    return {name: found[1:] for name, found in times.items()}


DISTURBED_SPREAD = 0.5
"""Repeats of one way spread over more than this share of their median: wide enough to hide a difference."""


def middle_half(times: Sequence[float]) -> tuple[float, float]:
    """The lower and upper quartiles of ``times``: the range of the middle half of the repeats."""
    if len(times) == 0:
        raise ValueError("need at least one time.")
    if len(times) == 1:
        return times[0], times[0]
    lower, _, upper = statistics.quantiles(times, n=4, method="inclusive")
    return lower, upper


def middle_half_verdict(before: Sequence[float], after: Sequence[float]) -> Verdict:
    """``after`` against ``before`` (repeats of seconds for the same copy), by their middle halves: KEPT when the
    middle half of ``after`` lies wholly below the middle half of ``before``, SLOWER for the reverse, otherwise
    NO_CLEAR_DIFFERENCE. A few slow repeats, a quarter or fewer of either side, cannot overturn a difference that the
    rest show, as they can when the whole ranges decide (``readings.ranges_verdict``)."""
    low_before, high_before = middle_half(before)
    low_after, high_after = middle_half(after)
    if high_after < low_before:
        return KEPT
    if low_after > high_before:
        return SLOWER
    return NO_CLEAR_DIFFERENCE


def pinning_findings(times: Mapping[str, Sequence[float]]) -> list[str]:
    """One sentence per way against the plain copy, decided by ``middle_half_verdict``. A clear verdict says how many
    repeats lie beyond every plain one; for a faster way it names the slowest of the rest, and for pinning in the loop
    their likely cause, a buffer freshly page-locked. Where the middle halves overlap and either side spread over
    ``DISTURBED_SPREAD`` of its median, the sentence says so and asks for the cell to be run again."""
    plain = statistics.median(times["plain"])
    what = {
        "pin in the loop": "Pinning each batch in the loop, then copying it,",
        "pinned already": "Copying a batch that was pinned ahead of time",
    }
    lines = []
    for name, subject in what.items():
        found = times[name]
        verdict = middle_half_verdict(times["plain"], found)
        median = statistics.median(found)
        figures = f"{format_seconds(median)} against {format_seconds(plain)} per batch"
        if verdict == NO_CLEAR_DIFFERENCE:
            spreads = {way: as_timing(times[way]).spread for way in (name, "plain")}
            wide = [f"{way} {spread:.0%}" for way, spread in spreads.items() if spread > DISTURBED_SPREAD]
            rerun = (
                f" The repeats spread widely ({', '.join(wide)} of the median), which can hide a difference; run the "
                "cell again."
                if wide
                else ""
            )
            lines.append(
                f"{subject} made no clear difference to a plain copy: {figures}, and the middle halves of their "
                f"repeats overlap.{rerun}"
            )
            continue
        faster = verdict == KEPT
        side = "below" if faster else "above"
        # repeats not beyond every plain one: slow moments of this way (faster) or fast ones (slower)
        others = [t for t in found if (t >= min(times["plain"]) if faster else t <= max(times["plain"]))]
        if not others:
            how = f"every one of the {len(found)} repeats {side} every plain one"
        else:
            how = (
                f"the middle half of its {len(found)} repeats {side} the plain copy's middle half, "
                f"{len(found) - len(others)} of the {len(found)} {side} every plain one"
            )
        line = (
            f"{subject} was {verdict.direction} than a plain copy: {figures} ({median / plain:.2f} times its time; "
            f"{how})."
        )
        if others and faster:
            took = "repeat took" if len(others) == 1 else "repeats took up to"
            line += f" Its {len(others)} other {took} {format_seconds(max(others))}"
            if name == "pin in the loop":
                line += (
                    ": the likely cause is that PyTorch now and then has to page-lock a fresh buffer, since with "
                    "non_blocking=True it reuses a cached one only once the copy reading from it is done, and "
                    "page-locking costs far more than a copy."
                )
            else:
                line += "."
        lines.append(line)
    return lines


def pinning_report(batch: torch.Tensor, times: Mapping[str, Sequence[float]]) -> str:
    """A table of the median time per batch and the spread of each way, then the findings."""
    lines = [f"batch {tuple(batch.shape)} {str(batch.dtype).removeprefix('torch.')}, {batch.nbytes / 2**10:,.0f} KiB:"]
    for name, found in times.items():
        t = as_timing(found)
        median = format_seconds(t.median)
        lines.append(f"  {name:15} {median:>9} per batch  (spread {t.spread:.0%})  {COPY_WAYS[name]}")
    return "\n".join([*lines, *pinning_findings(times)])
