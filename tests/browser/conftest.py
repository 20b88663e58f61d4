"""What both browser tests share: Debian's chromium, driven headless by Playwright."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Chromium:
    """One chromium process; ``restart`` replaces it with a new one, as a learner whose notebook never connects to
    its kernel closes the browser and opens it again (reopening the page in the same browser has failed twice in a
    row)."""

    def __init__(self, playwright) -> None:
        self._playwright = playwright
        self.browser = self._launch()
        self.restarts = 0

    def _launch(self):
        return self._playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)

    def restart(self) -> None:
        self.browser.close()
        self.browser = self._launch()
        self.restarts += 1


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no chromium at {CHROMIUM}: apt-get install -y chromium (or set COURSE_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        held = Chromium(playwright)
        try:
            yield held
        finally:
            held.browser.close()


@pytest.fixture(scope="module")
def browser(chromium: Chromium):
    return chromium.browser
