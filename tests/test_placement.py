"""Unit tests of helpers.placement: the table of where tensors live, the odd ones out, and the GPU stand-ins."""

import re
from collections import namedtuple
from types import MappingProxyType

import pytest
import torch
from torch import nn

from helpers import placement
from helpers.errors import expect_error

Pair = namedtuple("Pair", ["inputs", "targets"])


class WithAttribute(nn.Module):
    """A module with a parameter, a buffer and a plain tensor attribute that .to() leaves behind."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("scale", torch.ones(2))
        self.mask = torch.ones(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale * self.mask


def test_placements_of_a_batch_walk_nested_containers_and_skip_other_leaves():
    batch = {
        "x": torch.zeros(2),
        "more": [torch.ones(1), ("text", 3, None, torch.ones(4))],
        "pair": Pair(1, torch.ones(5)),
    }
    names = [e.name for e in placement.placements(batch=batch)]
    assert names == ["batch['x']", "batch['more'][0]", "batch['more'][1][3]", "batch['pair'].targets"]


def test_batch_leaves_keeps_every_leaf_and_walks_any_mapping():
    proxy = MappingProxyType({"x": torch.zeros(2), "tag": "train"})  # a Mapping that is not a dict
    leaves = list(placement.batch_leaves({"inner": proxy, "ids": [1, None]}))
    assert [path for path, _ in leaves] == [
        "batch['inner']['x']",
        "batch['inner']['tag']",
        "batch['ids'][0]",
        "batch['ids'][1]",
    ]
    assert [leaf for _, leaf in leaves][1:] == ["train", 1, None]
    assert [e.name for e in placement.placements(batch=proxy)] == ["batch['x']"]


def test_placements_lists_parameters_buffers_attributes_and_batch():
    model = WithAttribute()
    entries = placement.placements(model, {"x": torch.zeros(4, 3)}, loss_fn=nn.CrossEntropyLoss(weight=torch.ones(2)))
    kinds = {e.name: e.kind for e in entries}
    assert kinds == {
        "model.fc.weight": "parameter",
        "model.fc.bias": "parameter",
        "model.scale": "buffer",
        "model.mask": "attribute",
        "batch['x']": "batch",
        "loss_fn.weight": "buffer",
    }
    by_name = {e.name: e for e in entries}
    assert by_name["model.fc.weight"].shape == (2, 3)
    assert by_name["batch['x']"].dtype == torch.float32


def test_plain_attribute_left_behind_is_the_odd_one_out():
    model = WithAttribute().to("meta")  # .to() moves parameters and buffers, not the plain attribute
    odd = placement.odd_ones_out(placement.placements(model))
    assert [e.name for e in odd] == ["model.mask"]
    assert odd[0].device == torch.device("cpu")


def test_majority_device_and_tie_goes_to_first_seen():
    meta, cpu = torch.device("meta"), torch.device("cpu")
    entries = placement.placements(batch=[torch.ones(1, device="meta"), torch.ones(1)])
    assert placement.majority_device(entries) == meta
    entries = placement.placements(batch=[torch.ones(1), torch.ones(1, device="meta")])
    assert placement.majority_device(entries) == cpu
    assert placement.majority_device([]) is None


def test_expected_device_overrides_majority():
    entries = placement.placements(batch={"a": torch.ones(1), "b": torch.ones(1), "c": torch.ones(1, device="meta")})
    assert [e.name for e in placement.odd_ones_out(entries)] == ["batch['c']"]
    assert [e.name for e in placement.odd_ones_out(entries, "meta")] == ["batch['a']", "batch['b']"]
    assert placement.odd_ones_out(entries, "cpu") == [e for e in entries if e.name == "batch['c']"]


def test_report_prints_table_and_names_odd_ones(capsys):
    model = nn.Linear(2, 2).to("meta")
    odd = placement.report(model, {"x": torch.ones(1, 2, device="meta"), "y": torch.zeros(1, dtype=torch.long)})
    out = capsys.readouterr().out
    assert [e.name for e in odd] == ["batch['y']"]
    lines = out.splitlines()
    assert lines[0].split() == ["name", "kind", "device", "shape", "dtype", "note"]
    assert len(lines[1].split()) == 6  # one rule under each titled column, none under an untitled one
    marked = [line for line in lines if "<- odd one out" in line]
    assert len(marked) == 1 and marked[0].startswith("batch['y']") and "cpu" in marked[0] and "int64" in marked[0]
    assert "Not on meta" in lines[-1] and "batch['y'] (cpu)" in lines[-1]


def test_report_all_on_one_device_and_empty(capsys):
    assert placement.report(nn.Linear(2, 2)) == []
    out = capsys.readouterr().out
    assert "All 2 tensors are on cpu." in out
    head, rule = out.splitlines()[:2]
    assert head.split() == ["name", "kind", "device", "shape", "dtype"] and len(rule.split()) == 5  # no note column
    assert placement.report() == []
    out = capsys.readouterr().out
    assert "(no tensors)" in out and "No tensors found." in out


def test_cuda_without_index_matches_any_cuda_index():
    entry = placement.Placement("t", "batch", torch.device("cuda", 1), (1,), torch.float32)
    assert placement.odd_ones_out([entry], "cuda") == []
    assert placement.odd_ones_out([entry], "cuda:0") == [entry]


def test_cuda_or_fake_raises_plain_runtime_error_naming_both_devices():
    with pytest.raises(RuntimeError) as info, placement.cuda_or_fake("cpu") as gpu:
        torch.ones(3, device=gpu) + torch.ones(3)
    assert type(info.value) is RuntimeError  # not a subclass: the type a GPU raises
    # The GPU's and recent releases' text says "same device"; older releases' fake tensors say "different devices".
    assert re.search("same device|different devices", str(info.value))
    assert "cuda:0" in str(info.value) and "cpu" in str(info.value)


def test_cuda_or_fake_error_points_at_the_line_of_the_block(capsys):
    with expect_error(RuntimeError, match="same device|different devices"), placement.cuda_or_fake("cpu") as gpu:
        t = torch.ones(3, device=gpu)
        t * torch.ones(2, 3)[0]
    line = capsys.readouterr().err.splitlines()[0]
    assert line.endswith(": t * torch.ones(2, 3)[0]")


def test_cuda_or_fake_allows_cpu_scalars_and_moves_modules():
    layer = nn.Linear(3, 2)
    with placement.cuda_or_fake("cpu") as gpu:
        t = torch.ones(3, device=gpu) * torch.tensor(2.0)
        layer = layer.to(gpu)
        out = layer(torch.ones(4, 3).to(gpu))
    assert t.device.type == "cuda" and out.device.type == "cuda" and tuple(out.shape) == (4, 2)
    assert all(p.device.type == "cuda" and p.requires_grad for p in layer.parameters())


def test_cuda_or_fake_indexes_with_a_cpu_index_tensor():
    with placement.cuda_or_fake("cpu") as gpu:
        rows = torch.randn(10, 4, device=gpu)[torch.tensor([1, 5, 7])]
    assert rows.device.type == "cuda" and tuple(rows.shape) == (3, 4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the stand-in is used only without a GPU")
def test_cuda_or_fake_turns_autograd_off_and_restores_the_conversion_flag():
    before = torch.__future__.get_overwrite_module_params_on_conversion()
    with placement.cuda_or_fake("cpu"):
        assert not torch.is_grad_enabled()  # older releases abort the process when autograd records fake CUDA ops
    assert torch.is_grad_enabled()
    assert torch.__future__.get_overwrite_module_params_on_conversion() == before
    with pytest.raises(ValueError), placement.cuda_or_fake("cpu"):
        raise ValueError("restored after an error too")
    assert torch.is_grad_enabled()
    assert torch.__future__.get_overwrite_module_params_on_conversion() == before


def test_cuda_or_fake_passes_other_errors_through():
    with pytest.raises(ValueError, match="not a mismatch"), placement.cuda_or_fake("cpu"):
        raise ValueError("not a mismatch")


def test_error_origin_names_the_real_gpu_or_the_stand_in():
    assert placement.error_origin("cuda:0") == "Real error, with the real GPU as the second device:"
    assert placement.error_origin(torch.device("cuda", 0), fake=True) == (
        "Stand-in error from fake CUDA tensors (this machine has no GPU):"
    )
    assert placement.error_origin("meta") == "Stand-in error from the meta device (this machine has no GPU):"


def test_cuda_or_fake_says_where_an_error_came_from_and_only_then(capsys):
    expected = placement.error_origin("cuda", fake=not torch.cuda.is_available())
    with placement.cuda_or_fake("cpu") as gpu:
        torch.ones(3, device=gpu) + torch.ones(3, device=gpu)
    assert capsys.readouterr().out == ""  # no error, no line
    with expect_error(RuntimeError, match="same device|different devices"), placement.cuda_or_fake("cpu") as gpu:
        torch.ones(3, device=gpu) + torch.ones(3)
    captured = capsys.readouterr()
    assert captured.out == expected + "\n"
    # 2.14 words the fake mismatch as CUDA does; 2.8's fake tensors say "found two different devices"
    assert re.search(
        r"RuntimeError: (Expected all tensors to be on the same device|.*found two different devices)", captured.err
    )
    with pytest.raises(ValueError), placement.cuda_or_fake("cpu"):
        raise ValueError("not about devices")
    assert capsys.readouterr().out == ""  # other errors pass through unlabelled


@pytest.fixture
def machine_with_a_gpu(monkeypatch):
    """This process as it would be on a machine with CUDA GPUs, the current one being cuda:0 (nothing runs on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.mark.parametrize(
    ("device", "expected"), [("cuda", "cuda:0"), ("cuda:1", "cuda:1"), ("cpu", "meta"), ("mps", "meta")]
)
def test_gpu_or_meta_uses_the_gpu_only_for_a_lesson_on_cuda(machine_with_a_gpu, device, expected):
    assert placement.gpu_or_meta(device) == torch.device(expected)


def test_cuda_or_fake_uses_fakes_when_the_lesson_runs_on_the_cpu_of_a_gpu_machine(machine_with_a_gpu, capsys):
    with pytest.raises(RuntimeError), placement.cuda_or_fake("cpu") as gpu:
        t1 = torch.ones(3, device=gpu)
        assert type(t1).__name__ == "FakeTensor"  # no real GPU memory was touched
        t1 + torch.ones(3)
    assert capsys.readouterr().out == "Stand-in error from fake CUDA tensors (the lesson does not run on the GPU):\n"


def test_cuda_or_fake_yields_the_lessons_gpu_on_a_gpu_machine(machine_with_a_gpu):
    with placement.cuda_or_fake("cuda:1") as gpu:
        assert gpu == torch.device("cuda", 1)
