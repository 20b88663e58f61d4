"""Lessons 01 and 06 teach one rule for CUDA_VISIBLE_DEVICES, and lesson 01's children show it from measurements; lesson
01's own figure of the copy benchmark says what it measured in its labels."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest
import torch

from lessons import lesson_01

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = ["01_tensors_on_devices.ipynb", "06_data_parallel.ipynb"]


def _cells(name: str) -> dict[str, nbformat.NotebookNode]:
    return {cell.get("id"): cell for cell in nbformat.read(NOTEBOOKS / name, as_version=4).cells}


def _visible_devices_text(name: str) -> str:
    return "\n".join(
        c.source for c in _cells(name).values() if c.cell_type == "markdown" and "CUDA_VISIBLE_DEVICES" in c.source
    )


@pytest.mark.parametrize("name", LESSONS)
def test_both_lessons_say_is_available_already_starts_cuda(name):
    text = _visible_devices_text(name)
    assert "before anything" in text and "touches CUDA" in text
    assert "`torch.cuda.is_available()` already" in text
    assert "before `import torch`" in text
    # the claim lesson 01 used to make, which a GPU run contradicts
    assert "do not count as that first call" not in text
    assert "do not initialise" not in text


def _lesson01_scripts() -> tuple[str, str]:
    """The child scripts of lesson 01's CUDA_VISIBLE_DEVICES cell, taken from the committed notebook."""
    tree = ast.parse(_cells(LESSONS[0])["c28"].source)
    assigned = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)}
    report = ast.literal_eval(assigned["report"])
    late = assigned["too_late"]  # """...""" + report
    assert isinstance(late, ast.BinOp) and isinstance(late.right, ast.Name) and late.right.id == "report"
    return report, ast.literal_eval(late.left) + report


@pytest.mark.slow
def test_lesson01_children_report_what_they_measured():
    report, too_late = _lesson01_scripts()
    assert too_late.index("is_available()") < too_late.index('os.environ["CUDA_VISIBLE_DEVICES"] = ""')
    hidden = json.loads(lesson_01.child_output(report, env={"CUDA_VISIBLE_DEVICES": ""}))
    assert hidden == {"count": 0, "landed": None}  # hidden in the environment: true on every machine
    late = json.loads(lesson_01.child_output(too_late, env={"CUDA_VISIBLE_DEVICES": None}))
    assert set(late) == {"count", "landed"}
    if not torch.cuda.is_available():
        assert late == {"count": 0, "landed": None}
        assert lesson_01.hiding_outcome(0, late["count"], late["landed"]).startswith("nothing to hide")
    else:  # the GPU path: the driver started before the change, so the GPU stays visible
        assert late["landed"] == "cuda:0"
        outcome = lesson_01.hiding_outcome(torch.cuda.device_count(), late["count"], late["landed"])
        assert outcome.startswith("NOT")


def test_lesson01_times_the_copy_apart_from_the_fill():
    source = _cells(LESSONS[0])["c14"].source
    assert "torch.randn(n).to(device)" not in source  # fill and copy timed as one would mostly time the fill
    assert "host = torch.randn(n)" in source and "lambda: host.to(device)" in source
    assert source.index("host = torch.randn(n)") < source.index("lambda: host.to(device)")
    assert "speed_comparison(" in source


def test_lesson01_copy_figure_plots_each_kind_against_the_size_in_mib():
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")  # no window, wherever the tests run
    sizes = [2**20, 4 * 2**20, 16 * 2**20]
    measured = {"pageable": [3.1, 5.2, 4.0], "pinned": [9.5, 12.0, 12.4]}
    try:
        ax = lesson_01.plot_copy_bandwidth(sizes, measured, title="Copies from host memory to cuda:0")
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == {"pageable", "pinned"}
        for kind, line in lines.items():
            assert list(line.get_xdata()) == [1, 4, 16]  # MiB, not bytes
            assert list(line.get_ydata()) == measured[kind]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["pageable", "pinned"]
        assert ax.get_xscale() == "log" and ax.get_ylim()[0] == 0
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("copy size (MiB)", "bandwidth (GB/s)")
        assert ax.get_title() == "Copies from host memory to cuda:0"
    finally:
        plt.close("all")
