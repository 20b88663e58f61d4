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


def test_channels_last_accepts_right_answers_written_differently(capsys):
    from torch import channels_last

    images = _images()
    for right in (
        images.to(memory_format=channels_last),
        torch.Tensor.contiguous(images, memory_format=torch.channels_last),
        images.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2),  # NHWC in memory, indexed NCHW
    ):
        assert CHECKERS["09_channels_last"](right, images), capsys.readouterr().out
        assert capsys.readouterr().out.startswith("[pass]")


def test_channels_last_rejects_a_changed_dtype(capsys):
    images = _images()
    halved = images.to(torch.bfloat16, memory_format=torch.channels_last)  # the right layout, but not the same data
    assert not CHECKERS["09_channels_last"](halved, images)
    out = capsys.readouterr().out
    assert "[not yet]" in out and "dtype is torch.bfloat16" in out, out


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


def amp_step_written_differently(model, optimizer, scaler, X, y, device, dtype):
    from torch.amp import autocast
    from torch.nn import CrossEntropyLoss

    with autocast(device_type=device.type, dtype=dtype):
        loss = CrossEntropyLoss()(model(X), y)
    scaler.scale(loss).backward()  # a disabled scaler (bfloat16) passes the loss and the step on unchanged
    scaler.unscale_(optimizer)  # the gradients at their true size, for clipping
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e6)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()  # at the end instead of the start: the same steps
    return float(loss.detach())


def amp_step_with_nll_loss(model, optimizer, scaler, X, y, device, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=dtype):
        loss = F.nll_loss(F.log_softmax(model(X).float(), dim=1), y)
    if scaler.is_enabled():
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss.item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_amp_step_accepts_right_answers_written_differently(capsys, dtype):
    for right in (amp_step_written_differently, amp_step_with_nll_loss):
        assert CHECKERS["09_amp_step"](right, torch.device("cpu"), dtype), capsys.readouterr().out
        assert capsys.readouterr().out.startswith("[pass]")


def amp_step_loss_outside_autocast(model, optimizer, scaler, X, y, device, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=dtype):
        logits = model(X)
    loss = F.cross_entropy(logits, y)  # outside autocast: in the logits' 16-bit dtype
    if dtype is torch.float16:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss.item()


def amp_step_model_converted(model, optimizer, scaler, X, y, device, dtype):
    optimizer.zero_grad(set_to_none=True)
    model.to(dtype)  # 16-bit weights: no float32 copy for the optimizer to update
    loss = F.cross_entropy(model(X.to(dtype)), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def amp_step_cuda_autocast(model, optimizer, scaler, X, y, device, dtype):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=dtype):  # does nothing to operations on another device
        loss = F.cross_entropy(model(X), y)
    loss.backward()
    optimizer.step()
    return loss.item()


@pytest.mark.filterwarnings("ignore:CUDA is not available")  # what torch.autocast("cuda") says on a machine without
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (amp_step_loss_outside_autocast, "the loss ran in torch.{dtype}, outside autocast"),
        (amp_step_model_converted, "the model's parameters became torch.{dtype}"),
        (amp_step_cuda_autocast, "the forward pass ran in torch.float32"),
    ],
)
def test_amp_step_rejects_wrong_answers_that_look_right(capsys, dtype, wrong, hint):
    assert not CHECKERS["09_amp_step"](wrong, torch.device("cpu"), dtype)
    out = capsys.readouterr().out
    assert out.startswith("[not yet]") and hint.format(dtype=str(dtype).removeprefix("torch.")) in out, out
