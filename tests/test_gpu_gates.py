"""The gates of a lesson's GPU sections (helpers.devices): when a section runs, and the one line it prints instead."""

from __future__ import annotations

import pytest
import torch

from helpers import devices


def machine_with_gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


@pytest.mark.parametrize(
    ("gpus", "device", "needed", "runs", "line"),
    [
        (0, "cpu", 1, False, "Skipped (needs 1 CUDA GPU, this machine has 0): the copy\n"),
        (0, "cpu", 2, False, "Skipped (needs 2 CUDA GPUs, this machine has 0): the copy\n"),
        (1, "cpu", 1, False, "Skipped (the lesson runs on cpu, not on this machine's CUDA GPU): the copy\n"),
        (2, "cpu", 2, False, "Skipped (the lesson runs on cpu, not on this machine's CUDA GPUs): the copy\n"),
        (1, "cuda", 2, False, "Skipped (needs 2 CUDA GPUs, this machine has 1): the copy\n"),
        (1, "cuda:0", 1, True, ""),
        (2, "cuda", 2, True, ""),
    ],
)
def test_gpu_section_runs_only_on_the_lessons_cuda_device(monkeypatch, capsys, gpus, device, needed, runs, line):
    machine_with_gpus(monkeypatch, gpus)
    assert devices.gpu_section(torch.device(device), "the copy", needed) is runs
    assert capsys.readouterr().out == line


@pytest.mark.parametrize(
    ("gpus", "needed", "runs", "line"),
    [
        (0, 1, False, "Skipped (needs 1 CUDA GPU, this machine has 0): the names\n"),
        (1, 2, False, "Skipped (needs 2 CUDA GPUs, this machine has 1): the names\n"),
        (1, 1, True, ""),
        (2, 2, True, ""),
    ],
)
def test_machine_gpus_asks_the_machine_whatever_the_lessons_device(monkeypatch, capsys, gpus, needed, runs, line):
    machine_with_gpus(monkeypatch, gpus)
    assert devices.machine_gpus("the names", needed) is runs
    assert capsys.readouterr().out == line
