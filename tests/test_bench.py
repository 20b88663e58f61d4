"""lessons.lesson_05: one change per row, a table and sentences drawn from the same numbers, and a run end to end."""

from __future__ import annotations

import random
import re

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers import data
from helpers.readings import Timing
from lessons import lesson_05
from tools import bench as cli


@pytest.mark.slow
def test_quick_run_prints_the_table(capsys):
    if not data.is_present("FashionMNIST") and not data.prepare_offline("FashionMNIST"):
        pytest.skip("Fashion-MNIST is not available offline on this machine")
    argv = ["--quick", "--dataset", "FashionMNIST", "--device", "cpu", "--subset", "640", "--batches", "2"]
    assert cli.main([*argv, "--repeats", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "FashionMNIST (640 training images) on cpu" in out
    present = lesson_05.default_pipelines("cpu")
    for pipeline in present:
        assert lesson_05.pipeline_title(pipeline, present, workers=1) in out
    assert "2. row 1 + 1 worker processes" in out and "4. row 3 + batched by index" in out
    assert "No pinned-memory row" in out
    assert out.count("goal >=") == 3
    assert len(re.findall(r"^- Row \d, .* against row \d \(images/s ratio\): ", out, re.M)) == 3


def test_bad_arguments_exit_with_usage():
    with pytest.raises(SystemExit):
        cli.main(["--repeats", "0"])
    assert cli.main(["--device", "tpu", "--subset", "10"]) == 2


# --- one change per row ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "rows"),
    [
        ("cuda", ("lab", "workers", "pinned", "wrapper", "indexed", "resident")),
        ("mps", ("lab", "workers", "wrapper", "indexed", "resident")),
        ("cpu", ("lab", "workers", "wrapper", "resident")),
    ],
)
def test_rows_per_device_and_what_each_changes_from(device, rows):
    assert lesson_05.default_pipelines(device) == rows
    parents = {p: lesson_05.parent_of(p, rows) for p in rows}
    assert parents["lab"] is None and parents["workers"] == "lab" and parents["wrapper"] == "lab"
    assert parents["resident"] == ("indexed" if "indexed" in rows else "wrapper")
    if "pinned" in rows:
        assert parents["pinned"] == "workers"
    assert len(lesson_05.absent_rows(device)) == len(lesson_05.PIPELINES) - len(rows)


def _loader_settings(loader: DataLoader) -> dict:
    return {
        "workers": loader.num_workers,
        "pinned": loader.pin_memory,
        "batch": loader.batch_size,
        "dataset": loader.dataset,
    }


def test_workers_and_pinned_rows_change_one_setting_each():
    dataset = TensorDataset(torch.zeros(8, 1, 28, 28), torch.zeros(8, dtype=torch.long))
    cuda = torch.device("cuda")  # nothing is moved: building the loaders needs no GPU
    lab, workers, pinned = (lesson_05.make_pipeline(p, dataset, cuda, 4, 2) for p in ("lab", "workers", "pinned"))
    a, b, c = _loader_settings(lab), _loader_settings(workers), _loader_settings(pinned)
    assert {k for k in a if a[k] != b[k]} == {"workers"}
    assert {k for k in b if b[k] != c[k]} == {"pinned"}
    assert not b["pinned"]  # the workers row alone: no pinned memory, even on a GPU


# --- the table and its sentences come from the same numbers ---------------------------------------------------


def _results(rates: dict[tuple[str, str], float], spread: float = 0.04) -> list[lesson_05.Measurement]:
    out = []
    for (p, t), rate in rates.items():
        s = 1000 / rate
        out.append(
            lesson_05.Measurement(p, t, 1000, Timing(s, [s * (1 - spread / 2), s, s * (1 + spread / 2)]), batches=8)
        )
    return out


def _random_results(rng: random.Random, rows: tuple[str, ...]) -> list[lesson_05.Measurement]:
    rates = {(p, t): 10 ** rng.uniform(2, 6) for p in rows for t in lesson_05.TASKS}
    return _results(rates, spread=rng.choice([0.02, 0.3, 1.0]))


CELL = re.compile(r"([\d,]+) \((\d+)%\)\s+(-|[\d.]+x)")


def _table_ratios(table: str) -> dict[int, list[str]]:
    """Row number -> the ratio printed in each task's cell."""
    rows = {}
    for line in table.splitlines()[2:]:
        number = int(line.split(".")[0])
        rows[number] = [ratio for _, _, ratio in CELL.findall(line)]
    return rows


SENTENCE = re.compile(r"^Row (\d), .*, against row (\d) \(images/s ratio\): (.*)\.$")
PART = re.compile(r"(data only|linear model|CNN) ([\d.]+x), (faster|slower|no clear difference)")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_sentence_quotes_the_ratio_in_its_table_row(device):
    rng = random.Random(5)
    for _ in range(30):
        results = _random_results(rng, lesson_05.default_pipelines(device))
        table = _table_ratios(lesson_05.format_table(results, 55_000))
        sentences = [s for s in lesson_05.findings(results) if s.startswith("Row ")]
        assert len(sentences) == len(table) - 1
        for sentence in sentences:
            row, parent, body = SENTENCE.match(sentence).groups()
            parts = PART.findall(body)
            assert [ratio for _, ratio, _ in parts] == table[int(row)]
            for _, ratio, verdict in parts:  # and the verdict points the way the ratio does
                value = float(ratio[:-1])
                assert not (verdict == "faster" and value <= 1) and not (verdict == "slower" and value >= 1)
        assert table[1] == ["-", "-", "-"]


def test_findings_follow_the_numbers():
    rates = {
        ("lab", "data"): 1000, ("lab", "linear"): 900, ("lab", "cnn"): 300,
        ("workers", "data"): 1010, ("workers", "linear"): 300, ("workers", "cnn"): 100,
        ("wrapper", "data"): 9000, ("wrapper", "linear"): 3000, ("wrapper", "cnn"): 800,
        ("resident", "data"): 300_000, ("resident", "linear"): 11_000, ("resident", "cnn"): 1000,
    }  # fmt: skip
    lines = lesson_05.findings(_results(rates), workers=2)
    assert lines[0] == (
        "Row 2, 2 worker processes, against row 1 (images/s ratio): data only 1.01x, no clear difference (inside the "
        "4% spread of the repeats); linear model 0.33x, slower; CNN 0.33x, slower."
    )
    assert lines[2].startswith("Row 4, batched by index (DeviceResidentLoader), against row 3 (images/s ratio): ")
    assert "data only 33.33x, faster" in lines[2] and "CNN 1.25x, faster" in lines[2]
    assert lines[4] == (
        "In row 4 with the CNN, a batch took 416.7 us to feed alone and 125.0 ms to feed and train on, so feeding is "
        "0% of the step: the model's own step, not the data, sets the pace."
    )
    slow_feed = {**rates, ("resident", "data"): 1500, ("resident", "linear"): 1000}
    assert "feeding the data is still most of the step" in lesson_05.findings(_results(slow_feed))[3]
    goals = lesson_05.goal_lines(_results(rates))
    assert goals[0].startswith("  data only     row 4  300.0x the lab's images/s ")
    assert goals[0].endswith("(300,000 against 1,000 img/s; goal >= 100x: met)")
    assert goals[2].endswith("(1,000 against 300 img/s; goal >= 2x: met)")


def test_feeding_is_a_share_of_the_step_only_where_it_is_clearly_the_shorter():
    """Feeding alone and the whole step come from two passes: where feeding alone measured no shorter, no share (it
    was once clamped to a "1.3 ms of a 587.6 us step (100%)")."""
    rates = {("lab", "data"): 1000, ("lab", "linear"): 900, ("lab", "cnn"): 300}
    slower_feed = {**rates, ("resident", "data"): 1000 / 1.3, ("resident", "linear"): 1000 / 0.5876}
    line = lesson_05.findings(_results(slower_feed))[-1]
    assert line == (
        "In row 2 with the linear model, a batch took 162.5 ms to feed alone and 73.5 ms to feed and train on: "
        "feeding alone measured slower than feeding and training, which only a change in the machine's load between "
        "the two passes explains, so this run cannot split the step; run the benchmark again on a quieter machine."
    )
    assert "%" not in line.split(":")[0]
    alike = {**rates, ("resident", "data"): 1000, ("resident", "linear"): 990}
    line = lesson_05.findings(_results(alike, spread=0.3))[-1]
    assert "no clear difference (inside the 30% spread of the repeats)" in line
    assert line.endswith("so it gives no share of the step.") and "100%" not in line
    noisy = {**rates, ("resident", "data"): 1000, ("resident", "linear"): 500}  # 2x apart, inside a 190% spread
    line = lesson_05.findings(_results(noisy, spread=1.9))[-1]
    assert "no clear difference" in line and "whole step" not in line and "so it gives no share" in line
    for feed_rate in (1500, 2500, 10_000):  # each share is feed / step, below 100%, with the verdict of its size
        line = lesson_05.findings(_results({**rates, ("resident", "data"): feed_rate, ("resident", "linear"): 1000}))[
            -1
        ]
        share = round(100 * 1000 / feed_rate)
        assert f"so feeding is {share}% of the step" in line


def test_speedups_divide_by_the_lab():
    results = [
        lesson_05.Measurement("lab", "data", images=100, timing=Timing(1.0, [1.0])),
        lesson_05.Measurement("resident", "data", images=100, timing=Timing(0.01, [0.01])),
    ]
    assert lesson_05.speedups(results)[("resident", "data")] == pytest.approx(100.0)
    assert "goal >= 100x: met" in lesson_05.goal_lines(results)[0]


# --- the batch-size experiment ---------------------------------------------------------------------------------


def _grid(step_ms: dict[int, float], images: int = 1024, busy: dict[int, float] | None = None):
    out = {}
    for b, ms in step_ms.items():
        batches = images // b
        s = ms * 1e-3 * batches
        out[b] = lesson_05.Measurement(
            "", "cnn", images, Timing(s, [s * 0.99, s, s * 1.01]), batches, (busy or {}).get(b)
        )
    return out


def test_grid_table_and_findings_agree():
    grid = {"cpu": _grid({32: 90.0, 256: 350.0}), "cuda": _grid({32: 2.5, 256: 2.5}, busy={32: 0.25e-3})}
    table = lesson_05.format_grid(grid, epoch_images=55_000)
    assert re.search(r"cpu\s+32\s+90\.00\s+2%\s+356\s+-\s+154\.7 s", table)
    assert re.search(r"cuda\s+32\s+2\.50\s+2%\s+12,800\s+10%\s+4\.3 s", table)
    lines = lesson_05.grid_findings(grid)
    assert lines[0] == "cpu: images per second rose from batch 32 to batch 256 (2.06x)."
    assert lines[1].startswith("cpu: step time grew, but less than the batch did: 90.0 ms a step at batch 32")
    assert lines[3].startswith("cuda: step time stayed nearly flat")
    assert lines[4].startswith("cuda: at batch 32, 2.5 ms of steps against 250.0 us of device time (the device")
    assert lines[5] == "cuda against the CPU, images per second: 36.00x at batch 32, 140.0x at batch 256."


def test_grid_findings_say_when_the_rate_falls():
    lines = lesson_05.grid_findings({"cpu": _grid({32: 30.0, 128: 60.0, 512: 400.0})})
    assert lines[0] == "cpu: images per second rose from batch 32 to batch 128 (2.00x), then fell to batch 512 (0.60x)."
    assert "compute-bound" not in lines[1] and "in proportion" in lines[1]
    assert "a larger batch (up to batch 128) raises images per second" in lines[1]
    assert "Images per second fell from batch 128 to batch 512" in lines[1]


# The lesson's plots, drawn from the figures the lesson computes.


def test_training_curves_draw_each_recorded_split_per_epoch():
    import matplotlib.pyplot as plt

    history = {"train_loss": [0.9, 0.5, 0.4], "train_accuracy": [0.6, 0.8, 0.85], "val_loss": [0.7, 0.6]}
    loss_ax, acc_ax = lesson_05.training_curves(history)
    try:
        loss_lines = {line.get_label(): list(line.get_ydata()) for line in loss_ax.get_lines()}
        assert loss_lines == {"training": [0.9, 0.5, 0.4], "validation": [0.7, 0.6]}
        assert [line.get_label() for line in acc_ax.get_lines()] == ["training"]  # no validation accuracy recorded
        assert list(loss_ax.get_xticks()) == [1, 2, 3]
    finally:
        plt.close("all")


def test_prediction_grid_titles_mistakes_in_red_with_the_true_class():
    import matplotlib.pyplot as plt

    images = torch.zeros(3, 1, 28, 28)  # (B, 1, H, W)
    fig = lesson_05.prediction_grid(images, torch.tensor([0, 1, 2]), torch.tensor([0, 2, 2]), ["a", "b", "c"], ncols=2)
    try:
        shown = [ax for ax in fig.axes if ax.images]
        titles = [(ax.get_title(), ax.title.get_color()) for ax in shown]
        assert titles == [("a", "black"), ("c\n(is b)", "red"), ("c", "black")]
        assert len(fig.axes) == 4  # two rows of two, the fourth left empty
    finally:
        plt.close("all")


def test_step_time_curves_draw_flat_and_proportional_guides_from_the_smallest_batch():
    import matplotlib.pyplot as plt

    ax = lesson_05.step_time_curves({"cpu": {256: 0.004, 32: 0.002}})
    try:
        measured, flat, proportional = (list(line.get_ydata()) for line in ax.get_lines()[:3])
        assert measured == pytest.approx([2.0, 4.0])  # milliseconds, batch 32 then 256
        assert flat == pytest.approx([2.0, 2.0])
        assert proportional == pytest.approx([2.0, 16.0])  # 8 times the batch, 8 times the time
    finally:
        plt.close("all")


def test_pipeline_bars_and_batch_size_curves_keep_the_rows_and_sizes_in_order():
    import matplotlib.pyplot as plt

    rates = {"1. lab": {"data only": 100.0, "CNN": 10.0}, "2. row 1 + more": {"data only": 1000.0, "CNN": 20.0}}
    ax = lesson_05.pipeline_bars(rates)
    curves = lesson_05.batch_size_curves({"cpu": {512: 30.0, 32: 10.0, 128: 20.0}})
    try:
        assert [t.get_text() for t in ax.get_yticklabels()] == list(rates)
        widths = {c.get_label(): [bar.get_width() for bar in c] for c in ax.containers}
        assert widths == {"data only": [100.0, 1000.0], "CNN": [10.0, 20.0]}
        line = curves.get_lines()[0]
        assert list(line.get_xdata()) == [32, 128, 512] and list(line.get_ydata()) == [10.0, 20.0, 30.0]
    finally:
        plt.close("all")
