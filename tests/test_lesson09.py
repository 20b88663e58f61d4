"""Lesson 09's ladder, lessons.lesson_09 (lesson 08's code, written out in its cells and reused from here): run against
scripted clocks, it times and decides as lesson 08's cells do; lesson 09's table of it, and the table as executed."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch
from test_lesson08 import Recipe, ScriptedClock, fake_step, stdout_of
from test_lesson08 import run_try_change as run_cells_try_change

from helpers import readings, timing
from lessons import lesson_09 as ladder

ROOT = Path(__file__).resolve().parents[1]


def cell_source(cell_id: str) -> str:
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "09_precision_layout_compile.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == cell_id)


def scripted_ladder(repeats: int, clock: ScriptedClock) -> ladder.Ladder:
    """A ladder whose timers read ``clock`` and never synchronise; nothing is built (measure is replaced)."""
    steps = ladder.Ladder(torch.device("cpu"), None, None, build=None, repeats=repeats, min_repeat_time=0.0)
    steps.timer = lambda device: timing.DeviceTimer(device, sync=lambda: None, clock=clock)
    return steps


def run_try_change(reference_seconds: float, *new_seconds: float) -> tuple[ladder.Ladder, str]:
    """test_lesson08's run_try_change through lessons.lesson_09: try_change once per entry of ``new_seconds`` against a
    baseline first measured at 1 ms per image that takes ``reference_seconds`` a step of 10 in the turns."""
    clock, log = ScriptedClock(), []
    steps = scripted_ladder(5, clock)
    earlier = readings.Timing(1e-3, [0.98e-3, 1e-3, 1.02e-3], calls=1)
    run = fake_step("ref", reference_seconds, log, clock)
    steps.history.append(ladder.Result("baseline", Recipe(), earlier, readings.KEPT, 1.0, 0.0, run))
    printed = io.StringIO()
    for i, seconds in enumerate(new_seconds or (0.010,)):
        new_run = fake_step(f"new{i}", seconds, log, clock)
        steps.measure = lambda recipe, repeats=5, run=new_run: (readings.Timing(1e-3, [1e-3], calls=1), 0.0, run)
        with contextlib.redirect_stdout(printed):
            steps.try_change(f"the change {i}" if i else "the change", changed=True)
    return steps, printed.getvalue()


def test_in_turns_alternates_and_runs_an_untimed_step_first_as_lesson_08s_cell_does():
    clock, log = ScriptedClock(), []
    steps = scripted_ladder(4, clock)
    a = ladder.Result("A", Recipe(), readings.Timing(1e-3, [1e-3], calls=2), readings.KEPT, 1.0, 0.0,
                      fake_step("A", 0.010, log, clock))  # fmt: skip
    b = ladder.Result(
        "B", Recipe(), readings.Timing(1e-3, [1e-3], calls=3), "", 0.0, 0.0, fake_step("B", 0.005, log, clock)
    )
    before, after = steps.in_turns(a, b)
    assert "".join(log) == "".join(["A" * 3 + "B" * 4, "B" * 4 + "A" * 3] * 2)
    assert before.times == pytest.approx([1e-3] * 4) and after.times == pytest.approx([0.5e-3] * 4)


@pytest.mark.parametrize("case", [(0.016, 0.010), (0.0102, 0.008), (0.016, 0.020, 0.020), (0.010, 0.016)])
def test_the_helper_prints_and_decides_what_lesson_08s_cells_do(case):
    cells, cells_printed = run_cells_try_change(*case)
    helper, helper_printed = run_try_change(*case)
    assert helper_printed == cells_printed
    for mine, theirs in zip(helper.history, cells["history"], strict=True):
        assert (mine.change, mine.verdict, mine.speedup) == (theirs.change, theirs.verdict, theirs.speedup)
        assert (mine.drift and mine.drift.kind) == (theirs.drift and theirs.drift.kind)


def test_the_table_marks_a_verdict_whose_reference_moved_and_shows_both_sides_of_each_speed_up():
    import matplotlib.pyplot as plt

    from helpers import plotting, text

    plt.switch_backend("Agg")
    steps, _ = run_try_change(0.016, 0.010)
    ns = {"ladder": steps, "plotting": plotting, "plt": plt, "text": text, "device": torch.device("cpu")}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(cell_source("c47"), ns)
    plt.close("all")
    rows = printed.getvalue().splitlines()
    assert re.split(r"\s{2,}", rows[0]) == [
        "change",
        "images/s",
        "spread",
        "last kept, same turns",
        "speed-up",
        "verdict",
    ]
    assert re.split(r"\s{2,}", rows[2]) == ["baseline", "1,000", "4%", "-", "-", "baseline"]
    assert re.split(r"\s{2,}", rows[3]) == ["the change", "1,000", "0%", "625", "1.60x", "kept (reference moved)"]


@pytest.mark.slow
def test_each_speed_up_in_the_executed_table_is_the_ratio_of_its_own_row(executed_notebook):
    table = stdout_of(executed_notebook("09"), "c47").splitlines()
    assert table[0].split() == ["change", "images/s", "spread", "last", "kept,", "same", "turns", "speed-up", "verdict"]
    rows = [re.split(r"\s{2,}", line) for line in table[3:] if not line.startswith("not kept here")]
    assert len(rows) >= 2  # mixed precision and channels_last; torch.compile too outside quick mode
    for change, rate, _, reference, speedup, _ in rows:
        rate, reference = float(rate.replace(",", "")), float(reference.replace(",", ""))
        assert float(speedup.rstrip("x")) == pytest.approx(rate / reference, rel=0.01, abs=0.01), change
