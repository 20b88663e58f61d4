"""Lesson 02 raises every error it discusses, for real, inside ``expect_error``: no cell relies on the
``raises-exception`` tag (which Colab, Kaggle, VS Code and papermill ignore), each error cell names the error it
expects, and a fresh run of the notebook shows that error on stderr, on the line of the cell that raised it."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_device_mismatch_errors.ipynb"

EXPECTED = {  # cell id: (the error's type, the line of the cell that raises it) for each error, in order
    "err-add-gpu-cpu": [("RuntimeError", "t1 + t2"), ("RuntimeError", "t2 + t1")],
    "err-one-element": [("RuntimeError", "t1 * torch.tensor([2.0])  # (1,): one element, but one dimension")],
    "err-matmul": [("RuntimeError", "a @ b")],
    "err-cat": [("RuntimeError", "torch.cat([seen, new_row])")],
    "err-index-select": [("RuntimeError", "table.index_select(0, ids)")],
    "err-linear-input": [("RuntimeError", "layer(x)")],
    "err-made-in-forward": [
        ("RuntimeError", "adder(torch.randn(2, 5, 4, device=gpu))  # positions is still made on the CPU")
    ],
    "err-loss-labels": [("RuntimeError", "F.cross_entropy(logits, labels)")],
    "err-numpy": [("TypeError", "on_gpu.numpy()")],
    "err-index-out-of-range": [("IndexError", "values[torch.tensor([12])]")],
    "err-training-step": [("RuntimeError", "train_step(model, on_gpu, loss_fn, optimizer)")],
}
GPU_ONLY = {  # cell id: (the error types it accepts, the line of the cell that raises it, what the message says)
    "err-addmm-scalar": (
        ("RuntimeError",),
        "torch.addmm(torch.tensor(1.0), a, b)  # the 0-dim CPU tensor is checked like any other argument",
        "same device|different devices",
    ),
    "err-index-gpu-into-cpu": (
        ("RuntimeError", "IndexError"),
        "cpu_table[gpu_ids]",
        "indices should be either on cpu or on the same device",
    ),
}
"""Checks no stand-in models: raised for real on a CUDA machine, skipped with a printed line elsewhere."""
MISMATCH = re.compile("same device|different devices")  # the words of the GPU text and of every stand-in text
SHOWN = re.compile(r"^line (\d+): (.*)\n(\w+): (.*)$", re.MULTILINE)
GPU = torch.cuda.is_available()
REAL_ORIGIN = "Real error, with the real GPU as the second device:"
FAKE_ORIGIN = REAL_ORIGIN if GPU else "Stand-in error from fake CUDA tensors (this machine has no GPU):"
META_ORIGIN = REAL_ORIGIN if GPU else "Stand-in error from the meta device (this machine has no GPU):"


def _cell(nb: nbformat.NotebookNode, cell_id: str) -> nbformat.NotebookNode:
    cells = [cell for cell in nb.cells if cell.get("id") == cell_id]
    assert len(cells) == 1, f"no single cell with id {cell_id}"
    return cells[0]


def _stderr(cell: nbformat.NotebookNode) -> str:
    return "".join(out["text"] for out in cell.get("outputs", []) if out.get("name") == "stderr")


def _stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(out["text"] for out in cell.get("outputs", []) if out.get("name") == "stdout")


@pytest.fixture(scope="module")
def committed() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


@pytest.fixture(scope="module")
def lesson02(executed_notebook):
    return executed_notebook("02")


def test_no_cell_relies_on_the_raises_exception_tag(committed):
    tagged = [cell.get("id") for cell in committed.cells if "raises-exception" in cell.metadata.get("tags", [])]
    assert tagged == []


def test_every_error_cell_uses_expect_error_with_its_type(committed):
    using = {cell.get("id") for cell in committed.cells if cell.cell_type == "code" and "expect_error(" in cell.source}
    assert using == set(EXPECTED) | set(GPU_ONLY)
    for cell_id, (kinds, line, _) in GPU_ONLY.items():
        source = _cell(committed, cell_id).source
        assert source.startswith("if devices.gpu_section(device, "), f"{cell_id} must say when and why it is skipped"
        types = kinds[0] if len(kinds) == 1 else rf"\({', '.join(kinds)}\)"
        assert re.search(rf"^    with expect_error\({types}, match=", source, re.MULTILINE), cell_id
        assert any(src.strip() == line for src in source.splitlines()), f"{cell_id} no longer has the line {line!r}"
    for cell_id, errors in EXPECTED.items():
        source = _cell(committed, cell_id).source
        opened = re.findall(r"^with expect_error\((\w+), match=", source, re.MULTILINE)
        assert opened == [kind for kind, _ in errors], cell_id
        for _, line in errors:
            assert any(src.strip() == line for src in source.splitlines()), f"{cell_id} no longer has the line {line!r}"


@pytest.mark.slow
@pytest.mark.parametrize("cell_id", sorted(EXPECTED))
def test_the_error_is_raised_for_real_and_shown(lesson02, cell_id):
    cell = _cell(lesson02, cell_id)
    shown = SHOWN.findall(_stderr(cell))
    assert len(shown) == len(EXPECTED[cell_id]), f"{cell_id} did not show each of its errors: {_stderr(cell)!r}"
    for (lineno, source, shown_kind, message), (kind, line) in zip(shown, EXPECTED[cell_id], strict=True):
        assert (source, shown_kind) == (line, kind)
        assert cell.source.splitlines()[int(lineno) - 1].strip() == line  # the number is the cell's own line number
        if kind == "RuntimeError":
            assert MISMATCH.search(message), message


@pytest.mark.slow
def test_no_cell_of_a_fresh_run_has_an_error_output(lesson02):
    outputs = {cell.get("id"): cell.get("outputs", []) for cell in lesson02.cells}
    assert [cell_id for cell_id, outs in outputs.items() if any(o.get("output_type") == "error" for o in outs)] == []


@pytest.mark.slow
@pytest.mark.parametrize("cell_id", sorted(GPU_ONLY))
def test_what_no_stand_in_models_is_raised_on_a_gpu_and_skipped_without_one(lesson02, cell_id):
    kinds, line, words = GPU_ONLY[cell_id]
    cell = _cell(lesson02, cell_id)
    if not GPU:
        assert _stdout(cell).startswith("Skipped (needs 1 CUDA GPU, this machine has 0): ")
        assert _stderr(cell) == ""
        return
    shown = SHOWN.findall(_stderr(cell))
    assert len(shown) == 1, f"{cell_id} showed no error on stderr: {_stderr(cell)!r}"
    _, source, shown_kind, message = shown[0]
    assert source == line and shown_kind in kinds
    assert re.search(words, message), message
    assert _stdout(cell).strip() == FAKE_ORIGIN


@pytest.mark.slow
@pytest.mark.parametrize("cell_id", sorted(set(EXPECTED) - {"err-index-out-of-range"}))
def test_each_error_says_whether_it_was_real_or_a_stand_in(lesson02, cell_id):
    expected = META_ORIGIN if cell_id == "err-numpy" else FAKE_ORIGIN
    cell = _cell(lesson02, cell_id)
    origins = [line for line in _stdout(cell).splitlines() if "error" in line and line.endswith(":")]
    assert origins == [expected] * len(EXPECTED[cell_id])
    # each origin line comes just before its error: the outputs alternate stdout (origin), stderr (error)
    streams = [out.get("name") for out in cell.get("outputs", []) if out.get("output_type") == "stream"]
    for i, name in enumerate(streams):
        if name == "stderr":
            assert i > 0 and streams[i - 1] == "stdout", streams
