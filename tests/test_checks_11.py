"""Lesson 11 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import pytest
import torch

from exercises.checks import CHECKERS
from exercises.lesson_11 import _SAID, _SPREADS
from helpers.readings import keep_verdict

TESTED = {"11_time_to_target", "11_keep_rule", "11_time_it_right", "11_flip_on_device"}


def test_every_lesson_11_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("11_")} == TESTED


def time_to_target(history, target):
    """The reference solution: the seconds of the first (seconds, accuracy) point at or above the target."""
    for seconds, accuracy in history:
        if accuracy >= target:
            return seconds
    return None


def _keep_rule(before, after):
    return _SAID[keep_verdict(before, after)]


@pytest.mark.parametrize(("before", "after", "expected"), _SPREADS)
def test_the_keep_cases_agree_with_the_ladder_rule(before, after, expected):
    assert _keep_rule(before, after) == _SAID[expected]


def test_time_to_target_reference(capsys):
    assert CHECKERS["11_time_to_target"](time_to_target)
    assert capsys.readouterr().out.startswith("[pass]")


def test_time_to_target_wrong_answers(capsys):
    check = CHECKERS["11_time_to_target"]
    assert not check(None)
    assert capsys.readouterr().out.startswith("[waiting]")
    strictly_above = lambda h, t: next((s for s, a in h if a > t), None)  # noqa: E731
    assert not check(strictly_above)
    assert ">= target" in capsys.readouterr().out
    last_time = lambda h, t: h[-1][0] if h else None  # noqa: E731
    assert not check(last_time)
    assert "[not yet]" in capsys.readouterr().out
    assert not check(42)
    assert "should be a function" in capsys.readouterr().out


def test_time_to_target_accepts_right_answers_written_differently(capsys):
    from itertools import dropwhile

    check = CHECKERS["11_time_to_target"]
    with_next = lambda h, t: next((s for s, a in h if a >= t), None)  # noqa: E731
    with_dropwhile = lambda h, t: next((s for s, _ in dropwhile(lambda p: p[1] < t, h)), None)  # noqa: E731
    for right in (with_next, with_dropwhile):
        assert check(right), capsys.readouterr().out
        assert capsys.readouterr().out.startswith("[pass]")


def test_time_to_target_wrong_answers_that_look_right(capsys):
    check = CHECKERS["11_time_to_target"]
    best_point = lambda h, t: max(h, key=lambda p: p[1])[0] if h and max(a for _, a in h) >= t else None  # noqa: E731
    assert not check(best_point)  # the best accuracy's time, not the first to reach the target
    assert "the first point with accuracy >= target" in capsys.readouterr().out
    zero_when_missed = lambda h, t: next((s for s, a in h if a >= t), 0.0)  # noqa: E731
    assert not check(zero_when_missed)  # 0 seconds reads as the fastest run of all
    assert "expected None" in capsys.readouterr().out


def test_keep_rule_reference(capsys):
    assert CHECKERS["11_keep_rule"](_keep_rule)
    assert capsys.readouterr().out.startswith("[pass]")


def test_keep_rule_wrong_answers(capsys):
    check = CHECKERS["11_keep_rule"]
    assert not check(None)
    assert capsys.readouterr().out.startswith("[waiting]")
    by_mean = lambda b, a: "kept" if sum(a) < sum(b) else "slower"  # noqa: E731
    assert not check(by_mean)
    assert "no clear difference" in capsys.readouterr().out
    by_median = lambda b, a: "kept" if sorted(a)[1] < sorted(b)[1] else "slower"  # noqa: E731
    assert not check(by_median)
    assert "[not yet]" in capsys.readouterr().out


def test_keep_rule_accepts_the_course_verdict_and_rejects_ties_taken_as_beyond_the_spread(capsys):
    from helpers.readings import ranges_verdict

    check = CHECKERS["11_keep_rule"]
    assert check(ranges_verdict)  # returns Verdict.SLOWER, "not kept: slower", for "slower"
    assert capsys.readouterr().out.startswith("[pass]")
    at_or_beyond = lambda b, a: (  # noqa: E731
        "kept" if max(a) <= min(b) else "slower" if min(a) >= max(b) else "no clear difference"
    )
    assert not check(at_or_beyond)
    out = capsys.readouterr().out
    assert "[not yet]" in out and "a tie is not beyond the spread" in out, out
    assert not check(lambda b, a: 1 / 0)
    assert "it raised ZeroDivisionError" in capsys.readouterr().out


def time_it_reference(fn, sync, clock):
    sync()  # earlier queued work must not be counted
    start = clock()
    fn()
    sync()  # this work must be finished before the clock is read
    return clock() - start


def time_it_never_syncs(fn, sync, clock):
    start = clock()
    fn()
    return clock() - start


def time_it_no_first_sync(fn, sync, clock):
    start = clock()
    fn()
    sync()
    return clock() - start


def time_it_syncs_after_reading(fn, sync, clock):
    sync()
    start = clock()
    fn()
    end = clock()
    sync()
    return end - start


def test_time_it_reference(capsys):
    assert CHECKERS["11_time_it_right"](time_it_reference)
    assert capsys.readouterr().out.startswith("[pass]")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (time_it_never_syncs, "never calls sync()"),
        (time_it_no_first_sync, "before the first read"),
        (time_it_syncs_after_reading, "before the last read"),
        (lambda fn, sync, clock: (sync(), fn(), fn(), sync(), 0.5)[-1], "2 times"),
    ],
)
def test_time_it_wrong_answers(wrong, hint, capsys):
    assert not CHECKERS["11_time_it_right"](wrong)
    out = capsys.readouterr().out
    assert out.startswith("[not yet]") and hint in out, out


def time_it_own_clock(fn, sync, clock):
    import time

    sync()
    start = time.perf_counter()  # not the clock it was given: the device's work is not on it
    fn()
    sync()
    return time.perf_counter() - start


def time_it_in_milliseconds(fn, sync, clock):
    return 1e3 * time_it_reference(fn, sync, clock)


def time_it_written_differently(fn, sync, clock):
    readings = []
    for action in (sync, None, fn, sync, None):
        if action is None:
            readings.append(clock())
        else:
            action()
    first, last = readings
    return last - first


def test_time_it_rejects_wrong_answers_that_look_right(capsys):
    check = CHECKERS["11_time_it_right"]
    assert not check(time_it_own_clock)
    out = capsys.readouterr().out
    assert "[not yet]" in out and "read clock() 0 time(s)" in out, out
    assert not check(time_it_in_milliseconds)
    out = capsys.readouterr().out
    assert "[not yet]" in out and "that is milliseconds" in out, out


def test_time_it_accepts_a_right_answer_written_differently(capsys):
    assert CHECKERS["11_time_it_right"](time_it_written_differently)
    assert capsys.readouterr().out.startswith("[pass]")


def test_time_it_waits_for_an_answer(capsys):
    assert not CHECKERS["11_time_it_right"](None)
    assert capsys.readouterr().out.startswith("[waiting]")


def flip_half_reference(X, generator):
    flip = torch.rand(X.shape[0], device=X.device, generator=generator) < 0.5  # (B,) made where X lives
    return torch.where(flip[:, None, None, None], X.flip(3), X)


def flip_half_cpu_mask(X, generator):
    flip = torch.rand(X.shape[0], generator=generator) < 0.5  # on the CPU, whatever X is
    return torch.where(flip.to(X.device)[:, None, None, None], X.flip(3), X)


def flip_half_wrong_axis(X, generator):
    flip = torch.rand(X.shape[0], device=X.device, generator=generator) < 0.5
    return torch.where(flip[:, None, None, None], X.flip(2), X)  # upside down, not left-right


def flip_half_all(X, generator):
    return X.flip(3)


def flip_half_no_generator(X, generator):
    flip = torch.rand(X.shape[0], device=X.device) < 0.5  # the global generator: not reproducible from the seed
    return torch.where(flip[:, None, None, None], X.flip(3), X)


def test_flip_half_reference(capsys):
    assert CHECKERS["11_flip_on_device"](flip_half_reference, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[pass]")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (flip_half_cpu_mask, "device=X.device"),
        (flip_half_wrong_axis, "last axis (W)"),
        (flip_half_all, "mirrored 100%"),
        (flip_half_no_generator, "generator=generator"),
        (lambda X, generator: X, "mirrored 0%"),
    ],
)
def test_flip_half_wrong_answers(wrong, hint, capsys):
    assert not CHECKERS["11_flip_on_device"](wrong, torch.device("cpu"))
    out = capsys.readouterr().out
    assert out.startswith("[not yet]") and hint in out, out


def flip_half_written_differently(X, generator):
    from torch import bernoulli, full, where

    flip = bernoulli(full((len(X), 1, 1, 1), 0.5, device=X.device), generator=generator).bool()  # (B, 1, 1, 1)
    return where(flip, torch.flip(X, dims=[-1]), X)


def flip_half_float_mask(X, generator):
    flip = (torch.rand(X.shape[0], 1, 1, 1, device=X.device, generator=generator) < 0.5).to(X.dtype)
    return flip * X.flip(3) + (1 - flip) * X


def flip_half_boolean_index(X, generator):
    flip = torch.rand(X.shape[0], device=X.device, generator=generator) < 0.5
    out = X.clone()
    out[flip] = X[flip].flip(3)  # as many images as the mask picks: a size known only from the data
    return out


def flip_half_in_place(X, generator):
    flip = torch.rand(X.shape[0], device=X.device, generator=generator) < 0.5
    X.copy_(torch.where(flip[:, None, None, None], X.flip(3), X))  # overwrites the caller's batch
    return X


def test_flip_half_accepts_right_answers_written_differently(capsys):
    for right in (flip_half_written_differently, flip_half_float_mask):
        assert CHECKERS["11_flip_on_device"](right, torch.device("cpu")), capsys.readouterr().out
        assert capsys.readouterr().out.startswith("[pass]")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (flip_half_boolean_index, "size depends on the data (indexing with a boolean mask"),
        (flip_half_in_place, "changed the batch it was given in place"),
    ],
)
def test_flip_half_wrong_answers_that_look_right(wrong, hint, capsys):
    assert not CHECKERS["11_flip_on_device"](wrong, torch.device("cpu"))
    out = capsys.readouterr().out
    assert out.startswith("[not yet]") and hint in out, out


def test_flip_half_waits_for_an_answer(capsys):
    assert not CHECKERS["11_flip_on_device"](None, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[waiting]")


def test_flip_half_on_a_cpu_lesson_leaves_the_machines_gpu_alone(monkeypatch, capsys):
    # DEVICE = "cpu" on a GPU machine: the checker must not touch CUDA, which the learner did not choose.
    def touched(*args, **kwargs):
        raise AssertionError("the checker used a CUDA GPU")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", touched)
    assert CHECKERS["11_flip_on_device"](flip_half_reference, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[pass]")
    assert not CHECKERS["11_flip_on_device"](flip_half_cpu_mask, torch.device("cpu"))  # the meta pass still sees it
    assert "device=X.device" in capsys.readouterr().out
