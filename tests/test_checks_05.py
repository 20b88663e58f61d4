"""Lesson 05 exercise checkers: each accepts the reference solution and rejects wrong answers."""

from __future__ import annotations

import torch

from exercises.checks import CHECKERS
from helpers.readings import Timing
from lessons import lesson_05
from lessons.lesson_05 import Measurement

CPU = torch.device("cpu")


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

    def inference_mode_and_functional_softmax(model, X):
        from torch.nn.functional import softmax

        was_training = model.training
        model.eval()
        with torch.inference_mode():
            probs = softmax(model(X), dim=-1)
        model.train(was_training)
        return probs.to("cpu")

    assert check(inference_mode_and_functional_softmax, cpu)  # the same answer in other words


def test_every_lesson_05_checker_is_covered():
    ours = {k for k in CHECKERS if k.startswith("05_")}
    assert ours == {"05_count_correct", "05_predict_proba", "05_resident_batches", "05_best_change"}


def epoch_batches(X: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator) -> list:
    order = torch.randperm(len(y), device=X.device, generator=generator)  # (N,) on the data's device
    return [(X[idx], y[idx]) for idx in order.split(batch_size)]


def test_resident_batches_reference(capsys):
    def as_a_generator(X, y, batch_size, generator):  # yielding the batches is as good as a list
        order = torch.randperm(len(y), device=X.device, generator=generator)
        for start in range(0, len(y), batch_size):
            idx = order[start : start + batch_size]
            yield X.index_select(0, idx), y.index_select(0, idx)

    assert CHECKERS["05_resident_batches"](epoch_batches, CPU) is True
    assert CHECKERS["05_resident_batches"](as_a_generator, CPU) is True
    assert capsys.readouterr().out.count("[pass]") == 2


def test_resident_batches_rejects_a_permutation_made_on_the_cpu(capsys):
    check = CHECKERS["05_resident_batches"]

    def permuted_on_the_cpu(X, y, batch_size, generator):  # right on the CPU, wrong for data on another device
        order = torch.randperm(len(y), generator=generator)
        return [(X[idx], y[idx]) for idx in order.split(batch_size)]

    def copied_over(X, y, batch_size, generator):
        order = torch.randperm(len(y), generator=generator).to(X.device)
        return [(X[idx], y[idx]) for idx in order.split(batch_size)]

    for wrong in (permuted_on_the_cpu, copied_over):
        assert check(wrong, CPU) is False, wrong.__name__
        assert "on the CPU" in capsys.readouterr().out


def test_resident_batches_rejects_dropped_or_repeated_samples(capsys):
    check = CHECKERS["05_resident_batches"]

    def drops_the_last(X, y, batch_size, generator):
        order = torch.randperm(len(y), device=X.device, generator=generator)
        return [(X[idx], y[idx]) for idx in order.split(batch_size) if len(idx) == batch_size]

    def with_replacement(X, y, batch_size, generator):
        order = torch.randint(len(y), (len(y),), device=X.device, generator=generator)
        return [(X[idx], y[idx]) for idx in order.split(batch_size)]

    for wrong in (drops_the_last, with_replacement):
        assert check(wrong, CPU) is False, wrong.__name__
        assert "missing" in capsys.readouterr().out


def test_resident_batches_rejects_other_wrong_answers(capsys):
    check = CHECKERS["05_resident_batches"]
    assert check(None, CPU) is False
    assert check("batches", CPU) is False

    def global_generator(X, y, batch_size, generator):  # not reproducible from the generator given
        order = torch.randperm(len(y), device=X.device)
        return [(X[idx], y[idx]) for idx in order.split(batch_size)]

    def mismatched(X, y, batch_size, generator):
        order = torch.randperm(len(y), device=X.device, generator=generator)
        return [(X[idx], y[idx.flip(0)]) for idx in order.split(batch_size)]

    def in_order(X, y, batch_size, generator):
        return list(zip(X.split(batch_size), y.split(batch_size), strict=True))

    torch.manual_seed(1)  # the global order then differs from the generator's
    for wrong in (global_generator, mismatched, in_order, lambda X, y, b, g: 1 / 0):
        assert check(wrong, CPU) is False
    out = capsys.readouterr().out
    assert "another order" in out and "belong together" in out and "ZeroDivisionError" in out


def test_resident_batches_checker_leaves_the_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    CHECKERS["05_resident_batches"](epoch_batches, CPU)
    assert torch.equal(torch.rand(3), expected)


def _measurement(pipeline: str, task: str, images_per_second: float) -> Measurement:
    seconds = 1000 / images_per_second
    return Measurement(pipeline, task, 1000, Timing(seconds, [seconds * 0.99, seconds, seconds * 1.01]), batches=10)


def fake_results() -> list[Measurement]:
    rates = {"lab": (5000, 4000), "workers": (7000, 2000), "wrapper": (50_000, 12_000), "resident": (600_000, 15_000)}
    return [_measurement(p, t, r) for p, pair in rates.items() for t, r in zip(("data", "cnn"), pair, strict=True)]


def test_best_change_reference(capsys):
    results = fake_results()
    ratios = {p: c.speedup for (p, t), c in lesson_05.row_comparisons(results).items() if t == "cnn"}
    answer = max(ratios, key=ratios.__getitem__)  # what the lesson's solution computes
    assert answer == "wrapper"
    assert CHECKERS["05_best_change"](answer, results) is True
    assert CHECKERS["05_best_change"]("resident", results, "data") is True  # 12x on data only, against 10x
    assert capsys.readouterr().out.count("[pass]") == 2


def test_best_change_wrong_answers(capsys):
    check, results = CHECKERS["05_best_change"], fake_results()
    assert check(None, results) is False
    assert check("resident", results) is False  # the largest ratio on data only, not on the CNN
    assert "another row gained more" in capsys.readouterr().out
    assert check("lab", results) is False  # the first row changes nothing
    assert check(3, results) is False  # a row number, not the pipeline's name
    assert "pipeline name" in capsys.readouterr().out


def test_predict_proba_checker_leaves_the_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    CHECKERS["05_predict_proba"](predict_proba, torch.device("cpu"))
    assert torch.equal(torch.rand(3), expected)


def test_resident_batches_leaves_the_gpu_alone_when_the_lesson_runs_on_the_cpu(monkeypatch, capsys):
    # A machine with a GPU where the learner chose DEVICE = "cpu": the second run is on the meta stand-in, not CUDA.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    seen = []

    def answer(X, y, batch_size, generator):
        seen.append(X.device)
        return epoch_batches(X, y, batch_size, generator)

    assert CHECKERS["05_resident_batches"](answer, torch.device("cpu")) is True
    assert {d.type for d in seen} == {"cpu", "meta"}
