"""The rules by which the lessons read their measurements: one verdict on a change (``Verdict``, ``keep_verdict``,
``compare``), a sentence comparing two speeds, and whether a reference drifted between two timings of it. The clock
that takes the measurements is ``helpers.timing``; lesson 05's own readers (what bounds a step, how its time grows
with the batch, the profiler summary) are in ``lessons.lesson_05``."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from helpers.text import format_seconds, ratio_text


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
