"""helpers.lesson: settings resolved against the environment, records for the runner."""

from __future__ import annotations

import pytest
import torch

from helpers import lesson, settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("COURSE_DEVICE", "COURSE_QUICK", "COURSE_DATASET"):
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_the_notebooks(capsys):
    settings = lesson.start("cpu", quick=False, dataset="MNIST", seed=3)
    assert settings == lesson.Settings(device=torch.device("cpu"), quick=False, dataset="MNIST", seed=3)
    assert capsys.readouterr().out.strip() == "Lesson settings: device cpu, full run, dataset MNIST, seed 3"


def test_environment_steers_and_says_so(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_QUICK", "1")
    monkeypatch.setenv("COURSE_DATASET", "fashion-mnist")
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    settings = lesson.start("auto", dataset="MNIST")
    assert settings.quick and settings.dataset == "FashionMNIST" and settings.device == torch.device("cpu")
    out = capsys.readouterr().out
    assert "(from COURSE_DEVICE)" in out and "quick mode (from COURSE_QUICK)" in out
    assert "dataset FashionMNIST (from COURSE_DATASET, instead of the notebook's DATASET = 'MNIST')" in out


def test_an_empty_device_variable_is_not_named_as_the_choice(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_DEVICE", "")
    lesson.start("auto")
    assert "COURSE_DEVICE" not in capsys.readouterr().out


def test_seed_makes_runs_repeat():
    lesson.start("cpu", seed=7)
    a = torch.randn(3)
    lesson.start("cpu", seed=7)
    assert torch.equal(a, torch.randn(3))


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("yes", True), ("0", False), ("", False)])
def test_env_flag(monkeypatch, value, expected):
    monkeypatch.setenv("COURSE_QUICK", value)
    assert settings.quick() is expected


def test_headline_prints_outside_notebooks(capsys):
    lesson.headline("test accuracy", "88.0%")
    assert capsys.readouterr().out.strip() == "Headline: test accuracy: 88.0%"


@pytest.mark.parametrize(("value", "expected"), [(None, None), (0.88, 0.88), (88, 0.88), ("88%", 0.88), (93.5, 0.935)])
def test_target_is_none_a_fraction_or_a_percentage(value, expected):
    assert lesson.check_parameter("target", value) == (pytest.approx(expected) if expected else None)


@pytest.mark.parametrize("value", [0, 1, 100, 150, -0.5, "abc", float("nan"), True, "0.5%"])
def test_a_bad_target_is_one_line_naming_the_allowed_values(value):
    with pytest.raises(lesson.ParameterError, match=r"TARGET = .* fraction in \(0, 1\).*percentage in \(1, 100\)"):
        lesson.check_parameter("target", value)


@pytest.mark.parametrize("value", [0, -2, 2.5, "3", True, None])
def test_runs_is_a_whole_number_of_at_least_one(value):
    with pytest.raises(lesson.ParameterError, match=r"RUNS = .* whole number of at least 1"):
        lesson.check_parameter("runs", value)
    assert lesson.check_parameter("runs", 3) == 3


def test_start_checks_the_speedrun_parameters(capsys):
    settings = lesson.start("cpu", True, "MNIST", target="70%", runs=2)
    assert settings.params["target"] == pytest.approx(0.7) and settings.params["runs"] == 2
    with pytest.raises(lesson.ParameterError, match="TARGET = 150"):
        lesson.start("cpu", True, "MNIST", target=150)
