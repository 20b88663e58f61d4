"""Lesson 11's sources: its progress bar comes from the course helper that knows when tqdm's widget can work."""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]


def test_the_ladder_bar_is_made_by_training_progress_bar_not_by_tqdm_auto():
    nb = nbformat.read(ROOT / "notebooks" / "11_speedrun.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "tqdm" not in code.replace("training.progress_bar", "")  # tqdm.auto warns in a notebook without ipywidgets
    ladder = next(c.source for c in nb.cells if c.get("id") == "c08")
    assert "bar = training.progress_bar(" in ladder
