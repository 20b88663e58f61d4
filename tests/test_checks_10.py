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


def accumulate_one_backward_of_the_sum(model, X, y, k):
    # the right gradient, but all k graphs are alive until the one backward(): no memory saved
    loss = sum(F.cross_entropy(model(a), b) for a, b in zip(X.chunk(k), y.chunk(k), strict=True)) / k
    loss.backward()


def accumulate_all_forwards_first(model, X, y, k):
    losses = [F.cross_entropy(model(a), b) / k for a, b in zip(X.chunk(k), y.chunk(k), strict=True)]
    for loss in losses:
        loss.backward()


def accumulate_retaining_the_graph(model, X, y, k):
    for X_part, y_part in zip(X.chunk(k), y.chunk(k), strict=True):
        loss = F.cross_entropy(model(X_part), y_part) / k
        loss.backward(retain_graph=True)  # keeps the chunk's saved activations alive while the next one runs


def accumulate_imported_names(model, X, y, k):
    from torch import tensor_split
    from torch.autograd import backward
    from torch.nn.functional import cross_entropy

    for X_part, y_part in zip(tensor_split(X, k), tensor_split(y, k), strict=True):
        backward(cross_entropy(model(X_part), y_part).div(k))


def accumulate_summed_losses(model, X, y, k):
    for X_part, y_part in zip(X.split(len(X) // k), y.split(len(y) // k), strict=True):
        (F.cross_entropy(model(X_part), y_part, reduction="sum") / len(X)).backward()


def accumulate_with_autograd_grad(model, X, y, k):
    parameters = list(model.parameters())
    for X_part, y_part in zip(X.chunk(k), y.chunk(k), strict=True):
        grads = torch.autograd.grad(F.cross_entropy(model(X_part), y_part) / k, parameters)
        for p, grad in zip(parameters, grads, strict=True):
            p.grad = grad if p.grad is None else p.grad + grad


def test_accumulation_reference(capsys):
    assert CHECKERS["10_gradient_accumulation"](accumulate_reference, CPU)
    assert capsys.readouterr().out.startswith("[pass]")


def test_accumulation_accepts_right_answers_written_differently(capsys):
    for right in (accumulate_imported_names, accumulate_summed_losses, accumulate_with_autograd_grad):
        assert CHECKERS["10_gradient_accumulation"](right, CPU), capsys.readouterr().out
        assert capsys.readouterr().out.startswith("[pass]")


def test_accumulation_rejects_graphs_kept_alive_together(capsys):
    check = CHECKERS["10_gradient_accumulation"]
    for wrong, said in (
        (accumulate_one_backward_of_the_sum, "backward() had not run on the chunk before it"),
        (accumulate_all_forwards_first, "backward() had not run on the chunk before it"),
        (accumulate_retaining_the_graph, "retain_graph=True"),
    ):
        assert not check(wrong, CPU)
        out = capsys.readouterr().out
        assert "[not yet]" in out and "the model ran on chunk 2 while" in out and said in out, out
        assert "call backward() on each chunk's loss before running the next chunk" in out, out


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
