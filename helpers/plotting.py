"""What every figure of the course starts from: a new Axes of the course's size, or the one a caller passes in.

Each lesson's own figures are drawn in its module in ``lessons/`` on these Axes; the notebook shows them."""

from __future__ import annotations

import matplotlib.pyplot as plt


def new_axes(ax: plt.Axes | None = None, figsize: tuple[float, float] = (6.4, 3.6)) -> plt.Axes:
    """The Axes to draw on: ``ax`` itself, or one on a new figure."""
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax
