"""The course website, built from the committed notebooks and opened in a real browser.

``tools/site.py`` builds the site into a temporary folder; a static server on 127.0.0.1 serves it; Debian's chromium,
driven headless by Playwright, opens the landing page, the Colab and Kaggle guide and every lesson page. On each page:
no console error, no failed or refused local request, and no request leaving the machine except the Colab and Kaggle
badge images. The sidebar lists every lesson in course order, figures load, lesson 05's progress bars are drawn by the
widget manager served from the site itself, and every link between pages resolves. Screenshots of the landing page
and lesson 05 go to build/screenshots/.

Opt-in like the JupyterLab test: ``COURSE_BROWSER=1 pytest tests/browser/test_site.py``, with the site's packages
installed (``pip install -r requirements-site.txt -c requirements-lock.txt``).
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import course

ROOT = Path(__file__).resolve().parent.parent.parent
SCREENSHOTS = ROOT / "build" / "screenshots"
BADGE_HOSTS = ("colab.research.google.com", "kaggle.com", "www.kaggle.com")
LESSONS = [p.stem for p in course.find_notebooks(ROOT / "notebooks")]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        __import__("os").environ.get("COURSE_BROWSER") != "1", reason="browser test: set COURSE_BROWSER=1"
    ),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built from this clone and served on 127.0.0.1; yields its base address."""
    from tools import site as site_tool

    out = tmp_path_factory.mktemp("site") / "html"
    site_tool.build(out)
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # the browser dropped a request it no longer wanted
            super().handle_error(request, client_address)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test reports failed requests itself
        pass


def open_page(browser, url: str) -> tuple[object, dict[str, list[str]]]:
    """Open ``url`` with every request watched; returns the page and what went wrong on it."""
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    problems: dict[str, list[str]] = {"console": [], "failed": [], "external": []}

    def route(request_route) -> None:
        host = urllib.parse.urlparse(request_route.request.url).hostname or ""
        if host == "127.0.0.1":
            request_route.continue_()
        else:
            if host not in BADGE_HOSTS:
                problems["external"].append(request_route.request.url)
            request_route.abort()  # nothing leaves the machine; the badges alone are allowed to be missing

    page.route("**/*", route)
    page.on("console", lambda msg: msg.type == "error" and problems["console"].append(msg.text))
    page.on("pageerror", lambda err: problems["console"].append(str(err)))

    def failed(request) -> None:
        if urllib.parse.urlparse(request.url).hostname == "127.0.0.1":
            problems["failed"].append(f"{request.url}: {request.failure}")

    page.on("requestfailed", failed)
    page.on("response", lambda r: r.status >= 400 and problems["failed"].append(f"{r.url}: HTTP {r.status}"))
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    return page, problems


def clean(problems: dict[str, list[str]]) -> dict[str, list[str]]:
    """What is left after the badge images, which are blocked on purpose (their console line names the image)."""
    console = [m for m in problems["console"] if not any(h in m for h in BADGE_HOSTS) and "ERR_FAILED" not in m]
    return {"console": console, "failed": problems["failed"], "external": problems["external"]}


def page_urls(site: str) -> list[str]:
    return [f"{site}/index.html", f"{site}/colab.html"] + [f"{site}/lessons/{name}.html" for name in LESSONS]


PAGE_FACTS = """() => ({
  brokenImages: [...document.images].filter(i => i.complete && !i.naturalWidth && i.src.startsWith(location.origin))
    .map(i => i.src),
  links: [...document.querySelectorAll('a[href]')].map(a => a.href).filter(h => h.startsWith(location.origin)),
  sidebar: [...document.querySelectorAll('nav.bd-docs-nav a')].map(a => a.href),
})"""


@pytest.fixture(scope="module")
def visits(site: str, browser) -> dict[str, dict]:
    """Every page opened once: what went wrong on it, and the facts the tests below check."""
    found = {}
    for url in page_urls(site):
        page, problems = open_page(browser, url)
        try:
            found[url] = {"problems": clean(problems), **page.evaluate(PAGE_FACTS)}
        finally:
            page.close()
    return found


def test_every_page_loads_cleanly(visits: dict[str, dict]) -> None:
    for url, seen in visits.items():
        assert seen["problems"] == {"console": [], "failed": [], "external": []}, url
        assert seen["brokenImages"] == [], f"{url}: images that did not load"


def test_sidebar_lists_every_lesson_in_order(visits: dict[str, dict]) -> None:
    for url, seen in visits.items():
        listed = [Path(urllib.parse.urlparse(h).path).stem for h in seen["sidebar"] if "/lessons/" in h]
        assert listed == LESSONS, url


def test_links_between_pages_resolve(site: str, visits: dict[str, dict]) -> None:
    local = {urllib.parse.urlparse(link).path for seen in visits.values() for link in seen["links"]}
    assert any("/lessons/" in path for path in local), "no link to a lesson page found"
    missing = []
    for path in sorted(local):
        try:
            with urllib.request.urlopen(f"{site}{path}", timeout=30) as reply:
                status = reply.status
        except urllib.error.HTTPError as err:
            status = err.code
        if status != 200:
            missing.append(f"{path}: HTTP {status}")
    assert missing == []


def saved_output(lesson: str, mime: str) -> bool:
    """Whether the committed notebook of ``lesson`` holds an output of that MIME type."""
    return f'"{mime}"' in (ROOT / "notebooks" / f"{lesson}.ipynb").read_text(encoding="utf-8")


def test_a_lesson_with_progress_bars_shows_them_and_its_figures(site: str, browser) -> None:
    # the first lesson whose saved outputs hold both: lesson 05 did until it trained with a loop in its cells
    widget = "application/vnd.jupyter.widget-view+json"
    name = next(n for n in LESSONS if saved_output(n, widget) and saved_output(n, "image/png"))
    page, problems = open_page(browser, f"{site}/lessons/{name}.html")
    try:
        page.locator(".widget-hprogress").first.wait_for(state="attached", timeout=30_000)
        bars = page.locator(".widget-hprogress").count()
        figures = page.evaluate(
            "[...document.querySelectorAll('.cell_output img')].filter(i => i.naturalWidth > 0).length"
        )
        origin = page.get_by_text("The outputs on this page come from a run on device").count()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.locator(".widget-hprogress").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"site-{name}.png"))
    finally:
        page.close()
    assert clean(problems)["console"] == []
    assert bars >= 1, "no progress bar drawn: the widget manager did not render the saved widget state"
    assert figures >= 1, "no figure drawn"
    assert origin == 1, "the line saying which device produced the outputs is missing"


def test_landing_page_screenshot(site: str, browser) -> None:
    page, _ = open_page(browser, f"{site}/index.html")
    try:
        title = page.title()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "site-index.png"))
    finally:
        page.close()
    assert "PyTorch on GPUs" in title
    assert (SCREENSHOTS / "site-index.png").stat().st_size > 10_000
