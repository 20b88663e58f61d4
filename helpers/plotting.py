"""Matplotlib figures the lessons show: timings, speed-ups, training curves, image grids.

Each function draws on a new figure (or the ``ax`` it is given) and returns the Axes; the notebook shows it."""

from __future__ import annotations

import matplotlib.pyplot as plt


def new_axes(ax: plt.Axes | None = None, figsize: tuple[float, float] = (6.4, 3.6)) -> plt.Axes:
    """The Axes to draw on: ``ax`` itself, or one on a new figure."""
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax
