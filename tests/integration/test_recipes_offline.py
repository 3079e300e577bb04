"""The offline recipes (examples/recipes/bc.py, iql.py, cql.py, dt.py) and their dataset builder
(examples/recipes/datasets.py) on the pendulum.

Fast tests: a tiny dataset (a SAC sub-run of a few hundred frames, 20-step episodes) is built once
and checked (layout, episode ids, returns to go, reuse without retraining, nothing left by a build
that fails halfway); each recipe then takes a few gradient steps on it through ``train``. Slow
tests: one dataset with the recipes' defaults (a SAC policy trained for 8,000 frames, 20,000
frames of its stochastic actions), then each recipe's pendulum preset reaches its threshold.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))

from recipes import bc, cql, datasets, dt, iql, sac  # noqa: E402
from recipes.config import CollectorConfig, EnvConfig, LoggerConfig, TrainConfig  # noqa: E402
from recipes.envs import make_env  # noqa: E402
from recipes.networks import q_critic, tanh_gaussian_actor  # noqa: E402

RECIPES = {"bc": bc, "iql": iql, "cql": cql, "dt": dt}
RUN_FILES = (
    "config.json",
    "checkpoint.pt",
    "learning_curve.png",
    "scalars/total_r_evaluation.csv",
    "scalars/final_r_evaluation.csv",
)
TINY = {"dataset_frames": 120, "behaviour_frames": 128}  # 3 sub-envs x 2 episodes of 20 steps; SAC: random warm-up only
TINY_ENV = EnvConfig(name="pendulum", num_envs=3, max_steps=20, eval_envs=2)


def _load(path: Path, env: EnvConfig = TINY_ENV, **buffer_kwargs) -> datasets.BehaviourDataset:
    return datasets.BehaviourDataset(
        path,
        env=env,
        dataset_frames=TINY["dataset_frames"],
        behaviour_frames=TINY["behaviour_frames"],
        seed=0,
        **buffer_kwargs,
    )


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory) -> Path:
    """A dataset folder built once for the fast tests."""
    path = tmp_path_factory.mktemp("offline") / "pendulum"
    assert _load(path).converted
    return path


# ------------------------------------------------------------------------------------ the dataset
def test_dataset_holds_whole_episodes_with_their_returns_to_go(tiny_dataset: Path) -> None:
    data = _load(tiny_dataset)[:]
    assert data.batch_size == (120,) and set(data.keys(True, True)) == {
        "observation",
        "action",
        "episode",
        "return_to_go",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
        ("next", "truncated"),
    }
    episode, reward, done = data["episode"], data["next", "reward"], data["next", "done"]
    assert torch.equal(episode, torch.arange(120) // 20)  # 6 episodes of 20 steps, one after the other
    assert torch.equal(done, torch.arange(120) % 20 == 19) and not bool(data["next", "terminated"].any())
    for e in range(6):  # the return to go, by hand: the rewards still to come in the episode
        r = reward[episode == e]
        torch.testing.assert_close(data["return_to_go"][episode == e], r.flip(0).cumsum(0).flip(0))
    torch.testing.assert_close(data["observation"][1:20], data["next", "observation"][:19])  # consecutive steps
    source = _load(tiny_dataset).metadata["source"]
    assert source["task"] == "pendulum" and source["frames"] == 120 and source["episodes"] == 6
    assert math.isclose(source["dataset_return"], float(reward.sum()) / 6, rel_tol=1e-5)
    assert (tiny_dataset.parent / "pendulum-behaviour" / "checkpoint.pt").is_file()  # the SAC sub-run


def test_dataset_is_reused_without_retraining(tiny_dataset: Path, monkeypatch) -> None:
    monkeypatch.setattr(sac, "train", lambda cfg: pytest.fail("the behaviour policy was retrained"))
    stamp = (tiny_dataset / "rl_replay_dataset.json").stat().st_mtime_ns
    again = _load(tiny_dataset)
    assert not again.converted and len(again) == 120
    assert (tiny_dataset / "rl_replay_dataset.json").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="built for env='pendulum'"):
        _load(tiny_dataset, env=EnvConfig(name="cartpole", num_envs=3, max_steps=20))


def test_a_build_that_fails_halfway_leaves_no_dataset(tiny_dataset: Path, tmp_path: Path, monkeypatch) -> None:
    import shutil

    path = tmp_path / "pendulum"
    shutil.copytree(
        tiny_dataset.parent / "pendulum-behaviour", tmp_path / "pendulum-behaviour"
    )  # a finished SAC sub-run
    monkeypatch.setattr(sac, "train", lambda cfg: pytest.fail("the finished behaviour run was retrained"))
    real_write = datasets.OfflineDataset._write

    def write_then_die(folder: Path, data, meta) -> None:
        data[:50].memmap(folder)  # part of the files, then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(datasets.OfflineDataset, "_write", staticmethod(write_then_die))
    with pytest.raises(KeyboardInterrupt):
        _load(path)
    # no temporary folder left (the lock file that serialises conversions stays)
    assert not path.exists() and sorted(p.name for p in tmp_path.iterdir()) == [".pendulum.lock", "pendulum-behaviour"]
    monkeypatch.setattr(datasets.OfflineDataset, "_write", staticmethod(real_write))
    rebuilt = _load(path)
    assert rebuilt.converted and torch.equal(
        rebuilt[:]["action"], _load(tiny_dataset)[:]["action"]
    )  # same policy, same seed


def test_sampling_is_endless_and_counts_frames(tiny_dataset: Path) -> None:
    samples = iter(datasets.DatasetSamples(_load(tiny_dataset, batch_size=16)))
    batches = [next(samples) for _ in range(30)]  # more samples than the dataset holds steps
    assert all(b.numel() == 16 for b in batches)


def test_dt_windows_end_at_their_last_real_step() -> None:
    from tdict import TensorDict

    obs = torch.arange(8.0).reshape(8, 1)  # two slices of 4 steps: the second began 2 steps before its episode
    sample = TensorDict(
        observation=obs,
        action=obs + 100,
        return_to_go=obs.squeeze(-1) * 10,
        collector=TensorDict(mask=torch.tensor([True] * 4 + [True, True, False, False]), batch_size=[8]),
        batch_size=[8],
    )
    out = dt.to_windows(sample, context=4, rtg_scale=0.5)
    assert out.batch_size == (2, 4)
    assert out["observation"].squeeze(-1).tolist() == [[0, 1, 2, 3], [0, 0, 4, 5]]
    assert out["action"].squeeze(-1).tolist() == [[100, 101, 102, 103], [0, 0, 104, 105]]
    assert out["return_to_go"].tolist() == [[0, 5, 10, 15], [0, 0, 20, 25]]
    assert out["mask"].tolist() == [[True] * 4, [False, False, True, True]]


# ---------------------------------------------------------------------------------- quick runs
def _quick(name: str, tmp_path: Path, dataset: Path, *, batch: int, steps: int, **algo) -> TrainConfig:
    """A few gradient steps on the tiny dataset: 20-step episodes, 2 evaluation episodes, CSV logs."""
    return TrainConfig(
        algo=RECIPES[name].Config(dataset_dir=str(dataset), **TINY, **algo),
        env=TINY_ENV,
        collector=CollectorConfig(frames_per_batch=batch, total_frames=batch * steps),
        logger=LoggerConfig(backends=["csv"], eval_every=batch * steps // 2, progress=False),
        runs_dir=str(tmp_path),
        name="quick",
    )


@pytest.mark.parametrize("name", ["bc", "iql", "cql", "dt"])
def test_quick_run(name: str, tmp_path: Path, tiny_dataset: Path, capsys) -> None:
    extra = {"dt": {"context": 4, "n_embd": 16, "n_layer": 1, "n_head": 1}, "cql": {"bc_steps": 3}}.get(name, {})
    batch = 8 * 4 if name == "dt" else 32
    final = RECIPES[name].train(_quick(name, tmp_path, tiny_dataset, batch=batch, steps=6, **extra))
    run_dir = tmp_path / "quick"
    for file in RUN_FILES:
        assert (run_dir / file).is_file(), f"{file} missing"
    assert math.isfinite(final) and -16.3 * 20 <= final <= 0  # 20 steps of rewards in [-16.3, 0]
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert (
        state["state"]["collected_frames"] == batch * 6 and state["state"]["_optim_count"] == 6
    )  # one step per sample
    resolved = json.loads((run_dir / "config.json").read_text())["algo"]
    assert (
        resolved["dataset_dir"] == str(tiny_dataset)
        and resolved["lr"] == RECIPES[name].PRESETS["pendulum"]["algo"]["lr"]
    )
    out = capsys.readouterr().out
    assert "(reused)" in out and out.strip().splitlines()[-1] == f"final eval return {final:.1f}"
    assert not (run_dir / "dataset").exists()  # the shared folder was used


def test_cql_clones_the_actor_for_its_first_steps(tiny_dataset: Path) -> None:
    data = datasets.BehaviourDataset(
        tiny_dataset, env=TINY_ENV, dataset_frames=0, behaviour_frames=0, seed=0, batch_size=16
    )
    spec = make_env(TINY_ENV, 1).action_spec_unbatched
    loss = cql.CQLLoss(tanh_gaussian_actor(3, spec, [8, 8]), q_critic(3, 1, [8, 8]), action_spec=spec)
    wrapped = cql.BCStart(loss, bc_steps=2)
    batch = data.sample()
    torch.manual_seed(0)
    reference = loss(batch.clone())
    for step in range(3):
        torch.manual_seed(0)
        out = wrapped(batch.clone())
        assert "loss_actor_bc" not in out.keys()
        expected = reference["loss_actor_bc" if step < 2 else "loss_actor"]
        torch.testing.assert_close(out["loss_actor"], expected)
    assert int(wrapped.state_dict()["calls"]) == 3  # in the checkpoint: a resumed run switches at the same step


def test_dt_policy_clears_the_history_of_a_new_episode() -> None:
    from tdict import TensorDict

    env_spec = make_env(TINY_ENV, 1).action_spec_unbatched
    algo = dt.DTConfig(context=3, n_embd=8, n_layer=1, n_head=1, dropout=0.0)
    policy = dt.DTPolicy(dt.make_actor(3, env_spec, algo), context=3, rtg_scale=0.1, act_dim=1).eval()
    step = lambda obs, count: TensorDict(
        observation=obs,
        target_return=torch.full((2,), -50.0),  # noqa: E731
        step_count=torch.tensor(count),
        batch_size=[2],
    )
    for t in range(4):
        policy(step(torch.full((2, 3), float(t + 1)), [t, t]))
    first = policy(step(torch.full((2, 3), 9.0), [4, 0]))["action"]
    hist = policy.history
    assert hist["observation"][0, :, 0].tolist() == [3.0, 4.0, 9.0]  # sub-env 0 goes on
    assert hist["observation"][1, :, 0].tolist() == [0.0, 0.0, 9.0]  # sub-env 1 starts an episode
    assert hist["action"][1].abs().sum() == 0 and torch.equal(hist["last_action"], first)
    torch.testing.assert_close(hist["return_to_go"][1], torch.tensor([0.0, 0.0, -5.0]))


# ------------------------------------------------------------------------------- learning runs
@pytest.fixture(scope="module")
def full_dataset(tmp_path_factory) -> Path:
    """The recipes' default dataset for the pendulum, built by the first slow test that needs it."""
    return tmp_path_factory.mktemp("offline_full") / "pendulum"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bc", "iql", "cql", "dt"])
def test_learns_the_pendulum_offline(name: str, tmp_path: Path, full_dataset: Path) -> None:
    """The pendulum preset reaches the recipe's threshold from the default dataset (its behaviour
    policy scores about -150; a random policy about -1200)."""
    cfg = TrainConfig(
        algo=RECIPES[name].Config(dataset_dir=str(full_dataset)),
        env=EnvConfig(name="pendulum"),
        logger=LoggerConfig(backends=["csv"], progress=False),
        runs_dir=str(tmp_path),
        name=name,
    )
    final = RECIPES[name].train(cfg)
    behaviour = json.loads((full_dataset / "rl_replay_dataset.json").read_text())["source"]["behaviour_return"]
    assert final >= RECIPES[name].THRESHOLDS["pendulum"], f"{name}: {final:.1f} (behaviour policy {behaviour:.1f})"
