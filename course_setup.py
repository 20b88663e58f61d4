"""What each lesson's first cell calls after installing the course: ``check(version, ref)``.

The check lives in a module of its own, under a name no other package uses, because the thing it checks is
``helpers``: a common name, which a learner's own ``helpers.py`` or an older copy of the course may hold. It raises
``SetupError`` with the file it found and the fix; Jupyter shows that message without a traceback, and Run all stops.

The first cell installs the course with ``--no-deps``, so that pip never replaces the platform's PyTorch (on Colab or
Kaggle, gigabytes, and a build that may need a newer NVIDIA driver than the machine has). ``check`` then stops with
one line where PyTorch or torchvision is missing or older than the course supports, and installs the course's other
needs (matplotlib, tqdm) where they are missing, with the installed torch and torchvision pinned.

Standard library only, and nothing here imports torch: it runs before anything else of the course.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

COURSE = "pytorch-on-gpus"
REPOSITORY = "https://github.com/pytorch-gpu-course/pytorch-on-gpus"
"""Where the lessons install the course from (``tools.launch`` checks it against pyproject.toml)."""
DISTRIBUTION = "pytorch-gpu-course-helpers"
"""The course's package name on pip's side (pyproject.toml's ``[project] name``)."""
PLATFORM = {"torch": "2.8", "torchvision": "0.23"}
"""What the platform brings and the course never installs or replaces, with the lowest version it supports
(lessons.lesson_00's TORCH_FLOOR and TORCHVISION_FLOOR: a test holds them together)."""


class SetupError(Exception):
    """Stops the first cell with its message alone."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook: the lines to show instead of a traceback
        return [f"SetupError: {self}"]


def release(version: str) -> tuple[int, ...]:
    """(2, 8, 0) from "2.8.0+cu128", (2, 10, 0) from "2.10.0a0+git1234": the numbers a floor is compared with."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in version.split("+")[0].split(".")[:3])


def installed(name: str) -> str | None:
    """The installed version of ``name``, read from its metadata without importing it (a build without metadata, such
    as one from source on the path, is imported for its ``__version__``); None if absent."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        if importlib.util.find_spec(name) is None:
            return None
        return str(getattr(importlib.import_module(name), "__version__", "0"))


def platform_problem() -> str | None:
    """One line saying which of PyTorch and torchvision is missing or below the course's floor, and what to do; None
    when both are there and new enough."""
    found = {name: installed(name) for name in PLATFORM}
    short = [n for n, v in found.items() if v is None or release(v) < release(PLATFORM[n])]
    if not short:
        return None
    what = ", ".join(f"{n} {found[n]}" if found[n] else f"no {n}" for n in short)
    wanted = " ".join(f'"{n}>={PLATFORM[n]}"' for n in PLATFORM)
    return (
        f"this Python has {what}; the course needs torch {PLATFORM['torch']} and torchvision {PLATFORM['torchvision']} "
        f"or newer, and never installs or replaces PyTorch itself. Fix: a newer runtime (Colab and Kaggle update "
        f"theirs), or run `%pip install -U {wanted}` yourself, then restart the runtime (the kernel) and run this cell "
        "again."
    )


def other_needs() -> list[str]:
    """The course's requirements besides PyTorch and torchvision ("matplotlib>=3.7", ...), as its install lists them;
    empty where the course is not installed as a package (a clone on the path)."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    needs = []
    for requirement in requires:
        if ";" in requirement:  # an extra's ("runner", "test") or another platform's
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group()
        if name.lower() not in PLATFORM:
            needs.append(requirement.replace(" ", ""))
    return needs


def unmet(needs: list[str]) -> list[str]:
    """The requirements of ``needs`` ("name>=X.Y" or a bare name) that the installed packages do not meet."""
    missing = []
    for requirement in needs:
        name, _, floor = requirement.partition(">=")
        version = installed(name)
        if version is None or (floor and release(version) < release(floor)):
            missing.append(requirement)
    return missing


def install(needs: list[str]) -> None:
    """pip-install ``needs`` with the installed torch and torchvision pinned, so pip cannot replace them."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.write("".join(f"{name}=={installed(name)}\n" for name in PLATFORM if installed(name)))
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *needs, "-c", pins.name], check=False)
    finally:
        os.unlink(pins.name)
    if done.returncode != 0:
        raise SetupError(
            f"could not install {', '.join(needs)} (pip says why above). On Kaggle, switch on Settings > Internet; "
            "then run this cell again."
        )


def check(version: str, ref: str = "main") -> None:
    """Raise ``SetupError`` unless PyTorch and torchvision meet the course's floor and ``import helpers`` finds the
    course's package in ``version`` (the notebook's); then install the course's other needs where they are missing.

    ``ref`` is the git ref the notebook's install line names; the fix for an older copy reinstalls from it.
    """
    importlib.invalidate_caches()  # the first cell may have installed the course a moment ago
    problem = platform_problem()
    if problem:
        raise SetupError(problem)
    import helpers

    ours = getattr(helpers, "COURSE", None) == COURSE
    found = getattr(helpers, "__version__", None)
    if ours and found == version:
        missing = unmet(other_needs())
        if missing:
            install(missing)
        return
    where = getattr(helpers, "__file__", None) or list(helpers.__path__)  # a folder without __init__.py has no file
    if ours:
        what = f"version {found}"
        fix = f'install version {version}:  %pip install --no-deps --force-reinstall "git+{REPOSITORY}@{ref}"'
    else:
        what = "not the course's package"
        fix = "rename your own helpers.py or helpers folder (or uninstall the package it came from)"
    raise SetupError(
        f"this notebook needs the course helpers {version}, but `import helpers` found {where} ({what}).\n"
        f"Fix: {fix}, then restart the runtime (the kernel) and run this cell again."
    )
