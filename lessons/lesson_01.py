"""Lesson 01's own code: a fresh Python process to show CUDA_VISIBLE_DEVICES in (a process reads it once, when CUDA
starts), what that process's answers mean, and the figure of the copy benchmark."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

import matplotlib.pyplot as plt

from helpers.plotting import new_axes


def child_output(code: str, env: Mapping[str, str | None] | None = None, timeout: float = 300.0) -> str:
    """Run ``code`` in a fresh Python process, the place to show a setting read once per process such as
    CUDA_VISIBLE_DEVICES, and return its stdout, stripped (lesson 01). ``env`` edits the child's environment: a string
    sets a variable, ``None`` removes it; the rest is inherited."""
    if not isinstance(code, str) or not code.strip():
        raise ValueError("code must be the Python source to run in the child, as a non-empty string.")
    child_env = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            child_env.pop(name, None)
        elif isinstance(value, str):
            child_env[name] = value
        else:
            raise TypeError(f"env[{name!r}] must be a string (to set it) or None (to remove it), got {value!r}.")
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise ChildProcessError(
            f"The child Python process did not finish within {timeout:g} s; a busy machine can be that slow "
            "(importing torch takes seconds): run the cell again, or pass a longer timeout."
        ) from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise ChildProcessError(f"The child Python process failed (exit status {done.returncode}): {said[-1]}")
    return done.stdout.strip()


def hiding_outcome(machine_gpus: int, count: int, tensor_on: str | None) -> str:
    """What a child process shows about hiding GPUs (lesson 01): ``machine_gpus`` seen without the variable, ``count``
    from the child's ``torch.cuda.device_count()`` with it, ``tensor_on`` where a "cuda" tensor landed (None: no GPU
    would take it)."""
    if machine_gpus < 0 or count < 0:
        raise ValueError(f"GPU counts cannot be negative, got machine_gpus={machine_gpus}, count={count}.")
    if machine_gpus == 0:
        return "nothing to hide: this machine shows no CUDA GPU even without the variable"
    if tensor_on is None:
        if count == 0:
            return "hidden: no GPU counted, and no tensor could be put on one"
        return f"device_count() said {count}, yet no tensor could be put on a GPU"
    if count == 0:
        return f"NOT hidden: device_count() said 0, yet a tensor still landed on {tensor_on}"
    return f"NOT hidden: device_count() said {count}, and a tensor landed on {tensor_on}"


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
