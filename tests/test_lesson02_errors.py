"""Lesson 02 raises every device-mismatch error it discusses: each error cell, found by its id, raises the
exception type the lesson says it does, in a fresh run of the notebook."""

import pytest

EXPECTED_ENAME = {
    "err-add-gpu-cpu": "RuntimeError",
    "err-add-cpu-gpu": "RuntimeError",
    "err-one-element": "RuntimeError",
    "err-matmul": "RuntimeError",
    "err-cat": "RuntimeError",
    "err-index-select": "RuntimeError",
    "err-linear-input": "RuntimeError",
    "err-loss-labels": "RuntimeError",
    "err-numpy": "TypeError",
    "err-index-out-of-range": "IndexError",
    "err-training-step": "RuntimeError",
}
MISMATCH_TEXT = "Expected all tensors to be on the same device"


@pytest.fixture(scope="module")
def lesson02(executed_notebook):
    return executed_notebook("02")


def _errors(cell):
    return [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def test_every_raising_cell_is_listed(lesson02):
    raising = {cell.get("id") for cell in lesson02.cells if "raises-exception" in cell.metadata.get("tags", [])}
    assert raising == set(EXPECTED_ENAME)


@pytest.mark.parametrize("cell_id", sorted(EXPECTED_ENAME))
def test_cell_raises_expected_type(lesson02, cell_id):
    cells = [cell for cell in lesson02.cells if cell.get("id") == cell_id]
    assert len(cells) == 1, f"no single cell with id {cell_id}"
    errors = _errors(cells[0])
    assert len(errors) == 1, f"{cell_id} raised nothing"
    assert errors[0]["ename"] == EXPECTED_ENAME[cell_id]
    if EXPECTED_ENAME[cell_id] == "RuntimeError" and cell_id not in ("err-index-out-of-range",):
        assert MISMATCH_TEXT in errors[0]["evalue"]


def test_no_other_cell_raises(lesson02):
    stray = [cell.get("id") for cell in lesson02.cells if _errors(cell) and cell.get("id") not in EXPECTED_ENAME]
    assert stray == []
