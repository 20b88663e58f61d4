"""How the course writes its figures: plain-text tables, seconds and ratios. Imports nothing of the course."""

from __future__ import annotations

from collections.abc import Sequence


def format_rows(rows: Sequence[Sequence[object]], right: Sequence[int] = ()) -> str:
    """The course's one plain-text table printer: ``rows[0]`` is the header; the columns in ``right`` align right."""
    cells = [[str(c) for c in row] for row in rows]
    if not cells:
        return ""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = []
    for row in [cells[0], ["-" * w for w in widths], *cells[1:]]:
        padded = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def format_seconds(seconds: float) -> str:
    """1.5e-5 -> '15.0 us', 0.25 -> '250.0 ms'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.1f} {unit}"
    return f"{seconds / 1e-9:.0f} ns"


def ratio_text(ratio: float) -> str:
    """How tables and sentences print a ratio, so that the two always agree: 0.83x, 12.50x, 300.6x."""
    return f"{ratio:.2f}x" if ratio < 100 else f"{ratio:.1f}x"
