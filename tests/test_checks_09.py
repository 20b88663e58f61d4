"""Lesson 09 checkers accept the reference solutions and reject wrong answers."""

from __future__ import annotations

from helpers.checks import CHECKERS
from helpers.speedrun import time_to_target, verdict

TESTED = {"09_time_to_target", "09_keep_rule"}


def test_every_lesson_09_checker_is_tested():
    assert {k for k in CHECKERS if k.startswith("09_")} == TESTED


def test_time_to_target_reference(capsys):
    assert CHECKERS["09_time_to_target"](time_to_target)
    assert capsys.readouterr().out.startswith("[pass]")


def test_time_to_target_wrong_answers(capsys):
    check = CHECKERS["09_time_to_target"]
    assert not check(None)
    assert capsys.readouterr().out.startswith("[waiting]")
    strictly_above = lambda h, t: next((s for s, a in h if a > t), None)  # noqa: E731
    assert not check(strictly_above)
    assert ">= target" in capsys.readouterr().out
    last_time = lambda h, t: h[-1][0] if h else None  # noqa: E731
    assert not check(last_time)
    assert "[not yet]" in capsys.readouterr().out
    assert not check(42)
    assert "expected a function" in capsys.readouterr().out


def _keep_rule(before, after):
    return {"kept": "kept", "not kept: slower": "slower"}.get(verdict(before, after), "no clear difference")


def test_keep_rule_reference(capsys):
    assert CHECKERS["09_keep_rule"](_keep_rule)
    assert capsys.readouterr().out.startswith("[pass]")


def test_keep_rule_wrong_answers(capsys):
    check = CHECKERS["09_keep_rule"]
    assert not check(None)
    assert capsys.readouterr().out.startswith("[waiting]")
    by_mean = lambda b, a: "kept" if sum(a) < sum(b) else "slower"  # noqa: E731
    assert not check(by_mean)
    assert "no clear difference" in capsys.readouterr().out
    by_median = lambda b, a: "kept" if sorted(a)[1] < sorted(b)[1] else "slower"  # noqa: E731
    assert not check(by_median)
    assert "[not yet]" in capsys.readouterr().out
