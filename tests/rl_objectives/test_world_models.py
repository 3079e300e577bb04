"""WorldModel / WorldModelWrapper (rl_objectives.modules.world_models), and a DreamerV3 RSSM prior
imagining inside rl_envs' DreamerEnv and WorldModelEnv."""

from __future__ import annotations

import pytest
import torch
from rl_envs import PendulumEnv, TensorDictPrimer, TransformedEnv
from rl_envs.model_based import DreamerEnv, WorldModelEnv
from rl_objectives.modules import MLP, RSSMPriorV3, WorldModel, WorldModelWrapper
from tdict import TensorDict
from tdict.nn import TensorDictModule
from tdict.specs import Unbounded


def _parts(decoder: bool = False):
    torch.manual_seed(0)
    encoder = TensorDictModule(torch.nn.Linear(3, 4), in_keys=["observation"], out_keys=["latent"])
    dynamics = TensorDictModule(MLP(5, 4, depth=0), in_keys=["latent", "action"], out_keys=[("next", "latent")])
    reward = TensorDictModule(torch.nn.Linear(4, 1), in_keys=[("next", "latent")], out_keys=[("next", "reward")])
    done = TensorDictModule(lambda z: z[..., 0] > 10.0, in_keys=[("next", "latent")], out_keys=[("next", "done")])
    dec = TensorDictModule(torch.nn.Linear(4, 3), in_keys=["latent"], out_keys=["reco"]) if decoder else None
    return encoder, dynamics, reward, done, dec


def test_world_model_runs_its_parts_in_order_and_by_name():
    encoder, dynamics, reward, done, decoder = _parts(decoder=True)
    model = WorldModel(encoder, dynamics, reward, done_head=done, decoder=decoder)
    td = TensorDict(observation=torch.randn(2, 3), action=torch.randn(2, 1), batch_size=[2])
    out = model(td.clone())
    with torch.no_grad():
        z = encoder.module(td["observation"])
        z1 = dynamics.module(z, td["action"])
        torch.testing.assert_close(out["latent"], z)
        torch.testing.assert_close(out["next", "latent"], z1)
        torch.testing.assert_close(out["next", "reward"], reward.module(z1))
        torch.testing.assert_close(out["reco"], decoder.module(z))
    assert out["next", "done"].shape == (2,)
    stepped = model.step(TensorDict(latent=z, action=td["action"], batch_size=[2]))
    torch.testing.assert_close(stepped["next", "latent"], z1)
    assert "latent" in model.encode(td.clone()).keys() and "reco" in model.decode(out.clone()).keys()
    assert set(model.in_keys) == {"observation", "action"}
    with pytest.raises(RuntimeError, match="no decoder"):
        WorldModel(encoder, dynamics, reward).decode(out)


def test_world_model_drives_world_model_env():
    encoder, dynamics, reward, _, _ = _parts()
    model = WorldModel(encoder, dynamics, reward)
    env = WorldModelEnv(model, PendulumEnv(), batch_size=[3])
    out = env.rollout(4, tensordict=model.encode(TensorDict(observation=torch.randn(3, 3), batch_size=[3])))
    assert out.batch_size == (3, 4) and out["next", "latent"].shape == (3, 4, 4)
    torch.testing.assert_close(out["latent"][:, 1:], out["next", "latent"][:, :-1])


def test_rssm_prior_imagines_in_dreamer_env():
    prior = RSSMPriorV3(
        action_shape=(1,), hidden_dim=8, rnn_hidden_dim=8, num_categoricals=2, num_classes=3, action_dim=1
    )
    transition = TensorDictModule(prior, in_keys=["state", "belief", "action"], out_keys=["_", "state", "belief"])
    reward = TensorDictModule(MLP(14, 1, depth=1, num_cells=8), in_keys=["state", "belief"], out_keys=["reward"])
    world_model = WorldModelWrapper(transition, reward)
    assert world_model.get_transition_model_operator() is transition and world_model.get_reward_operator() is reward
    base = TransformedEnv(
        PendulumEnv(), TensorDictPrimer(state=Unbounded((6,)), belief=Unbounded((8,)), random=False, default_value=0)
    )
    env = DreamerEnv(world_model, prior_shape=(6,), belief_shape=(8,))
    env.set_specs_from_env(base)
    env.reward_spec = Unbounded((1,))  # the reward head's output keeps its trailing dim
    start = TensorDict(state=torch.zeros(5, 6), belief=torch.zeros(5, 8), batch_size=[5])
    out = env.rollout(6, auto_reset=False, tensordict=env.reset(start))
    assert out.batch_size == (5, 6) and out["next", "state"].shape == (5, 6, 6)
    states = out["next", "state"].reshape(5, 6, 2, 3)
    assert torch.equal(states.sum(-1), torch.ones(5, 6, 2))  # one-hot draws of the prior
    torch.testing.assert_close(out["belief"][:, 1:], out["next", "belief"][:, :-1])
