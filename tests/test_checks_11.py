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
