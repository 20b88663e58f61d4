"""The notebook lint catches each rule it claims to check: every fixture breaks one rule and must be reported."""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from nblint import lint

HEADER = """# 99 · A lesson

[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/x)
[![Open in Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)](https://kaggle.com/kernels/welcome?src=x)

**What you will learn** things. **Prerequisites:** none. **Time:** 1 minute. **Hardware:** any."""


def good_notebook() -> nbformat.NotebookNode:
    nb = new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    params = new_code_cell('DEVICE = "auto"', execution_count=2, metadata={"tags": ["parameters"]})
    raising = new_code_cell(
        "with expect_error(ZeroDivisionError):\n    1 / 0",
        execution_count=3,
        metadata={"tags": ["nbval-ignore-output"]},
    )
    raising.outputs = [new_output("stream", name="stderr", text="line 2: 1 / 0\nZeroDivisionError: division by zero\n")]
    nb.cells = [
        new_markdown_cell(HEADER),
        new_code_cell("import torch", execution_count=1),
        params,
        raising,
        new_markdown_cell("## Summary\nDone."),
    ]
    return nb


def test_good_notebook_passes() -> None:
    assert lint(good_notebook()) == []


def _stray_error(nb):
    nb.cells[1].outputs = [new_output("error", ename="RuntimeError", evalue="boom", traceback=[])]


def _local_path_in_output(nb):
    nb.cells[1].outputs = [new_output("stream", name="stdout", text="saved to /home/alice/model.pt\n")]


def _local_path_in_traceback(nb):
    nb.cells[1].outputs = [new_output("error", ename="E", evalue="", traceback=['File "/work/main/helpers/x.py"'])]


def _home_path_left_by_scrubbing(nb):
    nb.cells[3].outputs[0]["text"] = "File ~/.pyenv/versions/3.11.7/lib/python3.11/contextlib.py:158\n"


BREAKAGES = {
    "no title": (lambda nb: setattr(nb.cells[0], "source", "Intro"), "header"),
    "no badges": (lambda nb: setattr(nb.cells[0], "source", HEADER.replace("colab", "x")), "badges"),
    "no hardware line": (lambda nb: setattr(nb.cells[0], "source", HEADER.replace("Hardware", "Kit")), "Hardware"),
    "wrong kernel": (lambda nb: nb.metadata.kernelspec.update(name="ir"), "kernelspec"),
    "no parameters cell": (lambda nb: nb.cells[2].metadata.update(tags=[]), "parameters"),
    "two parameters cells": (lambda nb: nb.cells[1].metadata.update(tags=["parameters"]), "parameters"),
    "out of order": (lambda nb: setattr(nb.cells[1], "execution_count", 5), "execution"),
    "never executed": (lambda nb: setattr(nb.cells[2], "execution_count", None), "execution"),
    "error output": (_stray_error, "error output RuntimeError"),
    "raises-exception tag": (lambda nb: nb.cells[3].metadata.update(tags=["raises-exception"]), "expect_error"),
    "empty code cell": (lambda nb: setattr(nb.cells[1], "source", "  \n"), "empty code cell"),
    "empty markdown cell": (lambda nb: nb.cells.insert(2, new_markdown_cell("\n")), "empty markdown cell"),
    "home path in output": (_home_path_left_by_scrubbing, "absolute local path"),
    "local path in output": (_local_path_in_output, "absolute local path"),
    "local path in traceback": (_local_path_in_traceback, "absolute local path"),
    "temporary path in output": (
        lambda nb: nb.cells[3].outputs[0].update(text="Loaded FashionMNIST from /tmp/ci3/data/FashionMNIST\n"),
        "absolute local path",
    ),
    "local path in source": (lambda nb: setattr(nb.cells[1], "source", "open('/Users/bob/x')"), "absolute local path"),
    "deprecated default type": (
        lambda nb: setattr(nb.cells[1], "source", "torch.set_default_tensor_type(torch.cuda.FloatTensor)"),
        "set_default_device",
    ),
    "deprecated amp": (lambda nb: setattr(nb.cells[1], "source", "with torch.cuda.amp.autocast(): pass"), "torch.amp"),
    "deprecated launcher": (
        lambda nb: setattr(nb.cells[1], "source", "!python -m torch.distributed.launch train.py"),
        "torchrun",
    ),
    "ddp cpu": (lambda nb: setattr(nb.cells[1], "source", "DistributedDataParallelCPU(model)"), "gloo"),
    "no summary": (lambda nb: setattr(nb.cells[4], "source", "The end."), "Summary"),
    "papermill metadata": (lambda nb: nb.metadata.update(papermill={"duration": 1}), "papermill"),
    "injected parameters": (
        lambda nb: nb.cells[2].metadata.update(tags=["parameters", "injected-parameters"]),
        "injected",
    ),
}


@pytest.mark.parametrize("breakage", BREAKAGES, ids=list(BREAKAGES))
def test_each_rule_can_fail(breakage: str) -> None:
    nb = copy.deepcopy(good_notebook())
    breaker, expected = BREAKAGES[breakage]
    breaker(nb)
    problems = lint(nb)
    assert any(expected in p for p in problems), problems
