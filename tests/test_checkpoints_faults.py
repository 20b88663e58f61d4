"""helpers.checkpoints under faults, from the user's side: damaged files, wrong paths, interrupted saves."""

from __future__ import annotations

import os
import pickle
import signal
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
import torch
from children import start_interruptible

from helpers import checkpoints
from helpers.checkpoints import CorruptCheckpointError, load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parent.parent


def _temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def good(tmp_path) -> Path:
    return save_checkpoint({"w": torch.arange(300.0), "b": torch.zeros(5), "step": 3}, tmp_path / "good.pt")


def _without_storage(src: Path, dst: Path) -> Path:
    """A copy of ``src`` whose zip archive lacks the entry holding the first tensor's bytes."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            if not item.filename.endswith("/data/0"):
                zout.writestr(item, zin.read(item))
    return dst


DAMAGE = {
    "truncated": lambda good, bad: bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2]),
    "zero-byte": lambda good, bad: bad.write_bytes(b""),
    "garbage": lambda good, bad: bad.write_bytes(bytes(range(256)) * 4),
    "text": lambda good, bad: bad.write_text("hello, not a checkpoint"),  # torch.load raised KeyError: 104
    "missing entry": lambda good, bad: _without_storage(good, bad),
    "plain pickle": lambda good, bad: bad.write_bytes(pickle.dumps({"w": [1.0, 2.0]}, protocol=2)),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_checkpoint_gives_one_error_naming_the_file_and_the_fix(tmp_path, good, damage):
    bad = tmp_path / "bad.pt"
    DAMAGE[damage](good, bad)
    with pytest.raises(CorruptCheckpointError) as info:
        load_checkpoint(bad, map_location="cpu")
    message = str(info.value)
    assert message.startswith(f"{bad} is not a complete checkpoint (")
    assert f"{bad.stat().st_size:,} bytes)" in message
    assert "Fix: delete it and run the cell that saves it again (save_checkpoint)" in message
    assert isinstance(info.value, RuntimeError)
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no second traceback under it
    assert bad.exists()  # the file is the learner's to delete


def test_what_pytorch_said_is_kept_in_the_message(tmp_path, good):
    """The lesson on atomic saves matches PyTorch's own words for a file cut short by a failed torch.save."""
    bad = tmp_path / "bad.pt"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("bad/version", "3\n")  # an archive that torch.save began but never finished
    with pytest.raises(RuntimeError, match="PytorchStreamReader failed locating file data.pkl: file not found"):
        load_checkpoint(bad, map_location="cpu")
    bad.write_bytes(b"")
    with pytest.raises(CorruptCheckpointError, match=r"\(the file is empty; 0 bytes\)"):
        load_checkpoint(bad, map_location="cpu")


def test_a_folder_is_named_as_a_folder(tmp_path, good):
    with pytest.raises(IsADirectoryError) as info:
        load_checkpoint(tmp_path, map_location="cpu")
    message = str(info.value)
    assert message.startswith(f"{tmp_path} is a folder, not a checkpoint file.")
    assert "It holds good.pt." in message
    assert "No checkpoint at" not in message and "Run the cell that saves it" not in message


def test_weights_only_refusal_is_still_pytorchs_own_error(tmp_path):
    path = save_checkpoint({"when": __import__("datetime").date(2024, 1, 1)}, tmp_path / "c.pt")
    with pytest.raises(pickle.UnpicklingError, match="datetime.date") as info:
        load_checkpoint(path, map_location="cpu")
    assert not isinstance(info.value, CorruptCheckpointError)


def test_an_error_in_the_callers_map_location_function_is_not_blamed_on_the_file(good):
    def where(storage, tag):
        raise KeyError(f"no rule for {tag}")

    with pytest.raises(KeyError, match="no rule for cpu"):
        load_checkpoint(good, map_location=where)


def test_a_gpu_checkpoint_on_a_machine_without_one_is_not_called_damaged(tmp_path):
    """torch.load's own message about CUDA passes through unchanged (where CUDA exists, the load simply works)."""
    src = save_checkpoint({"w": torch.ones(2)}, tmp_path / "cpu.pt")
    gpu = tmp_path / "gpu.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(gpu, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename.endswith("/data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            zout.writestr(item, data)
    if torch.cuda.is_available():
        assert load_checkpoint(gpu, map_location=None)["w"].device.type == "cuda"
    else:
        with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device") as info:
            load_checkpoint(gpu, map_location=None)
        assert not isinstance(info.value, CorruptCheckpointError)


@pytest.mark.parametrize("where", ["gpu", {"cuda:0": "gpu0"}])
def test_an_unknown_device_name_in_map_location(good, where):
    with pytest.raises(ValueError, match=r"is not a device name\. Use a device such as 'cpu', 'cuda'"):
        load_checkpoint(good, map_location=where)


def test_saving_onto_a_folder(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match=r"that is a folder\. Fix: give a file name inside it, such as"):
        save_checkpoint({"w": torch.ones(1)}, folder)
    assert _temporaries(tmp_path) == [] and list(folder.iterdir()) == []


def test_saving_under_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"notes.txt is a file, not a folder\. Fix: choose a path"):
        save_checkpoint({"w": torch.ones(1)}, tmp_path / "notes.txt" / "c.pt")
    assert (tmp_path / "notes.txt").read_text() == "x"
    assert _temporaries(tmp_path) == []


def test_tilde_in_a_checkpoint_path_means_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    path = save_checkpoint({"w": torch.ones(1)}, "~/ckpt/c.pt")
    assert path == tmp_path / "home" / "ckpt" / "c.pt"
    assert torch.equal(load_checkpoint("~/ckpt/c.pt", "cpu")["w"], torch.ones(1))
    assert not (tmp_path / "~").exists()


def test_a_write_that_fails_midway_keeps_the_previous_file(tmp_path, good, monkeypatch):
    before = good.read_bytes()
    real_save = torch.save

    def dies_midway(obj, f, *args, **kwargs):
        real_save({"w": torch.zeros(10_000)}, f)  # real bytes reach the temporary file...
        raise OSError(5, "Input/output error")  # ...then the disk fails

    monkeypatch.setattr(checkpoints.torch, "save", dies_midway)
    with pytest.raises(OSError, match="Input/output error"):
        save_checkpoint({"w": torch.ones(3)}, good)
    monkeypatch.undo()
    assert good.read_bytes() == before
    assert load_checkpoint(good, "cpu")["step"] == 3
    assert _temporaries(good.parent) == []


def test_keyboard_interrupt_reported_as_runtime_error_by_torch_is_a_keyboard_interrupt(
    tmp_path, good, monkeypatch, request
):
    """Ctrl-C inside PyTorch's writer, recreated in one process: the handler runs, the writer says RuntimeError."""
    before = good.read_bytes()
    # Python's own handler, as in a terminal, also where pytest was started with SIGINT ignored (in the background)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))

    def interrupted_inside_the_writer(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial")
        try:
            signal.raise_signal(signal.SIGINT)  # Python's handler raises KeyboardInterrupt here...
        except KeyboardInterrupt:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 148013440") from None

    monkeypatch.setattr(checkpoints.torch, "save", interrupted_inside_the_writer)
    with pytest.raises(KeyboardInterrupt, match="previous file is unchanged"):
        save_checkpoint({"w": torch.ones(3)}, good)
    monkeypatch.undo()
    assert good.read_bytes() == before
    assert _temporaries(good.parent) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the usual handler is back


SAVER = textwrap.dedent(
    """
    import sys
    import torch
    from helpers.checkpoints import save_checkpoint
    path = sys.argv[1]
    save_checkpoint({"step": 0}, path)
    state = {f"w{i}": torch.ones(1000, 1000) for i in range(40)}  # 160 MB: a save takes a while
    print("saving", flush=True)
    step = 0
    try:
        while True:
            step += 1
            state["step"] = step
            save_checkpoint(state, path)
    except KeyboardInterrupt as exc:
        print(f"KeyboardInterrupt: {exc}", flush=True)
    except BaseException as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="sends SIGINT")
def test_ctrl_c_during_a_real_save(tmp_path):
    path = tmp_path / "c.pt"
    child = start_interruptible([sys.executable, "-c", SAVER, str(path)])
    try:
        assert child.stdout.readline().strip() == "saving"
        time.sleep(0.3)  # inside the first or a later save of the big state
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:  # a saver that missed the signal would save forever
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert out.startswith("KeyboardInterrupt"), out + err
    assert "RuntimeError" not in out
    state = load_checkpoint(path, map_location="cpu")  # the previous checkpoint, complete
    assert isinstance(state["step"], int)
    assert _temporaries(tmp_path) == []
