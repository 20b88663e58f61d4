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


def test_the_exercise_asks_only_what_the_checker_can_see():
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parent.parent / "notebooks" / "00_check_your_setup.ipynb", as_version=4)
    task = next(c.source for c in nb.cells if c.get("id") == "c26")
    assert "one call" not in task and "directly on" not in task  # the checker cannot tell one call from two
    assert "not at how you made" in task
    cpu = torch.device("cpu")
    assert CHECKERS["00_zeros_on_device"](torch.zeros(2, 3).to(cpu), cpu) is True  # made, then moved: also passes
