"""Child processes a test stops with Ctrl-C (SIGINT), as a learner or maintainer would."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_interruptible(command: Sequence[str]) -> subprocess.Popen[str]:
    """Start ``command`` from the clone's root, its output captured as text, with SIGINT at its default disposition:
    Ctrl-C then reaches it even where the tests themselves were started with SIGINT ignored (nohup, ``&``)."""
    return subprocess.Popen(
        list(command),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
