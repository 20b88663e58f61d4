"""The READMEs stay true: every command they show parses, every local link resolves, no output holds a home path.

Commands are read from the ```bash blocks of README.md and colab/README.md. A `python -m helpers.X ...` or
`python -m tools.X ...` command is parsed by that module's own argument parser (and stopped there, so nothing runs);
files and folders a command names must exist; a command of a kind this test does not know fails it, so a new command
cannot slip in unchecked."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import nbformat
import pytest
from nblint import LOCAL_PATH

ROOT = Path(__file__).resolve().parent.parent
READMES = [ROOT / "README.md", ROOT / "colab" / "README.md"]
APT_PACKAGES = {"dataset-fashion-mnist", "chromium"}
"""Debian packages the READMEs may tell a reader to install."""


class Parsed(Exception):
    """Raised in place of running a command once its arguments have parsed."""


def bash_commands(path: Path) -> list[str]:
    """Each command of the ```bash blocks, split at `&&`, without comments."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                commands += [part.strip() for part in line.split("&&")]
    return commands


COMMANDS = [(path.relative_to(ROOT).as_posix(), c) for path in READMES for c in bash_commands(path)]


def _parse_helpers_command(module: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    original = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    main = importlib.import_module(module).main
    if module == "lessons.lesson_00":  # takes no arguments
        assert args == [], f"python -m lessons.lesson_00 takes no arguments, got {args}"
        return
    try:
        main(args)
    except Parsed:
        return
    except SystemExit as exc:
        pytest.fail(f"python -m {module} {shlex.join(args)}: the arguments do not parse (exit {exc.code})")
    pytest.fail(f"python -m {module} {shlex.join(args)} parsed nothing")


def _check_pip(args: list[str]) -> None:
    assert args[0] == "install", args
    for flag, value in zip(args, args[1:], strict=False):
        if flag in ("-r", "-c"):
            assert (ROOT / value).is_file(), f"pip {flag} {value}: no such file"
        if flag == "-e":
            assert (ROOT / value / "pyproject.toml").is_file(), f"pip -e {value}: not a project"


@pytest.mark.parametrize(("readme", "command"), COMMANDS, ids=[f"{r}: {c}" for r, c in COMMANDS])
def test_every_command_parses(readme: str, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the program
        words.pop(0)
    if words[0] == "sudo":
        words.pop(0)
    program, args = Path(words[0]).name, words[1:]
    if program == "apt-get":
        assert args[0] == "install" and set(args[1:]) <= APT_PACKAGES, command
    elif program == "pip":
        _check_pip(args)
    elif program == "jupyter":
        assert args[0] == "lab" and all((ROOT / a).exists() for a in args[1:]), command
    elif program.startswith("python") and args[:2] == ["-m", "venv"]:
        assert len(args) == 3, command
    elif program.startswith("python") and args[:2] == ["-m", "pytest"]:
        for before, a in zip(args[1:], args[2:], strict=False):
            if before in ("-m", "-k"):  # a marker or keyword expression, not a path
                assert a == "not slow", f"{command}: only the fast loop's -m 'not slow' is documented"
                continue
            if before == "-n":  # pytest-xdist's number of workers
                assert a.isdigit(), f"{command}: -n takes a number of workers"
                continue
            assert a.startswith("-") or (ROOT / a).exists(), f"{command}: {a} does not exist"
    elif program.startswith("python") and args[0] == "-m" and args[1].startswith(("helpers.", "lessons.", "tools.")):
        _parse_helpers_command(args[1], args[2:], monkeypatch)
    elif program.startswith("python") and args[0].endswith(".py"):
        assert (ROOT / args[0]).is_file(), command
    else:
        pytest.fail(f"{readme}: a command this test does not know how to check: {command}")


def test_the_readme_shows_its_two_commands() -> None:
    commands = [c for r, c in COMMANDS if r == "README.md"]
    assert ".venv/bin/python -m tools.course run --quick" in commands
    assert ".venv/bin/python -m pytest" in commands


LINKS = [
    (path, target)
    for path in READMES
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    if not re.match(r"[a-z]+:", target) and not target.startswith("#")
]


@pytest.mark.parametrize(("readme", "target"), LINKS, ids=[f"{p.name}->{t}" for p, t in LINKS])
def test_every_local_link_resolves(readme: Path, target: str) -> None:
    assert (readme.parent / target.split("#")[0]).exists(), f"{readme.relative_to(ROOT)} links to missing {target}"


def test_no_committed_output_holds_a_machine_path() -> None:
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            for out in cell.get("outputs", []):
                text = str(out.get("text", "")) + str(out.get("traceback", "")) + str(out.get("data", {}))
                if match := LOCAL_PATH.search(text):
                    found.append(f"{path.name} cell {index}: {match.group(0)}")
    assert not found, found


README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_jupyter_lab_is_named_as_the_set_up_leaves_it() -> None:
    """The set-up never activates the environment, so a bare `jupyter lab` is not found after it."""
    for match in re.finditer(r"`([^`]*\bjupyter lab[^`]*)`", README):
        command = match.group(1)
        sentence = README[max(0, match.start() - 200) : match.end() + 200]
        assert ".venv/bin/jupyter lab" in command or "source .venv/bin/activate" in sentence, command


def test_the_set_up_names_the_python_it_needs_the_size_and_a_cpu_only_route() -> None:
    setup = README.split("\n## Set up and run\n", 1)[1].split("\n## ", 1)[0]
    before_command = setup.split("```bash", 1)[0]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    floor = re.search(r'^requires-python = ">=(\d+\.\d+)"', pyproject, re.M).group(1)
    assert f"Python {floor} or newer" in before_command
    assert re.search(r"`\.venv`\s+folder\s+takes\s+about\s+\d+(\.\d+)?\s+GB", setup)
    lock = (ROOT / "requirements-lock.txt").read_text(encoding="utf-8")
    pins = [re.search(rf"^{name}==\S+", lock, re.M).group(0) for name in ("torch", "torchvision")]
    cpu = [c for c in bash_commands(ROOT / "README.md") if "download.pytorch.org/whl/cpu" in c]
    assert cpu == [f".venv/bin/pip install {' '.join(pins)} --index-url https://download.pytorch.org/whl/cpu"]


def test_the_runners_status_2_list_holds_only_what_exits_2_before_any_lesson() -> None:
    start = README.index("exits with status 2 before any lesson starts:")
    listed = README[start:].split("\n\n", 2)[1]  # the bullet list right after that sentence
    assert listed.startswith("- **")
    for later in ("timed out after", "`interrupted`", "130", "143", "Ctrl-C"):
        assert later not in listed, f"{later!r} is not refused before a lesson starts"
    assert "not a valid notebook" in listed and "git checkout --\n  notebooks/" in listed
