"""ProgressBar: its postfix values (frames, frames/s over a window, latest eval return, time left)
under a fake clock, the bar's text, and the error without tqdm."""

import io
import sys

import pytest
import torch
from rl_objectives.trainers import ProgressBar, Trainer
from tdict import TensorDict
from torch import nn

pytest.importorskip("tqdm")


class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, td):
        return TensorDict(loss=(self.w - td["y"]).pow(2).mean())


def make_trainer(n_batches=4, total_frames=32):
    loss = Loss()
    batches = [TensorDict(y=torch.ones(2, 4), batch_size=[2, 4])] * n_batches  # 8 frames each
    return Trainer(
        collector=batches,
        total_frames=total_frames,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
    )


class FakeClock:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_postfix_values_under_a_fake_clock():
    trainer = make_trainer()
    evals = iter([-900.0, None, -250.5, None])

    def evaluation(batch):
        value = next(evals)
        return None if value is None else {"total_r_evaluation": value}

    trainer.register_op("post_steps_log", evaluation)  # before the bar: a fresh value shows at once
    out = io.StringIO()
    bar = ProgressBar(rate_window=2, clock=FakeClock([0.0, 1.0, 3.0, 7.0, 15.0]), file=out, mininterval=0)
    bar.register(trainer)  # reads the clock once (t=0, 0 frames)
    seen = []
    trainer.register_op("post_steps_log", lambda batch: seen.append(dict(bar.postfix)))
    trainer.train()
    assert [p["frames"] for p in seen] == [8, 16, 24, 32]
    # the rate over the last 2 calls: (8-0)/(1-0), (16-0)/(3-0), (24-8)/(7-1), (32-16)/(15-3)
    assert [p["frames/s"] for p in seen] == pytest.approx([8.0, 16 / 3, 16 / 6, 16 / 12])
    assert [p["eval return"] for p in seen] == [-900.0, -900.0, -250.5, -250.5]
    assert [p["eta_s"] for p in seen] == pytest.approx([24 / 8, 16 / (16 / 3), 8 / (16 / 6), 0.0])
    text = out.getvalue()
    assert "32/32 frames" in text and "eval=-250.5" in text and "frames/s=1" in text and "left=00:00" in text
    assert bar.bar is None  # closed at total_frames


def test_postfix_before_any_evaluation_and_total_from_the_trainer():
    trainer = make_trainer(n_batches=1, total_frames=80)
    bar = ProgressBar(clock=FakeClock([10.0, 12.0]), file=io.StringIO())
    bar.register(trainer)
    assert bar.total_frames == 80
    trainer.train()  # the collector runs out after 8 frames
    assert bar.postfix == {
        "frames": 8,
        "frames/s": pytest.approx(4.0),
        "eval return": None,
        "eta_s": pytest.approx(18.0),
    }
    assert bar.bar.postfix == "frames/s=4, eval=-, left=00:18"
    bar.close()
    assert bar.bar is None


def test_progress_bar_errors(monkeypatch):
    with pytest.raises(RuntimeError, match="register"):
        ProgressBar(file=io.StringIO())(None)
    with pytest.raises(ValueError, match="eval_key"):
        ProgressBar(eval_key="")
    with pytest.raises(ValueError, match="total_frames"):
        ProgressBar(total_frames=0)
    bar = ProgressBar(file=io.StringIO())
    bar.register(make_trainer())
    with pytest.raises(RuntimeError, match="already registered"):
        bar.register(make_trainer())
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as when tqdm is not installed
    with pytest.raises(ImportError, match="'tqdm'"):
        ProgressBar()
