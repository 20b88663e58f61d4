"""Run ``python -m lessons.lesson_11``'s ``main`` in-process with the data, the loader's share and the ladder faked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from lessons import lesson_11 as speedrun


def run_faked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: Sequence[str], share: tuple[float, float] = (1.0, 3.0)
) -> tuple[dict, dict]:
    """What the faked ladder was given (target, dataset, rung names) and the JSON record ``main`` wrote; ``share`` is
    the measured (feed, step) seconds of the baseline's step."""
    seen: dict = {}

    def fake_ladder(data, device, target, seeds, quick, rungs, run=None, progress=None):
        seen.update(target=target, dataset=data.name, rungs=[r.name for r in rungs])
        attempt = speedrun.Attempt(True, 1.0, 0.0, 0.0, 1, target, [(1.0, target)])
        return [speedrun.RungResult(rungs[0], speedrun.SpeedrunRecipe(), [attempt] * len(seeds), "baseline")]

    monkeypatch.setattr(speedrun, "load_splits", lambda name, quick: speedrun.Data(None, None, name))
    monkeypatch.setattr(speedrun, "measure_loader_share", lambda data, device, quick: speedrun.LoaderShare(*share))
    monkeypatch.setattr(speedrun, "climb", fake_ladder)
    out = tmp_path / "record.json"
    assert speedrun.main([*args, "--device", "cpu", "--no-progress", "--json", str(out)]) == 0
    return seen, json.loads(out.read_text())
