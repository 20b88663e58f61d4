"""helpers.checkpoints: atomic saves that survive an interruption, and loads that map devices and refuse code."""

from __future__ import annotations

import os
import pickle
import stat

import pytest
import torch

from helpers import checkpoints
from helpers.checkpoints import load_checkpoint, save_checkpoint


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_round_trip_and_return_value(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3), "step": 7}
    path = save_checkpoint(state, tmp_path / "sub" / "ckpt.pt")
    assert path == tmp_path / "sub" / "ckpt.pt"
    loaded = load_checkpoint(path, map_location="cpu")
    assert loaded["step"] == 7
    assert torch.equal(loaded["w"], state["w"])
    assert _leftovers(path.parent) == []


@pytest.mark.parametrize(
    "map_location", ["cpu", torch.device("cpu"), {"cpu": "cpu"}, lambda storage, location: storage, None]
)
def test_map_location_forms(tmp_path, map_location):
    save_checkpoint({"w": torch.ones(3)}, tmp_path / "c.pt")
    loaded = load_checkpoint(tmp_path / "c.pt", map_location)
    assert loaded["w"].device == torch.device("cpu")


def test_overwrite_replaces_previous(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint({"v": torch.tensor(1)}, path)
    save_checkpoint({"v": torch.tensor(2)}, path)
    assert load_checkpoint(path, "cpu")["v"].item() == 2
    assert _leftovers(tmp_path) == []


def test_interrupted_save_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    save_checkpoint({"v": torch.tensor([1.0, 2.0])}, path)
    before = path.read_bytes()
    written = []

    def torch_save_that_dies(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")  # partial bytes reach the temporary file...
        written.append(f.name if hasattr(f, "name") else f)
        raise OSError(28, "No space left on device")  # ...then the write fails

    monkeypatch.setattr(checkpoints.torch, "save", torch_save_that_dies)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint({"v": torch.tensor([9.0])}, path)
    monkeypatch.undo()

    assert written, "the fake torch.save was not called"
    assert path.read_bytes() == before
    assert torch.equal(load_checkpoint(path, "cpu")["v"], torch.tensor([1.0, 2.0]))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


def test_keyboard_interrupt_also_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    save_checkpoint({"v": 1}, path)

    def interrupted(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoints.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint({"v": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint(path, "cpu") == {"v": 1}
    assert _leftovers(tmp_path) == []


def test_unpicklable_object_midway_keeps_previous_file(tmp_path):
    class Unsaveable:
        def __reduce__(self):
            raise RuntimeError("cannot be saved")

    path = tmp_path / "c.pt"
    save_checkpoint({"w": torch.zeros(2)}, path)
    with pytest.raises(RuntimeError, match="cannot be saved"):
        save_checkpoint({"w": torch.ones(2), "extra": Unsaveable()}, path)
    assert torch.equal(load_checkpoint(path, "cpu")["w"], torch.zeros(2))
    assert _leftovers(tmp_path) == []


def test_missing_file_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="Run the cell that saves it first"):
        load_checkpoint(tmp_path / "nope.pt", "cpu")


def test_weights_only_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint({"when": __import__("datetime").date(2024, 1, 1)}, path)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        load_checkpoint(path, "cpu")


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_saved_file_follows_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = save_checkpoint({"w": torch.ones(2)}, tmp_path / "c.pt")
        reference = tmp_path / "plain"
        reference.write_bytes(b"")  # what open() gives a new file under the same umask
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask == stat.S_IMODE(reference.stat().st_mode)
