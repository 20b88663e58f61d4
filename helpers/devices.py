"""Choosing, validating and synchronising devices; ``python -m helpers.devices`` reports what PyTorch sees here."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
from typing import Any

import torch

from helpers import settings

KNOWN_TYPES = ("cpu", "cuda", "mps", "xpu")
"""Device types ``pick_device`` accepts by name, besides ``"auto"``."""

TORCH_FLOOR = (2, 8)
"""The lowest PyTorch the course supports (requirements.txt says the same; CI runs the course on it)."""
TORCHVISION_FLOOR = "0.23"  # the torchvision released with that PyTorch
PYTHON_FLOOR = (3, 10)


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


def _accelerator_available(kind: str) -> bool:
    """Whether a non-CUDA backend ("mps", "xpu") is usable in this process."""
    if kind not in ("mps", "xpu"):
        return False
    backend = torch.backends.mps if kind == "mps" else torch.xpu
    return bool(backend.is_available())


def _arch_supported(index: int) -> bool:
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
        if current is not None and current.type not in found and _accelerator_available(current.type):
            found.append(current.type)
    for kind in ("mps", "xpu"):
        if kind not in found and _accelerator_available(kind):
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
        if not _arch_supported(chosen):
            major, minor = torch.cuda.get_device_capability(chosen)
            raise DeviceUnavailableError(
                f"cuda:{chosen} ({torch.cuda.get_device_name(chosen)}, compute capability {major}.{minor}) is visible, "
                f"but this PyTorch build has no kernels for it (it supports {' '.join(torch.cuda.get_arch_list())}): "
                "every GPU operation would fail with 'no kernel image is available'. On Kaggle choose Accelerator > "
                'GPU T4 x2; elsewhere use another GPU, a PyTorch build for this one, or "cpu".'
            )
    elif kind == "mps" and not _accelerator_available("mps"):
        built = torch.backends.mps.is_built()
        reason = "this PyTorch build has " + ("MPS, but the machine does not offer it" if built else "no MPS")
        raise DeviceUnavailableError(
            f"MPS was requested but is unavailable ({reason}). MPS needs an Apple-silicon Mac, the macOS wheel of "
            'PyTorch and, for current releases, macOS 14 or later; elsewhere use "auto" or "cpu".'
        )
    elif kind == "xpu":
        if not _accelerator_available("xpu"):
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


def gpu_ids(device: str | torch.device) -> list[int]:
    """The CUDA GPUs a lesson running on ``device`` may use, its own first (DataParallel keeps the model and gathers
    the output on the first): every visible one when it runs on CUDA, else none."""
    device = torch.device(device)
    if device.type != "cuda":
        return []
    first = torch.cuda.current_device() if device.index is None else device.index
    return [first] + [i for i in range(cuda_gpu_count()) if i != first]


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


def runtime() -> str:
    """Where this runs: "Colab", "Kaggle" or "local"."""
    if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
        return "Colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ or "KAGGLE_URL_BASE" in os.environ:
        return "Kaggle"
    return "local"


def environment_report() -> dict[str, Any]:
    """What PyTorch can see here, as data: versions, GPUs, MPS, CPU threads, runtime, the device ``pick_device()``
    chooses and ``course_device``, the value of ``$COURSE_DEVICE`` when it overrides that choice (None otherwise)."""
    try:
        import torchvision

        torchvision_version = torchvision.__version__
    except ImportError:
        torchvision_version = None
    cudnn = None
    if torch.backends.cudnn.is_available():
        v = torch.backends.cudnn.version()  # 92400 means 9.24.0; cuDNN 8 packed 8902 as 8.9.2
        major = 10000 if v >= 90000 else 1000
        cudnn = f"{v // major}.{v % major // 100}.{v % 100}"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = [
        {
            "index": i,
            "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "supported_by_this_build": _arch_supported(i),
        }
        for i, props in enumerate(map(torch.cuda.get_device_properties, range(count)))
    ]
    try:
        auto_device = str(pick_device())
    except (DeviceUnavailableError, ValueError) as exc:
        auto_device = f"nothing: {str(exc).splitlines()[0]}"
    return {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": torch.__version__,
        "torchvision": torchvision_version,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": cudnn,
        "cuda_arch_list": torch.cuda.get_arch_list() if torch.version.cuda else [],
        "gpus": gpus,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "mps_built": torch.backends.mps.is_built(),
        "mps_available": _accelerator_available("mps"),
        "xpu_available": _accelerator_available("xpu"),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "runtime": runtime(),
        "auto_device": auto_device,
        "course_device": settings.device(),
        "why_no_cuda": None
        if torch.cuda.is_available()
        else why_no_cuda(torch.version.cuda, nvidia_driver(), os.environ.get("CUDA_VISIBLE_DEVICES")),
    }


def _release(version: str) -> tuple[int, ...]:
    """(2, 8) from "2.8.0+cu128", (2, 10) from "2.10.0a0+git1234"."""
    return tuple(int(re.match(r"\d*", part).group() or 0) for part in version.split("+")[0].split(".")[:2])


def version_problems(torch_version: str | None = None, python_version: str | None = None) -> list[str]:
    """One message for each of torch and Python that is older than the course supports, with the fix."""
    torch_version = torch_version or torch.__version__
    python_version = python_version or platform.python_version()
    found = []
    if _release(torch_version) < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        found.append(
            f"PyTorch {torch_version} is older than {floor}, the lowest version this course is tested on: lessons "
            "use APIs that older releases lack or treat differently, and may stop with errors. "
            f'Fix: pip install -U "torch>={floor}" "torchvision>={TORCHVISION_FLOOR}", then restart the kernel '
            "(Colab: Runtime > Restart session; Kaggle: Run > Restart & clear cell outputs). "
            "The course never reinstalls PyTorch by itself."
        )
    if _release(python_version) < PYTHON_FLOOR:
        floor = ".".join(map(str, PYTHON_FLOOR))
        found.append(
            f"Python {python_version} is older than {floor}, the lowest version this course supports (and no PyTorch "
            f"the course supports installs on it). Fix: make the environment with a newer Python, say "
            f"`python3.12 -m venv .venv` (`python3 --version` names the default one; install python3.12 from your "
            f"system's packages or python.org where it is missing), then run the set-up command again. Colab and "
            f"Kaggle already run a newer Python."
        )
    return found


def format_report(report: dict[str, Any] | None = None) -> str:
    """The environment report as aligned text lines; the chosen device says "(from COURSE_DEVICE)" when that variable
    chose it."""
    r = environment_report() if report is None else report
    cuda = f"built for CUDA {r['cuda_build']}" if r["cuda_build"] else "CPU-only build (no CUDA)"
    lines = [
        ("Python", f"{r['python']} on {r['platform']}"),
        ("PyTorch", f"{r['torch']} ({cuda})"),
        ("torchvision", r["torchvision"] or "not installed"),
        ("CUDA available", "yes" if r["cuda_available"] else "no"),
        ("cuDNN", r["cudnn"] if r["cudnn"] is not None else "n/a"),
    ]
    for gpu in r["gpus"]:
        spec = f"{gpu['name']}, {gpu['memory_gib']} GiB, compute capability {gpu['compute_capability']}"
        unsupported = "" if gpu.get("supported_by_this_build", True) else " (NOT supported by this PyTorch build)"
        lines.append((f"GPU {gpu['index']}", f"{spec}, {gpu['multiprocessors']} SMs{unsupported}"))
    if r["cuda_visible_devices"] is not None:
        lines.append(("CUDA_VISIBLE_DEVICES", repr(r["cuda_visible_devices"])))
    mps = "available" if r["mps_available"] else ("built, not available" if r["mps_built"] else "no")
    # An unusable COURSE_DEVICE makes auto_device "nothing: COURSE_DEVICE=... is set", which names it already.
    forced = r.get("course_device") and not r["auto_device"].startswith("nothing")
    chosen_by = f" (from {settings.DEVICE})" if forced else ""
    lines += [
        ("MPS (Apple GPU)", mps),
        ("XPU (Intel GPU)", "available" if r["xpu_available"] else "no"),
        ("CPU", f"{r['cpu_count']} logical cores, torch uses {r['cpu_threads']} threads"),
        ("Runtime", r["runtime"]),
        ("pick_device() chooses", r["auto_device"] + chosen_by),
    ]
    width = max(len(k) for k, _ in lines)
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in lines)
    if r.get("why_no_cuda"):
        text += "\n\n" + textwrap.fill(f"Why no CUDA: {r['why_no_cuda']}", 110)
    problems = version_problems(r["torch"], r["python"])
    return text + "".join(f"\n\nWARNING: {p}" for p in problems)


def main() -> None:
    """Print the environment report (``python -m helpers.devices``)."""
    print(format_report())


if __name__ == "__main__":
    main()
