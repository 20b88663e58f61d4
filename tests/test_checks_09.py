"""Lesson 09 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from exercises.checks import CHECKERS

TESTED = {"09_channels_last", "09_autocast_dtypes", "09_amp_step"}


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


def _amp_step(
    model,
    optimizer,
    scaler,
    X,
    y,
    device,
    dtype,
    autocast=True,
    scale=True,
    step=True,
    update=True,
    zero_grad=True,
    item=True,
):
    """The reference step; each switch turned off is one typical mistake."""
    if zero_grad:
        optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=dtype, enabled=autocast):
        loss = F.cross_entropy(model(X), y)
    if dtype is torch.float16:
        (scaler.scale(loss) if scale else loss).backward()
        scaler.step(optimizer) if step else optimizer.step()
        if update:
            scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss.item() if item else loss.detach()


def _wrong(**mistake):
    return lambda *args: _amp_step(*args, **mistake)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_amp_step_reference(capsys, dtype):
    assert CHECKERS["09_amp_step"](_amp_step, torch.device("cpu"), dtype)
    assert capsys.readouterr().out.startswith("[pass]")


def test_amp_step_waits_for_an_answer(capsys):
    assert not CHECKERS["09_amp_step"](None, torch.device("cpu"), torch.bfloat16)
    assert capsys.readouterr().out.startswith("[waiting]")


@pytest.mark.parametrize(
    ("mistake", "hint"),
    [
        ({"autocast": False}, "the forward pass ran in torch.float32"),
        ({"scale": False}, "unscaled loss"),
        ({"step": False}, "optimizer.step() was called directly"),
        ({"update": False}, "call scaler.update()"),
        ({"zero_grad": False}, "gradients add up"),
        ({"item": False}, "return the loss as a float"),
    ],
)
def test_amp_step_wrong_answers(capsys, mistake, hint):
    assert not CHECKERS["09_amp_step"](_wrong(**mistake), torch.device("cpu"), torch.bfloat16)
    out = capsys.readouterr().out
    assert out.startswith("[not yet]") and hint in out, out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_amp_step_untouched_cell(capsys, dtype):
    def amp_step(model, optimizer, scaler, X, y, device, dtype):
        """The exercise cell as the learner finds it."""
        ...  # your answer here

    assert not CHECKERS["09_amp_step"](amp_step, torch.device("cpu"), dtype)
    assert "the model was never called on X" in capsys.readouterr().out


def test_amp_step_other_wrong_answers(capsys):
    check = CHECKERS["09_amp_step"]
    assert not check(lambda *args: 0.0, torch.device("cpu"), torch.bfloat16)  # never runs the model
    assert "never called" in capsys.readouterr().out
    assert not check(lambda m, o, s, X, y, d, t: _amp_step(m, o, s, X * 2, y, d, t), torch.device("cpu"), torch.float16)
    assert "expected the loss" in capsys.readouterr().out
    assert not check(
        lambda m, o, s, X, y, d, t: _amp_step(m, o, s, X, y, d, torch.float16), torch.device("cpu"), torch.bfloat16
    )  # float16 always: the bfloat16 run computes in the wrong dtype
    assert "ran in torch.float16" in capsys.readouterr().out
    assert not check("amp_step", torch.device("cpu"), torch.bfloat16)
    assert "should be a function" in capsys.readouterr().out
