"""Lesson 03, section 6: Adam's state left on the CPU after ``model.to("cuda")``. What the lesson says about the
mechanism, checked on this machine: Adam's multi-tensor path groups its tensors by the parameters' device and lets
float32 tensors on the CPU through, so the failure comes later, from an update of the running averages. On a CUDA GPU
the lesson's own cell raises it; here the same step is taken when a GPU is present."""

from __future__ import annotations

import pytest
import torch
from torch import nn


def test_the_grouping_lets_float32_state_on_the_cpu_through() -> None:
    # meta stands in for the GPU: the grouping looks only at devices and dtypes
    param, state = torch.zeros(3, device="meta"), torch.zeros(3)
    lists = [[param], [param], [state], [state], [torch.tensor(1.0)]]  # params, grads, exp_avgs, exp_avg_sqs, steps
    groups = torch._C._group_tensors_by_device_and_dtype(lists, False)
    assert list(groups) == [(torch.device("meta"), torch.float32)]
    (params, _, exp_avgs, _, _), _ = groups[(torch.device("meta"), torch.float32)]
    assert params[0].device.type == "meta" and exp_avgs[0].device.type == "cpu"  # let through, not refused


def test_the_grouping_refuses_other_dtypes_on_the_cpu() -> None:
    # the allowance is for float32/64 only: an int64 tensor on the CPU next to a meta parameter is refused
    param, state = torch.zeros(3, device="meta"), torch.zeros(3, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="same device"):
        torch._C._group_tensors_by_device_and_dtype([[param], [state]], False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the lesson's cell raises it there")
def test_adam_state_left_on_the_cpu_fails_on_the_gpu() -> None:
    torch.manual_seed(0)
    early = nn.Linear(3, 1)
    adam = torch.optim.Adam(early.parameters())
    early(torch.randn(4, 3)).sum().backward()
    adam.step()
    early.to("cuda")
    adam.zero_grad()
    early(torch.randn(4, 3, device="cuda")).sum().backward()
    assert adam.state[early.weight]["exp_avg"].device.type == "cpu"
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        adam.step()


def test_an_optimizer_built_before_a_replacing_move_updates_nothing() -> None:
    """Section 6's last trap: with the overwrite flag on, the move makes new Parameters; the optimizer keeps the old
    ones, which get no gradient, so its step changes neither them nor the model."""
    torch.manual_seed(0)
    stale = nn.Linear(3, 1)
    sgd = torch.optim.SGD(stale.parameters(), lr=0.1)
    old_weight, old_before = stale.weight, stale.weight.detach().clone()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        stale.to(torch.float64)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    before = stale.weight.detach().clone()
    stale(torch.randn(4, 3, dtype=torch.float64)).sum().backward()
    sgd.step()
    assert stale.weight is not old_weight and any(p is old_weight for p in sgd.param_groups[0]["params"])
    assert old_weight.grad is None and stale.weight.grad is not None
    assert torch.equal(old_weight, old_before) and torch.equal(stale.weight, before)
