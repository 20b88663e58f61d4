"""Lesson 10's largest-batch search, its figure, its int32 bound and its cache release (lessons.lesson_10), run against
fake step functions, so no GPU is needed."""

from __future__ import annotations

import pytest
import torch

from helpers.models import CNN
from lessons import lesson_10


class FakeStep:
    """A step function that runs out of memory above ``limit`` images, recording every size it was asked for."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls: list[int] = []

    def __call__(self, batch_size: int) -> None:
        self.calls.append(batch_size)
        if batch_size > self.limit:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (fake: {batch_size} > {self.limit})")


def smallest_failure(result: lesson_10.BatchSearch) -> int | None:
    """The smallest size that ran out of memory in the search, or None if every size tried fitted."""
    failed = [size for size, ok in result.tried if not ok]
    return min(failed) if failed else None


def test_halves_until_a_size_fits_without_refining():
    step = FakeStep(limit=300)
    result = lesson_10.largest_batch_size(step, 1024, refine=False, clear=lambda: None)
    assert result.largest == 256
    assert step.calls == [1024, 512, 256]
    assert result.tried == [(1024, False), (512, False), (256, True)]
    assert smallest_failure(result) == 512


@pytest.mark.parametrize("limit", [1, 2, 3, 300, 511, 512, 513, 1000])
def test_refining_finds_the_exact_limit(limit):
    step = FakeStep(limit=limit)
    result = lesson_10.largest_batch_size(step, 1024, clear=lambda: None)
    assert result.largest == limit
    assert all(ok == (size <= limit) for size, ok in result.tried)


def test_resolution_stops_the_refinement_early():
    step = FakeStep(limit=300)
    result = lesson_10.largest_batch_size(step, 1024, resolution=32, clear=lambda: None)
    assert 300 - 32 < result.largest <= 300
    assert smallest_failure(result) - result.largest <= 32


def test_start_that_fits_is_the_answer():
    step = FakeStep(limit=5000)
    result = lesson_10.largest_batch_size(step, 1024, clear=lambda: None)
    assert result.largest == 1024
    assert step.calls == [1024]
    assert smallest_failure(result) is None


def test_cache_is_cleared_after_every_try():
    step = FakeStep(limit=100)
    cleared = []
    result = lesson_10.largest_batch_size(step, 1024, clear=lambda: cleared.append(len(step.calls)))
    assert cleared == list(range(1, len(result.tried) + 1))


@pytest.mark.slow
def test_default_clear_runs_on_cpu():
    assert lesson_10.largest_batch_size(FakeStep(limit=10), 64).largest == 10


def test_nothing_fits_raises_the_out_of_memory_error():
    step = FakeStep(limit=0)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="fake: 1 > 0"):
        lesson_10.largest_batch_size(step, 64, clear=lambda: None)
    assert step.calls == [64, 32, 16, 8, 4, 2, 1]


def test_min_size_is_respected():
    step = FakeStep(limit=0)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        lesson_10.largest_batch_size(step, 100, min_size=30, clear=lambda: None)
    assert step.calls == [100, 50, 30]


def test_other_errors_propagate():
    def broken(batch_size: int) -> None:
        if batch_size < 100:
            raise ValueError("shapes do not match")
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(ValueError, match="shapes do not match"):
        lesson_10.largest_batch_size(broken, 256, clear=lambda: None)

    def plain_runtime_error(batch_size: int) -> None:
        raise RuntimeError("plain runtime error")  # a RuntimeError, but not the out-of-memory subclass

    with pytest.raises(RuntimeError, match="plain runtime error"):
        lesson_10.largest_batch_size(plain_runtime_error, 8)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"start": 0},
        {"start": -4},
        {"start": 2.5},
        {"start": True},
        {"start": 8, "min_size": 0},
        {"start": 8, "min_size": 16},
        {"start": 8, "resolution": 0},
    ],
)
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        lesson_10.largest_batch_size(FakeStep(limit=4), **kwargs)


def test_releasing_the_cache_collects_garbage_and_empties_only_a_cuda_cache(monkeypatch):
    collected, emptied = [], []
    monkeypatch.setattr(lesson_10.gc, "collect", lambda: collected.append(True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    lesson_10.release_cached_memory("cpu")
    assert (collected, emptied) == ([True], [])
    lesson_10.release_cached_memory("cuda:0")
    assert (collected, emptied) == ([True, True], [True])


def test_max_size_lets_the_search_grow_from_a_modest_start():
    step = FakeStep(limit=5000)
    result = lesson_10.largest_batch_size(step, 1024, max_size=2**20, clear=lambda: None)
    assert step.calls[:4] == [1024, 2048, 4096, 8192]  # doubling until the first failure
    assert result.largest == 5000
    assert smallest_failure(result) == 5001


def test_growing_stops_at_max_size():
    step = FakeStep(limit=10**9)
    result = lesson_10.largest_batch_size(step, 1024, max_size=3000, clear=lambda: None)
    assert step.calls == [1024, 2048, 3000]
    assert result.largest == 3000
    assert smallest_failure(result) is None


def test_max_size_does_not_change_a_search_that_halves():
    step = FakeStep(limit=300)
    result = lesson_10.largest_batch_size(step, 1024, max_size=4096, refine=False, clear=lambda: None)
    assert step.calls == [1024, 512, 256]
    assert result.largest == 256


@pytest.mark.parametrize("max_size", [512, 0, True, 2048.0])
def test_bad_max_size_raises_value_error(max_size):
    with pytest.raises(ValueError, match="max_size"):
        lesson_10.largest_batch_size(FakeStep(limit=4), 1024, max_size=max_size)


def test_relative_resolution_stops_within_that_fraction_of_the_size_that_fitted():
    # Room for about 3 million images: doubling from 4096 runs out at 4194304, then the search bisects. To the image it
    # takes 32 tries; within 1/16 of the size that fitted it stops after 15, the last four of them bisecting.
    exact = lesson_10.largest_batch_size(FakeStep(limit=3_067_000), 4096, max_size=2**22, clear=lambda: None)
    assert len(exact.tried) == 32 and exact.largest == 3_067_000
    step = FakeStep(limit=3_067_000)
    result = lesson_10.largest_batch_size(step, 4096, max_size=2**22, relative=1 / 16, clear=lambda: None)
    assert len(step.calls) == 15
    assert step.calls[10:] == [4194304, 3145728, 2621440, 2883584, 3014656]
    assert result.largest == 3014656 and result.smallest_failed == 3145728
    assert result.smallest_failed - result.largest <= result.largest / 16
    assert str(result).startswith("largest batch size that fits: 3014656; 3145728 ran out, 4.3% more (15 tries: ")


@pytest.mark.parametrize("limit", [300, 479, 480, 481, 1000, 4095])
def test_the_search_stops_as_soon_as_the_gap_is_within_the_fraction_and_not_before(limit):
    step = FakeStep(limit=limit)
    result = lesson_10.largest_batch_size(step, 4096, relative=1 / 8, clear=lambda: None)
    gap = result.smallest_failed - result.largest
    assert 0 < gap <= result.largest / 8  # stopped within the fraction ...
    assert result.largest <= limit < result.smallest_failed
    # ... and only then: the try before the last left a gap wider than the fraction of what had fitted by then.
    before = lesson_10.BatchSearch(0, result.tried[:-1])
    fitted = max(size for size, ok in before.tried if ok) if any(ok for _, ok in before.tried) else None
    if fitted is not None and before.smallest_failed is not None:
        assert before.smallest_failed - fitted > fitted / 8


def test_the_larger_of_resolution_and_relative_ends_the_search():
    step = FakeStep(limit=300)
    result = lesson_10.largest_batch_size(step, 1024, resolution=64, relative=1 / 32, clear=lambda: None)
    assert result.smallest_failed - result.largest <= 64  # 64 images allow more than 1/32 of ~300 does
    assert lesson_10.largest_batch_size(FakeStep(limit=300), 1024, relative=0.0, clear=lambda: None).largest == 300


@pytest.mark.parametrize("relative", [-0.1, 1.0, 2, True, "1/16"])
def test_bad_relative_raises_value_error(relative):
    with pytest.raises(ValueError, match="relative"):
        lesson_10.largest_batch_size(FakeStep(limit=4), 8, relative=relative)


def test_the_search_says_where_it_stopped():
    fitted = lesson_10.largest_batch_size(FakeStep(limit=10**9), 1024, max_size=2048, clear=lambda: None)
    assert fitted.stopped_at_max_size
    assert str(fitted) == (
        "largest batch size that fits: 2048, the max_size; no size tried ran out (2 tries: 1024 fits, 2048 fits)"
    )
    halved = lesson_10.largest_batch_size(FakeStep(limit=300), 1024, refine=False, clear=lambda: None)
    assert str(halved) == (
        "largest batch size that fits: 256; 512 ran out, 100.0% more (3 tries: 1024 OOM, 512 OOM, 256 fits)"
    )


POOLED_PER_IMAGE = 6 * 12 * 12  # the CNN's first max_pool2d: 6 channels of 24 x 24 pooled 2 x 2 to 12 x 12


class Int32Step(FakeStep):
    """A GPU with room for ``limit`` images whose max_pool2d kernel, like CUDA's, counts its output in an int32."""

    def __call__(self, batch_size: int) -> None:
        if batch_size * POOLED_PER_IMAGE > 2**31 - 1:
            self.calls.append(batch_size)
            raise RuntimeError("integer out of range")  # what safe_downcast<int, int64_t> raises, not an OOM
        super().__call__(batch_size)


def test_elements_per_sample_reads_the_pooling_outputs_of_the_cnn_on_the_meta_device():
    model = CNN()
    assert lesson_10.elements_per_sample(model, (1, 28, 28)) == {"aten::max_pool2d_with_indices": POOLED_PER_IMAGE}
    assert all(p.device.type == "cpu" for p in model.parameters())  # the model itself is not moved
    both = lesson_10.elements_per_sample(model, (1, 28, 28), ["aten::max_pool2d_with_indices", "aten::convolution"])
    assert both["aten::convolution"] == 6 * 24 * 24  # the largest of the two convolutions' outputs


def test_largest_batch_within_int32_is_where_the_pooling_output_reaches_2_31():
    largest = lesson_10.largest_batch_within_int32(CNN(), (1, 28, 28))
    assert largest * POOLED_PER_IMAGE <= 2**31 - 1 < (largest + 1) * POOLED_PER_IMAGE
    assert largest == 2_485_513
    assert 2**21 < largest < 2**22  # 2**21 images stay within the limit, 2**22 (3.6e9 elements) do not
    assert lesson_10.largest_batch_within_int32(torch.nn.Linear(4, 2), (4,)) is None  # no pooling, no such bound


def test_a_search_bounded_by_the_int32_limit_ends_there_on_a_gpu_with_room_to_spare():
    bound = lesson_10.largest_batch_within_int32(CNN(), (1, 28, 28))
    roomy = Int32Step(limit=4_000_000)  # memory for more images than max_pool2d's kernel can count
    with pytest.raises(RuntimeError, match="integer out of range"):  # doubling to 2**22 reaches the kernel's limit
        lesson_10.largest_batch_size(roomy, 4096, max_size=2**22, clear=lambda: None)
    assert roomy.calls[-1] == 2**22
    result = lesson_10.largest_batch_size(Int32Step(limit=4_000_000), 4096, max_size=bound, clear=lambda: None)
    assert result.largest == bound and result.stopped_at_max_size
    assert str(result).startswith("largest batch size that fits: 2485513, the max_size; no size tried ran out")
    tight = lesson_10.largest_batch_size(Int32Step(limit=2_000_000), 4096, max_size=bound, clear=lambda: None)
    assert tight.largest == 2_000_000 and not tight.stopped_at_max_size  # memory runs out first: the usual search


def test_the_search_figure_marks_each_try_and_the_simulated_limit():
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")
    tried = lesson_10.largest_batch_size(FakeStep(limit=300), 1024, resolution=32, clear=lambda: None).tried
    ax = lesson_10.plot_batch_search(tried, 300, "search")
    fits, ran_out = ax.collections  # one scatter of the sizes that fitted, one of those that ran out
    assert [tuple(p) for p in fits.get_offsets()] == [(t, s) for t, (s, ok) in enumerate(tried, 1) if ok]
    assert [tuple(p) for p in ran_out.get_offsets()] == [(t, s) for t, (s, ok) in enumerate(tried, 1) if not ok]
    limit, path = ax.lines
    assert list(limit.get_ydata()) == [300, 300] and limit.get_linestyle() == "--"
    assert list(path.get_ydata()) == [size for size, _ in tried]
    plt.close(ax.figure)
