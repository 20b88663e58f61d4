"""Lesson 11's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from exercises.core import Recorder, exercise, learner_code
from exercises.lesson_08 import ShapeWaits
from helpers.placement import same_device
from helpers.readings import Verdict

_HISTORIES = [
    ([(1.0, 0.5), (2.0, 0.88), (3.0, 0.9)], 0.88, 2.0),  # reached exactly at the target
    ([(0.5, 0.7), (1.5, 0.91), (2.5, 0.86), (3.5, 0.93)], 0.9, 1.5),  # the first time counts, not a later one
    ([(1.0, 0.5), (2.0, 0.6)], 0.9, None),  # never reached
    ([], 0.9, None),
]


@exercise("11_time_to_target", "time to target", function=True)
def check_time_to_target(time_to_target: Callable | None) -> str | None:
    """``time_to_target(history, target)`` returns the training time of the first point at or above the target."""
    for history, target, expected in _HISTORIES:
        with learner_code("it raised ", f" on history={history}"):
            got = time_to_target(list(history), target)
        if got != expected:
            return (
                f"for history={history} and target={target} it returned {got!r}, expected {expected!r} "
                "(the first point with accuracy >= target; None if none)"
            )
    return None


_SPREADS = [
    ([10.0, 11.0, 12.0], [5.0, 5.5, 6.0], Verdict.KEPT),
    ([10.0, 11.0, 12.0], [9.0, 10.5, 11.0], Verdict.NO_CLEAR_DIFFERENCE),  # lower mean, overlapping ranges
    ([10.0, 11.0, 12.0], [12.5, 13.0, 14.0], Verdict.SLOWER),
    ([10.0, 10.2, 10.4], [10.5, 10.6, 19.0], Verdict.SLOWER),
    ([5.0, 9.0, 13.0], [8.8, 8.9, 9.0], Verdict.NO_CLEAR_DIFFERENCE),  # a tighter spread inside a wide one
    ([10.0, 11.0, 12.0], [8.0, 9.0, 10.0], Verdict.NO_CLEAR_DIFFERENCE),  # a tie: the slowest after only equals
    ([10.0, 11.0, 12.0], [12.0, 13.0, 14.0], Verdict.NO_CLEAR_DIFFERENCE),  # the fastest before: not beyond it
]
_SAID = {Verdict.KEPT: "kept", Verdict.SLOWER: "slower", Verdict.NO_CLEAR_DIFFERENCE: "no clear difference"}
"""The words the exercise asks ``keep_or_reject`` to answer with, for each verdict."""


@exercise("11_keep_rule", "keep or reject", function=True)
def check_keep_rule(keep_or_reject: Callable | None) -> str | None:
    """``keep_or_reject(before, after)`` says "kept", "no clear difference" or "slower" from two lists of seconds."""
    for before, after, expected in _SPREADS:
        with learner_code("it raised ", f" on before={before}, after={after}"):
            got = keep_or_reject(list(before), list(after))
        if (
            got != _SAID[expected] and got != expected
        ):  # the course's own Verdict (readings.ranges_verdict) is right too
            tie = max(after) == min(before) or min(after) == max(before)
            why = (
                "a tie is not beyond the spread: kept needs the slowest run after strictly faster than the fastest "
                "run before, slower the reverse"
                if tie
                else "keep only when the slowest run after beats the fastest run before"
            )
            return f"before={before}, after={after}: it said {got!r}, expected {_SAID[expected]!r}; {why}"
    return None


class _QueuedClock:
    """A fake device: ``work()`` queues ``work_s`` seconds and returns at once, ``sync()`` waits for the queue, and
    ``clock()`` reads the time. It starts with ``queued_s`` seconds of earlier work still running."""

    def __init__(self, queued_s: float = 2.0, launch_s: float = 0.001, work_s: float = 0.5) -> None:
        self.now, self.pending, self.launch_s, self.work_s = 0.0, queued_s, launch_s, work_s
        self.calls = {"work": 0, "sync": 0, "clock": 0}

    def work(self) -> None:
        self.calls["work"] += 1
        self.now += self.launch_s  # the Python side of a launch
        self.pending += self.work_s

    def sync(self) -> None:
        self.calls["sync"] += 1
        self.now += self.pending
        self.pending = 0.0

    def clock(self) -> float:
        self.calls["clock"] += 1
        return self.now


@exercise("11_time_it_right", "time it right", function=True)
def check_time_it(time_it: Callable | None) -> str | None:
    """``time_it(fn, sync, clock)`` returns the seconds ``fn()``'s device work takes, queued work included and earlier
    work excluded, measured with a fake device whose clock only sees finished work after ``sync()``."""
    fake = _QueuedClock()
    with learner_code("time_it raised "):
        got = time_it(fake.work, fake.sync, fake.clock)
    expected = fake.launch_s + fake.work_s
    if fake.calls["work"] != 1:
        return f"it called fn {fake.calls['work']} times; call it once between the clock reads"
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return f"it returned {got!r}; return the seconds as a number"
    if fake.calls["clock"] < 2:
        return (
            f"it read clock() {fake.calls['clock']} time(s): read the clock it is given, before and after, since "
            "that is the device's (another clock, such as time.perf_counter() called directly, does not see the "
            "work)"
        )
    if fake.calls["sync"] > 0 and abs(got - 1e3 * expected) < 1e-6:
        return f"it returned {got:.1f}: that is milliseconds; return seconds, as clock() reads them"
    if fake.calls["sync"] == 0:
        return (
            f"it measured {got:.3f} s, the work takes {expected:.3f} s: it never calls sync(), so the clock "
            "stops before the device has finished"
        )
    if abs(got - expected) > 1e-9:
        if got > expected + fake.launch_s:
            why = "the device was still busy with earlier work when the clock started: sync() before the first read"
        else:
            why = "the queued work was not finished when the clock was read again: sync() before the last read"
        return f"it measured {got:.3f} s, the work takes {expected:.3f} s: {why}"
    return None


@exercise("11_flip_on_device", "augment on the device", function=True)
def check_flip_half(flip_half: Callable | None, device: torch.device) -> str | None:
    """``flip_half(X, generator)`` mirrors a random half of the (B, C, H, W) batch left-right, with the random choice
    made on ``X.device`` from ``generator``. Run on ``device`` (values checked), then on the meta device (shapes
    only), recording where every tensor it makes lives; a GPU the lesson did not choose is never used."""
    for where in (torch.device(device), torch.device("meta")):
        X = torch.arange(512 * 2 * 4 * 6, dtype=torch.float32, device=where).reshape(512, 2, 4, 6)  # (B, C, H, W)
        on = where if where.type != "meta" else torch.device("cpu")  # meta has no generator; its ops take a CPU one
        # On a GPU a mask made on the CPU meets the GPU's generator and raises: say where to make it.
        hint = "; the generator is on X's device: make the random mask with device=X.device" if on.type != "cpu" else ""
        given = X.clone()
        with learner_code(f"on {where} it raised ", hint):
            with Recorder() as recorder, ShapeWaits() as waits:
                out = flip_half(X, torch.Generator(device=on).manual_seed(0))
            again = flip_half(given.clone(), torch.Generator(device=on).manual_seed(0))
        if waits.ops:
            return (
                f"it made a tensor whose size depends on the data ({waits.named()}): on a GPU the host waits for "
                "the device on every batch to learn that size (lesson 08); pick whole images with "
                "torch.where(mask[:, None, None, None], X.flip(3), X), whose size is known"
            )
        if where.type != "meta" and not torch.equal(X, given):
            return (
                "it changed the batch it was given in place: where that batch is a view of the data set on the device, "
                "every epoch would flip the data set itself; return a new tensor and leave X as it was"
            )
        if not isinstance(out, torch.Tensor) or out.shape != X.shape or not same_device(out.device, where):
            got = f"{tuple(out.shape)} on {out.device}" if isinstance(out, torch.Tensor) else type(out).__name__
            return f"for a batch {tuple(X.shape)} on {where} it returned {got}"
        if elsewhere := recorder.made_on - {where.type}:
            return (
                f"with the batch on {where} it made tensors on {', '.join(sorted(elsewhere))}: make the random "
                "mask with device=X.device"
            )
        if where.type == "meta":
            continue
        kept = (out == X).flatten(1).all(dim=1)
        mirrored = (out == X.flip(3)).flatten(1).all(dim=1)
        if not bool((kept | mirrored).all()):
            return (
                "some images are neither unchanged nor mirrored left-right: flip the last axis (W) of the "
                "(B, C, H, W) batch, whole images at a time"
            )
        share = mirrored.float().mean().item()
        if not 0.35 < share < 0.65:
            return f"it mirrored {share:.0%} of the images; about half should be, chosen at random for each image"
        if not torch.equal(again, out):
            return (
                "two calls with generators of the same seed gave different flips: draw the mask from the "
                "generator (generator=generator)"
            )
    return None
