"""Trainer hooks against references written here: OptimizerHook, UpdateWeights, TargetNetUpdaterHook,
ClearCudaCache, ReplayBufferTrainer (duck-typed and rl_replay buffers), BatchSubSampler, RewardNormalizer,
SelectKeys, LogScalar, CountFramesLog, LogValidationReward."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rl_objectives import LossModule, SoftUpdate
from rl_objectives.trainers import (
    BatchSubSampler,
    ClearCudaCache,
    CountFramesLog,
    LogScalar,
    LogValidationReward,
    OptimizerHook,
    ReplayBufferTrainer,
    RewardNormalizer,
    SelectKeys,
    TargetNetUpdaterHook,
    Trainer,
    UpdateWeights,
)
from tdict import MemoryMappedTensor, TensorDict
from tdict.nn import InteractionType, TensorDictModule, interaction_type
from torch import nn


def rollout_td(n_envs=2, steps=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "obs": torch.randn(n_envs, steps, 3, generator=gen),
            "t": torch.arange(steps).expand(n_envs, steps),
            "env": torch.arange(n_envs).unsqueeze(-1).expand(n_envs, steps),
            "next": {"reward": torch.randn(n_envs, steps, generator=gen)},
        },
        batch_size=[n_envs, steps],
        names=[None, "time"],
    )


# ---------------------------------------------------------------------------- OptimizerHook
def test_optimizer_hook_loss_components_and_separate_optimizers():
    a = nn.Parameter(torch.tensor([1.0, 2.0]))
    b = nn.Parameter(torch.tensor([3.0]))
    hook_a = OptimizerHook(torch.optim.SGD([a], lr=1.0), loss_components=["loss_actor"])
    hook_b = OptimizerHook(torch.optim.SGD([b], lr=1.0), loss_components=["loss_critic"])
    # loss_actor touches a and b; loss_critic only b: b must step with loss_critic's gradient alone
    losses = TensorDict(loss_actor=(a * b).sum(), loss_critic=2.0 * b.sum(), other=torch.tensor(5.0))
    out = hook_a(losses, True, None, 0)
    out = hook_b(out, True, None, 1)
    torch.testing.assert_close(a.detach(), torch.tensor([1.0, 2.0]) - 3.0)  # d(a.b)/da = b
    torch.testing.assert_close(b.detach(), torch.tensor([3.0 - 2.0]))  # not 3 - 2 - (1 + 2)
    torch.testing.assert_close(out["grad_norm_0"], torch.tensor(18.0).sqrt())
    torch.testing.assert_close(out["grad_norm_1"], torch.tensor(2.0))


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("clip_grad_norm, clip_norm", [(True, 0.5), (True, 100.0), (False, 0.3), (True, None)])
def test_optimizer_hook_clips_as_torch(clip_grad_norm, clip_norm, mixed):
    # the hook's own clipping against torch's clip_grad_norm_ / clip_grad_value_ on the same
    # gradients; ``mixed``: a float64 layer among float32 ones (the hook hands those to torch)
    torch.manual_seed(0)
    net, ref = (
        nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)),
        nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)),
    )
    ref.load_state_dict(net.state_dict())
    x = torch.randn(8, 3)
    if mixed:
        for layer in (net[2], ref[2]):
            layer.double().register_forward_pre_hook(lambda m, args: (args[0].double(),))
    out = OptimizerHook(torch.optim.SGD(net.parameters(), lr=0.1))(
        TensorDict(loss=net(x).pow(2).sum()), clip_grad_norm, clip_norm, 0
    )
    ref(x).pow(2).sum().backward()
    expected_norm = nn.utils.clip_grad_norm_(ref.parameters(), float("inf"))
    if clip_norm is not None and clip_grad_norm:
        nn.utils.clip_grad_norm_(ref.parameters(), clip_norm)
    elif clip_norm is not None:
        nn.utils.clip_grad_value_(ref.parameters(), clip_norm)
    torch.optim.SGD(ref.parameters(), lr=0.1).step()
    torch.testing.assert_close(out["grad_norm_0"], expected_norm)
    for p, q in zip(net.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach(), q.detach())
        assert p.grad is None


@pytest.mark.parametrize("clip_norm", [None, 0.5])
def test_optimizer_hook_without_the_gradient_norm_steps_the_same(clip_norm):
    # measure_grad_norm=False leaves the norm out only where nothing is clipped; the step is the same
    torch.manual_seed(0)
    net, ref = nn.Linear(3, 2), nn.Linear(3, 2)
    ref.load_state_dict(net.state_dict())
    x = torch.randn(8, 3)
    lean = OptimizerHook(torch.optim.SGD(net.parameters(), lr=0.1), measure_grad_norm=False)
    out = lean(TensorDict(loss=net(x).pow(2).sum()), True, clip_norm, 0)
    full = OptimizerHook(torch.optim.SGD(ref.parameters(), lr=0.1))(
        TensorDict(loss=ref(x).pow(2).sum()), True, clip_norm, 0
    )
    assert ("grad_norm_0" in out.keys()) == (clip_norm is not None)
    if clip_norm is not None:
        torch.testing.assert_close(out["grad_norm_0"], full["grad_norm_0"])
    for p, q in zip(net.parameters(), ref.parameters()):
        assert torch.equal(p.detach(), q.detach()) and p.grad is None


def test_optimizer_hook_errors():
    w = nn.Parameter(torch.ones(2))
    hook = OptimizerHook(torch.optim.SGD([w], lr=0.1))
    with pytest.raises(KeyError, match="starts with 'loss'.*'value'"):
        hook(TensorDict(value=w.sum()))
    with pytest.raises(ValueError, match="'loss_x' must be a scalar.*\\(2,\\)"):
        hook(TensorDict(loss_x=w * 2, batch_size=[]))
    with pytest.raises(RuntimeError, match="does not require grad"):
        hook(TensorDict(loss=torch.tensor(1.0)))
    with pytest.raises(KeyError, match="\\['loss_b'\\] are not in the loss output"):
        OptimizerHook(torch.optim.SGD([w], lr=0.1), loss_components=["loss_b"])(TensorDict(loss_a=w.sum()))
    with pytest.raises(ValueError, match="loss_components"):
        OptimizerHook(torch.optim.SGD([w], lr=0.1), loss_components=[])
    with pytest.raises(TypeError, match="optimizer"):
        OptimizerHook(object())
    assert w.grad is None and torch.equal(w.detach(), torch.ones(2))  # nothing happened on bad input


# ---------------------------------------------------------------------------- UpdateWeights, targets, CUDA cache
class Collector:
    def __init__(self, n):
        self.n = n
        self.updates = []

    def __iter__(self):
        for _ in range(self.n):
            yield rollout_td(2, 3)

    def update_policy_weights_(self, weights=None):
        self.updates.append(weights)


class TinyLoss(LossModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.convert_to_functional(
            TensorDictModule(nn.Linear(3, 1), in_keys=["obs"], out_keys=["v"]), "net", create_target_params=True
        )

    def forward(self, td):
        out = self.call_network("net", td.copy())
        return TensorDict(loss=(out["v"].squeeze(-1) - td["next", "reward"]).pow(2).mean())


def test_update_weights_interval_in_a_trainer():
    collector = Collector(7)
    loss = TinyLoss()
    trainer = Trainer(
        collector=collector,
        total_frames=10**6,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
    )
    UpdateWeights(collector, update_weights_interval=3).register(trainer)
    trainer.train()
    assert collector.updates == [None, None]  # after batches 3 and 6
    getter = UpdateWeights(collector, 1, policy_weights_getter=lambda: "w")
    getter()
    assert collector.updates[-1] == "w"
    with pytest.raises(TypeError, match="update_policy_weights_"):
        UpdateWeights(object(), 1)
    with pytest.raises(ValueError, match="update_weights_interval"):
        UpdateWeights(collector, 0)


def test_target_net_updater_hook_soft_update_after_every_optimizer_step():
    loss = TinyLoss()
    updater = SoftUpdate(loss, tau=0.25)
    trainer = Trainer(
        collector=Collector(2),
        total_frames=10**6,
        optim_steps_per_batch=3,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
    )
    TargetNetUpdaterHook(updater).register(trainer)
    expected = loss.params_of("net", target=True).detach().clone()
    trainer.register_op("post_optim", lambda: expected.copy_(expected.lerp(loss.params_of("net").detach(), 0.25)))
    trainer.train()
    # the reference (registered after the hook) applied the same Polyak step after each of the 6 steps
    for key in ("module", "weight"), ("module", "bias"):
        torch.testing.assert_close(loss.params_of("net", target=True)[key], expected[key])
    assert trainer._optim_count == 6
    with pytest.raises(TypeError, match="step\\(\\)"):
        TargetNetUpdaterHook(object())


def test_clear_cuda_cache_interval():
    hook = ClearCudaCache(4)
    for _ in range(9):
        hook()
    assert (hook.count, hook.cleared) == (9, 2)
    with pytest.raises(ValueError, match="interval"):
        ClearCudaCache(0)


# ---------------------------------------------------------------------------- ReplayBufferTrainer
class DuckBuffer:
    def __init__(self, with_td_priority=False):
        self.extended, self.sampled_sizes, self.updates = [], [], []
        if with_td_priority:
            self.update_tensordict_priority = lambda td: self.updates.append(("td", td))

    def extend(self, td):
        self.extended.append(td)

    def sample(self, batch_size=None):
        self.sampled_sizes.append(batch_size)
        data = torch.cat(self.extended, 0)
        out = data[: batch_size or 2]
        out.set("index", torch.arange(out.batch_size[0]))
        return out

    def update_priority(self, index, priority):
        self.updates.append(("index", index, priority))

    def __iter__(self):  # two batches per epoch
        data = torch.cat(self.extended, 0)
        yield data[:2]
        yield data[2:4]


def test_replay_buffer_trainer_extend_sample_and_priorities():
    buffer = DuckBuffer()
    hook = ReplayBufferTrainer(buffer, batch_size=5)
    batch = rollout_td(2, 6)
    assert hook.extend(batch) is None
    assert buffer.extended[0].batch_size == torch.Size([12])
    torch.testing.assert_close(buffer.extended[0]["t"], batch["t"].reshape(-1))
    sample = hook.sample(batch)
    assert sample.batch_size == torch.Size([5]) and buffer.sampled_sizes == [5]
    hook.update_priority(sample)  # no "td_error": nothing to send
    assert buffer.updates == []
    sample.set("td_error", torch.arange(5.0))
    hook.update_priority(sample)
    kind, index, priority = buffer.updates[0]
    assert kind == "index" and torch.equal(index, torch.arange(5)) and torch.equal(priority, torch.arange(5.0))

    td_buffer = DuckBuffer(with_td_priority=True)
    ReplayBufferTrainer(td_buffer).update_priority(sample)
    assert td_buffer.updates[0][0] == "td" and td_buffer.updates[0][1] is sample

    unflat = DuckBuffer()
    ReplayBufferTrainer(unflat, flatten_tensordicts=False).extend(batch)
    assert unflat.extended[0].batch_size == torch.Size([2, 6])

    mapped = DuckBuffer()
    ReplayBufferTrainer(mapped, memmap=True).extend(batch)
    assert isinstance(mapped.extended[0]["obs"], MemoryMappedTensor) and not isinstance(
        batch["obs"], MemoryMappedTensor
    )
    torch.testing.assert_close(mapped.extended[0]["obs"].as_subclass(torch.Tensor), batch["obs"].reshape(12, 3))


def test_replay_buffer_trainer_iterate_restarts_epochs():
    buffer = DuckBuffer()
    hook = ReplayBufferTrainer(buffer, iterate=True)
    hook.extend(rollout_td(1, 4))
    ts = [hook.sample()["t"].tolist() for _ in range(5)]
    assert ts == [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1]]


def test_replay_buffer_trainer_errors_and_state():
    with pytest.raises(TypeError, match="extend"):
        ReplayBufferTrainer(object())
    with pytest.raises(ValueError, match="batch_size"):
        ReplayBufferTrainer(DuckBuffer(), batch_size=0)
    with pytest.raises(TypeError, match="TensorDict"):
        ReplayBufferTrainer(DuckBuffer()).extend({"a": 1})
    no_index = TensorDict(td_error=torch.ones(2), batch_size=[2])
    with pytest.raises(KeyError, match="'index'"):
        ReplayBufferTrainer(DuckBuffer()).update_priority(no_index)
    assert ReplayBufferTrainer(DuckBuffer()).state_dict() == {}


def test_replay_buffer_trainer_leaves_a_uniform_buffer_alone():
    # SAC writes "td_error" into every sample: a uniform rl_replay buffer (no "index" in its samples,
    # a sampler without priorities) must not be sent priorities
    rl_replay = pytest.importorskip("rl_replay")
    for rb in (
        rl_replay.ReplayBuffer(storage=rl_replay.LazyTensorStorage(16)),
        rl_replay.TensorDictReplayBuffer(storage=rl_replay.LazyTensorStorage(16)),
    ):
        hook = ReplayBufferTrainer(rb, batch_size=4)
        hook.extend(rollout_td(2, 3))
        sample = hook.sample()
        sample.set("td_error", torch.ones(4))
        hook.update_priority(sample)  # no error, nothing to do
        assert len(rb) == 6


def test_replay_buffer_trainer_with_rl_replay_prioritized_buffer():
    rl_replay = pytest.importorskip("rl_replay")
    rb = rl_replay.TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=rl_replay.LazyTensorStorage(64), generator=torch.Generator().manual_seed(0)
    )
    updates = []
    original = rb.update_priority
    rb.update_priority = lambda index, priority: (
        updates.append((index.clone(), priority.clone())),
        original(index, priority),
    )

    class PriorityLoss(TinyLoss):
        def forward(self, td):
            out = super().forward(td)
            td.set("td_error", td["obs"][:, 0].abs() + 0.5)  # as DQN writes its TD error into the sample
            return out

    loss = PriorityLoss()
    trainer = Trainer(
        collector=Collector(3),
        total_frames=18,
        optim_steps_per_batch=2,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.1),
    )
    hook = ReplayBufferTrainer(rb, batch_size=4)
    hook.register(trainer)
    samples = []
    trainer.register_op("post_loss", lambda td: samples.append(td))
    trainer.train()
    assert len(rb) == 18 and len(updates) == 6
    for (index, priority), sample in zip(updates, samples):
        assert torch.equal(index, sample["index"])
        torch.testing.assert_close(priority, sample["obs"][:, 0].abs() + 0.5)
    assert set(hook.state_dict()) == {"replay_buffer"}


# ---------------------------------------------------------------------------- BatchSubSampler
@given(
    n_envs=st.integers(1, 3),
    steps=st.integers(1, 8),
    sub_len=st.integers(0, 8),
    n_windows=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_batch_sub_sampler_windows_are_consecutive_steps_of_one_trajectory(n_envs, steps, sub_len, n_windows, seed):
    if sub_len > steps:
        return
    length = sub_len or steps
    batch = rollout_td(n_envs, steps, seed)
    torch.manual_seed(seed)
    sub = BatchSubSampler(batch_size=n_windows * length + (length - 1), sub_traj_len=sub_len)(batch)
    assert sub.batch_size == torch.Size([n_windows, length]) and sub.names == [None, "time"]
    for window in range(n_windows):
        env, start = int(sub["env"][window, 0]), int(sub["t"][window, 0])
        reference = batch[env, start : start + length]
        for key in ("obs", "t", ("next", "reward")):
            torch.testing.assert_close(sub[key][window], reference[key])


def test_batch_sub_sampler_reaches_every_start_and_flattens_leading_dims():
    batch = rollout_td(2, 5).expand(3, 2, 5).clone()
    torch.manual_seed(0)
    starts = set()
    for _ in range(200):
        sub = BatchSubSampler(batch_size=6, sub_traj_len=3)(batch)
        assert sub.batch_size == torch.Size([2, 3])
        starts.update(sub["t"][:, 0].tolist())
    assert starts == {0, 1, 2}  # T - L + 1 valid starts, the last one included


def test_batch_sub_sampler_flat_batch_and_errors():
    flat = TensorDict(i=torch.arange(10), batch_size=[10])
    sub = BatchSubSampler(batch_size=4)(flat)
    assert sub.batch_size == torch.Size([4]) and len(set(sub["i"].tolist())) == 4
    with pytest.raises(ValueError, match="batch_size=11 exceeds the 10 steps"):
        BatchSubSampler(batch_size=11)(flat)
    with pytest.raises(ValueError, match="sub_traj_len=3 needs a time dim"):
        BatchSubSampler(batch_size=6, sub_traj_len=3)(flat)
    with pytest.raises(ValueError, match="sub_traj_len=7 exceeds the batch's time dim 6"):
        BatchSubSampler(batch_size=8, sub_traj_len=7)(rollout_td(2, 6))
    with pytest.raises(ValueError, match="batch_size=4 is smaller than the window length 6"):
        BatchSubSampler(batch_size=4)(rollout_td(2, 6))
    with pytest.raises(ValueError, match="sub_traj_len"):
        BatchSubSampler(batch_size=4, sub_traj_len=-1)


# ---------------------------------------------------------------------------- RewardNormalizer
def test_reward_normalizer_matches_decayed_reference():
    norm = RewardNormalizer(decay=0.9, scale=2.0, eps=1e-4)
    s = q = n = 0.0
    for seed in range(4):
        batch = rollout_td(2, 5, seed)
        norm.update_reward_stats(batch)
        r = batch["next", "reward"].double()
        s, q, n = 0.9 * s + r.sum().item(), 0.9 * q + r.pow(2).sum().item(), 0.9 * n + r.numel()
    mean = s / n
    std = max((q - s * s / n) / (n - 1), 1e-4) ** 0.5
    sample = rollout_td(3, 2, 9)
    out = norm.normalize_reward(sample)
    torch.testing.assert_close(out["next", "reward"], ((sample["next", "reward"].double() - mean) / std * 2.0).float())
    assert out["obs"] is sample["obs"]  # a shallow copy
    torch.testing.assert_close(sample["next", "reward"], rollout_td(3, 2, 9)["next", "reward"])  # input untouched

    other = RewardNormalizer()
    other.load_state_dict(norm.state_dict())
    torch.testing.assert_close(other.normalize_reward(sample)["next", "reward"], out["next", "reward"])


def test_reward_normalizer_errors():
    norm = RewardNormalizer()
    with pytest.raises(RuntimeError, match="update_reward_stats"):
        norm.normalize_reward(rollout_td())
    with pytest.raises(KeyError, match="\\('next', 'reward'\\)"):
        norm.update_reward_stats(TensorDict(obs=torch.zeros(2), batch_size=[2]))
    with pytest.raises(ValueError, match="decay"):
        RewardNormalizer(decay=0.0)
    with pytest.raises(ValueError, match="eps"):
        RewardNormalizer(eps=0.0)
    with pytest.raises(KeyError, match="expected keys"):
        norm.load_state_dict({"sum": 1.0})


def test_reward_normalizer_in_a_trainer_normalises_the_sample():
    loss = TinyLoss()
    seen = []
    trainer = Trainer(
        collector=Collector(3),
        total_frames=10**6,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.01),
    )
    norm = RewardNormalizer(decay=1.0)
    norm.register(trainer)
    trainer.register_op("post_loss", lambda td: seen.append(td["next", "reward"]))
    trainer.train()
    rewards = torch.stack([rollout_td(2, 3)["next", "reward"]] * 3).double()
    reference = (rewards[0] - rewards.mean()) / rewards.std()
    torch.testing.assert_close(seen[-1], reference.float())


# ---------------------------------------------------------------------------- SelectKeys
def test_select_keys():
    batch = rollout_td()
    out = SelectKeys(["obs", ("next", "reward")])(batch)
    assert sorted(out.keys(include_nested=True, leaves_only=True), key=str) == sorted(
        ["obs", ("next", "reward")], key=str
    )
    with pytest.raises(KeyError, match="\\['missing'\\] are not in the batch"):
        SelectKeys(["obs", "missing"])(batch)
    with pytest.raises(ValueError, match="keys"):
        SelectKeys("obs")


# ---------------------------------------------------------------------------- logging hooks
@pytest.mark.parametrize(
    "reduction, ref", [("mean", torch.mean), ("sum", torch.sum), ("max", torch.amax), ("min", torch.amin)]
)
def test_log_scalar_reductions(reduction, ref):
    batch = rollout_td()
    out = LogScalar(reduction=reduction, log_pbar=True)(batch)
    reward = batch["next", "reward"]
    assert out == {
        "next_reward": pytest.approx(float(ref(reward))),
        "next_reward_std": pytest.approx(float(reward.std())),
        "log_pbar": True,
    }
    assert LogScalar("obs", logname="o", include_std=False)(batch) == {
        "o": pytest.approx(float(batch["obs"].mean())),
        "log_pbar": False,
    }
    with pytest.raises(KeyError, match="'missing'"):
        LogScalar("missing")(batch)
    with pytest.raises(ValueError, match="reduction"):
        LogScalar(reduction="median")


def test_count_frames_log_and_state():
    hook = CountFramesLog(frame_skip=4)
    for n in (3, 5):
        hook(rollout_td(1, n))
    assert hook.state_dict() == {"frame_count": 32}
    other = CountFramesLog()
    other.load_state_dict({"frame_count": 7})
    assert other(rollout_td(1, 1))["n_frames"] == 8
    with pytest.raises(TypeError, match="TensorDict"):
        other({"not": "a td"})
    with pytest.raises(TypeError, match="'frame_count' must be an int"):
        other.load_state_dict({"frame_count": 1.5})


class EvalEnv:
    """Records the interaction type and the policy's mode during its rollouts."""

    def __init__(self):
        self.training = True
        self.seen = []

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode

    def rollout(self, max_steps, policy=None, auto_reset=True, break_when_any_done=True):
        self.seen.append(
            (interaction_type(), policy.training, self.training, torch.is_grad_enabled(), break_when_any_done)
        )
        reward = torch.arange(2 * max_steps, dtype=torch.float32).reshape(2, max_steps)
        done = torch.zeros(2, max_steps, dtype=torch.bool)
        done[:, -1] = True  # one whole episode per sub-env
        return TensorDict(
            {"next": {"reward": reward, "done": done}, "speed": torch.ones(2, max_steps) * 3}, batch_size=[2, max_steps]
        )


def test_log_validation_reward_interval_mode_and_values():
    env, policy = EvalEnv(), nn.Linear(1, 1)
    hook = LogValidationReward(
        record_interval=3,
        record_frames=4,
        frame_skip=2,
        policy_exploration=policy,
        environment=env,
        log_keys=[("next", "reward"), "speed"],
    )
    results = [hook() for _ in range(7)]
    assert [r is not None for r in results] == [True, False, False, True, False, False, True]
    reward = torch.arange(8.0).reshape(2, 4)
    assert results[0] == {
        "r_evaluation": pytest.approx(float(reward.mean()) / 2),
        "total_r_evaluation": pytest.approx(float(reward.sum(-1).mean())),
        "speed": 3.0,
        "log_pbar": False,
    }
    assert env.seen == [(InteractionType.DETERMINISTIC, False, False, False, False)] * 3
    assert policy.training and env.training  # modes restored
    assert hook.state_dict() == {"_count": 7}


def test_log_validation_reward_records_last_call_of_each_interval():
    # record_first=False: calls n-1, 2n-1, ... record, so after batches of B frames the evaluations
    # fall on n * B, 2n * B, ... frames (here B = 4: frames 12 and 24)
    env = EvalEnv()
    hook = LogValidationReward(
        record_interval=3, record_frames=4, policy_exploration=nn.Linear(1, 1), environment=env, record_first=False
    )
    frames = [4 * (call + 1) for call in range(7) if hook() is not None]
    assert frames == [12, 24] and len(env.seen) == 2
    every_call = LogValidationReward(
        record_interval=1,
        record_frames=4,
        policy_exploration=nn.Linear(1, 1),
        environment=EvalEnv(),
        record_first=False,
    )
    assert all(every_call() is not None for _ in range(3))
    resumed = LogValidationReward(
        record_interval=3,
        record_frames=4,
        policy_exploration=nn.Linear(1, 1),
        environment=EvalEnv(),
        record_first=False,
    )
    resumed.load_state_dict(hook.state_dict())  # 7 calls made: the next rollout is the 9th call's
    assert [resumed() is not None for _ in range(3)] == [False, True, False]


def test_log_validation_reward_errors():
    with pytest.raises(TypeError, match="record_first must be a bool"):
        LogValidationReward(
            record_interval=1, record_frames=1, policy_exploration=lambda td: td, environment=EvalEnv(), record_first=1
        )
    with pytest.raises(TypeError, match="rollout"):
        LogValidationReward(record_interval=1, record_frames=1, policy_exploration=lambda td: td, environment=object())
    with pytest.raises(ValueError, match="record_frames"):
        LogValidationReward(record_interval=1, record_frames=0, policy_exploration=lambda td: td, environment=EvalEnv())
    with pytest.raises(ValueError, match="exploration_type"):
        LogValidationReward(
            record_interval=1,
            record_frames=1,
            policy_exploration=lambda td: td,
            environment=EvalEnv(),
            exploration_type="greedy",
        )
    hook = LogValidationReward(
        record_interval=1, record_frames=2, policy_exploration=nn.Identity(), environment=EvalEnv(), log_keys=["nope"]
    )
    with pytest.raises(KeyError, match="'nope'"):
        hook()
