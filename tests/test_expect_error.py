"""helpers.errors.expect_error: shows the expected error and goes on; fails loudly when the lesson has gone stale."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from helpers.errors import ErrorExpectationFailed, expect_error


def test_the_expected_error_is_shown_on_stderr_and_the_code_goes_on(capsys):
    with expect_error(RuntimeError, match="same device|size of tensor") as caught:
        torch.ones(3) + torch.ones(4)  # a real error, raised by torch
    assert isinstance(caught.error, RuntimeError)
    out, err = capsys.readouterr()
    assert out == ""
    line, shown = err.strip().splitlines()
    assert line == "line 17: torch.ones(3) + torch.ones(4)  # a real error, raised by torch"
    assert shown.startswith("RuntimeError: The size of tensor a (3) must match")


def test_a_subclass_of_the_expected_error_counts(capsys):
    with expect_error(LookupError):
        {}["missing"]
    assert capsys.readouterr().err.strip().endswith("KeyError: 'missing'")


def test_a_missing_error_fails():
    with (
        pytest.raises(ErrorExpectationFailed, match="expected ValueError, but the block raised nothing"),
        expect_error(ValueError),
    ):
        int("12")


def test_a_different_error_fails_and_keeps_the_original():
    with (
        pytest.raises(ErrorExpectationFailed, match="expected ValueError, got KeyError") as info,
        expect_error(ValueError),
    ):
        {}["x"]
    assert isinstance(info.value.__cause__, KeyError)


def test_a_message_that_does_not_match_fails():
    with (
        pytest.raises(ErrorExpectationFailed, match="matching 'same device'"),
        expect_error(RuntimeError, match="same device"),
    ):
        raise RuntimeError("something else entirely")


def test_a_tuple_of_kinds():
    with (
        pytest.raises(ErrorExpectationFailed, match="expected TypeError or ValueError"),
        expect_error((TypeError, ValueError)),
    ):
        pass


def test_keyboard_interrupt_is_not_swallowed():
    with pytest.raises(KeyboardInterrupt), expect_error(RuntimeError):
        raise KeyboardInterrupt


@pytest.mark.slow
def test_the_line_shown_is_the_blocks_own_line_when_the_error_comes_from_deeper_code(tmp_path):
    script = tmp_path / "cell.py"
    script.write_text(
        textwrap.dedent(
            """
            from helpers.errors import expect_error

            def inner():
                raise ValueError("deep down")

            with expect_error(ValueError, match="deep"):
                x = 1
                inner()
            print("carried on")
            """
        )
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "carried on\n"
    assert result.stderr.splitlines()[-2:] == ["line 9: inner()", "ValueError: deep down"]
