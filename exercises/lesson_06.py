"""Lesson 06's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from exercises.core import exercise, learner_code
from helpers.placement import same_device


@exercise("06_replica_split", "a batch of {batch_size} on {num_gpus} GPUs")
def check_replica_split(sizes: list[int] | None, batch_size: int, num_gpus: int) -> str | None:
    """The batch size each GPU's replica sees when DataParallel splits ``batch_size`` over ``num_gpus``."""
    from lessons.lesson_06 import replica_split

    try:
        answer = [int(n) for n in sizes]
    except (TypeError, ValueError):
        return f"expected a list of whole numbers, got {sizes!r}"
    if answer == replica_split(batch_size, num_gpus):
        return None
    if sum(answer) != batch_size:
        return f"the sizes add up to {sum(answer)}; every row of the batch goes to exactly one GPU"
    return (
        "DataParallel splits with tensor.chunk: every chunk but the last has ceil(batch / GPUs) rows, "
        "so a small batch can leave a GPU with nothing (list only the replicas that run)"
    )


@exercise("06_unprefixed_state_dict", "a state dict the unwrapped model loads")
def check_unprefixed_state_dict(state_dict: dict[str, torch.Tensor] | None, wrapped: torch.nn.Module) -> str | None:
    """The wrapped model's state dict with the "module." prefix removed, tensors unchanged."""
    if not isinstance(state_dict, dict):
        return f"expected a dict of name -> tensor, got {type(state_dict).__name__}"
    expected = wrapped.module.state_dict()
    if any(str(k).startswith("module.") for k in state_dict):
        return 'some keys still start with "module."; remove that prefix from each key'
    if list(state_dict) != list(expected):
        return f"expected the keys {list(expected)}, got {list(state_dict)}"
    if not all(
        isinstance(state_dict[k], torch.Tensor) and torch.equal(state_dict[k].cpu(), v.cpu())
        for k, v in expected.items()
    ):
        return "the keys are right but some tensors differ; keep each value as it was"
    return None


@exercise("06_unwrap", "unwrap a wrapped model", function=True)
def check_unwrap(unwrap: Callable[[torch.nn.Module], torch.nn.Module] | None) -> str | None:
    """``unwrap(m)`` returns the model inside nn.DataParallel or DistributedDataParallel, any other model as it is
    (one whose own child is called "module" included). DDP is tried in a one-process gloo group."""
    from collections import OrderedDict

    import torch.distributed as dist
    from torch import nn

    from helpers.models import MLP

    # DataParallel moves the model it wraps to a lone GPU: it gets a model of its own, so DDP's (gloo) stays on the CPU.
    model, replicated, named_module = MLP(), MLP(), nn.Sequential(OrderedDict(module=nn.Linear(4, 2)))
    cases = [("nn.DataParallel(model)", nn.DataParallel(replicated), replicated), ("a plain model", model, model)]
    cases.append(("a plain model whose child is called 'module'", named_module, named_module))
    own_group = not dist.is_initialized()
    if own_group:  # a world of one: DDP needs a process group, not a second process
        import torch._dynamo  # noqa: F401 (before the group, as in ddp_train: else the group outlives its destroy)

        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        cases.append(("DistributedDataParallel(model)", nn.parallel.DistributedDataParallel(model), model))
        for label, given, expected in cases:
            with learner_code(f"for {label} it raised "):
                got = unwrap(given)
            if got is not expected:
                what = "the model itself" if given is expected else "its .module"
                fix = "test with isinstance(m, (nn.DataParallel, nn.parallel.DistributedDataParallel))"
                return f"for {label} it should return {what}, got a {type(got).__name__}; {fix}"
    finally:
        if own_group:
            dist.destroy_process_group()
    return None


@exercise("06_load_wrapped_checkpoint", "load a wrapped model's checkpoint into a plain model", function=True)
def check_load_plain(
    load_plain: Callable[[Any, torch.device], torch.nn.Module] | None, device: torch.device
) -> str | None:
    """``load_plain(path, device)`` returns a plain MLP on ``device`` holding, loaded strictly, the weights of a
    checkpoint saved from a DataParallel-wrapped MLP (keys that start with "module.")."""
    import tempfile
    from pathlib import Path

    from helpers.models import MLP

    torch.manual_seed(6)
    # What DataParallel(MLP()).state_dict() holds, built without the wrapper: with one GPU visible, DataParallel moves
    # the MLP to it, whatever device the lesson runs on. The checkpoint and the reference stay on the CPU.
    saved = {f"module.{key}": value for key, value in MLP().state_dict().items()}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "wrapped.pt"
        torch.save(saved, path)
        with learner_code("it raised ", "; strip the leading 'module.' from each key"):
            model = load_plain(path, device)
    if not isinstance(model, MLP):
        return f"expected the plain MLP (not a wrapper), got a {type(model).__name__}"
    state = model.state_dict()
    if not all(same_device(t.device, device) for t in state.values()):
        return f"the model should be on {device}: build it there, or move it with .to(device)"
    # Compared on the CPU, whichever device the weights are on; weights on meta hold no values to read back.
    with learner_code("its weights could not be read back to the CPU to compare: "):
        same = list(state) == [k.removeprefix("module.") for k in saved] and all(
            torch.equal(state[k.removeprefix("module.")].to("cpu"), v.to("cpu")) for k, v in saved.items()
        )
    if not same:
        return "its weights are not the checkpoint's: load strictly (strict=False loads nothing when no key matches)"
    return None
