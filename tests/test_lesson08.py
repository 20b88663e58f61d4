"""Lesson 08's measuring code, run from its cells against scripted clocks, and its executed timings read back."""

from __future__ import annotations

import contextlib
import io
import re
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers import readings, text, timing

ROOT = Path(__file__).resolve().parents[1]


def cell_source(cell_id: str) -> str:
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / "08_timing_and_profiling.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == cell_id)


class ScriptedClock:
    """A clock that moves only when a fake step runs: each step adds its own seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Recipe:
    batch_size: int = 10
    changed: bool = False


def lesson_namespace(repeats: int, clock: ScriptedClock) -> dict:
    """The names lesson 08's section-3 cells use, with a DeviceTimer that reads ``clock`` and never synchronises."""

    def device_timer(device):
        return timing.DeviceTimer(device, sync=lambda: None, clock=clock)

    namespace = {
        "REPEATS": repeats,
        "MIN_REPEAT_TIME": 0.0,
        "device": torch.device("cpu"),
        "timing": SimpleNamespace(DeviceTimer=device_timer),
        "readings": readings,
        "statistics": statistics,
        "dataclass": dataclass,
        "replace": replace,
        "text": text,
    }
    exec(cell_source("c31"), namespace)  # Result, measure, in_turns
    exec(cell_source("c33"), namespace)  # history, kept_step, try_change
    return namespace


def fake_step(name: str, seconds: float, log: list[str], clock: ScriptedClock):
    def run() -> None:
        log.append(name)
        clock.now += seconds

    return run


def test_in_turns_runs_an_untimed_step_before_each_timed_repeat_and_alternates_the_order():
    clock, log = ScriptedClock(), []
    ns = lesson_namespace(repeats=4, clock=clock)
    Result, in_turns = ns["Result"], ns["in_turns"]
    a = Result(
        "A",
        Recipe(),
        readings.Timing(1e-3, [1e-3], calls=2),
        readings.KEPT,
        1.0,
        0.0,
        fake_step("A", 0.010, log, clock),
    )
    b = Result("B", Recipe(), readings.Timing(1e-3, [1e-3], calls=3), "", 0.0, 0.0, fake_step("B", 0.005, log, clock))
    before, after = in_turns(a, b)
    rounds = ["A" * 3 + "B" * 4, "B" * 4 + "A" * 3, "A" * 3 + "B" * 4, "B" * 4 + "A" * 3]  # untimed + calls each
    assert "".join(log) == "".join(rounds)
    # Only the timed calls count: 10 ms per step of 10 images, 5 ms per step of 10 images.
    assert before.times == pytest.approx([1e-3] * 4) and after.times == pytest.approx([0.5e-3] * 4)
    assert before.calls == 2 and after.calls == 3


def run_try_change(reference_seconds: float, *new_seconds: float) -> tuple[dict, str]:
    """try_change, once per entry of ``new_seconds`` (none of them kept), against a baseline first measured at 1 ms per
    image (10 ms a step of 10, spread 4%) that takes ``reference_seconds`` a step in the turns."""
    clock, log = ScriptedClock(), []
    ns = lesson_namespace(repeats=5, clock=clock)
    earlier = readings.Timing(1e-3, [0.98e-3, 1e-3, 1.02e-3], calls=1)
    ns["history"].append(
        ns["Result"](
            "baseline", Recipe(), earlier, readings.KEPT, 1.0, 0.0, fake_step("ref", reference_seconds, log, clock)
        )
    )
    printed = io.StringIO()
    for i, seconds in enumerate(new_seconds or (0.010,)):
        new_run = fake_step(f"new{i}", seconds, log, clock)
        ns["measure"] = lambda recipe, repeats=5, run=new_run: (readings.Timing(1e-3, [1e-3], calls=1), 0.0, run)
        with contextlib.redirect_stdout(printed):
            ns["try_change"](f"the change {i}" if i else "the change", changed=True)
    return ns, printed.getvalue()


def test_try_change_says_when_the_reference_moved_beyond_its_spread():
    # In the turns the reference takes 16 ms a step, not the 10 ms it took before: the conditions changed.
    ns, printed = run_try_change(0.016, 0.010)
    result = ns["history"][-1]
    assert result.verdict == readings.KEPT and result.speedup == pytest.approx(1.6)
    assert result.drift.kind == "drifted" and result.reference.median == pytest.approx(1.6e-3)
    lines = printed.splitlines()
    assert lines[0].startswith("the change: 1,000 images/s") and lines[0].endswith("1.60x, kept")
    assert lines[1].startswith("  but the reference moved: baseline took 1.60x the time it took when timed before")
    assert "1,000 images/s then" in lines[1] and lines[1].endswith("the change would read 1.00x.")


def test_try_change_is_quiet_about_a_reference_that_held_steady():
    ns, printed = run_try_change(0.0102, 0.008)
    assert ns["history"][-1].drift.kind == "steady"
    assert len(printed.splitlines()) == 1 and "reference moved" not in printed


def test_a_reference_is_compared_with_the_last_time_it_was_timed_not_with_its_first_timing():
    # The reference moved once (10 ms -> 16 ms a step) and then held: only the first change after the move says so.
    ns, printed = run_try_change(0.016, 0.020, 0.020)
    assert [r.drift.kind for r in ns["history"][1:]] == ["drifted", "steady"]
    assert printed.count("but the reference moved") == 1


# The lesson as executed in this test run.


def stdout_of(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.slow
def test_the_executed_timing_cells_print_figures_not_objects_and_the_diagnosis_per_step(executed_notebook):
    nb = executed_notebook("08")
    benchmark = stdout_of(nb, "c10")
    assert "object at 0x" not in benchmark and "threads" not in benchmark
    assert re.search(r"^torch\.utils\.benchmark: median .+, interquartile range .+, \d+ measurement", benchmark, re.M)
    assert re.search(r"^The two careful timings (agree|differ): ", stdout_of(nb, "c11"), re.M)
    assert re.search(r"^3 profiled steps took .+ a step \(the profiler's own overhead", stdout_of(nb, "c37b"), re.M)
