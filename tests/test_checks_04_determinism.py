"""Lesson 04's deterministic-algorithms cell leaves the process as it found it, also when the cuBLAS error it shows
does not come: run here on the CPU, where no matrix product asks for CUBLAS_WORKSPACE_CONFIG, the error stays away."""

import os
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
import torch

from helpers.errors import ErrorExpectationFailed, expect_error

LESSON = Path(__file__).resolve().parent.parent / "notebooks" / "04_device_agnostic_code.ipynb"


def run_the_cell(commands: list[str]) -> None:
    """The cell as IPython would run it, with its GPU gate open and its shell command recorded, not run."""
    from IPython.core.inputtransformer2 import TransformerManager

    source = next(c.source for c in nbformat.read(LESSON, as_version=4).cells if c.get("id") == "8820d2f5")
    shell = SimpleNamespace(system=commands.append)
    namespace = {
        "os": os,
        "torch": torch,
        "devices": SimpleNamespace(gpu_section=lambda device, what, needed=1: True),
        "device": torch.device("cpu"),
        "expect_error": expect_error,
        "PYTHON": "python",
        "get_ipython": lambda: shell,
    }
    exec(compile(TransformerManager().transform_cell(source), "lesson 04, cell 8820d2f5", "exec"), namespace)


@pytest.mark.parametrize("before", [(False, False), (True, True), (True, False)])
def test_the_deterministic_setting_is_restored_when_the_error_does_not_come(monkeypatch, before):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.version, "cuda", torch.version.cuda or "13.0")  # a CPU-only build says None
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    commands: list[str] = []
    try:
        with pytest.raises(ErrorExpectationFailed):
            run_the_cell(commands)
        after = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    assert after == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ  # the variable goes to the script's command line only
    assert commands == []  # the cell stopped at the missing error, before starting the script


def test_the_script_gets_the_workspace_on_its_command_line_when_it_is_set_already(monkeypatch, capsys):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    commands: list[str] = []
    run_the_cell(commands)
    assert "No error to show" in capsys.readouterr().out
    assert len(commands) == 1 and "CUBLAS_WORKSPACE_CONFIG=:4096:8" in commands[0] and "--deterministic" in commands[0]
    assert not torch.are_deterministic_algorithms_enabled()
