"""helpers.transfer: to_device on nested batches, and DeviceDataLoader.

The ``meta`` device stands in for a second device on machines without a GPU: moving to it is a real device change.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import NamedTuple

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers import placement
from helpers.transfer import DeviceDataLoader, map_batch, to_device

META = torch.device("meta")


class Batch(NamedTuple):
    images: torch.Tensor
    labels: torch.Tensor


class SpyTensor(torch.Tensor):
    """A tensor subclass that records the keyword arguments of every ``.to`` call."""

    calls: list[dict] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.to:
            cls.calls.append(dict(kwargs or {}))
        return super().__torch_function__(func, types, args, kwargs)


def test_single_tensor_moves():
    assert to_device(torch.ones(2), META).device == META


def test_list_and_tuple_keep_type_and_order():
    moved = to_device([torch.ones(1), (torch.zeros(2), torch.ones(3))], META)
    assert isinstance(moved, list) and isinstance(moved[1], tuple)
    assert [t.shape[0] for t in (moved[0], *moved[1])] == [1, 2, 3]
    assert all(t.device == META for t in (moved[0], *moved[1]))


def test_dict_and_nested_dict():
    batch = OrderedDict(x=torch.ones(2), extra={"mask": torch.zeros(2, dtype=torch.bool)})
    moved = to_device(batch, META)
    assert type(moved) is OrderedDict and list(moved) == ["x", "extra"]
    assert moved["x"].device == META and moved["extra"]["mask"].device == META
    assert moved["extra"]["mask"].dtype == torch.bool


def test_named_tuples_typing_and_collections():
    Pair = namedtuple("Pair", "a b")
    moved = to_device([Batch(torch.ones(4, 1), torch.arange(4)), Pair(torch.ones(1), 3)], META)
    assert isinstance(moved[0], Batch) and moved[0].images.device == META and moved[0].labels.device == META
    assert isinstance(moved[1], Pair) and moved[1].a.device == META and moved[1].b == 3


def test_non_tensor_leaves_left_alone():
    leaves = [None, True, 3, 2.5, 1j, "name", b"raw", torch.float16, torch.device("cpu")]
    moved = to_device({"t": torch.ones(1), "leaves": leaves}, META)
    assert moved["leaves"] == leaves
    assert all(a is b for a, b in zip(moved["leaves"], leaves, strict=True))


def test_original_batch_is_not_modified():
    batch = {"x": torch.ones(2)}
    to_device(batch, META)
    assert batch["x"].device == torch.device("cpu")


@pytest.mark.parametrize("flag", [True, False])
def test_non_blocking_passed_through(flag):
    SpyTensor.calls.clear()
    spy = torch.ones(3).as_subclass(SpyTensor)
    to_device({"a": [spy]}, "cpu", non_blocking=flag)
    assert SpyTensor.calls and SpyTensor.calls[-1].get("non_blocking") is flag


def test_unsupported_type_names_where_it_is():
    with pytest.raises(TypeError, match=r"batch\['meta'\]\[1\] of type set") as info:
        to_device({"x": torch.ones(1), "meta": [1, {2, 3}]}, META)
    assert "torch.as_tensor" in str(info.value)


def test_unsupported_type_in_named_tuple_field():
    with pytest.raises(TypeError, match=r"batch\.labels of type object"):
        to_device(Batch(torch.ones(1), object()), META)


def test_one_walker_for_moving_and_listing():
    """to_device and placement.batch_leaves walk a batch the same way: same leaves, same paths, same containers."""
    batch = {"pair": Batch(torch.ones(2), torch.arange(2)), "shape": torch.Size([2, 3]), "rest": [(1, "a"), None]}
    seen = []
    rebuilt = map_batch(batch, lambda path, leaf: seen.append(path) or leaf)
    assert seen == [path for path, _ in placement.batch_leaves(batch)]
    assert seen[:3] == ["batch['pair'].images", "batch['pair'].labels", "batch['shape'][0]"]
    assert type(rebuilt["pair"]) is Batch and type(rebuilt["shape"]) is torch.Size
    assert rebuilt["rest"] == [(1, "a"), None]
    moved = to_device(batch, META)
    assert moved["pair"].labels.device == META and moved["shape"] == torch.Size([2, 3])


def _loader(n: int = 10, batch_size: int = 4, **kwargs) -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(n * 2.0).reshape(n, 2), torch.arange(n)), batch_size, **kwargs)


def test_device_data_loader_length_and_batches():
    loader = _loader()
    wrapped = DeviceDataLoader(loader, META)
    assert len(wrapped) == len(loader) == 3
    batches = list(wrapped)
    assert len(batches) == 3
    assert all(x.device == META and y.device == META for x, y in batches)
    assert [y.shape[0] for _, y in batches] == [4, 4, 2]


def test_device_data_loader_is_reiterable():
    wrapped = DeviceDataLoader(_loader(), "cpu")
    assert sum(1 for _ in wrapped) == sum(1 for _ in wrapped) == 3


def test_device_data_loader_values_unchanged_on_cpu():
    (x, y), *_ = DeviceDataLoader(_loader(), "cpu")
    assert torch.equal(y, torch.arange(4)) and x.shape == (4, 2)


def test_device_data_loader_non_blocking_default():
    class Pinned(list):
        pin_memory = True

    assert DeviceDataLoader(_loader(), "cpu").non_blocking is False
    assert DeviceDataLoader(Pinned(), "cpu").non_blocking is False  # nothing to overlap with on the CPU
    assert DeviceDataLoader(Pinned(), META).non_blocking is True
    assert DeviceDataLoader([], META).non_blocking is False
    assert DeviceDataLoader(Pinned(), META, non_blocking=False).non_blocking is False


def test_device_data_loader_passes_non_blocking():
    SpyTensor.calls.clear()
    batches = [[torch.ones(2).as_subclass(SpyTensor)]]
    list(DeviceDataLoader(batches, "cpu", non_blocking=True))
    assert SpyTensor.calls[-1].get("non_blocking") is True


def test_device_data_loader_repr():
    assert repr(DeviceDataLoader(_loader(), "cpu")) == "DeviceDataLoader(DataLoader, device=cpu, non_blocking=False)"
