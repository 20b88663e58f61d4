"""Lesson 13's exercise checkers."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from exercises.core import exercise, learner_code

RESUME_STEP, RESUME_EPOCH, RESUME_POSITION = 7, 1, 3
"""Where the checker's saved run stopped: steps done, the epoch under way, batches of it used."""


def _training(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """A small model with SGD and momentum and a cosine schedule, as lessons/lesson_13.py builds them."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=20)


def _steps(model, optimizer, schedule, count: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(count):
        X, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@exercise("13_resume", "resume from a checkpoint", function=True)
def check_resume(resume: Callable | None) -> str | None:
    """``resume(state, model, optimizer, schedule)`` puts a checkpoint saved with save_checkpoint back into a fresh
    model, optimizer and schedule and returns ``(step, epoch, position)``; the run then goes on exactly as the saved
    one would have."""
    from helpers.checkpoints import load_checkpoint, save_checkpoint

    model, optimizer, schedule = _training(seed=0)
    _steps(model, optimizer, schedule, RESUME_STEP, seed=1)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}
    state.update(step=RESUME_STEP, epoch=RESUME_EPOCH, position=RESUME_POSITION)
    with tempfile.TemporaryDirectory() as folder:
        path = save_checkpoint(state, Path(folder) / "resume.pt")
        loaded = load_checkpoint(path, map_location="cpu")
    fresh, fresh_optimizer, fresh_schedule = _training(seed=1)  # other weights, no momentum, the schedule's start
    with learner_code("resume raised "):
        got = resume(loaded, fresh, fresh_optimizer, fresh_schedule)

    expected = (RESUME_STEP, RESUME_EPOCH, RESUME_POSITION)
    if got is None:
        return "return (step, epoch, position), read from the checkpoint"
    if not isinstance(got, tuple | list) or len(got) != 3:
        return f"return three numbers, (step, epoch, position); got {got!r}"
    if tuple(got) != expected:
        if sorted(got) == sorted(expected):
            return f"returned {tuple(got)}: the order is (step, epoch, position), here {expected}"
        return f"returned {tuple(got)}; the checkpoint holds (step, epoch, position) = {expected}"
    if not _same(fresh.state_dict(), model.state_dict()):
        return "the model holds other weights than the saved ones: model.load_state_dict(state['model'])"
    if not fresh_optimizer.state_dict()["state"]:
        return "the optimizer has no momentum buffers: optimizer.load_state_dict(state['optimizer'])"
    if fresh_schedule.state_dict() != schedule.state_dict():
        return (
            f"the schedule counts {fresh_schedule.last_epoch} steps instead of {schedule.last_epoch}, so its next "
            "learning rates are wrong: schedule.load_state_dict(state['schedule'])"
        )
    _steps(model, optimizer, schedule, 3, seed=2)
    with learner_code("the three steps after your resume raised "):
        _steps(fresh, fresh_optimizer, fresh_schedule, 3, seed=2)
    if not _same(fresh.state_dict(), model.state_dict()):
        return "three more steps after the resume end with other weights than the run that never stopped"
    return None


@exercise("13_steps_redone", "steps done twice after a crash at step {crash_at}, checkpoints every {every}", answers=2)
def check_steps_redone(redone: int | None, redone_in_save: int | None, crash_at: int, every: int) -> str | None:
    """``redone``: steps computed again when a worker dies after ``crash_at`` steps, with a checkpoint every
    ``every`` steps; ``redone_in_save``: the same when it dies instead while the checkpoint of the step after
    ``crash_at`` that is a multiple of ``every`` is being written (an atomic save, so the previous file survives)."""
    for name, value in (("redone", redone), ("redone_in_save", redone_in_save)):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{name} should be a whole number, got {type(value).__name__}"
    newest = crash_at // every * every
    if redone != crash_at - newest:
        if redone == crash_at:
            return f"redone = {redone}: the restart loads the newest checkpoint, not step 0"
        if redone == every - (crash_at - newest):
            return f"redone = {redone}: count the steps from the newest checkpoint up to the crash, not after it"
        return f"redone = {redone}: which step did the newest checkpoint before step {crash_at} hold?"
    saving = newest + every  # the save under way when the worker dies
    if redone_in_save != every:  # from the checkpoint before the interrupted one
        if redone_in_save == 0:
            return (
                f"redone_in_save = 0: the save of step {saving} never finished, so the file still holds the "
                "checkpoint before it"
            )
        if redone_in_save == saving:
            return (
                f"redone_in_save = {saving}: an atomic save leaves the previous checkpoint intact, so the restart "
                "does not go back to step 0"
            )
        return f"redone_in_save = {redone_in_save}: the restart goes back to the checkpoint before step {saving}"
    return None
