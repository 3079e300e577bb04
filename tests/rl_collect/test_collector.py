"""rl_collect.Collector (single process): frame counts, trajectory ids, policy versions and options, by value."""

from __future__ import annotations

import copy
import itertools
import warnings

import pytest
import torch
from rl_collect import Collector
from rl_envs import CartPoleEnv, PendulumEnv, StepCounter, TransformedEnv
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn

TRAJ = ("collector", "traj_ids")
VERSION = ("collector", "policy_version")
MASK = ("collector", "mask")


# ----------------------------------------------------------------------------- helpers
def pendulum(batch=(), seed=0, max_steps=None):
    env = PendulumEnv(batch_size=list(batch), seed=seed)
    if max_steps is not None:
        env = TransformedEnv(env, StepCounter(max_steps=max_steps))
    return env


def linear_module(bias: float = 0.0) -> nn.Linear:
    """A deterministic observation -> 1-d torque map whose output is easy to predict."""
    net = nn.Linear(3, 1)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[0.1, -0.2, 0.05]]))
        net.bias.fill_(bias)
    return net


def td_policy(bias: float = 0.0) -> TensorDictModule:
    return TensorDictModule(linear_module(bias), in_keys=["observation"], out_keys=["action"])


def expected_action(module: nn.Module, batch) -> torch.Tensor:
    with torch.no_grad():
        return module(batch["observation"])


def concat_time(batches):
    return torch.cat(list(batches), dim=-1)


def check_traj_ids(flat_ids: torch.Tensor, done: torch.Tensor) -> None:
    """Along time (last dim) the id changes exactly after a done step, and every trajectory id is unique
    to one sub-env and one contiguous run of steps."""
    ids = flat_ids.reshape(-1, flat_ids.shape[-1])
    dn = done.reshape(-1, done.shape[-1])
    changed = ids[:, 1:] != ids[:, :-1]
    assert torch.equal(changed, dn[:, :-1]), "trajectory ids must change exactly after done steps"
    seen: set[int] = set()
    for row in ids:
        runs = torch.unique_consecutive(row).tolist()
        assert not (set(runs) & seen), "a trajectory id is reused by another sub-env or run"
        assert len(runs) == len(set(runs))
        seen |= set(runs)


# ----------------------------------------------------------------------------- frame counts and shapes
@pytest.mark.parametrize("batch", [(), (4,)])
def test_exact_frames_last_batch_cut(batch):
    n = 1 if not batch else batch[0]
    collector = Collector(pendulum(batch), None, frames_per_batch=8 * n, total_frames=20 * n)
    out = list(collector)
    assert [b.batch_size for b in out] == [torch.Size([*batch, 8])] * 2 + [torch.Size([*batch, 4])]
    assert sum(b.numel() for b in out) == 20 * n == collector.frames
    assert collector.frames_per_batch == 8 * n
    for b in out:
        assert b[TRAJ].shape == b.batch_size and b[TRAJ].dtype == torch.int64
        assert b[VERSION].shape == b.batch_size and b[VERSION].dtype == torch.int64
        assert b["next", "reward"].shape == b.batch_size  # no trailing singleton dim
        assert b["action"].shape == (*b.batch_size, 1)
        assert b["observation"].shape == (*b.batch_size, 3)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_one_step_batches_hold_their_own_values(batch):
    # a one-step batch is a view of the step's data (no stack): later steps must not write into it,
    # and seven one-step batches equal one seven-step batch of the same env and policy
    n = batch[0] if batch else 1
    kept = list(Collector(pendulum(batch, max_steps=5), td_policy(), frames_per_batch=n, total_frames=7 * n))
    copies = [b.clone() for b in kept]
    full = next(iter(Collector(pendulum(batch, max_steps=5), td_policy(), frames_per_batch=7 * n, total_frames=7 * n)))
    for b, c in zip(kept, copies):
        assert b.batch_size == torch.Size([*batch, 1])
        for key in c.keys(True, True):
            assert torch.equal(b[key], c[key]), key
    for key in full.keys(True, True):
        torch.testing.assert_close(torch.cat([b[key] for b in kept], len(batch)), full[key], msg=str(key))


def test_two_dim_env_batch():
    collector = Collector(pendulum((2, 3), max_steps=4), None, frames_per_batch=36, total_frames=72)
    batches = list(collector)
    assert [b.batch_size for b in batches] == [torch.Size([2, 3, 6])] * 2
    full = concat_time(batches)
    check_traj_ids(full[TRAJ], full["next", "done"])
    assert full[TRAJ][..., 0].reshape(-1).tolist() == list(range(6))


def test_devices_cpu():
    collector = Collector(pendulum((2,)), td_policy(), frames_per_batch=4, total_frames=4, device="cpu")
    assert collector.env_device == collector.policy_device == collector.storing_device == torch.device("cpu")
    batch = next(iter(collector))
    assert batch["observation"].device == torch.device("cpu")
    assert torch.allclose(batch["action"], expected_action(linear_module(), batch))


def test_devices_env_device_only_policy_and_batches_without_device():
    seen = []

    class DevicelessPolicy(nn.Module):
        def forward(self, td):
            seen.append(td.device)
            return td.set("action", torch.zeros(*td.batch_size, 1))

    env = PendulumEnv(batch_size=[2], seed=0, device="cpu")
    collector = Collector(env, DevicelessPolicy(), frames_per_batch=4, total_frames=4, env_device="cpu")
    batch = next(iter(collector))
    assert seen == [None, None]  # a policy without a device gets its input without one (TorchRL)
    # no storing device, and the policy does not share the env's: the batch has no device (TorchRL)
    assert batch.device is None and batch["next"].device is None
    assert batch["observation"].device == torch.device("cpu") and batch.batch_size == (2, 2)
    assert collector.fake_tensordict().device is None
    stored = Collector(
        env, DevicelessPolicy(), frames_per_batch=4, total_frames=4, env_device="cpu", storing_device="cpu"
    )
    assert next(iter(stored)).device == torch.device("cpu")
    shared = Collector(env, td_policy(), frames_per_batch=4, total_frames=4, env_device="cpu", policy_device="cpu")
    assert next(iter(shared)).device == torch.device("cpu")  # the policy shares the env's device: kept


def test_total_frames_not_multiple_of_env_batch_rounds_up_to_env_batch():
    # 4 sub-envs step together: the closest a run can get to 10 frames from above is 12
    with pytest.warns(UserWarning, match="total_frames=10 is not a multiple.*collecting 12"):
        collector = Collector(pendulum((4,)), None, frames_per_batch=8, total_frames=10)
    sizes = [b.batch_size for b in collector]
    assert sizes == [torch.Size([4, 2]), torch.Size([4, 1])]
    assert collector.frames == 12


def test_frames_per_batch_rounded_up_with_warning():
    with pytest.warns(UserWarning, match="frames_per_batch=10.*4"):
        collector = Collector(pendulum((4,)), None, frames_per_batch=10, total_frames=24)
    assert collector.frames_per_batch == 12
    assert [b.batch_size for b in collector] == [torch.Size([4, 3])] * 2


def test_no_warning_when_frames_per_batch_divides():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Collector(pendulum((4,)), None, frames_per_batch=12, total_frames=24)


def test_infinite_total_frames_iterates_until_break():
    collector = Collector(pendulum(), None, frames_per_batch=5)
    for i, batch in enumerate(collector):
        assert batch.batch_size == torch.Size([5])
        if i == 5:
            break
    assert collector.frames == 30


def test_env_factory_with_kwargs_equals_instance():
    a = Collector(
        PendulumEnv,
        None,
        frames_per_batch=6,
        total_frames=6,
        create_env_kwargs={"batch_size": [2], "seed": 3},
    )
    assert a.env.batch_size == torch.Size([2])
    torch.manual_seed(0)
    first = next(iter(a))
    b = Collector(PendulumEnv(batch_size=[2], seed=3), None, frames_per_batch=6, total_frames=6)
    torch.manual_seed(0)
    second = next(iter(b))
    assert (first == second).all()


# ----------------------------------------------------------------------------- trajectory ids
@pytest.mark.parametrize("batch", [(), (3,)])
def test_traj_ids_follow_done_flags_across_batches(batch):
    collector = Collector(
        pendulum(batch, max_steps=7),
        None,
        frames_per_batch=5 * max(1, len(batch) and batch[0]),
        total_frames=60 * max(1, len(batch) and batch[0]),
    )
    batches = list(collector)
    full = concat_time(batches)
    ids, done = full[TRAJ], full["next", "done"]
    assert done.any()
    check_traj_ids(ids, done)
    # every trajectory is exactly 7 steps long (StepCounter(max_steps=7)) except the running ones at the end
    _, counts = torch.unique(ids, return_counts=True)
    assert (counts[: -max(1, len(batch) and batch[0])] == 7).all()
    # a trajectory that runs over a batch boundary keeps its id
    for prev, nxt in itertools.pairwise(batches):
        cont = ~prev["next", "done"][..., -1]
        assert torch.equal(prev[TRAJ][..., -1][cont], nxt[TRAJ][..., 0][cont])
        assert not (set(prev[TRAJ][..., -1][~cont].tolist()) & set(nxt[TRAJ].reshape(-1).tolist()))
    # ids start at 0 and are dense
    assert torch.equal(torch.unique(ids), torch.arange(int(ids.max()) + 1))


def test_traj_ids_with_random_termination():
    collector = Collector(CartPoleEnv(batch_size=[4], seed=1), None, frames_per_batch=40, total_frames=400)
    full = concat_time(list(collector))
    assert full["next", "terminated"].sum() > 4
    check_traj_ids(full[TRAJ], full["next", "done"])


# ----------------------------------------------------------------------------- policies
def test_policy_none_random_actions_inside_spec():
    env = pendulum((4,))
    collector = Collector(env, None, frames_per_batch=400, total_frames=400)
    batch = next(iter(collector))
    action = batch["action"]
    assert action.shape == (4, 100, 1)
    assert (action >= -2).all() and (action <= 2).all()
    assert action.std() > 0.5  # actually random, not constant
    cp = Collector(
        CartPoleEnv(batch_size=[2], seed=0),
        None,
        frames_per_batch=200,
        total_frames=200,
    )
    acts = next(iter(cp))["action"]  # one-hot, as GymEnv("CartPole-v1")'s default spec
    assert acts.shape == (2, 100, 2) and acts.dtype == torch.int64 and bool((acts.sum(-1) == 1).all())
    assert set(acts.unique().tolist()) == {0, 1} and set(acts.argmax(-1).unique().tolist()) == {0, 1}
    cp = Collector(
        CartPoleEnv(batch_size=[2], seed=0, categorical_action_encoding=True),
        None,
        frames_per_batch=200,
        total_frames=200,
    )
    acts = next(iter(cp))["action"]
    assert acts.shape == (2, 100) and acts.dtype == torch.int64 and set(acts.unique().tolist()) == {0, 1}


def test_plain_module_policy_wrapped_on_observation():
    net = linear_module(0.3)
    collector = Collector(pendulum((2,)), net, frames_per_batch=10, total_frames=10)
    batch = next(iter(collector))
    assert torch.allclose(batch["action"], expected_action(net, batch))
    assert batch[VERSION].eq(0).all()


def test_plain_module_with_ambiguous_observations_raises():
    from types import SimpleNamespace

    base = pendulum()
    # a duck-typed env with two observation keys, none named "observation"
    env = SimpleNamespace(
        reset=base.reset,
        step=base.step,
        batch_size=base.batch_size,
        full_action_spec=base.full_action_spec,
        observation_keys=["th", "thdot"],
        action_keys=["action"],
    )
    with pytest.raises(TypeError, match=r"TensorDictModule.*|.*\['th', 'thdot'\]"):
        Collector(env, nn.Linear(2, 1), frames_per_batch=4)


def test_callable_policy():
    def policy(td):
        td.set("action", torch.full((*td.batch_size, 1), 0.25))
        return td

    batch = next(iter(Collector(pendulum((2,)), policy, frames_per_batch=6, total_frames=6)))
    assert batch["action"].eq(0.25).all()


def test_update_policy_weights_rereads_plain_module():
    net = linear_module(0.0)
    collector = Collector(pendulum(), net, frames_per_batch=5, total_frames=15)
    it = iter(collector)
    first = next(it)
    assert first[VERSION].eq(0).all()
    assert torch.allclose(first["action"], expected_action(net, first))
    with torch.no_grad():
        net.weight.mul_(-3.0)
        net.bias.fill_(0.7)
    collector.update_policy_weights_()
    assert collector.policy_version == 1
    second = next(it)
    assert second[VERSION].eq(1).all()
    assert torch.allclose(second["action"], expected_action(net, second))
    collector.update_policy_weights_()
    assert next(it)[VERSION].eq(2).all()


def test_update_policy_weights_from_tensordict():
    policy = td_policy(0.0)
    collector = Collector(pendulum((2,)), policy, frames_per_batch=6, total_frames=12)
    trained = td_policy(0.0)
    with torch.no_grad():
        trained.module.weight.fill_(0.5)
        trained.module.bias.fill_(-1.0)
    it = iter(collector)
    first = next(it)
    assert torch.allclose(first["action"], expected_action(linear_module(0.0), first))
    collector.update_policy_weights_(TensorDict.from_module(trained))
    second = next(it)
    assert collector.policy_version == 1 and second[VERSION].eq(1).all()
    assert torch.allclose(second["action"], expected_action(trained.module, second))
    assert not torch.allclose(second["action"], expected_action(linear_module(0.0), second))


def test_update_policy_weights_from_tensordict_plain_module():
    net = linear_module(0.0)
    collector = Collector(pendulum(), net, frames_per_batch=5, total_frames=10)
    it = iter(collector)
    next(it)
    trained = linear_module(0.0)
    with torch.no_grad():
        trained.bias.fill_(1.5)
    collector.update_policy_weights_(TensorDict.from_module(trained))
    second = next(it)
    assert torch.allclose(second["action"], expected_action(trained, second))


def test_update_policy_weights_rereads_td_module():
    policy = td_policy(0.0)
    collector = Collector(pendulum(), policy, frames_per_batch=5, total_frames=10)
    it = iter(collector)
    next(it)
    with torch.no_grad():
        policy.module.bias.fill_(-0.9)
    collector.update_policy_weights_()
    second = next(it)
    assert second[VERSION].eq(1).all()
    assert torch.allclose(second["action"], expected_action(policy.module, second))


def test_update_policy_weights_without_parameters_raises():
    collector = Collector(pendulum(), None, frames_per_batch=4, total_frames=4)
    with pytest.raises(TypeError, match="no parameters"):
        collector.update_policy_weights_(TensorDict.from_module(linear_module()))
    collector.update_policy_weights_()  # re-reading nothing is harmless and still bumps
    assert collector.policy_version == 1


def test_init_random_frames_then_policy():
    net = linear_module(0.5)
    collector = Collector(pendulum(), net, frames_per_batch=20, total_frames=60, init_random_frames=40)
    b0, b1, b2 = list(collector)
    for random_batch in (b0, b1):
        assert not torch.allclose(random_batch["action"], expected_action(net, random_batch))
        assert (random_batch["action"].abs() <= 2).all()
    assert torch.allclose(b2["action"], expected_action(net, b2))


def test_random_steps_carry_the_policys_other_outputs_as_zeros():
    """Every batch has the same keys, so a replay buffer takes random and policy batches alike."""
    from tdict.nn import TensorDictModule, TensorDictSequential

    torch.manual_seed(0)
    features = TensorDictModule(nn.Linear(3, 4), in_keys=["observation"], out_keys=["hidden"])
    head = TensorDictModule(nn.Linear(4, 1), in_keys=["hidden"], out_keys=["action"])
    policy = TensorDictSequential(features, head)
    collector = Collector(pendulum(), policy, frames_per_batch=10, total_frames=30, init_random_frames=20)
    random_batch, _, policy_batch = list(collector)
    assert set(random_batch.keys(True, True)) == set(policy_batch.keys(True, True))
    assert torch.equal(random_batch["hidden"], torch.zeros(10, 4))
    assert not torch.equal(policy_batch["hidden"], torch.zeros(10, 4))


def test_lazy_policy_layers_exist_once_the_collector_is_built():
    from tdict.nn import TensorDictModule

    policy = TensorDictModule(nn.LazyLinear(1), in_keys=["observation"], out_keys=["action"])
    Collector(pendulum(), policy, frames_per_batch=4, total_frames=4)
    assert policy.module.weight.shape == (1, 3)  # an optimizer built now sees real parameters


def test_exploration_type_is_set_during_rollout():
    from tdict.nn import InteractionType, interaction_type

    seen = []

    def policy(td):
        seen.append(interaction_type())
        td.set("action", torch.zeros(*td.batch_size, 1))
        return td

    list(
        Collector(
            pendulum(),
            policy,
            frames_per_batch=3,
            total_frames=3,
            exploration_type=InteractionType.DETERMINISTIC,
        )
    )
    assert seen == [InteractionType.DETERMINISTIC] * 3


def test_policies_sample_by_default_and_none_leaves_the_callers_setting():
    """As in TorchRL, a collector runs its policy under RANDOM unless told otherwise."""
    from tdict.nn import InteractionType, interaction_type, set_interaction_type

    seen = []

    def policy(td):
        seen.append(interaction_type())
        td.set("action", torch.zeros(*td.batch_size, 1))
        return td

    list(Collector(pendulum(), policy, frames_per_batch=2, total_frames=2))
    assert seen == [InteractionType.RANDOM] * 2
    seen.clear()
    with set_interaction_type(InteractionType.MODE):
        list(Collector(pendulum(), policy, frames_per_batch=2, total_frames=2, exploration_type=None))
    assert seen == [InteractionType.MODE] * 2


# ----------------------------------------------------------------------------- trajectory options
@pytest.mark.parametrize("batch", [(), (3,)])
def test_max_frames_per_traj_truncates(batch):
    n = batch[0] if batch else 1
    collector = Collector(
        pendulum(batch),
        None,
        frames_per_batch=7 * n,
        total_frames=49 * n,
        max_frames_per_traj=4,
    )
    full = concat_time(list(collector))
    ids, done, trunc = full[TRAJ], full["next", "done"], full["next", "truncated"]
    check_traj_ids(ids, done)
    _, counts = torch.unique(ids, return_counts=True)
    assert counts.max() == 4
    assert (counts[:-n] == 4).all()  # all but the trajectories still running at the end
    assert torch.equal(trunc, done)  # pendulum never terminates: every end is a truncation
    assert trunc.reshape(n, -1)[:, 3::4].all() and trunc.reshape(n, -1).sum() == n * (49 // 4)


def test_max_frames_per_traj_resets_observation():
    collector = Collector(pendulum(), None, frames_per_batch=8, total_frames=8, max_frames_per_traj=4)
    batch = next(iter(collector))
    # the step after the truncation starts from a fresh reset, not from the truncated state
    assert not torch.allclose(batch["observation"][4], batch["next", "observation"][3])
    assert torch.allclose(batch["observation"][3], batch["next", "observation"][2])


def test_reset_at_each_iter():
    collector = Collector(
        pendulum((2,), max_steps=100),
        None,
        frames_per_batch=10,
        total_frames=30,
        reset_at_each_iter=True,
    )
    batches = list(collector)
    for b in batches:
        assert b["step_count"][..., 0].eq(0).all()
    ids = [set(b[TRAJ].reshape(-1).tolist()) for b in batches]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2])
    assert [sorted(s) for s in ids] == [[0, 1], [2, 3], [4, 5]]


def test_without_reset_at_each_iter_continues():
    collector = Collector(pendulum((2,), max_steps=100), None, frames_per_batch=10, total_frames=20)
    b0, b1 = list(collector)
    assert b1["step_count"][..., 0].eq(5).all()
    assert torch.equal(b0[TRAJ], b1[TRAJ])
    assert torch.allclose(b1["observation"][:, 0], b0["next", "observation"][:, -1])


@pytest.mark.parametrize("batch", [(), (3,)])
def test_split_trajs(batch):
    n = batch[0] if batch else 1
    kwargs = {"frames_per_batch": 12 * n, "total_frames": 24 * n}
    torch.manual_seed(0)
    flat = list(Collector(pendulum(batch, max_steps=5), None, **kwargs))
    torch.manual_seed(0)
    split = list(Collector(pendulum(batch, max_steps=5), None, split_trajs=True, **kwargs))
    for f, s in zip(flat, split):
        ids = f[TRAJ].reshape(-1)
        unique = torch.unique(ids)
        assert s.batch_size[0] == unique.numel()
        mask = s[MASK]
        assert mask.dtype == torch.bool
        assert torch.equal(mask.sum(-1), torch.stack([(ids == i).sum() for i in unique]))
        assert torch.equal(s[TRAJ][:, 0], unique)
        # rows are left-aligned: valid steps first, then padding
        assert torch.equal(mask, mask.cumprod(-1).bool())
        for row, traj in enumerate(unique.tolist()):
            steps = f.reshape(-1)[ids == traj]
            k = steps.numel()
            assert (s[row, :k].exclude(MASK) == steps).all()
            if k < s.batch_size[1]:
                assert s["observation"][row, k:].eq(0).all() and s["next", "reward"][row, k:].eq(0).all()
        # pieces of trajectories cut at batch edges are rows too; complete ones are 5 steps long
        assert mask.sum(-1).max() <= 5


def test_trajs_per_batch_fixed_length():
    collector = Collector(
        pendulum((2,), max_steps=5),
        None,
        frames_per_batch=20,
        total_frames=40,
        trajs_per_batch=3,
    )
    batches = list(collector)
    for b in batches:
        assert b.batch_size == torch.Size([3, 5])
        assert b[MASK].all()
        assert torch.equal(b["step_count"], torch.arange(5).expand(3, 5))
        assert b["next", "done"][:, -1].all() and not b["next", "done"][:, :-1].any()
        assert len(set(b[TRAJ][:, 0].tolist())) == 3
    assert collector.frames >= 40


def test_trajs_per_batch_yields_complete_trajectories():
    env = TransformedEnv(CartPoleEnv(batch_size=[3], seed=0), StepCounter())
    collector = Collector(env, None, frames_per_batch=21, total_frames=300, trajs_per_batch=4)
    for b in collector:
        assert b.batch_size[0] == 4
        mask = b[MASK]
        lengths = mask.sum(-1)
        assert b["step_count"][:, 0].eq(0).all(), "every trajectory starts at its first step"
        last = b["next", "done"][torch.arange(4), lengths - 1]
        assert last.all(), "every trajectory ends with done"


def test_compact_obs_drops_next_observation():
    torch.manual_seed(0)
    full = next(iter(Collector(pendulum((2,)), None, frames_per_batch=10, total_frames=10)))
    torch.manual_seed(0)
    compact = next(
        iter(
            Collector(
                pendulum((2,)),
                None,
                frames_per_batch=10,
                total_frames=10,
                compact_obs=True,
            )
        )
    )
    assert "observation" not in compact["next"]
    assert torch.equal(compact["next", "reward"], full["next", "reward"])
    assert torch.equal(compact["next", "done"], full["next", "done"])
    assert torch.equal(compact["observation"], full["observation"])
    # what was dropped is recoverable from the following root within a trajectory
    assert torch.equal(full["next", "observation"][:, :-1], compact["observation"][:, 1:])


def test_postproc_applied():
    calls = []

    def postproc(batch):
        calls.append(batch.batch_size)
        batch.set("doubled", batch["next", "reward"] * 2)
        return batch

    out = list(Collector(pendulum(), None, frames_per_batch=4, total_frames=10, postproc=postproc))
    assert calls == [torch.Size([4]), torch.Size([4]), torch.Size([2])]
    for b in out:
        assert torch.equal(b["doubled"], b["next", "reward"] * 2)


def test_replay_buffer_receives_batches():
    from rl_replay import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    torch.manual_seed(0)
    collector = Collector(pendulum(), None, frames_per_batch=8, total_frames=20, replay_buffer=rb)
    assert list(collector) == [None, None, None]
    assert len(rb) == 20
    torch.manual_seed(0)
    reference = concat_time(list(Collector(pendulum(), None, frames_per_batch=8, total_frames=20)))
    stored = rb.storage[torch.arange(20)] if hasattr(rb, "storage") else rb[:20]
    assert torch.equal(stored["observation"], reference["observation"])
    assert torch.equal(stored["next", "reward"], reference["next", "reward"])
    assert torch.equal(stored[TRAJ], reference[TRAJ])


def test_replay_buffer_batched_env():
    from rl_replay import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    collector = Collector(pendulum((4,)), None, frames_per_batch=20, total_frames=40, replay_buffer=rb)
    assert list(collector) == [None, None]
    # a [4, T] batch is written along its first dim: 4 rows of 5 steps per batch
    assert len(rb) * 5 == 40


# ----------------------------------------------------------------------------- seeding, state, lifecycle
@pytest.mark.parametrize("policy", ["random", "module"])
def test_set_seed_reproducible(policy):
    def run(seed):
        pol = None if policy == "random" else linear_module(0.1)
        collector = Collector(pendulum((2,), max_steps=6), pol, frames_per_batch=10, total_frames=30)
        out = collector.set_seed(seed)
        return out, list(collector)

    s1, a = run(7)
    s2, b = run(7)
    _, c = run(8)
    assert s1 == s2
    for x, y in zip(a, b):
        assert (x == y).all()
    assert not torch.equal(a[0]["observation"], c[0]["observation"])


def noisy_policy(td):
    """A stochastic policy that draws from torch's global generator (as exploration noise does)."""
    return td.set(
        "action", (0.1 * td["observation"][..., :1] + torch.randn_like(td["observation"][..., :1])).clamp(-2, 2)
    )


def seeded_run(seed, global_seed=0, policy=noisy_policy):
    torch.manual_seed(global_seed)  # what the global generator holds must not matter to a seeded collector
    collector = Collector(
        pendulum((2,), max_steps=6), policy, frames_per_batch=10, total_frames=30, init_random_frames=10
    )
    out = collector.set_seed(seed)
    return out, list(collector)


def test_set_seed_follows_the_convention():
    # the env (one generator; StepCounter draws nothing) gets the seed, the collector's generator the next one
    collector = Collector(pendulum((2,), max_steps=6), None, frames_per_batch=10, total_frames=10)
    assert collector.set_seed(3) == 5
    assert collector.set_seed(3, static_seed=True) == 3
    reference = pendulum((2,), max_steps=6)
    assert reference.set_seed(3) == 4
    assert torch.equal(collector.env.reset()["observation"], reference.reset()["observation"])
    for bad in (1.5, True, None):
        with pytest.raises(TypeError, match="Collector.set_seed: seed must be an int, got"):
            collector.set_seed(bad)


def test_set_seed_and_collection_leave_the_global_generator_alone():
    torch.manual_seed(123)
    collector = Collector(pendulum((2,)), noisy_policy, frames_per_batch=10, total_frames=20, init_random_frames=10)
    state = torch.get_rng_state()  # (building the collector runs the policy once, on the global generator)
    collector.set_seed(3)
    assert torch.equal(torch.get_rng_state(), state)  # not reseeded (TorchRL's set_seed calls torch.manual_seed)
    list(collector)  # random actions and the policy's noise come from the collector's generator
    assert torch.equal(torch.get_rng_state(), state)


def test_same_seed_same_data_with_random_frames_and_noise():
    s1, a = seeded_run(7, global_seed=0)
    s2, b = seeded_run(7, global_seed=1)  # another global state: the same data
    _, c = seeded_run(8)
    assert s1 == s2 == 9
    for x, y in zip(a, b, strict=True):
        assert (x == y).all()
    assert not torch.equal(a[0]["action"], c[0]["action"])  # random-action frames differ with the seed
    assert not torch.equal(a[-1]["action"], c[-1]["action"])  # and so does the policy's noise


def test_state_dict_carries_the_generator():
    collector = Collector(pendulum(), noisy_policy, frames_per_batch=8, total_frames=24, init_random_frames=8)
    collector.set_seed(5)
    it = iter(collector)
    next(it)
    state = copy.deepcopy(collector.state_dict())
    assert state["generator"].dtype is torch.uint8
    uninterrupted = list(it)
    resumed = Collector(pendulum(seed=1), noisy_policy, frames_per_batch=8, total_frames=24, init_random_frames=8)
    resumed.load_state_dict(state)  # never seeded: the generator comes from the state
    rest = list(resumed)
    assert len(rest) == len(uninterrupted) == 2
    for b, u in zip(rest, uninterrupted):
        assert (b == u).all()
    with pytest.raises(ValueError, match=r"state\['generator'\] must be a uint8 tensor"):
        resumed.load_state_dict({**state, "generator": [1, 2]})


def test_state_dict_resume_mid_run():
    net = linear_module(0.0)
    collector = Collector(
        pendulum(),
        TensorDictModule(net, ["observation"], ["action"]),
        frames_per_batch=8,
        total_frames=30,
    )
    it = iter(collector)
    next(it), next(it)
    collector.update_policy_weights_()
    state = copy.deepcopy(collector.state_dict())
    assert state["frames"] == 16 and state["policy_version"] == 1
    uninterrupted = list(it)

    other = linear_module(0.0)
    with torch.no_grad():
        other.bias.fill_(9.0)  # overwritten by the state dict
    resumed = Collector(
        pendulum(seed=1),
        TensorDictModule(other, ["observation"], ["action"]),
        frames_per_batch=8,
        total_frames=30,
    )
    resumed.load_state_dict(state)
    assert resumed.frames == 16 and resumed.policy_version == 1
    rest = list(resumed)
    assert [b.batch_size for b in rest] == [torch.Size([8]), torch.Size([6])]
    assert resumed.frames == 30
    assert all(b[VERSION].eq(1).all() for b in rest)
    for b in rest:
        assert torch.allclose(b["action"], expected_action(net, b))
    # the pendulum is resumable: the collector goes on from the step it was at, as the uninterrupted one did
    assert len(rest) == len(uninterrupted)
    for b, u in zip(rest, uninterrupted):
        assert (b == u).all()
    assert int(rest[0][TRAJ].min()) == 0  # the trajectory begun before the checkpoint goes on


class _NotResumable(PendulumEnv):
    @property
    def resumable(self):
        return False


def test_state_dict_resume_with_an_env_that_is_not_resumable_starts_new_trajectories():
    def make(seed):
        return TransformedEnv(_NotResumable(seed=seed), StepCounter(max_steps=100))

    collector = Collector(make(0), None, frames_per_batch=8, total_frames=32)
    it = iter(collector)
    next(it), next(it)
    state = copy.deepcopy(collector.state_dict())
    assert "carrier" not in state  # nothing to continue from
    resumed = Collector(make(1), None, frames_per_batch=8, total_frames=32)
    resumed.load_state_dict(state)
    after_load = resumed.state_dict()
    rest = list(resumed)
    assert [b.batch_size for b in rest] == [torch.Size([8])] * 2
    # a reset starts new trajectories, whose ids keep counting (no collision with earlier ids)
    saved = int(state["traj_pool"]["traj_id"])  # the next trajectory id (TorchRL's layout)
    assert saved == 1  # one env: the first trajectory (id 0) has not ended in 16 steps
    # the new trajectories' ids are taken at load, after the saved ones: no collision with earlier ids
    assert int(after_load["traj_pool"]["traj_id"]) == saved + 1
    assert rest[0][TRAJ].eq(saved).all()
    assert int(rest[0]["step_count"][0]) == 0
    carrier = Collector(pendulum(), None, frames_per_batch=8, total_frames=32)
    next(iter(carrier))
    with pytest.raises(ValueError, match="not resumable"):
        Collector(make(2), None, frames_per_batch=8, total_frames=32).load_state_dict(carrier.state_dict())


def test_reset_restarts_trajectories_keeps_frames():
    collector = Collector(pendulum((2,), max_steps=50), None, frames_per_batch=6, total_frames=18)
    it = iter(collector)
    first = next(it)
    collector.reset()
    second = next(it)
    assert collector.frames == 12
    assert second["step_count"][..., 0].eq(0).all()
    assert not (set(first[TRAJ].reshape(-1).tolist()) & set(second[TRAJ].reshape(-1).tolist()))


def test_shutdown_then_iterate_raises():
    collector = Collector(pendulum(), None, frames_per_batch=4, total_frames=8)
    next(iter(collector))
    collector.shutdown()
    collector.shutdown()  # idempotent
    with pytest.raises(RuntimeError, match="shutdown"):
        next(iter(collector))


def test_progress_bar(capsys):
    pytest.importorskip("tqdm")
    collector = Collector(pendulum(), None, frames_per_batch=5, total_frames=12, progress_bar=True)
    sizes = [b.numel() for b in collector]
    assert sizes == [5, 5, 2]
    err = capsys.readouterr().err
    assert "12/12" in err


def test_repr_mentions_frames():
    collector = Collector(pendulum(), None, frames_per_batch=4, total_frames=8)
    list(collector)
    assert "frames=8" in repr(collector) and "PendulumEnv" in repr(collector)


# ----------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"frames_per_batch": 0}, "frames_per_batch"),
        ({"frames_per_batch": 2.5}, "frames_per_batch"),
        ({"frames_per_batch": 4, "total_frames": 0}, "total_frames"),
        ({"frames_per_batch": 4, "total_frames": -5}, "total_frames"),
        ({"frames_per_batch": 4, "max_frames_per_traj": 0}, "max_frames_per_traj"),
        ({"frames_per_batch": 4, "trajs_per_batch": 0}, "trajs_per_batch"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Collector(pendulum(), None, **kwargs)


def test_bad_env_arguments():
    with pytest.raises(TypeError, match="callable"):
        Collector(42, None, frames_per_batch=4)
    with pytest.raises(TypeError, match="create_env_kwargs"):
        Collector(pendulum(), None, frames_per_batch=4, create_env_kwargs={"seed": 1})
    with pytest.raises(TypeError):
        Collector(PendulumEnv, None)  # frames_per_batch is required


def test_rollout_frames_and_finish_batch_are_what_workers_run():
    collector = Collector(pendulum((2,)), None, frames_per_batch=10, total_frames=-1, split_trajs=True)
    assert collector.n_envs == 2
    raw = collector.rollout_frames(9)  # whole steps of both sub-envs: 5 steps
    assert raw.batch_size == torch.Size([2, 5]) and collector.frames == 10
    calls = []
    short = collector.rollout_frames(20, stop=lambda: calls.append(1) or len(calls) >= 2)
    assert short.batch_size == torch.Size([2, 2]) and collector.frames == 14  # stop() true on its 2nd call
    out = collector.finish_batch(raw)
    assert out.get(("collector", "mask")).sum() == 10  # split into padded trajectories


# ----------------------------------------------------------------------------- the time dim's name
@pytest.mark.parametrize(
    "make, kwargs, names",
    [
        (lambda: pendulum(), {}, ["time"]),
        (lambda: pendulum((2,)), {}, [None, "time"]),
        (lambda: CartPoleEnv(seed=0), {"split_trajs": True}, [None, "time"]),
        (lambda: CartPoleEnv(seed=0), {"trajs_per_batch": 2}, [None, "time"]),
        (lambda: pendulum(), {"max_frames_per_traj": 3}, ["time"]),
    ],
)
def test_batches_name_their_time_dim(make, kwargs, names):
    # TorchRL 0.14.1's collectors yield batches whose last dim is named "time" (split ones: [None, "time"])
    for batch in Collector(make(), None, frames_per_batch=8, total_frames=16, **kwargs):
        assert batch.names == names


# ----------------------------------------------------------------------------- truncation keys
class _Counter:
    """A duck-typed env that counts up and never ends, with no "truncated" flag of its own."""

    batch_size = torch.Size([])
    observation_keys = ["count"]
    action_keys = ["action"]

    def reset(self, td=None):
        out = TensorDict(count=torch.zeros(()), done=torch.tensor(False), terminated=torch.tensor(False))
        if td is None:
            return out
        mask = td.pop("_reset", None)
        assert mask is None or bool(mask)  # a scalar env resets whole
        td.update(out)
        return td

    def rand_action(self, td):
        return td.set("action", torch.ones(()))

    def step(self, td):
        count = td["count"] + td["action"]
        return td.set(
            "next",
            TensorDict(count=count, reward=count.clone(), done=torch.tensor(False), terminated=torch.tensor(False)),
        )

    def step_and_maybe_reset(self, td):
        from rl_envs import step_mdp

        td = self.step(td)
        return td, step_mdp(td, done_keys=["done", "terminated"])


def _hand_stepped(env, steps: int, max_steps: int) -> list:
    """The steps a collector with ``max_frames_per_traj=max_steps`` records, stepped by hand."""
    td, rows, length = env.reset(), [], 0
    for _ in range(steps):
        td = env.step(env.rand_action(td))
        length += 1
        cut = length == max_steps
        rows.append({"count": td["count"].item(), "next_count": td["next", "count"].item(), "truncated": cut})
        td = (
            env.reset()
            if cut
            else TensorDict(count=td["next", "count"], done=td["next", "done"], terminated=td["next", "terminated"])
        )
        length = 0 if cut else length
    return rows


def test_max_frames_per_traj_batches_all_have_the_same_keys():
    collector = Collector(_Counter(), None, frames_per_batch=5, total_frames=15, max_frames_per_traj=3)
    batches = list(collector)
    keys = [sorted(map(str, b.keys(True, True))) for b in batches]
    assert (
        keys
        == [
            sorted(
                map(
                    str,
                    [
                        "action",
                        "count",
                        "done",
                        "terminated",
                        "truncated",
                        ("collector", "policy_version"),
                        ("collector", "traj_ids"),
                        ("next", "count"),
                        ("next", "done"),
                        ("next", "reward"),
                        ("next", "step_count"),
                        ("next", "terminated"),
                        ("next", "truncated"),
                        "step_count",
                    ],
                )
            )
        ]
        * 3
    )
    full = torch.cat(batches, -1)
    ref = _hand_stepped(_Counter(), 15, 3)
    assert full["count"].tolist() == [r["count"] for r in ref] == [0.0, 1.0, 2.0] * 5
    assert full["next", "count"].tolist() == [r["next_count"] for r in ref]
    assert full["next", "truncated"].tolist() == [r["truncated"] for r in ref] == [False, False, True] * 5
    assert full["next", "done"].tolist() == [False, False, True] * 5
    assert not full["truncated"].any() and not full["done"].any()
    assert full[TRAJ].tolist() == [i // 3 for i in range(15)]
