"""helpers.transfer.DeviceResidentLoader against a real DataLoader with per-sample ToTensor + Normalize."""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, random_split

from helpers.data import standard_transform
from helpers.transfer import DeviceResidentLoader


class TinyMNIST(torch.utils.data.Dataset):
    """MNIST's layout and __getitem__ (uint8 .data, .targets, PIL image through the transform) on random pixels.

    Pixels 0 and 1 of each image hold its index, so every sample can be identified from its content alone.
    """

    def __init__(self, n: int = 100, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        self.data[:, 0, 0] = torch.arange(n) % 256
        self.data[:, 0, 1] = torch.arange(n) // 256
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.transform = standard_transform("MNIST")
        self.getitem_calls = 0

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        self.getitem_calls += 1
        return self.transform(Image.fromarray(self.data[i].numpy(), mode="L")), int(self.targets[i])


def sample_ids(X: torch.Tensor, dataset: TinyMNIST) -> torch.Tensor:
    """Recover each image's index from its first two (normalised) pixels."""
    mean, std = dataset.transform.transforms[1].mean[0], dataset.transform.transforms[1].std[0]
    raw = (X[:, 0, 0, :2] * std + mean) * 255
    raw = raw.round().long()
    return raw[:, 0] + 256 * raw[:, 1]


def one_epoch(loader) -> tuple[torch.Tensor, torch.Tensor]:
    Xs, ys = zip(*loader, strict=True)
    return torch.cat(Xs), torch.cat([torch.as_tensor(y) for y in ys])


def sorted_by_id(X: torch.Tensor, y: torch.Tensor, dataset: TinyMNIST) -> tuple[torch.Tensor, ...]:
    ids = sample_ids(X, dataset)
    order = ids.argsort()
    return ids[order], X[order], y[order]


@pytest.mark.parametrize("batch_size", [1, 16, 32, 100, 128])
def test_same_samples_and_values_as_a_dataloader(batch_size):
    ds = TinyMNIST(100)
    torch.manual_seed(0)
    ref = sorted_by_id(*one_epoch(DataLoader(ds, batch_size=batch_size, shuffle=True)), ds)
    got = sorted_by_id(*one_epoch(DeviceResidentLoader.from_dataset(ds, "cpu", batch_size, seed=1)), ds)
    assert torch.equal(ref[0], torch.arange(100))  # the DataLoader saw every sample once ...
    assert torch.equal(got[0], ref[0])  # ... and so did the resident loader
    assert torch.equal(got[1], ref[1])  # bit for bit the pixels ToTensor + Normalize produce
    assert torch.equal(got[2], ref[2])
    assert got[1].dtype == torch.float32 and got[2].dtype == torch.long


def test_without_shuffle_the_order_is_the_dataloaders():
    ds = TinyMNIST(70)
    ref = list(DataLoader(ds, batch_size=32, shuffle=False))
    got = list(DeviceResidentLoader.from_dataset(ds, "cpu", 32, shuffle=False))
    assert len(got) == len(ref) == 3
    for (X, y), (rX, ry) in zip(got, ref, strict=True):
        assert X.shape == rX.shape == (len(ry), 1, 28, 28)
        assert torch.equal(X, rX) and torch.equal(y, ry)


@pytest.mark.parametrize("drop_last", [False, True])
def test_length_and_batch_sizes_match_the_dataloader(drop_last):
    ds = TinyMNIST(100)
    ref = DataLoader(ds, batch_size=32, shuffle=True, drop_last=drop_last)
    res = DeviceResidentLoader.from_dataset(ds, "cpu", 32, drop_last=drop_last, seed=0)
    assert len(res) == len(ref) == (3 if drop_last else 4)
    assert [len(y) for _, y in res] == [len(y) for _, y in ref]
    ids = sample_ids(one_epoch(res)[0], ds)
    assert len(set(ids.tolist())) == len(ids) == (96 if drop_last else 100)  # no sample twice


def test_no_per_sample_work():
    ds = TinyMNIST(50)
    loader = DeviceResidentLoader.from_dataset(ds, "cpu", 8, seed=0)
    for _ in range(2):
        list(loader)
    assert ds.getitem_calls == 0  # never goes through the dataset's per-sample path


def test_shuffles_differ_between_epochs():
    ds = TinyMNIST(100)
    loader = DeviceResidentLoader.from_dataset(ds, "cpu", 10, seed=0)
    first = sample_ids(one_epoch(loader)[0], ds)
    assert torch.equal(first, loader.epoch_indices)
    second = sample_ids(one_epoch(loader)[0], ds)
    assert not torch.equal(first, second)
    assert torch.equal(first.sort().values, second.sort().values)
    assert not torch.equal(first, torch.arange(100))  # actually shuffled


def test_deterministic_with_a_seed():
    ds = TinyMNIST(100)
    a = DeviceResidentLoader.from_dataset(ds, "cpu", 10, seed=7)
    b = DeviceResidentLoader.from_dataset(ds, "cpu", 10, seed=7)
    c = DeviceResidentLoader.from_dataset(ds, "cpu", 10, seed=8)
    for _ in range(2):  # epoch after epoch
        ids_a, ids_b, ids_c = (sample_ids(one_epoch(x)[0], ds) for x in (a, b, c))
        assert torch.equal(ids_a, ids_b)
        assert not torch.equal(ids_a, ids_c)


def test_global_seed_makes_the_default_seed_reproducible():
    ds = TinyMNIST(100)
    torch.manual_seed(3)
    first = sample_ids(one_epoch(DeviceResidentLoader.from_dataset(ds, "cpu", 10))[0], ds)
    torch.manual_seed(3)
    again = sample_ids(one_epoch(DeviceResidentLoader.from_dataset(ds, "cpu", 10))[0], ds)
    assert torch.equal(first, again)


def test_subset_from_random_split():
    ds = TinyMNIST(100)
    train, val = random_split(ds, [80, 20], generator=torch.Generator().manual_seed(0))
    loader = DeviceResidentLoader.from_dataset(val, "cpu", 8, seed=0)
    ids, X, y = sorted_by_id(*one_epoch(loader), ds)
    assert torch.equal(ids, torch.tensor(sorted(val.indices)))
    ref = sorted_by_id(*one_epoch(DataLoader(val, batch_size=8)), ds)
    assert torch.equal(X, ref[1]) and torch.equal(y, ref[2])


def test_without_normalize_only_scales():
    images = torch.tensor([[[0, 255], [51, 102]]], dtype=torch.uint8)  # (1, 2, 2)
    X, y = next(iter(DeviceResidentLoader(images, torch.tensor([3]), "cpu", shuffle=False)))
    assert X.shape == (1, 1, 2, 2)
    assert torch.allclose(X.flatten(), torch.tensor([0.0, 1.0, 0.2, 0.4]))
    assert y.tolist() == [3]


def test_bad_arguments():
    images = torch.zeros(4, 28, 28, dtype=torch.uint8)
    with pytest.raises(ValueError, match="batch_size"):
        DeviceResidentLoader(images, torch.zeros(4), "cpu", batch_size=0)
    with pytest.raises(ValueError, match="labels"):
        DeviceResidentLoader(images, torch.zeros(3), "cpu")
    with pytest.raises(TypeError, match="uint8"):
        DeviceResidentLoader(images.float(), torch.zeros(4), "cpu")
    with pytest.raises(TypeError, match="targets"):
        DeviceResidentLoader.from_dataset(torch.utils.data.TensorDataset(images), "cpu")


def test_a_backend_without_device_randperm_permutes_on_the_cpu():
    # The meta device has no generator: the loader falls back to a CPU generator and copies the order over.
    images, labels = torch.zeros(10, 28, 28, dtype=torch.uint8), torch.arange(10)
    loader = DeviceResidentLoader(images, labels, "meta", batch_size=4, seed=0)
    assert loader.generator.device.type == "cpu"
    batches = list(loader)
    assert [X.device.type for X, _ in batches] == ["meta"] * 3
    assert loader.epoch_indices.device.type == "meta"


def test_on_the_cpu_the_generator_is_the_devices():
    loader = DeviceResidentLoader(torch.zeros(4, 2, 2, dtype=torch.uint8), torch.arange(4), "cpu", seed=0)
    assert loader.generator.device.type == "cpu"


def test_transforms_it_cannot_reproduce_are_refused():
    from torchvision import transforms as T

    ds = TinyMNIST(10)
    ds.transform = T.Compose([T.RandomHorizontalFlip(), T.ToTensor()])
    with pytest.raises(ValueError, match="RandomHorizontalFlip"):
        DeviceResidentLoader.from_dataset(ds, "cpu")
    ds.transform = T.Compose([T.ToTensor(), T.Normalize((0.1, 0.2), (0.3, 0.4))])
    with pytest.raises(ValueError, match="single-channel"):
        DeviceResidentLoader.from_dataset(ds, "cpu")
    ds.transform = T.ToTensor()  # no Normalize: only the scaling to [0, 1]
    X, _ = next(iter(DeviceResidentLoader.from_dataset(ds, "cpu", 10, shuffle=False)))
    assert torch.equal(X[0, 0], ds.data[0].float() / 255)
