"""conftest.py: the checked environment is set by pytest's hooks (not on import) and put back after, nbval's kernels
get it, and each lesson is executed once per test run: a test that reads an executed lesson reads nbval's run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tools import course

ROOT = Path(__file__).resolve().parent.parent


def _fresh_conftest() -> ModuleType:
    """A new module object run from conftest.py, apart from the one pytest loaded for this session."""
    spec = importlib.util.spec_from_file_location("fresh_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_importing_the_conftest_leaves_the_environment_alone() -> None:
    before = dict(os.environ)
    _fresh_conftest()
    assert dict(os.environ) == before


def test_this_session_runs_with_the_checked_environment() -> None:
    assert {name: os.environ.get(name) for name in course.CHECK_ENV} == course.CHECK_ENV
    assert os.environ.get("OMP_WAIT_POLICY")


@pytest.mark.parametrize("omp", [None, "ACTIVE"])
def test_configure_sets_the_environment_and_unconfigure_puts_it_back(monkeypatch, omp) -> None:
    name, value = next(iter(course.CHECK_ENV.items()))
    monkeypatch.setenv(name, f"not {value}")
    for other in list(course.CHECK_ENV)[1:]:
        monkeypatch.delenv(other, raising=False)
    if omp is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", omp)
    before = dict(os.environ)
    conftest = _fresh_conftest()
    conftest.pytest_configure(None)
    assert {n: os.environ.get(n) for n in course.CHECK_ENV} == course.CHECK_ENV  # the checked settings win
    assert os.environ["OMP_WAIT_POLICY"] == (omp or "PASSIVE")  # a value already set is kept
    conftest.pytest_unconfigure(None)
    assert dict(os.environ) == before


def _notebook(cells: list[tuple[str, str]]) -> str:
    """A notebook whose code cells hold ``source`` with committed stdout ``text``, numbered 1, 2, ..."""
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": i,
                    "id": f"c{i}",
                    "metadata": {},
                    "outputs": [{"name": "stdout", "output_type": "stream", "text": text}] if text else [],
                    "source": source,
                }
                for i, (source, text) in enumerate(cells, 1)
            ],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def _count(name: str) -> str:
    """A cell line that notes one execution of lesson ``name`` in a file beside the lessons."""
    return f"open('runs.txt', 'a').write('{name} ')\n"


READER = """
import pytest

@pytest.mark.slow
@pytest.mark.parametrize("prefix", ["00", "01", "02"])
def test_reads(executed_notebook, prefix):
    nb = executed_notebook(prefix)
    assert nb.cells[1].outputs[0]["text"] == "4\\n"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A course in miniature: this conftest.py, three lessons (one raises) and a test that reads each one."""
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = -v -rA -p no:cacheprovider --nbval --nbval-current-env\nmarkers =\n    slow: slow\n",
        encoding="utf-8",
    )
    lessons = tmp_path / "notebooks"
    lessons.mkdir()
    env = f"import os; print(*(os.environ.get(n) for n in {(*course.CHECK_ENV, 'OMP_WAIT_POLICY')!r}))"
    checked = " ".join([*course.CHECK_ENV.values(), "PASSIVE"]) + "\n"
    four = ("print(2 + 2)", "4\n")
    (lessons / "00_runs.ipynb").write_text(_notebook([(_count("00") + env, checked), four]), encoding="utf-8")
    (lessons / "01_raises.ipynb").write_text(_notebook([(_count("01") + "1 / 0", ""), four]), encoding="utf-8")
    (lessons / "02_alone.ipynb").write_text(_notebook([(_count("02"), ""), four]), encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_reader.py").write_text(READER, encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_a_lesson_read_by_a_test_is_executed_once_by_nbval_and_the_runner_only_without_it(project: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in (*course.CHECK_ENV, "OMP_WAIT_POLICY"):
        env.pop(name, None)  # the inner session sets them itself
    nbval_runs = ["notebooks/00_runs.ipynb", "notebooks/01_raises.ipynb"]  # not 02: only the runner can execute it
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", *nbval_runs],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    ran = dict(reversed(r) for r in re.findall(r"^(PASSED|FAILED) (\S+(?: \d+(?: again)?)?)", out, re.M))  # -rA
    readers = [f"tests/test_reader.py::test_reads[{n}]" for n in ("00", "01", "02")]
    assert ran == {
        "notebooks/00_runs.ipynb::Cell 0": "PASSED",  # its output is the checked environment, as nbval compared
        "notebooks/00_runs.ipynb::Cell 1": "PASSED",
        "notebooks/00_runs.ipynb::Cell 0 again": "PASSED",  # the second pass, in the same kernel
        "notebooks/00_runs.ipynb::Cell 1 again": "PASSED",
        "notebooks/01_raises.ipynb::Cell 0": "FAILED",
        "notebooks/01_raises.ipynb::Cell 1": "PASSED",
        "notebooks/01_raises.ipynb::Cell 0 again": "FAILED",
        "notebooks/01_raises.ipynb::Cell 1 again": "PASSED",
        **dict(zip(readers, ["PASSED", "FAILED", "PASSED"], strict=True)),
    }, out
    in_order = re.findall(r"^(\S.*?) (?:PASSED|FAILED) +\[", out, re.MULTILINE)  # -v: one line a test, as it ran
    assert len(in_order) == 11 and in_order[-3:] == readers, out  # the readers ran after the nbval cells
    assert "01_raises.ipynb failed in nbval's run: cell 0 (In [1]) raised ZeroDivisionError" in out, out
    runs = (project / "notebooks" / "runs.txt").read_text().split()
    # 00 and 01 by nbval, twice each (the second pass), 02 once by the runner: no reader executed a lesson again
    assert sorted(runs) == ["00", "00", "01", "01", "02"]
    assert [p.name for p in (project / "build" / "test-executed").glob("*.ipynb")] == ["02_alone.ipynb"]


AGAIN_FAILS = (
    "try:\n    ran_before\nexcept NameError:\n    ran_before = True\nelse:\n    raise RuntimeError('ran before')\n"
)
"""A cell that passes in a fresh kernel and fails when it runs again in the same one."""


@pytest.mark.slow
@pytest.mark.parametrize("select", [[], ["-m", "not again"]])
def test_nbval_runs_every_lesson_again_in_the_same_kernel_and_fails_on_an_error(tmp_path: Path, select) -> None:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = -v -rA -p no:cacheprovider --nbval --nbval-current-env\nmarkers =\n    slow: slow\n"
        "    again: again\n",
        encoding="utf-8",
    )
    (tmp_path / "notebooks").mkdir()
    cells = [(AGAIN_FAILS, ""), ("print(2 + 2)", "4\n")]
    (tmp_path / "notebooks" / "00_once.ipynb").write_text(_notebook(cells), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "notebooks", *select],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ran = dict(reversed(r) for r in re.findall(r"^(PASSED|FAILED) (\S+(?: \d+(?: again)?)?)", done.stdout, re.M))
    first = {"notebooks/00_once.ipynb::Cell 0": "PASSED", "notebooks/00_once.ipynb::Cell 1": "PASSED"}
    if select:
        assert ran == first and done.returncode == 0, done.stdout
    else:
        again = {"notebooks/00_once.ipynb::Cell 0 again": "FAILED", "notebooks/00_once.ipynb::Cell 1 again": "PASSED"}
        assert ran == {**first, **again} and done.returncode == 1, done.stdout
        assert "ran before" in done.stdout


class _Item:
    """What ``pytest_collection_modifyitems`` reads of a collected test."""

    def __init__(self, nodeid: str, fixtures: tuple[str, ...] = (), slow: bool = False) -> None:
        self.nodeid, self.path, self.fixturenames = nodeid, Path(nodeid.split("::")[0]), fixtures
        self.markers = ["slow"] if slow else []

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.markers.append(mark.name)

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


def test_nbval_cells_are_marked_slow_and_lesson_readers_move_after_them() -> None:
    reader = _Item("tests/test_lesson00.py::test_reads", ("tmp_path", "executed_notebook"), slow=True)
    unit = _Item("tests/test_lesson00.py::test_unit", ("tmp_path",))
    cell = _Item("notebooks/00_a.ipynb::Cell 0")
    items = [reader, unit, cell]
    _fresh_conftest().pytest_collection_modifyitems(None, items)
    assert items == [unit, cell, reader]
    assert cell.markers == ["slow"] and unit.markers == []


def test_a_test_that_reads_a_lesson_must_be_marked_slow() -> None:
    items = [_Item("tests/test_a.py::test_reads", ("executed_notebook",)), _Item("tests/test_a.py::test_unit")]
    with pytest.raises(pytest.UsageError, match=r"not marked slow: tests/test_a.py::test_reads$"):
        _fresh_conftest().pytest_collection_modifyitems(None, items)


def test_a_test_that_reads_a_lesson_must_name_it() -> None:
    items = [_Item("tests/test_a.py::test_reads", ("executed_notebook",), slow=True)]
    with pytest.raises(pytest.UsageError, match=r"name none .*: tests/test_a.py::test_reads$"):
        _fresh_conftest().pytest_collection_modifyitems(None, items)


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("notebooks/05_mnist_on_gpu.ipynb::Cell 3", "lesson 05"),
        ("tests/test_lesson05.py::test_pipeline_sentences", "lesson 05"),
        ("tests/test_lesson02_errors.py::test_shown[err-a]", "lesson 02"),
        ("tests/test_notebooks.py::test_executes_in_quick_mode[11]", "lesson 11"),
        ("tests/test_ddp.py::test_two_processes", "tests/test_ddp.py"),
        ("tests/test_notebooks.py::test_lessons_are_numbered_from_00_without_gaps", "tests/test_notebooks.py"),
    ],
)
def test_a_worker_takes_a_lesson_with_its_readers_and_other_tests_by_file(nodeid: str, scope: str) -> None:
    assert _fresh_conftest().scope_of(nodeid) == scope
