"""The four loggers against their real backends, read back with the backends' own readers:

- CSVLogger: histogram rows (read_csv_histogram), mp4/gif/pt videos (frames decoded), step numbering
  across a resume, a torn histogram line, hparams merging, the ImportError without an encoder;
- TensorboardLogger: event files read by TensorBoard's EventAccumulator (scalars, histograms, the
  GIF video's frames, the hparams text and HParams-plugin summaries);
- WandbLogger: offline runs (no network: WANDB_MODE=offline and an unreachable base URL) read from
  the run's .wandb record log (history rows, config, media files), and no W&B process left after
  close();
- MLFlowLogger: a local file store (and get_logger's sqlite store) read through MlflowClient
  (metric histories, params, artifacts);
- every logger: the same bad inputs raise naming the argument before anything is written, a missing
  backend raises ImportError naming the rl-objectives extra at construction, and rl_envs'
  VideoRecorder on a PendulumEnv hands each logger a video that lands with the right frame count.
"""

from __future__ import annotations

import glob
import io
import json
import os
import struct
import sys

import pytest
import torch
from rl_objectives.trainers import CSVLogger, TensorboardLogger, get_logger
from rl_objectives.trainers.loggers import MLFlowLogger, WandbLogger, read_csv_histogram, read_csv_scalar

BACKENDS = ["csv", "tensorboard", "wandb", "mlflow"]


def flat_video(t=6, h=4, w=6, c=3, step=40):
    """uint8 [T, C, H, W]: frame i is uniformly grey i * step."""
    levels = (torch.arange(t) * step).to(torch.uint8)
    return levels.reshape(t, 1, 1, 1).expand(t, c, h, w).contiguous()


# ------------------------------------------------------------------------------------- readers
def mp4_frames(path):
    """The decoded RGB frames of an mp4 file: a list of [H, W, 3] uint8 tensors."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    w, h = meta["size"]
    frames = [torch.frombuffer(bytearray(b), dtype=torch.uint8).reshape(h, w, 3) for b in reader]
    return frames, meta


def gif_frames(data):
    """(frames [H, W, 3] uint8, durations in ms) of GIF bytes."""
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    frames, durations = [], []
    for i in range(image.n_frames):
        image.seek(i)
        frames.append(
            torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8).reshape(
                image.height, image.width, 3
            )
        )
        durations.append(image.info["duration"])
    return frames, durations


def frame_levels(frames):
    return [round(float(f.float().mean())) for f in frames]


def tb_accumulator(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def wandb_records(run_dir):
    """The records of an offline run's ``run-<id>.wandb`` file (W&B's leveldb-style record log:
    a 7-byte header, then 32 KiB blocks of [crc32, length, type] chunks, each record a protobuf)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST chunk
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(records):
    """The history rows as dicts of '.'-joined keys -> values (W&B's own _step/_runtime dropped)."""
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
            rows.append({k: v for k, v in row.items() if not k.startswith("_")})
    return rows


def wandb_config(records):
    config = {}
    for r in records:
        kind = r.WhichOneof("record_type")
        items = r.run.config.update if kind == "run" else r.config.update if kind == "config" else ()
        for item in items:
            if not item.key.startswith("_"):  # W&B's own "_wandb" entry
                config[item.key] = json.loads(item.value_json)
    return config


def _proc_stat(pid):
    """(state, parent pid) of a process, or None when it is gone."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
    return state, int(ppid)


def wandb_processes():
    """The live processes of W&B's service below this process (wandb-core and its helpers; Linux)."""
    if not os.path.isdir("/proc"):
        pytest.skip("needs /proc to list processes")
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        stat = _proc_stat(pid)
        if stat is not None and stat[0] != "Z":
            parents[int(pid)] = stat[1]
    found = []
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1) and ancestor != os.getpid():
            ancestor = parents.get(ancestor)
        if ancestor == os.getpid():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            if b"wandb" in cmd:
                found.append(pid)
    return found


def alive(pids):
    return [pid for pid in pids if (_proc_stat(pid) or ("Z",))[0] != "Z"]


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """Offline W&B with every file under tmp_path and no reachable server."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")  # leave pytest's capture of stdout/stderr alone
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for var, sub in [
        ("WANDB_DIR", "wandb-dir"),
        ("WANDB_CONFIG_DIR", "wandb-config"),
        ("WANDB_CACHE_DIR", "wandb-cache"),
        ("WANDB_DATA_DIR", "wandb-data"),
        ("WANDB_ARTIFACT_DIR", "wandb-artifacts"),
    ]:
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    yield tmp_path
    import wandb

    if wandb.run is not None:  # a failed test left its run open
        wandb.run.finish()
    wandb.teardown()


@pytest.fixture
def mlflow_env(tmp_path, monkeypatch):
    """A local MLflow file store (MLflow >= 3.10 refuses it unless told to allow it)."""
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return (tmp_path / "mlruns").as_uri()


def run_dir(logger):
    """The offline run folder of a WandbLogger."""
    return os.path.dirname(logger.experiment.dir)


def make_logger(kind, tmp_path, request, **kwargs):
    if kind == "csv":
        return CSVLogger("exp", log_dir=tmp_path / "csv", **kwargs)
    if kind == "tensorboard":
        pytest.importorskip("tensorboard")
        return TensorboardLogger("exp", log_dir=tmp_path / "tb", **kwargs)
    if kind == "wandb":
        request.getfixturevalue("wandb_env")
        return WandbLogger("exp", offline=True, save_dir=tmp_path / "wb", project="tests", **kwargs)
    uri = request.getfixturevalue("mlflow_env")
    return MLFlowLogger("exp", tracking_uri=uri, **kwargs)


# ------------------------------------------------------------------------------------------ CSV
def test_csv_histograms_read_back_and_resume(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    logger.log_histogram("actor/w", torch.tensor([[0.0, 1.0], [1.0, 3.0]]), bins=3)  # step None: 0
    logger.log_histogram("actor/w", [2.0, 2.0], step=10, bins=[0.0, 1.0, 2.5])
    path = logger.histogram_path("actor/w")
    assert path == tmp_path / "exp" / "histograms" / "actor" / "w.csv"
    rows = read_csv_histogram(path)
    assert rows[0] == {
        "step": 0,
        "count": 4,
        "min": 0.0,
        "max": 3.0,
        "mean": 1.25,
        "std": pytest.approx(1.0897247358),
        "bin_edges": [0.0, 1.0, 2.0, 3.0],
        "bin_counts": [1, 2, 1],
    }
    assert rows[1]["step"] == 10 and rows[1]["bin_edges"] == [0.0, 1.0, 2.5] and rows[1]["bin_counts"] == [0, 2]
    assert rows[1]["std"] == 0.0
    # a crash mid-row: the torn row is ignored by the reader and dropped by the next logger
    logger.close()
    with open(path, "a") as f:
        f.write("11,4,0.0,1")
    assert len(read_csv_histogram(path)) == 2
    resumed = CSVLogger("exp", log_dir=tmp_path)
    resumed.log_histogram("actor/w", torch.ones(5))  # step None: after the highest step in the file
    rows = read_csv_histogram(path)
    assert [r["step"] for r in rows] == [0, 10, 11] and rows[2]["count"] == 5
    assert rows[2]["bin_edges"] == pytest.approx([0.5 + i / 64 for i in range(65)])  # all equal: [v - 0.5, v + 0.5]
    assert path.read_text().count("step,count,min,max,mean,std,bin_edges,bin_counts") == 1


def test_csv_histogram_header_written_with_first_row_only(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    with pytest.raises(ValueError, match="'w' contains NaN"):
        logger.log_histogram("w", torch.tensor([1.0, float("nan")]))
    assert not (tmp_path / "exp" / "histograms").exists()
    logger.log_histogram("w", [1, 2, 3], bins=2)
    assert logger.histogram_path("w").read_text().splitlines()[0] == "step,count,min,max,mean,std,bin_edges,bin_counts"
    with pytest.raises(ValueError, match="not a histogram row"):
        with open(logger.histogram_path("w"), "a") as f:
            f.write("garbage\n")
        read_csv_histogram(logger.histogram_path("w"))


@pytest.mark.parametrize("fmt", ["mp4", "gif"])
def test_csv_videos_are_real_files(tmp_path, fmt):
    logger = CSVLogger("exp", log_dir=tmp_path, video_format=fmt, video_fps=10)
    video = flat_video(t=6, h=4, w=6)
    logger.log_video("rollout", video)  # step None: 0
    logger.log_video("eval/rollout", video.unsqueeze(0), step=7, fps=5)
    logger.log_video("rollout", video)  # 1
    videos = tmp_path / "exp" / "videos"
    assert sorted(p.relative_to(videos).as_posix() for p in videos.rglob("*")) == [
        "eval",
        f"eval/rollout_7.{fmt}",
        f"rollout_0.{fmt}",
        f"rollout_1.{fmt}",
    ]
    if fmt == "mp4":
        frames, meta = mp4_frames(videos / "rollout_0.mp4")
        assert meta["fps"] == 10 and meta["size"] == (6, 4)
        assert len(frames) == 6
        assert frame_levels(frames) == pytest.approx([0, 40, 80, 120, 160, 200], abs=4)  # lossy H.264
        assert len(mp4_frames(videos / "eval" / "rollout_7.mp4")[0]) == 6
    else:
        frames, durations = gif_frames((videos / "rollout_0.gif").read_bytes())
        assert frame_levels(frames) == [0, 40, 80, 120, 160, 200] and durations == [100] * 6
        assert gif_frames((videos / "eval" / "rollout_7.gif").read_bytes())[1] == [200] * 6
    assert not [p for p in videos.rglob(".*")]  # no temporary file left
    # a new logger continues the numbering after the files there, even after an explicit step
    again = CSVLogger("exp", log_dir=tmp_path, video_format=fmt)
    again.log_video("eval/rollout", video, step=3)
    again.log_video("eval/rollout", video)
    again.log_video("rollout", video)
    assert (videos / "eval" / f"rollout_8.{fmt}").is_file() and (videos / f"rollout_2.{fmt}").is_file()


def test_csv_video_batch_is_tiled_and_odd_sizes_padded(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="gif")
    batch = torch.stack(
        [flat_video(t=3, h=3, w=5, step=50), flat_video(t=3, h=3, w=5, step=100), flat_video(t=3, h=3, w=5, step=20)]
    )
    logger.log_video("grid", batch, step=0)
    frames, _ = gif_frames((tmp_path / "exp" / "videos" / "grid_0.gif").read_bytes())
    assert len(frames) == 3 and frames[0].shape == (6, 10, 3)  # 3 videos in a 2x2 grid
    last = frames[2][..., 0]
    assert (
        int(last[0, 0]) == 100 and int(last[0, 5]) == 200 and int(last[3, 0]) == 40 and int(last[3, 5]) == 0
    )  # black tile
    mp4 = CSVLogger("exp", log_dir=tmp_path)
    mp4.log_video("odd", flat_video(t=4, h=3, w=5, c=1), step=0)  # grey, odd sizes: padded to 4x6
    frames, meta = mp4_frames(tmp_path / "exp" / "videos" / "odd_0.mp4")
    assert meta["size"] == (6, 4) and len(frames) == 4


def test_csv_video_without_encoder_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    logger = CSVLogger("exp", log_dir=tmp_path)
    with pytest.raises(ImportError, match="'imageio-ffmpeg'.*rl-objectives\\[video\\]"):
        logger.log_video("v", flat_video())
    assert not (tmp_path / "exp" / "videos").exists()
    monkeypatch.setitem(sys.modules, "PIL", None)
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    with pytest.raises(ImportError, match="'pillow'"):
        CSVLogger("exp", log_dir=tmp_path, video_format="gif").log_video("v", flat_video())
    CSVLogger("exp", log_dir=tmp_path, video_format="pt").log_video("v", flat_video())  # needs nothing
    assert torch.equal(torch.load(tmp_path / "exp" / "videos" / "v_0.pt", weights_only=True), flat_video())


def test_csv_hparams_merge_and_nested(tmp_path):
    logger = CSVLogger("exp", log_dir=tmp_path)
    logger.log_hparams({"lr": torch.tensor(0.5), "optim": {"name": "adam", "betas": (0.9, 0.99)}})
    logger.log_hparams({"lr": 0.25, "seed": 3})
    assert json.loads((tmp_path / "exp" / "hparams.json").read_text()) == {
        "lr": 0.25,
        "optim": {"name": "adam", "betas": [0.9, 0.99]},
        "seed": 3,
    }


# ---------------------------------------------------------------------------------- TensorBoard
def test_tensorboard_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
    from tensorboard.util import tensor_util

    logger = TensorboardLogger("exp", log_dir=tmp_path, video_fps=10)
    logger.log_scalar("loss", 0.5, step=3)
    logger.log_scalar("loss", torch.tensor(0.25))  # step None: after the highest step of 'loss' -> 4
    logger.log_scalar("train/reward", -3)
    logger.log_histogram("w", torch.arange(10.0), step=5)
    logger.log_histogram("w", torch.ones(3), bins=4)
    logger.log_video("rollout", flat_video(t=6), step=2)
    logger.log_video("rollout", flat_video(t=4).unsqueeze(0), fps=4)
    logger.log_hparams({"lr": 0.1, "optim": {"name": "adam", "betas": [0.9, 0.99]}, "clip": None})
    logger.close()
    acc = tb_accumulator(tmp_path / "exp")
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(3, 0.5), (4, 0.25)]
    assert [(e.step, e.value) for e in acc.Scalars("train/reward")] == [(0, -3.0)]
    first, second = acc.Histograms("w")
    assert (
        first.step,
        first.histogram_value.num,
        first.histogram_value.min,
        first.histogram_value.max,
        first.histogram_value.sum,
    ) == (5, 10, 0.0, 9.0, 45.0)
    assert sum(first.histogram_value.bucket) == 10
    assert (second.step, second.histogram_value.num) == (6, 3)
    one, two = acc.Images("rollout")
    assert (one.step, one.width, one.height, two.step) == (2, 6, 4, 3)
    frames, durations = gif_frames(one.encoded_image_string)
    assert frame_levels(frames) == [0, 40, 80, 120, 160, 200] and durations == [100] * 6
    assert gif_frames(two.encoded_image_string)[1] == [250] * 4
    (text,) = acc.Tensors("hparams/text_summary")
    assert (
        tensor_util.make_ndarray(text.tensor_proto).item().decode()
        == "lr: 0.1\noptim.name: adam\noptim.betas: [0.9, 0.99]\nclip: None"
    )
    start = HParamsPluginData.FromString(
        acc.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    ).session_start_info
    assert start.hparams["lr"].number_value == 0.1 and start.hparams["optim.name"].string_value == "adam"
    assert start.hparams["optim.betas"].string_value == "[0.9, 0.99]" and start.hparams["clip"].string_value == "None"


# --------------------------------------------------------------------------------------- W&B
def test_wandb_offline_run_read_back(wandb_env, tmp_path):
    logger = WandbLogger(
        "exp", offline=True, save_dir=tmp_path / "wb", project="tests", config={"seed": 1}, video_fps=10
    )
    assert logger.experiment.name == "exp" and logger.experiment.project == "tests"
    assert str(tmp_path / "wb") in logger.experiment.dir
    logger.log_scalar("loss", 0.5, step=10)
    logger.log_scalar("train/loss", torch.tensor(0.25))  # step None: 0
    logger.log_scalar("loss", 0.125, step=5)  # an earlier step than the previous call: still kept
    logger.log_histogram("w", torch.tensor([0.0, 1.0, 1.0, 3.0]), step=3, bins=3)
    logger.log_video("rollout", flat_video(t=6), step=4)
    logger.log_video("eval/rollout", flat_video(t=5).unsqueeze(0), format="gif", fps=5)
    logger.log_hparams({"lr": 0.1, "optim": {"name": "adam"}, "device": torch.device("cpu")})
    folder = run_dir(logger)
    service = wandb_processes()
    assert service  # W&B's service runs while the run is open (wandb-core, its system monitor)...
    logger.close()
    assert alive(service) == [] and wandb_processes() == []  # ...and nothing of it after close()
    logger.close()  # closing twice is harmless
    records = wandb_records(folder)
    history = wandb_history(records)
    assert {"loss": 0.5, "step": 10} in history and {"loss": 0.125, "step": 5} in history
    assert {"train/loss": 0.25, "train/step": 0} in history
    (hist,) = [row for row in history if "w._type" in row]
    assert hist == {"w._type": "histogram", "w.bins": [0, 1, 2, 3], "w.values": [1, 2, 1], "step": 3}
    (video,) = [row for row in history if "rollout._type" in row]
    assert video["rollout._type"] == "video-file" and video["step"] == 4
    frames, meta = mp4_frames(os.path.join(folder, "files", video["rollout.path"]))
    assert len(frames) == 6 and meta["fps"] == 10
    assert frame_levels(frames) == pytest.approx([0, 40, 80, 120, 160, 200], abs=4)
    (gif,) = [row for row in history if "eval/rollout._type" in row]
    assert gif["eval/step"] == 0 and gif["eval/rollout.path"].endswith(".gif")
    gif_data = open(os.path.join(folder, "files", gif["eval/rollout.path"]), "rb").read()
    assert gif_frames(gif_data)[1] == [200] * 5
    assert wandb_config(records) == {"seed": 1, "lr": 0.1, "optim": {"name": "adam"}, "device": "cpu"}
    metrics = {
        r.metric.name: r.metric.step_metric
        for r in records
        if r.WhichOneof("record_type") == "metric" and r.metric.name
    }
    assert metrics["loss"] == "step" and metrics["train/loss"] == "train/step"


def test_wandb_logger_arguments(wandb_env, tmp_path):
    with pytest.raises(ValueError, match="save_dir and log_dir"):
        WandbLogger("exp", save_dir=tmp_path, log_dir=tmp_path)
    with pytest.raises(ValueError, match="offline=True contradicts mode='online'"):
        WandbLogger("exp", offline=True, mode="online")
    with pytest.raises(ValueError, match="video format"):
        WandbLogger("exp", offline=True, video_format="avi")
    assert wandb_processes() == []  # nothing was started
    # get_logger: logger_name is the save_dir, wandb_kwargs are unpacked (TorchRL's spelling)
    with get_logger("wandb", tmp_path / "via-get", "exp", wandb_kwargs={"offline": True, "project": "p"}) as logger:
        assert isinstance(logger, WandbLogger) and logger.offline and logger.project == "p"
        assert str(tmp_path / "via-get") in logger.experiment.dir
    assert wandb_processes() == []


# ------------------------------------------------------------------------------------- MLflow
def test_mlflow_file_store_read_back(mlflow_env, tmp_path):
    from mlflow.tracking import MlflowClient

    logger = MLFlowLogger("exp", tracking_uri=mlflow_env, tags={"algo": "sac"}, run_name="run-1", video_fps=10)
    logger.log_scalar("loss", 0.5, step=10)
    logger.log_scalar("loss", torch.tensor(0.25))  # step None: 11
    logger.log_scalar("train/reward", -3.0, step=7)
    logger.log_histogram("actor/w", torch.tensor([0.0, 1.0, 1.0, 3.0]), step=3, bins=3)
    logger.log_video("rollout", flat_video(t=6), step=4)
    logger.log_video("eval/rollout", flat_video(t=5).unsqueeze(0), format="gif")  # step None: 0
    logger.log_hparams({"lr": 0.1, "optim": {"name": "adam", "betas": (0.9, 0.99)}, "device": torch.device("cpu")})
    logger.close()
    client = MlflowClient(tracking_uri=mlflow_env)
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "run-1" and run.data.tags["algo"] == "sac"
    assert client.get_experiment(run.info.experiment_id).name == "exp"
    history = lambda key: sorted((m.step, m.value) for m in client.get_metric_history(logger.run_id, key))  # noqa: E731
    assert history("loss") == [(10, 0.5), (11, 0.25)]
    assert history("train/reward") == [(7, -3.0)]
    assert history("actor/w/count") == [(3, 4.0)] and history("actor/w/mean") == [(3, 1.25)]
    assert history("actor/w/min") == [(3, 0.0)] and history("actor/w/max") == [(3, 3.0)]
    assert run.data.params == {"lr": "0.1", "optim.name": "adam", "optim.betas": "[0.9, 0.99]", "device": "cpu"}
    assert [a.path for a in client.list_artifacts(logger.run_id)] == ["histograms", "videos"]
    assert [a.path for a in client.list_artifacts(logger.run_id, "videos")] == ["videos/eval", "videos/rollout_4.mp4"]
    assert [a.path for a in client.list_artifacts(logger.run_id, "videos/eval")] == ["videos/eval/rollout_0.gif"]
    local = client.download_artifacts(logger.run_id, "", str(tmp_path / "download"))
    frames, meta = mp4_frames(os.path.join(local, "videos", "rollout_4.mp4"))
    assert len(frames) == 6 and meta["fps"] == 10
    assert frame_levels(frames) == pytest.approx([0, 40, 80, 120, 160, 200], abs=4)
    assert len(gif_frames(open(os.path.join(local, "videos", "eval", "rollout_0.gif"), "rb").read())[0]) == 5
    hist = json.load(open(os.path.join(local, "histograms", "actor", "w_3.json")))
    assert hist["bin_edges"] == [0.0, 1.0, 2.0, 3.0] and hist["bin_counts"] == [1, 2, 1] and hist["step"] == 3
    # a second logger joins the existing experiment with a new run
    again = MLFlowLogger("exp", tracking_uri=mlflow_env)
    assert again.id == logger.id and again.run_id != logger.run_id
    again.close()


@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")  # inside MLflow's sqlite store
def test_mlflow_names_and_sqlite_store_via_get_logger(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("alembic")
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)  # nothing may land in the working folder but what is asked for
    logger = get_logger("mlflow", tmp_path / "runs", "exp", mlflow_kwargs={"run_name": "r"})
    assert isinstance(logger, MLFlowLogger)
    assert logger.tracking_uri == f"sqlite:///{(tmp_path / 'runs' / 'mlflow.db').as_posix()}"
    with pytest.raises(ValueError, match="invalid MLflow name 'loss\\(%\\)'"):
        logger.log_scalar("loss(%)", 1.0)
    with pytest.raises(ValueError, match="invalid MLflow name 'bad!'"):
        logger.log_hparams({"ok": 1, "bad!": 2})
    logger.log_scalar("loss", 2.0, step=1)
    logger.log_video("v", flat_video(t=3), step=0)
    logger.close()
    client = MlflowClient(tracking_uri=logger.tracking_uri)
    assert [(m.step, m.value) for m in client.get_metric_history(logger.run_id, "loss")] == [(1, 2.0)]
    assert client.get_run(logger.run_id).data.params == {}  # the bad batch was refused whole
    assert (tmp_path / "runs" / "mlartifacts").is_dir()  # artifacts next to the database
    assert sorted(os.listdir(tmp_path)) == ["runs"]


# ----------------------------------------------------------------------------- every backend
BAD_CALLS = [
    ("log_scalar", ("loss", torch.ones(2)), {}, ValueError, "'loss' must be a scalar"),
    ("log_scalar", ("loss", "high"), {}, TypeError, "'loss' must be a number"),
    ("log_scalar", ("loss", 1.0), {"step": 1.5}, TypeError, "step for 'loss' must be a non-negative int, got 1.5"),
    ("log_scalar", ("loss", 1.0), {"step": -1}, ValueError, "step for 'loss' must be a non-negative int, got -1"),
    ("log_scalar", ("../x", 1.0), {}, ValueError, "invalid metric name '../x'"),
    ("log_histogram", ("w", []), {}, ValueError, "data for 'w' is empty"),
    ("log_histogram", ("w", torch.tensor([1.0, float("inf")])), {}, ValueError, "'w' contains NaN or infinite"),
    ("log_histogram", ("w", "abc"), {}, TypeError, "data for 'w' must be a tensor"),
    ("log_histogram", ("w", torch.ones(3)), {"step": "3"}, TypeError, "step for 'w'"),
    (
        "log_histogram",
        ("w", torch.ones(3)),
        {"colour": "red"},
        TypeError,
        "unexpected keyword argument\\(s\\) \\['colour'\\]",
    ),
    (
        "log_video",
        ("v", torch.zeros(4, 4)),
        {},
        ValueError,
        "'v' must be a \\[T, C, H, W\\] or \\[B, T, C, H, W\\] tensor, got \\(4, 4\\)",
    ),
    ("log_video", ("v", torch.zeros(2, 3, 4, 4)), {}, TypeError, "'v' must be uint8"),
    ("log_video", ("v", torch.zeros(2, 2, 4, 4, dtype=torch.uint8)), {}, ValueError, "'v' must have 1 or 3 channels"),
    ("log_video", ("v", [[1]]), {}, TypeError, "video for 'v' must be a uint8 torch.Tensor"),
    (
        "log_video",
        ("v", torch.zeros(2, 3, 4, 4, dtype=torch.uint8)),
        {"fps": 0},
        ValueError,
        "fps must be a positive number",
    ),
    ("log_video", ("v", torch.zeros(2, 3, 4, 4, dtype=torch.uint8)), {"step": True}, TypeError, "step for 'v'"),
    ("log_hparams", (["lr", 0.1],), {}, TypeError, "log_hparams: cfg must be a mapping"),
    ("log_hparams", ({"optim": {1: 0.1}},), {}, TypeError, "names must be non-empty strings, got 1 in 'optim'"),
]


def written(kind, logger, tmp_path):
    """What a closed logger stored, in a comparable form."""
    if kind == "csv":
        return sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "csv").rglob("*") if p.is_file())
    if kind == "tensorboard":
        return {k: v for k, v in tb_accumulator(tmp_path / "tb" / "exp").Tags().items() if v}
    if kind == "wandb":
        records = wandb_records(run_dir(logger))
        media = sorted(str(p) for p in (tmp_path / "wb").rglob("media/*"))
        return wandb_history(records), wandb_config(records), media
    run = logger.client.get_run(logger.run_id)
    return run.data.metrics, run.data.params, [a.path for a in logger.client.list_artifacts(logger.run_id)]


NOTHING = {"csv": [], "tensorboard": {}, "wandb": ([], {}, []), "mlflow": ({}, {}, [])}


@pytest.mark.parametrize("kind", BACKENDS)
def test_bad_input_is_refused_before_anything_is_written(kind, tmp_path, request):
    logger = make_logger(kind, tmp_path, request)
    try:
        for method, args, kwargs, exc, match in BAD_CALLS:
            with pytest.raises(exc, match=match) as info:
                getattr(logger, method)(*args, **kwargs)
            assert type(logger).__name__ in str(info.value), (method, str(info.value))
    finally:
        logger.close()
    assert written(kind, logger, tmp_path) == NOTHING[kind]


@pytest.mark.parametrize(
    "kind, module, extra",
    [
        ("tensorboard", "torch.utils.tensorboard", "tensorboard"),
        ("wandb", "wandb", "wandb"),
        ("mlflow", "mlflow.tracking", "mlflow"),
    ],
)
def test_missing_backend_raises_at_construction_naming_the_extra(kind, module, extra, tmp_path, monkeypatch):
    import rl_objectives.trainers  # noqa: F401  (importing the package needs no backend)

    monkeypatch.setitem(sys.modules, module, None)  # import fails as when the package is not installed
    if kind == "mlflow":
        monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ImportError, match=f"rl-objectives\\[{extra}\\]"):
        get_logger(kind, tmp_path, "exp")
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize("kind", BACKENDS)
def test_step_none_follows_the_highest_step_of_each_name(kind, tmp_path, request):
    logger = make_logger(kind, tmp_path, request)
    for value in (1.0, 2.0):
        logger.log_scalar("a", value)
    logger.log_scalar("b", 5.0, step=100)
    logger.log_scalar("b", 6.0)  # the step after 100
    logger.log_scalar("b", 7.0, step=50)  # an earlier step is kept as given
    logger.log_scalar("b", 8.0)  # still after the highest: 102
    logger.close()
    if kind == "csv":
        got = {n: read_csv_scalar(tmp_path / "csv" / "exp" / "scalars" / f"{n}.csv") for n in "ab"}
    elif kind == "tensorboard":
        acc = tb_accumulator(tmp_path / "tb" / "exp")
        got = {n: [(e.step, e.value) for e in acc.Scalars(n)] for n in "ab"}
    elif kind == "wandb":
        rows = wandb_history(wandb_records(run_dir(logger)))
        got = {n: [(r["step"], r[n]) for r in rows if n in r] for n in "ab"}
    else:
        got = {n: sorted((m.step, m.value) for m in logger.client.get_metric_history(logger.run_id, n)) for n in "ab"}
    b = [(100, 5.0), (101, 6.0), (50, 7.0), (102, 8.0)]
    assert got == {"a": [(0, 1.0), (1, 2.0)], "b": b if kind != "mlflow" else sorted(b)}


# ------------------------------------------------------------------- VideoRecorder, end to end
def pendulum_pixels_env(size=32):
    """rl_envs' PendulumEnv with a "pixels" observation drawn from its angle: the background's grey
    level follows the angle (so consecutive frames differ) and a white rod points along it."""
    from rl_envs import PendulumEnv, TransformedEnv
    from rl_envs.transforms import Transform
    from tdict.specs import Bounded

    class PendulumPixels(Transform):
        def __init__(self):
            super().__init__(in_keys=["th"], out_keys=["pixels"])

        def _apply_transform(self, th):
            batch = th.shape
            img = (
                ((th * 100).remainder(200) + 20)
                .to(torch.uint8)
                .reshape(*batch, 1, 1, 1)
                .expand(*batch, size, size, 3)
                .clone()
            )
            r = torch.linspace(0, size / 2 - 2, size)
            ys = (size / 2 - r * torch.cos(th).unsqueeze(-1)).long().clamp(0, size - 1)
            xs = (size / 2 + r * torch.sin(th).unsqueeze(-1)).long().clamp(0, size - 1)
            img[..., ys, xs, :] = 255
            return img

        def transform_observation_spec(self, spec):
            spec["pixels"] = Bounded(0, 255, shape=(*spec.shape, size, size, 3), dtype=torch.uint8)
            return spec

    return TransformedEnv(PendulumEnv(seed=0), PendulumPixels())


@pytest.mark.parametrize("kind", BACKENDS)
def test_video_recorder_on_pendulum_reaches_each_logger(kind, tmp_path, request):
    from rl_envs.transforms import VideoRecorder

    logger = make_logger(kind, tmp_path, request)
    env = pendulum_pixels_env()
    recorder = VideoRecorder(logger=logger, tag="pendulum", fps=20)
    env.append_transform(recorder)
    rollout = env.rollout(10)
    assert rollout["next", "pixels"].shape == (10, 32, 32, 3)
    assert len(recorder.obs) == 11  # the reset frame and 10 steps
    recorder.dump()
    logger.close()
    if kind == "csv":
        frames, meta = mp4_frames(tmp_path / "csv" / "exp" / "videos" / "pendulum_0.mp4")
        assert meta["fps"] == 20
    elif kind == "tensorboard":
        (image,) = tb_accumulator(tmp_path / "tb" / "exp").Images("pendulum")
        frames, durations = gif_frames(image.encoded_image_string)
        assert durations == [50] * 11
    elif kind == "wandb":
        (row,) = [r for r in wandb_history(wandb_records(run_dir(logger))) if "pendulum._type" in r]
        frames, meta = mp4_frames(os.path.join(run_dir(logger), "files", row["pendulum.path"]))
    else:
        local = logger.client.download_artifacts(logger.run_id, "videos/pendulum_0.mp4", str(tmp_path / "download"))
        frames, meta = mp4_frames(local)
    assert len(frames) == 11 and frames[0].shape == (32, 32, 3)
    expected = torch.cat([rollout["pixels"][:1], rollout["next", "pixels"]]).float().mean(dim=(1, 2, 3))
    assert [float(f.float().mean()) for f in frames] == pytest.approx(expected.tolist(), abs=6)
