"""Lesson 05's quick run: the CNN on device-resident Fashion-MNIST reaches 85%, and the CPU reload agrees."""

from __future__ import annotations

import re

import pytest

from helpers.lesson import RECORD_MIME

pytestmark = pytest.mark.slow  # reads lesson 05 as executed in this test run

HEADLINE = re.compile(
    r"(?P<dataset>\w+) test accuracy \(CNN, \d+ epochs?\): (?P<acc>\d+\.\d+)% "
    r"\(reloaded on the CPU: (?P<cpu>\d+\.\d+)%\)"
)


@pytest.fixture(scope="module")
def headline(executed_notebook) -> re.Match:
    nb = executed_notebook("05")
    found = [
        out["data"][RECORD_MIME]["headline"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if RECORD_MIME in out.get("data", {}) and "headline" in out["data"][RECORD_MIME]
    ]
    assert len(found) == 1, f"expected one headline record, found {found}"
    match = HEADLINE.fullmatch(found[0])
    assert match, f"headline not in the expected form: {found[0]!r}"
    return match


def test_quick_fashion_mnist_accuracy(headline):
    assert headline["dataset"] == "FashionMNIST"
    assert float(headline["acc"]) >= 85.0


def test_checkpoint_reloaded_on_cpu_gives_the_same_accuracy(headline):
    assert abs(float(headline["cpu"]) - float(headline["acc"])) <= 0.01  # one image in 10,000


def _stdout(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


ROW = re.compile(r"^(\d)\. .*?((?:[\d,]+ \(\d+%\)\s+(?:-|[\d.]+x)\s+){3})", re.M)
SENTENCE = re.compile(r"^- Row (\d), .*, against row (\d) \(images/s ratio\): (.*)\.$", re.M)


def test_pipeline_sentences_quote_the_table_of_the_same_run(executed_notebook):
    nb = executed_notebook("05")
    out, said = _stdout(nb, "c23"), _stdout(nb, "findings")  # the table, read first; then the sentences
    table = {int(n): re.findall(r"(-|[\d.]+x)(?:\s|$)", cells) for n, cells in ROW.findall(out)}
    assert sorted(table) == [1, 2, 3, 4], out  # the CPU's rows: lab, + workers, + converted once, + by index
    assert not SENTENCE.findall(out), "the sentences come after the learner has read the table"
    sentences = SENTENCE.findall(said)
    assert [int(row) for row, _, _ in sentences] == [2, 3, 4]
    for row, _, body in sentences:
        quoted = re.findall(r"(?:data only|linear model|CNN) ([\d.]+x), ", body)
        assert quoted == table[int(row)], (row, body, table[int(row)])
    assert re.search(r"^- Section 5's three parts, added \(.+\) and row 1's whole step with the linear", said, re.M)


def test_batch_size_sentences_come_from_the_grid_printed_beside_them(executed_notebook):
    out = _stdout(executed_notebook("05"), "c26")
    steps = {int(b): float(ms) for b, ms in re.findall(r"^\s+cpu\s+(\d+)\s+([\d.]+)\s", out, re.M)}
    assert sorted(steps) == [32, 256]
    trend = re.search(
        r"^- cpu: images per second (rose|fell|stayed level) from batch 32 to batch 256 \(([\d.]+)x\)\.$", out, re.M
    )
    assert trend, out
    assert float(trend[2]) == pytest.approx(8 * steps[32] / steps[256], rel=0.01)  # same images per run at each size
    unclear = re.search(r"^- cpu: the reading is unclear: the repeats spread (\d+)% at batch (\d+) ", out, re.M)
    if unclear:  # a busy machine: the sentence names the spread the table prints, which is above 100%
        spread = re.search(rf"^\s+cpu\s+{unclear[2]}\s+[\d.]+\s+(\d+)%", out, re.M)
        assert spread and spread[1] == unclear[1] and int(unclear[1]) > 100, out
        return
    unit = {"s": 1e3, "ms": 1.0, "us": 1e-3}
    said = re.search(r"^- cpu: .*?([\d.]+) (s|ms|us) a step at batch 32, ([\d.]+) (s|ms|us) at batch 256", out, re.M)
    assert said, out
    assert float(said[1]) * unit[said[2]] == pytest.approx(steps[32], rel=0.01, abs=0.06)
    assert float(said[3]) * unit[said[4]] == pytest.approx(steps[256], rel=0.01, abs=0.06)


def _cell_index(nb, cell_id: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.get("id") == cell_id)


def test_the_model_is_trained_and_reloaded_before_anything_is_measured(executed_notebook):
    nb = executed_notebook("05")
    trained, reloaded = _cell_index(nb, "c30"), _cell_index(nb, "c40")
    measured = [_cell_index(nb, i) for i in ("c21", "c23", "c26")]  # parts of a step, pipelines, batch sizes
    assert trained < reloaded < min(measured), (trained, reloaded, measured)
    assert "test accuracy" in _stdout(nb, "c30")


def _stderr(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stderr")


def test_spawned_workers_fail_on_a_notebook_class_and_work_on_an_imported_one(executed_notebook):
    nb = executed_notebook("05")
    cell = next(c for c in nb.cells if c.cell_type == "code" and "class NotebookImages(Dataset)" in c.source)
    workers = _cell_index(nb, "c23")  # the table whose row 2 starts worker processes
    assert _cell_index(nb, cell.id) < workers
    assert re.search(
        r"^RuntimeError: DataLoader worker \(pid\(s\) [\d, ]+\) exited unexpectedly$", _stderr(nb, cell.id), re.M
    )
    assert "a spawned worker made a batch from an imported Dataset class: (128, 1, 28, 28) (128,)" in _stdout(
        nb, cell.id
    )


EPOCH_LINE = re.compile(
    r"^epoch (\d+)/(\d+): training loss ([\d.]+), accuracy ([\d.]+)%; validation loss ([\d.]+), accuracy ([\d.]+)%$",
    re.M,
)


def test_the_loop_in_the_cells_prints_every_epoch_and_the_last_one_is_reported(executed_notebook):
    out = _stdout(executed_notebook("05"), "c30")
    epochs = EPOCH_LINE.findall(out)
    assert [int(e) for e, *_ in epochs] == list(range(1, int(epochs[0][1]) + 1)), out  # quick mode: 2 epochs
    assert float(epochs[-1][2]) < float(epochs[0][2])  # the training loss fell: the steps trained the model
    said = re.search(r"^validation accuracy ([\d.]+)%, test accuracy ([\d.]+)%$", out, re.M)
    assert said, out
    assert said[1] == epochs[-1][5]  # the figure under the loop is the last epoch's, not a second evaluation
