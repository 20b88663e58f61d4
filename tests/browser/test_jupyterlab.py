"""The lessons run in JupyterLab, in a real browser, as a learner would run them.

A JupyterLab server starts on 127.0.0.1 (a free port, a random token) over a copy of the notebooks; Debian's chromium,
driven headless by Playwright, opens each notebook, runs Run > Run All Cells, waits for the kernel to go idle, and
checks what the learner sees: no error output (lessons show their errors through ``expect_error``, on stderr),
progress bars drawn as widgets (no "IProgress not found"), matplotlib figures drawn as images. A screenshot of each
notebook goes to build/screenshots/. A page that loses its kernel connection (``run_notebook`` says when) is run
again in a new chromium, at most twice, with a screenshot and the page's console kept for the report. A small notebook
built here checks the checks: it must show a widget, an image and an error shown by ``expect_error``, and every cell
after it must run.

The lessons run here are those whose saved outputs hold something the page draws or styles beyond plain text: a
progress-bar widget, a figure, or text on stderr (where lessons show their errors). A lesson whose outputs are all
plain stdout text (today the distributed lessons that print what their processes said) looks in the page as its
saved outputs read, and nbval runs and compares it in the same kind of kernel; running it here again would add
minutes and check nothing more.

Opt-in, because it needs a browser and runs the lessons again: ``COURSE_BROWSER=1 pytest tests/browser``.
Needs ``pip install playwright`` and ``apt-get install chromium`` (``COURSE_CHROMIUM`` names another binary);
Playwright's own browser download is never used.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from pathlib import Path

import nbformat
import pytest

from tools import course

ROOT = Path(__file__).resolve().parent.parent.parent
SCREENSHOTS = ROOT / "build" / "screenshots"
RUN_TIMEOUT_S = 600
SMOKE = "smoke_widgets_figures_errors.ipynb"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.notebooks,
    pytest.mark.skipif(os.environ.get("COURSE_BROWSER") != "1", reason="browser test: set COURSE_BROWSER=1"),
]

# JupyterLab user settings for the run: every cell stays in the page (by default JupyterLab 4 detaches cells
# scrolled out of view, which would hide their outputs from the checks), and no news or update checks go out.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


def smoke_notebook() -> nbformat.NotebookNode:
    """A notebook with one progress bar, one figure and one expected error, to prove the checks see each."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    shown = 'with expect_error(ValueError):\n    raise ValueError("expected: shown")'
    raising = nbformat.v4.new_code_cell(f"from helpers.errors import expect_error\n\n{shown}")
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Smoke test: widget, figure, expected error"),
        nbformat.v4.new_code_cell("from tqdm.auto import tqdm\n\nfor _ in tqdm(range(3), desc='progress'):\n    pass"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\n\nplt.plot([1, 3, 2])\nplt.show()"),
        raising,
        nbformat.v4.new_code_cell("print('after the error')"),
    ]
    return nb


def draws_more_than_text(path: Path) -> bool:
    """Whether the saved notebook holds a widget, an image or stderr text: what only the page can show wrongly."""
    saved = saved_outputs(path)
    return bool(saved["widgets"] or saved["images"] or saved["stderr"] or saved["bare_figures"])


def notebooks_to_run(folder: Path = ROOT / "notebooks") -> list[str]:
    return [SMOKE] + [p.name for p in course.find_notebooks(folder) if draws_more_than_text(p)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class Lab:
    url: str
    token: str
    served: Path
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def notebook_url(self, name: str) -> str:
        """The notebook alone in a fresh workspace, so no layout from an earlier page is restored."""
        return f"{self.url}/lab/workspaces/w{secrets.token_hex(4)}/tree/{name}?reset&token={self.token}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.url}/api/{path}", method=method)
        request.add_header("Authorization", f"token {self.token}")
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.load(reply) if method == "GET" else None

    def kernels(self) -> str:
        """The server's view of its kernels: id, execution state, open connections."""
        found = [f"{k['id'][:8]} {k['execution_state']} ({k['connections']} connected)" for k in self.api("kernels")]
        return ", ".join(found) or "none"

    def kernels_idle(self) -> bool:
        """Whether the server has kernels and each is idle. The server hears every kernel's status messages itself,
        whatever a page hears."""
        states = [k["execution_state"] for k in self.api("kernels")]
        return bool(states) and all(s == "idle" for s in states)

    def shut_down_kernels(self) -> None:
        """End every session, so kernels of finished notebooks do not hold memory while the next one runs."""
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A JupyterLab server over a copy of the notebooks."""
    base = tmp_path_factory.mktemp("lab")
    served = base / "notebooks"
    served.mkdir()
    for path in course.find_notebooks(ROOT / "notebooks"):
        shutil.copy(path, served / path.name)  # JupyterLab saves what it runs: never the committed files
    nbformat.write(smoke_notebook(), served / SMOKE)
    for name, values in LAB_SETTINGS.items():
        (base / "settings" / name).parent.mkdir(parents=True, exist_ok=True)
        (base / "settings" / name).write_text(json.dumps(values), encoding="utf-8")
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        **course.CHECK_ENV,  # COURSE_QUICK=1, COURSE_DATASET=FashionMNIST: the lessons' quick, offline settings
        "COURSE_DATA_DIR": os.environ.get("COURSE_DATA_DIR", str(ROOT / "data")),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
    }
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={served}",
        "--allow-root",
        "--LabApp.extension_manager=readonly",
    ]
    log = open(base / "server.log", "wb")  # noqa: SIM115 (closed after the server stops)
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(base / 'server.log').read_text(errors='replace')}")
                time.sleep(0.5)
        yield Lab(url, token, served, base / "server.log")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


# Counts what the page shows, in one pass over the DOM (every cell is attached: windowingMode "none").
PAGE_STATE = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')];
  const outputs = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')];
  const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
  return {
    prompts: prompts.map(p => p.textContent.trim()),
    kernel: indicator ? indicator.getAttribute('data-status') : null,
    images: document.querySelectorAll('.jp-Notebook .jp-RenderedImage img').length,
    progress: document.querySelectorAll('.jp-Notebook .widget-hprogress, .jp-Notebook .widget-vprogress').length,
    text: outputs.map(o => o.innerText).join('\\n'),
  };
}"""


class BrowserRetry(UserWarning):
    """A notebook lost its kernel connection in the browser and passed after chromium was started again."""


CONSOLE = ("error", "warning")  # console messages worth keeping for a failure report


def new_page(chromium) -> tuple[object, list[str]]:
    """A page in a fresh context of ``chromium`` (conftest's ``Chromium``), and a list that collects what its
    console and kernel websockets say."""
    page = chromium.browser.new_page(viewport={"width": 1400, "height": 1800})
    events: list = []  # lines, and each websocket's frame counts (a dict, read when the report is written)

    def on_websocket(ws) -> None:
        where = ws.url.split("?")[0].rsplit("/api/", 1)[-1]
        # a report tells a server that said nothing from a page that heard it, and what the last messages were
        frames = {"sent": 0, "received": 0, "last sent": deque(maxlen=4), "last received": deque(maxlen=6)}
        events.append(f"websocket opened: {where}")
        events.append(frames)

        def count(way: str, payload) -> None:
            frames[way] += 1
            frames[f"last {way}"].append(kernel_message(payload))

        ws.on("framesent", partial(count, "sent"))
        ws.on("framereceived", partial(count, "received"))
        ws.on("close", lambda _ws: events.append(f"websocket closed: {where}"))
        ws.on("socketerror", lambda error: events.append(f"websocket error: {where}: {error}"))

    page.on("websocket", on_websocket)
    page.on("console", lambda msg: events.append(f"console {msg.type}: {msg.text}") if msg.type in CONSOLE else None)
    return page, events


def kernel_message(payload) -> str:
    """ "channel msg_type" of a kernel websocket frame, in JupyterLab's binary framing (a count, offsets, the channel,
    then the message's parts) or in JSON; "?" for a frame that is neither."""
    try:
        if isinstance(payload, str):
            message = json.loads(payload)
            return f"{message.get('channel', '')} {message['header']['msg_type']}"
        count = int.from_bytes(payload[:8], "little")
        if not 2 <= count <= 64:  # a channel and a header at least; never a count read from other bytes
            return "?"
        offsets = [int.from_bytes(payload[8 * i : 8 * i + 8], "little") for i in range(1, count + 1)]
        parts = [payload[a:b] for a, b in pairwise(offsets)]
        for part in parts[1:]:
            if part.startswith(b"{") and b'"msg_type"' in part:
                return f"{parts[0].decode()} {json.loads(part)['msg_type']}"
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return "?"


def wait_until_idle(page, timeout_s: float, polls: int = 3) -> dict:
    """Poll the page until no cell is queued or running and the kernel has been idle for ``polls`` seconds."""
    deadline, idle_polls = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        state = page.evaluate(PAGE_STATE)
        busy = any("*" in p for p in state["prompts"]) or state["kernel"] != "idle"
        idle_polls = 0 if busy else idle_polls + 1
        if idle_polls >= polls:
            return state
        page.wait_for_timeout(1000)
    raise AssertionError(f"not idle after {timeout_s} s: kernel {state['kernel']}, prompts {state['prompts']}")


def open_notebook(page, lab: Lab, name: str, start_s: float) -> None:
    """Open ``name`` and wait up to ``start_s`` for its kernel to start; a dialog left open (a kernel choice) is
    accepted as a learner would, and the wait goes on once."""
    page.goto(lab.notebook_url(name))
    page.locator(".jp-NotebookPanel").first.wait_for(state="visible", timeout=120_000)
    try:
        wait_until_idle(page, start_s)  # the kernel has started (it goes idle, connecting, idle)
    except AssertionError:
        dialog = page.locator(".jp-Dialog .jp-mod-accept")
        if not dialog.count():
            raise
        dialog.first.click()
        wait_until_idle(page, 30)


def run_all(page) -> None:
    """Run > Run All Cells, as a learner would; again if the kernel was still connecting and nothing started."""
    for _ in range(3):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        for _ in range(20):
            if any("*" in p or any(ch.isdigit() for ch in p) for p in page.evaluate(PAGE_STATE)["prompts"]):
                return
            page.wait_for_timeout(500)
        wait_until_idle(page, 60)
    raise AssertionError("Run All Cells started nothing")


def stalled(state: dict, server_idle: bool) -> bool:
    """Cells queued or running in the page while the kernel is idle, by the page's indicator or by the server's.

    By the page's: the execute requests never reached the kernel (seen before the first cell, and after the 5th or 7th
    code cell of lessons 06, 09 and 14 in one run). By the server's: the page still says busy, with cells waiting after
    the last one the kernel answered (seen at lessons 01, 04, 06, 07, 08 and 11, some ten minutes long). With ipykernel
    7.3 both were a kernel that left requests unread in its shell socket (ipykernel issue 1554; requirements.txt
    rules out 7.0-7.3); a page that loses its kernel's messages shows the same, and is run again the same way."""
    waiting = any("*" in p for p in state["prompts"])
    return waiting and (state["kernel"] == "idle" or server_idle)


class ConnectionLost(AssertionError):
    """The page and its kernel stopped hearing each other: the kernel never showed as started, or the page waited on
    cells that the kernel, idle, was not running."""


def run_to_the_end(page, lab: Lab, stall_s: float) -> dict:
    """Wait until a run that has started is idle; a stall (see ``stalled``) that lasts ``stall_s`` with nothing new in
    the page's prompts raises ``ConnectionLost``."""
    deadline, since, seen = time.monotonic() + RUN_TIMEOUT_S, None, None
    while time.monotonic() < deadline:
        state = page.evaluate(PAGE_STATE)
        if stalled(state, lab.kernels_idle()) and state["prompts"] == seen:
            since = since or time.monotonic()
        else:
            since, seen = None, state["prompts"]
        if since is not None and time.monotonic() - since > stall_s:
            waiting = [i + 1 for i, p in enumerate(state["prompts"]) if "*" in p]
            raise ConnectionLost(
                f"for {stall_s} s the page waited on cells (kernel {state['kernel']}) that no idle kernel ran:"
                f" code cells {waiting[0]}-{waiting[-1]} of {len(state['prompts'])}"
            )
        try:
            return wait_until_idle(page, 5)
        except AssertionError:
            continue
    try:
        return wait_until_idle(page, 1)
    except AssertionError as err:  # the state it was stuck in, and the server's side of it
        raise AssertionError(
            f"{err}\nserver's kernels: {lab.kernels()}\nJupyterLab server log:\n{lab.log_tail()}"
        ) from None


def run_notebook(
    chromium, lab: Lab, name: str, start_s: float = 90, stall_s: float = 60, tries: int = 3, prepare=None
) -> tuple[object, dict]:
    """Open ``name`` in a new page, Run All, and wait until it is idle; returns the page and what it shows.

    Now and then, on a loaded 2-core machine, a page loses its kernel's messages: the kernel indicator stays
    "unknown" although the server says the kernel started and answered, or cells stay queued or running while the
    kernel is idle (see ``stalled``). Reloading the page in the same browser has failed the same way twice in a row,
    so this does what a learner would do next: close the browser, start it again and rerun the notebook. A run that
    errors is never retried; each lost connection leaves a screenshot, and a pass after one gives a ``BrowserRetry``
    warning. ``prepare(page, attempt)``, when given, is called on each new page before the notebook opens (the tests
    of this retry use it to cut a page off from its kernel)."""
    lost: list[str] = []
    for attempt in range(1, tries + 1):
        page, events = new_page(chromium)
        try:
            if prepare is not None:
                prepare(page, attempt)
            try:
                open_notebook(page, lab, name, start_s)
            except AssertionError as err:
                raise ConnectionLost(f"the kernel never showed as started: {err}") from err
            run_all(page)
            state = run_to_the_end(page, lab, stall_s)
        except ConnectionLost as err:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"{Path(name).stem}-connection-lost-{attempt}.png"), timeout=60_000)
            said = (
                "\n  ".join(
                    f"  frames: {e['sent']} sent (last: {', '.join(e['last sent'])}), {e['received']} received"
                    f" (last: {', '.join(e['last received'])})"
                    if isinstance(e, dict)
                    else e
                    for e in events[-15:]
                )
                or "nothing"
            )
            lost.append(f"try {attempt}: {err}\n server's kernels: {lab.kernels()}\n page said:\n  {said}")
            page.close()
            lab.shut_down_kernels()
            chromium.restart()
            continue
        except BaseException:
            page.close()
            raise
        if lost:
            report = f"{name} passed after {len(lost)} lost connection(s):\n" + "\n".join(lost)
            warnings.warn(BrowserRetry(report), stacklevel=2)
        return page, state
    failures = "\n".join(lost)
    raise AssertionError(
        f"{name}: the page lost its kernel {tries} times\n{failures}\nJupyterLab server log:\n{lab.log_tail()}"
    )


def saved_outputs(path: Path) -> dict:
    """What the saved notebook holds: unexpected errors, stderr text, widget and image outputs, figure reprs."""
    nb = nbformat.read(path, as_version=4)
    found = {"errors": [], "stderr": "", "widgets": 0, "images": 0, "bare_figures": 0}
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if out.output_type == "error":
                found["errors"].append(f"cell {index}: {out.ename}: {out.evalue}")
            if out.output_type == "stream" and out.name == "stderr":
                found["stderr"] += out.text
            found["widgets"] += WIDGET_MIME in data
            found["images"] += "image/png" in data
            found["bare_figures"] += "<Figure size" in data.get("text/plain", "") and "image/png" not in data
    return found


@pytest.mark.parametrize("name", notebooks_to_run())
def test_notebook_runs_in_jupyterlab(name: str, lab: Lab, chromium) -> None:
    chromium.restart()  # each lesson in a browser of its own, as a learner opening it would have
    page, state = run_notebook(chromium, lab, name)
    try:
        page.keyboard.press("Control+s")
        page.get_by_text("Saving completed").first.wait_for(timeout=60_000)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{Path(name).stem}.png"), timeout=60_000)
    finally:
        page.close()
        lab.shut_down_kernels()

    saved = saved_outputs(lab.served / name)
    unrun = [p for p in state["prompts"] if not any(ch.isdigit() for ch in p)]
    assert not unrun, f"cells never ran (Run All stopped early?): {state['prompts']}"
    assert saved["errors"] == [], "unexpected error output"
    for text in (state["text"], saved["stderr"]):
        assert "IProgress not found" not in text, "progress bars fell back to text: ipywidgets is missing"
        assert "Error displaying widget" not in text
    assert state["progress"] >= saved["widgets"], "a progress-bar widget was saved but not drawn"
    assert state["images"] >= saved["images"], "a figure was saved but not drawn as an image"
    assert saved["bare_figures"] == 0, "a figure printed as text instead of an image"
    if name == SMOKE:  # the checks above can see each kind of output
        assert saved["widgets"] >= 1 and state["progress"] >= 1 and state["images"] >= 1
        assert "after the error" in state["text"] and "ValueError: expected: shown" in state["text"]
        assert "ValueError: expected: shown" in saved["stderr"], "expect_error did not show the error on stderr"


def deaf(page, attempt: int, attempts: tuple[int, ...]) -> None:
    """On the given attempts, the page's kernel websockets reach no server: the page believes them open, and
    nothing it sends is answered."""
    if attempt in attempts:
        page.route_web_socket(re.compile(r"/api/kernels/[^/]+/channels"), lambda ws: None)


def said(message, *words: str) -> bool:
    """Whether a websocket frame (text, or the binary framing of JupyterLab's kernel protocol) holds every word."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    return all(word in text for word in words)


def deafened_mid_cell(page, attempt: int, attempts: tuple[int, ...]) -> None:
    """On the given attempts, the page hears its kernel until the kernel says it is busy with the first cell the
    page asked it to run, and nothing after: the kernel runs every cell, and the page still shows the first running."""
    if attempt not in attempts:
        return

    def relay(ws) -> None:
        server, asked, cut = ws.connect_to_server(), [False], [False]

        def to_server(message) -> None:
            asked[0] = asked[0] or said(message, "execute_request")
            server.send(message)

        def to_page(message) -> None:
            if not cut[0]:
                ws.send(message)
            cut[0] = cut[0] or (asked[0] and said(message, '"execution_state"', '"busy"'))

        ws.on_message(to_server)
        server.on_message(to_page)

    page.route_web_socket(re.compile(r"/api/kernels/[^/]+/channels"), relay)


def test_a_page_that_stops_hearing_its_kernel_mid_cell_is_run_again(lab: Lab, chromium) -> None:
    """The page's indicator stays busy on a cell the kernel has finished: the server's idle kernel shows the stall."""
    with pytest.warns(BrowserRetry, match=r"try 1: for 20 s the page waited on cells \(kernel busy\)"):
        page, state = run_notebook(chromium, lab, SMOKE, stall_s=20, prepare=partial(deafened_mid_cell, attempts=(1,)))
    page.close()
    lab.shut_down_kernels()
    assert "after the error" in state["text"], "the second try did not run the notebook to its end"


def test_a_page_cut_off_from_its_kernel_is_run_again_in_a_new_browser(lab: Lab, chromium) -> None:
    restarts = chromium.restarts
    with pytest.warns(BrowserRetry, match="try 1: the kernel never showed as started"):
        page, state = run_notebook(chromium, lab, SMOKE, start_s=20, prepare=partial(deaf, attempts=(1,)))
    page.close()
    lab.shut_down_kernels()
    assert chromium.restarts == restarts + 1, "the retry did not start a new chromium"
    assert "after the error" in state["text"], "the second try did not run the notebook to its end"


def test_a_page_that_never_reaches_its_kernel_fails_with_each_try_reported(lab: Lab, chromium) -> None:
    with pytest.raises(AssertionError, match="lost its kernel 2 times") as failed:
        run_notebook(chromium, lab, SMOKE, start_s=10, tries=2, prepare=partial(deaf, attempts=(1, 2)))
    report = str(failed.value)
    assert "try 1:" in report and "try 2:" in report and "server's kernels:" in report
    assert report.count("page said:") == 2, "the pages' console and websocket events are missing from the report"
    assert "frames:" in report, "the events/subscribe websocket's frame counts are missing from the report"
