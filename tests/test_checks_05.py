"""Lesson 05 exercise checkers: each accepts the reference solution and rejects wrong answers."""

from __future__ import annotations

import torch

from helpers.checks import CHECKERS


def count_correct(logits: torch.Tensor, y: torch.Tensor) -> int:
    return (logits.argmax(dim=1) == y).sum().item()


def predict_proba(model: torch.nn.Module, X: torch.Tensor) -> torch.Tensor:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        probs = model(X).softmax(dim=1)
    model.train(was_training)
    return probs.cpu()


def test_count_correct():
    check = CHECKERS["05_count_correct"]
    assert check(count_correct)
    assert not check(None)  # waiting for an answer
    assert not check(lambda logits, y: (logits.argmax(dim=1) == y).sum())  # a tensor, not .item()
    assert not check(lambda logits, y: (logits.argmax(dim=0)[: len(y)] == y).sum().item())  # wrong dimension
    assert not check(lambda logits, y: (logits.argmax(dim=1) == y).float().mean().item())  # a fraction, not a count
    assert not check(lambda logits, y: 1 / 0)  # raising is reported, not propagated


def test_predict_proba():
    check = CHECKERS["05_predict_proba"]
    cpu = torch.device("cpu")
    assert check(predict_proba, cpu)
    assert not check(None, cpu)

    def no_eval(model, X):
        with torch.no_grad():
            return model(X).softmax(dim=1)

    def with_graph(model, X):
        model.eval()
        out = model(X).softmax(dim=1)
        model.train()
        return out

    def logits_only(model, X):
        model.eval()
        with torch.no_grad():
            out = model(X)
        model.train()
        return out

    def left_in_eval(model, X):
        model.eval()
        with torch.no_grad():
            return model(X).softmax(dim=1)

    for wrong in (no_eval, with_graph, logits_only, left_in_eval):
        assert not check(wrong, cpu), wrong.__name__


def test_every_lesson_05_checker_is_covered():
    ours = {k for k in CHECKERS if k.startswith("05_")}
    assert ours == {"05_count_correct", "05_predict_proba"}


def test_predict_proba_checker_leaves_the_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    CHECKERS["05_predict_proba"](predict_proba, torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)
