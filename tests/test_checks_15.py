"""Lesson 15 checkers: reference answers pass, typical mistakes and wrong answers that look right do not, the cells
as handed out do not, and every 15_ checker is covered. Each check starts processes, so every test here is slow."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from exercises.checks import CHECKERS
from helpers.checkpoints import save_checkpoint

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "15_when_a_job_hangs.ipynb"
COVERED = {"15_find_culprit", "15_stop_handler"}


def test_every_lesson_15_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("15_")} == COVERED


def _from_notebook_source(marker: str, index: int) -> str:
    """The source of the cell holding ``marker`` up to its print or check: as handed out (0) or the solution (1)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return cells[index].split("\nprint(")[0].split("\nchecks.")[0]


def _from_notebook(marker: str, index: int) -> Callable:
    """The lesson's function defined by the cell holding ``marker``: as handed out (0) or the solution (1)."""
    source = _from_notebook_source(marker, index)
    namespace: dict = {"signal": signal, "sys": sys, "save_checkpoint": save_checkpoint, "lesson_13": _Lesson13}
    exec(source, namespace)
    return namespace[marker.split("(")[0].removeprefix("def ")]


class _Lesson13:
    STOPPED = 75


# Exercise 1: (rank, collective) from the dumps.


def culprit_by_stacks(dumps: dict[int, str]) -> tuple[int, str]:
    culprit, name = None, None
    for rank, said in dumps.items():
        in_c10d = re.findall(r'File "[^"]*distributed_c10d\.py", line \d+ in (\w+)', said)
        if in_c10d:
            name = in_c10d[0]
        else:
            culprit = rank
    return culprit, name


def culprit_by_absence(dumps: dict[int, str]) -> tuple[int, str]:
    """Written differently: the rank whose stack lacks the shared frame, the frame read from the others."""
    frames = {rank: [line.split(" in ")[-1] for line in said.splitlines() if "distributed_c10d.py" in line]
              for rank, said in dumps.items()}  # fmt: skip
    waiting = [rank for rank, found in frames.items() if found]
    missing = next(rank for rank in dumps if rank not in waiting)
    return missing, f"dist.{frames[waiting[0]][0].strip()}"


def always_rank_1(dumps: dict[int, str]) -> tuple[int, str]:
    return 1, culprit_by_stacks(dumps)[1]


def first_rank_named(dumps: dict[int, str]) -> tuple[int, str]:
    text = "\n".join(dumps.values())
    return int(re.search(r"rank (\d+)", text).group(1)), culprit_by_stacks(dumps)[1]


def outermost_frame(dumps: dict[int, str]) -> tuple[int, str]:
    """The culprit right, but the last c10d frame (a wrapper's or the outermost) taken for the collective."""
    rank = culprit_by_stacks(dumps)[0]
    names = [re.findall(r"line \d+ in (\w+)", said) for said in dumps.values()]
    return rank, [n for n in names if "all_reduce" in n or "barrier" in n or "broadcast" in n or "all_gather" in n][0][
        1
    ]


def waiting_rank(dumps: dict[int, str]) -> tuple[int, str]:
    """The rank that waits, not the one that never came."""
    rank, name = culprit_by_stacks(dumps)
    return 1 - rank, name


@pytest.mark.slow
@pytest.mark.parametrize("answer", [culprit_by_stacks, culprit_by_absence])
def test_find_culprit_right_answers_pass(answer: Callable, capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["15_find_culprit"](answer), capsys.readouterr().out


@pytest.mark.slow
def test_find_culprit_solution_cell_passes() -> None:
    assert CHECKERS["15_find_culprit"](_from_notebook("def find_culprit(", 1))


@pytest.mark.slow
@pytest.mark.parametrize("answer", [always_rank_1, first_rank_named, outermost_frame, waiting_rank])
def test_find_culprit_wrong_answers_fail(answer: Callable, capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["15_find_culprit"](answer)
    assert "[not yet]" in capsys.readouterr().out


@pytest.mark.slow
def test_find_culprit_cell_as_handed_out_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["15_find_culprit"](_from_notebook("def find_culprit(", 0))
    assert "(rank, collective)" in capsys.readouterr().out


def test_find_culprit_waits_for_an_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["15_find_culprit"](None)
    assert "[waiting]" in capsys.readouterr().out


# Exercise 2: the stop handler.


def _state(model, optimizer, step: int) -> dict:
    return {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}


def handler_with_flag(model, optimizer, path, steps, take_step):
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    for step in range(1, steps + 1):
        take_step(model, optimizer, step)
        if stop:
            save_checkpoint(_state(model, optimizer, step), path)
            sys.exit(75)


class _Stop(Exception):
    pass


def handler_raising_after_the_step(model, optimizer, path, steps, take_step):
    """Written differently: a class holds the flag, the loop is a while loop, the exit is os._exit after the save."""

    class Flag:
        up = False

    def note(signum, frame):
        Flag.up = True

    signal.signal(signal.SIGTERM, note)
    step = 0
    while step < steps:
        step += 1
        take_step(model, optimizer, step)
        if Flag.up:
            save_checkpoint(_state(model, optimizer, step), os.fspath(path))
            os._exit(75)


def exits_at_once(model, optimizer, path, steps, take_step):
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(75))
    for step in range(1, steps + 1):
        take_step(model, optimizer, step)


def plain_torch_save(model, optimizer, path, steps, take_step):
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    for step in range(1, steps + 1):
        take_step(model, optimizer, step)
        if stop:
            torch.save(_state(model, optimizer, step), path)
            sys.exit(75)


def exits_zero(model, optimizer, path, steps, take_step):
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    for step in range(1, steps + 1):
        take_step(model, optimizer, step)
        if stop:
            save_checkpoint(_state(model, optimizer, step), path)
            sys.exit(0)


def saves_in_the_handler(model, optimizer, path, steps, take_step):
    """Saves from inside the handler, mid-step: the step number it saves is the last one that finished before."""
    done = [0]

    def handler(signum, frame):
        save_checkpoint(_state(model, optimizer, done[0] + 1), path)
        sys.exit(75)

    signal.signal(signal.SIGTERM, handler)
    for step in range(1, steps + 1):
        take_step(model, optimizer, step)
        done[0] = step


def ignores_the_signal(model, optimizer, path, steps, take_step):
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    for step in range(1, steps + 1):
        take_step(model, optimizer, step)


def waits_before_training(model, optimizer, path, steps, take_step):
    time.sleep(30)  # past the check's START_WAIT below: it never sees five steps
    handler_with_flag(model, optimizer, path, steps, take_step)


def no_handler(model, optimizer, path, steps, take_step):
    for step in range(1, steps + 1):
        take_step(model, optimizer, step)


@pytest.mark.slow
@pytest.mark.parametrize("answer", [handler_with_flag, handler_raising_after_the_step])
def test_stop_handler_right_answers_pass(answer: Callable, capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["15_stop_handler"](answer), capsys.readouterr().out


def _module_from_notebook(marker: str, index: int, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Callable:
    """The lesson's function as ``_from_notebook`` reads it, written into a module of its own, with the names the
    lesson's cells give it imported there: the check runs it in a spawned process, which imports it by name."""
    source = _from_notebook_source(marker, index)
    header = "import signal\nimport sys\n\nfrom helpers.checkpoints import save_checkpoint\n"
    header += "from lessons import lesson_13\n\n"
    name = f"lesson15_answer_{index}"  # one module a cell: the solution and the cell as handed out never mix
    (folder / f"{name}.py").write_text(header + source + "\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module(name)
    return getattr(module, marker.split("(")[0].removeprefix("def "))


@pytest.mark.slow
def test_stop_handler_solution_cell_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert CHECKERS["15_stop_handler"](_module_from_notebook("def train(", 1, tmp_path, monkeypatch))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (exits_at_once, "no checkpoint"),
        (plain_torch_save, "save_checkpoint"),
        (exits_zero, "exited with 0"),
        (no_handler, "install a handler"),
        (saves_in_the_handler, ""),
    ],
)
def test_stop_handler_wrong_answers_fail(answer: Callable, hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["15_stop_handler"](answer)
    assert hint in capsys.readouterr().out


@pytest.mark.slow
def test_stop_handler_cell_as_handed_out_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not CHECKERS["15_stop_handler"](_module_from_notebook("def train(", 0, tmp_path, monkeypatch))
    assert "PicklingError" not in capsys.readouterr().out  # judged on what it did, not refused at the start


@pytest.mark.slow
def test_stop_handler_that_never_exits_is_told_how_far_it_got(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from exercises import lesson_15 as exercise

    monkeypatch.setattr(exercise, "EXIT_WAIT", 3)
    assert not CHECKERS["15_stop_handler"](ignores_the_signal)
    out = capsys.readouterr().out
    said = r"still running 3 s after SIGTERM \(SIGTERM came after step \d+; step \d+ had finished; no checkpoint\)"
    assert re.search(said, out), out


@pytest.mark.slow
def test_stop_handler_whose_loop_does_not_start_is_told_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from exercises import lesson_15 as exercise

    monkeypatch.setattr(exercise, "START_WAIT", 3)
    assert not CHECKERS["15_stop_handler"](waits_before_training)
    assert "the loop finished 0 steps in 3 s, where 5 take under a second" in capsys.readouterr().out
