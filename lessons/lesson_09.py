"""Lesson 09's own code: the figure of its ladder, each change's throughput with the speed-up it was measured with.
The ladder itself is ``helpers.ladder``, printed piece by piece in lesson 08."""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.plotting import new_axes


def plot_speedups(
    labels: list[str],
    images_per_s: list[float],
    kept: list[bool],
    speedups: list[float] | None = None,
    title: str = "Training-step throughput, one change at a time",
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Images/s of each variant of a step, top to bottom; kept changes solid, dropped ones hatched and grey. Each bar
    after the first is labelled with ``speedups[i]``, its speed-up over the step it was timed against (the first bar,
    the baseline, has none); without ``speedups``, with its ratio to the first bar, and the x label says that the two
    bars of such a ratio were timed at different moments."""
    if speedups is not None and len(speedups) != len(labels):
        raise ValueError(f"{len(labels)} labels but {len(speedups)} speed-ups.")
    ax = new_axes(ax, figsize=(7.0, 0.6 + 0.45 * len(labels)))
    positions = list(range(len(labels)))[::-1]
    for i, (y, rate, ok) in enumerate(zip(positions, images_per_s, kept, strict=True)):
        ax.barh(y, rate, color="tab:green" if ok else "lightgrey", hatch=None if ok else "//", edgecolor="grey")
        ratio = rate / images_per_s[0] if speedups is None else speedups[i]
        text = f"{rate:,.0f}" if i == 0 else f"{rate:,.0f} ({ratio:.2f}x)"
        ax.annotate(text, (rate, y), xytext=(3, 0), textcoords="offset points", va="center")
    ax.set_yticks(positions, labels)
    if speedups is None:
        note = "(Nx): against the first bar, timed at a different moment"
    else:
        note = "(Nx): against the step it was timed in turns with"
    ax.set(xlabel=f"images per second (median of repeats)\n{note}", title=title)
    ax.margins(x=0.3)
    return ax
