"""Lesson 09's exercise checkers."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from exercises.core import exercise
from helpers.placement import same_device


@exercise("09_channels_last", "channels_last")
def check_channels_last(images_cl: torch.Tensor | None, images: torch.Tensor) -> str | None:
    """``images`` (B, C, H, W) converted to the channels_last memory format, shape and values unchanged."""
    if not isinstance(images_cl, torch.Tensor):
        return f"expected a torch.Tensor, got {type(images_cl).__name__}"
    if images_cl.shape != images.shape:
        return (
            f"shape is {tuple(images_cl.shape)}, expected {tuple(images.shape)}: channels_last changes the order "
            "in memory, not the shape (no permute)"
        )
    if not same_device(images_cl.device, images.device):
        return f"it lives on {images_cl.device}, not on {images.device} like the input"
    if images_cl.dtype != images.dtype:
        return (
            f"its dtype is {images_cl.dtype}, the input's {images.dtype}: change only the memory format "
            "(.contiguous(memory_format=torch.channels_last) or .to(memory_format=torch.channels_last))"
        )
    if not images_cl.is_contiguous(memory_format=torch.channels_last):
        return "not channels_last in memory; use .contiguous(memory_format=torch.channels_last)"
    if not torch.equal(images_cl, images):
        return "the values differ from the input's"
    return None


@exercise("09_autocast_dtypes", "autocast dtypes", answers=2)
def check_autocast_dtypes(
    output_dtype: torch.dtype | None, weight_dtype: torch.dtype | None, autocast_dtype: torch.dtype
) -> str | None:
    """Inside autocast a linear layer computes in ``autocast_dtype`` while its weight stays float32."""
    if not isinstance(output_dtype, torch.dtype) or not isinstance(weight_dtype, torch.dtype):
        return "answer with dtypes, e.g. out.dtype and layer.weight.dtype"
    if output_dtype != autocast_dtype:
        return f"output dtype {output_dtype}: inside autocast a linear layer's output is {autocast_dtype}"
    if weight_dtype != torch.float32:
        return (
            f"weight dtype {weight_dtype}: autocast casts copies for the computation; the weight itself "
            "is not converted"
        )
    return None


class _WatchedScaler(torch.amp.GradScaler):
    """A GradScaler that counts its ``scale`` calls and notes when ``step`` is running (to tell its optimizer step
    from one the learner calls directly)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.scaled = 0
        self.stepping = False

    def scale(self, outputs):
        self.scaled += 1
        return super().scale(outputs)

    def step(self, optimizer, *args, **kwargs):
        self.stepping = True
        try:
            return super().step(optimizer, *args, **kwargs)
        finally:
            self.stepping = False


class _LossDtypes(TorchDispatchMode):
    """Notes the dtype of every log_softmax's input: cross_entropy, nll_loss of log_softmax, and CrossEntropyLoss all
    compute one, in float32 under autocast (the loss is on its float32 list) and in the logits' 16-bit dtype outside."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func._schema.name == "aten::_log_softmax" and args and isinstance(args[0], torch.Tensor):
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


def _amp_reference(model, optimizer, scaler, X, y, device, dtype, zero_grad=True):
    """The step the learner writes (``zero_grad=False``: the step that forgets to clear the gradients)."""
    import torch.nn.functional as F

    from helpers.devices import needs_grad_scaler

    if zero_grad:
        optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=dtype):
        loss = F.cross_entropy(model(X), y)
    if needs_grad_scaler(dtype):
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss.item()


def _amp_run(step, template, device, dtype, init_scale, steps, X, y):
    """Run ``step`` ``steps`` times on a copy of ``template``: the model, the scaler, the dtypes the first linear layer
    computed in, the values returned, whether an optimizer step ran outside ``scaler.step``, the error raised, and the
    dtypes the loss's log_softmax ran in."""
    import copy

    from helpers.devices import needs_grad_scaler

    model = copy.deepcopy(template).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = _WatchedScaler(device.type, init_scale=init_scale, enabled=needs_grad_scaler(dtype))
    seen: list[torch.dtype] = []
    direct: list[bool] = []
    model[1].register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: direct.append(not scaler.stepping))
    returned, error = [], None
    with _LossDtypes() as loss_dtypes:
        try:
            for _ in range(steps):
                returned.append(step(model, optimizer, scaler, X.to(device), y.to(device), device, dtype))
        except Exception as err:  # the learner's code may raise anything; the checker says what it means
            error = err
    return model, scaler, seen, returned, any(direct), error, loss_dtypes.dtypes


def _dtype_mistake(on: str, kind: torch.dtype, model: torch.nn.Module, seen: list, loss_dtypes: list) -> str | None:
    """The hint when the step ran in the wrong dtypes: parameters converted, forward or loss outside autocast."""
    converted = sorted({str(p.dtype) for p in model.parameters() if p.dtype != torch.float32})
    if converted:
        return (
            f"{on}: the model's parameters became {', '.join(converted)}; autocast keeps them float32 and casts "
            "copies for each operation, so do not convert the model (.to(dtype), .half(), .bfloat16())"
        )
    if seen and seen[0] != kind:
        return f"{on}: the forward pass ran in {seen[0]}; run it inside torch.autocast(device.type, dtype=dtype)"
    if seen and loss_dtypes and loss_dtypes[0] != torch.float32:
        return (
            f"{on}: the loss ran in {loss_dtypes[0]}, outside autocast; compute F.cross_entropy inside "
            "torch.autocast too, which runs it in float32 (it is on autocast's float32 list)"
        )
    return None


@exercise("09_amp_step", "mixed-precision training step", function=True)
def check_amp_step(amp_step: Callable | None, device: torch.device, dtype: torch.dtype) -> str | None:
    """``amp_step(model, optimizer, scaler, X, y, device, dtype)`` runs one step under autocast, with the GradScaler
    for float16 and a plain backward and step for bfloat16, and returns the loss as a float. Run for real on
    ``device`` with ``dtype`` and on the CPU with the other of float16 and bfloat16; float16 also gets a step whose
    scaled gradients overflow, which the scaler must skip and answer by lowering its scale."""
    from torch import nn

    from exercises.core import first_line

    gen = torch.Generator().manual_seed(0)
    X = torch.randn(64, 1, 8, 8, generator=gen)  # (B, 1, 8, 8)
    y = torch.randint(0, 10, (64,), generator=gen)  # (B,)
    with torch.random.fork_rng(devices=[]):  # the same model every time, without touching the learner's seed
        torch.manual_seed(0)
        template = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    device, cpu = torch.device(device), torch.device("cpu")
    for where, kind in dict.fromkeys([(device, dtype), (cpu, torch.float16), (cpu, torch.bfloat16)]):
        name = str(kind).removeprefix("torch.")
        on = f"with {name} on {where.type}"
        if kind is torch.float16:
            overflow = 2.0**40  # the scaled gradients overflow float16: the scaler must skip the step
            model, scaler, seen, _, direct, error, losses = _amp_run(amp_step, template, where, kind, overflow, 1, X, y)
            if hint := _dtype_mistake(on, kind, model, seen, losses):
                return hint
            if not seen:
                return f"{on}: it raised {first_line(error)}" if error else f"{on}: the model was never called on X"
            if scaler.scaled == 0:
                return (
                    f"{on}: backward ran on the unscaled loss, so small float16 gradients underflow to zero; "
                    "call scaler.scale(loss).backward()"
                )
            if direct:
                return (
                    f"{on}: optimizer.step() was called directly, which takes the step even when the gradients "
                    "hold inf; call scaler.step(optimizer), which checks them and skips such a step"
                )
            if error is None and scaler.get_scale() == overflow:
                return (
                    f"{on}: after a step whose gradients overflowed the scale stayed {overflow:g}; call "
                    "scaler.update() after scaler.step(optimizer) so that the scale comes down"
                )
            if error is None and any(
                not torch.equal(p, q.to(where)) for p, q in zip(model.parameters(), template.parameters(), strict=True)
            ):
                return f"{on}: a step whose gradients overflowed changed the weights; scaler.step(optimizer) skips it"
        model, scaler, seen, returned, _, error, losses = _amp_run(amp_step, template, where, kind, 2.0**16, 3, X, y)
        if hint := _dtype_mistake(on, kind, model, seen, losses):
            return hint
        if error is not None:
            return f"{on}: it raised {first_line(error)}"
        if not seen:
            return f"{on}: the model was never called on X"
        if not all(type(r) is float for r in returned):
            return f"{on}: return the loss as a float (loss.item()), not a {type(returned[0]).__name__}"
        expected, _, _, right, _, _, _ = _amp_run(_amp_reference, template, where, kind, 2.0**16, 3, X, y)
        if abs(returned[0] - right[0]) > 1e-3 * max(1.0, abs(right[0])):
            return f"{on}: the first step returned {returned[0]:.4f}, expected the loss {right[0]:.4f}"

        def close(a: nn.Module, b: nn.Module) -> bool:
            return all(
                torch.allclose(p, q, rtol=1e-3, atol=1e-5) for p, q in zip(a.parameters(), b.parameters(), strict=True)
            )

        if not close(model, expected):

            def no_zero_grad(*args):
                return _amp_reference(*args, zero_grad=False)

            accumulated = _amp_run(no_zero_grad, template, where, kind, 2.0**16, 3, X, y)[0]
            if close(model, accumulated):
                return f"{on}: the gradients add up from one step to the next; call optimizer.zero_grad() in every step"
            return f"{on}: after 3 steps the weights differ from those of the reference step"
    return None
