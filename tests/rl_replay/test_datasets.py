"""Offline datasets: Minari and D4RL files written here, loaded, checked value by value against the source."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tdict.folders import atomic_dir

h5py = pytest.importorskip("h5py")

from rl_replay import (
    D4RLExperienceReplay,
    MinariExperienceReplay,
    OfflineDataset,
    load_dataset,
    register_dataset,
)
from rl_replay.datasets import registry as registry_module
from rl_replay.datasets.offline import META_NAME, require_h5py

# ----------------------------------------------------------------------------------------------- #
# Minari fixture: 3 episodes (terminated, truncated, terminated), dict observations with a nested
# group, infos with T+1 rows, one info with T rows, and a string info (left out)
# ----------------------------------------------------------------------------------------------- #
MINARI_ID = "toy/walk-v0"
EPISODE_LENGTHS = {0: 3, 1: 4, 2: 2}


def _minari_source(seed: int = 0) -> dict:
    g = np.random.default_rng(seed)
    episodes = {}
    for ep, steps in EPISODE_LENGTHS.items():
        term = np.zeros(steps, bool)
        trunc = np.zeros(steps, bool)
        if ep == 1:
            trunc[-1] = True
        else:
            term[-1] = True
        episodes[ep] = {
            "pos": g.standard_normal((steps + 1, 2)),  # float64
            "vel": g.standard_normal(steps + 1).astype(np.float32),
            "goal_xy": g.integers(0, 9, (steps + 1, 2)).astype(np.int64),
            "actions": g.standard_normal((steps, 3)).astype(np.float32),
            "rewards": g.standard_normal(steps),
            "terminations": term,
            "truncations": trunc,
            "success": g.random(steps + 1) > 0.5,
            "dist": g.standard_normal(steps + 1),
            "after": g.standard_normal(steps).astype(np.float32),  # only after each step (T rows)
        }
    return episodes


def _write_minari(minari_root, episodes, dataset_id=MINARI_ID, metadata=True):
    data = minari_root / dataset_id / "data"
    data.mkdir(parents=True)
    with h5py.File(data / "main_data.hdf5", "w") as f:
        for ep, e in episodes.items():
            grp = f.create_group(f"episode_{ep}")
            grp.attrs["id"] = ep
            grp.attrs["total_steps"] = len(e["rewards"])
            obs = grp.create_group("observations")
            obs.create_dataset("pos", data=e["pos"])
            obs.create_dataset("vel", data=e["vel"])
            obs.create_group("goal").create_dataset("xy", data=e["goal_xy"])
            for key in ("actions", "rewards", "terminations", "truncations"):
                grp.create_dataset(key, data=e[key])
            infos = grp.create_group("infos")
            infos.create_dataset("success", data=e["success"])
            infos.create_dataset("dist", data=e["dist"])
            infos.create_dataset("after", data=e["after"])
            infos.create_dataset("text", data=["a"] * (len(e["rewards"]) + 1), dtype=h5py.string_dtype())
    if metadata:
        meta = {
            "dataset_id": dataset_id,
            "total_episodes": len(episodes),
            "data_format": "hdf5",
            "total_steps": sum(len(e["rewards"]) for e in episodes.values()),
            "observation_space": "{}",
        }
        (data / "metadata.json").write_text(json.dumps(meta))
    return data / "main_data.hdf5"


@pytest.fixture
def minari_setup(tmp_path):
    src = _minari_source()
    _write_minari(tmp_path / "minari", src)
    return src, tmp_path / "minari", tmp_path / "converted"


def test_minari_every_transition_equals_source(minari_setup):
    src, minari_root, root = minari_setup
    ds = MinariExperienceReplay(MINARI_ID, batch_size=4, root=root, minari_root=minari_root)
    assert ds.converted and len(ds) == sum(EPISODE_LENGTHS.values()) and ds.num_episodes == 3
    data = ds[:]
    assert data["next", "reward"].shape == (9,) and data["next", "done"].shape == (9,)  # no trailing dim
    assert data["observation", "pos"].dtype == torch.float64 and data["observation", "vel"].dtype == torch.float32
    row = 0
    for ep, e in src.items():
        steps = len(e["rewards"])
        for t in range(steps):
            assert data["episode"][row].item() == ep
            for key, obs_key in (("pos", ("pos",)), ("vel", ("vel",)), ("goal_xy", ("goal", "xy"))):
                assert torch.equal(data[("observation", *obs_key)][row], torch.as_tensor(e[key][t])), (ep, t, key)
                assert torch.equal(data[("next", "observation", *obs_key)][row], torch.as_tensor(e[key][t + 1]))
            assert torch.equal(data["action"][row], torch.as_tensor(e["actions"][t]))
            assert data["next", "reward"][row].item() == e["rewards"][t]
            assert data["next", "terminated"][row].item() == e["terminations"][t]
            assert data["next", "truncated"][row].item() == e["truncations"][t]
            assert data["next", "done"][row].item() == (e["terminations"][t] or e["truncations"][t])
            assert data["info", "success"][row].item() == e["success"][t]
            assert data["next", "info", "success"][row].item() == e["success"][t + 1]
            assert data["info", "dist"][row].item() == e["dist"][t]
            assert data["next", "info", "dist"][row].item() == e["dist"][t + 1]
            # T-row infos are the infos after each step; the root copy is shifted (zeros first)
            assert data["next", "info", "after"][row].item() == e["after"][t]
            assert data["info", "after"][row].item() == (e["after"][t - 1] if t else 0.0)
            row += 1
    # the truncated episode ends truncated, not terminated
    last_of_1 = EPISODE_LENGTHS[0] + EPISODE_LENGTHS[1] - 1
    assert data["next", "truncated"][last_of_1] and not data["next", "terminated"][last_of_1]
    assert "text" not in data["info"]
    assert ds.metadata["source"]["skipped_keys"] == ["infos/text"]
    assert ds.metadata["source"]["total_episodes"] == 3 and ds.metadata["source"]["data_format"] == "hdf5"


def test_minari_sampling_shapes_and_readonly(minari_setup):
    _, minari_root, root = minari_setup
    ds = MinariExperienceReplay(
        MINARI_ID, batch_size=5, root=root, minari_root=minari_root, generator=torch.Generator().manual_seed(0)
    )
    sample, info = ds.sample(return_info=True)
    assert sample.batch_size == (5,)
    assert sample["observation", "pos"].shape == (5, 2) and sample["observation", "goal", "xy"].shape == (5, 2)
    assert sample["next", "observation", "vel"].shape == (5,) and sample["action"].shape == (5, 3)
    assert sample["next", "reward"].shape == (5,) and sample["episode"].shape == (5,)
    # the sampled rows are the stored rows at info["index"]
    assert torch.equal(sample["action"], ds[:]["action"][info["index"]])
    assert ds.sample(7)["action"].shape == (7, 3)
    with pytest.raises(RuntimeError, match="read-only"):
        ds.extend(ds[:2])
    # same generator seed -> same samples
    a = MinariExperienceReplay(
        MINARI_ID, batch_size=5, root=root, minari_root=minari_root, generator=torch.Generator().manual_seed(3)
    )
    b = MinariExperienceReplay(
        MINARI_ID, batch_size=5, root=root, minari_root=minari_root, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(a.sample()["action"], b.sample()["action"])


def test_minari_second_construction_reuses_memmap(minari_setup, monkeypatch):
    _, minari_root, root = minari_setup
    first = MinariExperienceReplay(MINARI_ID, batch_size=2, root=root, minari_root=minari_root)
    assert first.converted
    files = sorted(p for p in (root / MINARI_ID).rglob("*") if p.is_file())
    mtimes = {p: p.stat().st_mtime_ns for p in files}
    calls = []
    monkeypatch.setattr(MinariExperienceReplay, "_make_tensordict", lambda self: calls.append(1) / 0)
    (minari_root / MINARI_ID / "data" / "main_data.hdf5").unlink()  # the source is not needed any more
    second = MinariExperienceReplay(MINARI_ID, batch_size=2, root=root, minari_root=minari_root)
    assert not second.converted and calls == []
    assert {p: p.stat().st_mtime_ns for p in files} == mtimes
    assert sorted(p for p in (root / MINARI_ID).rglob("*") if p.is_file()) == files
    assert (second[:] == first[:]).all()
    # the leaves map the converted files rather than holding copies
    assert type(second.storage._storage["action"]).__name__ == "MemoryMappedTensor"
    # the storage pickles as a directory name (another process maps the same files)
    clone = pickle.loads(pickle.dumps(second.storage))
    index = torch.tensor([4, 0, 8])
    assert (clone.get(index) == first[:][index]).all()


def test_minari_force_reconverts(minari_setup):
    src, minari_root, root = minari_setup
    MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)
    # rewrite the source with other values: only download="force" sees them
    other = _minari_source(seed=1)
    shutil.rmtree(minari_root / MINARI_ID)
    _write_minari(minari_root, other)
    stale = MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)
    assert not stale.converted and stale[:]["next", "reward"][0].item() == src[0]["rewards"][0]
    fresh = MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root, download="force")
    assert fresh.converted and fresh[:]["next", "reward"][0].item() == other[0]["rewards"][0]
    # no temp or old dirs left (the lock file that serialises conversions stays)
    assert [p.name for p in (root / "toy").iterdir() if p.name.startswith(".")] == [".walk-v0.lock"]


def test_minari_split_trajs(minari_setup):
    src, minari_root, root = minari_setup
    ds = MinariExperienceReplay(MINARI_ID, batch_size=2, root=root, minari_root=minari_root, split_trajs=True)
    data = ds[:]
    assert data.batch_size == (3, max(EPISODE_LENGTHS.values()))
    for i, (ep, e) in enumerate(src.items()):
        steps = len(e["rewards"])
        assert data["mask"][i].tolist() == [True] * steps + [False] * (data.batch_size[1] - steps)
        assert torch.equal(data["next", "reward"][i, :steps], torch.as_tensor(e["rewards"]))
        assert (data["next", "reward"][i, steps:] == 0).all()
        assert (data["episode"][i, :steps] == ep).all()
    again = MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root, split_trajs=True)
    assert not again.converted and (again[:] == data).all()
    sample = ds.sample()
    assert sample["action"].shape == (2, 4, 3)
    assert sample["index"].shape == (2, 4)


def test_minari_slice_sampler(minari_setup):
    slice_module = pytest.importorskip("rl_replay.samplers.slice")
    _, minari_root, root = minari_setup
    ds = MinariExperienceReplay(
        MINARI_ID,
        batch_size=4,
        root=root,
        minari_root=minari_root,
        sampler=slice_module.SliceSampler(slice_len=2, traj_key="episode"),
    )
    sample = ds.sample()
    assert sample["action"].shape[0] == 4
    episode = sample["episode"].reshape(2, 2)
    assert (episode[:, 0] == episode[:, 1]).all()  # each slice stays within one episode


def test_minari_errors(tmp_path):
    root = tmp_path / "converted"
    with pytest.raises(FileNotFoundError, match="never downloads"):
        MinariExperienceReplay("missing-v0", root=root, minari_root=tmp_path)
    # corrupt file
    data = tmp_path / "bad-v0" / "data"
    data.mkdir(parents=True)
    (data / "main_data.hdf5").write_bytes(b"not an hdf5 file" * 10)
    with pytest.raises(ValueError, match="not a readable HDF5 file"):
        MinariExperienceReplay("bad-v0", root=root, minari_root=tmp_path)
    # a missing key, named in the error
    src = _minari_source()
    path = _write_minari(tmp_path / "m1", src)
    with h5py.File(path, "a") as f:
        del f["episode_1/truncations"]
    with pytest.raises(ValueError, match=r"episode_1 lacks \['truncations'\]"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=tmp_path / "m1")
    # observations with the wrong number of rows
    path = _write_minari(tmp_path / "m2", src)
    with h5py.File(path, "a") as f:
        del f["episode_2/observations/vel"]
        f["episode_2/observations"].create_dataset("vel", data=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"observations/vel: expected 3 rows"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=tmp_path / "m2")
    # another Minari storage format
    path = _write_minari(tmp_path / "m3", src)
    (path.parent / "metadata.json").write_text(json.dumps({"data_format": "arrow"}))
    with pytest.raises(ValueError, match="'arrow' format"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=tmp_path / "m3")
    # nothing was written by any failed conversion
    assert not root.exists() or not any(root.rglob("*"))
    with pytest.raises(ValueError, match="download must be"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=tmp_path / "m1", download="yes")
    with pytest.raises(ValueError, match="dataset_id"):
        MinariExperienceReplay("../escape", root=root, minari_root=tmp_path)


def test_corrupt_converted_copy_is_reported_and_force_repairs(minari_setup):
    _, minari_root, root = minari_setup
    MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)
    leaf = next(p for p in (root / MINARI_ID).rglob("*.memmap"))
    leaf.write_bytes(b"x")  # truncated data file
    with pytest.raises(RuntimeError, match="corrupt.*download='force'"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)
    assert MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root, download="force").converted
    (root / MINARI_ID / META_NAME).write_text("{not json")
    with pytest.raises(RuntimeError, match="corrupt"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)


def test_failed_write_leaves_nothing(minari_setup, monkeypatch):
    _, minari_root, root = minari_setup

    def boom(path, data, meta):
        data.memmap(path)
        raise OSError("disk full")

    monkeypatch.setattr(OfflineDataset, "_write", staticmethod(boom))
    with pytest.raises(OSError, match="disk full"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)
    assert not (root / MINARI_ID).exists()
    assert [p.name for p in (root / "toy").iterdir()] == [".walk-v0.lock"]  # the temp dir is gone too


def test_a_copy_committed_first_by_a_concurrent_conversion_is_kept(minari_setup, monkeypatch):
    _, minari_root, root = minari_setup
    real_write = OfflineDataset._write

    def race(path, data, meta):
        if not (root / MINARI_ID / META_NAME).exists():  # another process commits its copy meanwhile
            atomic_dir(root / MINARI_ID, lambda d: real_write(Path(d), data * 0, meta), marker=META_NAME)
        real_write(path, data, meta)

    monkeypatch.setattr(OfflineDataset, "_write", staticmethod(race))
    first = MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)
    assert first.converted and (first[:]["next", "reward"] == 0).all()  # the other copy was kept
    forced = MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root, download="force")
    assert (forced[:]["next", "reward"] != 0).any()  # a forced rebuild replaces it


# ----------------------------------------------------------------------------------------------- #
# D4RL fixture: 13 rows: episode 0 terminal at row 3, episode 1 timeout at row 7, episode 2 terminal
# AND the last rows (8..9), episode 3 rows 10..12 cut by the end of the file
# ----------------------------------------------------------------------------------------------- #
N = 13
TERMINALS = np.zeros(N, bool)
TERMINALS[[3, 9]] = True
TIMEOUTS = np.zeros(N, bool)
TIMEOUTS[7] = True


def _d4rl_source(seed=0):
    g = np.random.default_rng(seed)
    return {
        "observations": g.standard_normal((N, 4)).astype(np.float32),
        "next_observations": g.standard_normal((N, 4)).astype(np.float32),
        "actions": g.standard_normal((N, 2)).astype(np.float32),
        "rewards": g.standard_normal(N).astype(np.float32),
        "terminals": TERMINALS.copy(),
        "timeouts": TIMEOUTS.copy(),
        "qpos": g.standard_normal((N, 3)),
    }


def _write_d4rl(path, src, with_next=False, with_timeouts=True):
    with h5py.File(path, "w") as f:
        for key in ("observations", "actions", "rewards", "terminals"):
            f.create_dataset(key, data=src[key])
        if with_timeouts:
            f.create_dataset("timeouts", data=src["timeouts"])
        if with_next:
            f.create_dataset("next_observations", data=src["next_observations"])
        f.create_dataset("infos/qpos", data=src["qpos"])
        f.create_dataset("infos/note", data=["x"] * N, dtype=h5py.string_dtype())
        f.create_dataset("metadata/algorithm", data="SAC")
        f.create_dataset("metadata/iteration", data=7)
        f.create_dataset("extra_stuff", data=np.zeros(3))
    return path


def _reference_shift(src, with_timeouts=True):
    """D4RL qlearning_dataset rules, one row at a time."""
    timeouts = src["timeouts"] if with_timeouts else np.zeros(N, bool)
    rows, episode = [], 0
    for i in range(N):
        end = src["terminals"][i] or timeouts[i]
        if src["terminals"][i]:
            rows.append((i, np.zeros(4, np.float32), episode))
        elif not end and i + 1 < N:
            rows.append((i, src["observations"][i + 1], episode))
        episode += int(end)
    out = []
    for k, (i, nobs, ep) in enumerate(rows):
        last = k + 1 == len(rows) or rows[k + 1][2] != ep
        out.append(
            {
                "i": i,
                "next_obs": nobs,
                "episode": ep,
                "terminated": bool(src["terminals"][i]),
                "truncated": bool(last and not src["terminals"][i]),
            }
        )
    return out


@pytest.mark.parametrize("with_timeouts", [True, False])
def test_d4rl_shifted_next_observations(tmp_path, with_timeouts):
    src = _d4rl_source()
    path = _write_d4rl(tmp_path / "hopper-toy-v2.hdf5", src, with_timeouts=with_timeouts)
    ds = D4RLExperienceReplay(batch_size=3, root=tmp_path / "conv", path=path)
    assert ds.dataset_id == "hopper-toy-v2" and ds.converted
    ref = _reference_shift(src, with_timeouts)
    data = ds[:]
    assert len(ds) == len(ref)
    if with_timeouts:  # rows 7 (timeout) and 12 (end of file, no terminal) are dropped
        assert [r["i"] for r in ref] == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    for row, r in enumerate(ref):
        i = r["i"]
        assert torch.equal(data["observation"][row], torch.from_numpy(src["observations"][i]))
        assert torch.equal(data["next", "observation"][row], torch.from_numpy(np.asarray(r["next_obs"])))
        assert torch.equal(data["action"][row], torch.from_numpy(src["actions"][i]))
        assert data["next", "reward"][row].item() == src["rewards"][i]
        assert data["episode"][row].item() == r["episode"]
        assert data["next", "terminated"][row].item() == r["terminated"]
        assert data["next", "truncated"][row].item() == r["truncated"]
        assert data["next", "done"][row].item() == (r["terminated"] or r["truncated"])
        assert torch.equal(data["info", "qpos"][row], torch.from_numpy(src["qpos"][i]))
    # next observation alignment: within an episode, next obs of row k is the obs of row k+1
    same = data["episode"][1:] == data["episode"][:-1]
    assert torch.equal(data["next", "observation"][:-1][same], data["observation"][1:][same])
    meta = ds.metadata["source"]
    assert meta["metadata"] == {"algorithm": "SAC", "iteration": 7}
    assert meta["skipped_keys"] == ["infos/note"] and meta["ignored_keys"] == ["extra_stuff"]


def test_d4rl_next_observations_kept_as_stored(tmp_path):
    src = _d4rl_source()
    path = _write_d4rl(tmp_path / "toy.hdf5", src, with_next=True)
    ds = D4RLExperienceReplay("toy-v2", batch_size=3, root=tmp_path / "conv", path=path)
    data = ds[:]
    assert len(ds) == N
    ends = src["terminals"] | src["timeouts"]
    episode = np.cumsum(ends) - ends
    for i in range(N):
        assert torch.equal(data["next", "observation"][i], torch.from_numpy(src["next_observations"][i]))
        assert torch.equal(data["observation"][i], torch.from_numpy(src["observations"][i]))
        assert data["next", "terminated"][i].item() == src["terminals"][i]
        assert data["next", "truncated"][i].item() == src["timeouts"][i]
        assert data["episode"][i].item() == episode[i]
    assert data["episode"].tolist() == [0] * 4 + [1] * 4 + [2] * 2 + [3] * 3
    sample = ds.sample()
    assert sample["observation"].shape == (3, 4) and sample["next", "done"].shape == (3,)


def test_d4rl_reuse_without_path_and_errors(tmp_path, monkeypatch):
    src = _d4rl_source()
    path = _write_d4rl(tmp_path / "toy.hdf5", src)
    with pytest.raises(FileNotFoundError, match="no path="):
        D4RLExperienceReplay("toy", root=tmp_path / "conv")
    first = D4RLExperienceReplay(root=tmp_path / "conv", path=path)
    mtime = (tmp_path / "conv" / "toy" / META_NAME).stat().st_mtime_ns
    monkeypatch.setattr(D4RLExperienceReplay, "_make_tensordict", lambda self: 1 / 0)
    path.unlink()
    again = D4RLExperienceReplay("toy", batch_size=2, root=tmp_path / "conv")  # no path needed now
    assert not again.converted and (again[:] == first[:]).all()
    assert (tmp_path / "conv" / "toy" / META_NAME).stat().st_mtime_ns == mtime
    monkeypatch.undo()
    with pytest.raises(ValueError, match="give dataset_id"):
        D4RLExperienceReplay(root=tmp_path / "conv")
    with pytest.raises(FileNotFoundError, match="is not a file"):
        D4RLExperienceReplay(root=tmp_path / "conv", path=tmp_path / "absent.hdf5")
    bad = tmp_path / "bad.hdf5"
    bad.write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="not a readable HDF5 file"):
        D4RLExperienceReplay(root=tmp_path / "conv", path=bad)
    with h5py.File(tmp_path / "nokey.hdf5", "w") as f:
        f.create_dataset("observations", data=np.zeros((3, 2)))
        f.create_dataset("rewards", data=np.zeros(3))
    with pytest.raises(ValueError, match=r"lacks \['actions', 'terminals'\]"):
        D4RLExperienceReplay(root=tmp_path / "conv", path=tmp_path / "nokey.hdf5")
    with h5py.File(tmp_path / "rows.hdf5", "w") as f:
        f.create_dataset("observations", data=np.zeros((3, 2)))
        f.create_dataset("actions", data=np.zeros((4, 1)))
        f.create_dataset("rewards", data=np.zeros(3))
        f.create_dataset("terminals", data=np.zeros(3, bool))
    with pytest.raises(ValueError, match=r"'actions' has \[4\] rows, 'rewards' has 3"):
        D4RLExperienceReplay(root=tmp_path / "conv", path=tmp_path / "rows.hdf5")
    assert sorted(p.name for p in (tmp_path / "conv").iterdir()) == [".toy.lock", "toy"]  # failures wrote nothing


# ----------------------------------------------------------------------------------------------- #
# registry, lazy imports, missing h5py
# ----------------------------------------------------------------------------------------------- #
def test_registry(tmp_path, minari_setup, monkeypatch):
    monkeypatch.setattr(registry_module, "_REGISTRY", dict(registry_module._REGISTRY))
    src = _d4rl_source()
    path = _write_d4rl(tmp_path / "toy.hdf5", src)
    ds = load_dataset("d4rl", path=path, batch_size=4, root=tmp_path / "conv")
    assert isinstance(ds, D4RLExperienceReplay) and ds.batch_size == 4 and ds.dataset_id == "toy"
    ds2 = load_dataset("d4rl/toy", root=tmp_path / "conv")
    assert not ds2.converted and len(ds2) == len(ds)
    _, minari_root, root = minari_setup
    m = load_dataset(f"minari/{MINARI_ID}", batch_size=2, root=root, minari_root=minari_root)
    assert isinstance(m, MinariExperienceReplay) and m.dataset_id == MINARI_ID and len(m) == 9
    # a custom entry with defaults, overridden by load_dataset's kwargs
    register_dataset("my-d4rl", D4RLExperienceReplay, root=tmp_path / "conv", batch_size=8)
    assert load_dataset("my-d4rl", dataset_id="toy").batch_size == 8
    assert load_dataset("my-d4rl", dataset_id="toy", batch_size=3).batch_size == 3
    assert load_dataset("my-d4rl/toy").dataset_id == "toy"
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("my-d4rl", D4RLExperienceReplay)
    register_dataset("my-d4rl", dict, overwrite=True, a=1)
    assert load_dataset("my-d4rl", b=2) == {"a": 1, "b": 2}
    with pytest.raises(TypeError, match="callable"):
        register_dataset("x", 42)
    with pytest.raises(ValueError, match="non-empty"):
        register_dataset("", dict)
    with pytest.raises(KeyError, match=r"unknown dataset 'nope'.*\['d4rl', 'minari', 'my-d4rl'\]"):
        load_dataset("nope")
    with pytest.raises(KeyError, match="unknown dataset 'nope/x'"):
        load_dataset("nope/x")
    with pytest.raises(ValueError, match="already names the dataset_id"):
        load_dataset("d4rl/toy", dataset_id="other")


def test_names_are_lazy_and_h5py_is_imported_only_when_reading():
    code = (
        "import sys\n"
        "import rl_replay.datasets as d\n"
        "from rl_replay import MinariExperienceReplay, D4RLExperienceReplay, OfflineDataset, load_dataset, register_dataset\n"
        "assert d.load_dataset is load_dataset and d.MinariExperienceReplay is MinariExperienceReplay\n"
        "print('h5py' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_missing_h5py_says_how_to_install(minari_setup, monkeypatch):
    _, minari_root, root = minari_setup
    monkeypatch.setitem(sys.modules, "h5py", None)  # makes `import h5py` raise ImportError
    with pytest.raises(ImportError, match=r"pip install rl-replay\[h5py\]"):
        require_h5py()
    with pytest.raises(ImportError, match=r"pip install rl-replay\[h5py\]"):
        MinariExperienceReplay(MINARI_ID, root=root, minari_root=minari_root)
    assert not (root / MINARI_ID).exists()


def test_offline_dataset_subclass(tmp_path):
    class Pairs(OfflineDataset):
        def _make_tensordict(self):
            from tdict import TensorDict

            return TensorDict(image=torch.arange(24.0).reshape(6, 4), label=torch.arange(6), batch_size=[6])

    ds = Pairs("pairs", batch_size=3, root=tmp_path)
    assert ds.converted and len(ds) == 6 and ds.data_path == tmp_path / "pairs"
    batch = ds.sample()
    assert torch.equal(batch["image"], batch["label"].float()[:, None] * 4 + torch.arange(4.0))
    ds.delete()
    assert not (tmp_path / "pairs").exists()

    class Empty(OfflineDataset):
        def _make_tensordict(self):
            return torch.zeros(3)

    with pytest.raises(ValueError, match="non-empty TensorDict"):
        Empty("empty", root=tmp_path)
    with pytest.raises(NotImplementedError):
        OfflineDataset("base", root=tmp_path)
