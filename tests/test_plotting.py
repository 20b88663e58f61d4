"""helpers.plotting: what the figures say in their labels, read back from the Axes (no image is compared)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from helpers import plotting


@pytest.fixture(autouse=True)
def close_figures():
    plt.switch_backend("Agg")  # no window, wherever the tests run
    yield
    plt.close("all")


def bar_labels(ax: plt.Axes) -> list[str]:
    return [child.get_text() for child in ax.texts]


def test_each_bar_shows_the_speed_up_it_was_measured_with_not_a_ratio_of_two_rows():
    # The ladder of lessons 08 and 09 on a GPU: the row "no loss.item()" ran at 27,809 images/s, 1.02x the 27,141 its
    # reference ran at in the same turns, though the reference's own row says 34,671 (timed at another moment).
    labels = ["baseline", "data resident", "no loss.item()", "batch 512"]
    rates = [7_629.0, 34_671.0, 27_809.0, 213_480.0]
    ax = plotting.plot_speedups(labels, rates, [True, True, False, True], speedups=[1.0, 5.06, 1.02, 7.94])
    assert bar_labels(ax) == ["7,629", "34,671 (5.06x)", "27,809 (1.02x)", "213,480 (7.94x)"]
    assert "timed in turns" in ax.get_xlabel()


def test_without_measured_speed_ups_the_ratio_to_the_first_bar_is_labelled_as_such():
    ax = plotting.plot_speedups(["baseline", "faster"], [100.0, 250.0], [True, True])
    assert bar_labels(ax) == ["100", "250 (2.50x)"]
    assert "against the first bar, timed at a different moment" in ax.get_xlabel()


def test_speed_ups_must_match_the_bars():
    with pytest.raises(ValueError, match="speed-ups"):
        plotting.plot_speedups(["a", "b"], [1.0, 2.0], [True, True], speedups=[1.0])
