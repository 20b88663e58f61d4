"""The kinds of value the course's command lines and a lesson's parameters cell accept, described once.

Each kind is an argparse ``type=`` (``parser.add_argument("--epochs", type=arguments.positive_int)``) and the check
behind ``helpers.lesson.start``, so the same mistake gets the same words wherever it is made::

    argument --epochs: '0' is not allowed: give a whole number of at least 1
    EPOCHS = 0 is not allowed: EPOCHS must be a whole number of at least 1, such as 2. ...
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_flag(value: object) -> bool | None:
    """True or False for a yes/no value (a bool, 0 or 1, or a word such as "yes" or "off"); None if it is neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    return None


def as_fraction(value: object) -> float | None:
    """An accuracy as a fraction: 0.88, 88, "88" or "88%" -> 0.88; None outside (0, 1), or (1, 100) as a percentage."""
    text = "" if isinstance(value, bool) else str(value).strip()
    try:
        number = float(text.removesuffix("%"))
    except ValueError:
        return None
    if not math.isfinite(number) or not (0 < number < 1 and not text.endswith("%") or 1 < number < 100):
        return None
    return number if number < 1 else number / 100


def _whole(value: object, least: int) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= least


def _positive_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _same(value: object) -> object:
    return value


@dataclass(frozen=True)
class Kind:
    """One kind of value: what is allowed, in words; which Python values are allowed as they are (a parameters
    cell's); how a command line's text becomes a value; and the value used once allowed (88 -> 0.88)."""

    allowed: str
    accepts: Callable[[object], bool]
    parse: Callable[[str], object] = _same
    convert: Callable[[object], object] = _same

    def check(self, value: object) -> object:
        """The value to use for ``value`` (a Python value); ValueError naming what is allowed."""
        if not self.accepts(value):
            raise ValueError(f"{value!r} is not allowed: give {self.allowed}")
        return self.convert(value)

    def __call__(self, text: str) -> object:
        """The argparse type: the value for a command line's ``text``; argparse.ArgumentTypeError naming the fix."""
        try:
            return self.check(self.parse(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: give {self.allowed}") from None


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


positive_int = Kind("a whole number of at least 1", lambda v: _whole(v, 1), int)
count = Kind("a whole number of at least 0", lambda v: _whole(v, 0), int)
positive_number = Kind("a number greater than 0", _positive_number, float)
rank_or_none = Kind("a process's rank (a whole number from 0), or -1 for none", lambda v: _whole(v, -1), int)
seconds = Kind("a number of seconds greater than 0", _positive_number, float)
positive_ints = Kind(
    "a non-empty list of whole numbers of at least 1",
    lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(_whole(x, 1) for x in v),
    _ints,
)
flag = Kind(
    "True or False (or one of the strings 1/0, true/false, yes/no, on/off, in any case)",
    lambda v: parse_flag(v) is not None,
    convert=parse_flag,
)
accuracy = Kind(
    "a fraction in (0, 1) such as 0.88, or a percentage in (1, 100) such as 88 or 88%",
    lambda v: as_fraction(v) is not None,
    convert=as_fraction,
)


def argtype(convert: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a function that raises ValueError with a message naming the fix, such as
    ``helpers.data.canonical_name``: the message becomes argparse's one error line."""

    def parse(text: str) -> T:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = getattr(convert, "__name__", "value")
    return parse


def data_folder(text: str) -> str:
    """An argparse type: a folder for the data sets, which may not exist yet; a file there is refused."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a file, not a folder; give the folder that holds (or will hold) the data sets, e.g. ./data"
        )
    return text
