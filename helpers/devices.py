"""Choosing, validating and synchronising devices, and saying why CUDA is not there when it is not."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import torch

from helpers import settings

KNOWN_TYPES = ("cpu", "cuda", "mps", "xpu")
"""Device types ``pick_device`` accepts by name, besides ``"auto"``."""


MIN_DRIVER = {11: 450, 12: 525, 13: 580}
"""The oldest NVIDIA driver (its major number) that runs code built for each CUDA major version, from NVIDIA's table
of minor version compatibility: https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"""
WHEELS = "https://download.pytorch.org/whl"


class DeviceUnavailableError(RuntimeError):
    """The requested device does not exist on this machine; the message says how to get it."""


def _cuda_fix() -> str:
    """What to do where CUDA was asked for and is not available: the GPU settings of Colab and Kaggle, then this
    machine's own reason with its fix (``why_no_cuda``: a CPU-only build, no driver, an old driver, or
    ``CUDA_VISIBLE_DEVICES``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    reason = why_no_cuda(torch.version.cuda, nvidia_driver(), visible)
    hints = [
        "Colab: Runtime > Change runtime type > Hardware accelerator: T4 GPU, then run the notebook again.",
        "Kaggle: Settings > Accelerator > GPU T4 x2 (not P100: PyTorch's CUDA 12.8+ builds, Kaggle's too, lack its "
        "kernels).",
        f'Why not here: {reason} Until then, use "auto" or "cpu".',
    ]
    if visible is not None and not reason.startswith("CUDA_VISIBLE_DEVICES"):
        hints.insert(0, f"CUDA_VISIBLE_DEVICES is set to {visible!r}, which decides which GPUs this process sees.")
    return "\n  ".join(hints)


def accelerator_available(kind: str) -> bool:
    """Whether a non-CUDA backend ("mps", "xpu") is usable in this process."""
    if kind not in ("mps", "xpu"):
        return False
    backend = torch.backends.mps if kind == "mps" else torch.xpu
    return bool(backend.is_available())


def arch_supported(index: int) -> bool:
    """Whether this PyTorch build carries kernels for GPU ``index``: a cubin for its major architecture
    at or below its minor version, or PTX for an older architecture that the driver can compile."""
    arch_list = torch.cuda.get_arch_list()
    if not arch_list:
        return True
    major, minor = torch.cuda.get_device_capability(index)
    for arch in arch_list:
        kind, _, number = arch.partition("_")
        digits = "".join(ch for ch in number if ch.isdigit())
        if not digits:
            continue
        arch_major, arch_minor = int(digits[:-1]), int(digits[-1])
        if kind == "sm" and arch_major == major and arch_minor <= minor:
            return True
        if kind == "compute" and (arch_major, arch_minor) <= (major, minor):
            return True
    return False


def available_types() -> list[str]:
    """Device types usable here, best first; "cpu" is always last."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    if torch.accelerator.is_available():
        current = torch.accelerator.current_accelerator()
        # current_accelerator() names the backend torch was built for, which is not proof it works here.
        if current is not None and current.type not in found and accelerator_available(current.type):
            found.append(current.type)
    for kind in ("mps", "xpu"):
        if kind not in found and accelerator_available(kind):
            found.append(kind)
    found.append("cpu")
    return found


def _with_index(kind: str, index: int | None) -> torch.device:
    if kind == "cpu":
        return torch.device("cpu")
    if index is None:
        # An explicit index makes `tensor.device == device` true after a move ("cuda" != "cuda:0").
        index = torch.cuda.current_device() if kind == "cuda" else 0
    return torch.device(kind, index)


def _parse_device_request(preferred: str | torch.device) -> torch.device:
    """``"cuda:1"`` or a torch.device as a torch.device of a known type, its index kept if given; raise if malformed."""
    if isinstance(preferred, torch.device):
        kind, index = preferred.type, preferred.index
    elif isinstance(preferred, str):
        kind, _, rest = preferred.strip().lower().partition(":")
        if rest and not rest.isdigit():
            raise ValueError(f"Device {preferred!r}: the part after ':' must be a GPU index such as 'cuda:0'.")
        index = int(rest) if rest else None
    else:
        raise TypeError(f"pick_device expects a str or torch.device, got {type(preferred).__name__}.")
    if kind not in KNOWN_TYPES:
        choices = ", ".join(repr(k) for k in ("auto", *KNOWN_TYPES))
        raise ValueError(
            f"Unknown device {str(preferred)!r}. Choose one of {choices}, optionally with an index such as 'cuda:1'."
        )
    if kind == "cpu" and index not in (None, 0):
        raise ValueError(f"Device {str(preferred)!r}: the CPU has no index other than 0; use 'cpu'.")
    return torch.device(kind, index) if index is not None else torch.device(kind)


def validate(device: str | torch.device) -> torch.device:
    """Return ``device`` as a torch.device with an index, or raise DeviceUnavailableError naming the fix."""
    requested = _parse_device_request(device)
    kind, index = requested.type, requested.index
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"CUDA was requested ({requested}) but no GPU is visible.\n  {_cuda_fix()}")
        count = torch.cuda.device_count()
        if index is not None and index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
            raise DeviceUnavailableError(
                f"{requested} was requested but only {count} GPU(s) are visible (cuda:0 to cuda:{count - 1}); "
                f"CUDA_VISIBLE_DEVICES={visible}. Pick an index below {count}, or set CUDA_VISIBLE_DEVICES "
                "before Python starts to choose which GPUs are visible."
            )
        chosen = torch.cuda.current_device() if index is None else index
        if not arch_supported(chosen):
            major, minor = torch.cuda.get_device_capability(chosen)
            raise DeviceUnavailableError(
                f"cuda:{chosen} ({torch.cuda.get_device_name(chosen)}, compute capability {major}.{minor}) is visible, "
                f"but this PyTorch build has no kernels for it (it supports {' '.join(torch.cuda.get_arch_list())}): "
                "every GPU operation would fail with 'no kernel image is available'. On Kaggle choose Accelerator > "
                'GPU T4 x2; elsewhere use another GPU, a PyTorch build for this one, or "cpu".'
            )
    elif kind == "mps" and not accelerator_available("mps"):
        built = torch.backends.mps.is_built()
        reason = "this PyTorch build has " + ("MPS, but the machine does not offer it" if built else "no MPS")
        raise DeviceUnavailableError(
            f"MPS was requested but is unavailable ({reason}). MPS needs an Apple-silicon Mac, the macOS wheel of "
            'PyTorch and, for current releases, macOS 14 or later; elsewhere use "auto" or "cpu".'
        )
    elif kind == "xpu":
        if not accelerator_available("xpu"):
            raise DeviceUnavailableError(
                "XPU was requested but no Intel GPU is visible. Install PyTorch's XPU build on a machine with an "
                'Intel GPU (https://pytorch.org/get-started/locally/), or use "auto" or "cpu".'
            )
        count = torch.xpu.device_count()
        if index is not None and index >= count:
            raise DeviceUnavailableError(f"{requested} was requested but only {count} XPU device(s) are visible.")
    elif kind == "mps" and index not in (None, 0):
        raise DeviceUnavailableError(f"{requested} was requested but a Mac has one MPS device: use 'mps'.")
    return _with_index(kind, index)


def pick_device(preferred: str | torch.device | None = None) -> torch.device:
    """Choose the device to run on. ``None`` or ``"auto"``: ``$COURSE_DEVICE`` when set, else the first available of
    CUDA, the accelerator ``torch.accelerator`` reports (MPS, XPU), then the CPU. Anything else is validated."""
    if preferred is None or (isinstance(preferred, str) and preferred.strip().lower() == "auto"):
        override = settings.device()
        if override is not None:
            try:
                return validate(override)
            except (DeviceUnavailableError, ValueError) as exc:
                name = settings.DEVICE
                raise type(exc)(
                    f'{name}={override!r} is set in the environment, so "auto" means {override!r} here, '
                    f"and that device cannot be used:\n{exc}\n"
                    f"Fix: unset {name} (or set it to auto or cpu) before starting Jupyter or the course runner."
                ) from None
        best = available_types()[0]
        return validate(best) if best == "cuda" else _with_index(best, None)
    return validate(preferred)


def synchronize(device: str | torch.device) -> None:
    """Wait until all queued work on ``device`` has finished; a no-op on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "xpu":
        torch.xpu.synchronize(device)
    elif device.type not in ("cpu", "meta"):
        torch.accelerator.synchronize(device)


def cuda_autocast_dtype(capability: tuple[int, int]) -> torch.dtype:
    """The mixed-precision dtype for a CUDA GPU of compute ``capability``: bfloat16 from 8.0 (A100, H100), whose tensor
    cores run it; float16, with a GradScaler, below (T4 7.5, V100 7.0, P100 6.0), where bfloat16 is emulated."""
    return torch.bfloat16 if tuple(capability) >= (8, 0) else torch.float16


def autocast_dtype(device: str | torch.device) -> torch.dtype | None:
    """The dtype ``torch.autocast`` should use on ``device``; None where autocast cannot run (MPS before macOS
    14). CPUs and other accelerators get bfloat16: float32's range, so no loss scaling."""
    device = torch.device(device)
    if device.type == "cuda":
        return cuda_autocast_dtype(torch.cuda.get_device_capability(device))
    if device.type == "mps":
        return torch.bfloat16 if torch.backends.mps.is_macos_or_newer(14, 0) else None
    return torch.bfloat16


def needs_grad_scaler(dtype: torch.dtype | None) -> bool:
    """Whether training under autocast with ``dtype`` needs a GradScaler: float16 only, whose range is narrow."""
    return dtype is torch.float16


# The gates of a lesson's GPU sections


def cuda_gpu_count() -> int:
    """How many CUDA GPUs this process can see (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_section(device: str | torch.device, shows: str, needed: int = 1) -> bool:
    """The gate of every GPU section: True when the lesson runs on a CUDA GPU and at least ``needed`` are visible;
    otherwise print one line saying what is skipped and why (another device was chosen, or too few GPUs)."""
    device = torch.device(device)
    count = cuda_gpu_count()
    if device.type == "cuda" and count >= needed:
        return True
    if count == 0 or device.type == "cuda":
        why = f"needs {needed} CUDA GPU{'s' if needed > 1 else ''}, this machine has {count}"
    else:
        why = f"the lesson runs on {device.type}, not on this machine's CUDA GPU{'s' if count > 1 else ''}"
    print(f"Skipped ({why}): {shows}")
    return False


def machine_gpus(shows: str, needed: int = 1) -> bool:
    """The gate of a section that only describes the machine's CUDA GPUs (names, memory, compute capability), so it
    does not depend on the lesson's device: True when at least ``needed`` are visible; otherwise print one line saying
    what is skipped and why. The calls that describe a GPU (``get_device_name``, ``get_device_properties``,
    ``current_device``) launch no work on it, but the first of them runs PyTorch's CUDA initialisation in the process
    (``torch.cuda._lazy_init``; a process forked after it cannot use CUDA), also when the lesson runs on the CPU: where
    a CPU run must leave CUDA alone, use ``gpu_section``. Work on a GPU goes under ``gpu_section`` too."""
    count = cuda_gpu_count()
    if count >= needed:
        return True
    print(f"Skipped (needs {needed} CUDA GPU{'s' if needed > 1 else ''}, this machine has {count}): {shows}")
    return False


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version ("550.54.15"), from nvidia-smi or, on Linux, /proc/driver/nvidia/version; None
    where neither finds a driver (no NVIDIA GPU, or no driver installed)."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            done = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0 and done.stdout.strip():
            return done.stdout.split()[0]
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as file:
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", file.read())
    except OSError:
        return None
    return found.group(1) if found else None


def why_no_cuda(
    cuda_build: str | None, driver: str | None, visible: str | None, torch_version: str = torch.__version__
) -> str:
    """Why ``torch.cuda.is_available()`` is False, with the one fix: a CPU-only build of PyTorch, no NVIDIA driver,
    a driver older than the build's CUDA needs, or ``CUDA_VISIBLE_DEVICES`` hiding every GPU."""
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return (
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from this process. Fix: unset it (or name a GPU), "
            "then restart the kernel: it is read once, when CUDA starts."
        )
    major = int(driver.split(".")[0]) if driver else None
    if cuda_build is None:
        if major is None:
            return (
                f"PyTorch {torch_version} is a CPU-only build, and no NVIDIA driver was found either: this machine "
                "has no NVIDIA GPU (on Colab or Kaggle, switch the runtime's accelerator to a GPU)."
            )
        wheel = "cu130" if major >= MIN_DRIVER[13] else "cu126"
        return (
            f"PyTorch {torch_version} is a CPU-only build, on a machine with NVIDIA driver {driver}. Fix: "
            f"pip install --force-reinstall torch torchvision --index-url {WHEELS}/{wheel}, then restart the kernel."
        )
    if major is None:
        return (
            f"This PyTorch is built for CUDA {cuda_build}, but no NVIDIA driver was found: this machine has no NVIDIA "
            "GPU, or its driver is not installed (on Colab or Kaggle, switch the runtime's accelerator to a GPU)."
        )
    needs = MIN_DRIVER.get(int(cuda_build.split(".")[0]))
    if needs is not None and major < needs:
        older = max((v for v, d in MIN_DRIVER.items() if d <= major), default=None)
        build = {12: "cu126", 11: "cu118"}.get(older)
        instead = (
            f", or install a build for CUDA {older}: pip install --force-reinstall torch torchvision "
            f"--index-url {WHEELS}/{build}"
            if build
            else ""
        )
        return (
            f"NVIDIA driver {driver} is older than PyTorch's CUDA {cuda_build} needs (driver {needs} or newer). Fix: "
            f"update the driver{instead}; then restart the kernel."
        )
    return (
        f"This PyTorch is built for CUDA {cuda_build} and NVIDIA driver {driver} is new enough, yet CUDA did not "
        "start: run nvidia-smi. A driver updated without a reboot (its library and kernel module differ) or a GPU "
        "in exclusive mode held by another process are the usual causes."
    )
