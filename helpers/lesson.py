"""What every lesson does first and last: settle its settings, and record the figures the course runner reports.

The runner, tests and CI steer notebooks unedited with ``COURSE_DEVICE``, ``COURSE_QUICK=1`` and ``COURSE_DATASET``."""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any

import torch

from helpers import arguments, devices, settings
from helpers.arguments import parse_flag
from helpers.data import canonical_name

RECORD_MIME = "application/vnd.pytorch-gpu-course.record+json"  # outputs carrying figures for the runner's table


class ParameterError(ValueError):
    """A lesson parameter or a COURSE_* variable has a value the lesson cannot use; the message names the fix."""

    def _render_traceback_(self) -> list[str]:  # Jupyter shows this one line instead of a traceback
        return [f"ParameterError: {self}"]


@dataclass(frozen=True)
class Settings:
    """What a lesson runs with, after the environment has had its say; ``params``: the checked keyword parameters."""

    device: torch.device
    quick: bool
    dataset: str | None
    seed: int
    params: dict[str, Any] = field(default_factory=dict, hash=False)


FIX = "Change it in the parameters cell, then run the notebook again from the top."
YES_NO = arguments.flag.allowed


_KINDS: dict[str, arguments.Kind] = {
    "positive int": arguments.positive_int,
    "positive number": arguments.positive_number,
    "positive ints": arguments.positive_ints,
    "bool": arguments.flag,
    "accuracy": arguments.accuracy,
}

PARAMETERS: dict[str, tuple[str, object]] = {
    "epochs": ("positive int", 2),
    "batch_size": ("positive int", 128),
    "small_batch": ("positive int", 64),
    "large_batch": ("positive int", 512),
    "lr": ("positive number", 0.01),
    "timing_batches": ("positive ints", [512, 4096]),
    "compile": ("bool", None),
    "target": ("accuracy", None),
    "runs": ("positive int", 3),
}
"""Keyword parameters ``start`` checks: name -> (kind, example or None where the kind's words give one); messages use
the capitals of the parameters cell."""


def check_parameter(name: str, value: object) -> object:
    """``value`` if it is allowed for the lesson parameter ``name`` (booleans as True/False, accuracies as fractions),
    else ParameterError naming what is allowed (in ``helpers.arguments``' words, as the command lines say it)."""
    if name not in PARAMETERS:
        raise TypeError(f"lesson.start() got an unknown parameter {name!r}; it knows {', '.join(PARAMETERS)}.")
    kind, example = PARAMETERS[name]
    if kind == "accuracy" and value is None:
        return None  # the lesson's own default
    try:
        return _KINDS[kind].check(value)
    except ValueError:
        shown, allowed = name.upper(), _KINDS[kind].allowed
        if kind == "accuracy":
            allowed = f"None (the lesson's default), {allowed}"
        elif example is not None:
            allowed += f", such as {example}"
        raise ParameterError(f"{shown} = {value!r} is not allowed: {shown} must be {allowed}. {FIX}") from None


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
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed)


def _dataset(dataset: str) -> tuple[str, str]:
    """The dataset to use, and how the settings line names where it came from."""
    try:
        named = canonical_name(dataset)
    except ValueError as exc:
        raise ParameterError(f"DATASET = {dataset!r} is not allowed: {exc} {FIX}") from None
    try:
        chosen = settings.dataset()
    except ValueError as exc:
        raise ParameterError(str(exc)) from None
    if chosen is None:
        return named, ""
    instead = "" if chosen == named else f", instead of the notebook's DATASET = {dataset!r}"
    return chosen, f" (from {settings.DATASET}{instead})"


def start(
    device: str | torch.device = "auto",
    quick: bool | str = False,
    dataset: str | None = None,
    seed: int = 0,
    **params: Any,
) -> Settings:
    """Resolve a lesson's parameters against the environment (``COURSE_QUICK`` can turn ``quick`` on), validate them
    (keyword ones, ``epochs=EPOCHS``, against ``PARAMETERS``), seed, and print one line of settings. A value the lesson
    cannot use raises ParameterError, naming it and what is allowed, before any work starts."""
    flag = parse_flag(quick)
    if flag is None:
        raise ParameterError(f"QUICK = {quick!r} is not allowed: QUICK must be {YES_NO}. {FIX}")
    checked = {name: check_parameter(name, value) for name, value in params.items()}
    try:
        from_env = settings.quick()
    except ValueError as exc:
        raise ParameterError(str(exc)) from None
    try:
        chosen = devices.pick_device(device)
    except ValueError as exc:  # a misspelt device: COURSE_DEVICE's message already names the variable
        if str(exc).startswith(settings.DEVICE):
            raise ParameterError(str(exc)) from None
        raise ParameterError(f"DEVICE = {str(device)!r} is not allowed: {exc} {FIX}") from None
    quick = flag or from_env
    notes = [f"device {chosen}"]
    if device == "auto" and settings.device() is not None:
        notes[0] += f" (from {settings.DEVICE})"
    notes.append("quick mode" + (f" (from {settings.QUICK})" if from_env else "") if quick else "full run")
    if dataset is not None:
        dataset, source = _dataset(dataset)
        notes.append(f"dataset {dataset}{source}")
    seed_everything(seed)
    notes.append(f"seed {seed}")
    _emit("Lesson settings: " + ", ".join(notes), {"device": str(chosen), "quick": quick, "dataset": dataset})
    return Settings(device=chosen, quick=quick, dataset=dataset, seed=seed, params=checked)


def headline(label: str, value: str) -> None:
    """Show and record the lesson's headline figure, e.g. ``headline("test accuracy", "88.2%")``."""
    _emit(f"Headline: {label}: {value}", {"headline": f"{label}: {value}"})
