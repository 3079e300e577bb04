"""Multi-process collectors: exact frames, unique traj ids, reference equality, weights, faults, shutdown."""

import gc
import multiprocessing as mp
import os
import signal
import time

import pytest
import torch
from torch import nn
from tdict.nn import TensorDictModule

from rl_collect import Collector
from hypothesis import given, settings
from hypothesis import strategies as st

from rl_collect._worker import TRAJ_ID_STRIDE, split_frames
from rl_collect.multi_async import AsyncCollector, MultiAsyncCollector
from rl_collect.multi_sync import MultiSyncCollector
from rl_collect.weight_sync import PipeWeightSyncScheme
from rl_envs import CartPoleEnv, PendulumEnv


def _policy():
    torch.manual_seed(0)
    return TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])


def _set_constant(policy, value):
    with torch.no_grad():
        policy.module.weight.zero_()
        policy.module.bias.fill_(value)


class _Wrapped:
    """A duck-typed env around PendulumEnv that misbehaves after ``after`` steps."""

    def __init__(self, mode, after=0, delay=0.0):
        self._env = PendulumEnv()
        self._mode, self._after, self._delay, self._steps = mode, after, delay, 0

    def __getattr__(self, name):
        return getattr(self._env, name)

    def step_and_maybe_reset(self, td):
        self._steps += 1
        if self._steps > self._after:
            if self._mode == "raise":
                raise ValueError("boom from the env")
            if self._mode == "hang":
                time.sleep(120)
            if self._mode == "slow":
                time.sleep(self._delay)
            if self._mode == "busy":  # computes for delay seconds: slow, not stuck
                end = time.monotonic() + self._delay
                while time.monotonic() < end:
                    sum(range(1000))
        return self._env.step_and_maybe_reset(td)


def _no_children():
    deadline = time.monotonic() + 5
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return mp.active_children() == []


def test_sync_exact_frames_shapes_and_cat():
    with MultiSyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=20, total_frames=51) as c:
        sizes = [b.batch_size for b in c]
        assert c.frames == 51
    assert sizes == [torch.Size([2, 10])] * 2 + [torch.Size([2, 6])]
    with MultiSyncCollector(
        [PendulumEnv, PendulumEnv], None, frames_per_batch=20, total_frames=50, cat_results=-1
    ) as c:
        batches = list(c)
    assert [b.numel() for b in batches] == [20, 20, 10]
    last = batches[-1]
    assert last["collector", "worker_id"].tolist() == [0] * 5 + [1] * 5
    assert _no_children()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5_000), st.lists(st.integers(1, 8), min_size=1, max_size=6))
def test_split_frames_whole_steps_and_smallest_overshoot(frames, n_envs):
    shares = split_frames(frames, n_envs)
    assert len(shares) == len(n_envs)
    assert all(share % m == 0 and share >= 0 for share, m in zip(shares, n_envs))  # whole env steps
    assert frames <= sum(shares) < frames + max(n_envs)
    if len(set(n_envs)) == 1 and frames % n_envs[0] == 0:
        assert sum(shares) == frames  # exact whenever whole steps can make it with equal workers
    # even: no worker holds more than one step beyond the least loaded one (plus its rounding)
    assert max(shares) - min(shares) <= 2 * max(n_envs)


def test_sync_frames_exact_when_workers_batch_envs():
    """3 workers x 2 sub-envs, 8 frames per batch: shares of 4, 2 and 2 frames (the old split
    rounded each third up, 4 + 4 + 2, and collected 40 frames for 32)."""
    fns = [lambda: PendulumEnv(batch_size=[2])] * 3
    with MultiSyncCollector(fns, None, frames_per_batch=8, total_frames=32) as c:
        batches = list(c)
        assert c.frames == 32
    assert len(batches) == 4
    for b in batches:
        assert b.batch_size == torch.Size([3, 2, 2])  # padded to the longest share
        assert int(b["collector", "mask"].sum()) == 8
    assert _no_children()


def test_sync_last_batch_uneven_is_masked():
    with MultiSyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=20, total_frames=25) as c:
        batches = list(c)
    last = batches[-1]
    assert last.batch_size == torch.Size([2, 3])
    assert last["collector", "mask"].sum() == 5
    assert last["collector", "traj_ids"][1, 2] == -1


def test_traj_ids_unique_across_workers():
    with MultiSyncCollector([CartPoleEnv, CartPoleEnv], None, frames_per_batch=200, total_frames=400) as c:
        c.set_seed(0)
        batches = list(c)
    ids = torch.cat([b["collector", "traj_ids"] for b in batches], -1)
    w0, w1 = set(ids[0].tolist()), set(ids[1].tolist())
    assert max(w0) < TRAJ_ID_STRIDE <= min(w1)
    assert len(w0) > 2 and len(w1) > 2  # CartPole episodes end under a random policy
    # ids continue across batches within a worker (one trajectory spans the boundary)
    assert batches[0]["collector", "traj_ids"][0, -1] <= batches[1]["collector", "traj_ids"][0, 0]


def test_workers_get_distinct_seeds():
    with MultiSyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=20, total_frames=20) as c:
        assert c.set_seed(3) == 7  # worker 0: env 3, collector 4; worker 1: env 5, collector 6
        (batch,) = list(c)
    assert not torch.equal(batch[0]["observation"], batch[1]["observation"])
    assert not torch.equal(batch[0]["action"], batch[1]["action"])  # random actions: distinct generators
    assert _no_children()


def test_sync_equals_single_process_reference():
    policy = _policy()
    with MultiSyncCollector([PendulumEnv, PendulumEnv], policy, frames_per_batch=40, total_frames=80) as c:
        next_seed = c.set_seed(3)
        batches = list(c)
    refs = []
    seed = 3
    for _ in range(2):
        ref = Collector(PendulumEnv, _policy(), frames_per_batch=20, total_frames=40)
        seed = ref.set_seed(seed)
        refs.append(torch.cat(list(ref), -1))
    assert seed == next_seed
    got = torch.cat(batches, -1)
    for w in range(2):
        for key in ["observation", "action", ("next", "reward"), ("next", "observation")]:
            torch.testing.assert_close(got[w][key], refs[w][key])
        assert torch.equal(got[w]["collector", "traj_ids"] - w * TRAJ_ID_STRIDE, refs[w]["collector", "traj_ids"])
    assert not torch.equal(got[0]["observation"], got[1]["observation"])  # distinct seeds per worker


@pytest.mark.parametrize("scheme", [None, "pipe"])
def test_sync_new_weights_in_next_batch(scheme):
    policy = _policy()
    _set_constant(policy, 0.25)
    sync = PipeWeightSyncScheme() if scheme == "pipe" else None
    with MultiSyncCollector([PendulumEnv, PendulumEnv], policy, frames_per_batch=10, weight_sync_scheme=sync) as c:
        it = iter(c)
        first = next(it)
        assert (first["collector", "policy_version"] == 0).all()
        assert torch.allclose(first["action"], torch.tensor(0.25))
        _set_constant(policy, -0.5)
        c.update_policy_weights_()
        second = next(it)
        assert (second["collector", "policy_version"] == 1).all()
        assert torch.allclose(second["action"], torch.tensor(-0.5))
        # explicit weights
        from tdict import TensorDict

        td = TensorDict.from_module(policy).apply(lambda t: t.detach().clone())
        td["module", "bias"].fill_(1.5)
        c.update_policy_weights_(td)
        third = next(it)
        assert (third["collector", "policy_version"] == 2).all()
        assert torch.allclose(third["action"], torch.tensor(1.5))
        assert c.policy_version == 2


def test_async_versions_tag_the_weights_used():
    policy = _policy()
    _set_constant(policy, 0.25)
    with MultiAsyncCollector([PendulumEnv, PendulumEnv], policy, frames_per_batch=10, total_frames=200) as c:
        seen = []
        for i, batch in enumerate(c):
            version = int(batch["collector", "policy_version"][0])
            assert (batch["collector", "policy_version"] == version).all()
            expected = 0.25 if version == 0 else -0.5
            assert torch.allclose(batch["action"], torch.tensor(expected))
            seen.append((int(batch["collector", "worker_id"][0]), version))
            if i == 3:
                _set_constant(policy, -0.5)
                c.update_policy_weights_()
        assert c.frames == 200
    assert {w for w, _ in seen} == {0, 1}
    assert seen[-1][1] == 1 and seen[0][1] == 0


def test_async_collector_exact_and_state_dict():
    c = AsyncCollector(PendulumEnv, None, frames_per_batch=16, total_frames=40)
    assert [b.numel() for b in c] == [16, 16, 8]
    state = c.state_dict()
    assert state["frames"] == 40 and state["worker0"]["frames"] == 40
    c.shutdown()
    c2 = MultiSyncCollector([PendulumEnv], None, frames_per_batch=16, total_frames=48)
    c2.load_state_dict(state)
    assert [b.numel() for b in c2] == [8]  # resumes at frame 40
    assert c2.frames == 48
    c2.shutdown()
    assert _no_children()


def test_preemption_uses_partial_batches():
    fns = [PendulumEnv, lambda: _Wrapped("slow", after=0, delay=0.02)]
    with MultiSyncCollector(fns, None, frames_per_batch=200, total_frames=400, preemptive_threshold=0.5) as c:
        t0 = time.monotonic()
        batch = next(iter(c))
        elapsed = time.monotonic() - t0
        mask = batch["collector", "mask"]
        assert mask[0].all() and mask[0].sum() == 100
        assert 1 <= int(mask[1].sum()) < 50
        assert c.frames == int(mask.sum())
        assert elapsed < 1.5  # not 100 * 20 ms
        assert (batch["collector", "traj_ids"][~mask] == -1).all()


def test_batches_name_their_time_dim():
    # as TorchRL 0.14.1: stacked batches are [None, "time"], batches of one worker or concatenated ["time"]
    cases = [
        (MultiSyncCollector, {}, [[None, "time"]] * 2),
        (MultiSyncCollector, {"cat_results": -1}, [["time"]] * 2),
        (MultiSyncCollector, {"total_frames": 10}, [[None, "time"]] * 2),  # the last batch is uneven: padded
        (MultiSyncCollector, {"split_trajs": True}, [[None, "time"]] * 2),
        (MultiAsyncCollector, {}, [["time"]] * 2),
    ]
    for cls, kwargs, names in cases:
        kwargs = {"total_frames": 12, **kwargs}
        with cls([PendulumEnv, PendulumEnv], None, frames_per_batch=6, **kwargs) as c:
            assert [b.names for b in c] == names, (cls.__name__, kwargs)
    with AsyncCollector(PendulumEnv, None, frames_per_batch=6, total_frames=12) as c:
        assert [b.names for b in c] == [["time"]] * 2
    assert _no_children()


def test_worker_exception_carries_traceback():
    fns = [PendulumEnv, lambda: _Wrapped("raise", after=3)]
    c = MultiSyncCollector(fns, None, frames_per_batch=20)
    with pytest.raises(RuntimeError, match="worker 1") as info:
        list(c)
    headline, _, rest = str(info.value).partition("\n")
    # the first line names the error itself; the worker's traceback follows
    assert headline.startswith("rl_collect: worker 1 (pid ")
    assert headline.endswith(" raised ValueError: boom from the env")
    assert rest.startswith("Traceback")
    assert _no_children()


def test_killed_worker_is_named_with_exit_code():
    c = MultiSyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=20)
    it = iter(c)
    next(it)
    pid = c._pool.procs[1].pid
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"worker 1 .*exit code -9"):
        next(it)
    assert _no_children()


def test_hung_worker_times_out():
    fns = [PendulumEnv, lambda: _Wrapped("hang", after=2)]
    c = MultiAsyncCollector(fns, None, frames_per_batch=10, worker_timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="worker"):
        for _ in c:
            pass
    assert time.monotonic() - t0 < 5
    assert _no_children()


def test_shutdown_and_gc_leave_nothing():
    c = MultiAsyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=10)
    next(iter(c))  # workers are mid-collection
    c.shutdown()
    c.shutdown()
    assert _no_children()
    c = MultiSyncCollector([PendulumEnv, PendulumEnv], None, frames_per_batch=10)
    pids = [p.pid for p in c._pool.procs]
    del c
    gc.collect()
    assert _no_children()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_split_trajs_and_postproc_in_parent():
    seen = []
    with MultiSyncCollector(
        [CartPoleEnv, CartPoleEnv],
        None,
        frames_per_batch=100,
        total_frames=100,
        split_trajs=True,
        postproc=lambda b: seen.append(b.batch_size) or b,
    ) as c:
        c.set_seed(1)
        (batch,) = list(c)
    assert int(batch["collector", "mask"].sum()) == 100
    ids = batch["collector", "traj_ids"][batch["collector", "mask"]]
    assert len(seen) == 1 and seen[0][0] == len(set(ids.tolist()))


def test_bad_arguments():
    with pytest.raises(TypeError, match="create_env_fns"):
        MultiSyncCollector(PendulumEnv, None, frames_per_batch=10)
    with pytest.raises(ValueError, match="preemptive_threshold"):
        MultiSyncCollector([PendulumEnv], None, frames_per_batch=10, preemptive_threshold=1.5)
    with pytest.raises(ValueError, match="trajs_per_write"):
        MultiSyncCollector([PendulumEnv], None, frames_per_batch=10, trajs_per_write=2)
    assert _no_children()


def test_spawn_start_method_collects_and_shuts_down():
    # spawn: nothing inherited from the parent; the env class and the policy travel by pickle
    collector = MultiSyncCollector(
        [PendulumEnv, PendulumEnv],
        _policy(),
        frames_per_batch=20,
        total_frames=40,
        mp_start_method="spawn",
        worker_timeout=120.0,
    )
    try:
        batches = list(collector)
        assert [b.numel() for b in batches] == [20, 20]
        ids = torch.cat([b[("collector", "traj_ids")].reshape(-1) for b in batches])
        assert set((ids // TRAJ_ID_STRIDE).tolist()) == {0, 1}  # both workers delivered
        collector.update_policy_weights_()
    finally:
        collector.shutdown()
    assert _no_children()


# ----------------------------------------------------------------------------- liveness: heartbeats, parent death
def test_default_liveness_settings():
    import inspect

    # a dead worker surfaces at once, a stuck one within about 21 s; a computing batch has no time limit by default
    for cls in (MultiSyncCollector, MultiAsyncCollector):
        params = inspect.signature(cls).parameters
        assert params["worker_timeout"].default is None, cls
        assert params["heartbeat_timeout"].default == 20.0 and params["heartbeat_interval"].default == 1.0, cls
    with AsyncCollector(PendulumEnv, None, frames_per_batch=4) as c:
        assert (c.worker_timeout, c.heartbeat_timeout, c.heartbeat_interval) == (None, 20.0, 1.0)
    assert _no_children()


def test_slow_but_live_worker_is_not_a_hang():
    # worker 1's steps compute for 2 s, past the heartbeat timeout of 1.5 s: it keeps beating, so it is waited for
    fns = [PendulumEnv, lambda: _Wrapped("busy", after=1, delay=2.0)]
    with MultiSyncCollector(
        fns, _policy(), frames_per_batch=6, total_frames=6, heartbeat_interval=0.1, heartbeat_timeout=1.5
    ) as c:
        c.set_seed(3)
        (batch,) = list(c)
    assert batch.batch_size == torch.Size([2, 3]) and c.frames == 6
    ref = Collector(PendulumEnv, _policy(), frames_per_batch=3, total_frames=3)
    ref.set_seed(ref.set_seed(3))  # worker 1 gets the seed worker 0 hands on
    (expected,) = list(ref)
    torch.testing.assert_close(batch[1]["next", "observation"], expected["next", "observation"])
    assert _no_children()


def test_frozen_worker_is_detected_by_its_missing_heartbeat():
    c = MultiSyncCollector(
        [PendulumEnv, PendulumEnv], None, frames_per_batch=10, heartbeat_interval=0.1, heartbeat_timeout=1.5
    )
    it = iter(c)
    next(it)
    pid = c._pool.procs[1].pid
    os.kill(pid, signal.SIGSTOP)  # alive but never scheduled: no batch, no heartbeat
    start = time.monotonic()
    with pytest.raises(
        TimeoutError, match=rf"no progress \(heartbeat\) from worker\(s\) 1 \(pid {pid}\) for heartbeat_timeout=1.5s"
    ):
        next(it)
    assert 1.5 <= time.monotonic() - start < 15
    assert _no_children()


@pytest.mark.parametrize("cls", [MultiSyncCollector, MultiAsyncCollector])
def test_a_step_that_sleeps_is_a_hang_without_worker_timeout(cls):
    # alive (its heartbeat thread runs) but stuck in a step that uses no CPU: detected by the heartbeat rule
    fns = [PendulumEnv, lambda: _Wrapped("hang", after=2)]
    c = cls(fns, None, frames_per_batch=10, heartbeat_interval=0.1, heartbeat_timeout=1.5)
    start = time.monotonic()
    with pytest.raises(
        TimeoutError, match=r"no progress \(heartbeat\) from worker\(s\) 1 \(pid \d+\) for heartbeat_timeout=1.5s"
    ):
        for _ in c:
            pass
    assert 1.5 <= time.monotonic() - start < 15
    assert _no_children()


def test_an_idle_pause_between_batches_is_not_a_hang():
    # workers send no heartbeat while they wait for the next request: silence counts from the request
    with MultiSyncCollector(
        [PendulumEnv, PendulumEnv],
        None,
        frames_per_batch=10,
        total_frames=20,
        heartbeat_interval=0.1,
        heartbeat_timeout=1.5,
    ) as c:
        sizes = []
        for batch in c:
            sizes.append(batch.numel())
            time.sleep(2.5)  # the learner is busy for longer than heartbeat_timeout
    assert sizes == [10, 10]
    assert _no_children()


def test_bad_liveness_arguments():
    with pytest.raises(
        ValueError, match=r"MultiSyncCollector: heartbeat_interval must be a number of seconds > 0, got -1"
    ):
        MultiSyncCollector([PendulumEnv], None, frames_per_batch=10, heartbeat_interval=-1)
    with pytest.raises(
        ValueError,
        match=r"MultiAsyncCollector: heartbeat_timeout must be None or a number of seconds > "
        r"heartbeat_interval=1.0, got 1.0",
    ):
        MultiAsyncCollector([PendulumEnv], None, frames_per_batch=10, heartbeat_timeout=1.0)
    assert _no_children()


_PARENT_SCRIPT = """
import sys, threading, time
from rl_envs import PendulumEnv
from rl_collect import {cls}


class Sleepy(PendulumEnv):
    def _step(self, td):  # marks the moment it is inside its step, then sleeps two minutes
        open({marker!r}, "w").close()
        time.sleep(120)
        return super()._step(td)


def run():
    c = {cls}([PendulumEnv, Sleepy], None, frames_per_batch=4, mp_start_method="fork")
    print(*[p.pid for p in c._pool.procs], flush=True)
    for _ in c:
        pass


if {in_thread!r}:  # started from another thread: no kernel parent-death signal, the watchdog thread acts
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
else:
    run()
"""


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("cls, in_thread", [("MultiSyncCollector", False), ("MultiAsyncCollector", True)])
def test_workers_busy_in_a_step_die_with_a_killed_parent(tmp_path, cls, in_thread):
    import subprocess
    import sys

    marker = tmp_path / "inside_step"
    script = _PARENT_SCRIPT.format(cls=cls, marker=str(marker), in_thread=in_thread)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list = []
    try:
        pids += [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2, parent.stderr.read()
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "worker 1 never entered its step"
        parent.kill()  # SIGKILL: no atexit, no finalizer runs in the parent
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10  # generous: the kernel kills them at once on Linux
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in pids if _alive(pid)], "a worker outlived its parent"
    finally:
        parent.kill()
        parent.wait(timeout=10)
        for pid in pids:  # never leave a process behind, even when the test fails
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
