"""``python -m lessons.lesson_11`` refuses bad input with one clear line, as a user sees it."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch

from helpers import arguments
from lessons import lesson_11 as speedrun


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lessons.lesson_11", *args], capture_output=True, text=True, timeout=120
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


def _refused(capsys, *args: str) -> str:
    """What ``main`` (the function behind ``python -m lessons.lesson_11``) writes as it refuses ``args``."""
    with pytest.raises(SystemExit) as exit_:
        speedrun.main(list(args))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_runs_must_be_at_least_one(capsys):
    assert "at least 1" in _refused(capsys, "--runs", "0")


def test_unknown_device(capsys):
    assert "Unknown device 'tpu'" in _refused(capsys, "--device", "tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_unavailable_device(capsys):
    assert "no GPU is visible" in _refused(capsys, "--device", "cuda")


def test_unknown_dataset(capsys):
    assert "Unknown dataset" in _refused(capsys, "--dataset", "CIFAR10")
