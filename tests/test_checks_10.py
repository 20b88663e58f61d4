"""Lesson 10 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from exercises.checks import CHECKERS

TESTED = {"10_gradient_accumulation"}
CPU = torch.device("cpu")


def test_every_lesson_10_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("10_")} == TESTED


def accumulate_reference(model, X, y, k):
    for X_part, y_part in zip(X.chunk(k), y.chunk(k), strict=True):
        loss = F.cross_entropy(model(X_part), y_part) / k  # each chunk's mean is 1/k of the batch's
        loss.backward()  # adds to .grad


def accumulate_unscaled(model, X, y, k):
    for X_part, y_part in zip(X.chunk(k), y.chunk(k), strict=True):
        F.cross_entropy(model(X_part), y_part).backward()


def accumulate_zeroing_each_chunk(model, X, y, k):
    for X_part, y_part in zip(X.chunk(k), y.chunk(k), strict=True):
        model.zero_grad()  # throws away the chunks before
        (F.cross_entropy(model(X_part), y_part) / k).backward()


def accumulate_whole_batch(model, X, y, k):
    F.cross_entropy(model(X), y).backward()  # the right gradient, but the memory of the whole batch


def accumulate_first_chunk_only(model, X, y, k):
    X_part, y_part = X.chunk(k)[0], y.chunk(k)[0]
    F.cross_entropy(model(X_part), y_part).backward()


def accumulate_untouched(model, X, y, k): ...  # the cell as handed over


def test_accumulation_reference(capsys):
    assert CHECKERS["10_gradient_accumulation"](accumulate_reference, CPU)
    assert capsys.readouterr().out.startswith("[pass]")


def test_accumulation_waits_for_an_answer(capsys):
    assert not CHECKERS["10_gradient_accumulation"](None, CPU)
    assert capsys.readouterr().out.startswith("[waiting]")


def test_accumulation_rejects_the_untouched_cell(capsys):
    assert not CHECKERS["10_gradient_accumulation"](accumulate_untouched, CPU)
    assert "ran 0 times" in capsys.readouterr().out


def test_accumulation_wrong_answers(capsys):
    check = CHECKERS["10_gradient_accumulation"]
    for wrong, said in (
        (accumulate_unscaled, "4 times too large"),
        (accumulate_zeroing_each_chunk, "do not zero the gradients"),
        (accumulate_whole_batch, "more than one chunk at once"),
        (accumulate_first_chunk_only, "ran 1 times"),
        (lambda model, X, y, k: 1 / 0, "ZeroDivisionError"),
    ):
        assert not check(wrong, CPU)
        out = capsys.readouterr().out
        assert "[not yet]" in out and said in out, out
