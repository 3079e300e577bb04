"""VideoRecorder."""

from __future__ import annotations

import os

import pytest
import torch
from tdict import TensorDict

from rl_envs import Compose, StepCounter, TransformedEnv
from rl_envs.transforms import VideoRecorder


def read_frames(path):
    iio = pytest.importorskip("imageio.v2")
    if path.endswith(".mp4"):
        pytest.importorskip("imageio_ffmpeg")
        reader = iio.get_reader(path, format="FFMPEG")
        frames = [f for f in reader]
        reader.close()
        return frames
    return list(iio.mimread(path))


@pytest.mark.parametrize("fmt", ["mp4", "gif"])
def test_video_single_env(counting_env, tmp_path, fmt):
    pytest.importorskip("imageio")
    pytest.importorskip("imageio_ffmpeg" if fmt == "mp4" else "PIL")
    path = str(tmp_path / f"run.{fmt}")
    rec = VideoRecorder(path=path, fps=10)
    env = TransformedEnv(counting_env(pixels=True, max_count=20, size=8), Compose(StepCounter(5), rec))
    r = env.rollout(5, policy=lambda td: td.set("action", torch.tensor(1)))
    assert len(rec.obs) == 6  # reset + 5 steps
    # pixels pass through unchanged
    assert (r["next", "pixels"][:, 0, 0, 0] == torch.arange(1, 6, dtype=torch.uint8)).all()
    assert rec.dump() == path and rec.obs == []
    assert os.path.exists(path) and not [p for p in os.listdir(tmp_path) if p.startswith(".video-")]
    frames = read_frames(path)
    assert len(frames) == 6
    assert frames[0].shape[:2] == (8, 8)
    if fmt == "gif":  # lossless: each frame's grey level is the count
        assert [int(f[0, 0, 0]) for f in frames] == [0, 1, 2, 3, 4, 5]


def test_video_batched_env_grid_and_skip(counting_env, tmp_path):
    pytest.importorskip("imageio")
    pytest.importorskip("PIL")
    path = str(tmp_path / "grid.gif")
    rec = VideoRecorder(path=path, skip=2)
    env = TransformedEnv(counting_env(batch_size=[3], pixels=True, max_count=50, size=4), rec)
    env.rollout(5, policy=lambda td: td.set("action", torch.tensor([1, 1, 1])))
    assert len(rec.obs) == 3  # calls 2, 4, 6 of 6 (reset + 5 steps)
    assert rec.obs[0].shape == (8, 8, 3)  # 3 frames of 4x4 tiled 2x2
    grid = rec.obs[0]
    assert int(grid[0, 0, 0]) == 1 and int(grid[0, 4, 0]) == 1 and int(grid[4, 4, 0]) == 0  # empty tile black
    rec.dump()
    frames = read_frames(path)
    assert len(frames) == 3 and frames[0].shape[:2] == (8, 8)


def test_video_no_grid_plain_td_crop_and_chw(tmp_path):
    rec = VideoRecorder(make_grid=False, center_crop=2, path=str(tmp_path / "x.gif"), max_frames=5)
    td = TensorDict(pixels=torch.rand(3, 3, 6, 6), batch_size=[3])  # float CHW frames
    assert rec(td) is td
    assert len(rec.obs) == 3 and rec.obs[0].shape == (2, 2, 3) and rec.obs[0].dtype == torch.uint8
    rec(td)
    assert len(rec.obs) == 5  # max_frames
    expected = (td["pixels"][0, :, 2:4, 2:4].permute(1, 2, 0) * 255).round().to(torch.uint8)
    assert torch.equal(rec.obs[0], expected)


def test_video_errors_and_logger(tmp_path):
    with pytest.raises(ValueError, match="format"):
        VideoRecorder(path="a.avi", format="avi")
    rec = VideoRecorder()
    rec(TensorDict(pixels=torch.zeros(4, 4, 3, dtype=torch.uint8)))
    with pytest.raises(ValueError, match="path"):
        rec.dump()
    assert VideoRecorder(path="unused.mp4").dump() is None  # nothing recorded

    class Logger:
        def __init__(self):
            self.calls = []

        def log_video(self, tag, video, **kw):
            self.calls.append((tag, video.shape))

    logger = Logger()
    rec = VideoRecorder(logger=logger, tag="eval")
    for _ in range(3):
        rec(TensorDict(pixels=torch.zeros(4, 4, 3, dtype=torch.uint8)))
    rec.dump()
    assert logger.calls == [("eval", torch.Size([1, 3, 3, 4, 4]))]
    with pytest.raises(KeyError, match="pixels"):
        VideoRecorder()(TensorDict(obs=torch.zeros(1)))
