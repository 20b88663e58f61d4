"""helpers.transfer's pinned-memory measurements (lesson 04): the rule that reads them, fed synthetic times.

The measurement itself needs a CUDA GPU; without one these tests check the rule and the sentences it writes, and that
the measurement refuses other devices with a message.
"""

from __future__ import annotations

import pytest
import torch

from lessons import lesson_04

US = 1e-6


def test_pinning_reads_its_measurements_by_the_course_rule() -> None:
    # middle_half_verdict's tests (test_pinning_disturbed) cover the rule; here, that the sentences follow it
    base = [20 * US, 21 * US, 22 * US]
    for candidate, verdict in (([15 * US, 16 * US, 17 * US], "faster"), ([10 * US, 30 * US, 31 * US], "no clear")):
        times = {"plain": base, "pin in the loop": candidate, "pinned already": base}
        said = "was faster" if verdict == "faster" else "made no clear"
        first = lesson_04.pinning_findings(times)[0]
        assert first.startswith(f"Pinning each batch in the loop, then copying it, {said}")


def _times(plain: float, in_loop: float, pinned: float, jitter: float = 0.5 * US) -> dict[str, list[float]]:
    """Five repeats around each median, ``jitter`` apart."""
    spread = [-2 * jitter, -jitter, 0.0, jitter, 2 * jitter]
    return {
        "plain": [plain + d for d in spread],
        "pin in the loop": [in_loop + d for d in spread],
        "pinned already": [pinned + d for d in spread],
    }


def test_findings_when_pinning_in_the_loop_is_faster() -> None:
    in_loop, already = lesson_04.pinning_findings(_times(plain=40 * US, in_loop=30 * US, pinned=20 * US))
    assert in_loop == (
        "Pinning each batch in the loop, then copying it, was faster than a plain copy: 30.0 us against 40.0 us per "
        "batch (0.75 times its time; every one of the 5 repeats below every plain one)."
    )
    assert already.startswith("Copying a batch that was pinned ahead of time was faster than a plain copy: 20.0 us")


def test_findings_when_pinning_in_the_loop_is_slower() -> None:
    in_loop, _ = lesson_04.pinning_findings(_times(plain=20 * US, in_loop=40 * US, pinned=15 * US))
    assert in_loop == (
        "Pinning each batch in the loop, then copying it, was slower than a plain copy: 40.0 us against 20.0 us per "
        "batch (2.00 times its time; every one of the 5 repeats above every plain one)."
    )


def test_findings_within_the_spread_claim_no_difference() -> None:
    in_loop, already = lesson_04.pinning_findings(
        _times(plain=20 * US, in_loop=21 * US, pinned=20.5 * US, jitter=1 * US)
    )
    assert in_loop == (
        "Pinning each batch in the loop, then copying it, made no clear difference to a plain copy: 21.0 us against "
        "20.0 us per batch, and the middle halves of their repeats overlap."
    )
    assert "no clear difference" in already
    assert "faster" not in in_loop + already and "slower" not in in_loop + already


def test_report_lists_every_way_with_its_median_and_spread() -> None:
    batch = torch.zeros(64, 1, 28, 28)
    report = lesson_04.pinning_report(batch, _times(plain=40 * US, in_loop=30 * US, pinned=20 * US))
    lines = report.splitlines()
    assert lines[0] == "batch (64, 1, 28, 28) float32, 196 KiB:"
    assert [line.split()[0:2] for line in lines[1:4]] == [["plain", "40.0"], ["pin", "in"], ["pinned", "already"]]
    assert "(spread 5%)" in lines[1]  # (42 - 38) / 40 us
    assert lines[4].startswith("Pinning each batch in the loop") and lines[5].startswith("Copying a batch")


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_measurement_refuses_a_device_that_is_not_a_cuda_gpu(device: str) -> None:
    with pytest.raises(ValueError, match="Pinned memory serves copies to a CUDA GPU"):
        lesson_04.time_batch_copies(torch.zeros(4), device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times real copies to a CUDA GPU")
def test_the_measurement_on_a_gpu_gives_every_way_its_repeats() -> None:
    times = lesson_04.time_batch_copies(torch.zeros(64, 1, 28, 28), "cuda", copies=5, repeats=3)
    assert set(times) == set(lesson_04.COPY_WAYS)
    assert all(len(found) == 3 and all(t > 0 for t in found) for found in times.values())
