"""The speedrun on the learner's defaults: each dataset its own target, no flips on MNIST, and the precision rung's
16-bit type chosen from the GPU's compute capability (a T4's 7.5, an A100's 8.0, an H100's 9.0), without a GPU."""

from __future__ import annotations

import math

import pytest
import torch
from speedrun_cli import run_faked

from lessons import lesson_11 as speedrun

CUDA = torch.device("cuda")
CPU = torch.device("cpu")
GPUS = {"P100": (6, 0), "T4": (7, 5), "A100": (8, 0), "H100": (9, 0)}


@pytest.fixture
def capability(monkeypatch):
    """Make ``torch.cuda.get_device_capability`` answer as the GPU named by ``set(name)``."""
    seen = {}

    def set_gpu(name: str) -> None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: GPUS[name])
        seen["gpu"] = name

    return set_gpu


def test_each_dataset_has_its_own_target():
    assert speedrun.default_target("MNIST", quick=False) == 0.99
    assert speedrun.default_target("FashionMNIST", quick=False) == 0.88
    assert speedrun.default_target("fashion-mnist", quick=True) == 0.60
    assert speedrun.DATASETS["FashionMNIST"].stretch == 0.94
    assert speedrun.default_target("MNIST", quick=True) > speedrun.default_target("FashionMNIST", quick=True)
    with pytest.raises(ValueError, match="Unknown dataset"):
        speedrun.default_target("CIFAR10", quick=False)


def _fake_run(calls):
    def run(recipe, data, device, target, seed, quick):
        calls.append(recipe)
        return speedrun.Attempt(True, 10.0 - len(calls) * 0.1, 0.0, 0.0, 1, target, [(1.0, target)])

    return run


@pytest.mark.parametrize("quick", [False, True])
def test_the_flip_rungs_do_not_run_on_mnist(quick):
    calls: list[speedrun.SpeedrunRecipe] = []
    data = speedrun.Data(range(60_000), None, "MNIST")  # a length for the one-cycle rung's budget
    results = speedrun.climb(data, CPU, 0.99, [0], quick, run=_fake_run(calls))
    flips = [r for r in results if r.rung.change.get("flips") or r.rung.change.get("test_flips")]
    assert len(flips) == 2
    for r in flips:
        assert r.skipped and "mirrored" in r.skipped and "MNIST" in r.skipped, r.skipped
        assert f"skipped: {r.skipped}" in speedrun.ladder_table(results, 0.99)
    assert not any(recipe.flips or recipe.test_flips for recipe in calls)  # no MNIST image was ever mirrored
    assert calls, "the other rungs still ran"


def test_the_flip_rungs_run_on_fashion_mnist():
    calls: list[speedrun.SpeedrunRecipe] = []
    results = speedrun.climb(
        speedrun.Data(range(60_000), None, "FashionMNIST"), CPU, 0.88, [0], False, run=_fake_run(calls)
    )
    flips = [r for r in results if r.rung.change.get("flips") or r.rung.change.get("test_flips")]
    assert [r.skipped for r in flips] == [None, None]
    assert any(recipe.flips for recipe in calls) and any(recipe.test_flips for recipe in calls)


def test_load_splits_names_its_dataset(monkeypatch):
    import helpers.data

    monkeypatch.setattr(helpers.data, "load_dataset", lambda name, train, verbose=False: list(range(8)))
    assert speedrun.load_splits("fashion-mnist", quick=False).name == "FashionMNIST"
    assert speedrun.load_splits("MNIST", quick=False).name == "MNIST"


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled, but CUDA is not available")
@pytest.mark.parametrize(
    ("gpu", "dtype", "scaled"),
    [
        ("P100", torch.float16, True),
        ("T4", torch.float16, True),  # fp16 tensor cores, none for bf16
        ("A100", torch.bfloat16, False),
        ("H100", torch.bfloat16, False),
    ],
)
def test_the_precision_rung_follows_the_compute_capability(capability, gpu, dtype, scaled):
    capability(gpu)
    recipe = speedrun.SpeedrunRecipe(mixed_precision=True)
    assert speedrun.recipe_autocast_dtype(recipe, CUDA) is dtype
    scaler = speedrun.grad_scaler(speedrun.recipe_autocast_dtype(recipe, CUDA), CUDA)
    assert isinstance(scaler, torch.amp.GradScaler) if scaled else scaler is None
    rung = next(r for r in speedrun.ladder(CUDA, quick=False) if r.change.get("mixed_precision"))
    short = "fp16" if dtype is torch.float16 else "bf16"
    assert rung.name.startswith(f"4 {short} autocast")
    assert ("GradScaler" in rung.name) is scaled
    assert short in rung.mechanism and ("GradScaler" in rung.mechanism) is scaled
    assert speedrun.skip_reason(recipe, CUDA) is None


def test_without_the_rung_there_is_no_autocast_and_no_scaler(capability):
    capability("T4")
    assert speedrun.recipe_autocast_dtype(speedrun.SpeedrunRecipe(), CUDA) is None
    assert speedrun.grad_scaler(None, CUDA) is None


def test_the_precision_rung_is_skipped_off_cuda_without_claiming_tensor_cores():
    reason = speedrun.skip_reason(speedrun.SpeedrunRecipe(mixed_precision=True), CPU)
    assert reason and "CUDA GPUs only" in reason and "tensor cores" not in reason


class _Images:
    """An MNIST-shaped data set (uint8 pixels in .data, labels in .targets), as the resident loader reads one."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.transform = None

    def __len__(self) -> int:
        return len(self.targets)


def _tiny_data(name: str = "FashionMNIST") -> speedrun.Data:
    return speedrun.Data(_Images(64, 0), _Images(16, 1), name)


def test_an_fp16_recipe_trains_through_the_grad_scaler(monkeypatch):
    # What a T4 runs, on the CPU: the same steps with fp16 autocast and a GradScaler (CPU autocast takes float16).
    from helpers import devices

    monkeypatch.setattr(devices, "autocast_dtype", lambda device: torch.float16)
    updates = []
    real_update = torch.amp.GradScaler.update

    def counting_update(self, *args, **kwargs):
        updates.append(self.get_scale())
        return real_update(self, *args, **kwargs)

    monkeypatch.setattr(torch.amp.GradScaler, "update", counting_update)
    recipe = speedrun.SpeedrunRecipe(
        loader="resident", optimizer="SGD+OneCycle", batch_size=32, model="sized", mixed_precision=True, epochs=1
    )
    attempt = speedrun.run_recipe(recipe, _tiny_data(), CPU, target=1.01, seed=0, quick=True)
    assert attempt.steps == 16  # 64 images in batches of 8 (8 steps an epoch), 2 epochs in quick mode
    assert len(updates) >= attempt.steps  # every training step went through the scaler (and the warm-up's too)
    assert all(math.isfinite(a) for _, a in attempt.history)


def test_a_bf16_recipe_uses_no_scaler(monkeypatch):
    from helpers import devices

    monkeypatch.setattr(devices, "autocast_dtype", lambda device: torch.bfloat16)

    def no_scaler(*args, **kwargs):
        raise AssertionError("a GradScaler was built for bf16")

    monkeypatch.setattr(torch.amp, "GradScaler", no_scaler)
    recipe = speedrun.SpeedrunRecipe(loader="resident", batch_size=32, model="sized", mixed_precision=True, epochs=1)
    attempt = speedrun.run_recipe(recipe, _tiny_data(), CPU, target=1.01, seed=0, quick=True)
    assert attempt.steps > 0


def _cli_target(monkeypatch, tmp_path, *args: str) -> tuple[float, dict]:
    """Run ``main`` with the data and the ladder faked; return the target the ladder was given and the JSON record."""
    seen, record = run_faked(monkeypatch, tmp_path, args)
    assert record["target"] == seen["target"] and record["dataset"] == seen["dataset"]
    return seen["target"], record


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--dataset", "MNIST"), 0.99),
        (("--dataset", "FashionMNIST"), 0.88),
        ((), 0.88),  # the command's default dataset is Fashion-MNIST
        (("--dataset", "FashionMNIST", "--quick"), 0.60),
        (("--dataset", "FashionMNIST", "--runs", "3", "--target", "0.94"), 0.94),  # the GPU check's stretch run
        (("--dataset", "MNIST", "--target", "88"), 0.88),
    ],
)
def test_the_command_defaults_to_the_datasets_target(monkeypatch, tmp_path, args, expected):
    target, record = _cli_target(monkeypatch, tmp_path, *args)
    assert target == pytest.approx(expected)


def test_the_help_names_every_datasets_target(capsys):
    with pytest.raises(SystemExit):
        speedrun.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "MNIST 99%" in out and "FashionMNIST 88% (stretch 94%)" in out
