"""max_frames_per_traj: the step counts it records (TorchRL's StepCounter) and done flags with a feature dim;
CloudpickleWrapper."""

from __future__ import annotations

import pickle

import pytest
import torch
from rl_collect import CloudpickleWrapper, Collector
from rl_envs import EnvBase, PendulumEnv
from tdict import TensorDict
from tdict.specs import Categorical, Composite, Unbounded

TRAJ = ("collector", "traj_ids")


class ColumnDoneEnv(EnvBase):
    """TorchRL-style flags with a trailing dim: done/terminated/truncated are ``[*batch, 1]``; never ends."""

    def __init__(self, batch_size=(2,)):
        super().__init__(batch_size=batch_size)
        shape = self.batch_size
        self.observation_spec = Composite(obs=Unbounded(shape=(*shape, 1)), shape=shape)
        self.action_spec = Unbounded(shape=(*shape, 1))
        self.reward_spec = Unbounded(shape=(*shape, 1))
        flag = Categorical(2, shape=(*shape, 1), dtype=torch.bool)
        self.full_done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=shape)

    def _flags(self):
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        return {"done": flag, "terminated": flag.clone(), "truncated": flag.clone()}

    def _reset(self, tensordict=None, **kwargs):
        return TensorDict(obs=torch.zeros(*self.batch_size, 1), **self._flags(), batch_size=self.batch_size)

    def _step(self, tensordict):
        obs = tensordict["obs"] + 1
        return TensorDict(obs=obs, reward=obs.clone(), **self._flags(), batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


def test_max_frames_per_traj_records_step_counts():
    collector = Collector(PendulumEnv(seed=0), None, frames_per_batch=7, total_frames=7, max_frames_per_traj=3)
    batch = next(iter(collector))
    assert batch["step_count"].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert batch["next", "step_count"].tolist() == [1, 2, 3, 1, 2, 3, 1]
    assert batch["step_count"].dtype == torch.int64
    assert batch["next", "truncated"].tolist() == [False, False, True, False, False, True, False]
    assert batch[TRAJ].tolist() == [0, 0, 0, 1, 1, 1, 2]


def test_column_done_flags_are_truncated_per_sub_env():
    collector = Collector(ColumnDoneEnv(), None, frames_per_batch=10, total_frames=10, max_frames_per_traj=2)
    batch = next(iter(collector))
    assert batch.batch_size == (2, 5)
    # counts and truncation flags have the shape of the env's done flag ([*batch, 1]), not [*batch, 2]
    assert batch["next", "truncated"].shape == (2, 5, 1) and batch["next", "step_count"].shape == (2, 5, 1)
    assert batch["next", "truncated"][..., 0].tolist() == [[False, True, False, True, False]] * 2
    assert batch["next", "done"][..., 0].tolist() == [[False, True, False, True, False]] * 2
    assert batch["next", "step_count"][..., 0].tolist() == [[1, 2, 1, 2, 1]] * 2
    assert batch["obs"][..., 0].tolist() == [[0.0, 1.0, 0.0, 1.0, 0.0]] * 2  # reset after each cut
    assert batch[TRAJ].tolist() == [[0, 0, 2, 2, 4], [1, 1, 3, 3, 5]]


def test_without_max_frames_per_traj_no_step_count():
    batch = next(iter(Collector(PendulumEnv(seed=0), None, frames_per_batch=4, total_frames=4)))
    assert "step_count" not in batch.keys() and "step_count" not in batch["next"].keys()


def _scale(x, factor=1):
    return x * factor


def test_cloudpickle_wrapper_calls_and_pickles():
    offset = 3
    wrapped = CloudpickleWrapper(lambda x, y=0: x + y + offset, y=10)
    assert wrapped(1) == 14 and wrapped(1, y=0) == 4  # the call's keyword wins
    restored = pickle.loads(pickle.dumps(wrapped))
    assert isinstance(restored, CloudpickleWrapper) and restored(2) == 15
    assert CloudpickleWrapper(wrapped) is wrapped
    by_ref = CloudpickleWrapper(_scale, factor=2)
    assert pickle.loads(pickle.dumps(by_ref))(4) == 8
    env = PendulumEnv(seed=0)
    policy = CloudpickleWrapper(env.rand_action)  # a bound method, as TorchRL's tests wrap
    assert policy.fn.__self__ is env
    assert policy(env.reset())["action"].shape == env.action_spec.shape
    with pytest.raises(TypeError, match="fn must be callable"):
        CloudpickleWrapper(3)
