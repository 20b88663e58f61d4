"""Lesson 13 checkers: reference solutions pass, wrong answers and the cells as handed out do not, and every 13_
checker is covered."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from exercises.checks import CHECKERS
from lessons import lesson_13 as elastic_train

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "13_surviving_a_crash.ipynb"
COVERED = {"13_resume", "13_steps_redone"}


def test_every_lesson_13_checker_is_covered() -> None:
    assert {k for k in CHECKERS if k.startswith("13_")} == COVERED


def _cells(marker: str) -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"])]


def _resume_from_notebook(index: int) -> Callable:
    """The lesson's ``resume``: the exercise cell as handed out (0) or the solution (1)."""
    namespace: dict = {}
    exec(_cells("def resume(")[index].split("checks.check_resume")[0], namespace)
    return namespace["resume"]


def _reference(state, model, optimizer, schedule):
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    return state["step"], state["epoch"], state["position"]


def _leaving_out(*keys: str) -> Callable:
    def resume(state, model, optimizer, schedule):
        for key, target in (("model", model), ("optimizer", optimizer), ("schedule", schedule)):
            if key not in keys:
                target.load_state_dict(state[key])
        return state["step"], state["epoch"], state["position"]

    return resume


def test_resume_reference_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert CHECKERS["13_resume"](_reference)
    assert CHECKERS["13_resume"](_resume_from_notebook(1))  # the lesson's solution cell
    assert capsys.readouterr().out.count("[pass]") == 2


def test_the_helper_resume_does_what_the_exercise_asks() -> None:
    """lessons.lesson_13.resume, which also restores a rank's random state, passes once given one."""
    import torch

    def resume(state, model, optimizer, schedule):
        cpu = torch.device("cpu")
        rng = [elastic_train.random_state(cpu)]
        return elastic_train.resume({**state, "rng": rng}, model, optimizer, schedule, 0, cpu)

    assert CHECKERS["13_resume"](resume)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (_resume_from_notebook(0), "return (step, epoch, position)"),  # the cell as handed out
        (_leaving_out("model"), "the model holds other weights"),
        (_leaving_out("optimizer"), "the optimizer has no momentum buffers"),
        (_leaving_out("schedule"), "the schedule counts 0 steps instead of 7"),
        (lambda s, m, o, sc: (_reference(s, m, o, sc), None)[1], "return (step, epoch, position)"),
        (lambda s, m, o, sc: (_reference(s, m, o, sc), (s["epoch"], s["step"], s["position"]))[1], "the order is"),
        (lambda s, m, o, sc: (_reference(s, m, o, sc), (0, 0, 0))[1], "the checkpoint holds"),
        (lambda s, m, o, sc: (_reference(s, m, o, sc), s["step"])[1], "return three numbers"),
        (lambda s, m, o, sc: s["missing"], "resume raised KeyError"),
    ],
)
def test_resume_mistakes(answer, hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["13_resume"](answer)
    out = capsys.readouterr().out
    assert "[not yet]" in out and hint in out, out


def test_resume_none_is_waiting(capsys: pytest.CaptureFixture[str]) -> None:
    assert not CHECKERS["13_resume"](None)
    assert "[waiting]" in capsys.readouterr().out


def test_steps_redone(capsys: pytest.CaptureFixture[str]) -> None:
    check = CHECKERS["13_steps_redone"]
    assert check(4, 8, 12, 8)
    assert check(2, 5, 17, 5)  # a checkpoint at 15, the save of 20 interrupted: back to 15
    assert check(0, 8, 16, 8)  # the checkpoint of step 16 was written before the crash
    capsys.readouterr()
    assert not check(12, 8, 12, 8)  # from step 0
    assert "not step 0" in capsys.readouterr().out
    assert not check(4, 8, 13, 8)  # 5 steps after the checkpoint of step 8, not 4
    assert "which step did the newest checkpoint" in capsys.readouterr().out
    assert not check(3, 8, 13, 8)  # the steps still to the next checkpoint, not the ones since the last
    assert "up to the crash, not after it" in capsys.readouterr().out
    assert not check(4, 0, 12, 8)
    assert "never finished" in capsys.readouterr().out
    assert not check(4, 16, 12, 8)
    assert "does not go back to step 0" in capsys.readouterr().out
    assert not check(4, 4, 12, 8)
    assert "the checkpoint before step 16" in capsys.readouterr().out
    assert not check(4.0, 8, 12, 8)
    assert "whole number" in capsys.readouterr().out
    assert not check(None, 8, 12, 8) and not check(4, None, 12, 8)
    assert capsys.readouterr().out.count("[waiting]") == 2


def test_steps_redone_cells() -> None:
    """The exercise cell as handed out waits; the solution cell passes."""
    handed_out, solution = _cells("check_steps_redone(")
    assert "None" in handed_out
    namespace: dict = {"checks": __import__("exercises.checks", fromlist=["checks"])}
    exec(solution.replace("checks.check_steps_redone", "passed = checks.check_steps_redone"), namespace)
    assert namespace["passed"]
