"""lessons.lesson_15: each staged hang ends within its bounds, leaves no process behind, and its dumps name the
culprit. Every test but the last starts processes, so they are slow."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from lessons import lesson_15

T = ["--timeout", "2"]


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie counts as gone)."""
    left = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0]
        except OSError:
            continue
        if state != "Z":
            left.append(pid)
    return left


def pids_of(staged: lesson_15.Staged) -> list[int]:
    return [int(line.split("process ")[1]) for s in staged.said for line in s.splitlines() if lesson_15.READY in line]


@pytest.mark.slow
def test_a_skipped_collective_times_out_on_the_waiting_rank_only() -> None:
    skip = lesson_15.stage("skip", T, deadline=30)
    lines = lesson_15.tidy(skip)
    assert skip.exits == [1, 0]
    assert any(line.startswith("[rank 0] RuntimeError after 2.") and "Timed out" in line for line in lines), lines
    assert skip.seconds < 30
    assert not alive(pids_of(skip))


@pytest.mark.slow
@pytest.mark.parametrize(("scene", "calls"), [("shape", "[5]"), ("op", "BROADCAST"), ("order", "BROADCAST")])
def test_detail_names_a_mismatch_at_the_call(scene: str, calls: str) -> None:
    # DETAIL ends the run at the call; the long timeout only keeps a loaded machine from turning it into a timeout
    run = lesson_15.stage(scene, ["--timeout", "20"], env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, deadline=60)
    mismatch = [line for line in lesson_15.tidy(run) if "Detected mismatch" in line]
    assert run.exits == [1, 1] and len(mismatch) == 2
    assert run.seconds < 20, "the mismatch was found by the timeout, not at the call"
    assert calls in lesson_15.fingerprints(mismatch[0])
    assert not alive(pids_of(run))


@pytest.mark.slow
def test_monitored_barrier_names_the_missing_rank() -> None:
    run = lesson_15.stage("barrier", ["--culprit", "1", *T], deadline=30)
    assert any("Ranks 1 failed to pass monitoredBarrier" in line for line in lesson_15.tidy(run))


@pytest.mark.slow
@pytest.mark.parametrize("culprit", [0, 1])
def test_the_stacks_name_the_culprit_and_the_collective(culprit: int) -> None:
    run = lesson_15.stage(
        "skip",
        ["--culprit", str(culprit), "--collective", "broadcast", *T],
        while_hanging=lesson_15.send_to_each(signal.SIGUSR1),
        end_after=True,
        deadline=30,
    )
    frames = [lesson_15.stacks(said) for said in run.said]
    assert frames[culprit][0] == "other_work (lesson_15.py)"
    assert frames[1 - culprit][0] == "broadcast (distributed_c10d.py)"
    assert run.seconds < 20  # ended after the dump, not at the timeout
    assert not alive(pids_of(run))


@pytest.mark.slow
def test_a_clean_leave_ends_both_ranks_with_status_0_and_the_unclean_one_fails_rank_0() -> None:
    unclean, clean = lesson_15.stage("leave", T, deadline=30), lesson_15.stage("leave", [*T, "--clean"], deadline=30)
    assert clean.exits == [0, 0]
    assert unclean.exits[0] != 0
    # rank 1 finished its work; its own end is 0, or an abort when gloo's threads outlive the interpreter
    assert any(line.startswith("[rank 1] done") for line in lesson_15.tidy(unclean))
    assert unclean.exits[1] in (0, -signal.SIGABRT)


@pytest.mark.slow
def test_a_rank_past_the_deadline_is_killed() -> None:
    run = lesson_15.stage("skip", ["--timeout", "20"], deadline=8)
    assert None in run.exits and run.seconds < 15
    assert not alive(pids_of(run))


def test_fingerprints_reads_both_calls() -> None:
    line = (
        "Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint("
        "SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float), but Rank 1 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=1, OpType=BROADCAST, TensorShape=[4], TensorDtypes=Float)."
    )
    assert (
        lesson_15.fingerprints(line) == "rank 0 runs ALLREDUCE #1 on shape [4]; rank 1 runs BROADCAST #1 on shape [4]"
    )
    assert os.environ.get("TORCH_DISTRIBUTED_DEBUG") != "DETAIL"
