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
    "ungated CUDA stream": (
        lambda nb: setattr(nb.cells[1], "source", "copy_stream = torch.cuda.Stream(device)"),
        "torch.cuda.Stream outside `if devices.gpu_section",
    ),
    "gated by the machine, not the device": (
        lambda nb: setattr(
            nb.cells[1], "source", 'if lesson.enough_gpus(1, "x"):\n    torch.cuda.memory_allocated(device)'
        ),
        "torch.cuda.memory_allocated outside",
    ),
    "work under the machine's gate": (
        lambda nb: setattr(nb.cells[1], "source", 'if devices.machine_gpus("x"):\n    torch.cuda.synchronize(device)'),
        "torch.cuda.synchronize outside",
    ),
    "gated by device.type": (
        lambda nb: setattr(nb.cells[1], "source", 'if device.type == "cuda":\n    start = torch.cuda.Event()'),
        "torch.cuda.Event outside",
    ),
    "ungated .cuda()": (lambda nb: setattr(nb.cells[1], "source", "x = torch.ones(1).cuda()"), "cuda outside"),
    "ungated report of the GPUs": (
        lambda nb: setattr(nb.cells[1], "source", "print(torch.cuda.get_device_name(0))"),
        "or devices.machine_gpus",
    ),
    "helper called outside the gate": (
        lambda nb: setattr(
            nb.cells[1],
            "source",
            "def peak():\n    return torch.cuda.max_memory_allocated()\n\n\n"
            'if devices.gpu_section(device, "x"):\n    peak()\nprint(peak())',
        ),
        "peak (which makes CUDA-only calls) outside",
    ),
    "helper of a helper, in another cell": (
        lambda nb: (
            setattr(nb.cells[1], "source", "def sync():\n    torch.cuda.synchronize()\n\n\ndef step():\n    sync()"),
            setattr(nb.cells[2], "source", 'DEVICE = "auto"\ntiming.time_on_device(step, sync=sync)'),
        ),
        "cell 2: line 2: step (which makes CUDA-only calls) outside",
    ),
    "long line": (lambda nb: setattr(nb.cells[1], "source", "x = 1\n" + "y = 2  # " + "z" * 112), "line 2 is over 120"),
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


GATED = {
    "the lesson's gate": 'if devices.gpu_section(device, "x"):\n    s = torch.cuda.Stream(device)\n    x = y.cuda()',
    "elif and a second condition": 'if quick:\n    pass\nelif ok and devices.gpu_section(device, "x", 2):\n'
    "    torch.cuda.synchronize(device)",
    "a helper used only under the gate": "def show():\n    print(torch.cuda.memory_allocated(device))\n\n\n"
    'if devices.gpu_section(device, "x"):\n    show()\n    run(show)',
    "the machine's report under its gate": 'if devices.machine_gpus("names"):\n'
    "    for i in range(torch.cuda.device_count()):\n"
    "        print(torch.cuda.get_device_properties(i).name)",
    "names that need no GPU": "print(torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.get_arch_list())"
    '\nraise torch.cuda.OutOfMemoryError("simulated")',
    "magics": "%%writefile s.py\nimport torch\ntorch.cuda.synchronize()",
    "a shell line": "!nvidia-smi\nprint(1)",
}


@pytest.mark.parametrize("source", GATED.values(), ids=list(GATED))
def test_gated_gpu_calls_pass(source: str) -> None:
    nb = good_notebook()
    nb.cells[1].source = source
    assert lint(nb) == []
