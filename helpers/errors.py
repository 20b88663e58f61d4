"""Showing an error a lesson is about: raised for real, shown, and the notebook goes on (taught in lesson 00)."""

from __future__ import annotations

import contextlib
import linecache
import re
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass


class ErrorExpectationFailed(AssertionError):
    """A block run under ``expect_error`` did not raise the error the lesson is about."""


@dataclass
class CaughtError:
    """What ``expect_error`` caught: the exception, and the line of the block that raised it."""

    error: BaseException | None = None
    line: str = ""


@contextlib.contextmanager
def expect_error(
    kind: type[BaseException] | tuple[type[BaseException], ...], match: str | None = None
) -> Iterator[CaughtError]:
    """Run a block that must raise ``kind`` (its message matching the regular expression ``match``), and go on: the
    error is shown on stderr (the block's line that raised, then type and message) and the cell ends normally.
    Anything else raises ErrorExpectationFailed: a lesson whose point has gone stale fails. Taught in lesson 00."""
    block = sys._getframe(2)  # the cell (or function) holding the ``with`` statement
    caught = CaughtError()
    kinds = kind if isinstance(kind, tuple) else (kind,)
    wanted = " or ".join(k.__name__ for k in kinds)
    try:
        yield caught
    except kinds as exc:
        message = str(exc)
        if match is not None and not re.search(match, message):
            raise ErrorExpectationFailed(
                f"expected {wanted} with a message matching {match!r}, got {type(exc).__name__}: {message}"
            ) from exc
        found = [lineno for frame, lineno in traceback.walk_tb(exc.__traceback__) if frame is block]
        if found:  # the block's own line, not one deep inside a library
            source = linecache.getline(block.f_code.co_filename, found[-1], block.f_globals).strip()
            caught.line = f"line {found[-1]}: {source}"
        caught.error = exc
        shown = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
        sys.stdout.flush()
        print(f"{caught.line}\n{shown}" if caught.line else shown, file=sys.stderr, flush=True)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise ErrorExpectationFailed(f"expected {wanted}, got {type(exc).__name__}: {exc}") from exc
    else:
        raise ErrorExpectationFailed(f"expected {wanted}, but the block raised nothing")
