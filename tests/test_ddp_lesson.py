"""Lesson 07's header states what it asks of a reader from the notebook itself: the words of prose it holds, and the
minutes they take at the reading speeds it names."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
STATED = re.compile(
    r"about ([\d,]+) words of prose, some (\d+) to (\d+) minutes of reading at 200 to 240 words a minute"
)


def prose_words(notebook: Path) -> int:
    nb = nbformat.read(notebook, as_version=4)
    return sum(len(cell.source.split()) for cell in nb.cells if cell.cell_type == "markdown")


def stated_time(notebook: Path) -> tuple[int, int, int]:
    header = nbformat.read(notebook, as_version=4).cells[0].source
    found = STATED.search(" ".join(header.split()))
    assert found, f"{notebook.name}: the header's Time line does not state its words of prose"
    return int(found[1].replace(",", "")), int(found[2]), int(found[3])


@pytest.mark.parametrize("name", ["07_distributed_data_parallel.ipynb", "09_speedrun.ipynb"])
def test_the_time_line_counts_the_lessons_own_words(name):
    notebook = ROOT / "notebooks" / name
    words, fastest, slowest = stated_time(notebook)
    assert abs(words - prose_words(notebook)) <= 100, (words, prose_words(notebook))
    assert (fastest, slowest) == (round(words / 240), round(words / 200))
