"""Collector arguments and helpers with TorchRL's names: policy factories, lazy RandomPolicy, hooks,
stats, len, version tracking, set_truncated, auto-wrapping, fake_tensordict, replay-buffer writes."""

from __future__ import annotations

import json

import pytest
import torch
from rl_collect import Collector, split_trajectories
from rl_envs import CartPoleEnv, PendulumEnv, RandomPolicy, StepCounter, TransformedEnv
from rl_replay import LazyTensorStorage, ReplayBuffer
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn


def _policy(value: float = 0.5) -> TensorDictModule:
    module = nn.Linear(3, 1)
    with torch.no_grad():
        module.weight.zero_()
        module.bias.fill_(value)
    return TensorDictModule(module, in_keys=["observation"], out_keys=["action"])


def test_policy_factory_builds_the_policy():
    c = Collector(PendulumEnv, policy_factory=lambda: _policy(0.25), frames_per_batch=4, total_frames=4)
    (batch,) = list(c)
    assert torch.allclose(batch["action"], torch.tensor(0.25))
    with pytest.raises(TypeError, match="mutually exclusive"):
        Collector(PendulumEnv, _policy(), policy_factory=_policy, frames_per_batch=4)
    with pytest.raises(TypeError, match="policy_factory must be callable"):
        Collector(PendulumEnv, policy_factory=3, frames_per_batch=4)  # pyright: ignore[reportArgumentType]


def test_random_policy_without_spec_takes_the_envs():
    policy = RandomPolicy()
    with pytest.raises(RuntimeError, match="action_spec is not set"):
        policy(TensorDict())
    c = Collector(PendulumEnv, policy, frames_per_batch=6, total_frames=6)
    assert policy.action_spec is not None
    spec = policy.action_spec
    policy.set_action_spec_from_env(PendulumEnv())  # idempotent: the first spec stays
    assert policy.action_spec is spec
    (batch,) = list(c)
    assert batch["action"].shape == (6, 1) and bool(batch["action"].abs().le(2.0).all())


def test_hooks_count_and_see_the_yielded_batch():
    pre, post = [], []
    c = Collector(
        PendulumEnv,
        frames_per_batch=4,
        total_frames=12,
        pre_collect_hook=lambda: pre.append(1),
        postproc=lambda b: b.set("marked", torch.ones(b.batch_size)),
        post_collect_hook=post.append,
    )
    batches = list(c)
    assert len(pre) == 3 and len(post) == 3
    assert all(a is b for a, b in zip(batches, post)) and "marked" in post[0].keys()
    c = Collector(PendulumEnv, frames_per_batch=4, total_frames=8)
    assert c.pre_collect_hook is None and c.post_collect_hook is None
    c.post_collect_hook = post.append
    list(c)
    assert len(post) == 5
    with pytest.raises(TypeError, match="post_collect_hook must be callable"):
        c.post_collect_hook = 3  # pyright: ignore[reportAttributeAccessIssue]


def test_stats_len_and_remote_style_helpers():
    c = Collector(PendulumEnv, frames_per_batch=16, total_frames=32, worker_idx=5)
    assert len(c) == 2
    stats = c.stats()
    assert stats == {
        "frames": 0,
        "batches": 0,
        "total_frames": 32,
        "completed": False,
        "requested_frames_per_batch": 16,
    }
    frames = [c.stats()["frames"] for _ in c]
    assert frames == [16, 32] and c.stats()["batches"] == 2 and c.stats()["completed"]
    assert json.loads(json.dumps(c.stats()))["frames"] == 32
    assert c.get_distant_attr("worker_idx") == 5
    assert c.map_fn("get_distant_attr", list_of_args=[("worker_idx",), ("frames_per_batch",)]) == [5, 16]
    with pytest.raises(ValueError, match="same length"):
        c.map_fn("get_distant_attr", list_of_args=[("worker_idx",)], list_of_kwargs=[{}, {}])
    endless = Collector(PendulumEnv, frames_per_batch=4)
    with pytest.raises(TypeError, match="endless"):
        len(endless)
    assert bool(endless)


def test_track_policy_version_bumps_once_per_update():
    c = Collector(PendulumEnv, _policy(), frames_per_batch=5, total_frames=30, track_policy_version=True)
    it = iter(c)
    first, second = next(it), next(it)
    assert first["next", "policy_version"].dtype == torch.int64
    assert first["policy_version"].tolist() == [0] * 5 and second["next", "policy_version"].tolist() == [0] * 5
    c.update_policy_weights_()
    assert next(it)["next", "policy_version"].tolist() == [1] * 5
    assert c.stats()["policy_version"] == 1
    state = c.state_dict()
    restored = Collector(PendulumEnv, _policy(), frames_per_batch=5, track_policy_version=True)
    restored.load_state_dict(state)
    restored.update_policy_weights_()
    assert restored.policy_version == 2


def test_update_policy_weights_takes_a_module_or_a_worker_dict():
    policy = _policy(0.0)
    c = Collector(PendulumEnv, policy, frames_per_batch=2, total_frames=6)
    it = iter(c)
    next(it)
    c.update_policy_weights_(_policy(1.5))  # a module of the same structure: its weights
    assert torch.allclose(next(it)["action"], torch.tensor(1.5))
    c.update_policy_weights_({0: TensorDict.from_module(_policy(-1.0))})
    assert torch.allclose(next(it)["action"], torch.tensor(-1.0)) and c.policy_version == 2
    with pytest.raises(TypeError, match="expected a TensorDict of weights"):
        c.update_policy_weights_(3)


def test_set_truncated_marks_the_last_step_of_each_batch():
    env = TransformedEnv(CartPoleEnv(), StepCounter(500))
    c = Collector(env, frames_per_batch=7, total_frames=14, set_truncated=True)
    for batch in c:
        assert batch["next", "truncated"].tolist() == [False] * 6 + [True]
        assert bool(batch["next", "done"][-1])
    # the env itself continues: the next batch's first step follows the last one
    steps = [b["next", "step_count"].reshape(-1) for b in Collector(env, frames_per_batch=3, total_frames=6)]
    assert int(steps[1][0]) == int(steps[0][-1]) + 1 or bool(steps[1][0] == 1)
    with pytest.raises(RuntimeError, match="truncated"):
        Collector(_NoTruncated(), frames_per_batch=4, set_truncated=True)


class _NoTruncated(PendulumEnv):
    @property
    def done_keys(self) -> list:
        return ["done"]


def test_track_traj_ids_false_writes_no_collector_entries():
    (batch,) = list(Collector(PendulumEnv, frames_per_batch=4, total_frames=4, track_traj_ids=False))
    assert "collector" not in batch.keys()


class _TwoOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, observation):
        out = self.linear(observation)
        return out, out.sum(-1), out.min(-1).values


class _Incompatible(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, observation, other_stuff):
        return self.linear(observation)


def test_plain_module_is_wrapped_by_its_forward_arguments():
    c = Collector(PendulumEnv, _TwoOutputs(), frames_per_batch=4, total_frames=4)
    assert c.policy.in_keys == ["observation"] and c.policy.out_keys == ["action", "output1", "output2"]
    (batch,) = list(c)
    assert batch["output1"].shape == (4,)
    linear = Collector(PendulumEnv, nn.Linear(3, 1), frames_per_batch=4)  # forward(input): the one observation
    assert linear.policy.in_keys == ["observation"]
    with pytest.raises(TypeError, match="Arguments to policy.forward are incompatible"):
        Collector(PendulumEnv, _Incompatible(), frames_per_batch=4)


def test_fake_tensordict_has_a_batchs_shape_names_and_keys():
    env = TransformedEnv(PendulumEnv(), StepCounter())
    c = Collector(env, _policy(), frames_per_batch=6, total_frames=6)
    fake = c.fake_tensordict()
    real = next(iter(c))
    assert fake.batch_size == real.batch_size and fake.names == real.names
    assert sorted(map(str, fake.keys(True, True))) == sorted(map(str, real.keys(True, True)))
    assert all(not v.any() for v in fake.values(True, True) if v.is_floating_point())


def test_extend_buffer_false_writes_one_step_at_a_time():
    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    sizes = []
    add = buffer.add
    buffer.add = lambda td: sizes.append(td.batch_size) or add(td)  # type: ignore[method-assign]
    outs = list(Collector(PendulumEnv, frames_per_batch=5, total_frames=10, replay_buffer=buffer, extend_buffer=False))
    assert outs == [None, None] and len(buffer) == 10 and sizes == [torch.Size([])] * 10
    with pytest.raises(ValueError, match="extend_buffer=False"):
        Collector(PendulumEnv, frames_per_batch=5, replay_buffer=buffer, extend_buffer=False, postproc=lambda b: b)


def test_unsupported_torchrl_options_are_refused_by_name():
    with pytest.raises(ValueError, match="backend='process'"):
        Collector(PendulumEnv, frames_per_batch=4, backend="process")
    with pytest.raises(ValueError, match="reset_when_done"):
        Collector(PendulumEnv, frames_per_batch=4, reset_when_done=False)
    with pytest.raises(ValueError, match="compile_policy"):
        Collector(PendulumEnv, frames_per_batch=4, compile_policy=True)
    c = Collector(PendulumEnv, frames_per_batch=4, backend="direct", use_buffers=True, trust_policy=True)
    assert type(c) is Collector


def test_split_trajectories_with_prefix_or_from_done_flags():
    steps = TensorDict(
        {"obs": torch.arange(5.0), ("next", "done"): torch.tensor([False, True, False, False, True])}, [5]
    )
    out = split_trajectories(steps)  # no ids: a trajectory ends at each done step
    assert out["obs"].tolist() == [[0.0, 1.0, 0.0], [2.0, 3.0, 4.0]]
    steps.set(("agents", "traj_ids"), torch.tensor([7, 7, 7, 8, 8]))
    out = split_trajectories(steps, prefix="agents")
    assert out["agents", "mask"].tolist() == [[True, True, True], [True, True, False]]


def test_private_root_entries_are_dropped_from_batches():
    def policy(td):
        td.set("action", torch.zeros(*td.batch_size, 1))
        return td.set("_scratch", torch.ones(td.batch_size))

    (batch,) = list(Collector(PendulumEnv, policy, frames_per_batch=3, total_frames=3))
    assert "_scratch" not in batch.keys() and "action" in batch.keys()
    c = Collector(PendulumEnv, policy, frames_per_batch=3, total_frames=3)
    c.exclude_private_keys = False
    assert "_scratch" in next(iter(c)).keys()


def test_max_frames_per_traj_is_refused_when_the_env_counts_steps():
    with pytest.raises(ValueError, match="already counts its steps"):
        Collector(TransformedEnv(PendulumEnv(), StepCounter(2)), frames_per_batch=4, max_frames_per_traj=2)


def test_device_less_batches_take_the_buffers_device():
    buffer = ReplayBuffer(storage=LazyTensorStorage(100, device="cpu"))
    devices = []
    extend = buffer.extend
    buffer.extend = lambda td: devices.append(td.device) or extend(td)  # type: ignore[method-assign]
    c = Collector(
        PendulumEnv, frames_per_batch=4, total_frames=8, replay_buffer=buffer, postproc=lambda b: b.clear_device_()
    )
    list(c)
    assert devices == [torch.device("cpu")] * 2 and len(buffer) == 8
