"""MNIST and Fashion-MNIST through torchvision, with an offline route for machines without internet."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
from pathlib import Path

import torchvision
from torchvision import transforms

ENV_DATA_DIR = "COURSE_DATA_DIR"
ENV_DATASET = "COURSE_DATASET"
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's package ``dataset-fashion-mnist`` puts the four .gz files."""

RAW_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

DATASETS = {
    "MNIST": {"cls": torchvision.datasets.MNIST, "mean": 0.1307, "std": 0.3081},
    "FashionMNIST": {"cls": torchvision.datasets.FashionMNIST, "mean": 0.2860, "std": 0.3530},
}
"""Per-dataset class and the mean and standard deviation of the training pixels (scaled to [0, 1])."""


class DatasetUnavailableError(FileNotFoundError):
    """The dataset is not on disk and could not be downloaded; the message lists how to provide it."""


def canonical_name(name: str) -> str:
    """ "mnist" -> "MNIST", "fashion-mnist" -> "FashionMNIST"; ValueError for anything else."""
    key = name.replace("-", "").replace("_", "").lower()
    for canonical in DATASETS:
        if canonical.lower() == key:
            return canonical
    raise ValueError(f"Unknown dataset {name!r}. Choose one of: {', '.join(DATASETS)}.")


def default_data_dir() -> Path:
    """``data/`` in the clone when the helpers run from a clone of the course, else a per-user cache folder.

    Resolved from this file, not the working directory, so a lesson opened in JupyterLab (working directory
    ``notebooks/``) and the course runner (the clone's root) share one folder.
    """
    clone = Path(__file__).resolve().parent.parent
    if (clone / "notebooks").is_dir() and (clone / "pyproject.toml").is_file():
        return clone / "data"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "pytorch-gpu-course" / "data"


def data_dir(root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, else $COURSE_DATA_DIR, else ``default_data_dir()``."""
    return Path(root or os.environ.get(ENV_DATA_DIR) or default_data_dir())


def raw_dir(name: str, root: str | os.PathLike | None = None) -> Path:
    """Where torchvision looks for the unpacked files of ``name``."""
    return data_dir(root) / canonical_name(name) / "raw"


def is_present(name: str, root: str | os.PathLike | None = None) -> bool:
    """Whether all four unpacked files of ``name`` are on disk under the data root."""
    folder = raw_dir(name, root)
    return all((folder / f).is_file() for f in RAW_FILES)


def prepare_offline(name: str, root: str | os.PathLike | None = None, source: Path = DEBIAN_FASHION_MNIST) -> bool:
    """Unpack Fashion-MNIST from Debian's package into the data root; True if the files are now there.

    The .gz files cannot simply be copied: their checksums differ from torchvision's list, so
    torchvision's download check rejects them. Unpacked files pass its existence check.
    """
    if canonical_name(name) != "FashionMNIST" or not all((source / f"{f}.gz").is_file() for f in RAW_FILES):
        return is_present(name, root)
    folder = raw_dir(name, root)
    folder.mkdir(parents=True, exist_ok=True)
    for f in RAW_FILES:
        target = folder / f
        if target.is_file():
            continue
        partial = target.with_suffix(".partial")
        with gzip.open(source / f"{f}.gz", "rb") as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst)
        partial.replace(target)  # a crash mid-copy never leaves a truncated file under the final name
    return True


def downloadable(name: str, timeout: float = 5.0) -> bool:
    """Whether the first download mirror of ``name`` answers within ``timeout`` seconds."""
    import urllib.request

    cls = DATASETS[canonical_name(name)]["cls"]
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
        f"or point ${ENV_DATA_DIR} (or root=...) at a folder that holds {name}/raw/.\n"
        "Offline route: `apt-get install dataset-fashion-mnist` installs Fashion-MNIST under "
        f"{DEBIAN_FASHION_MNIST}, which load_dataset('FashionMNIST') unpacks by itself; run the course with "
        f"{ENV_DATASET}=FashionMNIST to use it."
    )


def _shown(path: Path) -> str:
    """A path as a learner would type it: relative when it is near, absolute otherwise."""
    rel = os.path.relpath(path)
    return str(path.resolve()) if rel.startswith(os.path.join("..", "..")) else rel


def standard_transform(name: str) -> transforms.Compose:
    """ToTensor then Normalize with the dataset's own mean and standard deviation."""
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
    """Load the train or test split of MNIST or FashionMNIST.

    ``transform=None`` uses ``standard_transform(name)``. Raises DatasetUnavailableError, listing the files and
    the offline route, when the data is neither on disk nor downloadable. Never substitutes another dataset.
    """
    name = canonical_name(name)
    root = data_dir(root)
    cls = DATASETS[name]["cls"]
    transform = standard_transform(name) if transform is None else transform
    if not is_present(name, root):
        prepare_offline(name, root)
    if not is_present(name, root):
        if not download:
            raise DatasetUnavailableError(_missing_message(name, root, "download=False"))
        quiet = io.StringIO()
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                cls(root=str(root), train=train, download=True)
        except Exception as exc:  # torchvision raises RuntimeError or URLError depending on where it fails
            raise DatasetUnavailableError(
                _missing_message(name, root, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            ) from None
    dataset = cls(root=str(root), train=train, transform=transform, download=False)
    if verbose:
        split = "train" if train else "test"
        print(f"Loaded {name} {split} split: {len(dataset):,} images from {_shown(root / name)}")
    return dataset
