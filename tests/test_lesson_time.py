"""Each lesson's Time line is computed (tools/lesson_time.py): prose at 200 words a minute plus a record's run time."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tools import lesson_time
from tools.lesson_time import Record, prose_words, run_seconds, time_line

NOTEBOOKS = sorted(lesson_time.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _notebook(markdown: list[str], code_ids: list[str]) -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_markdown_cell(text) for text in markdown]
    for cell_id in code_ids:
        cell = nbformat.v4.new_code_cell("pass")
        cell["id"] = cell_id
        cells.append(cell)
    return nbformat.v4.new_notebook(cells=cells)


def _record(lessons: dict, gpu: bool = True, date: str = "2026-11-26", name: str = "lessons-x.json") -> Record:
    return Record(lesson_time.RECORDS / name, "one Test GPU", date, gpu, lessons)


def test_prose_words_leave_out_link_targets_tags_and_the_time_line():
    nb = _notebook(
        [
            "# Title\n\n**Time:** about 99 minutes of nothing.\n\nRead [the notes](https://example.org/a/b/c) now.",
            '<span id="x">two words</span> ![badge](https://img.example.org/x.svg)',
        ],
        [],
    )
    # Title / Read the notes now / two words / badge
    assert prose_words(nb) == 1 + 4 + 2 + 1


def test_run_seconds_sum_the_lessons_cells_and_count_the_ones_the_record_lacks():
    nb = _notebook(["# L"], ["a", "b", "c"])
    record = _record({"05_x.ipynb": {"quick": False, "cells": {"a": 1.5, "b": 2.0, "z": 9.0}}})
    assert run_seconds(nb, "05_x.ipynb", record) == (3.5, 1, False)


def test_a_split_or_renumbered_lesson_finds_its_cells_seconds_by_id():
    part = _notebook(["# L"], ["b", "c"])
    record = _record({"08_big.ipynb": {"quick": True, "cells": {"a": 1.0, "b": 2.0, "c": 4.0}}})
    assert run_seconds(part, "09_part.ipynb", record) == (6.0, 0, True)
    assert run_seconds(_notebook(["# L"], ["q"]), "10_new.ipynb", record) is None


def test_a_gpu_record_is_chosen_over_a_cpu_one_and_the_newest_gpu_first():
    nb = _notebook(["# L"], ["a"])
    lessons = {"00_x.ipynb": {"quick": False, "cells": {"a": 1.0}}}
    cpu = _record(lessons, gpu=False, date="2026-12-01", name="lessons-cpu.json")
    old, new = _record(lessons, date="2026-01-01", name="lessons-old.json"), _record(lessons, name="lessons-new.json")
    assert lesson_time.choose_record([cpu, old, new], nb, "00_x.ipynb") is new
    assert lesson_time.choose_record([cpu], nb, "00_x.ipynb") is cpu
    assert lesson_time.choose_record([cpu], _notebook(["# L"], ["q"]), "01_other.ipynb") is None


@pytest.mark.parametrize(
    ("words", "measured", "expected"),
    [
        (
            2000,
            (90.0, 0, False),
            "**Time:** about 12 minutes: 2,000 words of prose (10 minutes at 200 words a minute) and 1.5 minutes of "
            "running at the default settings on one Test GPU (`records/lessons-x.json`, 2026-11-26).",
        ),
        (
            410,
            (12.0, 2, True),
            "**Time:** about 3 minutes: 410 words of prose (3 minutes at 200 words a minute) and 12 seconds of running "
            "in quick mode on one Test GPU (`records/lessons-x.json`, 2026-11-26); 2 code cells newer than that run "
            "not counted.",
        ),
    ],
)
def test_the_line_adds_reading_and_running_and_says_where_the_time_was_measured(words, measured, expected):
    assert time_line(words, _record({}), measured) == expected


def test_code_lines_leave_out_blank_and_comment_lines_and_exercises_count_each_checker_once():
    nb = _notebook(["# L"], [])
    nb.cells += [
        nbformat.v4.new_code_cell("# a comment\nx = 1\n\n    # indented comment\ny = x  # trailing comment"),
        nbformat.v4.new_code_cell("answer = None\nchecks.check_one(answer)"),
        nbformat.v4.new_code_cell("answer = 2\nchecks.check_one(answer)\nchecks.check_two(answer, device)"),
    ]
    assert lesson_time.code_lines(nb) == 2 + 2 + 3
    assert lesson_time.exercises(nb) == 2


def test_the_line_counts_code_and_exercises_at_the_rates_it_states():
    line = time_line(2000, _record({}), (90.0, 0, False), lines=240, tasks=4)
    assert line == (
        "**Time:** about 44 minutes: 2,000 words of prose (10 minutes at 200 words a minute), 240 lines of code "
        "(8 minutes at 30 lines a minute), 4 exercises (24 minutes at 6 minutes an exercise) and 1.5 minutes of "
        "running at the default settings on one Test GPU (`records/lessons-x.json`, 2026-11-26)."
    )
    assert time_line(12000, None, None, lines=1, tasks=1).startswith(
        "**Time:** about 1 hour 7 minutes: 12,000 words of prose (1 hour at 200 words a minute), 1 line of code "
        "(1 minute at 30 lines a minute) and 1 exercise (6 minutes at 6 minutes an exercise); its run time"
    )


def test_without_a_record_the_line_gives_the_reading_and_says_the_run_is_not_recorded():
    line = time_line(450, None, None)
    assert line.startswith("**Time:** about 3 minutes: 450 words of prose (3 minutes at 200 words a minute)")
    assert line.endswith("its run time has not been recorded yet.")


def test_write_line_replaces_the_time_line_only(tmp_path: Path):
    path = tmp_path / "00_x.ipynb"
    nb = _notebook(["# Title\n\n**Time:** about 10 minutes.\n\n**Hardware:** any."], [])
    nbformat.write(nb, path)
    assert lesson_time.write_line(path, "**Time:** about 4 minutes.")
    header = nbformat.read(path, as_version=4).cells[0].source
    assert header == "# Title\n\n**Time:** about 4 minutes.\n\n**Hardware:** any."
    assert not lesson_time.write_line(path, "**Time:** about 4 minutes.")
    nbformat.write(_notebook(["# No time here"], []), path)
    with pytest.raises(ValueError, match="no '\\*\\*Time:\\*\\*' line"):
        lesson_time.write_line(path, "**Time:** x")


def test_a_record_is_made_from_executed_notebooks(tmp_path: Path):
    nb = _notebook(["# L"], ["a", "b"])
    nb.cells[1].metadata["papermill"] = {"duration": 1.25}
    nb.cells[2].metadata["papermill"] = {"duration": 0.5}
    settings = "Lesson settings: device cuda:0, quick mode, seed 0\n"
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text=settings)]
    nbformat.write(nb, tmp_path / "03_x.ipynb")
    record = lesson_time.record_from(tmp_path, "one Test GPU", True, "a note")
    assert record["gpu"] is True and record["device"] == "one Test GPU"
    assert record["lessons"]["03_x.ipynb"] == {"seconds": 1.8, "quick": True, "cells": {"a": 1.25, "b": 0.5}}
    json.dumps(record)  # it is written as JSON


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_lessons_header_has_its_computed_time(path: Path):
    line = lesson_time.computed_line(path, lesson_time.load_records())
    assert lesson_time.header_line(path) == line, f"run `python -m tools.lesson_time --write`; computed: {line}"
