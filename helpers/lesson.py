"""What every lesson does first and last: settle its settings, and record the figures the course runner reports.

The environment variables below let the course runner, the tests and CI steer a notebook without editing it:
a learner who sets none of them gets the defaults written in the notebook's parameters cell.

- ``COURSE_DEVICE``: the device ``"auto"`` resolves to (see ``helpers.devices.pick_device``).
- ``COURSE_QUICK=1``: small sizes, so a notebook runs in seconds.
- ``COURSE_DATASET``: the dataset to use instead of the notebook's default (e.g. ``FashionMNIST`` offline).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import random
import re
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

import torch

from helpers import devices
from helpers.data import ENV_DATASET, canonical_name

ENV_QUICK = "COURSE_QUICK"
RECORD_MIME = "application/vnd.pytorch-gpu-course.record+json"
"""Notebook outputs of this type carry figures for the course runner's table."""


@dataclass(frozen=True)
class Settings:
    """What a lesson runs with, after the environment has had its say."""

    device: torch.device
    quick: bool
    dataset: str | None
    seed: int


def env_flag(name: str) -> bool:
    """True when the environment variable is set to 1, true, yes or on."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _emit(text: str, record: dict) -> None:
    """Show ``text``; in a notebook, attach ``record`` as data the course runner reads back."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display({"text/plain": text, RECORD_MIME: record}, raw=True)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's (if installed) and PyTorch's generators on every device."""
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def start(
    device: str | torch.device = "auto", quick: bool = False, dataset: str | None = None, seed: int = 0
) -> Settings:
    """Resolve a lesson's parameters against the environment, seed, and print one line saying what was chosen."""
    chosen = devices.pick_device(device)
    quick = quick or env_flag(ENV_QUICK)
    notes = [f"device {chosen}"]
    if device == "auto" and os.environ.get(devices.ENV_DEVICE, "auto").strip().lower() != "auto":
        notes[0] += f" (from {devices.ENV_DEVICE})"
    notes.append("quick mode" + (f" (from {ENV_QUICK})" if env_flag(ENV_QUICK) else "") if quick else "full run")
    if dataset is not None:
        override = os.environ.get(ENV_DATASET, "").strip()
        dataset = canonical_name(override or dataset)
        notes.append(f"dataset {dataset}" + (f" (from {ENV_DATASET})" if override else ""))
    seed_everything(seed)
    notes.append(f"seed {seed}")
    _emit("Lesson settings: " + ", ".join(notes), {"device": str(chosen), "quick": quick, "dataset": dataset})
    return Settings(device=chosen, quick=quick, dataset=dataset, seed=seed)


def headline(label: str, value: str) -> None:
    """Show and record the lesson's headline figure, e.g. ``headline("test accuracy", "88.2%")``."""
    _emit(f"Headline: {label}: {value}", {"headline": f"{label}: {value}"})


def cuda_gpus(needed: int, shows: str) -> bool:
    """True when at least ``needed`` CUDA GPUs are visible; otherwise print one line on what is skipped and why."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count >= needed:
        return True
    print(f"Skipped (needs {needed} CUDA GPU{'s' if needed > 1 else ''}, this machine has {count}): {shows}")
    return False


class ErrorExpectationFailed(AssertionError):
    """A block run under ``expect_error`` did not raise the error the lesson is about."""


@dataclass
class CaughtError:
    """What ``expect_error`` caught: the exception, and the line of the block that raised it."""

    error: BaseException | None = None
    line: str = ""


def _raising_line(exc: BaseException, block: FrameType) -> str:
    """``line N: source`` of the block's own line that raised (the cell's line, not one deep inside a library)."""
    found = [lineno for frame, lineno in traceback.walk_tb(exc.__traceback__) if frame is block]
    if not found:
        return ""
    source = linecache.getline(block.f_code.co_filename, found[-1], block.f_globals).strip()
    return f"line {found[-1]}: {source}"


@contextlib.contextmanager
def expect_error(
    kind: type[BaseException] | tuple[type[BaseException], ...], match: str | None = None
) -> Iterator[CaughtError]:
    """Run a block that must raise ``kind`` (its message matching the regular expression ``match``), and go on.

    The error is shown as a learner would meet it (the line of the block that raised it, then type and message) on
    stderr, so a notebook front end shows it as an error, and the cell ends normally, so "Run all" carries on.
    If the block raises nothing, or another error, or a message that does not match, ErrorExpectationFailed is
    raised: a lesson whose point has gone stale fails instead of printing nothing. Taught in lesson 00.
    """
    block = sys._getframe(2)  # the cell (or function) holding the ``with`` statement
    caught = CaughtError()
    kinds = kind if isinstance(kind, tuple) else (kind,)
    wanted = " or ".join(k.__name__ for k in kinds)
    try:
        yield caught
    except kinds as exc:
        message = str(exc)
        if match is not None and not re.search(match, message):
            raise ErrorExpectationFailed(
                f"expected {wanted} with a message matching {match!r}, got {type(exc).__name__}: {message}"
            ) from exc
        caught.error, caught.line = exc, _raising_line(exc, block)
        shown = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
        sys.stdout.flush()
        print(f"{caught.line}\n{shown}" if caught.line else shown, file=sys.stderr, flush=True)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise ErrorExpectationFailed(f"expected {wanted}, got {type(exc).__name__}: {exc}") from exc
    else:
        raise ErrorExpectationFailed(f"expected {wanted}, but the block raised nothing")
