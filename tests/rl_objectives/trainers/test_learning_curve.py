"""read_csv_scalar against what CSVLogger wrote; write_learning_curve: the picture's points, size and
format, atomic writes, errors before anything is written, and the error without matplotlib."""

import os
import sys

import pytest
from rl_objectives.trainers import CSVLogger, read_csv_scalar, write_learning_curve
from rl_objectives.trainers import learning_curve as learning_curve_module


def test_read_csv_scalar_round_trip_and_partial_line(tmp_path):
    logger = CSVLogger("run", log_dir=tmp_path)
    for step, value in [(0, -1234.5), (2000, -700.25), (4000, -150.0)]:
        logger.log_scalar("total_r_evaluation", value, step=step)
    logger.close()
    path = logger.scalar_path("total_r_evaluation")
    assert read_csv_scalar(path) == [(0, -1234.5), (2000, -700.25), (4000, -150.0)]
    with open(path, "a") as f:
        f.write("6000,-12")  # a write cut by a crash: no newline
    assert read_csv_scalar(path)[-1] == (4000, -150.0)
    with open(path, "w") as f:
        f.write("0,1.0\nnot a line\n")
    with pytest.raises(ValueError, match="line 2 is not 'step,value'"):
        read_csv_scalar(path)
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        read_csv_scalar(tmp_path / "missing.csv")


class RecordingAxes:
    """Stands in for matplotlib's Axes: records the plotted points."""

    def __init__(self, calls):
        self.calls = calls

    def plot(self, x, y, **kwargs):
        self.calls.append(("plot", list(x), list(y), kwargs.get("label")))

    def axhline(self, y, **kwargs):
        self.calls.append(("axhline", y, kwargs.get("label")))

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def test_the_curves_points_come_from_the_csv_and_the_pairs(tmp_path, monkeypatch):
    mpl_figure = pytest.importorskip("matplotlib.figure")
    logger = CSVLogger("run", log_dir=tmp_path)
    logger.log_scalar("total_r_evaluation", -1200.0, step=0)
    logger.log_scalar("total_r_evaluation", -180.0, step=8000)
    logger.close()
    calls = []
    real_subplots = mpl_figure.Figure.subplots
    monkeypatch.setattr(
        mpl_figure.Figure, "subplots", lambda self, *a, **k: (real_subplots(self, *a, **k), RecordingAxes(calls))[1]
    )
    write_learning_curve(
        tmp_path / "c.png",
        {"evaluation": logger.scalar_path("total_r_evaluation"), "train": [(0, -5.0), (8000, -1.0)]},
        hline=(-200.0, "solved"),
    )
    assert calls == [
        ("plot", [0.0, 8000.0], [-1200.0, -180.0], "evaluation"),
        ("plot", [0.0, 8000.0], [-5.0, -1.0], "train"),
        ("axhline", -200.0, "solved"),
    ]


def test_the_png_has_the_requested_size_and_nothing_else_is_left(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    out = write_learning_curve(
        tmp_path / "curve.png",
        {"evaluation": [(0, -1200.0), (4000, -600.0), (8000, -180.0)]},
        figsize=(4.0, 3.0),
        dpi=50,
        title="SAC",
    )
    assert out == tmp_path / "curve.png"
    pixels = image.imread(out)
    assert pixels.shape[:2] == (150, 200)  # 3 x 4 inches at 50 dpi
    assert sorted(os.listdir(tmp_path)) == ["curve.png"]  # no temporary file left
    svg = write_learning_curve(tmp_path / "curve.svg", {"evaluation": [(0, 1.0)]})
    assert svg.read_text().lstrip().startswith("<?xml")


def test_errors_name_the_curve_and_write_nothing(tmp_path):
    with pytest.raises(ValueError, match="'evaluation' has no points"):
        write_learning_curve(tmp_path / "c.png", {"evaluation": []})
    with pytest.raises(ValueError, match=r"'train' must hold \(step, value\) pairs"):
        write_learning_curve(tmp_path / "c.png", {"train": [(0, 1.0), (1,)]})
    with pytest.raises(TypeError, match="'x' must be a CSVLogger scalar file"):
        write_learning_curve(tmp_path / "c.png", {"x": 3.0})
    with pytest.raises(ValueError, match="non-empty mapping"):
        write_learning_curve(tmp_path / "c.png", {})
    with pytest.raises(ValueError, match="needs a suffix"):
        write_learning_curve(tmp_path / "curve", {"x": [(0, 1.0)]})
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        write_learning_curve(tmp_path / "c.png", {"x": tmp_path / "nope.csv"})
    assert os.listdir(tmp_path) == []


def test_without_matplotlib_the_error_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as when matplotlib is not installed
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match="'matplotlib'"):
        learning_curve_module.write_learning_curve(tmp_path / "c.png", {"x": [(0, 1.0)]})
    assert os.listdir(tmp_path) == []
