"""Small envs shared by the rl_envs tests (fixtures return the classes)."""
from __future__ import annotations

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Categorical, Composite, OneHot, Unbounded

from rl_envs import EnvBase


class CountingEnv(EnvBase):
    """Counts up by the action (0..n_actions-1) and terminates when the count reaches ``max_count``.

    Observations: ``"count"`` (int64, also the state read by ``_step``), ``"observation"`` (float32,
    shape [*batch, 3]: count repeated) and, with
    ``pixels=True``, ``"pixels"`` (uint8, [*batch, H, W, 3], every pixel equal to count % 256).
    Reward = the action taken (float32). With ``one_hot=True`` actions are one-hot vectors.
    Deterministic, so tests can predict every value.
    """

    def __init__(self, batch_size=(), max_count: int = 5, n_actions: int = 2, pixels: bool = False,
                 one_hot: bool = False, size: int = 8, device=None):
        super().__init__(batch_size=batch_size, device=device)
        self.max_count, self.n_actions, self.pixels, self.one_hot, self.size = max_count, n_actions, pixels, one_hot, size
        shape = self.batch_size
        obs = {"observation": Unbounded(shape=(*shape, 3)), "count": Unbounded(shape=shape, dtype=torch.int64)}
        if pixels:
            obs["pixels"] = Bounded(0, 255, shape=(*shape, size, size, 3), dtype=torch.uint8)
        self.observation_spec = Composite(obs, shape=shape)
        self.state_spec = Composite(count=Unbounded(shape=shape, dtype=torch.int64), shape=shape)
        self.action_spec = OneHot(n_actions, shape=(*shape, n_actions)) if one_hot else Categorical(n_actions, shape=shape)
        flag = Categorical(2, shape=shape, dtype=torch.bool)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=shape)
        self.reset_count = 0

    def _obs(self, count):
        out = {"observation": count.to(torch.float32).unsqueeze(-1).expand(*count.shape, 3).clone(), "count": count}
        if self.pixels:
            out["pixels"] = (count % 256).to(torch.uint8).reshape(*count.shape, 1, 1, 1).expand(
                *count.shape, self.size, self.size, 3).clone()
        return out

    def _reset(self, tensordict=None, **kwargs):
        self.reset_count += 1
        count = torch.zeros(self.batch_size, dtype=torch.int64)
        done = torch.zeros(self.batch_size, dtype=torch.bool)
        return TensorDict({**self._obs(count), "done": done, "terminated": done.clone(), "truncated": done.clone()},
                          batch_size=self.batch_size)

    def _step(self, tensordict):
        action = tensordict["action"]
        step = action.long().argmax(-1) if self.one_hot else action
        count = tensordict["count"] + step
        terminated = count >= self.max_count
        return TensorDict({**self._obs(count), "reward": step.to(torch.float32), "done": terminated.clone(),
                           "terminated": terminated, "truncated": torch.zeros_like(terminated)},
                          batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


@pytest.fixture
def counting_env():
    """The CountingEnv class (instantiate with the options the test needs)."""
    return CountingEnv
