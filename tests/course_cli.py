"""Run the course runner (``python -m tools.course``) as a child process, the way a maintainer does, from the root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def command(*args: str) -> list[str]:
    """``python -m tools.course ARGS`` with this interpreter."""
    return [sys.executable, "-m", "tools.course", *args]


def run_lessons_command(folder: Path, output: Path, *extra: str) -> list[str]:
    """``run`` over the lessons in ``folder`` into ``output``, without a progress bar, on the offline dataset."""
    return command(
        "run", "--notebooks", str(folder), "--output", str(output), "--no-progress", "--dataset", "FashionMNIST", *extra
    )


def run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``args`` (from ``command`` or ``run_lessons_command``) to the end; stdout and stderr as text."""
    env = {**os.environ, **(env or {})}
    return subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def start(args: list[str]) -> subprocess.Popen:
    """Start ``args`` without waiting, stdout and stderr piped as text, so a test can signal it while it runs."""
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
