"""Lesson 16's script and sources: the helpers the notebook prints from, the sentence about async_save generated from
the run's times, and (slow) a crashed sharded run that resumes from its DCP checkpoint to the uninterrupted weights."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest
import torch

from helpers import distributed
from lessons import lesson_16

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "16_sharded_checkpoints.ipynb"


def _sources(kind: str) -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == kind)


@pytest.mark.parametrize(
    ("save", "async_", "start"),
    [
        (0.20, 0.05, "async_save blocked the loop 0.25x as long as dcp.save: the write to disk ran in the background"),
        (0.05, 0.20, "async_save blocked the loop 4.0x as long as dcp.save: on a checkpoint this small"),
        (0.10, 0.11, "async_save and dcp.save blocked the loop about as long (1.10x)"),
    ],
)
def test_async_verdict(save: float, async_: float, start: str) -> None:
    assert lesson_16.async_verdict(save, async_).startswith(start)


@pytest.mark.parametrize("times", [(0.0, 0.1), (0.1, 0.0), (-1.0, 0.1)])
def test_async_verdict_refuses_times_that_are_not_positive(times: tuple[float, float]) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        lesson_16.async_verdict(*times)


def test_largest_difference() -> None:
    a = {"w": torch.zeros(2, 3), "state": {"w": {"exp_avg": torch.ones(2), "step": torch.tensor(3.0)}}}
    same = {"w": torch.zeros(2, 3), "state": {"w": {"exp_avg": torch.ones(2), "step": torch.tensor(3.0)}}}
    assert lesson_16.largest_state_difference(a, same) == 0.0
    moved = {"w": torch.zeros(2, 3), "state": {"w": {"exp_avg": torch.ones(2) * 1.5, "step": torch.tensor(3.0)}}}
    assert lesson_16.largest_state_difference(a, moved) == 0.5
    assert lesson_16.largest_state_difference(a, {"w": torch.zeros(2, 3)}) == float("inf")  # the optimizer's state lost
    assert lesson_16.largest_state_difference(a, {**same, "w": torch.zeros(1, 3)}) == float("inf")  # one shard's rows


def test_newest_checkpoint_needs_its_metadata(tmp_path: Path) -> None:
    assert lesson_16.newest_checkpoint(tmp_path) is None
    for step in (4, 8, 12):
        (tmp_path / f"step_{step:05d}").mkdir()
        (tmp_path / f"step_{step:05d}" / "__0_0.distcp").write_bytes(b"x")
    (tmp_path / "step_00004" / ".metadata").write_bytes(b"m")
    (tmp_path / "step_00008" / ".metadata").write_bytes(b"m")  # step 12's save was cut short: no .metadata
    assert lesson_16.newest_checkpoint(tmp_path) == tmp_path / "step_00008"
    assert lesson_16.written_files(tmp_path / "step_00008") == [
        {"name": ".metadata", "bytes": 1},
        {"name": "__0_0.distcp", "bytes": 1},
    ]


def test_the_async_sentence_comes_from_the_run() -> None:
    assert 'ckpt.async_verdict(timed["save_seconds"], timed["async_seconds"])' in _sources("code")
    prose = _sources("markdown")
    assert not re.search(r"\d+(\.\d+)? ms\b", prose)
    assert not re.search(r"\d+(\.\d+)?x\b", prose)


@pytest.mark.slow
def test_a_crashed_sharded_run_resumes_to_the_uninterrupted_weights(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--steps", "8", "--every", "4", "--synthetic-size", "128"]
    runs = {}
    for name, extra in (("straight", []), ("crashed", ["--fail-at-step", "6"])):
        command = distributed.torchrun_command(2, [*args, *extra, "--out", str(tmp_path / name)], "lessons.lesson_16")
        command.insert(3, "--max-restarts=1")
        [done] = distributed.run_together([command], timeout=240, env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
        assert isinstance(done, subprocess.CompletedProcess) and done.returncode == 0, done
        runs[name] = done.stdout
    assert "dies at step 6" in runs["crashed"] and "resumed from step_00004 at step 4" in runs["crashed"]
    assert "resumed" not in runs["straight"]
    straight, crashed = (torch.load(tmp_path / n / lesson_16.FINAL, weights_only=True) for n in ("straight", "crashed"))
    assert max((straight[k] - crashed[k]).abs().max().item() for k in straight) == 0.0
