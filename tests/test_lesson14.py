"""Lesson 14's sources: what depends on the torch and the machine (how the ranks' gradients were combined, which
wrap was faster) is printed from the run's numbers by tested helpers, never written into the prose."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "14_fsdp2.ipynb"


def _sources(kind: str) -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == kind)


def test_the_gradient_rule_and_the_speed_verdict_come_from_the_run() -> None:
    code = _sources("code")
    assert 'fsdp_train.gradient_sentence(checked["gradients"]' in code
    assert "fsdp_train.speed_verdict(fsdp_s, ddp_s)" in code
    assert 'if checked["gradients"] == "summed":' in code  # the repair runs only where the check caught a sum


def test_the_prose_states_no_result_of_its_own_run() -> None:
    prose = _sources("markdown")
    assert not re.search(r"\bthis (torch|run)\b[^.]*\b(sums|summed|averages|averaged)\b", prose, re.IGNORECASE)
    assert not re.search(r"\bFSDP (was|is) (slower|faster)\b", prose)
    assert not re.search(r"\d+(\.\d+)?x (DDP|slower|faster)", prose)
    assert not re.search(r"\d+(\.\d+)? ms\b", prose)
