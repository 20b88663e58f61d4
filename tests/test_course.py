"""tools.course: the runner executes notebooks in fresh kernels, reports a table, and names what failed."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

import course_cli
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from helpers.lesson import RECORD_MIME
from tools import course

ROOT = Path(__file__).resolve().parent.parent


def _notebook(*sources: str) -> nbformat.NotebookNode:
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.cells = [new_code_cell(src) for src in sources]
    return nb


def _run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return course_cli.run(course_cli.command(*args), env)


def test_find_notebooks_filters_by_prefix_and_pattern(tmp_path):
    for name in ("00_a.ipynb", "01_b.ipynb", "04_c.ipynb", "05_d.ipynb", "README.ipynb", "x_01.ipynb"):
        (tmp_path / name).write_text("{}")
    names = lambda only: [p.name for p in course.find_notebooks(tmp_path, only)]  # noqa: E731
    assert names(None) == ["00_a.ipynb", "01_b.ipynb", "04_c.ipynb", "05_d.ipynb"]
    assert names("00") == ["00_a.ipynb"]
    assert names("0[1-4]") == ["01_b.ipynb", "04_c.ipynb"]
    assert names("00,05") == ["00_a.ipynb", "05_d.ipynb"]
    assert names("9") == []


def test_records_and_errors():
    nb = _notebook("a", "b", "c")
    nb.cells[0].outputs = [new_output("display_data", data={RECORD_MIME: {"device": "cpu"}, "text/plain": "x"})]
    nb.cells[1].outputs = [new_output("stream", name="stderr", text="line 1: b\nValueError: shown by expect_error\n")]
    assert course.records(nb) == [{"device": "cpu"}]
    assert course.first_error(nb) is None
    nb.cells[2].execution_count = 3
    nb.cells[2].outputs = [new_output("error", ename="KeyError", evalue="'x'", traceback=[])]
    assert course.first_error(nb) == "cell 2 (In [3]) raised KeyError: 'x'"
    nb.cells[1].metadata["tags"] = ["raises-exception"]  # the tag excuses nothing any more
    nb.cells[1].outputs = [new_output("error", ename="ValueError", evalue="tagged", traceback=[])]
    assert course.first_error(nb) == "cell 1 raised ValueError: tagged"


def test_clean_for_commit_drops_run_metadata_and_local_paths():
    nb = _notebook("1 / 0")
    nb.metadata["papermill"] = {"duration": 1.0}
    nb.cells[0].metadata.update(papermill={"duration": 0.1}, execution={"iopub.status.idle": "now"}, tags=[])
    site = "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    nb.cells[0].outputs = [
        new_output("error", ename="E", evalue="", traceback=[f"File {site}:12", f"File {course.ROOT}/helpers/x.py:3"]),
        new_output("stream", name="stderr", text=f"{site}:9: UserWarning: careful\n"),
        new_output("stream", name="stderr", text=f"File {stdlib / 'contextlib.py'}:158\n"),
    ]
    clean = course.clean_for_commit(nb)
    assert "papermill" not in clean.metadata and clean.cells[0].metadata == {}
    assert clean.cells[0].outputs[0].traceback == [
        "File site-packages/torch/nn/modules/module.py:12",
        "File helpers/x.py:3",
    ]
    assert clean.cells[0].outputs[1].text == "site-packages/torch/nn/modules/module.py:9: UserWarning: careful\n"
    assert clean.cells[0].outputs[2].text == f"File {stdlib.name}/contextlib.py:158\n"  # no ~/.pyenv/... path


def test_format_table_aligns_columns():
    rows = [course.Result("00_a.ipynb", "passed", 1.25, "cpu", "x: 1"), course.Result("01_long_name.ipynb", "FAILED")]
    lines = course.format_table(rows).splitlines()
    assert lines[0].split() == ["notebook", "status", "seconds", "device", "headline", "figure"]
    assert lines[2].startswith("00_a.ipynb          passed")
    seconds_end = lines[0].index("seconds") + len("seconds")  # numbers are right-aligned under their heading
    assert lines[2][:seconds_end].endswith("  1.2") and lines[3][:seconds_end].endswith("  0.0")
    assert len({line.index("status") if "status" in line else 20 for line in lines}) == 1


@pytest.mark.slow  # the runner as a child process
@pytest.mark.notebooks
def test_runner_reports_failures_and_runs_the_rest(tmp_path):
    folder = tmp_path / "nbs"
    folder.mkdir()
    record = "from helpers import lesson\nlesson.start('cpu')\nlesson.headline('answer', '42')"
    shown = "from helpers.errors import expect_error\nwith expect_error(ValueError):\n    int('x')"
    nbformat.write(_notebook(record, shown), folder / "00_ok.ipynb")
    nbformat.write(_notebook("x = 1", "1 / 0", "print('never')"), folder / "01_bad.ipynb")
    nbformat.write(_notebook("print('still runs')"), folder / "02_after.ipynb")
    before_bad = (folder / "01_bad.ipynb").read_text()
    out = _run_cli(
        "run", "--notebooks", str(folder), "--output", str(tmp_path / "out"), "--no-progress", "--write-back"
    )
    assert out.returncode == 1, out.stderr
    table = out.stdout.splitlines()
    assert table[2].split()[:2] == ["00_ok.ipynb", "passed"] and table[2].split()[3:] == ["cpu", "answer:", "42"]
    assert table[3].split()[:2] == ["01_bad.ipynb", "FAILED"]
    assert table[4].split()[:2] == ["02_after.ipynb", "passed"]
    assert "01_bad.ipynb failed: cell 1 (In [2]) raised ZeroDivisionError: division by zero" in out.stderr
    assert "Traceback" not in out.stderr
    # --write-back refreshed the passing notebooks only, without papermill's run metadata
    written = nbformat.read(folder / "00_ok.ipynb", as_version=4)
    assert [c.execution_count for c in written.cells] == [1, 2]
    assert "papermill" not in written.metadata
    assert (folder / "01_bad.ipynb").read_text() == before_bad


@pytest.mark.slow  # the runner as a child process
def test_unavailable_device_is_refused_before_any_lesson_starts(tmp_path):
    out = _run_cli(
        "run",
        "--quick",
        "--only",
        "00",
        "--no-progress",
        "--output",
        str(tmp_path / "out"),
        env={"COURSE_DEVICE": "cuda:99"},
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("COURSE_DEVICE='cuda:99' is set in the environment")
    assert "CUDA_VISIBLE_DEVICES" in out.stderr or "Change runtime type" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not (tmp_path / "out").exists(), "nothing may run"


@pytest.mark.slow  # the runner as a child process
def test_write_back_refuses_a_dataset_other_than_the_checked_one(tmp_path):
    out = _run_cli("run", "--write-back", "--dataset", "MNIST", "--no-progress", "--output", str(tmp_path / "out"))
    assert out.returncode == 2
    assert "--write-back always runs with the settings the tests check" in out.stderr
    assert "COURSE_DATASET=FashionMNIST" in out.stderr and "Traceback" not in out.stderr
    assert not list(tmp_path.iterdir()), "nothing may run"


@pytest.mark.slow  # the runner as a child process
def test_bad_pattern_is_an_error(tmp_path):
    out = _run_cli("run", "--only", "99", "--no-progress", "--output", str(tmp_path / "out"))
    assert out.returncode == 2 and "--only '99' matches no notebook" in out.stderr
    assert "00, 01, 02" in out.stderr and not (tmp_path / "out").exists()
