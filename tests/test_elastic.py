"""Two torchrun agents on this machine as two nodes (helpers.nodes), and training that survives a crashed worker
(lessons.lesson_13): the group restarts, resumes from the last checkpoint and ends with the weights of a run that
never crashed, on the torch in use (CI runs this file on the floor, 2.8, and on the lock)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from helpers import nodes
from lessons import lesson_13 as elastic_train

pytestmark = pytest.mark.slow  # each test starts two torchrun agents and their workers

ARGS = ["--steps", "24", "--every", "8", "--timeout", "30", "--synthetic-size", "256"]


def completed(results) -> list[subprocess.CompletedProcess[str]]:
    for result in results:
        assert isinstance(result, subprocess.CompletedProcess), f"an agent ran past the timeout:\n{result.stderr}"
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr[-3000:]}"
    return results


def losses(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / elastic_train.LOSSES).read_text().splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    results = completed(nodes.rehearse(2, 1, [*ARGS, "--out", str(out)], timeout=180))
    said = "".join(r.stdout for r in results)
    assert "[node 0, local rank 0] rank" in said and "[node 1, local rank 0] rank" in said, said
    assert "rank 1 of 2" in said and "largest difference from rank 0's weights 0.0e+00" in said
    return out


def test_two_agents_meet_as_two_nodes_and_train(uninterrupted: Path) -> None:
    logged = losses(uninterrupted)
    assert [entry["step"] for entry in logged] == list(range(1, 25))
    assert {entry["attempt"] for entry in logged} == {0}
    assert logged[-1]["loss"] < logged[0]["loss"]  # it learned something
    assert (uninterrupted / elastic_train.FINAL).exists()


def test_a_crashed_worker_is_restarted_and_ends_where_an_uninterrupted_run_ends(uninterrupted, tmp_path) -> None:
    crash = ["--crash-rank", "1", "--crash-at", "12", "--out", str(tmp_path)]
    results = completed(nodes.rehearse(2, 1, [*ARGS, *crash], timeout=180, max_restarts=1, env=nodes.NO_SHARED_STORE))
    said = "".join(r.stdout for r in results)
    assert "[rank 1] dies at step 12" in said
    assert "attempt 1: resumed at step 8 (epoch" in said  # the checkpoint of step 8, not step 0
    logged = losses(tmp_path)
    first = [e["step"] for e in logged if e["attempt"] == 0]
    again = [e["step"] for e in logged if e["attempt"] == 1]
    assert first[-1] in (11, 12) and again == list(range(9, 25))  # steps 9.. replayed after the restart
    done = torch.load(tmp_path / elastic_train.FINAL)
    reference = torch.load(uninterrupted / elastic_train.FINAL)
    assert done.keys() == reference.keys()
    assert all(torch.equal(done[k], reference[k]) for k in done), "the resumed run ended with other weights"


def test_a_crash_without_restarts_fails_within_the_timeout(tmp_path: Path) -> None:
    crash = ["--crash-rank", "0", "--crash-at", "3", "--out", str(tmp_path)]
    results = nodes.rehearse(2, 1, [*ARGS, *crash], timeout=180, env=nodes.NO_SHARED_STORE)
    assert all(isinstance(r, subprocess.CompletedProcess) for r in results), "an agent hung"
    assert any(r.returncode != 0 for r in results)
    assert not (tmp_path / elastic_train.FINAL).exists()
