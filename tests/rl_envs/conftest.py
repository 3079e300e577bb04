"""Small envs shared by the rl_envs tests (fixtures return the classes)."""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, OneHot, Unbounded

from rl_envs import EnvBase, PendulumEnv


class CountingEnv(EnvBase):
    """Counts up by the action (0..n_actions-1) and terminates when the count reaches ``max_count``.

    Observations: ``"count"`` (int64, also the state read by ``_step``), ``"observation"`` (float32,
    shape [*batch, 3]: count repeated) and, with
    ``pixels=True``, ``"pixels"`` (uint8, [*batch, H, W, 3], every pixel equal to count % 256).
    Reward = the action taken (float32). With ``one_hot=True`` actions are one-hot vectors.
    Deterministic, so tests can predict every value.
    """

    def __init__(
        self,
        batch_size=(),
        max_count: int = 5,
        n_actions: int = 2,
        pixels: bool = False,
        one_hot: bool = False,
        size: int = 8,
        device=None,
    ):
        super().__init__(batch_size=batch_size, device=device)
        self.max_count, self.n_actions, self.pixels, self.one_hot, self.size = (
            max_count,
            n_actions,
            pixels,
            one_hot,
            size,
        )
        shape = self.batch_size
        obs = {"observation": Unbounded(shape=(*shape, 3)), "count": Unbounded(shape=shape, dtype=torch.int64)}
        if pixels:
            obs["pixels"] = Bounded(0, 255, shape=(*shape, size, size, 3), dtype=torch.uint8)
        self.observation_spec = Composite(obs, shape=shape)
        self.state_spec = Composite(count=Unbounded(shape=shape, dtype=torch.int64), shape=shape)
        self.action_spec = (
            OneHot(n_actions, shape=(*shape, n_actions)) if one_hot else Categorical(n_actions, shape=shape)
        )
        flag = Categorical(2, shape=shape, dtype=torch.bool)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=shape)
        self.reset_count = 0

    def _obs(self, count):
        out = {"observation": count.to(torch.float32).unsqueeze(-1).expand(*count.shape, 3).clone(), "count": count}
        if self.pixels:
            out["pixels"] = (
                (count % 256)
                .to(torch.uint8)
                .reshape(*count.shape, 1, 1, 1)
                .expand(*count.shape, self.size, self.size, 3)
                .clone()
            )
        return out

    def _reset(self, tensordict=None, **kwargs):
        self.reset_count += 1
        count = torch.zeros(self.batch_size, dtype=torch.int64)
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        return TensorDict(
            {**self._obs(count), "done": done, "terminated": done.clone(), "truncated": done.clone()},
            batch_size=self.batch_size,
        )

    def _step(self, tensordict):
        action = tensordict["action"]
        step = action.long().argmax(-1) if self.one_hot else action
        count = tensordict["count"] + step
        terminated = count >= self.max_count
        return TensorDict(
            {
                **self._obs(count),
                "reward": step.to(torch.float32),
                "done": terminated.clone(),
                "terminated": terminated,
                "truncated": torch.zeros_like(terminated),
            },
            batch_size=self.batch_size,
        )

    def _set_seed(self, seed):
        pass


class RecordingPendulum(PendulumEnv):
    """A PendulumEnv that records (in ``.actions``) the action every ``_step`` call receives."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.actions = []

    def _step(self, tensordict):
        self.actions.append(tensordict["action"].clone())
        return super()._step(tensordict)


@pytest.fixture
def recording_pendulum():
    """The RecordingPendulum class (a PendulumEnv that records the actions its ``_step`` receives)."""
    return RecordingPendulum


@pytest.fixture
def counting_env():
    """The CountingEnv class (instantiate with the options the test needs)."""
    return CountingEnv


# ----------------------------------------------------------------------------- shared checks
# Test modules are imported with --import-mode=importlib and cannot import each other, so the helpers shared by the
# transform tests are fixtures that return functions.
def _as_tuple(key):
    return (key,) if isinstance(key, str) else tuple(key)


def _assert_specs_truthful(env, rollout, check_action=True):
    """Every rollout value lies in its spec, and ``fake_tensordict()`` matches a real step (keys, shapes, dtypes).

    ``rollout`` has the env's batch dims followed by the time dim. Root entries are checked against the observation,
    state, done and (unless ``check_action=False``) action specs; ``"next"`` entries against the observation, reward
    and done specs. ``check_action=False`` is for rollouts whose actions were valid under an earlier spec (e.g. an
    action mask that changes each step).
    """
    nb = len(env.batch_size)
    steps = [rollout[(slice(None),) * nb + (t,)] for t in range(rollout.batch_size[nb])]
    fake = env.fake_tensordict()
    real = steps[0]
    fake_keys, real_keys = set(fake.keys(True, True)), set(real.keys(True, True))
    assert fake_keys == real_keys, (
        f"fake_tensordict() keys differ from a real step: only in fake {sorted(fake_keys - real_keys)}, "
        f"only in the real step {sorted(real_keys - fake_keys)}"
    )
    for key in fake_keys:
        assert fake[key].shape == real[key].shape, (
            f"{key}: fake_tensordict() shape {tuple(fake[key].shape)} != real step shape {tuple(real[key].shape)}"
        )
        assert fake[key].dtype == real[key].dtype, (
            f"{key}: fake_tensordict() dtype {fake[key].dtype} != real step dtype {real[key].dtype}"
        )
    root_specs = [env.full_observation_spec, env.full_state_spec, env.full_done_spec]
    if check_action:
        root_specs.append(env.full_action_spec)
    next_specs = [env.full_observation_spec, env.full_reward_spec, env.full_done_spec]
    for t, step in enumerate(steps):
        for where, specs in (((), root_specs), (("next",), next_specs)):
            for spec in specs:
                for key, leaf in spec.items(True, True):
                    full = where + _as_tuple(key)
                    value = step.get(full, None)
                    assert value is not None, f"{full} is in the specs but missing from the rollout"
                    assert leaf.is_in(value), f"{full} at step {t} is outside its spec {leaf}: {value}"


@pytest.fixture
def specs_truthful():
    """``specs_truthful(env, rollout, check_action=True)``: asserts the rollout lies in the env's specs and that
    ``env.fake_tensordict()`` has exactly the keys, shapes and dtypes of a real step."""
    return _assert_specs_truthful


def _assert_added_keys_match(env):
    """The keys the transforms of ``env`` add to a real step are exactly those they add to fake_tensordict()."""
    base = env.base_env
    real = env.rand_step(env.reset())
    real_base = base.rand_step(base.reset())
    added_real = set(real.keys(True, True)) - set(real_base.keys(True, True))
    added_fake = set(env.fake_tensordict().keys(True, True)) - set(base.fake_tensordict().keys(True, True))
    assert added_real == added_fake, (
        f"keys added to a real step {sorted(added_real)} != keys added to fake_tensordict() {sorted(added_fake)}"
    )


@pytest.fixture
def added_keys_match():
    """``added_keys_match(transformed_env)``: the transforms add the same keys to a real step and to fake_tensordict()."""
    return _assert_added_keys_match


def _all_in(spec, value):
    """Every time slice of a batched rollout entry ``[N, T, ...]`` is inside the spec ``[N, ...]``."""
    return all(spec.is_in(value[:, t]) for t in range(value.shape[1]))


@pytest.fixture
def all_in():
    """``all_in(spec, value)``: True when every time slice ``value[:, t]`` of a ``[N, T, ...]`` entry is in ``spec``."""
    return _all_in


def _fixed_policy(actions, key="action"):
    """A policy that writes (a copy of) ``actions`` under ``key`` at every step."""

    def policy(td):
        return td.set(key, actions.clone())

    return policy


@pytest.fixture
def fixed_policy():
    """``fixed_policy(actions, key="action")``: a policy that writes a copy of ``actions`` at every step."""
    return _fixed_policy
