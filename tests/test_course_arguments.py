"""tools.course run: every argument and COURSE_* variable, and every lesson's JSON, is checked before anything starts
(one message, exit status 2, no output folder); a damaged lesson is named with the fix."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from tools import course


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("COURSE_DEVICE", "COURSE_QUICK", "COURSE_DATASET"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def lessons(tmp_path: Path) -> Path:
    folder = tmp_path / "nbs"
    folder.mkdir()
    for name in ("00_setup.ipynb", "05_mnist.ipynb"):
        nbformat.write(new_notebook(cells=[new_code_cell("print(1)")]), folder / name)
    return folder


def _run(capsys, *args: str) -> tuple[int, str]:
    code = course.main(["run", "--no-progress", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, err


def _refused(capsys, output: Path, *args: str) -> str:
    code, err = _run(capsys, "--output", str(output), *args)
    assert code == 2, err
    assert not output.exists(), "nothing may start"
    return err


def test_a_missing_notebooks_folder_is_named(capsys, tmp_path):
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(tmp_path / "nope"))
    assert f"The notebooks folder {tmp_path / 'nope'} does not exist." in err
    assert "matches None" not in err and "--notebooks" in err


def test_list_with_a_missing_folder(capsys, tmp_path):
    assert course.main(["list", "--notebooks", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_only_that_matches_nothing_lists_the_lessons(capsys, lessons, tmp_path):
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons), "--only", "42")
    assert "--only '42' matches no notebook" in err and "(00, 05)" in err


def test_a_single_digit_is_a_lesson_number(lessons):
    assert [p.name for p in course.find_notebooks(lessons, "5")] == ["05_mnist.ipynb"]
    assert [p.name for p in course.find_notebooks(lessons, "0,5")] == ["00_setup.ipynb", "05_mnist.ipynb"]


@pytest.mark.parametrize("value", ["-1", "0", "soon", "nan"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(capsys, lessons, tmp_path, value):
    with pytest.raises(SystemExit) as exit_:
        course.main(["run", "--notebooks", str(lessons), "--output", str(tmp_path / "out"), "--timeout", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --timeout" in err and value in err
    assert not (tmp_path / "out").exists()


def test_an_unknown_dataset_is_refused_before_starting(capsys, lessons, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        course.main(["run", "--notebooks", str(lessons), "--output", str(tmp_path / "out"), "--dataset", "CIFAR"])
    assert exit_.value.code == 2 and not (tmp_path / "out").exists()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("error: argument --dataset: Unknown dataset 'CIFAR'. Choose one of: MNIST, FashionMNIST.")


def test_an_unknown_dataset_in_the_environment_is_named(capsys, lessons, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATASET", "cifar")
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons))
    assert err.startswith("COURSE_DATASET='cifar' is set in the environment: Unknown dataset 'cifar'.")


def test_a_misspelt_quick_flag_in_the_environment_is_named(capsys, lessons, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_QUICK", "ja")
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons))
    assert err.startswith("COURSE_QUICK='ja' is set in the environment, but it is not a yes/no value.")


def test_a_misspelt_device_is_refused_before_starting(capsys, lessons, tmp_path):
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons), "--device", "gpu")
    assert err.startswith("--device gpu cannot be used here:\nUnknown device 'gpu'. Choose one of 'auto', 'cpu'")


def test_auto_and_cpu_are_always_usable():
    assert course._device_problem("auto") is None and course._device_problem(" AUTO ") is None
    assert course._device_problem("cpu") is None and course._device_problem("cpu:1") is not None


@pytest.mark.slow  # a child process checks the device
def test_an_unavailable_device_is_refused_before_starting(capsys, lessons, tmp_path):
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons), "--device", "cuda:99")
    assert err.startswith("--device cuda:99 cannot be used here:\n")
    assert "cuda:99 was requested but" in err or "no GPU is visible" in err


def test_a_bad_device_in_the_environment_names_the_variable(capsys, lessons, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "bogus")
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons))
    assert err.startswith("COURSE_DEVICE='bogus' is set in the environment")
    assert "Unset COURSE_DEVICE (or set it to auto or cpu), or pass --device." in err


def test_an_output_folder_that_cannot_be_made_is_named(capsys, lessons, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    err = _refused(capsys, blocker / "out", "--notebooks", str(lessons))
    assert f"--output {blocker / 'out'}: cannot write there (Not a directory)." in err


def test_a_damaged_notebook_is_refused_before_any_lesson_starts(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATASET", "FashionMNIST")  # the runner sets os.environ; monkeypatch restores it
    folder = tmp_path / "nbs"
    folder.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("print(1)")]), folder / "00_fine.ipynb")
    (folder / "01_cut.ipynb").write_text('{"cells": [\n  {"cell_type": "code",')
    started = []
    monkeypatch.setattr(course, "run_notebook", lambda path, *args, **kwargs: started.append(path))
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(folder))
    assert started == [], "the lesson before the damaged one ran"
    assert err.strip() == (
        f"{folder / '01_cut.ipynb'}: the file is not a valid notebook: its JSON breaks off or is damaged at line 2, "
        f"column 24 (Expecting property name enclosed in double quotes). Restore it (git checkout -- "
        f"{folder / '01_cut.ipynb'} in a clone, or download it again)."
    )


def test_a_lesson_of_the_clone_is_named_with_its_notebooks_folder() -> None:
    lesson = course.find_notebooks(course.NOTEBOOKS, "05")[0]
    assert course.shown_path(lesson) == f"notebooks/{lesson.name}"
    assert course.shown_path(Path("/elsewhere/05_x.ipynb")) == "/elsewhere/05_x.ipynb"


def test_write_back_refuses_helpers_from_another_clone(capsys, monkeypatch, tmp_path: Path) -> None:
    import helpers

    other = tmp_path / "other-clone" / "helpers"
    other.mkdir(parents=True)
    monkeypatch.setattr(helpers, "__file__", str(other / "__init__.py"))
    err = _refused(capsys, tmp_path / "out", "--write-back", "--only", "00")
    assert f"`import helpers` finds {other}" in err and "pip install --no-deps -e ." in err
    monkeypatch.undo()
    assert course._helpers_elsewhere() is None  # this clone's helpers, as the test run imports them


def test_an_install_without_course_setup_is_refused_with_the_fix(capsys, monkeypatch, lessons, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "course_setup" else real(n, *a))
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons))
    assert "predates course_setup" in err and "pip install --no-deps -e ." in err
    monkeypatch.undo()
    assert course._course_setup_missing() is False  # this clone's install, as the test run has it


@pytest.mark.parametrize("module", ["papermill", "psutil"])
def test_a_python_without_a_runner_module_is_refused_with_the_fix(module, capsys, monkeypatch, lessons, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    err = _refused(capsys, tmp_path / "out", "--notebooks", str(lessons))
    assert (
        err.startswith("python -m tools.course: this Python (") and f"has no {module}, which runs the notebooks" in err
    )
    assert ".venv/bin/python -m tools.course" in err
