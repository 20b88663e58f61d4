"""Lesson 01 checkers: each accepts the reference solution and rejects wrong answers."""

import torch
from torch import randn_like

from exercises.checks import CHECKERS

DEVICE = torch.device("cpu")
TESTED = {"01_move_with_dtype", "01_copy_bandwidth", "01_device_agnostic_noise"}


def test_every_lesson_01_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("01_")} == TESTED


def test_move_with_dtype():
    check = CHECKERS["01_move_with_dtype"]
    data = torch.tensor([1, 2, 3, 4])
    moved = data.to(DEVICE, torch.float16)
    assert check(moved, moved.tolist(), data, DEVICE) is True
    assert check(None, None, data, DEVICE) is False  # unanswered
    assert check(data.to(DEVICE), data.tolist(), data, DEVICE) is False  # dtype not changed
    assert check(moved, moved, data, DEVICE) is False  # a tensor, not a list
    assert check(moved, [1.0, 2.0, 3.0, 5.0], data, DEVICE) is False  # wrong values
    assert check(moved, moved.tolist(), data, torch.device("meta")) is False  # not on the requested device
    on_meta = data.to("meta", torch.float16)
    assert check(on_meta, data.half().tolist(), data, torch.device("meta")) is True


def test_copy_bandwidth():
    check = CHECKERS["01_copy_bandwidth"]
    x = torch.ones(1024, 1024)
    right = x.numel() * x.element_size() / 0.002 / 1e9
    assert check(right, x, 0.002) is True
    assert check(None, x, 0.002) is False
    assert check(x.numel() / 0.002 / 1e9, x, 0.002) is False  # forgot the bytes per element
    assert check(right * 8, x, 0.002) is False  # gigabits, not gigabytes
    assert check("2.1", x, 0.002) is False


def noise_made_on_the_cpu(x, std):  # the function as the lesson hands it over
    return x + torch.randn(x.shape) * std


def noise_moved_but_float32(x, std):
    return x + (torch.randn(x.shape) * std).to(x.device)


def noise_of_std_one(x, std):
    return x + torch.randn_like(x)


def noise_written_into_x(x, std):
    return x.add_(torch.randn_like(x) * std)


def noise_reference(x, std):
    return x + torch.randn(x.shape, device=x.device, dtype=x.dtype) * std


def noise_made_then_copied(x, std):  # right device and dtype, but made on the CPU and copied on every call
    return x + (torch.randn(x.shape) * std).to(x.device, x.dtype)


def noise_made_then_copied_in_two_steps(x, std):
    noise = torch.randn(x.shape, dtype=x.dtype) * std
    return x + noise.to(device=x.device)


def noise_filled_in_place(x, std):  # another right answer: an empty tensor on x's device, filled there
    return x + x.new_empty(x.shape).normal_(0.0, std)


def noise_imported_by_name(x, std):
    return x + randn_like(x) * std


def noise_from_normal(x, std):
    return x + torch.normal(0.0, std, size=x.shape, device=x.device, dtype=x.dtype)


def test_device_agnostic_noise(capsys):
    check = CHECKERS["01_device_agnostic_noise"]
    assert check(noise_reference, DEVICE) is True
    assert check(lambda x, std: x + torch.randn_like(x) * std, DEVICE) is True
    for right in (noise_filled_in_place, noise_imported_by_name, noise_from_normal):
        assert check(right, DEVICE) is True, right.__name__
    assert check(None, DEVICE) is False
    capsys.readouterr()
    # Without a GPU the meta device is what refuses the CPU-made noise, so this fails on a CPU-only machine too.
    assert check(noise_made_on_the_cpu, DEVICE) is False
    assert "raised RuntimeError" in capsys.readouterr().out
    assert check(noise_moved_but_float32, DEVICE) is False
    assert "torch.float32" in capsys.readouterr().out
    assert check(noise_of_std_one, DEVICE) is False
    assert check(noise_written_into_x, DEVICE) is False
    assert check(lambda x, std: None, DEVICE) is False
    assert check("add_noise", DEVICE) is False


def test_the_move_exercise_asks_only_what_the_checker_can_see():
    from pathlib import Path

    import nbformat

    path = Path(__file__).resolve().parent.parent / "notebooks" / "01_tensors_on_devices.ipynb"
    nb = nbformat.read(path, as_version=4)
    task = next(c.source for c in nb.cells if c.get("id") == "c40")
    assert "single" not in task and "in one call" not in task  # the checker cannot tell one .to() from two
    assert "not at the calls that\nmade them" in task
    data = torch.tensor([1, 2, 3, 4])
    moved = data.to(torch.float16).to(DEVICE)  # two calls: also passes, and the exercise no longer asks for one
    assert CHECKERS["01_move_with_dtype"](moved, moved.tolist(), data, DEVICE) is True


def test_noise_checker_leaves_the_gpu_alone_when_the_lesson_runs_on_the_cpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine where DEVICE = "cpu"
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    check = CHECKERS["01_device_agnostic_noise"]
    assert check(noise_reference, DEVICE) is True  # a real cuda:0 tensor would fail here: the second run is on meta
    capsys.readouterr()
    assert check(noise_made_on_the_cpu, DEVICE) is False
    assert "meta" in capsys.readouterr().out


def test_noise_made_on_the_cpu_and_copied_over_fails_on_a_cpu_only_machine(capsys):
    check = CHECKERS["01_device_agnostic_noise"]
    for wasteful in (noise_made_then_copied, noise_made_then_copied_in_two_steps):
        assert check(wasteful, DEVICE) is False, wasteful.__name__
        out = capsys.readouterr().out
        assert "[not yet]" in out and "made a tensor of noise on the CPU" in out and "randn_like" in out, out
