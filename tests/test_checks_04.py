"""Lesson 04 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from exercises.checks import CHECKERS
from helpers.transfer import DeviceDataLoader, to_device

CPU = torch.device("cpu")
META = torch.device("meta")
TESTED = {"04_one_hot", "04_device_loader", "04_padding_mask"}


def test_every_lesson_04_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("04_")} == TESTED


def reference_one_hot(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    out = labels.new_zeros(len(labels), num_classes, dtype=torch.float32)  # (B, num_classes)
    return out.scatter_(1, labels[:, None], 1.0)


def test_one_hot_references(capsys):
    assert CHECKERS["04_one_hot"](reference_one_hot) is True
    assert CHECKERS["04_one_hot"](lambda y, n: F.one_hot(y, n).float()) is True
    assert capsys.readouterr().out.count("[pass]") == 2


def test_one_hot_wrong_answers(capsys):
    check = CHECKERS["04_one_hot"]
    assert check(None) is False

    def on_the_cpu(labels, n):  # ignores where labels live
        return torch.zeros(len(labels), n).scatter_(1, labels[:, None], 1.0)

    assert check(on_the_cpu) is False
    assert "labels.new_zeros" in capsys.readouterr().out
    assert check(lambda y, n: torch.eye(n)[y]) is False
    assert check(lambda y, n: F.one_hot(y, n)) is False  # int64, not float32
    assert check(lambda y, n: reference_one_hot(y, n).flip(1)) is False
    assert check(lambda y, n: 1 / 0) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert check(lambda y, n: [0, 1]) is False


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(10, 1, 28, 28), torch.arange(10)), batch_size=4)


class MovesBatches:  # the wrapper of the reference, written in plain PyTorch
    def __init__(self, loader, device):
        self.loader, self.device = loader, device

    def __iter__(self):
        for X, y in self.loader:
            yield X.to(self.device), y.to(self.device)

    def __len__(self):
        return len(self.loader)


def on_device(loader, device):  # the reference
    return MovesBatches(loader, device)


class MovesImagesOnly(MovesBatches):
    def __iter__(self):
        for X, y in self.loader:
            yield X.to(self.device), y


class HandsBatchesOn(MovesBatches):  # has the loader's length, moves nothing
    def __iter__(self):
        yield from self.loader


def test_device_loader_accepts_right_answers(capsys):
    check = CHECKERS["04_device_loader"]
    loader = _loader()
    # the reference, the class passed as itself, and the course's helper (with keywords) written differently
    for right in (on_device, MovesBatches, DeviceDataLoader, lambda loader, device: to_device_loader(loader, device)):
        assert check(right, loader, CPU) is True
        assert check(right, loader, META) is True
    assert capsys.readouterr().out.count("[pass]") == 8


def to_device_loader(loader, device):  # DeviceDataLoader imported under its own name, keywords spelled out
    from helpers.transfer import DeviceDataLoader as Wrapper

    return Wrapper(loader=loader, device=device)


def test_device_loader_tells_a_moving_loader_from_one_that_moves_nothing_on_a_cpu(capsys):
    check = CHECKERS["04_device_loader"]
    loader = _loader()
    assert check(lambda loader, device: list(loader), loader, CPU) is False  # the answer that looked right
    assert "samples before anything asked" in capsys.readouterr().out
    assert check(HandsBatchesOn, loader, CPU) is False
    assert "stayed on cpu" in capsys.readouterr().out
    assert check(lambda loader, device: DeviceDataLoader(loader, "cpu"), loader, CPU) is False  # a fixed device
    assert "stayed on cpu" in capsys.readouterr().out
    assert check(MovesImagesOnly, loader, CPU) is False  # the labels left behind
    assert "stayed on cpu" in capsys.readouterr().out
    eager = lambda loader, device: [to_device(b, device) for b in loader]  # noqa: E731  every batch moved up front
    assert check(eager, loader, CPU) is False
    assert "samples before anything asked" in capsys.readouterr().out
    assert check(lambda loader, device: (to_device(b, device) for b in loader), loader, CPU) is False  # no length
    assert "has no len" in capsys.readouterr().out


def test_device_loader_rejects_other_wrong_answers(capsys):
    check = CHECKERS["04_device_loader"]
    loader = _loader()
    assert check(None, loader, CPU) is False
    assert "[waiting]" in capsys.readouterr().out
    assert check(lambda loader, device: loader, loader, CPU) is False  # not wrapped
    out = capsys.readouterr().out
    assert "the loader itself" in out and "__iter__ yields each batch moved" in out  # the fix, in plain PyTorch
    assert "DeviceDataLoader" not in out
    assert check(DeviceDataLoader(loader, CPU), loader, CPU) is False  # the wrapper, not a function that makes it
    assert check(lambda loader, device: DeviceDataLoader(loader, CPU), loader, META) is False  # wrong device
    assert check(lambda loader, device: DeviceDataLoader(_loader_of(5), device), loader, CPU) is False  # other length
    assert check(lambda loader, device: 42, loader, CPU) is False
    assert check(lambda loader, device: [["not a tensor"]] * 3, loader, CPU) is False

    def remade(loader, device):  # right devices and shapes, other numbers
        return [tuple(torch.zeros_like(t, device=device) for t in b) for b in loader]

    assert check(remade, loader, CPU) is False
    assert "other values" in capsys.readouterr().out


def _loader_of(n: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(float(n))), batch_size=1)


def reference_padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]  # (B, max_len)


def test_padding_mask_reference(capsys):
    assert CHECKERS["04_padding_mask"](reference_padding_mask, CPU) is True
    assert (
        CHECKERS["04_padding_mask"](
            lambda n, m: torch.ones(len(n), m, dtype=torch.long, device=n.device).cumsum(1) <= n[:, None], CPU
        )
        is True
    )  # another correct way
    assert capsys.readouterr().out.count("[pass]") == 2


def test_padding_mask_waiting(capsys):
    assert CHECKERS["04_padding_mask"](None, CPU) is False
    assert "[waiting]" in capsys.readouterr().out


def test_padding_mask_wrong_answers(capsys):
    check = CHECKERS["04_padding_mask"]

    def arange_on_the_cpu(lengths, max_len):  # right values on the CPU, fails with lengths elsewhere
        return torch.arange(max_len)[None, :] < lengths[:, None]

    assert check(arange_on_the_cpu, CPU) is False
    assert "device=lengths.device" in capsys.readouterr().out
    assert check(lambda n, m: torch.arange(m)[None, :] < n.cpu()[:, None], CPU) is False  # result left on the CPU
    assert "device=lengths.device" in capsys.readouterr().out
    assert check(lambda n, m: torch.arange(m, device=n.device)[None, :] <= n[:, None], CPU) is False
    assert "position < length" in capsys.readouterr().out
    assert check(lambda n, m: reference_padding_mask(n, m).float(), CPU) is False
    assert "torch.bool" in capsys.readouterr().out
    assert check(lambda n, m: reference_padding_mask(n, m).T, CPU) is False
    assert "shape" in capsys.readouterr().out
    assert check(lambda n, m: reference_padding_mask(n, m)[:, :-1], CPU) is False  # one position short
    assert check(lambda n, m: 1 / 0, CPU) is False
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert check(lambda n, m: [[True] * m] * len(n), CPU) is False
    capsys.readouterr()
    # When the lesson runs on an accelerator the first run already meets the mismatch: its hint names the fix there,
    # and an error on the CPU, which no device explains, gets none.
    assert check(arange_on_the_cpu, torch.device("meta")) is False
    assert "it raised RuntimeError" in (out := capsys.readouterr().out) and "device=lengths.device" in out
    assert check(lambda n, m: 1 / 0, CPU) is False
    assert "device=lengths.device" not in capsys.readouterr().out


def test_padding_mask_leaves_the_gpu_alone_when_the_lesson_runs_on_the_cpu(monkeypatch, capsys):
    # A machine with a GPU where the learner chose DEVICE = "cpu": the second device is the meta stand-in, not CUDA.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    seen = []
    assert CHECKERS["04_padding_mask"](lambda n, m: seen.append(n.device) or reference_padding_mask(n, m), CPU) is True
    assert {d.type for d in seen} == {"cpu", "meta"}
