"""MNIST and Fashion-MNIST through torchvision, with an offline route for machines without internet.

Importing it loads neither torchvision nor torch (the course runner checks names and folders with it before anything
starts); the functions that read or download the data import torchvision when they run.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import os
import secrets
import shutil
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from helpers import settings
from helpers.settings import canonical_name

if TYPE_CHECKING:
    import torchvision
    from torchvision import transforms

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")  # the .gz files of Debian's dataset-fashion-mnist

RAW_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

DATASETS = {
    "MNIST": {"mean": 0.1307, "std": 0.3081},
    "FashionMNIST": {"mean": 0.2860, "std": 0.3530},
}
"""Per-dataset mean and standard deviation of the training pixels (scaled to [0, 1]); ``dataset_class`` gives the
torchvision class of the same name."""


def dataset_class(name: str) -> type[torchvision.datasets.MNIST]:
    """torchvision's class for ``name`` (``torchvision.datasets.MNIST`` or ``.FashionMNIST``)."""
    import torchvision

    return getattr(torchvision.datasets, canonical_name(name))


class DatasetUnavailableError(FileNotFoundError):
    """The dataset is not on disk and could not be downloaded; the message lists how to provide it."""


class DataDirError(DatasetUnavailableError):
    """The data folder cannot be used: it is a file, or the data cannot be written into it."""


class DamagedDataError(DatasetUnavailableError):
    """A data file is on disk but incomplete (cut short, empty) and cannot be unpacked again from here."""


def default_data_dir() -> Path:
    """``data/`` in the clone when the helpers run from a clone of the course, else a per-user cache folder."""
    clone = Path(__file__).resolve().parent.parent  # not the working directory: lessons and the runner share one folder
    if (clone / "notebooks").is_dir() and (clone / "pyproject.toml").is_file():
        return clone / "data"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "pytorch-gpu-course" / "data"


def data_dir(root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, else $COURSE_DATA_DIR, else ``default_data_dir()``; ``~`` is expanded."""
    if root:
        return Path(root).expanduser()
    return settings.data_dir_given() or default_data_dir()


def _unusable_root(root: str | os.PathLike | None, exc: OSError, folder: Path) -> DataDirError:
    """The one message for a data root that cannot hold the data, naming who chose it and the fix."""
    if root:
        origin, fix = f"given as root={os.fspath(root)!r}", "pass another folder as root=..."
    elif (value := settings.given(settings.DATA_DIR)) is not None:
        origin = f"set by {settings.DATA_DIR}={value!r}"
        fix = f"point {settings.DATA_DIR} at a folder you can write to (it is created if missing), or unset it"
    else:
        origin, fix = "the default data folder", f"set {settings.DATA_DIR} to a folder you can write to"
    base = data_dir(root)
    blocker = _blocker(base)
    if blocker is not None:
        why = f"{blocker} is a file, not a folder"
    elif isinstance(exc, PermissionError):
        why = f"no permission to write in {folder}"
    else:
        why = f"{folder}: {exc.strerror or exc}"
    return DataDirError(
        f"Cannot use the data folder {base} ({origin}): {why}. "
        f"Fix: {fix}; the data is unpacked or downloaded there once."
    )


def _blocker(folder: Path) -> Path | None:
    """The file that stands where ``folder`` or one of the folders above it should be, if any."""
    return next((p for p in [folder, *folder.parents] if p.exists() and not p.is_dir()), None)


def data_dir_problem(root: str | os.PathLike | None = None) -> str | None:
    """Why the data root cannot hold the data, with who chose it and the fix (the message ``DataDirError`` carries);
    None when it can. Looks without writing: a file where a folder must be, or a folder still to be made under one
    this user cannot write to. A read-only root is fine as long as it holds the data."""
    base = data_dir(root)
    if _blocker(base) is not None:
        return str(_unusable_root(root, NotADirectoryError(), base))
    if not base.exists():
        parent = next(p for p in base.parents if p.exists())
        if not os.access(parent, os.W_OK | os.X_OK):
            return str(_unusable_root(root, PermissionError(), parent))
    return None


def raw_dir(name: str, root: str | os.PathLike | None = None) -> Path:
    """Where torchvision looks for the unpacked files of ``name``."""
    return data_dir(root) / canonical_name(name) / "raw"


IDX_ITEM_BYTES = {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}
"""Bytes per item for each IDX type code (unsigned byte, signed byte, short, int, float, double)."""


def idx_problem(path: Path) -> str | None:
    """None when ``path`` is a complete IDX file (as long as its header says), else what is wrong with it."""
    try:
        size = path.stat().st_size
        if path.is_dir():
            return "a folder, not a file"
        with open(path, "rb") as f:
            magic = f.read(4)
            if size == 0:
                return "empty (0 bytes)"
            if len(magic) < 4 or magic[:2] != b"\0\0" or magic[2] not in IDX_ITEM_BYTES or not 1 <= magic[3] <= 4:
                return f"not an IDX data file ({size:,} bytes, wrong header)"
            dims = f.read(4 * magic[3])
    except (FileNotFoundError, NotADirectoryError):  # a file where one of the folders above it should be
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if len(dims) < 4 * magic[3]:
        return f"cut short ({size:,} bytes)"
    expected = 4 + len(dims) + math.prod(struct.unpack(f">{magic[3]}I", dims)) * IDX_ITEM_BYTES[magic[2]]
    if size != expected:
        return f"{'cut short' if size < expected else 'too long'} ({size:,} bytes; its header says {expected:,})"
    return None


def file_problems(name: str, root: str | os.PathLike | None = None) -> dict[Path, str]:
    """Each unpacked file of ``name`` that is missing or incomplete, with what is wrong with it."""
    folder = raw_dir(name, root)
    found = {folder / f: idx_problem(folder / f) for f in RAW_FILES}
    return {path: problem for path, problem in found.items() if problem is not None}


def is_present(name: str, root: str | os.PathLike | None = None) -> bool:
    """Whether all four unpacked files of ``name`` are on disk under the data root, each complete."""
    return not file_problems(name, root)


def _writable(folder: Path, root: str | os.PathLike | None) -> None:
    """Create ``folder``; a data root that cannot hold it raises DataDirError with the fix."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission, a read-only file system
        raise _unusable_root(root, exc, folder) from None


@contextlib.contextmanager
def _preparation_lock(name: str, root: str | os.PathLike | None) -> Iterator[None]:
    """Hold an exclusive lock on ``<root>/<name>/.prepare.lock`` while this process writes the data files; another
    process that wants to write them waits. The OS releases the lock when its holder ends, even when killed."""
    from filelock import FileLock  # a dependency of torch itself

    folder = data_dir(root) / canonical_name(name)
    _writable(folder, root)
    lock = FileLock(folder / ".prepare.lock")
    try:
        lock.acquire()
    except OSError as exc:  # the lock file cannot be created: no permission, a read-only file system
        raise _unusable_root(root, exc, folder) from None
    try:
        yield
    finally:
        lock.release()


def _unpack(source_gz: Path, target: Path, root: str | os.PathLike | None) -> None:
    """Unpack ``source_gz`` to ``target`` through a temporary file of this process's own, renamed when complete."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
    reinstall = "Fix: reinstall it with `sudo apt-get install --reinstall dataset-fashion-mnist`."
    try:
        with gzip.open(source_gz, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        problem = idx_problem(tmp)
        if problem is None:
            os.replace(tmp, target)  # atomic: the final name only ever holds a complete file
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise DatasetUnavailableError(
            f"{source_gz} is damaged ({type(exc).__name__}: {exc or 'it ends too early'}). {reinstall}"
        ) from None
    except OSError as exc:  # writing into the data folder failed: no permission, no space, read-only
        raise _unusable_root(root, exc, target.parent) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    if problem is not None:
        raise DatasetUnavailableError(f"{source_gz} unpacks to an incomplete file ({problem}). {reinstall}")


def prepare_offline(name: str, root: str | os.PathLike | None = None, source: str | os.PathLike | None = None) -> bool:
    """Unpack Fashion-MNIST from Debian's package (``source=None``: ``DEBIAN_FASHION_MNIST``) into the data root; True
    if the files are now there. The .gz files cannot simply be copied: their checksums differ from torchvision's list,
    so its download check rejects them, while unpacked files pass its existence check."""
    source = Path(DEBIAN_FASHION_MNIST if source is None else source)
    if is_present(name, root):
        return True  # nothing to write: a read-only data folder is fine
    if canonical_name(name) != "FashionMNIST" or not all((source / f"{f}.gz").is_file() for f in RAW_FILES):
        return False
    with _preparation_lock(name, root):
        if is_present(name, root):  # another process finished it while this one waited
            return True
        folder = raw_dir(name, root)
        _writable(folder, root)
        # Temporary files of a killed preparation (the bare "<file>.partial" is an earlier version's name).
        for leftover in [*folder.glob(".*.partial"), *(folder / f"{f}.partial" for f in RAW_FILES)]:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        for f in RAW_FILES:
            if idx_problem(folder / f) is not None:
                _unpack(source / f"{f}.gz", folder / f, root)
    return True


def downloadable(name: str, timeout: float = 5.0) -> bool:
    """Whether the first download mirror of ``name`` answers within ``timeout`` seconds."""
    import urllib.request

    cls = dataset_class(name)
    url = cls.mirrors[0] + cls.resources[0][0]
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return True
    except Exception:  # no network, DNS failure, HTTP error: all mean "not from here"
        return False


def _missing_message(name: str, root: Path, reason: str) -> str:
    folder = raw_dir(name, root)
    files = "\n".join(f"    {folder / f}" for f in RAW_FILES)
    return (
        f"{name} is not on disk and could not be downloaded ({reason}).\n"
        f"Put these four unpacked files in place (gunzip the .gz files first):\n{files}\n"
        f"or point ${settings.DATA_DIR} (or root=...) at a folder that holds {name}/raw/.\n"
        "Offline route: `apt-get install dataset-fashion-mnist` installs Fashion-MNIST under "
        f"{DEBIAN_FASHION_MNIST}, which load_dataset('FashionMNIST') unpacks by itself; run the course with "
        f"{settings.DATASET}=FashionMNIST to use it."
    )


def _download(name: str, root: str | os.PathLike | None, train: bool) -> dict[Path, str]:
    """Download ``name`` into the data root unless another process has meanwhile; what is wrong with its files after.
    Files missing or cut short may be another process's download under way: the lock waits for it to end."""
    with _preparation_lock(name, root):
        problems = file_problems(name, root)
        if problems and all(p == "missing" for p in problems.values()):
            quiet = io.StringIO()
            try:
                with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                    dataset_class(name)(root=str(data_dir(root)), train=train, download=True)
            except Exception as exc:  # torchvision raises RuntimeError or URLError depending on where it fails
                reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                raise DatasetUnavailableError(_missing_message(name, data_dir(root), reason)) from None
    return file_problems(name, root)  # a download can end early


def standard_transform(name: str) -> transforms.Compose:
    """ToTensor then Normalize with the dataset's own mean and standard deviation."""
    from torchvision import transforms

    stats = DATASETS[canonical_name(name)]
    return transforms.Compose([transforms.ToTensor(), transforms.Normalize((stats["mean"],), (stats["std"],))])


def load_dataset(
    name: str = "MNIST",
    train: bool = True,
    root: str | os.PathLike | None = None,
    transform=None,
    download: bool = True,
    verbose: bool = True,
) -> torchvision.datasets.MNIST:
    """Load the train or test split of MNIST or FashionMNIST (``transform=None``: ``standard_transform(name)``).

    Data neither on disk nor downloadable raises DatasetUnavailableError, listing the files and the offline route; its
    subclasses are DataDirError (the data folder cannot be used) and DamagedDataError (a file on disk is incomplete).
    Never substitutes another dataset."""
    name = canonical_name(name)
    given = root
    root = data_dir(root)
    cls = dataset_class(name)
    transform = standard_transform(name) if transform is None else transform
    if _blocker(root) is not None:
        raise _unusable_root(given, NotADirectoryError(), root)
    if not is_present(name, root):
        prepare_offline(name, given)
    problems = file_problems(name, root)
    missing = bool(problems) and all(p == "missing" for p in problems.values())
    if missing and not download:
        raise DatasetUnavailableError(_missing_message(name, root, "download=False"))
    if problems and download:
        try:
            problems = _download(name, given, train)
        except DataDirError:
            if missing:
                raise
            # Damaged files in a folder this process cannot write to: named below, with the fix.
    if problems:
        files = "\n".join(f"    {path}: {problem}" for path, problem in problems.items())
        raise DamagedDataError(
            f"{name} is on disk but incomplete:\n{files}\n"
            "Fix: delete the file(s) listed and run again; they are then downloaded (or unpacked) anew."
        )
    dataset = cls(root=str(root), train=train, transform=transform, download=False)
    if verbose:
        shown = os.path.relpath(root / name)  # as a learner would type it, unless it is far away
        if shown.startswith(os.path.join("..", "..")):
            shown = str((root / name).resolve())
        print(f"Loaded {name} {'train' if train else 'test'} split: {len(dataset):,} images from {shown}")
    return dataset
