"""helpers.transfer's pinned-memory measurements (lesson 04): the rule that reads them, fed synthetic times.

The measurement itself needs a CUDA GPU; without one these tests check the rule and the sentences it writes, and that
the measurement refuses other devices with a message.
"""

from __future__ import annotations

import pytest
import torch

from helpers import transfer

US = 1e-6


def test_a_candidate_whose_every_repeat_is_quicker_is_faster() -> None:
    assert transfer.compare_times([20 * US, 21 * US, 22 * US], [15 * US, 16 * US, 17 * US]) == "faster"


def test_a_candidate_whose_every_repeat_is_slower_is_slower() -> None:
    assert transfer.compare_times([20 * US, 21 * US, 22 * US], [30 * US, 31 * US, 29 * US]) == "slower"


@pytest.mark.parametrize(
    "candidate",
    [
        [20.5 * US, 20.6 * US, 20.7 * US],  # inside the baseline's range
        [10 * US, 30 * US, 31 * US],  # a lower median, but one repeat above every baseline repeat
        [5 * US, 6 * US, 21.5 * US],  # mostly quicker, but one repeat within the baseline's range
    ],
)
def test_overlapping_repeats_are_no_clear_difference(candidate: list[float]) -> None:
    assert transfer.compare_times([20 * US, 21 * US, 22 * US], candidate) == "no clear difference"


@pytest.mark.parametrize("bad", [[], [0.0], [-1e-6], [float("nan")], [float("inf")]])
def test_compare_times_refuses_what_is_not_a_measurement(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="compare_times needs"):
        transfer.compare_times([1e-5], bad)
    with pytest.raises(ValueError, match="compare_times needs"):
        transfer.compare_times(bad, [1e-5])


def _times(plain: float, in_loop: float, pinned: float, jitter: float = 0.5 * US) -> dict[str, list[float]]:
    """Five repeats around each median, ``jitter`` apart."""
    spread = [-2 * jitter, -jitter, 0.0, jitter, 2 * jitter]
    return {
        "plain": [plain + d for d in spread],
        "pin in the loop": [in_loop + d for d in spread],
        "pinned already": [pinned + d for d in spread],
    }


def test_findings_when_pinning_in_the_loop_is_faster() -> None:
    in_loop, already = transfer.pinning_findings(_times(plain=40 * US, in_loop=30 * US, pinned=20 * US))
    assert in_loop == (
        "Pinning each batch in the loop, then copying it, was faster than a plain copy: 30.0 us against 40.0 us per "
        "batch (0.75 times its time; every one of the 5 repeats below every plain one)."
    )
    assert already.startswith("Copying a batch that was pinned ahead of time was faster than a plain copy: 20.0 us")


def test_findings_when_pinning_in_the_loop_is_slower() -> None:
    in_loop, _ = transfer.pinning_findings(_times(plain=20 * US, in_loop=40 * US, pinned=15 * US))
    assert in_loop == (
        "Pinning each batch in the loop, then copying it, was slower than a plain copy: 40.0 us against 20.0 us per "
        "batch (2.00 times its time; every one of the 5 repeats above every plain one)."
    )


def test_findings_within_the_spread_claim_no_difference() -> None:
    in_loop, already = transfer.pinning_findings(
        _times(plain=20 * US, in_loop=21 * US, pinned=20.5 * US, jitter=1 * US)
    )
    assert in_loop == (
        "Pinning each batch in the loop, then copying it, made no clear difference to a plain copy: 21.0 us against "
        "20.0 us per batch, and the repeats overlap."
    )
    assert "no clear difference" in already
    assert "faster" not in in_loop + already and "slower" not in in_loop + already


def test_report_lists_every_way_with_its_median_and_spread() -> None:
    batch = torch.zeros(64, 1, 28, 28)
    report = transfer.pinning_report(batch, _times(plain=40 * US, in_loop=30 * US, pinned=20 * US))
    lines = report.splitlines()
    assert lines[0] == "batch (64, 1, 28, 28) float32, 196 KiB:"
    assert [line.split()[0:2] for line in lines[1:4]] == [["plain", "40.0"], ["pin", "in"], ["pinned", "already"]]
    assert "(spread 5%)" in lines[1]  # (42 - 38) / 40 us
    assert lines[4].startswith("Pinning each batch in the loop") and lines[5].startswith("Copying a batch")


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_measurement_refuses_a_device_that_is_not_a_cuda_gpu(device: str) -> None:
    with pytest.raises(ValueError, match="Pinned memory serves copies to a CUDA GPU"):
        transfer.time_batch_copies(torch.zeros(4), device)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times real copies to a CUDA GPU")
def test_the_measurement_on_a_gpu_gives_every_way_its_repeats() -> None:
    times = transfer.time_batch_copies(torch.zeros(64, 1, 28, 28), "cuda", copies=5, repeats=3)
    assert set(times) == set(transfer.COPY_WAYS)
    assert all(len(found) == 3 and all(t > 0 for t in found) for found in times.values())
