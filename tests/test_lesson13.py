"""Lesson 13's launch report: what it prints for a group that failed to restart, which the committed run may not show
(whether the restart with the default settings fails depends on timing)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import distributed, nodes

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "13_surviving_a_crash.ipynb"

# torchrun's failure report as torch 2.8 wrote it when a restarted worker could not reach its peer (paths shortened)
ROOT_CAUSE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
helpers.elastic_train FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_08:36:55
  host      : localhost
  rank      : 1 (local_rank: 0)
  exitcode  : 1 (pid: 22438)
  error_file: /tmp/torchelastic_x/attempt_1/0/error.json
  traceback : Traceback (most recent call last):
  RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed \
out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:46980$1

============================================================
"""


@pytest.fixture(scope="module")
def report() -> Callable:
    """The lesson's ``report``, from its code cell (the cell's launch left out)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    source = next("".join(c["source"]) for c in nb["cells"] if "def report(" in "".join(c["source"]))
    namespace = {"re": re, "subprocess": subprocess, "distributed": distributed, "nodes": nodes, "folder": Path()}
    exec(source.split('print("finished:"')[0], namespace)
    return namespace["report"]


def test_a_hung_agent_and_torchruns_root_cause_are_named(report, capsys: pytest.CaptureFixture[str]) -> None:
    said = "[node 0, local rank 0] rank 0 of 2 on cpu, group's store at localhost:4000\n"
    hung = subprocess.TimeoutExpired(["torchrun"], 90, output=said, stderr="")
    failed = subprocess.CompletedProcess(["torchrun"], 1, "[rank 1] dies at step 12 (SIGKILL)\n", ROOT_CAUSE)
    assert report([hung, failed]) is False
    out = capsys.readouterr().out
    assert "the group's store, attempt by attempt: localhost:4000" in out
    assert "agent 0: still running after 90 s, stopped" in out
    assert "agent 1: exit code 1\n    torchrun's report: rank: 1 (local_rank: 0)" in out
    assert "torchrun's report: RuntimeError: Gloo connectFullMesh failed with timed out connecting" in out
    refused = (
        "in the workers' errors: Gloo connectFullMesh failed with timed out connecting: SO_ERROR: Connection refused"
    )
    assert refused in out
    assert "/pytorch/third_party" not in out  # the source paths are left out


def test_a_group_that_finished(report, capsys: pytest.CaptureFixture[str]) -> None:
    done = [subprocess.CompletedProcess(["torchrun"], 0, "[rank 0] finished 24 steps in attempt 1\n", "")] * 2
    assert report(done) is True
    out = capsys.readouterr().out
    assert "[rank 0] finished 24 steps" in out and "agent 1: exit code 0" in out
