"""A fake device for timing tests: a clock that advances only when a call does work, and a sync, logged in order."""

from __future__ import annotations


class FakeDevice:
    """``work`` advances the clock by the next of ``durations`` (0 once they run out); ``events`` logs every ``fn``
    call, ``sync`` and ``clock`` read in the order they happened, so a test can check what came before what."""

    def __init__(self, durations: list[float] | None = None) -> None:
        self.now = 0.0
        self.events: list[str] = []
        self.durations = list(durations or [])

    def clock(self) -> float:
        self.events.append("clock")
        return self.now

    def sync(self) -> None:
        self.events.append("sync")

    def work(self) -> None:
        self.events.append("fn")
        if self.durations:
            self.now += self.durations.pop(0)
