"""The multi-agent recipes (examples/recipes/mappo.py, ippo.py, qmix.py) on VMAS navigation (3 agents).

Fast tests: a few hundred frames through ``train`` (run folder, resolved presets, per-agent keys,
the critic's centralisation, exploration and target-update counters), the VMAS task's layout that
the recipes rely on (team reward at the root, the time limit in the agents' done flags), and each
threshold against a random policy. Slow tests: the navigation preset reaches the recipe's threshold
(a random policy's team return is about -0.6 with continuous actions, -0.8 with discrete ones; one
episode's return spreads by about 1.6 around that).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("vmas")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))

from recipes import ippo, mappo, qmix  # noqa: E402
from recipes.config import CollectorConfig, EnvConfig, LoggerConfig, TrainConfig  # noqa: E402
from recipes.envs import make_env  # noqa: E402

RUN_FILES = (
    "config.json",
    "checkpoint.pt",
    "learning_curve.png",
    "scalars/total_r_evaluation.csv",
    "scalars/final_r_evaluation.csv",
)


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _quick(algo, tmp_path: Path, *, frames: int = 160, batch: int = 80) -> TrainConfig:
    """A short navigation run: 4 sub-envs, 20-step episodes, 2 evaluation episodes, CSV logs only."""
    return TrainConfig(
        algo=algo,
        env=EnvConfig(name="navigation", num_envs=4, max_steps=20, eval_envs=2),
        collector=CollectorConfig(frames_per_batch=batch, total_frames=frames),
        logger=LoggerConfig(backends=["csv"], eval_every=batch, progress=False),
        runs_dir=str(tmp_path),
        name="quick",
    )


def _check_run(run_dir: Path, final: float, frames: int) -> dict:
    for name in RUN_FILES:
        assert (run_dir / name).is_file(), (
            f"{name} missing; the run folder holds {sorted(p.name for p in run_dir.rglob('*'))}"
        )
    assert math.isfinite(final)
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert state["state"]["collected_frames"] == frames
    return state


def _random_return(discrete: bool, episodes: int = 200) -> float:
    from rl_envs import RandomPolicy
    from rl_objectives.trainers import evaluate_episodes

    env = make_env(EnvConfig(name="navigation"), episodes, discrete=discrete)
    env.set_seed(0)
    return float(evaluate_episodes(env, RandomPolicy(env.full_action_spec), max_steps=100).mean())


# ---------------------------------------------------------------------------- the task
def test_navigation_layout_the_recipes_rely_on() -> None:
    env = make_env(EnvConfig(name="navigation", max_steps=5), 3)
    env.set_seed(0)
    rollout = env.rollout(5)
    agents_reward = rollout["next", "agents", "reward"]
    assert agents_reward.shape == (3, 5, 3)
    torch.testing.assert_close(rollout["next", "reward"], agents_reward.mean(-1))  # the team reward
    # the time limit ends the episode for every agent, not only at the root
    assert rollout["next", "truncated"][:, -1].all() and rollout["next", "agents", "done"][:, -1].all()
    assert not rollout["next", "agents", "done"][:, :-1].any()


def test_thresholds_are_clearly_above_a_random_policy() -> None:
    continuous, discrete = _random_return(False), _random_return(True)
    assert -1.5 < continuous < 0 and -1.5 < discrete < 0, (continuous, discrete)
    assert mappo.THRESHOLDS["navigation"] > continuous + 1.5 and ippo.THRESHOLDS["navigation"] > continuous + 1.5
    assert qmix.THRESHOLDS["navigation"] > discrete + 1.5


# ---------------------------------------------------------------------------- quick runs
@pytest.mark.parametrize("recipe", [mappo, ippo], ids=["mappo", "ippo"])
def test_ppo_family_quick_run(recipe, tmp_path: Path) -> None:
    algo = recipe.Config(epochs=2, minibatch=40, hidden=16)
    final = recipe.train(_quick(algo, tmp_path))
    run_dir = tmp_path / "quick"
    state = _check_run(run_dir, final, 160)
    resolved = json.loads((run_dir / "config.json").read_text())
    assert resolved["algo"]["name"] == recipe.Config.name and resolved["algo"]["lr"] == 3e-4
    assert resolved["algo"]["centralised_critic"] is (recipe is mappo)
    assert state["state"]["_optim_count"] == 2 * 2 * (80 // 40)  # batches x epochs x minibatches


@pytest.mark.parametrize("centralised", [True, False], ids=["mappo", "ippo"])
def test_critic_reads_every_agent_only_when_centralised(centralised: bool) -> None:
    env = make_env(EnvConfig(name="navigation"), 2)
    critic = mappo.make_critic(env, 16, centralised)
    td = env.reset()
    value = critic(td.clone())["agents", "state_value"]
    assert value.shape == (2, 3)  # one value per agent, no trailing 1
    td["agents", "observation"][:, 1] += 1.0  # another agent's observation changes
    moved = critic(td)["agents", "state_value"]
    assert bool((moved[:, 0] != value[:, 0]).all()) is centralised


def test_qmix_quick_run(tmp_path: Path) -> None:
    algo = qmix.QMIXConfig(epochs=1, hidden=16)
    cfg = _quick(algo, tmp_path)
    cfg.buffer.size, cfg.buffer.batch_size = 1_000, 40
    final = qmix.train(cfg)
    run_dir = tmp_path / "quick"
    state = _check_run(run_dir, final, 160)
    resolved = json.loads((run_dir / "config.json").read_text())
    assert resolved["algo"]["gamma"] == 0.9 and resolved["algo"]["mixer"] == "qmix"
    assert state["state"]["_optim_count"] == 2 * (80 // 40)  # epochs x batch / buffer.batch_size per batch
    # epsilon reached eps_end after explore_fraction (0.5) of the frames: the count stops there
    assert state["anneal_exploration"] == {"anneal_counts": [80]}


def test_qmix_mixes_the_agents_greedy_values() -> None:
    env = make_env(EnvConfig(name="navigation"), 4, discrete=True)
    qnet = qmix.make_qnet(env, 16)
    td = qnet(env.reset())
    assert td["agents", "action"].shape == (4, 3) and td["agents", "action_value"].shape == (4, 3, 9)
    env.step(td)  # the env takes the per-agent indices
    for kind in ("qmix", "vdn"):
        team = qmix.make_mixer(env, kind, 8)(td.clone())["chosen_action_value"]
        assert team.shape == (4,)
    torch.testing.assert_close(
        qmix.make_mixer(env, "vdn", 8)(td)["chosen_action_value"], td["agents", "chosen_action_value"].sum(-1)
    )
    with pytest.raises(ValueError, match="algo.mixer"):
        qmix.make_mixer(env, "sum", 8)


# ---------------------------------------------------------------------------- learning
def _preset(recipe, tmp_path: Path) -> TrainConfig:
    return TrainConfig(
        algo=recipe.Config(),
        env=EnvConfig(name="navigation"),
        logger=LoggerConfig(backends=["csv"], progress=False),
        runs_dir=str(tmp_path),
        name="preset",
    )


@pytest.mark.slow
@pytest.mark.parametrize("recipe", [mappo, ippo, qmix], ids=["mappo", "ippo", "qmix"])
def test_recipe_reaches_its_threshold_on_navigation(recipe, tmp_path: Path) -> None:
    """The navigation preset (seed 0) ends above the threshold; a random policy scores about -0.6 (-0.8 discrete)."""
    final = recipe.train(_preset(recipe, tmp_path))
    assert final >= recipe.THRESHOLDS["navigation"], final
