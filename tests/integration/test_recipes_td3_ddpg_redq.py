"""The TD3, DDPG and REDQ recipes (examples/recipes/): a short run of each writes its run folder and
returns a finite final return; the slow tests train each on the pendulum preset to its threshold."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from recipes import ddpg, redq, td3  # noqa: E402
from recipes.config import CollectorConfig, EnvConfig, LoggerConfig, TrainConfig  # noqa: E402
from recipes.networks import q_critic, tanh_actor  # noqa: E402
from rl_objectives import TD3Loss  # noqa: E402

RECIPES = {"td3": td3, "ddpg": ddpg, "redq": redq}
# small networks and few gradient steps: a smoke run is about the plumbing, not the learning
SMOKE_ALGO = {
    "td3": {"hidden": [64, 64], "utd": 0.5},
    "ddpg": {"hidden": [64, 64], "utd": 0.5},
    "redq": {"hidden": 32, "utd": 0.5},
}


def _smoke_config(name: str, tmp_path: Path) -> TrainConfig:
    return TrainConfig(
        algo=RECIPES[name].Config(**SMOKE_ALGO[name]),
        env=EnvConfig(name="pendulum", eval_envs=2),
        collector=CollectorConfig(frames_per_batch=100, total_frames=300, init_random_frames=100),
        logger=LoggerConfig(backends=["csv"], eval_every=200, progress=False),
        runs_dir=str(tmp_path),
        name=f"{name}_smoke",
    )


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_smoke_run_writes_its_run_folder(name: str, tmp_path: Path) -> None:
    final = RECIPES[name].train(_smoke_config(name, tmp_path))
    assert math.isfinite(final)
    assert -16.3 * 200 <= final <= 0.0  # pendulum rewards lie in [-16.3, 0] per step, 200 steps
    run_dir = tmp_path / f"{name}_smoke"
    for file in (
        "config.json",
        "checkpoint.pt",
        "learning_curve.png",
        "scalars/total_r_evaluation.csv",
        "scalars/final_r_evaluation.csv",
    ):
        assert (run_dir / file).is_file(), f"{file} missing from {sorted(p.name for p in run_dir.iterdir())}"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["algo"]["name"] == name and config["collector"]["total_frames"] == 300
    # the preset and the defaults filled what the smoke config left unset
    assert config["algo"]["gamma"] is not None and config["buffer"]["batch_size"] == 256


def test_recipes_are_registered_and_resolve_the_pendulum_preset() -> None:
    from recipes import RECIPES as ALL
    from recipes.config import resolve

    for name, module in RECIPES.items():
        assert ALL[name] is module and module.Config().name == name
        cfg = resolve(
            TrainConfig(algo=module.Config(), env=EnvConfig(name="pendulum")), module.PRESETS, module.DEFAULTS
        )
        assert all(value is not None for value in vars(cfg.algo).values()), cfg.algo
        assert module.THRESHOLDS["pendulum"] == -200.0
    # RL-zoo's DDPG Pendulum-v1 settings
    preset = ddpg.PRESETS["pendulum"]
    assert preset["algo"]["lr"] == 1e-3 and preset["algo"]["gamma"] == 0.98 and preset["algo"]["hidden"] == [400, 300]
    assert preset["collector"]["total_frames"] == 20_000 and preset["collector"]["init_random_frames"] == 10_000
    assert preset["buffer"]["size"] == 200_000
    # TD3's is the fastest measured to the threshold: RL-zoo's learning rate and gamma, 8 envs, small networks
    preset = td3.PRESETS["pendulum"]
    assert preset["algo"]["lr"] == 1e-3 and preset["algo"]["gamma"] == 0.98 and preset["algo"]["hidden"] == [64, 64]
    assert (
        preset["env"]["num_envs"] == 8
        and preset["algo"]["utd"] == 1.0
        and preset["collector"]["init_random_frames"] == 1_000
    )


def test_td3_updates_the_actor_every_policy_delay_critic_steps() -> None:
    import torch
    from tdict import TensorDict
    from tdict.specs import Bounded

    torch.manual_seed(0)
    spec = Bounded(-2.0, 2.0, shape=(1,))
    actor = tanh_actor(3, spec, [16])
    loss = td3.DelayedPolicyLoss(TD3Loss(actor, q_critic(3, 1, [16]), action_spec=spec, loss_function="l2"), 2)
    loss.td3.make_value_estimator(gamma=0.98)
    optimizer = torch.optim.Adam(loss.parameters(), lr=1e-2, fused=True)  # as the recipe
    batch = TensorDict(
        {
            "observation": torch.randn(8, 3),
            "action": torch.rand(8, 1) * 4 - 2,
            "next": {
                "observation": torch.randn(8, 3),
                "reward": torch.randn(8),
                "done": torch.zeros(8, dtype=torch.bool),
                "terminated": torch.zeros(8, dtype=torch.bool),
            },
        },
        batch_size=[8],
    )
    params = dict(loss.named_parameters())
    actor_weight, critic_weight = (
        params["td3.actor_network.module.0.module.0.weight"],
        params["td3.qvalue_network_params.module.0.weight"],
    )
    for call in range(1, 5):
        actor_before, critic_before = actor_weight.detach().clone(), critic_weight.detach().clone()
        out = loss(batch)
        assert ("loss_actor" in out.keys()) == (call % 2 == 0)
        optimizer.zero_grad(set_to_none=True)
        sum(v for k, v in out.items() if k.startswith("loss")).backward()
        optimizer.step()
        assert not torch.equal(critic_weight, critic_before)  # the critics move at every call
        assert torch.equal(actor_weight, actor_before) == (call % 2 == 1)  # the actor every second one
    assert int(loss.state_dict()["calls"]) == 4  # checkpoints carry the count


def _pendulum_run(name: str, tmp_path: Path, seed: int = 0) -> float:
    cfg = TrainConfig(
        algo=RECIPES[name].Config(),
        env=EnvConfig(name="pendulum"),
        logger=LoggerConfig(progress=False),
        runs_dir=str(tmp_path),
        name=f"{name}_pendulum",
        seed=seed,
    )
    return RECIPES[name].train(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_reaches_its_pendulum_threshold(name: str, tmp_path: Path) -> None:
    """The pendulum preset swings the pendulum up (a random policy scores about -1,200)."""
    final = _pendulum_run(name, tmp_path)
    assert final >= RECIPES[name].THRESHOLDS["pendulum"], f"{name}: final eval return {final:.1f}"
