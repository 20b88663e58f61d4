"""Lesson 08's own code: the figure of its timings (section 1, and the copy overlapping with a product in section 2).
Its training-step ladder is in ``helpers.ladder``, which lesson 09 climbs on from."""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.plotting import new_axes


def plot_hbars(
    labels: list[str],
    values: list[float],
    xlabel: str,
    title: str = "",
    fmt: str = "{:.3g}",
    log: bool = False,
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Horizontal bars, the first label on top, each bar annotated with its value formatted by ``fmt``."""
    ax = new_axes(ax, figsize=(6.4, 0.5 + 0.45 * len(labels)))
    positions = list(range(len(labels)))[::-1]
    ax.barh(positions, values, color="tab:blue")
    for y, value in zip(positions, values, strict=True):
        ax.annotate(fmt.format(value), (value, y), xytext=(3, 0), textcoords="offset points", va="center")
    ax.set_yticks(positions, labels)
    if log:
        ax.set_xscale("log")
    ax.set(xlabel=xlabel, title=title)
    ax.margins(x=0.2)
    return ax
