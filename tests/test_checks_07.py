"""Lesson 07 checkers: reference solutions pass, wrong answers do not, and every 07_ checker is covered."""

from __future__ import annotations

from helpers.checks import CHECKERS

COVERED = {"07_rank_indices", "07_steps_per_epoch"}


def test_every_lesson_07_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("07_")} == COVERED


def test_rank_indices() -> None:
    check = CHECKERS["07_rank_indices"]
    assert check([1, 5, 9], 10, 4, 1)
    assert check([2, 6, 0], 10, 4, 2)  # padding repeats index 0
    assert not check([1, 5], 10, 4, 1)  # forgot the padding
    assert not check([2, 3, 4], 10, 4, 1)  # a contiguous block is not how the sampler splits
    assert not check("1, 5, 9", 10, 4, 1)
    assert not check(None, 10, 4, 1)


def test_steps_per_epoch() -> None:
    check = CHECKERS["07_steps_per_epoch"]
    assert check(235, 60_000, 4, 64)
    assert not check(938, 60_000, 4, 64)  # one process on everything
    assert not check(234, 60_000, 4, 64)  # the last, smaller batch is a step too
    assert not check(235.0, 60_000, 4, 64)
    assert not check(None, 60_000, 4, 64)
