"""Lesson 08's training-step ladder, helpers.ladder (printed by the lesson, used again by lesson 09), run against
scripted clocks; no lesson cell holds a copy of installed code; lesson 08's executed timings read back."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

from helpers import ladder, readings, timing

ROOT = Path(__file__).resolve().parents[1]
LESSONS = {"08": "08_timing_and_profiling.ipynb", "09": "09_precision_layout_compile.ipynb"}


class ScriptedClock:
    """A clock that moves only when a fake step runs: each step adds its own seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scripted_clock(monkeypatch) -> ScriptedClock:
    """A clock that the ladder's timers read, never synchronising."""
    scripted = ScriptedClock()
    monkeypatch.setattr(
        ladder, "DeviceTimer", lambda device: timing.DeviceTimer(device, sync=lambda: None, clock=scripted)
    )
    return scripted


@pytest.fixture
def clock(monkeypatch) -> ScriptedClock:
    return scripted_clock(monkeypatch)


def fake_step(name: str, seconds: float, log: list[str], clock: ScriptedClock):
    def run() -> None:
        log.append(name)
        clock.now += seconds

    return run


def rung(change: str, calls: int, run, verdict: str = readings.KEPT) -> ladder.Result:
    return ladder.Result(change, ladder.Recipe(batch_size=10), readings.Timing(1e-3, [1e-3], calls=calls), verdict,
                         1.0, 0.0, run)  # fmt: skip


def test_in_turns_runs_an_untimed_step_before_each_timed_repeat_and_alternates_the_order(clock):
    log = []
    a = rung("A", 2, fake_step("A", 0.010, log, clock))
    b = rung("B", 3, fake_step("B", 0.005, log, clock), verdict="")
    before, after = ladder.in_turns([a, b], torch.device("cpu"), repeats=4)
    rounds = ["A" * 3 + "B" * 4, "B" * 4 + "A" * 3, "A" * 3 + "B" * 4, "B" * 4 + "A" * 3]  # untimed + calls each
    assert "".join(log) == "".join(rounds)
    # Only the timed calls count: 10 ms per step of 10 images, 5 ms per step of 10 images.
    assert before.times == pytest.approx([1e-3] * 4) and after.times == pytest.approx([0.5e-3] * 4)
    assert before.calls == 2 and after.calls == 3


def test_measure_times_the_first_step_alone_then_repeats_of_steps_per_image(clock, monkeypatch):
    monkeypatch.setattr(ladder, "time_on_device", lambda run, device, repeats, warmup, min_repeat_time: (
        run(), readings.Timing(0.02, [0.02] * repeats, calls=1))[1])  # fmt: skip
    taken = []
    source = iter([(1, 2), (3, 4), (5, 6)])

    def step(X, y):
        taken.append((X, y))
        clock.now += 0.5

    per_image, first, run = ladder.measure(step, source, 10, torch.device("cpu"), repeats=3, min_repeat_time=0.0)
    assert first == pytest.approx(0.5) and taken == [(1, 2), (3, 4)]
    assert per_image.median == pytest.approx(0.002) and per_image.times == pytest.approx([0.002] * 3)
    run()
    assert taken[-1] == (5, 6)


def run_try_change(clock, monkeypatch, reference_seconds: float, *new_seconds: float) -> tuple[ladder.Ladder, str]:
    """try_change, once per entry of ``new_seconds``, against a baseline first measured at 1 ms per image (10 ms a step
    of 10, spread 4%) that takes ``reference_seconds`` a step in the turns."""
    log = []
    rungs = ladder.Ladder(torch.device("cpu"), build=lambda recipe: None, batches=lambda recipe: None, repeats=5)
    earlier = readings.Timing(1e-3, [0.98e-3, 1e-3, 1.02e-3], calls=1)
    base = ladder.Result("baseline", ladder.Recipe(batch_size=10), earlier, readings.KEPT, 1.0, 0.0,
                         fake_step("ref", reference_seconds, log, clock))  # fmt: skip
    rungs.history.append(base)
    printed = io.StringIO()
    for i, seconds in enumerate(new_seconds):
        new_run = fake_step(f"new{i}", seconds, log, clock)
        monkeypatch.setattr(
            ladder, "measure", lambda *args, run=new_run: (readings.Timing(1e-3, [1e-3], calls=1), 0.0, run)
        )
        with contextlib.redirect_stdout(printed):
            rungs.try_change(f"the change {i}" if i else "the change", fused=True)
    return rungs, printed.getvalue()


def test_try_change_keeps_a_change_beyond_the_noise_and_says_when_the_reference_moved(clock, monkeypatch):
    # In the turns the reference takes 16 ms a step, not the 10 ms it took before: the conditions changed.
    rungs, printed = run_try_change(clock, monkeypatch, 0.016, 0.010)
    result = rungs.history[-1]
    assert result.verdict == readings.KEPT and result.speedup == pytest.approx(1.6) and result.recipe.fused
    assert result.drift.kind == "drifted" and result.reference.median == pytest.approx(1.6e-3)
    assert rungs.kept_step() is result
    lines = printed.splitlines()
    assert lines[0].startswith("the change: 1,000 images/s") and lines[0].endswith("1.60x, kept")
    assert lines[1].startswith("  but the reference moved: baseline took 1.60x the time it took when timed before")
    assert "1,000 images/s then" in lines[1] and lines[1].endswith("the change would read 1.00x.")


def test_try_change_is_quiet_about_a_reference_that_held_steady_and_drops_a_slower_change(clock, monkeypatch):
    rungs, printed = run_try_change(clock, monkeypatch, 0.0102, 0.020)
    assert rungs.history[-1].drift.kind == "steady" and rungs.history[-1].verdict == readings.SLOWER
    assert rungs.kept_step() is rungs.history[0]
    assert len(printed.splitlines()) == 1 and "reference moved" not in printed


def test_a_reference_is_compared_with_the_last_time_it_was_timed_not_with_its_first_timing(clock, monkeypatch):
    # The reference moved once (10 ms -> 16 ms a step) and then held: only the first change after the move says so.
    rungs, printed = run_try_change(clock, monkeypatch, 0.016, 0.020, 0.020)
    assert [r.drift.kind for r in rungs.history[1:]] == ["drifted", "steady"]
    assert printed.count("but the reference moved") == 1


# One copy of every piece of code: what a lesson shows is in its cells or printed from the installed code, not both.


def code_cells(lesson: str) -> list[str]:
    import nbformat
    from IPython.core.inputtransformer2 import TransformerManager

    nb = nbformat.read(ROOT / "notebooks" / LESSONS[lesson], as_version=4)
    return [TransformerManager().transform_cell(c.source) for c in nb.cells if c.cell_type == "code"]


def body(node: ast.FunctionDef | ast.ClassDef) -> str:
    """The definition's statements without its docstring, as an AST dump: names and comments do not matter."""
    statements = node.body
    if statements and isinstance(statements[0], ast.Expr) and isinstance(statements[0].value, ast.Constant):
        statements = statements[1:]
    return "\n".join(ast.dump(s) for s in statements)


def definitions(source: str) -> dict[str, str]:
    """Functions and classes of three statements or more (a two-line loop may well be written twice), by body."""
    return {
        body(node): node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and sum(isinstance(n, ast.stmt) for n in ast.walk(node)) > 3
    }


def installed() -> dict[str, str]:
    """Every function and class of the installed packages (helpers, lessons, exercises), by body."""
    found = {}
    for package in ("helpers", "lessons", "exercises"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for key, name in definitions(path.read_text(encoding="utf-8")).items():
                found[key] = f"{path.relative_to(ROOT)}:{name}"
    return found


def copies(cells: list[str], code: dict[str, str]) -> list[str]:
    return [f"{name} = {code[key]}" for cell in cells for key, name in definitions(cell).items() if key in code]


@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_no_cell_defines_a_function_or_class_that_the_installed_code_holds(lesson):
    assert copies(code_cells(lesson), installed()) == []


def test_a_copy_of_an_installed_function_in_a_cell_is_found_whatever_its_name_and_docstring():
    import inspect

    copied = inspect.getsource(ladder.in_turns).replace("def in_turns(", "def timed_in_turns(")
    copied = copied.replace('"""Seconds per image', '"""Per image')
    assert copies(["import torch\n", copied], installed()) == ["timed_in_turns = helpers/ladder.py:in_turns"]


def test_lesson_08_prints_each_piece_of_the_ladder_where_it_teaches_it():
    printed = set()
    for cell in code_cells("08"):
        for node in ast.walk(ast.parse(cell)):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "inspect.getsource":
                printed.add(ast.unparse(node.args[0]))
            if isinstance(node, ast.For) and "inspect.getsource" in ast.unparse(node):  # a loop over the pieces
                printed.update(ast.unparse(e) for e in getattr(node.iter, "elts", []))
    assert {"ladder.Recipe", "ladder.measure", "ladder.Result", "ladder.in_turns", "ladder.Ladder"} <= printed


# The lesson as executed in this test run.


def stdout_of(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.slow
def test_the_executed_timing_cells_print_figures_not_objects_and_the_profiled_step(executed_notebook):
    nb = executed_notebook("08")
    benchmark = stdout_of(nb, "c10")
    assert "object at 0x" not in benchmark and "threads" not in benchmark
    assert re.search(r"^torch\.utils\.benchmark: median .+, interquartile range .+, \d+ measurement", benchmark, re.M)
    assert re.search(r"^The two careful timings (agree|differ): ", stdout_of(nb, "c11"), re.M)
    profiled = stdout_of(nb, "c37b")
    assert re.search(r"^3 profiled steps: \d.+ a step, the profiler's own overhead included$", profiled, re.M)
    assert re.search(r"^\d+x the images per step took \d+\.\d\dx the time$", profiled, re.M)
