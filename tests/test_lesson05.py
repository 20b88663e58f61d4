"""Lesson 05's quick run: the CNN on device-resident Fashion-MNIST reaches 85%, and the CPU reload agrees."""

from __future__ import annotations

import re

import pytest

from helpers.lesson import RECORD_MIME

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
