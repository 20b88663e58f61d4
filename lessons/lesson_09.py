"""Lesson 08's training-step ladder, written out there in section 3 (``Recipe``, ``batches``, ``measure``, ``in_turns``,
``try_change``) and reused from here by lesson 09: one configuration of the course CNN's training step at a time, each
change timed against the last kept step in turns and kept only when it is faster beyond the noise
(``readings.compare``). Lesson 08's ``Recipe`` has the fields it changes; this one adds lesson 09's three (``amp``,
``channels_last``, ``compile``), which the ``build`` that lesson 09 writes reads."""

from __future__ import annotations

import copy
import itertools
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch
from torch.utils.data import DataLoader, Dataset

from helpers import readings, timing, transfer


@dataclass(frozen=True)
class Recipe:
    """One configuration of the training step; each change flips one field."""

    resident: bool = False  # data: whole set on the device (True) or a DataLoader with per-image transforms
    batch_size: int = 64
    loss_item: bool = True  # read loss.item() every step, as a loop that logs every loss does
    fused: bool = False  # the optimizer updates all parameters in one fused kernel
    amp: bool = False  # mixed precision with torch.autocast
    channels_last: bool = False
    compile: bool = False  # torch.compile; on CUDA with mode="reduce-overhead" (CUDA graphs)


@dataclass
class Result:
    """One rung: the change, its recipe, its timing per image, and its verdict against the last kept step."""

    change: str
    recipe: Recipe
    per_image: readings.Timing  # seconds per image, every repeat
    verdict: str  # readings.KEPT, readings.SLOWER or readings.NO_CLEAR_DIFFERENCE
    speedup: float  # over the last kept step, medians
    first_step_s: float
    run: Callable[[], None]  # the step on its batches, to measure again later
    reference: readings.Timing | None = None  # the last kept step, per image, in the same turns (None: the start)
    drift: readings.Diagnosis | None = None  # did the last kept step's time move since its own measurement?

    @property
    def images_per_s(self) -> float:
        return 1 / self.per_image.median

    @property
    def kept(self) -> bool:
        return self.verdict == readings.KEPT


class Ladder:
    """Lesson 08's ``batches``, ``measure``, ``in_turns`` and ``try_change`` over one device, one training set and its
    device-resident copy ``resident`` (a ``transfer.DeviceResidentLoader``); ``build(recipe)`` returns a fresh model's
    training step, ``step(X, y)``, as the lesson that uses the ladder writes it."""

    def __init__(
        self,
        device: torch.device,
        train_set: Dataset,
        resident: transfer.DeviceResidentLoader,
        build: Callable[[Recipe], Callable[[torch.Tensor, torch.Tensor], None]],
        repeats: int = 5,
        min_repeat_time: float = 0.5,
    ) -> None:
        self.device, self.train_set, self.resident, self.build = device, train_set, resident, build
        self.repeats, self.min_repeat_time = repeats, min_repeat_time
        self.history: list[Result] = []
        self.last_timed: dict[str, readings.Timing] = {}  # change -> its last timing in turns, as the reference
        self.timer = timing.DeviceTimer  # what in_turns and the first step are timed with (a test's clock replaces it)

    def batches(self, recipe: Recipe) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(X, y) batches on the device, endlessly, from a device-resident loader or from a DataLoader."""
        if recipe.resident:
            loader = copy.copy(self.resident)  # the same images and labels on the device, not another copy of them
            loader.batch_size = recipe.batch_size
        else:
            pin = self.device.type == "cuda"  # pinned batches let the wrapper's copies be non_blocking
            loader = transfer.DeviceDataLoader(
                DataLoader(self.train_set, recipe.batch_size, shuffle=True, drop_last=True, pin_memory=pin),
                self.device,
            )
        return (batch for _ in itertools.count() for batch in loader)  # a new epoch each time the loader ends

    def measure(self, recipe: Recipe, repeats: int | None = None) -> tuple[readings.Timing, float, Callable[[], None]]:
        """(seconds per image as a readings.Timing, seconds taken by the first step, the step on its batches)."""
        step, source = self.build(recipe), self.batches(recipe)
        with self.timer(self.device) as first:
            step(*next(source))

        def run() -> None:
            step(*next(source))

        per_step = timing.time_on_device(
            run, self.device, repeats=repeats or self.repeats, warmup=1, min_repeat_time=self.min_repeat_time
        )
        return per_step.per(recipe.batch_size), first.seconds, run

    def in_turns(self, *results: Result) -> list[readings.Timing]:
        """Seconds per image of each result's step, timed in turns: ``repeats`` rounds of one untimed step and one
        timed repeat of each, every other round in reverse order (A B, B A, A B, ...)."""
        times: list[list[float]] = [[] for _ in results]
        turns = list(zip(results, times, strict=True))
        for round_ in range(self.repeats):
            for r, seconds in turns if round_ % 2 == 0 else turns[::-1]:
                r.run()  # untimed: the timed repeat below starts from this step's state, not the other step's
                with self.timer(self.device) as clock:
                    for _ in range(r.per_image.calls):  # as many steps as measure found to fill a repeat
                        r.run()
                seconds.append(clock.seconds / (r.per_image.calls * r.recipe.batch_size))
        return [
            readings.Timing(statistics.median(t), t, calls=r.per_image.calls)
            for r, t in zip(results, times, strict=True)
        ]

    def start(self, change: str, recipe: Recipe) -> Result:
        """Measure ``recipe`` on its own as the first kept step of the ladder."""
        per_image, first, run = self.measure(recipe)
        result = Result(change, recipe, per_image, readings.KEPT, 1.0, first, run)
        self.history.append(result)
        return result

    def kept_step(self) -> Result:
        """The last kept result: the step every new change is compared with."""
        return next(r for r in reversed(self.history) if r.kept)

    def try_change(self, change: str, **fields) -> Result:
        """Time the last kept recipe with ``fields`` changed against it, in turns; keep it only when it is faster
        beyond the noise. Prints the verdict, and a line when the last kept step's own time moved."""
        previous = self.kept_step()
        recipe = replace(previous.recipe, **fields)
        warm, first, run = self.measure(recipe, repeats=1)  # warmed up, and how many steps fill a repeat
        before, after = self.in_turns(previous, Result(change, recipe, warm, "", 0.0, first, run))
        verdict = readings.compare(before, after)
        earlier = self.last_timed.get(previous.change, previous.per_image)  # else: from its own turns
        drift = readings.reference_drift(earlier, before, previous.change)
        self.last_timed[previous.change] = before
        result = Result(change, recipe, after, verdict.verdict, verdict.speedup, first, run, before, drift)
        self.history.append(result)
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
        return result
