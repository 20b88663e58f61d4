"""course_setup, the check every lesson's first cell calls: PyTorch is never installed or replaced by the course, a
PyTorch below the floor stops the cell with one line, and the course's other needs are installed with the platform's
torch and torchvision pinned."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import course_setup
from lessons import lesson_00


def test_the_floors_are_the_helpers() -> None:
    assert course_setup.release(course_setup.PLATFORM["torch"])[:2] == lesson_00.TORCH_FLOOR
    assert course_setup.PLATFORM["torchvision"] == lesson_00.TORCHVISION_FLOOR
    requirements = Path(__file__).resolve().parent.parent / "requirements.txt"
    lines = requirements.read_text(encoding="utf-8").splitlines()
    assert f"torch>={course_setup.PLATFORM['torch']}" in lines
    assert f"torchvision>={course_setup.PLATFORM['torchvision']}" in lines


@pytest.mark.parametrize(
    ("torch", "torchvision", "named"),
    [
        ("2.7.1+cu126", "0.22.1", "this Python has torch 2.7.1+cu126, torchvision 0.22.1;"),
        (None, "0.29.1", "this Python has no torch;"),
        ("2.14.1", None, "this Python has no torchvision;"),
        ("2.14.1", "0.9.0", "this Python has torchvision 0.9.0;"),  # 0.9 < 0.23: numbers, not text, compared
    ],
)
def test_a_platform_below_the_floor_is_one_line_with_the_fix(monkeypatch, torch, torchvision, named) -> None:
    versions = {"torch": torch, "torchvision": torchvision}
    monkeypatch.setattr(course_setup, "installed", versions.get)
    problem = course_setup.platform_problem()
    assert problem.startswith(named) and "\n" not in problem
    assert "never installs or replaces PyTorch itself" in problem
    assert '`%pip install -U "torch>=2.8" "torchvision>=0.23"` yourself' in problem
    with pytest.raises(course_setup.SetupError) as info:
        course_setup.check("0.3.0")
    assert str(info.value) == problem
    assert info.value._render_traceback_() == [f"SetupError: {problem}"]


@pytest.mark.parametrize(("torch", "torchvision"), [("2.8.0", "0.23.0"), ("2.10.0a0+git1", "0.25.0"), ("3.0", "1.0")])
def test_the_floor_and_newer_pass(monkeypatch, torch, torchvision) -> None:
    monkeypatch.setattr(course_setup, "installed", {"torch": torch, "torchvision": torchvision}.get)
    assert course_setup.platform_problem() is None


def test_the_other_needs_are_the_installs_and_only_what_is_unmet_is_installed(monkeypatch) -> None:
    needs = course_setup.other_needs()
    assert needs == ["matplotlib>=3.7", "tqdm>=4.66"]  # pyproject.toml's dependencies, less torch and torchvision
    assert course_setup.unmet(needs) == []  # this environment has them
    versions = {"matplotlib": "3.6.3", "tqdm": None, "torch": "2.9.0+cu126", "torchvision": "0.24.0"}
    monkeypatch.setattr(course_setup, "installed", versions.get)
    assert course_setup.unmet(needs) == ["matplotlib>=3.7", "tqdm>=4.66"]
    versions["matplotlib"] = "3.10.0"
    assert course_setup.unmet(needs) == ["tqdm>=4.66"]


def test_an_install_pins_the_platforms_torch(monkeypatch) -> None:
    monkeypatch.setattr(course_setup, "installed", {"torch": "2.9.0+cu126", "torchvision": "0.24.0"}.get)
    seen = {}

    def pip(command, check):
        constraints = Path(command[command.index("-c") + 1])
        seen.update(command=command, pins=constraints.read_text())
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(course_setup.subprocess, "run", pip)
    course_setup.install(["tqdm>=4.66"])
    assert seen["command"][1:6] == ["-m", "pip", "install", "-q", "tqdm>=4.66"]
    assert "--no-deps" not in seen["command"]  # tqdm's own needs may come, never a torch
    assert seen["pins"] == "torch==2.9.0+cu126\ntorchvision==0.24.0\n"
    failed = lambda command, check: subprocess.CompletedProcess(command, 1)  # noqa: E731
    monkeypatch.setattr(course_setup.subprocess, "run", failed)
    with pytest.raises(course_setup.SetupError, match=r"could not install tqdm>=4\.66 \(pip says why above\)"):
        course_setup.install(["tqdm>=4.66"])


def test_check_installs_nothing_where_everything_is_there(monkeypatch) -> None:
    import helpers

    monkeypatch.setattr(course_setup.subprocess, "run", lambda *a, **k: pytest.fail("ran pip"))
    course_setup.check(helpers.__version__)


def test_a_package_without_metadata_is_read_from_its_module(monkeypatch, tmp_path: Path) -> None:
    """A PyTorch built from source and put on the path has no metadata: its __version__ is read instead."""
    (tmp_path / "sourcebuilt").mkdir()
    (tmp_path / "sourcebuilt" / "__init__.py").write_text('__version__ = "2.10.0a0+gitabc"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert course_setup.installed("sourcebuilt") == "2.10.0a0+gitabc"
    assert course_setup.installed("no_such_package_anywhere") is None
    import importlib.metadata

    assert course_setup.installed("tqdm") == importlib.metadata.version("tqdm")
