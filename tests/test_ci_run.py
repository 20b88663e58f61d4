"""CI runs the README's set-up as a newcomer types it: its two commands, read from the README, in a fresh copy of the
clone, with the pip that ``python3 -m venv`` brings; no step the README does not name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci" / "run"


def readme_block() -> list[str]:
    """The commands of the README's first bash block under "## Set up and run", as a reader sees them."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Set up and run\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.slow
def test_ci_reads_the_readmes_two_commands_from_the_readme() -> None:
    script = CI.read_text(encoding="utf-8")
    reader = re.search(r"<<'PY'\n(.*?)\nPY\n", script, flags=re.S).group(1)
    done = subprocess.run(
        [sys.executable, "-", "README.md"], input=reader, capture_output=True, text=True, cwd=ROOT, check=True
    )
    commands = done.stdout.splitlines()
    assert commands == readme_block()
    assert len(commands) == 2
    assert commands[0].startswith("python3 -m venv .venv && .venv/bin/pip install -r requirements.txt")
    assert commands[1] == ".venv/bin/python -m pytest"


def test_ci_takes_no_step_the_readme_does_not_name() -> None:
    script = CI.read_text(encoding="utf-8")
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    assert "--upgrade pip" not in code and "-U pip" not in code, "a newcomer's pip is the one venv brings"
    assert not re.search(r"ln -s\S* .*\.venv", code), ".venv must be made by the README's command, not linked"
    assert 'bash -euo pipefail -c "$command"' in code
