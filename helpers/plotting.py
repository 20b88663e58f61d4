"""Matplotlib figures the lessons show: timings, speed-ups, training curves, image grids.

Each function draws on a new figure (or the ``ax`` it is given) and returns the Axes; the notebook shows it.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

# --- shared --------------------------------------------------------------------------------------------------


def new_axes(ax: plt.Axes | None = None, figsize: tuple[float, float] = (6.4, 3.6)) -> plt.Axes:
    """The Axes to draw on: ``ax`` itself, or one on a new figure."""
    if ax is not None:
        return ax
    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


# --- lesson 01 -------------------------------------------------------------------------------------------------


def plot_copy_bandwidth(
    sizes_bytes: list[int],
    gb_per_s: dict[str, list[float]],
    title: str = "Copy bandwidth",
    ax: plt.Axes | None = None,
) -> plt.Axes:
    """Bandwidth (GB/s) against copy size (MiB, log scale), one line per kind of copy ("pageable", "pinned")."""
    ax = new_axes(ax)
    mib = [s / 2**20 for s in sizes_bytes]
    for label, values in gb_per_s.items():
        ax.plot(mib, values, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("copy size (MiB)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


# --- lesson 05 -------------------------------------------------------------------------------------------------

# --- lesson 06 -------------------------------------------------------------------------------------------------

# --- lesson 07 -------------------------------------------------------------------------------------------------

# --- lesson 08 -------------------------------------------------------------------------------------------------
