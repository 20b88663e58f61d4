"""What each lesson's first cell calls after installing the course: ``check(version, ref)``.

The check lives in a module of its own, under a name no other package uses, because the thing it checks is
``helpers``: a common name, which a learner's own ``helpers.py`` or an older copy of the course may hold. It raises
``SetupError`` with the file it found and the fix; Jupyter shows that message without a traceback, and Run all stops.
"""

from __future__ import annotations

import importlib

COURSE = "pytorch-on-gpus"
REPOSITORY = "https://github.com/pytorch-gpu-course/pytorch-on-gpus"
"""Where the lessons install the course from (``tools.launch`` checks it against pyproject.toml)."""


class SetupError(Exception):
    """Stops the first cell with its message alone."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook: the lines to show instead of a traceback
        return [f"SetupError: {self}"]


def check(version: str, ref: str = "main") -> None:
    """Raise ``SetupError`` unless ``import helpers`` finds the course's package in ``version`` (the notebook's).

    ``ref`` is the git ref the notebook's install line names; the fix for an older copy reinstalls from it.
    """
    importlib.invalidate_caches()  # the first cell may have installed the course a moment ago
    import helpers

    ours = getattr(helpers, "COURSE", None) == COURSE
    found = getattr(helpers, "__version__", None)
    if ours and found == version:
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
