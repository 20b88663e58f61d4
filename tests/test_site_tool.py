"""tools/site.py, the website builder, without Sphinx: links, the staged notebooks, the pinned npm downloads."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from pathlib import Path

import nbformat
import pytest

from helpers import lesson
from tools import launch, site

LESSONS = {"notebooks/05_mnist_on_gpu.ipynb": "lessons/05_mnist_on_gpu"}


def test_links_to_lessons_and_the_guide_become_pages():
    text = "See [lesson 05](notebooks/05_mnist_on_gpu.ipynb#exercise-1) and [the guide](colab/README.md)."
    assert site.rewrite_links(text, "", LESSONS) == (
        "See [lesson 05](lessons/05_mnist_on_gpu.ipynb#exercise-1) and [the guide](colab.md)."
    )
    from_guide = site.rewrite_links("[05](../notebooks/05_mnist_on_gpu.ipynb), [home](../README.md)", "colab", LESSONS)
    assert from_guide == "[05](lessons/05_mnist_on_gpu.ipynb), [home](index.md)"


def test_other_repository_files_link_to_github_and_addresses_stay():
    text = "[lock](requirements-lock.txt) [web](https://pytorch.org/docs) [here](#troubleshooting) ![b](x.svg)"
    rewritten = site.rewrite_links(text, "", LESSONS)
    assert f"[lock]({launch.repository_url()}/blob/{launch.REF}/requirements-lock.txt)" in rewritten
    assert "[web](https://pytorch.org/docs)" in rewritten and "[here](#troubleshooting)" in rewritten
    assert "![b](x.svg)" in rewritten


def lesson_notebook(device: str = "cuda:0", quick: bool = False) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    settings = nbformat.v4.new_code_cell("settings = lesson.start(DEVICE, QUICK)")
    settings.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"text/plain": "Lesson settings: ...", lesson.RECORD_MIME: {"device": device, "quick": quick}},
        )
    ]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 05 · A lesson"),
        nbformat.v4.new_code_cell("# bootstrap"),
        settings,
    ]
    return nb


def test_the_origin_line_names_device_and_mode():
    assert site.produced_by(lesson_notebook("cuda:0", False)) == (
        "The outputs on this page come from a run on device `cuda:0`, in a full run."
    )
    assert "device `cpu`, in quick mode" in site.produced_by(lesson_notebook("cpu", True))
    assert site.produced_by(nbformat.v4.new_notebook()) is None


def test_a_staged_lesson_drops_runner_data_and_folds_the_setup_cell(tmp_path: Path):
    path = tmp_path / "05_x.ipynb"
    nbformat.write(lesson_notebook("cpu", True), path)
    staged = site.stage_notebook(path)
    assert staged.cells[1].cell_type == "markdown" and "device `cpu`" in staged.cells[1].source
    assert "hide-input" in staged.cells[2].metadata["tags"]  # the bootstrap cell, now after the origin line
    outputs = staged.cells[3].outputs
    assert lesson.RECORD_MIME not in outputs[0]["data"] and "text/plain" in outputs[0]["data"]
    assert lesson.RECORD_MIME in nbformat.read(path, as_version=4).cells[2].outputs[0]["data"], "source untouched"


def tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pinned(data: bytes, files: tuple[str, ...]) -> site.NpmPackage:
    return site.NpmPackage("@scope/pkg", "1.2.3", base64.b64encode(hashlib.sha512(data).digest()).decode(), files)


def test_a_cached_tarball_is_used_and_unpacked_without_network(tmp_path: Path, monkeypatch):
    data = tarball(
        {
            "package/dist/embed-amd.js": b"js",
            "package/dist/a.woff2": b"font",
            "package/dist/x.map": b"m",
            "package/other.js": b"no",
        }
    )
    package = pinned(data, ("package/dist/embed-amd.js", "package/dist/"))
    (tmp_path / "@scope__pkg-1.2.3.tgz").write_bytes(data)
    monkeypatch.setattr(site, "WIDGET_PACKAGES", (package,))
    monkeypatch.setattr(site.urllib.request, "urlopen", lambda *a, **k: pytest.fail("the network was used"))
    site.unpack_widgets(tmp_path / "out", tmp_path)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.woff2", "embed-amd.js"]


def test_a_tarball_that_does_not_match_its_pin_is_refused_and_dropped(tmp_path: Path):
    package = pinned(b"the real one", ())
    cached = tmp_path / "@scope__pkg-1.2.3.tgz"
    cached.write_bytes(b"tampered")
    with pytest.raises(site.SiteError, match="is not the pinned"):
        site.fetch(package, tmp_path)
    assert not cached.exists()


def test_no_network_and_no_cache_names_the_fix(tmp_path: Path, monkeypatch):
    def offline(*args, **kwargs):
        raise site.urllib.error.URLError("no route to host")

    monkeypatch.setattr(site.urllib.request, "urlopen", offline)
    with pytest.raises(site.SiteError, match="Connect once and build again"):
        site.fetch(pinned(b"x", ()), tmp_path)
