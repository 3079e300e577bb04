"""BraxEnv / BraxWrapper, checked against brax's own batched envs stepped with the same keys and actions.

Each wrapper jit-compiles its reset and step at first use (a few seconds per brax env on CPU): the
inverted-pendulum tests share one env and one reference, the tests on brax's ``"fast"`` env (trivial
dynamics, deterministic resets) compile in well under a second, and the Ant test is marked slow.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("brax")
import jax  # noqa: E402
from brax import envs  # noqa: E402
from rl_envs import check_env_specs, step_mdp  # noqa: E402
from rl_envs.libs.brax import BraxEnv, BraxWrapper  # noqa: E402
from tdict.specs import Bounded, Unbounded  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _t(x) -> torch.Tensor:
    return torch.from_numpy(np.array(x))


def _actions(env, steps: int, seed: int = 0, scale: float | torch.Tensor = 1.0) -> torch.Tensor:
    """``steps`` reproducible actions in ``[-scale, scale]``, shaped ``[steps, *batch, action_size]``."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand((steps, *env.action_spec.shape), generator=gen) * 2 - 1) * scale


class _Reference:
    """brax's own env as ``brax.envs.create`` builds it (no auto-reset), with jitted reset and step."""

    def __init__(self, name: str, n: int, episode_length: int, frame_skip: int = 1, **kwargs) -> None:
        self.env = envs.create(
            name, episode_length=episode_length, action_repeat=frame_skip, auto_reset=False, batch_size=n, **kwargs
        )
        self.reset, self.step = jax.jit(self.env.reset), jax.jit(self.env.step)

    @staticmethod
    def reset_keys(seed: int, resets: int) -> list:
        """The keys the wrapper's first ``resets`` resets use after ``set_seed(seed)``."""
        key, subs = jax.random.PRNGKey(seed), []
        for _ in range(resets):
            key, sub = jax.random.split(key)
            subs.append(sub)
        return subs


def _assert_step_matches(td, state, batch) -> None:
    """The wrapper's step output ``td`` equals brax's state ``state`` (flattened batch)."""
    done = _t(state.done) != 0
    truncated = _t(state.info["truncation"]) != 0
    torch.testing.assert_close(td["observation"], _t(state.obs).reshape(*batch, -1))
    torch.testing.assert_close(td["reward"], _t(state.reward).reshape(batch))
    assert torch.equal(td["done"], done.reshape(batch))
    assert torch.equal(td["truncated"], truncated.reshape(batch))
    assert torch.equal(td["terminated"], (done & ~truncated).reshape(batch))


# ---------------------------------------------------------------------------------- fast env ("fast")
def test_specs_shapes_and_steps_match_brax_with_a_2d_batch():
    env = BraxEnv("fast", batch_size=[2, 3], episode_length=4)
    assert env.batch_size == torch.Size([2, 3])
    assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == (2, 3, 1)
    assert env.action_spec.dtype == torch.float32
    assert float(env.action_spec.space.low.min()) == -1.0 and float(env.action_spec.space.high.max()) == 1.0
    assert isinstance(env.observation_spec["observation"], Unbounded)
    assert env.observation_spec["observation"].shape == (2, 3, 2)
    assert env.reward_spec.shape == (2, 3)
    assert sorted(env.done_keys) == ["done", "terminated", "truncated"]
    check_env_specs(env)

    ref = _Reference("fast", 6, episode_length=4)
    td = env.reset()
    state = ref.reset(jax.random.PRNGKey(0))  # "fast" resets to zeros whatever the key
    torch.testing.assert_close(td["observation"], _t(state.obs).reshape(2, 3, 2))
    actions = _actions(env, 5)
    for action in actions:
        td["action"] = action
        td = env.step(td)
        state = ref.step(state, jax.numpy.asarray(action.reshape(6, 1).numpy()))
        _assert_step_matches(td["next"], state, env.batch_size)
        td = step_mdp(td)
    # the time limit: truncated at the 4th step, never terminated
    rollout = env.rollout(6, break_when_any_done=False)
    assert rollout["next", "truncated"][..., 3].all() and not rollout["next", "terminated"].any()
    assert rollout["observation"].shape == (2, 3, 6, 2) and rollout["next", "reward"].shape == (2, 3, 6)
    # the auto-reset after the limit starts from the reset observation again
    assert torch.equal(rollout["observation"][..., 4, :], torch.zeros(2, 3, 2))


def test_frame_skip_repeats_as_brax_action_repeat():
    env = BraxEnv("fast", batch_size=[2], episode_length=5, frame_skip=2)
    ref = _Reference("fast", 2, episode_length=5, frame_skip=2)
    td = env.reset()
    state = ref.reset(jax.random.PRNGKey(0))
    actions = torch.tensor([[[1.0], [-1.0]]]).expand(3, 2, 1)
    truncated = []
    for action in actions:
        td["action"] = action.clone()
        td = env.step(td)
        state = ref.step(state, jax.numpy.asarray(action.numpy()))
        _assert_step_matches(td["next"], state, env.batch_size)
        truncated.append(td["next", "truncated"][0].item())
        td = step_mdp(td)
    assert truncated == [False, False, True]  # 2, 4, 6 physics steps against a limit of 5


def test_wrapper_frame_skip_sums_the_rewards_of_the_repeats():
    env = BraxWrapper(envs.get_environment("fast"), batch_size=[2], frame_skip=3)
    assert env.frame_skip == 3
    ref = envs.training.VmapWrapper(envs.get_environment("fast"), batch_size=2)
    step = jax.jit(ref.step)
    td, state = env.reset(), jax.jit(ref.reset)(jax.random.PRNGKey(0))
    for action in torch.tensor([[[1.0], [-1.0]], [[1.0], [1.0]]]):
        td["action"] = action
        td = env.step(td)
        rewards = []
        for _ in range(3):
            state = step(state, jax.numpy.asarray(action.numpy()))
            rewards.append(_t(state.reward))
        torch.testing.assert_close(td["next", "observation"], _t(state.obs))
        torch.testing.assert_close(td["next", "reward"], sum(rewards))
        assert not td["next", "truncated"].any()  # no EpisodeWrapper: no time limit
        td = step_mdp(td)


def test_single_env_dict_observations_and_no_time_limit():
    env = BraxEnv("fast", obs_mode="dict_state", asymmetric_obs=True, episode_length=None)
    assert env.batch_size == torch.Size([])
    assert set(env.observation_keys) == {"state", "privileged_state"}
    assert env.observation_spec["privileged_state"].shape == (4,)
    rollout = env.rollout(3, lambda td: td.set("action", torch.ones(1)))
    assert rollout["state"].shape == (3, 2) and rollout["next", "reward"].shape == (3,)
    # "fast" accelerates by 0.02 per step with a positive action: velocity 0.02, 0.04, 0.06
    torch.testing.assert_close(rollout["next", "state"][:, 1], torch.tensor([0.02, 0.04, 0.06]))
    assert not rollout["next", "done"].any() and not rollout["next", "truncated"].any()


def test_wrapper_accepts_an_episode_wrapper_and_refuses_batching_wrappers():
    base = envs.get_environment("fast")
    env = BraxWrapper(envs.training.EpisodeWrapper(base, 2, 1), batch_size=2)
    assert env.rollout(2, break_when_any_done=False)["next", "truncated"][:, -1].all()
    with pytest.raises(ValueError, match="BraxWrapper: env must be an unbatched brax env without VmapWrapper"):
        BraxWrapper(envs.training.VmapWrapper(base, 2))
    with pytest.raises(ValueError, match="without AutoResetWrapper"):
        BraxWrapper(envs.training.AutoResetWrapper(envs.training.EpisodeWrapper(base, 2, 1)))
    with pytest.raises(TypeError, match=r"BraxWrapper: env must be a brax env \(brax.envs.Env\), got 'fast'"):
        BraxWrapper("fast")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"env_name": "nope"}, ValueError, "BraxEnv: unknown env_name 'nope'; available: .*'ant'"),
        ({"backend": "bullet"}, ValueError, r"BraxEnv: backend must be one of \['generalized'.*got 'bullet'"),
        ({"batch_size": [0]}, ValueError, "BraxEnv: batch_size must be a positive int, got 0"),
        ({"batch_size": "3"}, TypeError, "BraxEnv: batch_size must be a sequence of positive ints"),
        ({"episode_length": 0}, ValueError, "BraxEnv: episode_length must be a positive int or None, got 0"),
        ({"frame_skip": True}, TypeError, "BraxEnv: frame_skip must be a positive int, got True"),
        ({"seed": 1.5}, TypeError, "BraxEnv: seed must be an int or None, got 1.5"),
        ({"from_pixels": True}, NotImplementedError, "from_pixels=True is not supported"),
        ({"requires_grad": True}, NotImplementedError, "requires_grad=True"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    kwargs = {"env_name": "fast", **kwargs}
    with pytest.raises(error, match=match):
        BraxEnv(**kwargs)


def test_bad_calls_raise_before_any_state_change():
    env = BraxEnv("fast", batch_size=[2], episode_length=3)
    td = env.reset(env.full_done_spec.zero().set("_reset", torch.tensor([True, True])))
    with pytest.raises(RuntimeError, match="call reset"):
        BraxEnv("fast", batch_size=[2]).step(td.set("action", torch.zeros(2, 1)))
    with pytest.raises(RuntimeError, match="the first reset must reset every copy"):
        BraxEnv("fast", batch_size=[2]).reset(td.clone().set("_reset", torch.tensor([True, False])))
    state = env.state
    with pytest.raises(ValueError, match=r"'_reset' must have the batch shape \[2\], got \[2, 1\]"):
        env.reset(td.clone().set("_reset", torch.ones(2, 1, dtype=torch.bool)))
    with pytest.raises(TypeError, match=r"unexpected arguments \['options'\]"):
        env.reset(options={})
    with pytest.raises(ValueError, match=r"action 'action': expected shape \[2, 1\]"):
        env.step(td.clone().set("action", torch.zeros(2, 3)))
    assert env.state is state


def test_importing_rl_envs_does_not_import_jax():
    code = (
        "import sys, rl_envs, rl_envs.libs; assert 'jax' not in sys.modules and 'brax' not in sys.modules; "
        "from rl_envs.libs.brax import BraxEnv; assert rl_envs.BraxEnv is BraxEnv and rl_envs.libs.BraxWrapper; "
        "assert 'jax' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_available_envs_is_brax_registry():
    assert {"ant", "inverted_pendulum", "fast"} <= set(BraxEnv.available_envs)


# --------------------------------------------------------------- inverted pendulum (one shared compile)
N, EPISODE = 3, 8


@pytest.fixture(scope="module")
def pendulum():
    return BraxEnv("inverted_pendulum", batch_size=[N], seed=0, episode_length=EPISODE)


@pytest.fixture(scope="module")
def pendulum_ref():
    return _Reference("inverted_pendulum", N, episode_length=EPISODE)


def _run(env, seed, actions, reset_at=None, mask=None):
    """Seeds, resets and steps ``env`` with ``actions``; before step ``reset_at`` resets the copies in ``mask``."""
    env.set_seed(seed)
    td, steps = env.reset(), []
    for t, action in enumerate(actions):
        if t == reset_at:
            td = env.reset(td.set("_reset", mask))
        steps.append(td.select("observation", "done").clone())
        td["action"] = action
        td = step_mdp(env.step(td))
    steps.append(td.select("observation", "done").clone())
    return torch.stack(steps)


def test_resets_use_the_keys_brax_vmap_wrapper_splits(pendulum, pendulum_ref):
    env, ref = pendulum, pendulum_ref
    env.set_seed(7)
    for key in ref.reset_keys(7, 2):  # two resets in a row: the key advances
        td = env.reset()
        torch.testing.assert_close(td["observation"], _t(ref.reset(key).obs))
        assert not (td["done"] | td["terminated"] | td["truncated"]).any()


def test_same_seed_same_rollout(pendulum):
    env = pendulum
    actions = _actions(env, 12, seed=2)

    def run(seed):
        env.set_seed(seed)
        return env.rollout(12, actions=actions.clone(), break_when_any_done=False)

    first, again, other = run(3), run(3), run(4)
    assert torch.equal(first["observation"], again["observation"])
    assert torch.equal(first["next", "reward"], again["next", "reward"])
    assert torch.equal(first["next", "done"], again["next", "done"])
    assert not torch.equal(first["observation"][:, 0], other["observation"][:, 0])
    assert env.set_seed(3) == 4  # one random stream: the next env's seed


def test_partial_reset_resets_only_the_masked_copies(pendulum):
    env = pendulum
    actions = _actions(env, 5, seed=3, scale=0.1)
    mask = torch.tensor([True, False, True])
    plain = _run(env, 11, actions)
    partial = _run(env, 11, actions, reset_at=3, mask=mask)
    env.set_seed(11)
    env.reset()
    second_reset = env.reset()["observation"]  # the keys of the partial reset
    # before the reset the runs agree; the reset copies restart from the second reset's states ...
    assert torch.equal(partial[:3]["observation"], plain[:3]["observation"])
    torch.testing.assert_close(partial[3]["observation"][mask], second_reset[mask])
    # ... the other copy goes on as if nothing happened
    assert torch.equal(partial[:, 1]["observation"], plain[:, 1]["observation"])
    assert not torch.equal(partial[4]["observation"][mask], plain[4]["observation"][mask])
    # a bad mask changes nothing: neither the state nor the key the next reset draws from
    env.set_seed(11)
    td = env.reset()
    state = env.state
    with pytest.raises(ValueError, match=r"'_reset' must have the batch shape \[3\], got \[3, 2\]"):
        env.reset(td.clone().set("_reset", torch.ones(N, 2, dtype=torch.bool)))
    assert env.state is state
    torch.testing.assert_close(env.reset()["observation"], second_reset)


def test_rollout_auto_resets_done_copies(pendulum):
    env = pendulum
    env.set_seed(0)
    rollout = env.rollout(2 * EPISODE + 2, break_when_any_done=False)
    done = rollout["next", "done"][:, :-1]
    assert done.any()
    # a copy that ended restarts from the reset distribution: every coordinate within brax's +-0.01 noise
    restarted = rollout["observation"][:, 1:][done]
    assert restarted.abs().max() <= 0.01


@pytest.mark.slow
def test_rollout_matches_brax_with_the_same_keys_and_actions(pendulum, pendulum_ref):
    env, ref = pendulum, pendulum_ref
    env.set_seed(7)
    td = env.reset()
    state = ref.reset(ref.reset_keys(7, 1)[0])
    flags = []
    # copy 0 pushes hard (the pole falls: terminated), copy 1 not at all (it lasts: truncated)
    for action in _actions(env, EPISODE + 2, seed=1, scale=torch.tensor([[1.0], [0.0], [0.1]])):
        td["action"] = action
        td = env.step(td)
        state = ref.step(state, jax.numpy.asarray(action.numpy()))
        _assert_step_matches(td["next"], state, env.batch_size)
        flags.append(td["next"].select("terminated", "truncated").clone())
        td = step_mdp(td)
    assert any(f["terminated"].any() for f in flags) and any(f["truncated"].any() for f in flags)


# -------------------------------------------------------------------------------------------- ant (slow)
@pytest.mark.slow
def test_ant_matches_brax_with_frame_skip():
    env = BraxEnv("ant", batch_size=[2], seed=5, episode_length=6, frame_skip=2)
    ref = _Reference("ant", 2, episode_length=6, frame_skip=2)
    assert env.observation_spec["observation"].shape == (2, 27) and env.action_spec.shape == (2, 8)
    td = env.reset()
    state = ref.reset(ref.reset_keys(5, 1)[0])
    torch.testing.assert_close(td["observation"], _t(state.obs))
    for action in _actions(env, 4, seed=4):
        td["action"] = action
        td = env.step(td)
        state = ref.step(state, jax.numpy.asarray(action.numpy()))
        _assert_step_matches(td["next"], state, env.batch_size)
        td = step_mdp(td)
    assert td["truncated"].all()  # 3 steps of 2 physics steps reach the limit of 6
