"""Lesson 11's sources: its progress bar comes from the course helper that knows when tqdm's widget can work, and the
step and the ladder it writes out train and decide as ``python -m lessons.lesson_11``'s copies do."""

from __future__ import annotations

import dataclasses
import random
import types
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_ladder_bar_is_made_by_training_progress_bar_not_by_tqdm_auto():
    nb = nbformat.read(ROOT / "notebooks" / "11_speedrun.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "tqdm" not in code.replace("training.progress_bar", "")  # tqdm.auto warns in a notebook without ipywidgets
    ladder = next(c.source for c in nb.cells if c.get("id") == "c08")
    assert "bar = training.progress_bar(" in ladder


def cell_source(cell_id: str) -> str:
    nb = nbformat.read(ROOT / "notebooks" / "11_speedrun.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == cell_id)


def lesson_cells(**names) -> dict:
    """The lesson's ``train_step`` and ``climb``, defined from its cells with the names the lesson gives them."""
    import torch
    import torch.nn.functional as F

    from helpers import readings
    from lessons import lesson_11 as speedrun

    namespace = {"torch": torch, "F": F, "replace": dataclasses.replace, "speedrun": speedrun, "readings": readings}
    namespace.update(names)
    exec(cell_source("step"), namespace)
    exec(cell_source("climb"), namespace)
    return namespace


STEP_CASES = [
    ("float32", {}, None),
    ("flips and label smoothing", {"flips": True, "label_smoothing": 0.1}, None),
    ("bfloat16 autocast, channels_last", {"mixed_precision": True}, "bfloat16"),
    ("float16 autocast with a GradScaler", {"mixed_precision": True}, "float16"),
]


@pytest.mark.parametrize(("case", "change", "dtype_name"), STEP_CASES, ids=[c[0] for c in STEP_CASES])
def test_the_lessons_train_step_gives_the_command_lines_weights_bit_for_bit(case, change, dtype_name):
    """``python -m lessons.lesson_11`` runs the helper's copy of the lesson's step: both must train alike."""
    import torch

    from helpers import models
    from lessons import lesson_11 as speedrun

    dtype = getattr(torch, dtype_name) if dtype_name else None
    recipe = speedrun.Recipe(**change)
    weights, start = [], None
    for step in (lesson_cells()["train_step"], speedrun.train_step):
        torch.manual_seed(0)
        model = models.ConvBNNet((4, 8, 8))
        start = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        scaler = torch.amp.GradScaler("cpu") if dtype is torch.float16 else None
        X, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
        for _ in range(3):
            step(recipe, model, X, y, opt, scaler, dtype)
        weights.append([p.detach().clone() for p in model.parameters()])
    assert not all(torch.equal(a, b) for a, b in zip(weights[0], start, strict=True)), "the steps must move weights"
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True)), case


def scripted_attempt(recipe, seed: int, target: float, steps: int = 900):
    """A time to target drawn from the recipe and the seed alone, so two ladders that build the same recipes in the
    same order see the same measurements."""
    from lessons import lesson_11 as speedrun

    seconds = random.Random(f"{dataclasses.astuple(recipe)}{seed}").uniform(1.0, 10.0)
    return speedrun.Attempt(True, seconds, 0.0, 0.0, steps, target, [(seconds, target)])


def test_the_lessons_climb_builds_keeps_and_skips_as_the_command_lines_run_ladder(monkeypatch):
    import torch

    from lessons import lesson_11 as speedrun

    cpu = torch.device("cpu")
    data = speedrun.Data(range(60_000), None, "FashionMNIST")
    namespace = lesson_cells(data=data, device=cpu, target=0.88, settings=types.SimpleNamespace(quick=False))
    calls = []

    def fake_run(recipe, data_, device, target, seed, quick, step=None):
        calls.append(step)
        return scripted_attempt(recipe, seed, target)

    rungs = speedrun.ladder(cpu, quick=False)
    monkeypatch.setattr(speedrun, "run_recipe", fake_run)
    lesson_ticks, cli_ticks = [], []
    ours = namespace["climb"](rungs, [0, 1], progress=lambda name, runs: lesson_ticks.append((name, runs)))
    assert calls and all(step is namespace["train_step"] for step in calls), "the lesson's rungs train its own step"
    theirs = speedrun.run_ladder(
        data, cpu, 0.88, [0, 1], False, rungs, run=fake_run, progress=lambda name, runs: cli_ticks.append((name, runs))
    )

    def summary(results):
        return [(r.rung.name, r.recipe, r.verdict, r.compared_with, r.skipped, r.times) for r in results]

    assert summary(ours) == summary(theirs)
    assert lesson_ticks == cli_ticks
    verdicts = {r.verdict for r in ours}
    assert {"baseline", speedrun.SKIPPED} <= verdicts and len(verdicts) >= 3, verdicts  # more than one path taken
