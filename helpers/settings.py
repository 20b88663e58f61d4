"""The environment variables that steer the course, each named and read here and nowhere else.

The runner, the tests, CI and the GPU check set them; a learner sets none and gets each notebook's own defaults. Each
reader returns the value parsed, or raises ValueError whose message names the variable, the value it has and the fix.
Importing this module loads neither torch nor anything else heavy, so the runner and the GPU check can read and refuse
a setting on a bare Python in a fraction of a second.
"""

from __future__ import annotations

import os
from pathlib import Path

from helpers.arguments import parse_flag

DEVICE = "COURSE_DEVICE"
"""What a notebook's ``DEVICE = "auto"`` resolves to (``helpers.devices.pick_device``); unset or "auto": the best
device here."""
QUICK = "COURSE_QUICK"
"""A yes word turns on every lesson's quick mode (small sizes), whatever its parameters cell says."""
DATASET = "COURSE_DATASET"
"""MNIST or FashionMNIST instead of each notebook's ``DATASET``."""
DATA_DIR = "COURSE_DATA_DIR"
"""The folder the datasets are read from and unpacked or downloaded into, instead of the default one."""

NAMES = (DEVICE, QUICK, DATASET, DATA_DIR)

DATASET_NAMES = ("MNIST", "FashionMNIST")
"""The datasets the course trains on, spelt as torchvision names their classes."""


def canonical_name(name: str) -> str:
    """ "mnist" -> "MNIST", "fashion-mnist" and "Fashion MNIST" -> "FashionMNIST"; ValueError for anything else."""
    if not isinstance(name, str):
        raise ValueError(f"The dataset must be given by name, got {name!r}. Choose one of: {', '.join(DATASET_NAMES)}.")
    key = "".join(name.replace("-", "").replace("_", "").split()).lower()
    for canonical in DATASET_NAMES:
        if canonical.lower() == key:
            return canonical
    raise ValueError(f"Unknown dataset {name!r}. Choose one of: {', '.join(DATASET_NAMES)}.")


def given(name: str) -> str | None:
    """The value of variable ``name`` as it is set, for messages; None where it is unset or empty."""
    return os.environ.get(name) or None


def device() -> str | None:
    """The device ``$COURSE_DEVICE`` names, spaces stripped; None where it is unset, blank or "auto". Whether that
    device exists here takes torch to find out, so ``helpers.devices.pick_device`` checks it and names the variable."""
    value = os.environ.get(DEVICE, "").strip()
    return None if value.lower() in ("", "auto") else value


def quick() -> bool:
    """Whether ``$COURSE_QUICK`` is a yes word (unset, blank or a no word: False); ValueError for anything else."""
    value = os.environ.get(QUICK, "")
    if not value.strip():
        return False
    answer = parse_flag(value)
    if answer is None:
        raise ValueError(
            f"{QUICK}={value!r} is set in the environment, but it is not a yes/no value. Set it to one of 1/0, "
            "true/false, yes/no, on/off (any case), or unset it."
        )
    return answer


def dataset() -> str | None:
    """The dataset ``$COURSE_DATASET`` names, spelt as the course spells it ("fashion-mnist" -> "FashionMNIST"); None
    where it is unset or blank; ValueError for a name the course does not know."""
    value = os.environ.get(DATASET, "").strip()
    if not value:
        return None
    try:
        return canonical_name(value)
    except ValueError as exc:
        raise ValueError(
            f"{DATASET}={value!r} is set in the environment: {exc} Set it to one of those, or unset it."
        ) from None


def data_dir_given() -> Path | None:
    """The folder ``$COURSE_DATA_DIR`` names, ``~`` expanded; None where it is unset or empty. Whether data can be kept
    there is ``helpers.data.data_dir_problem``'s question, whose message names the variable."""
    value = given(DATA_DIR)
    return None if value is None else Path(value).expanduser()
