"""The training-step ladder of lessons 08 and 09: one configuration of the course CNN's training step at a time, each
change timed in turns against the last kept step and kept only when it is faster beyond the noise
(``readings.compare``). Lesson 08 prints each piece where it teaches it (section 3); lesson 09 climbs on from there.
The lesson writes ``build(recipe)``, a fresh model's ``step(X, y)``, and ``batches(recipe)``, its batches."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from helpers.readings import KEPT, Diagnosis, Timing, compare, reference_drift
from helpers.timing import DeviceTimer, time_on_device


@dataclass(frozen=True)
class Recipe:
    """One configuration of the training step: lesson 08 changes the first four fields, lesson 09 the last three."""

    resident: bool = False  # data: whole set on the device (True) or a DataLoader with per-image transforms
    batch_size: int = 64
    loss_item: bool = True  # read loss.item() every step, as a loop that logs every loss does
    fused: bool = False  # the optimizer updates all parameters in one fused kernel
    amp: bool = False  # mixed precision with torch.autocast
    channels_last: bool = False  # the channels_last memory format for the model and the batch
    compile: bool = False  # torch.compile; on CUDA with mode="reduce-overhead" (CUDA graphs)


@dataclass
class Result:
    """One rung: the change, its recipe, its step's seconds per image and its verdict against the last kept step."""

    change: str
    recipe: Recipe
    per_image: Timing  # seconds per image, every repeat
    verdict: str  # readings.KEPT, readings.SLOWER or readings.NO_CLEAR_DIFFERENCE
    speedup: float  # over the last kept step, medians
    first_step_s: float
    run: Callable[[], None]  # the step on its batches, to time again later
    reference: Timing | None = None  # the last kept step, per image, in the same turns (None: the first rung)
    drift: Diagnosis | None = None  # did the last kept step's time move since it was last timed?

    @property
    def kept(self) -> bool:
        return self.verdict == KEPT


def measure(step, source: Iterator, batch_size: int, device: torch.device, repeats: int, min_repeat_time: float):
    """(seconds per image as a Timing, seconds of the first step, the step on its batches): the first step timed on
    its own, then ``repeats`` repeats of as many steps as fill ``min_repeat_time``, each between two synchronises."""
    with DeviceTimer(device) as first:
        step(*next(source))

    def run() -> None:
        step(*next(source))

    per_step = time_on_device(run, device, repeats=repeats, warmup=1, min_repeat_time=min_repeat_time)
    return per_step.per(batch_size), first.seconds, run


def in_turns(results: list[Result], device: torch.device, repeats: int) -> list[Timing]:
    """Seconds per image of each result's step, timed in turns: ``repeats`` rounds of one untimed step and one timed
    repeat of each, every other round in reverse order (A B, B A, A B, ...)."""
    times = [[] for _ in results]
    turns = list(zip(results, times, strict=True))
    for round_ in range(repeats):
        for r, seconds in turns if round_ % 2 == 0 else turns[::-1]:
            r.run()  # untimed: the timed repeat below starts from this step's state, not the other step's
            with DeviceTimer(device) as clock:
                for _ in range(r.per_image.calls):  # as many steps as measure found to fill a repeat
                    r.run()
            seconds.append(clock.seconds / (r.per_image.calls * r.recipe.batch_size))
    return [Timing(statistics.median(t), t, calls=r.per_image.calls) for r, t in zip(results, times, strict=True)]


class Ladder:
    """The rungs so far (``history``) and the rule that adds one: ``try_change``. ``build`` and ``batches`` are the
    lesson's; ``measure`` and ``in_turns`` (above) do the timing."""

    def __init__(self, device, build, batches, repeats: int = 5, min_repeat_time: float = 0.5) -> None:
        self.device, self.build, self.batches = device, build, batches
        self.repeats, self.min_repeat_time = repeats, min_repeat_time
        self.history: list[Result] = []
        self.last_timed: dict[str, Timing] = {}  # change -> its seconds per image when last timed in turns

    def start(self, change: str, recipe: Recipe) -> Result:
        """Measure ``recipe`` on its own, as the first kept rung."""
        source, args = self.batches(recipe), (recipe.batch_size, self.device, self.repeats, self.min_repeat_time)
        per_image, first, run = measure(self.build(recipe), source, *args)
        self.history.append(Result(change, recipe, per_image, KEPT, 1.0, first, run))
        return self.history[-1]

    def kept_step(self) -> Result:
        """The last kept rung: the step every new change is compared with."""
        return next(r for r in reversed(self.history) if r.kept)

    def try_change(self, change: str, **fields) -> Result:
        """Time the last kept recipe with ``fields`` changed against it, in turns; keep it only when it is faster
        beyond the noise. Prints the verdict, and a line when the last kept step's own time moved."""
        previous = self.kept_step()
        recipe = replace(previous.recipe, **fields)
        args = (recipe.batch_size, self.device, 1, self.min_repeat_time)  # warmed up, and how many steps fill a repeat
        warm, first, run = measure(self.build(recipe), self.batches(recipe), *args)
        new = Result(change, recipe, warm, "", 0.0, first, run)
        before, after = in_turns([previous, new], self.device, self.repeats)
        verdict = compare(before, after)
        earlier = self.last_timed.get(previous.change, previous.per_image)  # else: from its own turns
        drift = reference_drift(earlier, before, previous.change)
        self.last_timed[previous.change] = before
        self.history.append(Result(change, recipe, after, verdict.verdict, verdict.speedup, first, run, before, drift))
        print(
            f"{change}: {1 / after.median:,.0f} images/s (spread {after.spread:.0%}), against "
            f"{1 / before.median:,.0f} (spread {before.spread:.0%}) for {previous.change}, timed in turns: "
            f"{verdict.speedup:.2f}x, {verdict.verdict}"
        )
        if drift.kind == "drifted":
            print(
                f"  but the reference moved: {drift} ({1 / earlier.median:,.0f} images/s then). Against that "
                f"earlier timing the change would read {earlier.median / after.median:.2f}x."
            )
        return self.history[-1]
