"""The setup cell's message names the line of pip's output that says why an install failed, with old and new pip.

``tests/pip_output/`` holds what pip wrote to stderr in six failed installs, captured with pip 23.2.1 (what
``python3 -m venv`` brings with Python 3.11) and pip 26.3, each run with ``FORCE_COLOR=1`` as ipykernel sets it, so
the colour codes pip writes then are in the captures too:

- ``missing``: a local path that does not exist;
- ``index``: a local project whose build needs setuptools from an index that refuses connections;
- ``github``: ``git+https://github.com/...`` with github.com redirected to a folder that does not exist;
- ``dns``: ``git+https://`` a host that does not resolve, as on Kaggle with Internet off;
- ``noindex``: a package name the index does not have;
- ``broken``: a project whose build script stops with a message.

The bootstrap carries ``launch.pip_said`` as source text; the tests run both the function and the copy in the text.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from tools import launch

CAPTURES = Path(__file__).resolve().parent / "pip_output"
PIPS = ("23.2.1", "26.3")
EXPECTED = {
    "missing": "Hint: It looks like a path. File '/tmp/cap/no-such-checkout' does not exist.",
    "index": "Failed to establish a new connection: [Errno 111] Connection refused",
    "github": "fatal: '/nonexistent/github/pytorch-gpu-course/pytorch-on-gpus' does not appear to be a git repository",
    "dns": "fatal: unable to access 'https://nonexistent.invalid/course/repo/': Could not resolve host: "
    "nonexistent.invalid",
    "noindex": "ERROR: Could not find a version that satisfies the requirement tqdm-nonexistent-pkg "
    "(from versions: none)",
    "broken": "this package cannot be built here",
}


def bootstrap_copy() -> Callable[[str], str]:
    """``pip_said`` as defined by the bootstrap's text, executed on its own."""
    tree = ast.parse(launch.bootstrap(launch.repository_url()))
    [definition] = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "pip_said"]
    namespace: dict = {}
    exec(compile(ast.Module([*ast.parse("import re").body, definition], []), "<bootstrap>", "exec"), namespace)
    return namespace["pip_said"]


@pytest.mark.parametrize("pip", PIPS)
@pytest.mark.parametrize("case", EXPECTED)
@pytest.mark.parametrize("where", ["tools.launch", "bootstrap text"])
def test_the_line_that_says_why_is_picked(case: str, pip: str, where: str) -> None:
    said = launch.pip_said if where == "tools.launch" else bootstrap_copy()
    output = (CAPTURES / f"pip-{pip}-{case}.txt").read_text(encoding="utf-8")
    assert "\x1b[" in output or case in ("missing", "noindex"), "the capture lost its colour codes"
    assert said(output) == EXPECTED[case]


@pytest.mark.parametrize("pip", PIPS)
def test_pips_closing_note_is_never_the_reason(pip: str) -> None:
    for capture in CAPTURES.glob(f"pip-{pip}-*.txt"):
        text = capture.read_text(encoding="utf-8")
        assert "note" in text or "ERROR" in text
        picked = launch.pip_said(text)
        assert not picked.startswith("note") and "originates from a subprocess" not in picked, capture.name
        assert "\x1b" not in picked, capture.name


def test_what_did_not_run_when_nothing_else_says_why() -> None:
    output = (
        "  \x1b[1merror\x1b[0m: subprocess-exited-with-error\n\n"
        "  × Getting requirements to build wheel did not run successfully.\n"
        "  │ exit code: 1\n"
        "  ╰─> See above for output.\n\n"
        "  \x1b[1mnote\x1b[0m: This error originates from a subprocess, and is likely not a problem with pip.\n"
    )
    assert launch.pip_said(output) == "× Getting requirements to build wheel did not run successfully."
    assert launch.pip_said("Something odd\nnote: a note\n") == "Something odd"
    assert launch.pip_said("") == ""


def test_the_bootstrap_runs_pip_without_colour() -> None:
    text = launch.bootstrap(launch.repository_url())
    assert '"NO_COLOR": "1"' in text and 'k != "FORCE_COLOR"' in text and "env=plain" in text
    assert "pip_said(pip.stdout + pip.stderr)" in text
