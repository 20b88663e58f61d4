"""Lesson 00 checker: it accepts the reference solution and rejects wrong answers."""

import torch

from exercises.checks import CHECKERS

TESTED = {"00_zeros_on_device"}


def test_every_lesson_00_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("00_")} == TESTED


def test_zeros_on_device():
    check = CHECKERS["00_zeros_on_device"]
    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert check(torch.zeros(2, 3, device=cpu), cpu) is True  # the reference
    assert check(None, cpu) is False  # unanswered
    assert check([[0, 0, 0], [0, 0, 0]], cpu) is False  # a list, not a tensor
    assert check(torch.zeros(3, 2), cpu) is False  # wrong shape
    assert check(torch.zeros(2, 3, dtype=torch.float64), cpu) is False  # wrong dtype
    assert check(torch.ones(2, 3), cpu) is False  # not zeros
    assert check(torch.zeros(2, 3), meta) is False  # made on the CPU, the lesson's device is another one
