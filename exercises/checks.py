"""Exercise checkers. Each prints one line, a pass or a hint, and returns True or False; none raises,
so a notebook with an unfinished exercise still runs to the end.

An exercise cell starts with its answer variables set to ``None``: the checker then says it is waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from helpers.placement import same_device

CHECKERS: dict[str, Callable[..., bool]] = {}
"""Every checker by exercise id ("NN_name"); the tests run each against a reference solution and a wrong answer."""


def exercise(exercise_id: str) -> Callable[[Callable[..., bool]], Callable[..., bool]]:
    """Register a checker under ``exercise_id``."""

    def register(fn: Callable[..., bool]) -> Callable[..., bool]:
        if exercise_id in CHECKERS:
            raise ValueError(f"Two checkers for exercise {exercise_id!r}.")
        CHECKERS[exercise_id] = fn
        return fn

    return register


def _verdict(exercise: str, ok: bool, hint: str) -> bool:
    print(f"[pass] {exercise}" if ok else f"[not yet] {exercise}: {hint}")
    return ok


def _unanswered(exercise: str, *answers: Any) -> bool:
    if any(a is None for a in answers):
        print(f"[waiting] {exercise}: replace the None placeholders with your answer and run the cell again.")
        return True
    return False


# --- lesson 00 -------------------------------------------------------------------------------------------------


@exercise("00_zeros_on_device")
def check_zeros_on_device(x: torch.Tensor | None, device: torch.device) -> bool:
    """Lesson 00: a (2, 3) float32 tensor of zeros on ``device``. Only the tensor is checked: one made on the CPU and
    moved there passes too, and the exercise asks for no more."""
    name = "zeros on the device"
    if _unanswered(name, x):
        return False
    if not isinstance(x, torch.Tensor):
        return _verdict(name, False, f"expected a torch.Tensor, got {type(x).__name__}")
    if tuple(x.shape) != (2, 3):
        return _verdict(name, False, f"shape is {tuple(x.shape)}, expected (2, 3)")
    if x.dtype != torch.float32:
        return _verdict(name, False, f"dtype is {x.dtype}, expected torch.float32 (the default)")
    if not same_device(x.device, device):
        return _verdict(name, False, f"it lives on {x.device}, not on {device}; pass device=device when creating it")
    return _verdict(name, bool((x == 0).all()), "not every element is zero")


# --- lesson 01 -------------------------------------------------------------------------------------------------


@exercise("01_move_with_dtype")
def check_moved_copy(moved: torch.Tensor | None, values: list | None, data: torch.Tensor, device: torch.device) -> bool:
    """Lesson 01: ``data`` on ``device`` as float64, and its values back as a Python list. Only the results are
    checked, not how many calls made them, and the exercise asks for no more."""
    name = "move with a dtype"
    if _unanswered(name, moved, values):
        return False
    if not isinstance(moved, torch.Tensor):
        return _verdict(name, False, f"moved should be a tensor, got {type(moved).__name__}")
    if not same_device(moved.device, device):
        return _verdict(name, False, f"moved lives on {moved.device}, not on {device}: did you reassign the result?")
    if moved.dtype != torch.float64:
        return _verdict(name, False, f"moved has dtype {moved.dtype}; pass torch.float64 too: x.to(device, dtype)")
    if tuple(moved.shape) != tuple(data.shape):
        return _verdict(name, False, f"moved has shape {tuple(moved.shape)}, data has {tuple(data.shape)}")
    if not isinstance(values, list):
        return _verdict(name, False, f"values should be a Python list (.tolist()), got {type(values).__name__}")
    if values != data.double().tolist():
        return _verdict(name, False, "values differ from data; read them back from moved with .tolist()")
    if moved.device.type != "meta" and not torch.equal(moved.cpu(), data.double()):
        return _verdict(name, False, "moved holds other numbers than data")
    return _verdict(name, True, "")


@exercise("01_copy_bandwidth")
def check_bandwidth(gb_per_s: float | None, x: torch.Tensor, seconds: float) -> bool:
    """Lesson 01: the bandwidth of copying ``x`` in ``seconds``, in GB/s (1e9 bytes per second)."""
    name = "copy bandwidth"
    if _unanswered(name, gb_per_s):
        return False
    if not isinstance(gb_per_s, (int, float)) or isinstance(gb_per_s, bool):
        return _verdict(name, False, f"expected a number, got {type(gb_per_s).__name__}")
    expected = x.numel() * x.element_size() / seconds / 1e9
    if abs(gb_per_s - expected) > 0.01 * expected:
        return _verdict(name, False, "bandwidth = bytes / seconds / 1e9, and bytes = numel() * element_size()")
    return _verdict(name, True, "")


def _first_line(err: BaseException) -> str:
    """``Type: first line of the message``, for a hint about an error the learner's code raised."""
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"


@exercise("01_device_agnostic_noise")
def check_add_noise(add_noise: Callable[[torch.Tensor, float], torch.Tensor] | None, device: torch.device) -> bool:
    """Lesson 01: ``add_noise(x, std)`` returns ``x`` plus Gaussian noise of standard deviation ``std``, the noise made
    on ``x``'s device in ``x``'s dtype. Run on ``device`` in float32 (the noise measured), then in bfloat16 on the GPU
    when ``device`` is one, else on the meta device, which refuses a tensor made on the CPU as a GPU does."""
    from helpers.placement import gpu_or_meta

    name = "device-agnostic noise"
    if _unanswered(name, add_noise):
        return False
    if not callable(add_noise):
        return _verdict(name, False, f"add_noise should be a function, got {type(add_noise).__name__}")
    for where, dtype in ((torch.device(device), torch.float32), (gpu_or_meta(device), torch.bfloat16)):
        x = torch.zeros(100_000, device=where, dtype=dtype)
        try:
            out = add_noise(x, 0.5)
        except Exception as err:  # the learner's code: any error becomes a hint
            fix = "make the noise with device=x.device, dtype=x.dtype (or torch.randn_like(x))"
            return _verdict(name, False, f"for x on {where} ({dtype}) it raised {_first_line(err)}; {fix}")
        if not isinstance(out, torch.Tensor):
            return _verdict(name, False, f"add_noise should return a tensor, got {type(out).__name__}")
        if not same_device(out.device, where) or out.dtype != dtype or out.shape != x.shape:
            got = f"{out.device}, {out.dtype}, {tuple(out.shape)}"
            return _verdict(name, False, f"for x on {where} in {dtype} it returned {got}: the noise must follow x")
        if where.type != "meta":
            noise = (out - x).float()
            mean, std = noise.mean().item(), noise.std().item()
            if abs(mean) > 0.05 or not 0.45 < std < 0.55:
                fix = "torch.randn(...) * std, added to x and not written into it"
                return _verdict(name, False, f"the noise had mean {mean:.3f} and std {std:.3f}, not 0 and 0.5: {fix}")
    return _verdict(name, True, "")


# --- lesson 02 -------------------------------------------------------------------------------------------------


def _parse_mismatch(message: str) -> tuple[str, str] | None:
    """(argument, its device) from a device-mismatch message that names the argument, in either wording."""
    import re  # only this checker needs it

    if m := re.search(r"but got (\w+) is on (\S+), different from other tensors on (\S+) \(", message):
        return m.group(1), m.group(2)
    if m := re.search(r"at least two devices, (\S+) and (\S+)! \(when checking argument for argument (\w+)", message):
        return m.group(3), m.group(2)
    return None


@exercise("02_read_the_error")
def check_error_reading(argument: str | None, argument_device: str | None, message: str) -> bool:
    """Lesson 02: which argument the mismatch message names, and the device that argument is on."""
    name = "read the error"
    if _unanswered(name, argument, argument_device):
        return False
    truth = _parse_mismatch(message)
    if truth is None:
        return _verdict(name, False, "this message names no argument; pick one from the lesson")
    if str(argument).strip() != truth[0]:
        return _verdict(name, False, f"{argument!r} is not the argument: look for the word after 'but got'")
    if str(argument_device).strip() != truth[1]:
        return _verdict(name, False, f"{truth[0]} is not on {argument_device!r}: look for the device after 'is on'")
    return _verdict(name, True, "")


@exercise("02_batch_on_device")
def check_batch_on_device(moved: Any, original: Any, device: torch.device) -> bool:
    """Lesson 02: every tensor of a nested batch on ``device``, same structure, shapes and values as ``original``."""
    from helpers.placement import batch_leaves  # the walker lesson 02's report uses

    name = "whole batch on the device"
    if _unanswered(name, moved):
        return False
    if type(moved) is not type(original):
        return _verdict(name, False, f"expected a {type(original).__name__}, got {type(moved).__name__}")
    got, want = dict(batch_leaves(moved)), dict(batch_leaves(original))
    if got.keys() != want.keys():
        lost, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
        return _verdict(name, False, f"the structure changed: missing {lost or 'nothing'}, new {extra or 'nothing'}")
    for path, w in want.items():
        g = got[path]
        if not isinstance(w, torch.Tensor):
            try:
                same = g is w or bool(g == w)
            except Exception:  # e.g. an array leaf, whose == gives no single truth value
                same = False
            if not same:
                return _verdict(name, False, f"{path} is not a tensor and should stay as it was: {w!r} became {g!r}")
            continue
        if not isinstance(g, torch.Tensor):
            return _verdict(name, False, f"{path} became a {type(g).__name__}")
        if not same_device(g.device, device):
            return _verdict(name, False, f"{path} is still on {g.device}, not {device}")
        if g.shape != w.shape or g.dtype != w.dtype:
            return _verdict(name, False, f"{path} changed shape or dtype: was {tuple(w.shape)} {w.dtype}")
        if g.device.type != "meta" and w.device.type != "meta" and not torch.equal(g.cpu(), w.cpu()):
            return _verdict(name, False, f"{path} holds other values than the original")
    return _verdict(name, True, "")


@exercise("02_fix_the_train_step")
def check_train_step(train_step: Callable | None, device: torch.device, steps: int = 5) -> bool:
    """Lesson 02: ``train_step(model, images, labels, optimizer)`` takes a batch on the CPU for a model on any device,
    uses class weights ``linspace(0.5, 1.5, 10)`` in its cross-entropy and returns the loss tensor. Run for real on
    ``device`` (the loss must match, be finite and go down, the parameters change), then with the model on the GPU
    when ``device`` is one, else on the meta device, which refuses a tensor left on the CPU as a GPU does."""
    import copy
    import math

    import torch.nn.functional as F
    from torch import nn

    from helpers.placement import gpu_or_meta

    name = "fix the training step"
    if _unanswered(name, train_step):
        return False
    if not callable(train_step):
        return _verdict(name, False, f"train_step should be a function, got {type(train_step).__name__}")
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(64, 1, 8, 8, generator=gen)  # (B, 1, 8, 8), on the CPU as a DataLoader hands it over
    labels = torch.randint(0, 10, (64,), generator=gen)  # (B,)
    with torch.random.fork_rng(devices=[]):  # the same model every time, without touching the learner's seed
        torch.manual_seed(0)
        template = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        expected = F.cross_entropy(template(images), labels, weight=torch.linspace(0.5, 1.5, 10)).item()
    for where in dict.fromkeys([torch.device(device), gpu_or_meta(device)]):  # one run when both are the same GPU
        model = copy.deepcopy(template).to(where)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        before = [p.detach().clone() for p in model.parameters()]
        try:
            losses = [train_step(model, images, labels, optimizer) for _ in range(steps)]
        except Exception as err:  # the learner's code: any error becomes a hint
            return _verdict(name, False, f"with the model on {where} and the batch on the CPU: {_first_line(err)}")
        if not all(isinstance(loss, torch.Tensor) and loss.dim() == 0 for loss in losses):
            return _verdict(name, False, "return the loss as a 0-dim tensor (loss.detach()), not a number")
        if not same_device(losses[0].device, where):
            return _verdict(name, False, f"the loss is on {losses[0].device}, the model on {where}: compute it there")
        if where.type == "meta":
            continue  # shapes only: the numbers were checked on the lesson's device
        values = [loss.item() for loss in losses]
        if abs(values[0] - expected) > 1e-4 * max(1.0, abs(expected)):
            return _verdict(name, False, f"first loss {values[0]:.4f}, expected {expected:.4f}: keep the class weights")
        if not all(math.isfinite(v) for v in values):
            return _verdict(name, False, f"the loss is not finite: {values}")
        if all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True)):
            return _verdict(name, False, "the parameters did not change: call loss.backward() and optimizer.step()")
        if not values[-1] < values[0]:
            return _verdict(name, False, f"the loss did not go down over {steps} steps on one batch: {values}")
    return _verdict(name, True, "")


# --- lesson 03 -------------------------------------------------------------------------------------------------


@exercise("03_buffers_move")
def check_buffers_move(module: torch.nn.Module | None, device: torch.device) -> bool:
    """Lesson 03: a module whose ``mean`` and ``std`` are buffers, saved in its state_dict, on ``device``."""
    import copy

    from helpers.placement import module_tensors

    name = "mean and std as buffers"
    if _unanswered(name, module):
        return False
    if not isinstance(module, torch.nn.Module):
        return _verdict(name, False, f"expected an nn.Module instance, got {type(module).__name__}")
    buffers = dict(module.named_buffers())
    missing = [k for k in ("mean", "std") if k not in buffers]
    if missing:
        return _verdict(name, False, f"{' and '.join(missing)} is not a buffer; use self.register_buffer(name, tensor)")
    saved = module.state_dict()
    unsaved = [k for k in ("mean", "std") if k not in saved]
    if unsaved:
        return _verdict(name, False, f"{' and '.join(unsaved)} is missing from state_dict(); keep persistent=True")
    # Moving a copy to the meta device reveals tensors that stay behind, even on a machine whose only device is the CPU.
    moved = copy.deepcopy(module).to("meta")
    stay = [k for k, _, t in module_tensors(moved, "module") if t.device.type != "meta"]
    if stay:
        return _verdict(name, False, f"{', '.join(stay)} did not move with .to(); register it as a buffer")
    wrong = [k for k in ("mean", "std") if not same_device(buffers[k].device, device)]
    if wrong:
        return _verdict(name, False, f"{', '.join(wrong)} is not on {device}; call .to(device) on the module")
    return _verdict(name, True, "")


@exercise("03_load_on_cpu")
def check_load_on_cpu(cpu_model: torch.nn.Module | None, reference: torch.nn.Module) -> bool:
    """Lesson 03: a fresh model on the CPU holding the same weights as ``reference`` (loaded from its checkpoint)."""
    name = "checkpoint loaded on the CPU"
    if _unanswered(name, cpu_model):
        return False
    if not isinstance(cpu_model, torch.nn.Module):
        return _verdict(name, False, f"expected an nn.Module, got {type(cpu_model).__name__}")
    if cpu_model is reference:
        return _verdict(name, False, "that is the original model; build a fresh one and load the checkpoint into it")
    mine, theirs = cpu_model.state_dict(), reference.state_dict()
    if list(mine) != list(theirs):
        return _verdict(name, False, "its state_dict keys differ from the saved model's; build the same architecture")
    elsewhere = sorted({str(t.device) for t in mine.values() if t.device.type != "cpu"})
    if elsewhere:
        return _verdict(name, False, f"some tensors are on {', '.join(elsewhere)}; use map_location='cpu'")
    same = all(torch.equal(mine[k], theirs[k].detach().cpu()) for k in mine)
    return _verdict(name, same, "the weights differ from the saved ones; call load_state_dict with the loaded dict")


# --- lesson 04 -------------------------------------------------------------------------------------------------


@exercise("04_one_hot")
def check_one_hot(one_hot: Callable[[torch.Tensor, int], torch.Tensor] | None) -> bool:
    """Lesson 04: ``one_hot(labels, num_classes)`` returns float32 (B, num_classes) rows on the labels' device."""
    name = "one_hot follows its input"
    if _unanswered(name, one_hot):
        return False
    labels = torch.tensor([2, 0, 1, 2])
    expected = torch.tensor([[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=torch.float32)
    try:
        out = one_hot(labels, 3)
        # The meta device plays "another device" on any machine: a result left on the CPU gives itself away.
        meta_out = one_hot(labels.to("meta"), 3)
    except Exception as error:  # a checker reports, it never raises
        return _verdict(name, False, f"it raised {type(error).__name__}: {error}")
    if not isinstance(out, torch.Tensor) or not isinstance(meta_out, torch.Tensor):
        return _verdict(name, False, "it should return a tensor")
    if tuple(out.shape) != (4, 3) or out.dtype != torch.float32:
        return _verdict(name, False, f"got shape {tuple(out.shape)} and {out.dtype}, expected (4, 3) float32")
    if not torch.equal(out, expected):
        return _verdict(name, False, "the values are wrong: row i should have a 1 in column labels[i]")
    return _verdict(
        name,
        meta_out.device == labels.to("meta").device,
        f"given labels on another device it returned a tensor on {meta_out.device}; "
        "create it with labels.new_zeros(...) or device=labels.device",
    )


@exercise("04_device_loader")
def check_device_loader(wrapped: Any, loader: Any, device: torch.device) -> bool:
    """Lesson 04: a wrapper around ``loader`` with the same length whose batches arrive on ``device``."""
    name = "batches arrive on the device"
    if _unanswered(name, wrapped):
        return False
    if wrapped is loader:
        return _verdict(name, False, "that is the loader itself; wrap it in DeviceDataLoader(loader, device)")
    try:
        length = len(wrapped)
        first = next(iter(wrapped))
    except Exception as error:  # a checker reports, it never raises
        return _verdict(name, False, f"could not take its length and first batch: {type(error).__name__}: {error}")
    if length != len(loader):
        return _verdict(name, False, f"it has {length} batches, the loader has {len(loader)}")
    tensors = first if isinstance(first, (list, tuple)) else [first]
    tensors = [t for t in tensors if isinstance(t, torch.Tensor)]
    if not tensors:
        return _verdict(name, False, "its batches hold no tensors")
    return _verdict(
        name,
        all(same_device(t.device, device) for t in tensors),
        f"a batch tensor is on {tensors[0].device}, not {device}",
    )


@exercise("04_padding_mask")
def check_padding_mask(
    padding_mask: Callable[[torch.Tensor, int], torch.Tensor] | None, device: torch.device
) -> bool:
    """Lesson 04: ``padding_mask(lengths, max_len)``, a bool (B, max_len) mask True where position < length, made
    on the lengths' device (checked on ``device``, then on the GPU or the meta device)."""
    from helpers.placement import gpu_or_meta

    name = "padding mask follows its input"
    if _unanswered(name, padding_mask):
        return False
    cases = [([3, 0, 5, 1], 5), ([2], 2), ([0, 4], 4)]  # an empty sequence, and sequences as long as max_len
    for values, max_len in cases:
        lengths = torch.tensor(values, device=device)
        expected = torch.arange(max_len, device=device)[None, :] < lengths[:, None]  # (B, max_len)
        try:
            out = padding_mask(lengths, max_len)
        except Exception as error:  # a checker reports, it never raises
            return _verdict(name, False, f"with lengths {values} it raised {type(error).__name__}: {error}")
        if not isinstance(out, torch.Tensor):
            return _verdict(name, False, f"it should return a tensor, got {type(out).__name__}")
        if out.dtype != torch.bool:
            return _verdict(name, False, f"dtype is {out.dtype}, expected torch.bool; a comparison gives bools")
        if tuple(out.shape) != tuple(expected.shape):
            return _verdict(name, False, f"lengths {values}, max_len {max_len}: shape {tuple(out.shape)}, "
                            f"expected {tuple(expected.shape)}, one row per sequence")
        if not same_device(out.device, device):
            return _verdict(name, False, f"given lengths on {device} it returned a tensor on {out.device}")
        if not torch.equal(out, expected):
            return _verdict(name, False, f"wrong values for lengths {values}: row i should be True in its first "
                            "lengths[i] positions only (position < length)")
    # The real GPU where there is one, else the meta device: a tensor made on the CPU inside the function shows up.
    other = gpu_or_meta(device)
    lengths = torch.tensor([3, 0, 5, 1], device=other)
    hint = "make the positions on lengths.device: torch.arange(max_len, device=lengths.device)"
    try:
        out = padding_mask(lengths, 5)
    except Exception as error:  # a checker reports, it never raises
        return _verdict(name, False, f"with lengths on {other} it raised {type(error).__name__}: {error}; {hint}")
    if not isinstance(out, torch.Tensor) or not same_device(out.device, other):
        where = out.device if isinstance(out, torch.Tensor) else type(out).__name__
        return _verdict(name, False, f"given lengths on {other} it returned {where}; {hint}")
    return _verdict(name, True, "")


# --- lesson 05 -------------------------------------------------------------------------------------------------


@exercise("05_count_correct")
def check_count_correct(count_correct: Callable[[torch.Tensor, torch.Tensor], Any] | None) -> bool:
    """Lesson 05: ``count_correct(logits, y)`` returns how many rows' highest score is at the true class, as an int."""
    name = "count correct predictions"
    if _unanswered(name, count_correct):
        return False
    logits = torch.tensor([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5], [0.2, 0.1, 0.9], [1.0, 4.0, 2.0]])  # (4, 3)
    y = torch.tensor([1, 2, 2, 0])  # rows 0 and 2 are right
    try:
        got = count_correct(logits, y)
    except Exception as exc:  # a learner's function may raise anything; report it instead
        return _verdict(name, False, f"calling it raised {type(exc).__name__}: {exc}")
    if isinstance(got, torch.Tensor):
        return _verdict(name, False, "it returns a tensor; call .item() to get a Python number for logging")
    if not isinstance(got, int) or isinstance(got, bool):
        return _verdict(name, False, f"expected an int, got {type(got).__name__}")
    return _verdict(name, got == 2, f"got {got} on a case with 2 right out of 4; compare logits.argmax(dim=1) with y")


@exercise("05_predict_proba")
def check_predict_proba(
    predict_proba: Callable[[torch.nn.Module, torch.Tensor], Any] | None, device: torch.device
) -> bool:
    """Lesson 05: class probabilities in eval mode, without a graph, on the CPU, leaving the model's mode as it was."""
    name = "predict probabilities"
    if _unanswered(name, predict_proba):
        return False
    nn = torch.nn
    with torch.random.fork_rng(devices=[]):  # a fixed test case that leaves the lesson's random state alone
        torch.random.default_generator.manual_seed(0)
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Dropout(0.5), nn.Linear(8, 3)).to(device)
        X = torch.randn(5, 1, 4, 4).to(device)  # (B, C, H, W)
    model.eval()
    with torch.no_grad():
        expected = model(X).softmax(dim=1).cpu()
    model.train()
    try:
        got = predict_proba(model, X)
    except Exception as exc:  # a learner's function may raise anything; report it instead
        return _verdict(name, False, f"calling it raised {type(exc).__name__}: {exc}")
    if not isinstance(got, torch.Tensor):
        return _verdict(name, False, f"expected a tensor, got {type(got).__name__}")
    if got.requires_grad:
        return _verdict(name, False, "the result carries a graph (requires_grad=True): use torch.no_grad()")
    if got.device.type != "cpu":
        return _verdict(name, False, f"the result is on {got.device}; bring it back with .cpu()")
    if tuple(got.shape) != (5, 3):
        return _verdict(name, False, f"shape {tuple(got.shape)}, expected (5, 3): one row of probabilities per image")
    if not torch.allclose(got, expected, atol=1e-5):
        if torch.allclose(got.sum(dim=1), torch.ones(5), atol=1e-4):
            return _verdict(name, False, "rows sum to 1 but differ from eval mode's: call model.eval() (dropout is on)")
        return _verdict(name, False, "these are not probabilities per row: apply softmax over dim=1 to the logits")
    if not model.training:
        return _verdict(name, False, "the model was left in eval mode; restore it with model.train(was_training)")
    return _verdict(name, True, "")


def _cpu_tensors_made(numel: int) -> Any:
    """A TorchFunctionMode that records the torch functions whose result is a CPU tensor of ``numel`` elements."""
    from torch.overrides import TorchFunctionMode

    class CpuTensorsMade(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (list, tuple)) else (out,):
                if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel() == numel:
                    self.found.append(getattr(func, "__name__", str(func)))
            return out

    return CpuTensorsMade()


def _resident_generator(where: torch.device, seed: int) -> torch.Generator:
    """A generator on ``where`` (a CPU one for the meta device, which has none), seeded."""
    return torch.Generator(device="cpu" if where.type == "meta" else where).manual_seed(seed)


@exercise("05_resident_batches")
def check_resident_batches(epoch_batches: Callable | None, device: torch.device) -> bool:
    """Lesson 05: ``epoch_batches(X, y, batch_size, generator)`` returns one shuffled epoch of ``(X, y)`` batches, cut
    from ``torch.randperm(len(y), device=X.device, generator=generator)``: every sample once, the same batches as
    that permutation gives. Run on ``device`` (values checked), then on the GPU, or without one on the meta device,
    where a permutation made on the CPU (then used or copied over) is recorded and refused."""
    from helpers.placement import gpu_or_meta

    name = "one epoch of device-resident batches"
    if _unanswered(name, epoch_batches):
        return False
    if not callable(epoch_batches):
        return _verdict(name, False, f"epoch_batches should be a function, got {type(epoch_batches).__name__}")
    n, batch_size, seed = 10, 4, 7
    for where in (torch.device(device), gpu_or_meta(device)):
        X = torch.arange(2 * n, dtype=torch.float32, device=where).view(n, 2)  # (N, 2): row i holds 2i and 2i+1
        y = torch.arange(n, device=where)  # (N,): sample i has label i, so a batch says which samples it holds
        with torch.random.fork_rng(devices=[]), _cpu_tensors_made(n) as made:
            try:
                batches = [tuple(b) for b in epoch_batches(X, y, batch_size, _resident_generator(where, seed))]
            except Exception as err:  # the learner's code: any error becomes a hint
                fix = "make the permutation with torch.randperm(len(y), device=X.device, generator=generator)"
                return _verdict(name, False, f"with X on {where} it raised {_first_line(err)}; {fix}")
        if where.type != "cpu" and made.found:
            return _verdict(
                name,
                False,
                f"with X on {where}, {made.found[0]} made a tensor of {n} elements on the CPU: build the permutation "
                "where the data is, torch.randperm(len(y), device=X.device, generator=generator)",
            )
        if not all(len(b) == 2 and all(isinstance(t, torch.Tensor) for t in b) for b in batches):
            return _verdict(name, False, "each batch should be a pair of tensors (X_batch, y_batch)")
        elsewhere = sorted({str(t.device) for b in batches for t in b if not same_device(t.device, where)})
        if elsewhere:
            return _verdict(name, False, f"with X on {where} some batches are on {', '.join(elsewhere)}")
        sizes = [len(b[1]) for b in batches]
        if where.type == "meta":
            if sizes != [len(c) for c in torch.arange(n).split(batch_size)]:
                return _verdict(name, False, f"{n} samples in batches of {batch_size} gave batch sizes {sizes}")
            continue
        labels = torch.cat([b[1] for b in batches]).cpu() if batches else torch.zeros(0, dtype=torch.long)
        counts = torch.bincount(labels, minlength=n)
        if not bool((counts == 1).all()):
            missing, repeated = int((counts == 0).sum()), int((counts > 1).sum())
            return _verdict(
                name, False, f"of {n} samples, {missing} are missing and {repeated} repeated: an epoch holds each once"
            )
        if any(not torch.equal(bx.cpu(), 2 * by.cpu()[:, None] + torch.tensor([0.0, 1.0])) for bx, by in batches):
            return _verdict(name, False, "the images and labels of a batch do not belong together: index both alike")
        order = torch.randperm(n, device=where, generator=_resident_generator(where, seed)).cpu()
        if sizes != [len(c) for c in order.split(batch_size)] or not torch.equal(labels, order):
            return _verdict(
                name,
                False,
                f"batches of sizes {sizes} in another order than the permutation would give: cut "
                "torch.randperm(len(y), device=X.device, generator=generator) into slices of batch_size, in order",
            )
    return _verdict(name, True, "")


@exercise("05_best_change")
def check_best_change(best_change: str | None, results: list, task: str = "cnn") -> bool:
    """Lesson 05: the pipeline (a name in ``bench.PIPELINES``) whose one change raised ``task``'s images per second
    most against the row it changes from, in this run's ``results``."""
    from helpers import bench, timing

    name = f"the change that paid most ({bench.TASK_TITLES[task]})"
    if _unanswered(name, best_change):
        return False
    ratios = {p: c.speedup for (p, t), c in bench.row_comparisons(results).items() if t == task}
    if best_change not in ratios:
        rows = ", ".join(repr(p) for p in ratios)
        return _verdict(name, False, f"answer with the pipeline name of a row that changes one thing: one of {rows}")
    best = max(ratios, key=ratios.__getitem__)
    got, top = timing.ratio_text(ratios[best_change]), timing.ratio_text(ratios[best])
    return _verdict(
        name, best_change == best, f"{best_change!r} gained {got} over its row; another row gained more ({top})"
    )


# --- lesson 06 -------------------------------------------------------------------------------------------------


@exercise("06_replica_split")
def check_replica_split(sizes: list[int] | None, batch_size: int, num_gpus: int) -> bool:
    """Lesson 06: the batch size each GPU's replica sees when DataParallel splits ``batch_size`` over ``num_gpus``."""
    from helpers.parallel import replica_split

    name = f"a batch of {batch_size} on {num_gpus} GPUs"
    if _unanswered(name, sizes):
        return False
    try:
        answer = [int(n) for n in sizes]
    except (TypeError, ValueError):
        return _verdict(name, False, f"expected a list of whole numbers, got {sizes!r}")
    expected = replica_split(batch_size, num_gpus)
    if answer == expected:
        return _verdict(name, True, "")
    if sum(answer) != batch_size:
        return _verdict(
            name, False, f"the sizes add up to {sum(answer)}; every row of the batch goes to exactly one GPU"
        )
    return _verdict(
        name,
        False,
        "DataParallel splits with tensor.chunk: every chunk but the last has ceil(batch / GPUs) rows, "
        "so a small batch can leave a GPU with nothing (list only the replicas that run)",
    )


@exercise("06_unprefixed_state_dict")
def check_unprefixed_state_dict(state_dict: dict[str, torch.Tensor] | None, wrapped: torch.nn.Module) -> bool:
    """Lesson 06: the wrapped model's state dict with the "module." prefix removed, tensors unchanged."""
    name = "a state dict the unwrapped model loads"
    if _unanswered(name, state_dict):
        return False
    if not isinstance(state_dict, dict):
        return _verdict(name, False, f"expected a dict of name -> tensor, got {type(state_dict).__name__}")
    expected = wrapped.module.state_dict()
    if any(str(k).startswith("module.") for k in state_dict):
        return _verdict(name, False, 'some keys still start with "module."; remove that prefix from each key')
    if list(state_dict) != list(expected):
        return _verdict(name, False, f"expected the keys {list(expected)}, got {list(state_dict)}")
    same = all(
        isinstance(state_dict[k], torch.Tensor) and torch.equal(state_dict[k].cpu(), v.cpu())
        for k, v in expected.items()
    )
    return _verdict(name, same, "the keys are right but some tensors differ; keep each value as it was")


@exercise("06_unwrap")
def check_unwrap(unwrap: Callable[[torch.nn.Module], torch.nn.Module] | None) -> bool:
    """Lesson 06: ``unwrap(m)`` returns the model inside nn.DataParallel or DistributedDataParallel, any other model
    as it is (one whose own child is called "module" included). DDP is tried in a one-process gloo group."""
    from collections import OrderedDict

    import torch.distributed as dist
    from torch import nn

    from helpers.models import MLP

    name = "unwrap a wrapped model"
    if _unanswered(name, unwrap):
        return False
    if not callable(unwrap):
        return _verdict(name, False, f"unwrap should be a function, got {type(unwrap).__name__}")
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
            try:
                got = unwrap(given)
            except Exception as err:  # the learner's code: any error becomes a hint
                return _verdict(name, False, f"for {label} it raised {_first_line(err)}")
            if got is not expected:
                what = "the model itself" if given is expected else "its .module"
                fix = "test with isinstance(m, (nn.DataParallel, nn.parallel.DistributedDataParallel))"
                return _verdict(name, False, f"for {label} it should return {what}, got a {type(got).__name__}; {fix}")
    finally:
        if own_group:
            dist.destroy_process_group()
    return _verdict(name, True, "")


@exercise("06_load_wrapped_checkpoint")
def check_load_plain(load_plain: Callable[[Any, torch.device], torch.nn.Module] | None, device: torch.device) -> bool:
    """Lesson 06: ``load_plain(path, device)`` returns a plain MLP on ``device`` holding, loaded strictly, the weights
    of a checkpoint saved from a DataParallel-wrapped MLP (keys that start with "module.")."""
    import tempfile
    from pathlib import Path

    from helpers.models import MLP

    name = "load a wrapped model's checkpoint into a plain model"
    if _unanswered(name, load_plain):
        return False
    if not callable(load_plain):
        return _verdict(name, False, f"load_plain should be a function, got {type(load_plain).__name__}")
    torch.manual_seed(6)
    # What DataParallel(MLP()).state_dict() holds, built without the wrapper: with one GPU visible, DataParallel moves
    # the MLP to it, whatever device the lesson runs on. The checkpoint and the reference stay on the CPU.
    saved = {f"module.{key}": value for key, value in MLP().state_dict().items()}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "wrapped.pt"
        torch.save(saved, path)
        try:
            model = load_plain(path, device)
        except Exception as err:  # the learner's code: any error becomes a hint
            return _verdict(name, False, f"it raised {_first_line(err)}; strip the leading 'module.' from each key")
    if not isinstance(model, MLP):
        return _verdict(name, False, f"expected the plain MLP (not a wrapper), got a {type(model).__name__}")
    state = model.state_dict()
    if not all(same_device(t.device, device) for t in state.values()):
        return _verdict(name, False, f"the model should be on {device}: build it there, or move it with .to(device)")
    same = list(state) == [k.removeprefix("module.") for k in saved]
    try:  # compared on the CPU, whichever device the weights are on
        same = same and all(torch.equal(state[k.removeprefix("module.")].to("cpu"), v.to("cpu"))
                            for k, v in saved.items())
    except (RuntimeError, NotImplementedError) as err:  # e.g. weights on meta, which hold no values to read back
        return _verdict(name, False, f"its weights could not be read back to the CPU to compare: {_first_line(err)}")
    hint = "its weights are not the checkpoint's: load strictly (strict=False loads nothing when no key matches)"
    return _verdict(name, same, hint)


# --- lesson 07 -------------------------------------------------------------------------------------------------


@exercise("07_rank_indices")
def check_rank_indices(indices: list[int] | None, dataset_len: int, world_size: int, rank: int) -> bool:
    """Lesson 07: the dataset indices DistributedSampler(shuffle=False) gives ``rank`` of ``world_size``."""
    from torch.utils.data import DistributedSampler

    name = f"rank {rank} of {world_size} on {dataset_len} samples"
    if _unanswered(name, indices):
        return False
    try:
        answer = [int(i) for i in indices]
    except (TypeError, ValueError):
        return _verdict(name, False, f"expected a list of whole numbers, got {indices!r}")
    expected = list(DistributedSampler(range(dataset_len), num_replicas=world_size, rank=rank, shuffle=False))
    if answer == expected:
        return _verdict(name, True, "")
    if len(answer) != len(expected):
        return _verdict(
            name,
            False,
            f"each rank gets ceil({dataset_len} / {world_size}) = {len(expected)} indices: the sampler pads the "
            "list by repeating its first indices until it divides evenly",
        )
    return _verdict(name, False, "rank r takes every world_size-th index, starting at index r")


@exercise("07_steps_per_epoch")
def check_steps_per_epoch(steps: int | None, dataset_len: int, world_size: int, batch_size: int) -> bool:
    """Lesson 07: optimizer steps per epoch for each process (DistributedSampler, then a DataLoader)."""
    import math

    name = f"steps per epoch for {dataset_len:,} samples, {world_size} processes, batch {batch_size} each"
    if _unanswered(name, steps):
        return False
    expected = math.ceil(math.ceil(dataset_len / world_size) / batch_size)
    if isinstance(steps, bool) or not isinstance(steps, int):
        return _verdict(name, False, f"expected a whole number, got {type(steps).__name__}")
    if steps == math.ceil(dataset_len / batch_size):
        return _verdict(name, False, "that is one process on the whole dataset; each process sees only its share")
    return _verdict(
        name, steps == expected, "each process gets ceil(samples / processes) samples, in batches of batch_size"
    )


@exercise("07_shard")
def check_shard(shard: Callable[[int, int, int], list[int]] | None) -> bool:
    """Lesson 07: ``shard(n, rank, world_size)`` lists the indices DistributedSampler(shuffle=False) gives ``rank``,
    padding included, for data sets of 1 to 40 samples on 1 to 8 ranks."""
    from torch.utils.data import DistributedSampler

    name = "shard a data set by rank"
    if _unanswered(name, shard):
        return False
    if not callable(shard):
        return _verdict(name, False, f"shard should be a function, got {type(shard).__name__}")
    for n in range(1, 41):
        for world_size in (1, 2, 3, 4, 8):
            for rank in range(world_size):
                expected = list(DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=False))
                case = f"shard({n}, {rank}, {world_size})"
                try:
                    got = [int(i) for i in shard(n, rank, world_size)]
                except Exception as err:  # the learner's code: any error becomes a hint
                    return _verdict(name, False, f"{case} raised {_first_line(err)}")
                if got == expected:
                    continue
                if len(got) != len(expected):
                    hint = f"every rank gets ceil(n / world_size) = {len(expected)}: pad by repeating the first indices"
                else:
                    hint = "rank r takes every world_size-th index of the padded list, starting at r"
                return _verdict(name, False, f"{case} returned {got}, the sampler gives {expected}; {hint}")
    return _verdict(name, True, "")


def _global_mean_rank(fn: Callable, rank: int, store: str, losses: torch.Tensor, conn: Any) -> None:
    """One rank of check_global_mean: join a two-process gloo group, call ``fn``, send back its answer."""
    import os
    import sys
    from datetime import timedelta

    import torch.distributed as dist

    torch.set_num_threads(1)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's own, closed at exit)
    try:
        timeout = timedelta(seconds=10)  # a rank that skips a collective: an error, not a hang
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=timeout)
        try:
            conn.send(("ok", float(fn(losses))))
        finally:
            dist.destroy_process_group()
    except Exception as err:  # the learner's code: any error becomes a hint
        conn.send(("error", _first_line(err)))


@exercise("07_global_mean")
def check_global_mean(global_mean: Callable[[torch.Tensor], float] | None) -> bool:
    """Lesson 07: ``global_mean(losses)``, called on every rank with that rank's per-sample losses, returns the mean
    over all ranks' samples, the same on every rank. Run in two forked CPU processes (gloo) with 3 and 5 losses."""
    import multiprocessing
    import tempfile
    from pathlib import Path

    from helpers.parallel import wait_for_exit

    name = "average a metric across ranks"
    if _unanswered(name, global_mean):
        return False
    if not callable(global_mean):
        return _verdict(name, False, f"global_mean should be a function, got {type(global_mean).__name__}")
    if "fork" not in multiprocessing.get_all_start_methods():
        return _verdict(name, False, "this checker forks two processes, which this system cannot; run it on Linux")
    shares = [torch.tensor([1.0, 2.0, 3.0]), torch.full((5,), 10.0)]  # rank means 2 and 10; all 8 samples: 7
    context = multiprocessing.get_context("fork")  # the learner's function is copied, not pickled by name
    with tempfile.TemporaryDirectory() as folder:
        pipes = [context.Pipe(duplex=False) for _ in shares]
        args = [(global_mean, r, str(Path(folder) / "store"), shares[r], pipes[r][1]) for r in range(len(shares))]
        ranks = [context.Process(target=_global_mean_rank, args=a, daemon=True) for a in args]
        for process in ranks:
            process.start()
        try:
            wait_for_exit(ranks, timeout=60)
        except TimeoutError:
            return _verdict(name, False, "the ranks did not finish: does every rank call all_reduce the same times?")
        answers = [receive.recv() if receive.poll() else ("error", "no answer") for receive, _ in pipes]
    for rank, (status, value) in enumerate(answers):
        if status != "ok":
            return _verdict(name, False, f"rank {rank}: {value}")
    got = [value for _, value in answers]
    if all(abs(v - 7.0) < 1e-5 for v in got):
        return _verdict(name, True, "")
    if all(abs(v - 6.0) < 1e-5 for v in got):
        return _verdict(name, False, "that is the mean of the ranks' means; sum losses and counts over ranks instead")
    return _verdict(name, False, f"the ranks returned {got}, the mean over all 8 losses is 7.0; use dist.all_reduce")


# --- lesson 08 -------------------------------------------------------------------------------------------------


@exercise("08_channels_last")
def check_channels_last(images_cl: torch.Tensor | None, images: torch.Tensor) -> bool:
    """Lesson 08: ``images`` (B, C, H, W) converted to the channels_last memory format, shape and values unchanged."""
    name = "channels_last"
    if _unanswered(name, images_cl):
        return False
    if not isinstance(images_cl, torch.Tensor):
        return _verdict(name, False, f"expected a torch.Tensor, got {type(images_cl).__name__}")
    if images_cl.shape != images.shape:
        return _verdict(
            name,
            False,
            f"shape is {tuple(images_cl.shape)}, expected {tuple(images.shape)}: channels_last changes the order "
            "in memory, not the shape (no permute)",
        )
    if not same_device(images_cl.device, images.device):
        return _verdict(name, False, f"it lives on {images_cl.device}, not on {images.device} like the input")
    if not images_cl.is_contiguous(memory_format=torch.channels_last):
        return _verdict(name, False, "not channels_last in memory; use .contiguous(memory_format=torch.channels_last)")
    return _verdict(name, torch.equal(images_cl, images), "the values differ from the input's")


@exercise("08_autocast_dtypes")
def check_autocast_dtypes(
    output_dtype: torch.dtype | None, weight_dtype: torch.dtype | None, autocast_dtype: torch.dtype
) -> bool:
    """Lesson 08: inside autocast a linear layer computes in ``autocast_dtype`` while its weight stays float32."""
    name = "autocast dtypes"
    if _unanswered(name, output_dtype, weight_dtype):
        return False
    if not isinstance(output_dtype, torch.dtype) or not isinstance(weight_dtype, torch.dtype):
        return _verdict(name, False, "answer with dtypes, e.g. out.dtype and layer.weight.dtype")
    if output_dtype != autocast_dtype:
        return _verdict(
            name, False, f"output dtype {output_dtype}: inside autocast a linear layer's output is {autocast_dtype}"
        )
    if weight_dtype != torch.float32:
        return _verdict(
            name,
            False,
            f"weight dtype {weight_dtype}: autocast casts copies for the computation; the weight itself "
            "is not converted",
        )
    return _verdict(name, True, "")


_HOST_READS = {"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__", "__repr__",
               "__format__"}
"""Tensor methods that copy values to the host, so the CPU waits for the device (``if t > 0`` calls __bool__)."""


class _Recorder(torch.overrides.TorchFunctionMode):
    """Notes, while active, every host read of a tensor and the device of every tensor a torch function returns.

    Only calls made by the code under test are seen: a torch function's own inner calls run with the mode off."""

    def __init__(self) -> None:
        super().__init__()
        self.host_reads: list[str] = []
        self.made_on: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        targets = [a for a in (*args[1:], *(kwargs or {}).values()) if isinstance(a, (str, torch.device))]
        to_host = name == "to" and any(str(a).startswith("cpu") for a in targets)
        if name in _HOST_READS or to_host:
            self.host_reads.append(name)
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.made_on.add(out.device.type)
        return out


@exercise("08_hidden_sync")
def check_hidden_sync(evaluate: Callable | None, device: torch.device) -> bool:
    """Lesson 08: ``evaluate(model, batches)`` returns the accuracy over the batches and reads the device once."""
    name = "find the hidden synchronisation"
    if _unanswered(name, evaluate):
        return False
    if not callable(evaluate):
        return _verdict(name, False, f"evaluate should be a function, got {type(evaluate).__name__}")
    g = torch.Generator().manual_seed(8)
    model = torch.nn.Linear(12, 5).to(device)
    batches = [(torch.randn(32, 12, generator=g).to(device), torch.randint(0, 5, (32,), generator=g).to(device))
               for _ in range(10)]
    with torch.no_grad():
        correct = sum(int((model(X).argmax(dim=1) == y).sum()) for X, y in batches)
    expected = correct / (32 * len(batches))
    recorder = _Recorder()
    try:
        with torch.no_grad(), recorder:
            got = evaluate(model, batches)
    except Exception as err:  # the learner's code: any error becomes a hint
        return _verdict(name, False, f"it raised {_first_line(err)}")
    if isinstance(got, torch.Tensor):
        return _verdict(name, False, "it returned a tensor: read the total back once, at the end, with .item()")
    if not isinstance(got, (int, float)) or abs(got - expected) > 1e-6:
        return _verdict(name, False, f"it returned {got!r}, the accuracy is {expected:.4f}")
    if len(recorder.host_reads) > 2:
        reads = ", ".join(sorted(set(recorder.host_reads)))
        return _verdict(name, False, f"it read values back to the host {len(recorder.host_reads)} times over "
                                     f"{len(batches)} batches ({reads}): keep the running count on the device")
    return _verdict(name, True, "")


# --- lesson 09 -------------------------------------------------------------------------------------------------

_HISTORIES = [
    ([(1.0, 0.5), (2.0, 0.88), (3.0, 0.9)], 0.88, 2.0),  # reached exactly at the target
    ([(0.5, 0.7), (1.5, 0.91), (2.5, 0.86), (3.5, 0.93)], 0.9, 1.5),  # the first time counts, not a later one
    ([(1.0, 0.5), (2.0, 0.6)], 0.9, None),  # never reached
    ([], 0.9, None),
]


@exercise("09_time_to_target")
def check_time_to_target(fn: Callable | None) -> bool:
    """Lesson 09: ``fn(history, target)`` returns the training time of the first point at or above the target."""
    name = "time to target"
    if _unanswered(name, fn):
        return False
    if not callable(fn):
        return _verdict(name, False, f"expected a function, got {type(fn).__name__}")
    for history, target, expected in _HISTORIES:
        try:
            got = fn(list(history), target)
        except Exception as exc:  # a learner's function may raise anything; the hint names it
            return _verdict(name, False, f"it raised {type(exc).__name__}: {exc} on history={history}")
        if got != expected:
            return _verdict(name, False, f"for history={history} and target={target} it returned {got!r}, expected "
                                         f"{expected!r} (the first point with accuracy >= target; None if none)")
    return _verdict(name, True, "")


_SPREADS = [
    ([10.0, 11.0, 12.0], [5.0, 5.5, 6.0], "kept"),
    ([10.0, 11.0, 12.0], [9.0, 10.5, 11.0], "no clear difference"),  # lower mean, overlapping ranges
    ([10.0, 11.0, 12.0], [12.5, 13.0, 14.0], "slower"),
    ([10.0, 10.2, 10.4], [10.5, 10.6, 19.0], "slower"),
    ([5.0, 9.0, 13.0], [8.8, 8.9, 9.0], "no clear difference"),  # a tighter spread inside a wide one
]


@exercise("09_keep_rule")
def check_keep_rule(fn: Callable | None) -> bool:
    """Lesson 09: ``fn(before, after)`` says "kept", "no clear difference" or "slower" from two lists of seconds."""
    name = "keep or reject"
    if _unanswered(name, fn):
        return False
    if not callable(fn):
        return _verdict(name, False, f"expected a function, got {type(fn).__name__}")
    for before, after, expected in _SPREADS:
        try:
            got = fn(list(before), list(after))
        except Exception as exc:  # a learner's function may raise anything; the hint names it
            return _verdict(name, False, f"it raised {type(exc).__name__}: {exc}")
        if got != expected:
            return _verdict(name, False, f"before={before}, after={after}: it said {got!r}, expected {expected!r}; "
                                         "keep only when the slowest run after beats the fastest run before")
    return _verdict(name, True, "")


class _QueuedClock:
    """A fake device: ``work()`` queues ``work_s`` seconds and returns at once, ``sync()`` waits for the queue, and
    ``clock()`` reads the time. It starts with ``queued_s`` seconds of earlier work still running."""

    def __init__(self, queued_s: float = 2.0, launch_s: float = 0.001, work_s: float = 0.5) -> None:
        self.now, self.pending, self.launch_s, self.work_s = 0.0, queued_s, launch_s, work_s
        self.calls = {"work": 0, "sync": 0, "clock": 0}

    def work(self) -> None:
        self.calls["work"] += 1
        self.now += self.launch_s  # the Python side of a launch
        self.pending += self.work_s

    def sync(self) -> None:
        self.calls["sync"] += 1
        self.now += self.pending
        self.pending = 0.0

    def clock(self) -> float:
        self.calls["clock"] += 1
        return self.now


@exercise("09_time_it_right")
def check_time_it(time_it: Callable | None) -> bool:
    """Lesson 09: ``time_it(fn, sync, clock)`` returns the seconds ``fn()``'s device work takes, queued work included
    and earlier work excluded, measured with a fake device whose clock only sees finished work after ``sync()``."""
    name = "time it right"
    if _unanswered(name, time_it):
        return False
    if not callable(time_it):
        return _verdict(name, False, f"time_it should be a function, got {type(time_it).__name__}")
    fake = _QueuedClock()
    try:
        got = time_it(fake.work, fake.sync, fake.clock)
    except Exception as err:  # the learner's code: any error becomes a hint
        return _verdict(name, False, f"it raised {_first_line(err)}")
    expected = fake.launch_s + fake.work_s
    if fake.calls["work"] != 1:
        return _verdict(name, False, f"it called fn {fake.calls['work']} times; call it once between the clock reads")
    if not isinstance(got, (int, float)):
        return _verdict(name, False, f"it returned {got!r}; return the seconds as a number")
    if fake.calls["sync"] == 0:
        return _verdict(name, False, f"it measured {got:.3f} s, the work takes {expected:.3f} s: it never calls "
                                     "sync(), so the clock stops before the device has finished")
    if abs(got - expected) > 1e-9:
        if got > expected + fake.launch_s:
            why = "the device was still busy with earlier work when the clock started: sync() before the first read"
        else:
            why = "the queued work was not finished when the clock was read again: sync() before the last read"
        return _verdict(name, False, f"it measured {got:.3f} s, the work takes {expected:.3f} s: {why}")
    return _verdict(name, True, "")


@exercise("09_flip_on_device")
def check_flip_half(flip_half: Callable | None, device: torch.device) -> bool:
    """Lesson 09: ``flip_half(X, generator)`` mirrors a random half of the (B, C, H, W) batch left-right, with the
    random choice made on ``X.device`` from ``generator``. Run on ``device`` (values checked), then on the meta device
    (shapes only), recording where every tensor it makes lives; a GPU the lesson did not choose is never used."""
    name = "augment on the device"
    if _unanswered(name, flip_half):
        return False
    if not callable(flip_half):
        return _verdict(name, False, f"flip_half should be a function, got {type(flip_half).__name__}")
    for where in (torch.device(device), torch.device("meta")):
        X = torch.arange(512 * 2 * 4 * 6, dtype=torch.float32, device=where).reshape(512, 2, 4, 6)  # (B, C, H, W)
        on = where if where.type != "meta" else torch.device("cpu")  # meta has no generator; its ops take a CPU one
        recorder = _Recorder()
        try:
            with recorder:
                out = flip_half(X, torch.Generator(device=on).manual_seed(0))
            again = flip_half(X, torch.Generator(device=on).manual_seed(0))
        except Exception as err:  # the learner's code: any error becomes a hint
            return _verdict(name, False, f"on {where} it raised {_first_line(err)}")
        if not isinstance(out, torch.Tensor) or out.shape != X.shape or not same_device(out.device, where):
            got = f"{tuple(out.shape)} on {out.device}" if isinstance(out, torch.Tensor) else type(out).__name__
            return _verdict(name, False, f"for a batch {tuple(X.shape)} on {where} it returned {got}")
        if elsewhere := recorder.made_on - {where.type}:
            return _verdict(name, False, f"with the batch on {where} it made tensors on {', '.join(sorted(elsewhere))}"
                                         ": make the random mask with device=X.device")
        if where.type == "meta":
            continue
        kept = (out == X).flatten(1).all(dim=1)
        mirrored = (out == X.flip(3)).flatten(1).all(dim=1)
        if not bool((kept | mirrored).all()):
            return _verdict(name, False, "some images are neither unchanged nor mirrored left-right: flip the last "
                                         "axis (W) of the (B, C, H, W) batch, whole images at a time")
        share = mirrored.float().mean().item()
        if not 0.35 < share < 0.65:
            return _verdict(name, False, f"it mirrored {share:.0%} of the images; about half should be, chosen at "
                                         "random for each image")
        if not torch.equal(again, out):
            return _verdict(name, False, "two calls with generators of the same seed gave different flips: draw the "
                                         "mask from the generator (generator=generator)")
    return _verdict(name, True, "")
