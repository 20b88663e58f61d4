"""``python -m helpers.speedrun`` refuses bad input with one clear line, as a user sees it."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch

from helpers import arguments


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "helpers.speedrun", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("text", ["1", "0", "100", "150", "-0.5", "abc", "nan", "0.5%"])
def test_bad_targets_are_refused_naming_the_allowed_range(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"fraction in \(0, 1\).*percentage in \(1, 100\)"):
        arguments.accuracy(text)


@pytest.mark.parametrize(("text", "value"), [("0.88", 0.88), ("88", 0.88), ("88%", 0.88), ("93.5", 0.935)])
def test_good_targets(text, value):
    assert arguments.accuracy(text) == pytest.approx(value)


@pytest.mark.slow  # a child process imports torch
def test_bad_target_from_the_command_line():
    result = _cli("--target", "150")
    assert result.returncode == 2
    assert "--target" in result.stderr and "percentage in (1, 100)" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # a child process imports torch
def test_runs_must_be_at_least_one():
    result = _cli("--runs", "0")
    assert result.returncode == 2
    assert "at least 1" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # a child process imports torch
def test_unknown_device():
    result = _cli("--device", "tpu")
    assert result.returncode == 2
    assert "Unknown device 'tpu'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # a child process imports torch
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_unavailable_device():
    result = _cli("--device", "cuda")
    assert result.returncode == 2
    assert "no GPU is visible" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # a child process imports torch
def test_unknown_dataset():
    result = _cli("--dataset", "CIFAR10")
    assert result.returncode == 2
    assert "Unknown dataset" in result.stderr and "Traceback" not in result.stderr
