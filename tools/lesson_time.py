"""Each lesson's "Time" line, computed rather than typed, by a rule the line states: its prose read at
``WORDS_PER_MINUTE``, its code read at ``CODE_LINES_PER_MINUTE``, ``MINUTES_PER_EXERCISE`` for each exercise (one per
checker the lesson calls), and its run time at the learner's defaults, taken from a record of per-cell seconds (a GPU
record where one exists, else a CPU one).

    python -m tools.lesson_time            # print each lesson's line and whether its header has it
    python -m tools.lesson_time --write    # put the computed line into each header
    python -m tools.lesson_time --record-from build/gpu-check/cuda --device "NVIDIA H200 ..." --out records/x.json

A record (``records/lessons-*.json``) holds papermill's duration of every code cell, by cell id, so a cell keeps its
seconds when lessons are split or renumbered; a code cell the record does not know is counted as not measured and
the line says how many there are.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
RECORDS = ROOT / "records"
WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 30
"""Lines of code read, understood and run, a minute: comment and blank lines are left out of the count."""
MINUTES_PER_EXERCISE = 6
"""Minutes to write and check one exercise's answer."""
_CHECKER_CALL = re.compile(r"\bchecks\.(check_\w+)\(")
TIME_LINE = re.compile(r"^\*\*Time:\*\*.*?(?=\n\n|\Z)", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")  # a link or image: its text only
_TAG = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[A-Za-z0-9](?:[\w'’.-]*[A-Za-z0-9])?")


@dataclass(frozen=True)
class Record:
    """Per-cell seconds of lessons run top to bottom on one machine, and what that machine was."""

    path: Path
    device: str
    date: str
    gpu: bool
    lessons: dict[str, dict]

    @classmethod
    def load(cls, path: Path) -> Record:
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(path, data["device"], data["date"], bool(data.get("gpu")), data["lessons"])


def prose_words(nb: nbformat.NotebookNode) -> int:
    """Words of the lesson's markdown a learner reads: link and image targets, HTML tags and the Time line left out."""
    count = 0
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        text = TIME_LINE.sub("", cell.source)
        text = _TAG.sub(" ", _LINK.sub(r"\1", text))
        count += len(_WORD.findall(text))
    return count


def code_lines(nb: nbformat.NotebookNode) -> int:
    """Lines of the lesson's code cells a learner reads: blank lines and whole-line comments left out."""
    lines = 0
    for cell in nb.cells:
        if cell.cell_type == "code":
            lines += sum(1 for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return lines


def exercises(nb: nbformat.NotebookNode) -> int:
    """The lesson's exercises: the checkers its cells call, each counted once (an exercise cell and its solution call
    the same one)."""
    names = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            names.update(_CHECKER_CALL.findall(cell.source))
    return len(names)


def run_seconds(nb: nbformat.NotebookNode, name: str, record: Record) -> tuple[float, int, bool] | None:
    """The recorded seconds of this lesson's code cells, how many code cells the record lacks, and whether the record
    ran it in quick mode; None when the record has no run of this lesson (looked up by file name, then by cell ids)."""
    entry = record.lessons.get(name)
    if entry is None:  # renumbered or split: find the run whose cells this notebook's cells came from
        ids = {cell.get("id") for cell in nb.cells if cell.cell_type == "code"}
        entry = {"cells": {}, "quick": False}
        for other in record.lessons.values():
            shared = {k: v for k, v in other["cells"].items() if k in ids}
            if shared:
                entry["cells"].update(shared)
                entry["quick"] = entry["quick"] or other["quick"]
        if not entry["cells"]:
            return None
    code = [cell.get("id") for cell in nb.cells if cell.cell_type == "code"]
    seconds = sum(entry["cells"].get(i, 0.0) for i in code)
    missing = sum(1 for i in code if i not in entry["cells"])
    return seconds, missing, bool(entry["quick"])


def choose_record(records: Sequence[Record], nb: nbformat.NotebookNode, name: str) -> Record | None:
    """The record the line reads: a GPU record that ran this lesson, the newest first, else a CPU one."""
    ranked = sorted(records, key=lambda r: (r.gpu, r.date), reverse=True)
    return next((r for r in ranked if run_seconds(nb, name, r) is not None), None)


def minutes_text(minutes: float) -> str:
    whole = max(1, math.ceil(minutes))
    if whole < 60:
        return f"{whole} minute{'s' if whole != 1 else ''}"
    hours, rest = divmod(whole, 60)
    text = f"{hours} hour{'s' if hours != 1 else ''}"
    return text + (f" {rest} minute{'s' if rest != 1 else ''}" if rest else "")


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'s' if count != 1 else ''}"


def time_line(
    words: int, record: Record | None, measured: tuple[float, int, bool] | None, lines: int = 0, tasks: int = 0
) -> str:
    """The header's Time line from the prose's word count, the code's lines, the exercises and the record's
    measurement of the lesson, each with the rate it is counted at."""
    reading = words / WORDS_PER_MINUTE
    code = lines / CODE_LINES_PER_MINUTE
    answering = tasks * MINUTES_PER_EXERCISE
    parts = [f"{words:,} words of prose ({minutes_text(reading)} at {WORDS_PER_MINUTE} words a minute)"]
    if lines:
        parts.append(
            f"{_plural(lines, 'line')} of code ({minutes_text(code)} at {CODE_LINES_PER_MINUTE} lines a minute)"
        )
    if tasks:
        parts.append(
            f"{_plural(tasks, 'exercise')} ({minutes_text(answering)} at {MINUTES_PER_EXERCISE} minutes an exercise)"
        )
    if record is None or measured is None:
        listed = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
        total = reading + code + answering
        return f"**Time:** about {minutes_text(total)}: {listed}; its run time has not been recorded yet."
    seconds, missing, quick = measured
    running = f"{seconds / 60:.1f} minutes" if seconds >= 60 else f"{seconds:.0f} seconds"
    mode = "in quick mode" if quick else "at the default settings"
    where = f"on {record.device} (`{record.path.relative_to(ROOT).as_posix()}`, {record.date})"
    extra = f"; {missing} code cell{'s' if missing != 1 else ''} newer than that run not counted" if missing else ""
    total = reading + code + answering + seconds / 60
    listed = ", ".join(parts)
    return f"**Time:** about {minutes_text(total)}: {listed} and {running} of running {mode} {where}{extra}."


def load_records(folder: Path = RECORDS) -> list[Record]:
    return [Record.load(p) for p in sorted(folder.glob("lessons-*.json"))]


def computed_line(path: Path, records: Sequence[Record]) -> str:
    nb = nbformat.read(path, as_version=4)
    record = choose_record(records, nb, path.name)
    measured = run_seconds(nb, path.name, record) if record else None
    return time_line(prose_words(nb), record, measured, code_lines(nb), exercises(nb))


def header_line(path: Path) -> str | None:
    """The Time line the lesson's header (its first cell) has now, or None."""
    nb = nbformat.read(path, as_version=4)
    match = TIME_LINE.search(nb.cells[0].source)
    return match.group(0).replace("\n", " ") if match else None


def write_line(path: Path, line: str) -> bool:
    """Put ``line`` into the header in place of its Time line; whether the file changed."""
    nb = nbformat.read(path, as_version=4)
    header = nb.cells[0]
    if not TIME_LINE.search(header.source):
        raise ValueError(f"{path.name}: its first cell has no '**Time:**' line to replace.")
    new = TIME_LINE.sub(lambda _: line, header.source, count=1)
    if new == header.source:
        return False
    header.source = new
    nbformat.write(nb, path)
    return True


def record_from(folder: Path, device: str, gpu: bool, note: str, only: Sequence[str] | None = None) -> dict:
    """A record built from executed notebooks in ``folder`` (papermill's per-cell durations); with ``only``, just the
    notebooks named there (those that ran to the end)."""
    lessons = {}
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        if only is not None and path.name not in only:
            continue
        nb = nbformat.read(path, as_version=4)
        cells = {}
        for cell in nb.cells:
            duration = cell.get("metadata", {}).get("papermill", {}).get("duration")
            if cell.cell_type == "code" and duration is not None:
                cells[cell.get("id")] = round(float(duration), 3)
        quick = any("Lesson settings:" in text and "quick mode" in text for text in _outputs(nb))
        lessons[path.name] = {"seconds": round(sum(cells.values()), 1), "quick": quick, "cells": cells}
    today = datetime.date.today().isoformat()
    return {"device": device, "gpu": gpu, "date": today, "note": note, "lessons": lessons}


def _outputs(nb: nbformat.NotebookNode) -> list[str]:
    """Every text output of the notebook's code cells (streams and plain-text results)."""
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            texts.append(out.get("text") or out.get("data", {}).get("text/plain", ""))
    return texts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.lesson_time", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="put each computed line into its lesson's header")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS)
    parser.add_argument("--record-from", type=Path, metavar="FOLDER", help="make a record from executed notebooks")
    parser.add_argument("--device", help="with --record-from: the machine, in words")
    parser.add_argument("--gpu", action="store_true", help="with --record-from: the lessons ran on a GPU")
    parser.add_argument("--note", default="", help="with --record-from: how the lessons were run")
    parser.add_argument("--out", type=Path, help="with --record-from: the record's path")
    args = parser.parse_args(argv)
    if args.record_from:
        if not args.device or not args.out:
            parser.error("--record-from needs --device and --out")
        record = record_from(args.record_from, args.device, args.gpu, args.note)
        args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}: {len(record['lessons'])} lessons")
        return 0
    records = load_records()
    stale = 0
    for path in sorted(args.notebooks.glob("[0-9][0-9]_*.ipynb")):
        line = computed_line(path, records)
        same = header_line(path) == line
        if args.write and not same:
            write_line(path, line)
            same = True
        stale += not same
        print(f"{path.name}: {'ok' if same else 'differs'}\n  {line}")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
