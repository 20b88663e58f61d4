"""Lesson 09 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import torch

from exercises.checks import CHECKERS

TESTED = {"09_channels_last", "09_autocast_dtypes"}


def test_every_lesson_09_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("09_")} == TESTED


def _images() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(8, 3, 32, 32)  # (B, C, H, W)


def test_channels_last_reference(capsys):
    images = _images()
    assert CHECKERS["09_channels_last"](images.contiguous(memory_format=torch.channels_last), images)
    assert capsys.readouterr().out.startswith("[pass]")


def test_channels_last_waits_for_an_answer(capsys):
    assert not CHECKERS["09_channels_last"](None, _images())
    assert capsys.readouterr().out.startswith("[waiting]")


def test_channels_last_wrong_answers(capsys):
    images = _images()
    check = CHECKERS["09_channels_last"]
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
    assert CHECKERS["09_autocast_dtypes"](out.dtype, layer.weight.dtype, torch.bfloat16)
    assert capsys.readouterr().out.startswith("[pass]")
    assert CHECKERS["09_autocast_dtypes"](torch.float16, torch.float32, torch.float16)


def test_autocast_dtypes_wrong_answers(capsys):
    check = CHECKERS["09_autocast_dtypes"]
    assert not check(None, torch.float32, torch.bfloat16)
    assert capsys.readouterr().out.startswith("[waiting]")
    assert not check(torch.float32, torch.float32, torch.bfloat16)  # as if autocast were off
    assert "output dtype" in capsys.readouterr().out
    assert not check(torch.bfloat16, torch.bfloat16, torch.bfloat16)  # weights are not converted
    assert "weight dtype" in capsys.readouterr().out
    assert not check("bfloat16", "float32", torch.bfloat16)
    assert "answer with dtypes" in capsys.readouterr().out
