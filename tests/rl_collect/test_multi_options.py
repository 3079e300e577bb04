"""Multi-process collectors with TorchRL's arguments: create_env_fn/num_workers, per-worker options
and policy factories, per-worker weights, hooks in the workers, remote-style helpers, stats,
trajectory assembly, replay-buffer writes, state layout."""

from __future__ import annotations

import os

import pytest
import torch
from rl_collect import (
    MultiAsyncCollector,
    MultiCollector,
    MultiProcessWeightSyncScheme,
    MultiSyncCollector,
    NoWeightSyncScheme,
    SharedMemWeightSyncScheme,
    WeightSyncScheme,
)
from rl_collect._worker import TRAJ_ID_STRIDE
from rl_envs import CartPoleEnv, PendulumEnv, RandomPolicy
from rl_replay import LazyTensorStorage, ReplayBuffer
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn


def _factory(value: float):
    def make() -> TensorDictModule:
        module = nn.Linear(3, 1)
        with torch.no_grad():
            module.weight.zero_()
            module.bias.fill_(value)
        return TensorDictModule(module, in_keys=["observation"], out_keys=["action"])

    return make


def _weights(value: float) -> TensorDict:
    return TensorDict({"module": {"weight": torch.zeros(1, 3), "bias": torch.full((1,), value)}})


def test_from_backend_names():
    kinds = {
        "none": NoWeightSyncScheme,
        "direct": NoWeightSyncScheme,
        "shared": SharedMemWeightSyncScheme,
        "thread": SharedMemWeightSyncScheme,
        "process": MultiProcessWeightSyncScheme,
        "multiprocessing": MultiProcessWeightSyncScheme,
    }
    for name, cls in kinds.items():
        assert type(WeightSyncScheme.from_backend(name)) is cls
    shared = WeightSyncScheme.from_backend("shared", sync=False)
    assert isinstance(shared, SharedMemWeightSyncScheme) and not shared.sync
    with pytest.raises(ValueError, match="Unsupported weight-sync backend"):
        WeightSyncScheme.from_backend("unknown")


def test_one_factory_with_num_workers_and_the_former_argument_name():
    with MultiSyncCollector(PendulumEnv, num_workers=2, frames_per_batch=8, total_frames=8) as c:
        assert c.num_workers == 2 and isinstance(c, MultiCollector)
        (batch,) = list(c)
        assert batch.batch_size == (2, 4)
    with MultiSyncCollector(create_env_fns=[PendulumEnv], frames_per_batch=4, total_frames=4) as c:
        assert [b.numel() for b in c] == [4]
    with pytest.raises(TypeError, match="not both"):
        MultiSyncCollector([PendulumEnv], create_env_fns=[PendulumEnv], frames_per_batch=4)
    with pytest.raises(ValueError, match="num_workers=3 does not match"):
        MultiSyncCollector([PendulumEnv], num_workers=3, frames_per_batch=4)
    with pytest.raises(ValueError, match="exactly one value per worker"):
        MultiSyncCollector([PendulumEnv, PendulumEnv], frames_per_batch=[4], total_frames=4)
    with pytest.raises(TypeError, match="shared base"):
        MultiCollector([PendulumEnv], frames_per_batch=4)


def test_per_worker_factories_and_per_worker_weights():
    scheme = SharedMemWeightSyncScheme(per_worker_weights=True)
    with MultiSyncCollector(
        [PendulumEnv] * 3,
        policy_factory=[_factory(float(i)) for i in range(3)],
        weight_sync_schemes={"policy": scheme},
        frames_per_batch=6,
        total_frames=18,
    ) as c:
        it = iter(c)
        actions = next(it)["action"]
        assert [float(actions[i].unique()) for i in range(3)] == [0.0, 1.0, 2.0]
        c.update_policy_weights_({0: _weights(10.0)})  # worker 0 only
        actions = next(it)["action"]
        assert [float(actions[i].unique()) for i in range(3)] == [10.0, 1.0, 2.0]
        c.update_policy_weights_({1: _weights(-1.0), 2: _weights(-2.0)})
        actions = next(it)["action"]
        assert [float(actions[i].unique()) for i in range(3)] == [10.0, -1.0, -2.0]


@pytest.mark.parametrize("scheme", [MultiProcessWeightSyncScheme, SharedMemWeightSyncScheme])
def test_factory_policy_updates_through_the_scheme(scheme):
    # the learner's policy only gives the weights; the workers build theirs with the factory
    learner = _factory(0.0)()
    with MultiAsyncCollector(
        [PendulumEnv, PendulumEnv],
        learner,
        policy_factory=_factory(0.0),
        weight_sync_schemes={"policy": scheme()},
        frames_per_batch=4,
        total_frames=200,
    ) as c:
        for batch in c:
            if bool((batch["action"] == 3.0).all()):
                break
            with torch.no_grad():
                learner.module.bias.fill_(3.0)
            c.update_policy_weights_()
        assert bool((batch["action"] == 3.0).all())


def test_per_worker_devices_and_env_kwargs():
    with MultiSyncCollector(
        [CartPoleEnv, CartPoleEnv],
        frames_per_batch=4,
        total_frames=4,
        device=["cpu", "cpu"],
        create_env_kwargs=[{"batch_size": [2]}, {"batch_size": [2]}],
    ) as c:
        (batch,) = list(c)
        assert batch.batch_size == (2, 2, 1)
    with pytest.raises(ValueError, match="create_env_kwargs has 1 entries for 2 workers"):
        MultiSyncCollector([CartPoleEnv, CartPoleEnv], frames_per_batch=4, create_env_kwargs=[{}])


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_hooks_run_in_the_workers_and_can_be_replaced(cls):
    import multiprocessing as mp

    manager = mp.Manager()
    calls = manager.list()
    try:
        with cls(
            [PendulumEnv, PendulumEnv],
            RandomPolicy(PendulumEnv().action_spec),
            frames_per_batch=8,
            total_frames=32,
            pre_collect_hook=lambda: calls.append(("pre", os.getpid())),
            post_collect_hook=lambda batch: calls.append(("post", os.getpid())),
        ) as c:
            list(c)
            pids = {pid for _, pid in calls}
            assert len(pids) == 2 and os.getpid() not in pids
            assert {kind for kind, _ in calls} == {"pre", "post"}
            calls[:] = []
            c.post_collect_hook = None
            c.pre_collect_hook = lambda: calls.append(("new", os.getpid()))
            c.total_frames = 64
            list(c)
            assert {kind for kind, _ in calls} == {"new"}
    finally:
        manager.shutdown()


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_remote_style_helpers_and_stats(cls):
    with cls([PendulumEnv, PendulumEnv], frames_per_batch=8, total_frames=16) as c:
        assert c.get_distant_attr("worker_idx") == [0, 1]
        assert c.map_fn("get_distant_attr", list_of_args=[("worker_idx",), ("worker_idx",)]) == [0, 1]
        with pytest.raises(ValueError, match="Expected 2 argument entries"):
            c.map_fn("get_distant_attr", list_of_args=[("worker_idx",)])
        with pytest.raises(RuntimeError, match=r"worker 0 raised AttributeError: .*no_such_attribute'\nTraceback"):
            c.get_distant_attr("no_such_attribute")  # the workers live on
        with pytest.raises(ValueError, match="workers must be one of"):
            c.stats(workers="bogus")
        next(iter(c))
        stats = c.stats()
        assert stats["workers"] == 2 and stats["workers_alive"] == 2 and stats["frames"] >= 8
        both = c.stats(workers="both")
        assert "frames" in both and "worker_0/frames" in both and "worker_1/frames" in both
        assert "frames" not in c.stats(workers="per_worker")
        with pytest.raises(NotImplementedError, match="fake_tensordict"):
            c.fake_tensordict()


def test_state_layout_and_restored_worker_versions():
    with MultiSyncCollector(
        [PendulumEnv, PendulumEnv],
        _factory(0.5)(),
        frames_per_batch=8,
        weight_sync_schemes={"policy": MultiProcessWeightSyncScheme()},
        track_policy_version=True,
    ) as c:
        c.update_policy_weights_()
        c.update_policy_weights_()
        state = c.state_dict()
    assert {"worker0", "worker1", "frames", "iter", "policy_version", "traj_pool"} <= set(state)
    assert [state[f"worker{i}"]["policy_version"] for i in range(2)] == [2, 2]
    # no batch yet: each worker's next id is 0; the largest, in the batches' numbering, is worker 1's
    assert [int(state[f"worker{i}"]["traj_pool"]["traj_id"]) for i in range(2)] == [0, 0]
    assert int(state["traj_pool"]["traj_id"]) == TRAJ_ID_STRIDE
    with MultiSyncCollector(
        [PendulumEnv, PendulumEnv], _factory(0.5)(), frames_per_batch=8, track_policy_version=True
    ) as c:
        c.load_state_dict(state)
        loaded = c.state_dict()
        assert [loaded[f"worker{i}"]["policy_version"] for i in range(2)] == [2, 2]
        # the ids of the trajectories each worker starts next are taken at load
        assert int(loaded["traj_pool"]["traj_id"]) == TRAJ_ID_STRIDE + 1
        batch = next(iter(c))
        assert batch["next", "policy_version"].unique().tolist() == [2]


def test_preemption_threshold_bounds_and_int_cat_dim():
    with pytest.raises(ValueError, match="preemptive_threshold"):
        MultiSyncCollector([PendulumEnv], frames_per_batch=4, preemptive_threshold=1.5)
    with MultiSyncCollector([PendulumEnv, PendulumEnv], frames_per_batch=8, preemptive_threshold=1.0) as c:
        assert c.interruptor is None and c.preemptive_threshold == 1.0
    with MultiSyncCollector([PendulumEnv, PendulumEnv], frames_per_batch=8, total_frames=8, cat_results=0) as c:
        (batch,) = list(c)
        assert batch.batch_size == (8,)


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
@pytest.mark.parametrize("traj_format", ["padded", "cat"])
def test_trajs_per_batch_assembles_whole_trajectories(cls, traj_format):
    with cls(
        [CartPoleEnv, CartPoleEnv], frames_per_batch=40, total_frames=400, trajs_per_batch=2, traj_format=traj_format
    ) as c:
        batches = list(c)
    assert batches
    for batch in batches:
        done = batch["next", "done"]
        if traj_format == "padded":
            mask = batch["collector", "mask"]
            assert batch.shape[0] == 2 and int(done[mask].sum()) == 2
            last = mask.sum(-1) - 1
            assert bool(done[torch.arange(2), last].all())
        else:
            assert batch.ndim == 1 and int(done.sum()) == 2 and bool(done[-1])
            ids = batch["collector", "traj_ids"]
            assert int((ids[1:] != ids[:-1]).sum()) == 1  # two contiguous segments


def test_replay_buffer_gets_each_workers_share_and_whole_trajectories():
    buffer = ReplayBuffer(storage=LazyTensorStorage(1000))
    with MultiSyncCollector(
        [PendulumEnv, PendulumEnv], frames_per_batch=16, total_frames=32, replay_buffer=buffer
    ) as c:
        assert list(c) == [None, None]
    assert len(buffer) == 32
    ids = buffer[:]["collector", "traj_ids"]
    assert bool((ids[:8] == ids[0]).all()) and bool((ids[8:16] == ids[8]).all()) and ids[0] != ids[8]
    buffer = ReplayBuffer(storage=LazyTensorStorage(2000))
    with MultiSyncCollector(
        [CartPoleEnv, CartPoleEnv], frames_per_batch=40, total_frames=200, replay_buffer=buffer, trajs_per_batch=2
    ) as c:
        list(c)
    stored = buffer[: len(buffer)]
    done = stored["next", "done"]
    assert bool(done[-1])  # only whole trajectories were written
    for traj in stored["collector", "traj_ids"].unique():
        assert bool(done[stored["collector", "traj_ids"] == traj][-1])
