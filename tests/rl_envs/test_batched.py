"""SerialEnv / ParallelEnv: values against separate envs stepped by hand, partial resets, specs,
and worker faults (a killed worker, a raising env, a hanging env) surfacing in the parent."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from rl_envs import (
    CartPoleEnv,
    EnvCreator,
    PendulumEnv,
    StepCounter,
    TransformedEnv,
    check_env_specs,
    step_mdp,
)
from rl_envs.batched import ParallelEnv, SerialEnv
from tdict import TensorDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # spawned workers import the factories by name
import _batched_children as children

W = 3  # workers


def _fork_parallel(*args, **kwargs):
    return ParallelEnv(*args, mp_start_method="fork", **kwargs)


BATCHED = [SerialEnv, _fork_parallel]
IDS = ["serial", "parallel"]


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a reaped worker has no /proc entry)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _table_policy(actions: torch.Tensor, time_dim: int):
    """A policy writing ``actions.select(time_dim, t)`` at its t-th call."""
    calls = iter(range(actions.shape[time_dim]))

    def policy(td):
        return td.set("action", actions.select(time_dim, next(calls)).clone())

    return policy


def _by_hand(env, actions: torch.Tensor) -> dict:
    """Steps one env with ``actions[..., t, :]``, resetting the sub-envs that are done (plain loop)."""
    td = env.reset()
    rows = {"observation": [], "next_observation": [], "reward": [], "done": []}
    n_steps = actions.shape[len(env.batch_size)]
    for t in range(n_steps):
        td.set("action", actions.select(len(env.batch_size), t).clone())
        # a copy, as the batched envs' buffers hand the sub-envs: PendulumEnv takes a float fast path only
        # for its own default-parameter tensors (same values, last-bit rounding differences)
        td = env.step(td.clone())
        rows["observation"].append(td["observation"])
        rows["next_observation"].append(td["next", "observation"])
        rows["reward"].append(td["next", "reward"])
        rows["done"].append(td["next", "done"])
        done = td["next", "done"]
        td = step_mdp(td)
        if done.any():
            td.set("_reset", done.clone())
            td = env.reset(td)
    return {k: torch.stack(v, len(env.batch_size)) for k, v in rows.items()}


def _reference(make, n: int, actions: torch.Tensor, seed: int) -> dict:
    per_env = []
    for i in range(n):
        env = make(i)
        env.set_seed(seed + i)
        per_env.append(_by_hand(env, actions[i]))
    return {k: torch.stack([p[k] for p in per_env]) for k in per_env[0]}


def _assert_rollout_matches(rollout, ref: dict) -> None:
    assert torch.equal(rollout["observation"], ref["observation"])
    assert torch.equal(rollout["next", "observation"], ref["next_observation"])
    assert torch.equal(rollout["next", "reward"], ref["reward"])
    assert torch.equal(rollout["next", "done"], ref["done"])


@pytest.mark.parametrize("make_batched", BATCHED, ids=IDS)
@pytest.mark.parametrize("sub_batch", [(), (2,)], ids=["single", "sub2"])
def test_pendulum_matches_separate_envs(make_batched, sub_batch):
    torch.manual_seed(0)
    T = 6
    actions = torch.rand(W, *sub_batch, T, 1) * 4 - 2
    env = make_batched(W, PendulumEnv, {"batch_size": list(sub_batch)})
    try:
        assert env.batch_size == torch.Size([W, *sub_batch])
        assert env.set_seed(7) == 7 + W
        rollout = env.rollout(T, _table_policy(actions, len(sub_batch) + 1))
        assert rollout.batch_size == torch.Size([W, *sub_batch, T])
        assert rollout["next", "reward"].shape == torch.Size([W, *sub_batch, T])  # no trailing singleton
        _assert_rollout_matches(rollout, _reference(lambda i: PendulumEnv(batch_size=sub_batch), W, actions, 7))
    finally:
        env.close()


@pytest.mark.parametrize("make_batched", BATCHED, ids=IDS)
def test_cartpole_auto_resets_match_separate_envs(make_batched):
    """break_when_any_done=False: done workers (and done sub-envs inside a worker) reset in place."""
    T = 60
    actions = torch.randint(0, 2, (W, 2, T), generator=torch.Generator().manual_seed(3))
    env = make_batched(W, CartPoleEnv, {"batch_size": [2], "categorical_action_encoding": True})
    try:
        env.set_seed(11)
        rollout = env.rollout(T, _table_policy(actions, 2), break_when_any_done=False)
        assert rollout.batch_size == torch.Size([W, 2, T])
        ref = _reference(lambda i: CartPoleEnv(batch_size=[2], categorical_action_encoding=True), W, actions, 11)
        assert ref["done"][:, :, :-1].any()  # the episodes did end and restart mid-rollout
        _assert_rollout_matches(rollout, ref)
    finally:
        env.close()


def test_per_worker_kwargs_and_list_of_factories():
    torch.manual_seed(0)
    T = 5
    actions = torch.rand(2, T, 1) * 4 - 2
    kwargs = [{"g": 9.0}, {"g": 11.0}]
    ref = _reference(lambda i: PendulumEnv(**kwargs[i]), 2, actions, 0)
    envs = [
        SerialEnv(2, PendulumEnv, kwargs),
        _fork_parallel(2, [EnvCreator(PendulumEnv, kwargs[0]), lambda: PendulumEnv(g=11.0)]),
    ]
    for env in envs:
        env.set_seed(0)
        _assert_rollout_matches(env.rollout(T, _table_policy(actions, 1)), ref)
        env.close()
    assert envs[0].create_env_kwargs == kwargs


@pytest.mark.parametrize("make_batched", BATCHED, ids=IDS)
def test_partial_reset_only_touches_flagged_workers(make_batched):
    env = make_batched(W, PendulumEnv, {"batch_size": [2]})
    refs = [PendulumEnv(batch_size=[2]) for _ in range(W)]
    try:
        env.set_seed(0)
        for i, ref in enumerate(refs):
            ref.set_seed(i)
        first = env.reset()
        ref_first = torch.stack([r.reset()["observation"] for r in refs])
        assert torch.equal(first["observation"], ref_first)
        mask = torch.tensor([[True, False], [False, False], [False, True]])
        second = env.reset(first.clone().set("_reset", mask))
        assert "_reset" not in second
        # workers 0 and 2 reset (their generators advance), worker 1 is untouched
        ref_second = torch.stack([r.reset()["observation"] for r in refs])
        expected = torch.where(mask.unsqueeze(-1), ref_second, ref_first)
        assert torch.equal(second["observation"], expected)
        assert torch.equal(second["th"][1], first["th"][1]) and not torch.equal(second["th"][0, 0], first["th"][0, 0])
    finally:
        env.close()


@pytest.mark.parametrize("make_batched", BATCHED, ids=IDS)
def test_partial_reset_skips_unflagged_workers(make_batched, counting_env):
    """A worker whose mask is all False is not reset at all (its env's reset is not called)."""
    env = make_batched(W, counting_env, {"max_count": 2})
    try:
        td = env.rollout(3, lambda td: td.set("action", torch.ones(W, dtype=torch.int64)), break_when_any_done=False)
        assert td["next", "count"][:, -1].tolist() == [1, 1, 1]  # 1, 2 (done -> reset), 1
        root = step_mdp(td[:, -1])
        root.set("_reset", torch.tensor([False, True, False]))
        out = env.reset(root)
        assert out["count"].tolist() == [1, 0, 1]
        assert out["done"].tolist() == [False, False, False]
    finally:
        env.close()
    counting = SerialEnv(W, counting_env)
    counting.reset()
    counting.reset(TensorDict({"_reset": torch.tensor([True, False, True])}, batch_size=[W]))
    assert [r.env.reset_count for r in counting._runners] == [2, 1, 2]
    counting.close()


@pytest.mark.parametrize("make_batched", BATCHED, ids=IDS)
def test_specs_rand_action_fake_tensordict_check_env_specs(make_batched):
    env = make_batched(2, lambda: TransformedEnv(PendulumEnv(batch_size=[3]), StepCounter(max_steps=4)))
    try:
        assert env.is_closed  # lazy: nothing started yet
        assert env.action_spec.shape == torch.Size([2, 3, 1])
        assert env.full_observation_spec["observation"].shape == torch.Size([2, 3, 3])
        assert env.full_done_spec["truncated"].shape == torch.Size([2, 3])
        assert env.action_spec.is_in(env.rand_action()["action"])
        fake = env.fake_tensordict()
        assert fake.batch_size == torch.Size([2, 3]) and fake["next", "reward"].shape == torch.Size([2, 3])
        check_env_specs(env, seed=0)
        assert not env.is_closed
        rollout = env.rollout(10, break_when_any_done=False)  # StepCounter truncates every 4 steps
        assert rollout["next", "step_count"][0, 0].tolist() == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
        assert rollout["next", "truncated"][:, :, 3].all() and not rollout["next", "truncated"][:, :, 2].any()
    finally:
        env.close()


def test_parallel_equals_serial_with_spawn():
    T = 8
    actions = torch.rand(2, T, 1, generator=torch.Generator().manual_seed(0)) * 4 - 2
    results = []
    for env in (SerialEnv(2, children.make_pendulum), ParallelEnv(2, children.make_pendulum, mp_start_method="spawn")):
        env.set_seed(5)
        results.append(env.rollout(T, _table_policy(actions, 1)))
        env.close()
    assert (results[0] == results[1]).all()


def test_serial_for_single_runs_in_process():
    env = ParallelEnv(1, PendulumEnv, serial_for_single=True)
    env.set_seed(0)
    rollout = env.rollout(4, lambda td: td.set("action", torch.ones(1, 1)))
    assert type(env) is ParallelEnv and env._workers == [] and rollout.batch_size == torch.Size([1, 4])
    assert [float(p["params", "g"]) for p in env.gen_params()] == [10.0]  # the sub-env's methods, in-process
    ref = SerialEnv(1, PendulumEnv)
    ref.set_seed(0)
    assert (ref.rollout(4, lambda td: td.set("action", torch.ones(1, 1))) == rollout).all()
    env.close()


def test_killed_worker_surfaces_and_nothing_is_left():
    env = _fork_parallel(W, PendulumEnv)
    env.start()
    pids = [p.pid for p in env._workers]
    assert all(_alive(pid) for pid in pids)

    def kill_second_worker(env_, td):
        if kill_second_worker.calls == 2:
            os.kill(pids[1], signal.SIGKILL)
        kill_second_worker.calls += 1

    kill_second_worker.calls = 0
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"worker 1 \(pid {pids[1]}\) died with exit code -9 \(killed by SIGKILL\)"):
        env.rollout(100, callback=kill_second_worker)
    assert time.monotonic() - start < 10
    assert not any(_alive(pid) for pid in pids)
    assert not [c for c in multiprocessing.active_children() if c.pid in pids]
    with pytest.raises(RuntimeError, match="stopped after a failure"):
        env.rand_step(env.reset())
    env.close()
    env.close()  # idempotent
    assert env.rollout(3).batch_size == torch.Size([W, 3])  # close() then use: fresh workers
    new = [p.pid for p in env._workers]
    env.close()
    assert not any(_alive(pid) for pid in new)


@pytest.mark.parametrize("make_batched", BATCHED, ids=IDS)
def test_raising_env_surfaces_with_its_error(make_batched):
    env = make_batched(2, [children.make_pendulum, lambda: children.FailingPendulum(fail_at=3)])
    with pytest.raises((RuntimeError, ValueError), match="sub-env exploded at step 3"):
        env.rollout(10)
    if make_batched is not SerialEnv:
        assert not any(_alive(p.pid) for p in env._workers)
    env.close()


def test_hanging_worker_times_out():
    env = _fork_parallel(2, [children.make_pendulum, lambda: children.HangingPendulum(hang_at=2)], worker_timeout=1.0)
    env.start()
    pids = [p.pid for p in env._workers]
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=rf"worker\(s\) 1 \(pid {pids[1]}\) within worker_timeout=1.0s"):
        env.rollout(5)
    assert time.monotonic() - start < 10
    assert not any(_alive(pid) for pid in pids)
    env.close()


def test_close_releases_processes_pipes_and_shared_memory():
    gc.collect()
    fds_before = len(os.listdir("/proc/self/fd"))
    env = _fork_parallel(2, PendulumEnv, {"batch_size": [4]})
    env.rollout(3)
    assert env._buffer["observation"].is_shared()
    pids = [p.pid for p in env._workers]
    env.close()
    env.close()
    assert env.is_closed and not any(_alive(pid) for pid in pids)
    del env
    gc.collect()
    # the pipes and the shared-memory file descriptors are closed with the workers and the buffer
    assert len(os.listdir("/proc/self/fd")) == fds_before


def test_workers_stop_at_interpreter_exit_without_close():
    script = textwrap.dedent(
        """
        from rl_envs import PendulumEnv
        from rl_envs.batched import ParallelEnv
        env = ParallelEnv(2, PendulumEnv, mp_start_method="fork")
        env.rollout(2)
        print(*[p.pid for p in env._workers], flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


def test_seeding():
    env = SerialEnv(2, PendulumEnv)
    assert env.set_seed(3) == 5 and env.set_seed(3, static_seed=True) == 3 and env.set_seed(None) is None
    env.set_seed(3)
    first = env.reset()["th"]
    refs = [PendulumEnv(seed=3), PendulumEnv(seed=4)]
    assert torch.equal(first, torch.stack([r.reset()["th"] for r in refs]))
    with pytest.raises(TypeError, match="seed must be an int"):
        env.set_seed(1.5)
    env.close()


def _two_stream_pendulum():
    """A sub-env with two random streams: the pendulum's generator and a random truncation's."""
    from rl_envs import Compose, RandomTruncationTransform

    return TransformedEnv(PendulumEnv(), Compose(StepCounter(), RandomTruncationTransform(2, 5, prob=1.0)))


@pytest.mark.parametrize("make_batched", BATCHED, ids=IDS)
def test_seeds_chain_through_workers_with_several_streams(make_batched):
    env = make_batched(W, _two_stream_pendulum)
    try:
        assert env.set_seed(3) == 3 + 2 * W  # worker i gets 3 + 2 i: no stream shared between workers
        rollout = env.rollout(12, break_when_any_done=False)
        assert env.set_seed(None) is None
    finally:
        env.close()
    seed, refs = 3, []
    for _ in range(W):  # sub-envs seeded one after the other, each with the seed the previous returned
        ref = _two_stream_pendulum()
        seed = ref.set_seed(seed)
        refs.append(ref.rollout(12, _table_policy(rollout["action"][len(refs)], 0), break_when_any_done=False))
    assert seed == 3 + 2 * W
    for i, ref in enumerate(refs):
        assert torch.equal(rollout["next", "observation"][i], ref["next", "observation"])
        assert torch.equal(rollout["next", "done"][i], ref["next", "done"])


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers must be a positive int, got 0"):
        SerialEnv(0, PendulumEnv)
    with pytest.raises(
        ValueError, match=r"len\(create_env_fn\) and num_workers mismatch: a list of 2 callables, num_workers=3"
    ):
        SerialEnv(3, [PendulumEnv, PendulumEnv])
    with pytest.raises(TypeError, match=r"create_env_fn\[0\] must be callable"):
        SerialEnv(1, [3])
    with pytest.raises(RuntimeError, match=r"len\(create_env_kwargs\) and num_workers mismatch: a list of 1 dicts"):
        SerialEnv(2, PendulumEnv, [{}])
    with pytest.raises(TypeError, match="create_env_kwargs must hold dicts"):
        SerialEnv(2, PendulumEnv, [{}, 3])
    with pytest.raises(ValueError, match=r"worker 1 .* has batch size \[2\], worker 0's .* \[\]"):
        SerialEnv(2, [PendulumEnv, lambda: PendulumEnv(batch_size=[2])])
    # different bounds, same structure: accepted, each worker keeps its own bounds
    env = SerialEnv(2, [PendulumEnv, lambda: PendulumEnv(max_torque=1.0)])
    assert env.action_spec.high.reshape(2).tolist() == [2.0, 1.0]
    with pytest.raises(ValueError, match="shared_memory=False is not supported"):
        ParallelEnv(2, PendulumEnv, shared_memory=False)
    with pytest.raises(ValueError, match="mp_start_method must be one of"):
        ParallelEnv(2, PendulumEnv, mp_start_method="thread")
    env = SerialEnv(2, PendulumEnv)
    with pytest.raises(ValueError, match=r"'_reset' must have shape \[2\]"):
        env.reset(TensorDict({"_reset": torch.ones(2, 3, dtype=torch.bool)}, batch_size=[2]))
    with pytest.raises(
        RuntimeError, match=r"shape==env.batch_size, got batch_size \[3\] for an env of batch_size \[2\]"
    ):
        env.step(TensorDict({"action": torch.zeros(3, 1)}, batch_size=[3]))
    td = env.rand_action(env.reset()).set("thdot", torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"'thdot': expected shape \[2\] .* got \[2, 5\]"):
        env.step(td)
    assert env.to("cpu") is env and env.to(torch.float32) is env  # unchanged device: nothing to move
    with pytest.raises(NotImplementedError, match="build them on the device"):
        env.to("meta")
    env.close()


# ----------------------------------------------------------------------------- liveness: heartbeats, parent death
def test_default_liveness_settings():
    import inspect

    params = inspect.signature(ParallelEnv).parameters
    # a dead worker surfaces at once, a stuck one within about 21 s; a computing step has no time limit by default
    assert params["heartbeat_timeout"].default == 20.0 and params["heartbeat_interval"].default == 1.0
    assert params["worker_timeout"].default is None
    env = ParallelEnv(2, PendulumEnv)
    assert (env.heartbeat_timeout, env.heartbeat_interval, env.worker_timeout) == (20.0, 1.0, None)


def test_slow_but_live_step_is_not_a_hang():
    # the step computes for 4 s, over twice the heartbeat timeout: the worker keeps beating, so it is waited for
    slow = [children.make_pendulum, lambda: children.HangingPendulum(hang_at=2, seconds=4.0, busy=True)]
    env = _fork_parallel(2, slow, heartbeat_interval=0.1, heartbeat_timeout=1.5)
    env.set_seed(0)
    rollout = env.rollout(4, break_when_any_done=False)
    env.close()
    ref = SerialEnv(2, PendulumEnv)
    ref.set_seed(0)
    torch.manual_seed(0)
    assert rollout.batch_size == torch.Size([2, 4])
    # the same actions (random from the same spec) give the same trajectories as in-process envs
    expected = ref.rollout(4, _table_policy(rollout["action"], 1), break_when_any_done=False)
    assert torch.equal(rollout["next", "observation"], expected["next", "observation"])


def test_frozen_worker_is_detected_by_its_missing_heartbeat():
    env = _fork_parallel(2, PendulumEnv, heartbeat_interval=0.1, heartbeat_timeout=1.5)
    env.start()
    pids = [p.pid for p in env._workers]

    def freeze_second_worker(env_, td):
        if freeze_second_worker.calls == 1:
            os.kill(pids[1], signal.SIGSTOP)  # alive but never scheduled: no reply, no heartbeat
        freeze_second_worker.calls += 1

    freeze_second_worker.calls = 0
    start = time.monotonic()
    with pytest.raises(
        TimeoutError,
        match=rf"no progress \(heartbeat\) from worker\(s\) 1 \(pid {pids[1]}\) for heartbeat_timeout=1.5s",
    ):
        env.rollout(50, callback=freeze_second_worker)
    assert 1.5 <= time.monotonic() - start < 15
    assert not any(_alive(pid) for pid in pids)
    env.close()


def test_a_step_that_sleeps_is_a_hang_without_worker_timeout():
    # alive (its heartbeat thread runs) but its step waits on nothing: no CPU used, no heartbeat
    env = _fork_parallel(
        2,
        [children.make_pendulum, lambda: children.HangingPendulum(hang_at=2, seconds=120)],
        heartbeat_interval=0.1,
        heartbeat_timeout=1.5,
    )
    env.start()
    pids = [p.pid for p in env._workers]
    start = time.monotonic()
    with pytest.raises(
        TimeoutError,
        match=rf"no progress \(heartbeat\) from worker\(s\) 1 \(pid {pids[1]}\) for heartbeat_timeout=1.5s",
    ):
        env.rollout(5)
    assert 1.5 <= time.monotonic() - start < 15
    assert not any(_alive(pid) for pid in pids)
    env.close()


def test_an_idle_pause_between_steps_is_not_a_hang():
    # workers send no heartbeat while they wait for a command: silence counts from the request only
    env = _fork_parallel(2, PendulumEnv, heartbeat_interval=0.1, heartbeat_timeout=1.5)
    env.set_seed(0)
    td = env.reset()
    time.sleep(2.5)  # longer than heartbeat_timeout with both workers idle
    td["action"] = torch.zeros(2, 1)
    td = env.step(td)
    assert td["next", "observation"].shape == (2, 3)
    env.close()


def test_bad_liveness_arguments():
    with pytest.raises(ValueError, match=r"heartbeat_interval must be a number of seconds > 0, got 0"):
        ParallelEnv(2, PendulumEnv, heartbeat_interval=0)
    with pytest.raises(
        ValueError, match=r"heartbeat_timeout must be None or a number of seconds > heartbeat_interval=1.0, got 0.5"
    ):
        ParallelEnv(2, PendulumEnv, heartbeat_timeout=0.5)


_PARENT_SCRIPT = """
import os, sys, threading, time
sys.path.insert(0, {folder!r})
import _batched_children as children
from rl_envs.batched import ParallelEnv


def run():
    env = ParallelEnv(2, [children.make_pendulum,
                          lambda: children.HangingPendulum(hang_at=1, seconds=120, marker={marker!r})],
                      mp_start_method={method!r})
    env.start()
    print(*[p.pid for p in env._workers], flush=True)
    env.rollout(3)  # worker 1 sleeps two minutes inside its first step


if {in_thread!r}:  # started from another thread: no kernel parent-death signal, the watchdog thread acts
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
else:
    run()
"""


@pytest.mark.parametrize(
    "method, in_thread", [("fork", False), ("spawn", False), ("fork", True)], ids=["fork", "spawn", "fork-from-thread"]
)
def test_workers_busy_in_a_step_die_with_a_killed_parent(tmp_path, method, in_thread):
    marker = tmp_path / "inside_step"
    script = _PARENT_SCRIPT.format(
        folder=os.path.dirname(os.path.abspath(__file__)), marker=str(marker), method=method, in_thread=in_thread
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list = []
    try:
        pids += [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2, parent.stderr.read()
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "worker 1 never entered its step"
        assert all(_alive(pid) for pid in pids)
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


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_batched_device_and_use_buffers_arguments(cls):
    env = cls(2, PendulumEnv, device="cpu", use_buffers=True)
    try:
        assert env.device == torch.device("cpu")
        assert env.rollout(2)["next", "observation"].device == torch.device("cpu")
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"device=meta differs from the sub-envs' device"):
        cls(2, PendulumEnv, device="meta")


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_batched_specs_stack_per_worker_values(cls):
    # same structure, different bounds (a step counter's limit): the batched spec keeps each worker's
    from functools import partial

    from rl_envs import StepCounter, TransformedEnv

    def make(max_steps):
        return TransformedEnv(PendulumEnv(), StepCounter(max_steps=max_steps))

    env = cls(2, [partial(make, 20), partial(make, 30)])
    try:
        spec = env.observation_spec["step_count"]
        single = make(20).observation_spec["step_count"]
        assert spec.shape == (2, *single.shape)
        if hasattr(single, "high"):
            assert spec.high.reshape(2, -1)[:, 0].tolist() == [20, 30]
        rollout = env.rollout(3)
        assert rollout["next", "step_count"][:, -1].reshape(-1).tolist() == [3, 3]
    finally:
        env.close()


def test_batched_envs_refuse_a_different_structure():
    from functools import partial

    from rl_envs import StepCounter, TransformedEnv

    with pytest.raises(ValueError, match=r"(?s)worker 1 .* different full_observation_spec .* same keys"):
        SerialEnv(2, [PendulumEnv, partial(TransformedEnv, PendulumEnv(), StepCounter())])
