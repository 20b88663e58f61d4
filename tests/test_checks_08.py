"""Lesson 08 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import time

import pytest
import torch

from exercises.checks import CHECKERS
from helpers import devices

TESTED = {"08_hidden_sync", "08_time_call"}


def test_every_lesson_08_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("08_")} == TESTED


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


def evaluate_nonzero_every_batch(model, batches):
    correct, total = 0, 0
    for X, y in batches:
        correct += (model(X).argmax(dim=1) == y).nonzero().shape[0]  # no .item(), but the shape is the data
        total += len(y)
    return correct / total


def evaluate_mask_every_batch(model, batches):
    correct, total = 0, 0
    for X, y in batches:
        pred = model(X).argmax(dim=1)
        correct += len(y[pred == y])  # a boolean mask: the host waits to learn how many it keeps
        total += len(y)
    return correct / total


def evaluate_where_every_batch(model, batches):
    correct, total = 0, 0
    for X, y in batches:
        correct += len(torch.where(model(X).argmax(dim=1) == y)[0])
        total += len(y)
    return correct / total


def evaluate_masked_select_every_batch(model, batches):
    correct, total = 0, 0
    for X, y in batches:
        pred = model(X).argmax(dim=1)
        correct += torch.masked_select(pred, pred == y).numel()
        total += len(y)
    return correct / total


def evaluate_unique_every_batch(model, batches):
    correct, total = 0, 0
    for X, y in batches:
        hits = (model(X).argmax(dim=1) == y).long()
        values, counts = torch.unique(hits, return_counts=True)  # as many values as the data has
        correct += torch.where(values == 1, counts, 0).sum()
        total += len(y)
    return int(correct) / total


def evaluate_imported_names(model, batches):
    from torch import eq, zeros

    correct = zeros((), dtype=torch.long)
    for X, y in batches:
        correct += eq(model(X).argmax(dim=1), y).sum()
    return int(correct) / sum(len(y) for _, y in batches)  # int() once is the one read


def evaluate_count_nonzero(model, batches):
    hits = [torch.count_nonzero(model(X).argmax(dim=1) == y) for X, y in batches]  # a size known in advance
    return torch.stack(hits).sum().item() / sum(y.numel() for _, y in batches)


def evaluate_float_mean(model, batches):
    hits = torch.cat([(model(X).argmax(dim=1) == y).float() for X, y in batches])
    return hits.mean().item()


def evaluate_one_mask_at_the_end(model, batches):
    pred = torch.cat([model(X).argmax(dim=1) for X, _ in batches])
    y = torch.cat([y for _, y in batches])
    return len(y[pred == y]) / len(y)  # one wait, for the whole set, like the one .item()


def test_hidden_sync_reference(capsys):
    assert CHECKERS["08_hidden_sync"](evaluate_reference, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[pass]")


def test_hidden_sync_accepts_right_answers_written_differently(capsys):
    for right in (evaluate_imported_names, evaluate_count_nonzero, evaluate_float_mean, evaluate_one_mask_at_the_end):
        assert CHECKERS["08_hidden_sync"](right, torch.device("cpu")), capsys.readouterr().out
        assert capsys.readouterr().out.startswith("[pass]")


def test_hidden_sync_rejects_a_shape_that_depends_on_the_data(capsys):
    check = CHECKERS["08_hidden_sync"]
    for wrong, named in (
        (evaluate_nonzero_every_batch, "nonzero()"),
        (evaluate_mask_every_batch, "boolean mask"),
        (evaluate_where_every_batch, "torch.where(mask)"),
        (evaluate_masked_select_every_batch, "masked_select"),
        (evaluate_unique_every_batch, "unique"),
    ):
        assert not check(wrong, torch.device("cpu"))
        out = capsys.readouterr().out
        assert "[not yet]" in out and "size depends on the data 10 times" in out and named in out, out
        assert "(pred == y).sum()" in out, out


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


def time_call_reference(fn, device):  # time_with_clock
    devices.synchronize(device)
    start = time.perf_counter()
    fn()
    devices.synchronize(device)
    return time.perf_counter() - start


def time_with_events_reference(fn, device):
    with torch.cuda.device(device):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
    return begin.elapsed_time(end) / 1e3


def time_call_no_sync(fn, device):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start  # reads the clock while the work is still queued


def time_call_sync_after_only(fn, device):
    start = time.perf_counter()  # the work queued before the call is still running
    fn()
    devices.synchronize(device)
    return time.perf_counter() - start


def time_call_in_milliseconds(fn, device):
    return 1e3 * time_call_reference(fn, device)


def time_call_untouched(fn, device):
    ...  # the cell as handed over
    return None


def test_time_call_reference(capsys):
    assert CHECKERS["08_time_call"](time_call_reference, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[pass]")


def test_time_call_waits_for_an_answer_and_rejects_the_untouched_cell(capsys):
    assert not CHECKERS["08_time_call"](None, torch.device("cpu"))
    assert capsys.readouterr().out.startswith("[waiting]")
    assert not CHECKERS["08_time_call"](time_call_untouched, torch.device("cpu"))
    assert "return the seconds as a number" in capsys.readouterr().out


def test_time_call_wrong_answers(capsys):
    check = CHECKERS["08_time_call"]
    for wrong, said in (
        (time_call_no_sync, "before stopping the clock"),
        (time_call_sync_after_only, "before starting the clock"),
        (time_call_in_milliseconds, "divide it by 1000"),
        (lambda fn, device: 1 / 0, "time_call raised ZeroDivisionError"),
    ):
        assert not check(wrong, torch.device("cpu"))
        out = capsys.readouterr().out
        assert "[not yet]" in out and said in out, out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: CUDA events time real GPU work")
def test_time_call_on_cuda(capsys):
    check, gpu = CHECKERS["08_time_call"], torch.device("cuda")
    assert check(time_call_reference, gpu) and check(time_with_events_reference, gpu)
    assert not check(lambda fn, device: 1e3 * time_with_events_reference(fn, device), gpu)
    assert "divide it by 1000" in capsys.readouterr().out
    assert not check(time_call_no_sync, gpu)
    assert "before stopping the clock" in capsys.readouterr().out
    assert not check(time_call_sync_after_only, gpu)
    assert "before starting the clock" in capsys.readouterr().out
