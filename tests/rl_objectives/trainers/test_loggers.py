"""Loggers: CSVLogger file contents (explicit and implicit steps, crash repair, sub-folders, hparams,
videos), TensorboardLogger through a stand-in SummaryWriter and without tensorboard, get_logger, errors,
and a Trainer writing its scalars through a CSVLogger. The backends' real files and runs are read back
in test_loggers_backends.py."""

import json
import sys
import types

import pytest
import torch
from rl_objectives.trainers import (
    CSVLogger,
    Logger,
    TensorboardLogger,
    Trainer,
    generate_exp_name,
    get_logger,
)
from tdict import TensorDict
from torch import nn


def read_rows(path):
    return [tuple(line.split(",")) for line in path.read_text().splitlines()]


def test_csv_logger_contents(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    logger.log_scalar("loss", 0.5, step=10)
    logger.log_scalar("loss", torch.tensor(0.25), step=20)
    logger.log_scalar("reward", 3)  # step None: 0, 1, ...
    logger.log_scalar("reward", torch.tensor([4.0]))
    logger.log_scalar("train/q", 1e-8, step=1)
    root = tmp_path / "exp" / "scalars"
    assert read_rows(root / "loss.csv") == [("10", "0.5"), ("20", "0.25")]
    assert read_rows(root / "reward.csv") == [("0", "3.0"), ("1", "4.0")]
    assert float(read_rows(root / "train" / "q.csv")[0][1]) == 1e-8  # repr keeps full precision
    logger.close()
    logger.log_scalar("loss", 0.125, step=30)  # reopened after close
    assert read_rows(root / "loss.csv")[-1] == ("30", "0.125")


def test_csv_logger_lines_are_flushed_and_a_torn_line_is_dropped(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    logger.log_scalar("r", 1.0)
    logger.log_scalar("r", 2.0)
    path = logger.scalar_path("r")
    assert path.read_text() == "0,1.0\n1,2.0\n"  # on disk without close(): flushed per line
    with open(path, "a") as f:  # a process killed in the middle of a line
        f.write("2,3.")
    del logger
    resumed = CSVLogger("exp", log_dir=tmp_path)
    resumed.log_scalar("r", 4.0)
    assert path.read_text() == "0,1.0\n1,2.0\n2,4.0\n"  # numbering continues after the whole lines


def test_csv_logger_hparams_and_video(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="pt")
    logger.log_hparams({"lr": 0.001, "env": "Pendulum", "device": torch.device("cpu")})
    assert json.loads((tmp_path / "exp" / "hparams.json").read_text()) == {
        "lr": 0.001,
        "env": "Pendulum",
        "device": "cpu",
    }
    video = torch.randint(0, 255, (5, 3, 4, 4), dtype=torch.uint8)
    logger.log_video("rollout", video, step=7)
    assert torch.equal(torch.load(tmp_path / "exp" / "videos" / "rollout_7.pt", weights_only=True), video)
    with pytest.raises(ValueError, match="'rollout'.*\\(4, 4\\)"):
        logger.log_video("rollout", torch.zeros(4, 4))
    with pytest.raises(ValueError, match="video format must be one of \\['mp4', 'gif', 'pt'\\], got 'avi'"):
        CSVLogger("exp", log_dir=tmp_path, video_format="avi")


@pytest.mark.parametrize(
    "name, value, exc, match",
    [
        ("../escape", 1.0, ValueError, "invalid metric name '../escape'"),
        ("a//b", 1.0, ValueError, "invalid metric name"),
        ("", 1.0, ValueError, "non-empty"),
        ("loss", torch.ones(2), ValueError, "'loss' must be a scalar.*\\(2,\\)"),
        ("loss", "high", TypeError, "'loss' must be a number"),
    ],
)
def test_csv_logger_errors(tmp_path, name, value, exc, match):
    logger = CSVLogger("exp", log_dir=tmp_path)
    with pytest.raises(exc, match=match):
        logger.log_scalar(name, value)
    assert not (tmp_path / "exp" / "scalars").exists()  # nothing written


def test_logger_names_are_checked(tmp_path):
    with pytest.raises(ValueError, match="exp_name"):
        CSVLogger("a/b", log_dir=tmp_path)
    with pytest.raises(TypeError, match="log_dir"):
        CSVLogger("exp", log_dir=3)
    with pytest.raises(TypeError, match="step"):
        CSVLogger("exp", log_dir=tmp_path).log_scalar("x", 1.0, step=1.5)


def test_optional_logger_methods_name_the_logger(tmp_path):
    class ScalarOnly(Logger):
        def _create_experiment(self):
            return None

        def log_scalar(self, name, value, step=None):
            pass

        def log_hparams(self, cfg):
            pass

    logger = ScalarOnly("exp", log_dir=tmp_path)
    with pytest.raises(NotImplementedError, match="ScalarOnly does not log histograms"):
        logger.log_histogram("w", torch.zeros(3))
    with pytest.raises(NotImplementedError, match="ScalarOnly does not log videos"):
        logger.log_video("v", torch.zeros(2, 3, 4, 4, dtype=torch.uint8))
    with logger:  # a context manager; close() is a no-op by default
        pass


def test_tensorboard_logger_without_tensorboard(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as when it is not installed
    with pytest.raises(ImportError, match="'tensorboard' package"):
        TensorboardLogger("exp", log_dir=tmp_path)
    with pytest.raises(ImportError, match="tensorboard"):
        get_logger("tensorboard", tmp_path, "exp")


def test_tensorboard_logger_calls_the_summary_writer(monkeypatch, tmp_path):
    calls = []

    class FileWriter:
        def add_summary(self, summary, step):
            calls.append(("add_summary", summary, step))

    class SummaryWriter:
        def __init__(self, log_dir):
            calls.append(("init", log_dir))

        def _get_file_writer(self):
            return FileWriter()

        def __getattr__(self, name):
            return lambda *args, **kwargs: calls.append((name, args, kwargs))

    pytest.importorskip("tensorboard")  # the summaries' protos
    from torch.utils.tensorboard import summary

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = SummaryWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard.summary", summary)
    logger = TensorboardLogger("exp", log_dir=tmp_path)
    logger.log_scalar("loss", torch.tensor(0.5), step=3)
    logger.log_hparams({"lr": 0.1, "gamma": 0.99})
    logger.log_video("v", torch.zeros(2, 3, 4, 4, dtype=torch.uint8), step=1)
    logger.log_histogram("w", [1.0, 2.0], step=2)
    logger.close()
    assert calls[0] == ("init", str(tmp_path / "exp"))
    assert calls[1] == ("add_scalar", ("loss", 0.5), {"global_step": 3})
    assert calls[2] == ("add_text", ("hparams", "lr: 0.1\ngamma: 0.99"), {})
    assert [c[0] for c in calls[3:6]] == ["add_summary"] * 3  # the HParams dashboard's summaries
    name, summary, step = calls[6]  # the video: a GIF image summary, as add_video writes
    assert name == "add_summary" and step == 1 and summary.value[0].tag == "v"
    assert summary.value[0].image.encoded_image_string.startswith(b"GIF89a")
    assert calls[7][0] == "add_histogram" and calls[7][1][0] == "w" and calls[7][1][1].tolist() == [1.0, 2.0]
    assert calls[7][2] == {"global_step": 2, "bins": "tensorflow", "max_bins": None}
    assert calls[8][0] == "close"


def test_get_logger(tmp_path):
    logger = get_logger("csv", tmp_path, "exp")
    assert isinstance(logger, CSVLogger) and logger.experiment == tmp_path / "exp"
    assert get_logger("", tmp_path, "exp") is None and get_logger(None, tmp_path, "exp") is None
    with pytest.raises(ValueError, match="unknown logger_type='comet'.*'csv', 'tensorboard', 'wandb', 'mlflow'"):
        get_logger("comet", tmp_path, "exp")
    a, b = generate_exp_name("SAC", "run"), generate_exp_name("SAC", "run")
    assert a.startswith("SAC_run_") and a != b


def test_logger_base_is_abstract():
    with pytest.raises(TypeError):
        Logger("exp", log_dir="x")


def test_trainer_logs_through_csv_logger(tmp_path):
    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(()))

        def forward(self, td):
            return TensorDict(loss=self.w * td["x"].mean())

    logger = CSVLogger("exp", log_dir=tmp_path)
    loss = Loss()
    batches = [TensorDict(x=torch.full((2, 5), float(i)), batch_size=[2, 5]) for i in range(5)]
    trainer = Trainer(
        collector=batches,
        total_frames=50,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.0),
        logger=logger,
        log_interval=20,
    )
    trainer.train()
    # logged at 10 frames (first), then once 20 frames passed: 30, 50
    assert read_rows(logger.scalar_path("loss")) == [("10", "0.0"), ("30", "2.0"), ("50", "4.0")]
    assert read_rows(logger.scalar_path("optim_steps")) == [("10", "2.0"), ("30", "6.0"), ("50", "10.0")]


def test_import_paths_and_log_metrics(tmp_path):
    import rl_objectives.trainers as trainers
    from rl_objectives.trainers import loggers

    for name in ("CSVLogger", "Logger", "TensorboardLogger", "generate_exp_name", "get_logger", "read_csv_scalar"):
        assert getattr(loggers, name) is getattr(trainers, name)
    from rl_objectives.trainers.loggers.csv import CSVLogger as csv_logger
    from rl_objectives.trainers.loggers.mlflow import MLFlowLogger
    from rl_objectives.trainers.loggers.tensorboard import TensorboardLogger as tb_logger
    from rl_objectives.trainers.loggers.wandb import WandbLogger

    assert csv_logger is CSVLogger and tb_logger is TensorboardLogger
    assert loggers.WandbLogger is WandbLogger and loggers.MLFlowLogger is MLFlowLogger
    logger = CSVLogger("exp", log_dir=tmp_path)
    with pytest.raises(TypeError, match="'b' must be a number"):
        logger.log_metrics({"a": 1.0, "b": "x"}, step=3)
    assert not (tmp_path / "exp" / "scalars").exists()  # checked before any is written
    with logger:
        logger.log_metrics({"a": 1.0, "b": torch.tensor(2.0)}, step=3)
    assert read_rows(logger.scalar_path("a")) == [("3", "1.0")] and read_rows(logger.scalar_path("b")) == [("3", "2.0")]
