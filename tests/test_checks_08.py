"""Lesson 08 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import torch

from exercises.checks import CHECKERS

TESTED = {"08_channels_last", "08_autocast_dtypes", "08_hidden_sync"}


def test_every_lesson_08_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("08_")} == TESTED


def _images() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(8, 3, 32, 32)  # (B, C, H, W)


def test_channels_last_reference(capsys):
    images = _images()
    assert CHECKERS["08_channels_last"](images.contiguous(memory_format=torch.channels_last), images)
    assert capsys.readouterr().out.startswith("[pass]")


def test_channels_last_waits_for_an_answer(capsys):
    assert not CHECKERS["08_channels_last"](None, _images())
    assert capsys.readouterr().out.startswith("[waiting]")


def test_channels_last_wrong_answers(capsys):
    images = _images()
    check = CHECKERS["08_channels_last"]
    assert not check(images, images)  # still NCHW in memory
    assert "memory_format" in capsys.readouterr().out
    assert not check(images.permute(0, 2, 3, 1).contiguous(), images)  # a permute changes the shape
    assert "no permute" in capsys.readouterr().out
    assert not check((images + 1).contiguous(memory_format=torch.channels_last), images)
    assert "values differ" in capsys.readouterr().out
    assert not check([1, 2], images)
    assert "torch.Tensor" in capsys.readouterr().out
    meta = images.to("meta").contiguous(memory_format=torch.channels_last)
    assert not check(meta, images)
    assert "lives on meta" in capsys.readouterr().out


def test_autocast_dtypes_reference(capsys):
    layer = torch.nn.Linear(16, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(torch.randn(2, 16))
    assert CHECKERS["08_autocast_dtypes"](out.dtype, layer.weight.dtype, torch.bfloat16)
    assert capsys.readouterr().out.startswith("[pass]")
    assert CHECKERS["08_autocast_dtypes"](torch.float16, torch.float32, torch.float16)


def test_autocast_dtypes_wrong_answers(capsys):
    check = CHECKERS["08_autocast_dtypes"]
    assert not check(None, torch.float32, torch.bfloat16)
    assert capsys.readouterr().out.startswith("[waiting]")
    assert not check(torch.float32, torch.float32, torch.bfloat16)  # as if autocast were off
    assert "output dtype" in capsys.readouterr().out
    assert not check(torch.bfloat16, torch.bfloat16, torch.bfloat16)  # weights are not converted
    assert "weight dtype" in capsys.readouterr().out
    assert not check("bfloat16", "float32", torch.bfloat16)
    assert "answer with dtypes" in capsys.readouterr().out


def evaluate_reference(model, batches):
    correct, total = None, 0
    for X, y in batches:
        hits = (model(X).argmax(dim=1) == y).sum()  # stays on the device
        correct = hits if correct is None else correct + hits
        total += len(y)
    return correct.item() / total  # the one read


def evaluate_item_every_batch(model, batches):
    correct, total = 0, 0
    for X, y in batches:
        correct += (model(X).argmax(dim=1) == y).sum().item()
        total += len(y)
    return correct / total


def evaluate_float_every_batch(model, batches):
    correct = torch.zeros(())
    total = 0
    for X, y in batches:
        correct += (model(X).argmax(dim=1) == y).sum()
        total += len(y)
        print(f"running accuracy {float(correct) / total:.3f}")  # a progress line is a read too
    return float(correct) / total


def evaluate_if_on_a_tensor(model, batches):
    correct, total = torch.zeros((), dtype=torch.long), 0
    for X, y in batches:
        hits = (model(X).argmax(dim=1) == y).sum()
        if hits > 0:  # a Python if on a tensor waits for its value
            correct = correct + hits
        total += len(y)
    return correct.item() / total


def evaluate_wrong_count(model, batches):
    correct, total = None, 0
    for X, y in batches:
        hits = (model(X).argmax(dim=1) == y).sum()
        correct = hits if correct is None else correct + hits
        total += 1  # counts batches, not images
    return correct.item() / total


def evaluate_copy_every_batch(model, batches):
    correct, total = torch.zeros(()), 0
    for X, y in batches:
        correct += (model(X).argmax(dim=1) == y).sum().to("cpu")  # a copy to the host is a wait too
        total += len(y)
    return correct.item() / total


def test_hidden_sync_reference(capsys):
    assert CHECKERS["08_hidden_sync"](evaluate_reference, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[pass]")


def test_hidden_sync_waits_for_an_answer(capsys):
    assert not CHECKERS["08_hidden_sync"](None, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[waiting]")


def test_hidden_sync_rejects_a_read_every_batch(capsys):
    check = CHECKERS["08_hidden_sync"]
    for wrong, read in (
        (evaluate_item_every_batch, "item"),
        (evaluate_float_every_batch, "__float__"),
        (evaluate_if_on_a_tensor, "__bool__"),
        (evaluate_copy_every_batch, "to"),
    ):
        assert not check(wrong, torch.device("cpu"))
        out = capsys.readouterr().out
        assert "[not yet]" in out and read in out, out


def test_hidden_sync_rejects_a_wrong_result(capsys):
    check = CHECKERS["08_hidden_sync"]
    assert not check(evaluate_wrong_count, torch.device("cpu"))
    assert "the accuracy is" in capsys.readouterr().out
    assert not check(lambda model, batches: torch.tensor(0.5), torch.device("cpu"))
    assert "returned a tensor" in capsys.readouterr().out
