"""Every committed lesson notebook passes the lint, and executes in a fresh kernel through the course runner.

The runner executes with papermill, which stops at the first error output, as Run all does in Colab, Kaggle and VS
Code: a lesson passes only if every cell ran and none raised (the errors a lesson teaches go through expect_error).

nbval then re-executes each committed notebook and compares its outputs (pytest collects notebooks/ with --nbval).
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


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.parametrize("prefix", IDS)
def test_executes_in_quick_mode(prefix: str, executed_notebook) -> None:
    nb = executed_notebook(prefix)
    assert course.first_error(nb) is None
    records = course.records(nb)
    assert any("headline" in r for r in records), "the notebook records no headline figure"
    assert any(r.get("quick") for r in records), "the notebook did not run in quick mode"
