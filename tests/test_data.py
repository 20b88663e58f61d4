"""helpers.data: the data root, the offline Fashion-MNIST route, and one clear error when data is missing."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import pytest
import torch
import torchvision

from helpers import data
from helpers.data import DatasetUnavailableError, load_dataset


@pytest.fixture
def offline(monkeypatch):
    """torchvision's download fails as it does without internet."""

    def fail(self):
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://example, got: no network")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", fail)


def idx_bytes(name: str, n: int = 3) -> bytes:
    """A small, complete IDX file like the one ``name`` holds: n images of 28x28 or n labels."""
    dims = (n,) if "labels" in name else (n, 28, 28)
    body = bytes(i % 10 for i in range(n)) if "labels" in name else bytes(n * 28 * 28)
    return b"\0\0\x08" + bytes([len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + body


def _fake_debian(folder: Path) -> Path:
    folder.mkdir()
    for name in data.RAW_FILES:
        with gzip.open(folder / f"{name}.gz", "wb") as f:
            f.write(idx_bytes(name))
    return folder


def test_names():
    assert data.canonical_name("mnist") == "MNIST"
    assert data.canonical_name("fashion-mnist") == "FashionMNIST"
    with pytest.raises(ValueError, match="MNIST, FashionMNIST"):
        data.canonical_name("CIFAR10")


def test_data_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    root = Path(data.__file__).resolve().parent.parent
    assert data.data_dir() == root / "data"  # the clone's folder, whatever the working directory
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    assert data.data_dir() == tmp_path
    assert data.data_dir("elsewhere") == Path("elsewhere")


def test_one_data_folder_from_the_clone_root_and_from_notebooks(monkeypatch, tmp_path):
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    root = Path(data.__file__).resolve().parent.parent
    monkeypatch.chdir(root / "notebooks")  # where JupyterLab runs a lesson
    from_notebooks = data.data_dir()
    monkeypatch.chdir(root)  # where the course runner starts
    assert data.data_dir() == from_notebooks == root / "data"


def test_installed_without_a_clone_data_goes_to_a_user_cache(monkeypatch, tmp_path):
    fake_site = tmp_path / "site-packages" / "helpers"
    fake_site.mkdir(parents=True)
    monkeypatch.setattr(data, "__file__", str(fake_site / "data.py"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data.default_data_dir() == tmp_path / "cache" / "pytorch-gpu-course" / "data"


def test_prepare_offline_unpacks_debian_files(tmp_path):
    source = _fake_debian(tmp_path / "debian")
    assert data.prepare_offline("FashionMNIST", tmp_path / "root", source=source)
    raw = tmp_path / "root" / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(data.RAW_FILES)
    assert (raw / "t10k-labels-idx1-ubyte").read_bytes() == idx_bytes("t10k-labels-idx1-ubyte")


def test_prepare_offline_never_fills_mnist_with_fashion(tmp_path):
    source = _fake_debian(tmp_path / "debian")
    assert not data.prepare_offline("MNIST", tmp_path / "root", source=source)
    assert not (tmp_path / "root" / "MNIST").exists()


def test_missing_dataset_error_lists_files_and_offline_route(tmp_path, offline):
    with pytest.raises(DatasetUnavailableError) as info:
        load_dataset("MNIST", root=tmp_path, verbose=False)
    message = str(info.value)
    for name in data.RAW_FILES:
        assert str(tmp_path / "MNIST" / "raw" / name) in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "COURSE_DATASET=FashionMNIST" in message
    assert "no network" in message
    assert isinstance(info.value, FileNotFoundError)


def test_download_false_fails_without_trying(tmp_path, monkeypatch):
    monkeypatch.setattr(torchvision.datasets.MNIST, "download", lambda self: pytest.fail("tried to download"))
    with pytest.raises(DatasetUnavailableError, match="download=False"):
        load_dataset("MNIST", root=tmp_path, download=False)


@pytest.mark.skipif(not data.DEBIAN_FASHION_MNIST.is_dir(), reason="needs apt-get install dataset-fashion-mnist")
def test_full_fashion_mnist_offline(tmp_path, capsys, offline):
    train = load_dataset("FashionMNIST", train=True, root=tmp_path)
    test = load_dataset("fashion-mnist", train=False, root=tmp_path)
    assert (len(train), len(test)) == (60_000, 10_000)
    assert torch.bincount(train.targets).tolist() == [6_000] * 10
    assert torch.bincount(test.targets).tolist() == [1_000] * 10
    image, label = test[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32 and isinstance(label, int)
    assert "Loaded FashionMNIST train split: 60,000 images" in capsys.readouterr().out
    # MNIST is still missing: the Fashion-MNIST files must not stand in for it
    with pytest.raises(DatasetUnavailableError):
        load_dataset("MNIST", root=tmp_path, verbose=False)
