"""Lesson 00 checker: it accepts the reference solution and right answers written otherwise, and rejects wrong
answers, the tensor made on the CPU and moved afterwards among them."""

import torch
from torch import zeros

from exercises.checks import CHECKERS

TESTED = {"00_zeros_on_device"}
CPU, META = torch.device("cpu"), torch.device("meta")


def test_every_lesson_00_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("00_")} == TESTED


def reference(device):
    return torch.zeros(2, 3, device=device)


def test_zeros_on_device_accepts_right_answers(capsys):
    check = CHECKERS["00_zeros_on_device"]
    assert check(reference, CPU) is True
    assert check(reference, META) is True  # the lesson on another device: one run there
    assert check(lambda device: zeros((2, 3), device=device), CPU) is True  # imported by name, shape as a tuple
    assert check(lambda device: torch.full((2, 3), 0.0, device=device), CPU) is True
    assert check(lambda device: torch.zeros(2, 3, device=device, dtype=torch.float32), CPU) is True
    assert capsys.readouterr().out.count("[pass]") == 5


def test_zeros_made_on_the_cpu_then_moved_fails_on_a_cpu_only_machine(capsys):
    check = CHECKERS["00_zeros_on_device"]
    for moved in (
        lambda device: torch.zeros(2, 3).to(device),
        lambda device: torch.zeros(2, 3, device="cpu").to(device),
        lambda device: zeros(2, 3).to(device=device),
    ):
        assert check(moved, CPU) is False
        out = capsys.readouterr().out
        assert "[not yet]" in out and "made it on the CPU" in out and "device=device" in out, out


def test_zeros_on_device_rejects_wrong_answers(capsys):
    check = CHECKERS["00_zeros_on_device"]
    assert check(None, CPU) is False  # unanswered
    assert "[waiting]" in capsys.readouterr().out
    assert check(torch.zeros(2, 3), CPU) is False  # the tensor, not a function that makes it
    assert check(lambda device: [[0, 0, 0], [0, 0, 0]], CPU) is False  # a list, not a tensor
    assert check(lambda device: torch.zeros(3, 2, device=device), CPU) is False  # wrong shape
    assert check(lambda device: torch.zeros(2, 3, dtype=torch.float64, device=device), CPU) is False  # wrong dtype
    assert check(lambda device: torch.ones(2, 3, device=device), CPU) is False  # not zeros
    assert check(lambda device: torch.empty(2, 3, device=device).fill_(1), CPU) is False
    capsys.readouterr()
    assert check(lambda device: torch.zeros(2, 3), CPU) is False  # ignores the device it is given
    assert "returned a tensor on cpu" in capsys.readouterr().out
    assert check(lambda device: 1 / 0, CPU) is False
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_the_exercise_asks_for_what_the_checker_sees():
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parent.parent / "notebooks" / "00_check_your_setup.ipynb", as_version=4)
    cells = {c.get("id"): c.source for c in nb.cells}
    assert "not at how you made" not in cells["c26"]  # the checker now sees how it was made
    assert "make_zeros" in cells["c26"] and "make_zeros = None" in cells["c27"]
    assert "checks.check_zeros_on_device(make_zeros, device)" in cells["c29"]
