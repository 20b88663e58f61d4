"""helpers.settings: each of the course's environment variables read in one place, good values parsed, bad ones
refused with a message that names the variable, its value and the fix, and nothing heavy loaded to do it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in settings.NAMES:
        monkeypatch.delenv(name, raising=False)


def test_each_name_is_the_variable_the_course_documents() -> None:
    assert (settings.DEVICE, settings.QUICK, settings.DATASET, settings.DATA_DIR) == (
        "COURSE_DEVICE",
        "COURSE_QUICK",
        "COURSE_DATASET",
        "COURSE_DATA_DIR",
    )


# COURSE_DEVICE


@pytest.mark.parametrize(("value", "expected"), [("cpu", "cpu"), (" cuda:1 ", "cuda:1"), ("MPS", "MPS")])
def test_device_is_the_name_set(monkeypatch: pytest.MonkeyPatch, value: str, expected: str) -> None:
    monkeypatch.setenv("COURSE_DEVICE", value)
    assert settings.device() == expected


@pytest.mark.parametrize("value", ["", "  ", "auto", " AUTO "])
def test_a_blank_or_auto_device_leaves_the_choice_to_auto(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("COURSE_DEVICE", value)
    assert settings.device() is None


def test_an_unset_device_is_none() -> None:
    assert settings.device() is None


def test_a_device_that_cannot_be_used_is_refused_by_pick_device_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from helpers import devices

    monkeypatch.setenv("COURSE_DEVICE", "gpu")
    with pytest.raises(ValueError) as info:
        devices.pick_device("auto")
    message = str(info.value)
    assert message.startswith("COURSE_DEVICE='gpu' is set in the environment")
    assert "Fix: unset COURSE_DEVICE (or set it to auto or cpu)" in message


# COURSE_QUICK


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("yes", True), (" On ", True), ("TRUE", True), ("0", False), ("no", False), ("Off", False)],
)
def test_quick_reads_yes_and_no_words(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("COURSE_QUICK", value)
    assert settings.quick() is expected


@pytest.mark.parametrize("value", ["", "   "])
def test_a_blank_quick_is_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("COURSE_QUICK", value)
    assert settings.quick() is False


def test_an_unset_quick_is_off() -> None:
    assert settings.quick() is False


@pytest.mark.parametrize("value", ["ja", "2", "quick", "y e s"])
def test_a_misspelt_quick_names_the_variable_the_value_and_the_fix(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("COURSE_QUICK", value)
    with pytest.raises(ValueError) as info:
        settings.quick()
    assert str(info.value) == (
        f"COURSE_QUICK={value!r} is set in the environment, but it is not a yes/no value. Set it to one of 1/0, "
        "true/false, yes/no, on/off (any case), or unset it."
    )


# COURSE_DATASET


@pytest.mark.parametrize(
    ("value", "expected"),
    [("MNIST", "MNIST"), (" mnist ", "MNIST"), ("fashion-mnist", "FashionMNIST"), ("Fashion MNIST", "FashionMNIST")],
)
def test_dataset_is_spelt_as_the_course_spells_it(monkeypatch: pytest.MonkeyPatch, value: str, expected: str) -> None:
    monkeypatch.setenv("COURSE_DATASET", value)
    assert settings.dataset() == expected


@pytest.mark.parametrize("value", ["", "  "])
def test_a_blank_dataset_is_none(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("COURSE_DATASET", value)
    assert settings.dataset() is None


def test_an_unset_dataset_is_none() -> None:
    assert settings.dataset() is None


def test_an_unknown_dataset_names_the_variable_the_value_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSE_DATASET", " cifar ")
    with pytest.raises(ValueError) as info:
        settings.dataset()
    assert str(info.value) == (
        "COURSE_DATASET='cifar' is set in the environment: Unknown dataset 'cifar'. Choose one of: MNIST, "
        "FashionMNIST. Set it to one of those, or unset it."
    )


# COURSE_DATA_DIR


def test_data_dir_is_the_folder_set_with_the_home_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "data"))
    assert settings.data_dir_given() == tmp_path / "data"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COURSE_DATA_DIR", "~/datasets")
    assert settings.data_dir_given() == tmp_path / "home" / "datasets"
    assert settings.given("COURSE_DATA_DIR") == "~/datasets"  # messages show it as it was set


def test_an_empty_or_unset_data_dir_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings.data_dir_given() is None and settings.given("COURSE_DATA_DIR") is None
    monkeypatch.setenv("COURSE_DATA_DIR", "")
    assert settings.data_dir_given() is None and settings.given("COURSE_DATA_DIR") is None


def test_a_data_dir_that_is_a_file_is_refused_naming_the_variable_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from helpers import data

    blocker = tmp_path / "notes.txt"
    blocker.write_text("not a folder")
    monkeypatch.setenv("COURSE_DATA_DIR", str(blocker))
    problem = data.data_dir_problem()
    assert problem is not None
    assert f"(set by COURSE_DATA_DIR={str(blocker)!r})" in problem
    assert "Fix: point COURSE_DATA_DIR at a folder you can write to" in problem


# One place


def _literal_names(path: Path) -> list[str]:
    """Where ``path``'s code spells one of the variables' names as a string of its own (a definition or a lookup);
    docstrings and longer texts that mention a name are left alone."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in settings.NAMES
    ]


def test_no_module_but_settings_spells_a_variables_name() -> None:
    files = [
        *ROOT.glob("helpers/*.py"),
        *ROOT.glob("tools/*.py"),
        *ROOT.glob("exercises/*.py"),
        ROOT / "course_setup.py",
    ]
    found = [hit for path in sorted(files) if path.name != "settings.py" for hit in _literal_names(path)]
    assert found == []
    assert len(_literal_names(ROOT / "helpers" / "settings.py")) == len(settings.NAMES)


def test_reading_every_setting_loads_nothing_heavy() -> None:
    code = (
        "import json, sys\n"
        "from helpers import settings\n"
        "settings.device(), settings.quick(), settings.dataset(), settings.data_dir_given()\n"
        "print(json.dumps(sorted(m for m in ('torch', 'torchvision', 'nbformat', 'numpy') if m in sys.modules)))\n"
    )
    env = {"COURSE_DEVICE": "cpu", "COURSE_QUICK": "1", "COURSE_DATASET": "fashion-mnist", "COURSE_DATA_DIR": "data"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60, check=True
    )
    assert json.loads(done.stdout) == []
