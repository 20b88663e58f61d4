"""The README's speedrun records: each row's figures are the ones its JSON record holds."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from helpers.text import format_seconds
from lessons import lesson_11 as speedrun

ROOT = Path(__file__).resolve().parents[1]
ROWS = [
    line
    for line in (ROOT / "README.md").read_text().splitlines()
    if re.search(r"\[json\]\(records/speedrun-[\w-]+\.json\)", line)
]
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def figures(times: list[float]) -> list[str]:
    """The mean, the fastest and the slowest seed as ``format_seconds`` writes them, without units."""
    shown = [format_seconds(statistics.fmean(times)), format_seconds(min(times)), format_seconds(max(times))]
    return [NUMBER.search(text)[0] for text in shown]


def same_figures(shown: str, times: list[float]) -> bool:
    """Whether the numbers in ``shown`` are ``figures(times)``, each to the number of decimals the README gives."""
    found = NUMBER.findall(shown)
    if len(found) != 3:
        return False
    for text, exact in zip(found, figures(times), strict=True):
        decimals = len(text.split(".")[1]) if "." in text else 0
        if abs(float(text) - float(exact)) > 0.5 * 10**-decimals + 1e-9:
            return False
    return True


def times_of(rung: dict) -> list[float]:
    return [run["train_s"] if run["reached"] else float("inf") for run in rung["runs"]]


def test_the_readme_lists_every_speedrun_record():
    recorded = sorted(p.name for p in (ROOT / "records").glob("speedrun-*.json"))
    linked = sorted(re.search(r"records/(speedrun-[\w-]+\.json)", row)[1] for row in ROWS)
    assert linked == recorded


@pytest.mark.parametrize("row", ROWS, ids=lambda row: re.search(r"speedrun-[\w-]+", row)[0])
def test_a_record_row_shows_its_jsons_rung_0_best_rung_and_speed_up(row):
    record = json.loads((ROOT / re.search(r"records/speedrun-[\w-]+\.json", row)[0]).read_text())
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    base, best_cell, ratio = cells[4], cells[5], cells[6]
    rungs = record["rungs"]
    best = next((r for r in reversed(rungs) if r["verdict"] == speedrun.KEPT), rungs[0])
    assert same_figures(base, times_of(rungs[0])), (base, figures(times_of(rungs[0])))
    number, name = best["rung"].split(" ", 1)
    assert best_cell.startswith(f"rung {number}, {name}: ")
    shown = best_cell.split(": ", 1)[1]
    assert same_figures(shown, times_of(best)), (shown, figures(times_of(best)))
    speed_up = statistics.fmean(times_of(rungs[0])) / statistics.fmean(times_of(best))
    assert ratio == f"{speed_up:.1f}x"
    assert record["hardware"]["torch"].startswith(cells[1]) and record["hardware"]["date"].startswith(cells[2])
