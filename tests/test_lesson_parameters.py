"""helpers.lesson.start validates a lesson's parameters in one place: a value the lesson cannot use stops it at once
with one line naming the parameter, the value and what is allowed; QUICK and COURSE_QUICK accept the usual yes/no
spellings and refuse the rest; COURSE_DATASET says when it overrides the notebook's DATASET."""

from __future__ import annotations

import course_cli
import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_notebook

from helpers import lesson, settings
from helpers.lesson import ParameterError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("COURSE_DEVICE", "COURSE_QUICK", "COURSE_DATASET"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"lr": "fast"}, "LR = 'fast' is not allowed: LR must be a number greater than 0, such as 0.01."),
        ({"lr": 0.0}, "LR = 0.0 is not allowed: LR must be a number greater than 0"),
        ({"lr": float("nan")}, "LR = nan is not allowed"),
        ({"epochs": 0}, "EPOCHS = 0 is not allowed: EPOCHS must be a whole number of at least 1, such as 2."),
        ({"epochs": 2.5}, "EPOCHS = 2.5 is not allowed"),
        ({"epochs": True}, "EPOCHS = True is not allowed"),
        ({"batch_size": "128"}, "BATCH_SIZE = '128' is not allowed"),
        ({"small_batch": -64}, "SMALL_BATCH = -64 is not allowed"),
        ({"timing_batches": [512, 0]}, "TIMING_BATCHES = [512, 0] is not allowed: TIMING_BATCHES must be a non-empty"),
        ({"timing_batches": []}, "TIMING_BATCHES = [] is not allowed"),
        ({"timing_batches": 512}, "TIMING_BATCHES = 512 is not allowed"),
        ({"compile": "maybe"}, "COMPILE = 'maybe' is not allowed: COMPILE must be True or False (or one of the"),
    ],
)
def test_a_bad_value_names_the_parameter_the_value_and_what_is_allowed(capsys, params, message):
    with pytest.raises(ParameterError) as info:
        lesson.start("cpu", False, "MNIST", **params)
    assert str(info.value).startswith(message)
    assert str(info.value).endswith("Change it in the parameters cell, then run the notebook again from the top.")
    assert isinstance(info.value, ValueError)
    assert capsys.readouterr().out == "", "nothing is announced for a lesson that cannot start"


def test_good_values_come_back_checked_on_the_settings(capsys):
    settings = lesson.start(
        "cpu", False, "MNIST", epochs=3, batch_size=64, lr=1e-3, timing_batches=(8, 16), compile="off"
    )
    assert settings.params == {"epochs": 3, "batch_size": 64, "lr": 1e-3, "timing_batches": (8, 16), "compile": False}
    assert lesson.start("cpu", compile=True).params == {"compile": True}
    assert lesson.start("cpu").params == {}


def test_the_old_positional_calls_still_work(capsys):
    assert lesson.start("cpu", True, "FashionMNIST", 5) == lesson.Settings(
        device=torch.device("cpu"), quick=True, dataset="FashionMNIST", seed=5
    )


def test_an_unknown_keyword_is_a_programming_error():
    with pytest.raises(TypeError, match="unknown parameter 'epoch'; it knows epochs, batch_size"):
        lesson.start("cpu", epoch=3)


@pytest.mark.parametrize(
    ("value", "quick"),
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        ("no", False),
        ("false", False),
        ("OFF", False),
        ("0", False),
        ("Yes", True),
        (" true ", True),
        ("on", True),
        ("1", True),
    ],
)
def test_quick_accepts_the_usual_spellings(capsys, value, quick):
    assert lesson.start("cpu", value).quick is quick


@pytest.mark.parametrize("value", ["maybe", "", "2", 2, None, "quick"])
def test_quick_refuses_anything_else(capsys, value):
    with pytest.raises(ParameterError, match=r"^QUICK = .* is not allowed: QUICK must be True or False"):
        lesson.start("cpu", value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", True),
        ("yes", True),
        ("TRUE", True),
        ("on", True),
        ("0", False),
        ("no", False),
        ("false", False),
        ("Off", False),
        ("", False),
        ("  ", False),
    ],
)
def test_env_flag_spellings(monkeypatch, value, expected):
    monkeypatch.setenv("COURSE_QUICK", value)
    assert settings.quick() is expected


def test_env_flag_unset_is_false():
    assert settings.quick() is False


@pytest.mark.parametrize("value", ["ja", "2", "quick", "y e s"])
def test_a_misspelt_environment_flag_names_the_variable(monkeypatch, capsys, value):
    monkeypatch.setenv("COURSE_QUICK", value)
    with pytest.raises(ParameterError) as info:
        lesson.start("cpu")
    assert str(info.value) == (
        f"COURSE_QUICK={value!r} is set in the environment, but it is not a yes/no value. Set it to one of 1/0, "
        "true/false, yes/no, on/off (any case), or unset it."
    )


def test_false_words_in_the_environment_leave_quick_off(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_QUICK", "no")
    assert lesson.start("cpu").quick is False
    assert "full run" in capsys.readouterr().out


def test_an_override_of_another_dataset_says_so(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_DATASET", "FashionMNIST")
    assert lesson.start("cpu", dataset="MNIST").dataset == "FashionMNIST"
    assert "dataset FashionMNIST (from COURSE_DATASET, instead of the notebook's DATASET = 'MNIST')" in (
        capsys.readouterr().out
    )
    lesson.start("cpu", dataset="fashion-mnist")
    out = capsys.readouterr().out
    assert "dataset FashionMNIST (from COURSE_DATASET)," in out and "instead" not in out


def test_a_bad_dataset_is_named_even_when_the_environment_overrides_it(monkeypatch):
    monkeypatch.setenv("COURSE_DATASET", "FashionMNIST")
    with pytest.raises(ParameterError, match=r"^DATASET = 'MNST' is not allowed: Unknown dataset 'MNST'\. Choose"):
        lesson.start("cpu", dataset="MNST")


def test_a_bad_dataset_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("COURSE_DATASET", "cifar")
    with pytest.raises(ParameterError, match=r"^COURSE_DATASET='cifar' is set in the environment: Unknown dataset"):
        lesson.start("cpu", dataset="MNIST")


def test_a_misspelt_device_names_the_parameter_or_the_variable(monkeypatch):
    with pytest.raises(ParameterError, match=r"^DEVICE = 'gpu' is not allowed: Unknown device 'gpu'\."):
        lesson.start("gpu")
    monkeypatch.setenv("COURSE_DEVICE", "bogus")
    with pytest.raises(ParameterError, match=r"^COURSE_DEVICE='bogus' is set in the environment"):
        lesson.start("auto")


def test_jupyter_shows_the_message_alone_without_a_traceback(capsys):
    """IPython (the notebook kernel's shell) renders the error through _render_traceback_: one line, no frames."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        result = shell.run_cell("from helpers import lesson\nlesson.start('cpu', 'no', 'MNIST', lr='fast')")
    finally:
        InteractiveShell.clear_instance()
    assert isinstance(result.error_in_exec, ParameterError)
    shown = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert shown == [
        "ParameterError: LR = 'fast' is not allowed: LR must be a number greater than 0, such as 0.01. Change it "
        "in the parameters cell, then run the notebook again from the top."
    ]


@pytest.mark.slow
@pytest.mark.notebooks
def test_in_a_notebook_run_the_error_is_one_line_and_the_runner_names_it(tmp_path):
    folder = tmp_path / "nbs"
    folder.mkdir()
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    cells = [
        new_code_cell('DEVICE = "cpu"\nQUICK = "no"\nEPOCHS = 0'),
        new_code_cell("from helpers import lesson\nsettings = lesson.start(DEVICE, QUICK, epochs=EPOCHS)"),
        new_code_cell("print('never')"),
    ]
    nbformat.write(new_notebook(metadata=meta, cells=cells), folder / "00_params.ipynb")
    done = course_cli.run(course_cli.run_lessons_command(folder, tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    message = (
        "EPOCHS = 0 is not allowed: EPOCHS must be a whole number of at least 1, such as 2. Change it in the "
        "parameters cell, then run the notebook again from the top."
    )
    assert f"00_params.ipynb failed: cell 1 (In [2]) raised ParameterError: {message}" in done.stderr
    executed = nbformat.read(tmp_path / "out" / "00_params.ipynb", as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert [e.traceback for e in errors] == [[f"ParameterError: {message}"]]  # what Jupyter shows: no frames
