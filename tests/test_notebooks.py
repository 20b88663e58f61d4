"""Every committed lesson notebook passes the lint, and every lesson runs clean in a fresh kernel in quick mode.

nbval executes each committed notebook once per test run and compares its outputs (pytest collects notebooks/ with
--nbval). ``test_executes_in_quick_mode`` reads that same run (conftest.py's ``executed_notebook``): no cell of it
raised, it recorded a headline figure, and it ran in quick mode, so the checked environment reached nbval's kernel.
The committed outputs are held to the same: they come from the course runner's --write-back, in quick mode.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nblint import lint

from tools import course

NOTEBOOKS = course.find_notebooks(Path(__file__).resolve().parent.parent / "notebooks")
IDS = [p.name[:2] for p in NOTEBOOKS]


def test_lessons_are_numbered_from_00_without_gaps() -> None:
    assert [f"{i:02d}" for i in range(len(IDS))] == IDS, IDS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lint(path: Path) -> None:
    assert lint(nbformat.read(path, as_version=4)) == []


def _ran_clean_in_quick_mode(nb: nbformat.NotebookNode) -> None:
    assert course.first_error(nb) is None
    records = course.records(nb)
    assert any("headline" in r for r in records), "the notebook records no headline figure"
    assert any(r.get("quick") for r in records), "the notebook did not run in quick mode"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_outputs_come_from_a_clean_quick_run(path: Path) -> None:
    _ran_clean_in_quick_mode(nbformat.read(path, as_version=4))


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.parametrize("prefix", IDS)
def test_executes_in_quick_mode(prefix: str, executed_notebook) -> None:
    _ran_clean_in_quick_mode(executed_notebook(prefix))
