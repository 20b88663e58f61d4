"""Matplotlib figures the lessons show: timings, speed-ups, training curves, image grids.

Each function draws on a new figure (or the ``ax`` it is given) and returns the Axes; the notebook shows it."""

from __future__ import annotations

import matplotlib.pyplot as plt


def new_axes(ax: plt.Axes | None = None, figsize: tuple[float, float] = (6.4, 3.6)) -> plt.Axes:
    """The Axes to draw on: ``ax`` itself, or one on a new figure."""
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


# --- lesson 01 ---
def plot_copy_bandwidth(
    sizes_bytes: list[int], gb_per_s: dict[str, list[float]], title: str = "Copy bandwidth", ax: plt.Axes | None = None
) -> plt.Axes:
    """Bandwidth (GB/s) against copy size (MiB, log scale), one line per kind of copy ("pageable", "pinned")."""
    ax = new_axes(ax)
    mib = [s / 2**20 for s in sizes_bytes]
    for label, values in gb_per_s.items():
        ax.plot(mib, values, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="copy size (MiB)", ylabel="bandwidth (GB/s)", ylim=(0, None), title=title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


# --- lesson 05 ---
def pipeline_bars(rates: dict[str, dict[str, float]], ax: plt.Axes | None = None) -> plt.Axes:
    """Grouped horizontal bars of images/s: ``rates[pipeline][task]``, on a log scale (they differ 1000-fold)."""
    ax = new_axes(ax, figsize=(7.4, 3.8))
    pipelines = list(rates)
    tasks = list(dict.fromkeys(t for per_task in rates.values() for t in per_task))
    height = 0.8 / len(tasks)
    for j, task in enumerate(tasks):
        ys = [i + (j - (len(tasks) - 1) / 2) * height for i in range(len(pipelines))]
        ax.barh(ys, [rates[p].get(task, float("nan")) for p in pipelines], height=height, label=task)
    ax.set_yticks(range(len(pipelines)), pipelines)
    ax.invert_yaxis()  # the lab's setup on top, as in the table
    ax.set(xscale="log", xlabel="images per second (log scale)")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(axis="x", which="major", alpha=0.3)
    return ax


def batch_size_curves(rates: dict[str, dict[int, float]], ax: plt.Axes | None = None) -> plt.Axes:
    """Images/s against batch size, one line per device: ``rates[device][batch_size]``."""
    ax = new_axes(ax)
    for device, per_size in rates.items():
        sizes = sorted(per_size)
        ax.plot(sizes, [per_size[s] for s in sizes], marker="o", label=device)
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel="batch size", ylabel="training images per second")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax


def step_time_curves(step_seconds: dict[str, dict[int, float]], ax: plt.Axes | None = None) -> plt.Axes:
    """Milliseconds per training step against batch size, one line per device: ``step_seconds[device][batch]``. Grey
    guides from each device's smallest batch, flat (fixed costs per step set the pace) and in proportion to the batch
    (arithmetic does), show by where the line runs what bounds the step."""
    ax = new_axes(ax)
    for i, (device, per_size) in enumerate(step_seconds.items()):
        sizes = sorted(per_size)
        ms = [per_size[s] * 1e3 for s in sizes]
        ax.plot(sizes, ms, marker="o", color=f"C{i}", label=device)
        ax.plot(sizes, [ms[0]] * len(sizes), color="grey", linestyle=":", linewidth=1)
        ax.plot(sizes, [ms[0] * s / sizes[0] for s in sizes], color="grey", linestyle="--", linewidth=1)
    ax.plot([], [], color="grey", linestyle=":", label="flat: fixed costs per step")
    ax.plot([], [], color="grey", linestyle="--", label="in proportion: arithmetic")
    ax.set_xscale("log", base=2)
    ax.set(yscale="log", xlabel="batch size", ylabel="milliseconds per training step")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return ax


def training_curves(history, axes=None) -> list[plt.Axes]:
    """Loss and accuracy per epoch, training and validation, from a ``helpers.training.History``."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(9.6, 3.4), layout="constrained")
    epochs = range(1, len(history.train_loss) + 1)
    for ax, metric in zip(axes, ("loss", "accuracy"), strict=True):
        for split, label in (("train", "training"), ("val", "validation")):
            values = getattr(history, f"{split}_{metric}")
            if values:
                ax.plot(epochs[: len(values)], values, marker="o", label=label)
        ax.set(xlabel="epoch", ylabel=metric, xticks=list(epochs))
        ax.legend()
        ax.grid(alpha=0.3)
    return list(axes)


def prediction_grid(images, labels, predictions, class_names: list[str], ncols: int = 8) -> plt.Figure:
    """Images with their predicted class; a wrong prediction is titled in red with the true class after it."""
    nrows = -(-len(images) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.35 * ncols, 1.55 * nrows), layout="constrained", squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, img, true, pred in zip(axes.flat, images, labels, predictions, strict=False):
        ax.imshow(img.squeeze().cpu(), cmap="gray")  # (1, H, W) -> (H, W); normalised values only shift the colours
        ok = int(true) == int(pred)
        title = class_names[int(pred)] if ok else f"{class_names[int(pred)]}\n(is {class_names[int(true)]})"
        ax.set_title(title, fontsize=8, color="black" if ok else "red")
    return fig


# --- lesson 06 ---
def plot_step_times(
    seconds: dict[str, float], title: str = "One training step", ax: plt.Axes | None = None
) -> plt.Axes:
    """Horizontal bars of milliseconds per step, one per setup ("1 GPU", "DataParallel, 2 GPUs"), labelled."""
    ax = new_axes(ax, figsize=(6.4, 0.6 + 0.5 * len(seconds)))
    ms = [s * 1e3 for s in seconds.values()]
    bars = ax.barh(list(seconds), ms, color=[f"C{i}" for i in range(len(ms))])
    ax.bar_label(bars, labels=[f"{v:.1f} ms" for v in ms], padding=3)
    ax.invert_yaxis()  # first entry on top
    ax.set(xlabel="milliseconds per step (median)", xlim=(0, max(ms) * 1.25), title=title)
    return ax


# --- lesson 07 ---
def plot_rank_assignment(
    owners: list[list[int]], title: str = "Which rank gets each sample", ax: plt.Axes | None = None
) -> plt.Axes:
    """One row per epoch, one column per dataset index, coloured by the rank that trains on that sample."""
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    grid = np.asarray(owners)  # (epochs, samples)
    ranks = int(grid.max()) + 1
    ax = new_axes(ax, figsize=(6.4, 0.9 + 0.45 * len(owners)))
    ax.imshow(grid, cmap=ListedColormap([f"C{r}" for r in range(ranks)]), vmin=-0.5, vmax=ranks - 0.5, aspect="auto")
    ax.set_xticks(range(grid.shape[1]))
    ax.set_yticks(range(grid.shape[0]), [f"epoch {e}" for e in range(grid.shape[0])])
    ax.set(xlabel="dataset index", title=title)
    handles = [Patch(color=f"C{r}", label=f"rank {r}") for r in range(ranks)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return ax


# --- lessons 08 to 10 ---
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


def plot_batch_search(
    tried: list[tuple[int, bool]], limit: int | None = None, title: str = "", ax: plt.Axes | None = None
) -> plt.Axes:
    """The batch sizes a largest-batch search tried, in order: green where the step fitted, red where it ran out; a
    known ``limit`` (a simulated budget) is drawn as a dashed line."""
    ax = new_axes(ax)
    if limit is not None:
        ax.axhline(limit, color="grey", linestyle="--", linewidth=1, label=f"limit ({limit})")
    tries = list(range(1, len(tried) + 1))
    ax.plot(tries, [size for size, _ in tried], color="grey", linewidth=1, zorder=1)
    for ok, label, color in ((True, "fits", "tab:green"), (False, "out of memory", "tab:red")):
        points = [(t, s) for t, (s, fit) in zip(tries, tried, strict=True) if fit == ok]
        if points:
            ax.scatter(*zip(*points, strict=True), color=color, label=label, zorder=2)
    ax.set_yscale("log", base=2)
    ax.set(xticks=tries, xlabel="try", ylabel="batch size", title=title)
    ax.legend()
    return ax
