"""Model-based envs (rl_envs.model_based): ModelBasedEnvBase, WorldModelEnv and DreamerEnv stepped
against their models called by hand, specs taken from a real env, resets, errors."""

from __future__ import annotations

import pytest
import torch
from rl_envs import PendulumEnv, TensorDictPrimer, TransformedEnv
from rl_envs.model_based import DreamerDecoder, DreamerEnv, ModelBasedEnvBase, WorldModelEnv
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictSequential
from tdict.specs import Composite, Unbounded


class _Linear(torch.nn.Module):
    """``(z, a) -> (W [z, a] + b, reward)``: a tiny learnt-looking transition."""

    def __init__(self, latent: int, action: int) -> None:
        super().__init__()
        self.net = torch.nn.Linear(latent + action, latent)
        self.reward = torch.nn.Linear(latent, 1)

    def forward(self, z, a):
        nxt = torch.tanh(self.net(torch.cat([z, a], -1)))
        return nxt, self.reward(nxt).squeeze(-1)


class _Imagined(ModelBasedEnvBase):
    def __init__(self, world_model, **kwargs):
        super().__init__(world_model, **kwargs)
        self.observation_spec = Composite(hidden=Unbounded((3,)))
        self.state_spec = Composite(hidden=Unbounded((3,)))
        self.action_spec = Unbounded((1,))

    def _reset(self, tensordict=None, **kwargs):
        batch = tensordict.batch_size if tensordict is not None else torch.Size([])
        return TensorDict(hidden=torch.ones(*batch, 3), batch_size=batch)


def _model():
    torch.manual_seed(0)
    return _Linear(3, 1)


def test_model_based_env_steps_its_model_on_any_batch():
    model = _model()
    env = _Imagined(TensorDictModule(model, in_keys=["hidden", "action"], out_keys=["hidden", "reward"]))
    assert not env.batch_locked
    actions = torch.randn(4, 5, 1)
    out = env.rollout(4, actions=list(actions.unbind(0)), tensordict=TensorDict(batch_size=[5]))
    assert out.batch_size == (5, 4) and out["next", "reward"].shape == (5, 4)
    z = torch.ones(5, 3)
    with torch.no_grad():
        for t in range(4):
            z, r = model(z, actions[t])
            torch.testing.assert_close(out["next", "hidden"][:, t], z)
            torch.testing.assert_close(out["next", "reward"][:, t], r)
    assert not out["next", "done"].any()


def test_model_based_env_calls_the_model_with_given_params():
    model = _model()
    module = TensorDictModule(model, in_keys=["hidden", "action"], out_keys=["hidden", "reward"])
    params = [torch.zeros_like(p) for p in module.parameters()]
    env = _Imagined(module, params=params)
    td = env.step(env.reset().set("action", torch.ones(1)))
    torch.testing.assert_close(td["next", "hidden"], torch.zeros(3))  # tanh(0 W + 0)
    assert any(p.abs().sum() > 0 for p in module.parameters())  # the module's own weights untouched
    with pytest.raises(ValueError, match="got 1 tensors"):
        _Imagined(module, params=params[:1]).step(env.reset().set("action", torch.ones(1)))


def test_model_based_env_needs_a_reset_and_takes_a_real_env_specs():
    class NoReset(ModelBasedEnvBase):
        pass

    env = NoReset(torch.nn.Identity())
    with pytest.raises(NotImplementedError, match="_reset"):
        env.reset()
    env.set_specs_from_env(PendulumEnv(batch_size=[2]))
    assert env.batch_size == (2,) and env.action_spec == PendulumEnv(batch_size=[2]).action_spec


class _World:
    """A world model by duck typing: encode + step_module, an optional done head."""

    def __init__(self, done_after: float | None = None) -> None:
        torch.manual_seed(1)
        self.encoder = torch.nn.Linear(3, 4)
        self.dynamics = _Linear(4, 1)
        self.encode = TensorDictModule(self.encoder, in_keys=["observation"], out_keys=["latent"])
        modules = [
            TensorDictModule(
                self.dynamics, in_keys=["latent", "action"], out_keys=[("next", "latent"), ("next", "reward")]
            )
        ]
        if done_after is not None:
            modules.append(
                TensorDictModule(
                    lambda z: z[..., 0] > done_after, in_keys=[("next", "latent")], out_keys=[("next", "done")]
                )
            )
        self.step_module = TensorDictSequential(*modules)


def test_world_model_env_rollout_equals_the_model_stepped_by_hand():
    world = _World()
    env = WorldModelEnv(world, PendulumEnv(), batch_size=[3])
    assert env.batch_size == (3,) and env.observation_spec["latent"].shape == (3, 4)
    assert env.action_spec.shape == (3, 1) and env.reward_spec.shape == (3,)
    obs = TensorDict(observation=torch.randn(3, 3), batch_size=[3])
    start = world.encode(obs)
    actions = torch.rand(6, 3, 1) * 4 - 2
    out = env.rollout(6, actions=list(actions.unbind(0)), tensordict=start)
    assert out.batch_size == (3, 6)
    with torch.no_grad():
        z = world.encoder(obs["observation"])
        for t in range(6):
            torch.testing.assert_close(out["latent"][:, t], z)
            z, r = world.dynamics(z, actions[t])
            torch.testing.assert_close(out["next", "latent"][:, t], z)
            torch.testing.assert_close(out["next", "reward"][:, t], r)
    assert not out["next", "done"].any()  # no done head: never done


def test_world_model_env_done_head_ends_the_rollout_and_reset_needs_a_latent():
    env = WorldModelEnv(_World(done_after=-2.0), PendulumEnv(), batch_size=[2])  # tanh > -2: done at once
    start = env.world_model_full.encode(TensorDict(observation=torch.zeros(2, 3), batch_size=[2]))
    out = env.rollout(5, tensordict=start)
    assert out.batch_size == (2, 1) and out["next", "done"].all()
    with pytest.raises(RuntimeError, match="starting latent under 'latent'"):
        env.reset()
    with pytest.raises(TypeError, match="encode\\(\\) and step_module"):
        WorldModelEnv(torch.nn.Identity(), PendulumEnv())


def _dreamer_base() -> TransformedEnv:
    return TransformedEnv(
        PendulumEnv(), TensorDictPrimer(state=Unbounded((6,)), belief=Unbounded((2,)), random=False, default_value=0)
    )


class _RSSMStep(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.belief = torch.nn.Linear(6 + 2 + 1, 2)
        self.state = torch.nn.Linear(2, 6)
        self.reward = torch.nn.Linear(8, 1)

    def forward(self, state, belief, action):
        belief = torch.tanh(self.belief(torch.cat([state, belief, action], -1)))
        state = torch.tanh(self.state(belief))
        return state, belief, self.reward(torch.cat([state, belief], -1)).squeeze(-1)


def test_dreamer_env_imagines_a_whole_horizon_from_given_latents():
    step = _RSSMStep()
    env = DreamerEnv(
        TensorDictModule(step, in_keys=["state", "belief", "action"], out_keys=["state", "belief", "reward"]),
        prior_shape=(6,),
        belief_shape=(2,),
    )
    env.set_specs_from_env(_dreamer_base())
    assert set(env.state_spec.keys()) == {"state", "belief"}
    start = TensorDict(state=torch.randn(4, 6), belief=torch.randn(4, 2), batch_size=[4])
    actions = torch.rand(7, 4, 1) * 4 - 2
    out = env.rollout(7, actions=list(actions.unbind(0)), auto_reset=False, tensordict=env.reset(start))
    assert out.batch_size == (4, 7) and not out["next", "done"].any()
    s, b = start["state"], start["belief"]
    with torch.no_grad():
        for t in range(7):
            s, b, r = step(s, b, actions[t])
            torch.testing.assert_close(out["next", "state"][:, t], s)
            torch.testing.assert_close(out["next", "belief"][:, t], b)
            torch.testing.assert_close(out["next", "reward"][:, t], r)
    random_start = env.reset()
    assert random_start["state"].shape == (6,) and random_start["belief"].shape == (2,)
    done = TensorDict(state=s, belief=b, done=torch.ones(4, dtype=torch.bool), batch_size=[4])
    assert env.maybe_reset(done) is done  # imagined episodes are never reset


def test_dreamer_env_errors_and_decoder():
    env = DreamerEnv(torch.nn.Identity(), (6,), (2,))
    with pytest.raises(KeyError, match="state"):
        env.set_specs_from_env(PendulumEnv())
    with pytest.raises(ValueError, match="no obs_decoder"):
        env.decode_obs(TensorDict())
    decoder = TensorDictModule(lambda s: s.sum(-1, keepdim=True), in_keys=["state"], out_keys=["pixels"])
    env = DreamerEnv(
        TensorDictModule(_RSSMStep(), in_keys=["state", "belief", "action"], out_keys=["state", "belief", "reward"]),
        (6,),
        (2,),
        obs_decoder=decoder,
    )
    env.set_specs_from_env(_dreamer_base())
    decoded = TransformedEnv(env, DreamerDecoder())
    start = TensorDict(state=torch.randn(6), belief=torch.randn(2))
    out = decoded.rollout(3, auto_reset=False, tensordict=decoded.reset(start))
    torch.testing.assert_close(out["next", "pixels"], out["next", "state"].sum(-1, keepdim=True))
    torch.testing.assert_close(env.decode_obs(start.clone())["pixels"], start["state"].sum(-1, keepdim=True))
