"""Step-counting transforms on an env whose done flags keep a trailing singleton dim ([*B, 1], the
layout of TorchRL's mock envs), the chain checks of RandomTruncationTransform, TransformedEnv(device=)."""

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Categorical, Composite, Unbounded

from rl_envs import (
    Compose,
    EnvBase,
    PendulumEnv,
    RandomTruncationTransform,
    StepCounter,
    TargetReturn,
    TransformedEnv,
    check_env_specs,
)


class TrailingDoneEnv(EnvBase):
    """Counts its steps; reward and done flags are shaped [*B, 1]; terminates after ``max_count`` steps."""

    def __init__(self, batch_size=(), max_count=100):
        super().__init__(batch_size=batch_size)
        shape = self.batch_size
        self.max_count = max_count
        self.observation_spec = Composite(count=Unbounded(shape=(*shape, 1), dtype=torch.int64), shape=shape)
        self.action_spec = Unbounded(shape=(*shape, 1))
        self.reward_spec = Unbounded(shape=(*shape, 1))
        flag = Categorical(2, shape=(*shape, 1), dtype=torch.bool)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), shape=shape)

    def _reset(self, tensordict=None, **kwargs):
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool)
        count = torch.zeros(*self.batch_size, 1, dtype=torch.int64)
        return TensorDict({"count": count, "done": flag, "terminated": flag.clone()}, self.batch_size)

    def _step(self, tensordict):
        count = tensordict["count"] + 1
        flag = count >= self.max_count
        return TensorDict(
            {"count": count, "reward": torch.zeros(*self.batch_size, 1), "done": flag, "terminated": flag.clone()},
            self.batch_size,
        )

    def _set_seed(self, seed):
        pass


@pytest.mark.parametrize("batch_size", [(), (3,)])
def test_step_counter_follows_a_trailing_done_dim(batch_size):
    env = TransformedEnv(TrailingDoneEnv(batch_size), StepCounter(max_steps=4))
    assert env.observation_spec["step_count"].shape == (*batch_size, 1)
    assert env.full_done_spec["truncated"].shape == (*batch_size, 1)
    check_env_specs(env)
    r = env.rollout(6, break_when_any_done=False)
    assert r["next", "step_count"].shape == (*batch_size, 6, 1)
    assert r["next", "done"].shape == (*batch_size, 6, 1)  # not broadcast against the count
    counts = r["next", "step_count"].reshape(-1, 6)[0].tolist()
    assert counts == [1, 2, 3, 4, 1, 2]
    assert r["next", "truncated"].reshape(-1, 6)[0].tolist() == [False, False, False, True, False, False]
    # our envs: the count stays a per-step scalar (the batch shape)
    assert TransformedEnv(PendulumEnv(batch_size=[2]), StepCounter()).observation_spec["step_count"].shape == (2,)


def test_step_counter_partial_reset_keeps_the_other_counts():
    counter = StepCounter()
    td = TensorDict({"step_count": torch.tensor([[3], [5]]), "_reset": torch.tensor([[True], [False]])}, [2])
    out = counter._reset(td, TensorDict({}, [2]))
    assert out["step_count"].tolist() == [[0], [5]]
    td_flat_mask = TensorDict({"step_count": torch.tensor([[3], [5]]), "_reset": torch.tensor([False, True])}, [2])
    assert counter._reset(td_flat_mask, TensorDict({}, [2]))["step_count"].tolist() == [[3], [0]]
    out = counter._reset(TensorDict({"step_count": torch.tensor([3, 5])}, [2]), TensorDict({}, [2]))
    assert out["step_count"].tolist() == [0, 0]  # no "_reset": every sub-env restarts
    with pytest.raises(NotImplementedError, match="StepCounter cannot be called independently"):
        counter(td)


def test_random_truncation_on_a_trailing_done_dim_and_chain_checks():
    env = TransformedEnv(
        TrailingDoneEnv((2,)), Compose(StepCounter(), RandomTruncationTransform(2, 3, prob=1.0, seed=0))
    )
    check_env_specs(env)
    r = env.rollout(8, break_when_any_done=False)
    assert r["next", "done"].shape == r["next", "truncated"].shape == (2, 8, 1)
    assert (r["next", "step_count"] <= 3).all() and r["next", "truncated"].any()
    with pytest.raises(RuntimeError, match="requires a StepCounter"):
        TransformedEnv(TrailingDoneEnv(), RandomTruncationTransform(1, 5))
    # a StepCounter inside the base env counts too
    TransformedEnv(TransformedEnv(TrailingDoneEnv(), StepCounter()), RandomTruncationTransform(1, 5))
    # before any reset there is no horizon: a step leaves the flags as they are
    t = RandomTruncationTransform(1, 2)
    nxt = TensorDict({"step_count": torch.tensor([4]), "done": torch.tensor([False])}, [])
    assert t._step(TensorDict({}, []), nxt)["done"].tolist() == [False]
    for (low, high), message in (
        ((0, 5), "min_horizon must be >= 1"),
        ((1, 0), "max_horizon must be >= 1"),
        ((6, 5), r"min_horizon \(6\) must be <= max_horizon \(5\)"),
    ):
        with pytest.raises(ValueError, match=message):
            RandomTruncationTransform(low, high)


def test_target_return_without_env_takes_the_reward_shape():
    t = TargetReturn(10.0, mode="reduce")
    td = TensorDict({"next": {"reward": torch.full((3, 2, 1), 2.0)}}, [3, 2])
    reset = t._reset(td, td.empty())
    assert reset["target_return"].shape == (3, 2, 1)
    assert t._step(reset, td["next"])["target_return"].flatten().tolist() == [8.0] * 6


def test_transformed_env_device_argument():
    base = PendulumEnv()
    env = TransformedEnv(base, StepCounter(), device="cpu")
    assert env.device == torch.device("cpu") and env.base_env.device == torch.device("cpu")
    assert env.shape == env.batch_size == torch.Size([])
    assert TransformedEnv(PendulumEnv(batch_size=[3])).shape == torch.Size([3])
