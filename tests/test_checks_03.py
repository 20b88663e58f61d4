"""Lesson 03 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import torch
from torch import nn

from exercises.checks import CHECKERS
from helpers.models import CNN

CPU = torch.device("cpu")
TESTED = {"03_buffers_move", "03_load_on_cpu"}


class WithBuffers(nn.Module):
    def __init__(self, persistent: bool = True) -> None:
        super().__init__()
        self.register_buffer("mean", torch.full((4,), 0.5), persistent=persistent)
        self.register_buffer("std", torch.full((4,), 0.25), persistent=persistent)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return (X - self.mean) / self.std


class WithAttributes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.full((4,), 0.5)
        self.std = torch.full((4,), 0.25)


class Mixed(WithBuffers):
    def __init__(self) -> None:
        super().__init__()
        self.extra = torch.ones(2)  # a plain attribute that would stay behind


def test_every_lesson_03_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("03_")} == TESTED


def test_buffers_move_reference(capsys):
    assert CHECKERS["03_buffers_move"](WithBuffers().to(CPU), CPU) is True
    assert "[pass]" in capsys.readouterr().out


def test_buffers_move_wrong_answers(capsys):
    check = CHECKERS["03_buffers_move"]
    assert check(None, CPU) is False
    assert check(torch.ones(2), CPU) is False
    assert check(WithAttributes(), CPU) is False
    assert "register_buffer" in capsys.readouterr().out
    assert check(WithBuffers(persistent=False), CPU) is False
    assert "state_dict" in capsys.readouterr().out
    assert check(Mixed(), CPU) is False
    assert "extra did not move" in capsys.readouterr().out
    assert check(WithBuffers(), torch.device("meta")) is False  # not moved to the requested device


def test_buffers_move_leaves_the_answer_alone():
    module = WithBuffers()
    CHECKERS["03_buffers_move"](module, CPU)
    assert module.mean.device == CPU


def test_load_on_cpu_reference(tmp_path):
    torch.manual_seed(0)
    model = CNN()
    torch.save(model.state_dict(), tmp_path / "cnn.pt")
    fresh = CNN()
    fresh.load_state_dict(torch.load(tmp_path / "cnn.pt", map_location="cpu", weights_only=True))
    assert CHECKERS["03_load_on_cpu"](fresh, model) is True


def test_load_on_cpu_accepts_the_course_helpers(tmp_path):
    from helpers.checkpoints import load_checkpoint, save_checkpoint

    torch.manual_seed(0)
    model = CNN()
    save_checkpoint(model.state_dict(), tmp_path / "cnn.pt")
    fresh = CNN()
    fresh.load_state_dict(load_checkpoint(tmp_path / "cnn.pt", map_location="cpu"))
    assert CHECKERS["03_load_on_cpu"](fresh, model) is True


def test_load_on_cpu_wrong_answers(capsys):
    check = CHECKERS["03_load_on_cpu"]
    torch.manual_seed(0)
    model = CNN()
    assert check(None, model) is False
    assert check(model.state_dict(), model) is False  # a dict, not a model
    assert check(model, model) is False
    assert check(CNN(), model) is False  # never loaded: other random weights
    assert "weights differ" in capsys.readouterr().out
    assert check(nn.Linear(2, 2), model) is False
    on_meta = CNN().to("meta")
    assert check(on_meta, model) is False
    assert "map_location" in capsys.readouterr().out


class WithBufferObjects(nn.Module):
    """The same buffers written the newer way, as nn.Buffer attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.mean = nn.Buffer(torch.full((4,), 0.5))
        self.std = nn.Buffer(torch.full((4,), 0.25))


def test_buffers_move_accepts_nn_buffer(capsys):
    assert CHECKERS["03_buffers_move"](WithBufferObjects(), CPU) is True, capsys.readouterr().out


def test_load_on_cpu_written_differently_and_the_chained_load(tmp_path, capsys):
    from torch import load

    torch.manual_seed(0)
    model = CNN()
    torch.save(model.state_dict(), tmp_path / "cnn.pt")
    fresh = CNN()
    fresh.load_state_dict(load(tmp_path / "cnn.pt", map_location=torch.device("cpu"), weights_only=True))
    assert CHECKERS["03_load_on_cpu"](fresh, model) is True
    chained = CNN().load_state_dict(load(tmp_path / "cnn.pt", map_location="cpu", weights_only=True))
    assert CHECKERS["03_load_on_cpu"](chained, model) is False  # the matched keys, not a model
    assert "returns the keys it matched, not the model" in capsys.readouterr().out
