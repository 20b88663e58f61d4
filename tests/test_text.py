"""helpers.text: how the course writes seconds and ratios (bytes: tests/test_memory.py)."""

from __future__ import annotations

from helpers import text


def test_format_seconds():
    assert text.format_seconds(0.25) == "250.0 ms"
    assert text.format_seconds(1.5e-5) == "15.0 us"
    assert text.format_seconds(3.0) == "3.0 s"
    assert text.format_seconds(4e-8) == "40 ns"


def test_ratio_text_keeps_two_decimals_below_100():
    assert [text.ratio_text(r) for r in (0.834, 12.5, 99.994, 300.64)] == ["0.83x", "12.50x", "99.99x", "300.6x"]


def test_format_rows_pads_columns_rules_the_header_and_aligns_the_named_columns_right():
    table = text.format_rows([("name", "img/s"), ("lab", "1,200"), ("resident data", "15")], right=[1])
    assert table.splitlines() == [
        "name           img/s",
        "-------------  -----",
        "lab            1,200",
        "resident data     15",
    ]


def test_format_rows_trims_trailing_spaces_and_accepts_non_strings():
    lines = text.format_rows([("a", "b"), (1, ""), (22, 3.5)]).splitlines()
    assert lines == ["a   b", "--  ---", "1", "22  3.5"]
    assert text.format_rows([]) == ""
