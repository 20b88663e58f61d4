"""helpers.arguments: one set of checks for every command line and a lesson's parameters cell, so the same mistake
gets the same words everywhere; helpers.single_train (and the DDP script that shares its options) checks its own."""

from __future__ import annotations

import argparse
import math

import pytest

from helpers import arguments, lesson, single_train
from helpers.data import canonical_name
from lessons import lesson_11 as speedrun
from lessons.lesson_07 import ddp_train
from tools import bench, course, gpu_check

WHOLE = "is not allowed: give a whole number of at least 1"


def _error_line(capsys, main, argv) -> str:
    """The last line a command line prints when it refuses ``argv`` (argparse's exit status 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("kind", "text", "value"),
    [
        (arguments.positive_int, "3", 3),
        (arguments.positive_int, " 12 ", 12),
        (arguments.count, "0", 0),
        (arguments.positive_number, "1e-3", 0.001),
        (arguments.seconds, "0.5", 0.5),
        (arguments.positive_ints, "512,4096", [512, 4096]),
        (arguments.flag, "Yes", True),
        (arguments.flag, "off", False),
        (arguments.accuracy, "88%", 0.88),
        (arguments.accuracy, "0.935", 0.935),
    ],
)
def test_good_text_becomes_the_value(kind, text, value):
    assert kind(text) == pytest.approx(value)


@pytest.mark.parametrize(
    ("kind", "allowed", "texts"),
    [
        (arguments.positive_int, "a whole number of at least 1", ["0", "-5", "2.5", "ten"]),
        (arguments.count, "a whole number of at least 0", ["-1", "1.5"]),
        (arguments.positive_number, "a number greater than 0", ["0", "-1", "nan", "inf", "fast"]),
        (arguments.seconds, "a number of seconds greater than 0", ["soon", "0"]),
        (arguments.positive_ints, "a non-empty list of whole numbers of at least 1", ["512,0", "", "8;16"]),
        (arguments.flag, "True or False (or one of the strings 1/0, true/false, yes/no, on/off, in any case)", ["ja"]),
        (
            arguments.accuracy,
            "a fraction in (0, 1) such as 0.88, or a percentage in (1, 100) such as 88 or 88%",
            ["150", "1", "0.5%", "abc"],
        ),
    ],
)
def test_bad_text_is_refused_naming_what_is_allowed(kind, allowed, texts):
    for text in texts:
        with pytest.raises(argparse.ArgumentTypeError) as info:
            kind(text)
        assert str(info.value) == f"{text!r} is not allowed: give {allowed}"


def test_a_parameters_cell_value_must_have_the_right_python_type():
    """A notebook's BATCH_SIZE = "128" is refused while the command line's "128" is read as a number."""
    assert arguments.positive_int("128") == 128
    for value in ("128", True, 2.0, None):
        with pytest.raises(ValueError, match="is not allowed: give a whole number of at least 1"):
            arguments.positive_int.check(value)
    assert arguments.positive_ints.check((8, 16)) == (8, 16)
    assert arguments.flag.check(1) is True and arguments.accuracy.check(88) == pytest.approx(0.88)
    assert math.isclose(arguments.positive_number.check(3), 3)


def test_argtype_turns_a_checks_message_into_argparses_error_line(capsys):
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--dataset", type=arguments.argtype(canonical_name))
    assert parser.parse_args(["--dataset", "fashion-mnist"]).dataset == "FashionMNIST"
    with pytest.raises(SystemExit):
        parser.parse_args(["--dataset", "cifar"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "demo: error: argument --dataset: Unknown dataset 'cifar'. Choose one of: MNIST, FashionMNIST."
    )


def test_a_data_folder_may_be_new_but_not_a_file(tmp_path):
    assert arguments.data_folder(str(tmp_path / "new")) == str(tmp_path / "new")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(argparse.ArgumentTypeError, match=r"notes.txt is a file, not a folder; give the folder"):
        arguments.data_folder(str(tmp_path / "notes.txt"))


def test_every_command_line_says_the_same_for_the_same_mistake(capsys):
    lines = [
        _error_line(capsys, single_train.main, ["--epochs", "0"]),
        _error_line(capsys, ddp_train.parse_args, ["--batch-size", "0"]),
        _error_line(capsys, speedrun.main, ["--runs", "0"]),
        _error_line(capsys, bench.main, ["--repeats", "0"]),
    ]
    assert [line.split(": error: ")[1] for line in lines] == [
        f"argument --epochs: '0' {WHOLE}",
        f"argument --batch-size: '0' {WHOLE}",
        f"argument --runs: '0' {WHOLE}",
        f"argument --repeats: '0' {WHOLE}",
    ]
    with pytest.raises(lesson.ParameterError, match="EPOCHS = 0 is not allowed: EPOCHS must be a whole number of at"):
        lesson.check_parameter("epochs", 0)
    seconds = "'0' is not allowed: give a number of seconds greater than 0"
    assert _error_line(capsys, course.main, ["run", "--timeout", "0"]).endswith(f"argument --timeout: {seconds}")
    assert _error_line(capsys, gpu_check.main, ["--budget", "0"]).endswith(f"argument --budget: {seconds}")
    unknown = "argument --dataset: Unknown dataset 'cifar'. Choose one of: MNIST, FashionMNIST."
    for main in (speedrun.main, bench.main, gpu_check.main):
        assert _error_line(capsys, main, ["--dataset", "cifar"]).endswith(unknown)


def test_single_train_refuses_zero_epochs_before_training(capsys, tmp_path):
    line = _error_line(capsys, single_train.main, ["--epochs", "0", "--out", str(tmp_path / "out")])
    assert line == f"python -m helpers.single_train: error: argument --epochs: '0' {WHOLE}"
    assert not (tmp_path / "out").exists(), "nothing may start"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "-32"], f"argument --batch-size: '-32' {WHOLE}"),
        (["--lr", "0"], "argument --lr: '0' is not allowed: give a number greater than 0"),
        (["--limit", "-1"], "argument --limit: '-1' is not allowed: give a whole number of at least 0"),
        (["--synthetic-size", "0"], f"argument --synthetic-size: '0' {WHOLE}"),
        (["--model", "vit"], "argument --model: invalid choice: 'vit' (choose from 'linear', 'mlp', 'cnn')"),
        (
            ["--dataset", "cifar"],
            "argument --dataset: Unknown dataset 'cifar'. Choose one of: synthetic, MNIST, FashionMNIST.",
        ),
    ],
)
def test_single_train_checks_every_option(capsys, argv, message):
    assert _error_line(capsys, single_train.main, argv) == f"python -m helpers.single_train: error: {message}"


def test_single_train_reads_good_options_as_the_training_uses_them(tmp_path):
    args = single_train.parser("p", "d").parse_args(
        ["--dataset", "fashion-mnist", "--model", "CNN", "--lr", "0.05", "--data-dir", str(tmp_path / "data")]
    )
    assert (args.dataset, args.model, args.lr, args.epochs, args.limit) == ("FashionMNIST", "cnn", 0.05, 2, 0)
    assert single_train.parser("p", "d").parse_args(["--dataset", "Synthetic"]).dataset == "synthetic"
