"""Lesson 09's own code, lessons.lesson_09 (the figure of its ladder), its table of the ladder run on scripted clocks,
and the table as executed."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch
from test_lesson08 import run_try_change, scripted_clock, stdout_of

from lessons import lesson_09

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def close_figures():
    plt.switch_backend("Agg")  # no window, wherever the tests run
    yield
    plt.close("all")


def cell_source(cell_id: str) -> str:
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "09_precision_layout_compile.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == cell_id)


def bar_labels(ax: plt.Axes) -> list[str]:
    return [child.get_text() for child in ax.texts]


def test_each_bar_shows_the_speed_up_it_was_measured_with_not_a_ratio_of_two_rows():
    # The ladder of lessons 08 and 09 on a GPU: the row "no loss.item()" ran at 27,809 images/s, 1.02x the 27,141 its
    # reference ran at in the same turns, though the reference's own row says 34,671 (timed at another moment).
    labels = ["baseline", "data resident", "no loss.item()", "batch 512"]
    rates = [7_629.0, 34_671.0, 27_809.0, 213_480.0]
    ax = lesson_09.plot_speedups(labels, rates, [True, True, False, True], speedups=[1.0, 5.06, 1.02, 7.94])
    assert bar_labels(ax) == ["7,629", "34,671 (5.06x)", "27,809 (1.02x)", "213,480 (7.94x)"]
    assert "timed in turns" in ax.get_xlabel()


def test_without_measured_speed_ups_the_ratio_to_the_first_bar_is_labelled_as_such():
    ax = lesson_09.plot_speedups(["baseline", "faster"], [100.0, 250.0], [True, True])
    assert bar_labels(ax) == ["100", "250 (2.50x)"]
    assert "against the first bar, timed at a different moment" in ax.get_xlabel()


def test_speed_ups_must_match_the_bars():
    with pytest.raises(ValueError, match="speed-ups"):
        lesson_09.plot_speedups(["a", "b"], [1.0, 2.0], [True, True], speedups=[1.0])


def test_the_table_marks_a_verdict_whose_reference_moved_and_shows_both_sides_of_each_speed_up(monkeypatch):
    rungs, _ = run_try_change(scripted_clock(monkeypatch), monkeypatch, 0.016, 0.010, 0.020)
    ns = {"rungs": rungs, "lesson_09": lesson_09, "plt": plt, "inspect": inspect, "device": torch.device("cpu")}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(cell_source("c47"), ns)
    rows = [re.split(r"\s{2,}", line) for line in printed.getvalue().splitlines()[:5]]
    assert rows[0] == ["change", "images/s", "spread", "last kept, same turns", "speed-up", "verdict"]
    assert rows[1] == ["baseline", "1,000", "4%", "-", "-", "baseline"]
    assert rows[2] == ["the change", "1,000", "0%", "625", "1.60x", "kept (reference moved)"]
    assert rows[3] == ["the change 1", "500", "0%", "1,000", "0.50x", "not kept: slower"]
    assert rows[4] == ["not kept here: the change 1 (not kept: slower)"]
    assert [child.get_text() for child in plt.gca().texts] == ["1,000", "1,000 (1.60x)", "500 (0.50x)"]


@pytest.mark.slow
def test_each_speed_up_in_the_executed_table_is_the_ratio_of_its_own_row(executed_notebook):
    table = stdout_of(executed_notebook("09"), "c47").split("\nnot kept here")[0].splitlines()
    assert table[0].split() == ["change", "images/s", "spread", "last", "kept,", "same", "turns", "speed-up", "verdict"]
    rows = [re.split(r"\s{2,}", line) for line in table[2:]]  # after the header and the baseline
    assert len(rows) >= 2  # mixed precision and channels_last; torch.compile too outside quick mode
    for change, rate, _, reference, speedup, _ in rows:
        rate, reference = float(rate.replace(",", "")), float(reference.replace(",", ""))
        assert float(speedup.rstrip("x")) == pytest.approx(rate / reference, rel=0.01, abs=0.01), change
