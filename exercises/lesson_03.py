"""Lesson 03's exercise checkers."""

from __future__ import annotations

import torch

from exercises.core import exercise
from helpers.placement import same_device


@exercise("03_buffers_move", "mean and std as buffers")
def check_buffers_move(module: torch.nn.Module | None, device: torch.device) -> str | None:
    """A module whose ``mean`` and ``std`` are buffers, saved in its state_dict, on ``device``."""
    import copy

    from helpers.placement import module_tensors

    if not isinstance(module, torch.nn.Module):
        return f"expected an nn.Module instance, got {type(module).__name__}"
    buffers = dict(module.named_buffers())
    if missing := [k for k in ("mean", "std") if k not in buffers]:
        return f"{' and '.join(missing)} is not a buffer; use self.register_buffer(name, tensor)"
    saved = module.state_dict()
    if unsaved := [k for k in ("mean", "std") if k not in saved]:
        return f"{' and '.join(unsaved)} is missing from state_dict(); keep persistent=True"
    # Moving a copy to the meta device reveals tensors that stay behind, even on a machine whose only device is the CPU.
    moved = copy.deepcopy(module).to("meta")
    if stay := [k for k, _, t in module_tensors(moved, "module") if t.device.type != "meta"]:
        return f"{', '.join(stay)} did not move with .to(); register it as a buffer"
    if wrong := [k for k in ("mean", "std") if not same_device(buffers[k].device, device)]:
        return f"{', '.join(wrong)} is not on {device}; call .to(device) on the module"
    return None


@exercise("03_load_on_cpu", "checkpoint loaded on the CPU")
def check_load_on_cpu(cpu_model: torch.nn.Module | None, reference: torch.nn.Module) -> str | None:
    """A fresh model on the CPU holding the same weights as ``reference`` (loaded from its checkpoint)."""
    if hasattr(cpu_model, "missing_keys") and hasattr(cpu_model, "unexpected_keys"):
        return (
            "load_state_dict returns the keys it matched, not the model: build cpu_model, then call its load_state_dict"
        )
    if not isinstance(cpu_model, torch.nn.Module):
        return f"expected an nn.Module, got {type(cpu_model).__name__}"
    if cpu_model is reference:
        return "that is the original model; build a fresh one and load the checkpoint into it"
    mine, theirs = cpu_model.state_dict(), reference.state_dict()
    if list(mine) != list(theirs):
        return "its state_dict keys differ from the saved model's; build the same architecture"
    if elsewhere := sorted({str(t.device) for t in mine.values() if t.device.type != "cpu"}):
        return f"some tensors are on {', '.join(elsewhere)}; use map_location='cpu'"
    if not all(torch.equal(mine[k], theirs[k].detach().cpu()) for k in mine):
        return "the weights differ from the saved ones; call load_state_dict with the loaded dict"
    return None
