"""start()/pause()/async_shutdown(): collection into a replay buffer in a background thread, and
profiling (ProfileConfig, enable_profile/disable_profile)."""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest
import torch
from rl_collect import AsyncCollector, Collector, MultiSyncCollector, ProfileConfig, ProfilerHook
from rl_envs import PendulumEnv
from rl_replay import LazyTensorStorage, ReplayBuffer
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn


def _wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def _policy(value: float) -> TensorDictModule:
    module = nn.Linear(3, 1)
    with torch.no_grad():
        module.weight.zero_()
        module.bias.fill_(value)
    return TensorDictModule(module, in_keys=["observation"], out_keys=["action"])


@pytest.mark.parametrize("make", ["single", "async", "multi"])
def test_start_fills_the_buffer_pause_holds_it_and_weights_follow(make):
    buffer = ReplayBuffer(storage=LazyTensorStorage(100_000))
    policy = _policy(0.0)
    if make == "single":
        collector = Collector(PendulumEnv, policy, replay_buffer=buffer, frames_per_batch=8, total_frames=-1)
    elif make == "async":
        collector = AsyncCollector(PendulumEnv, policy, replay_buffer=buffer, frames_per_batch=8, total_frames=-1)
    else:
        collector = MultiSyncCollector(
            [PendulumEnv, PendulumEnv], policy, replay_buffer=buffer, frames_per_batch=8, total_frames=-1
        )
    try:
        collector.start()
        with pytest.raises(RuntimeError, match="already running"):
            collector.start()
        assert _wait_for(lambda: len(buffer) >= 16)
        with collector.pause():
            held = buffer.write_count
            time.sleep(0.3)
            assert buffer.write_count == held
        assert _wait_for(lambda: buffer.write_count > held)
        weights = TensorDict.from_module(policy).data.clone()
        weights["module", "bias"].fill_(1.0)
        collector.update_policy_weights_(weights)
        assert _wait_for(lambda: bool((buffer[-8:]["action"] == 1.0).all()))
    finally:
        collector.async_shutdown(timeout=10)
    assert mp.active_children() == [] or _wait_for(lambda: mp.active_children() == [], 5)


def test_start_needs_a_buffer_and_pause_needs_a_run():
    collector = Collector(PendulumEnv, frames_per_batch=4)
    with pytest.raises(RuntimeError, match="replay_buffer"):
        collector.start()
    with pytest.raises(RuntimeError, match="not running"):
        with collector.pause():
            pass


def test_background_errors_surface_at_shutdown():
    class Broken:
        def extend(self, batch):
            raise ValueError("the buffer is full of bees")

    collector = Collector(PendulumEnv, frames_per_batch=4, replay_buffer=Broken())
    collector.start()
    assert _wait_for(lambda: collector._runner is not None and not collector._runner.thread.is_alive())
    with pytest.raises(RuntimeError, match="background collection") as info:
        collector.async_shutdown()
    assert "bees" in str(info.value.__cause__)


def test_profile_config_checks_and_paths():
    config = ProfileConfig(workers=[0, 2], num_rollouts=5, warmup_rollouts=2)
    assert (config.workers, config.num_rollouts, config.warmup_rollouts) == ([0, 2], 5, 2)
    assert config.should_profile_worker(2) and not config.should_profile_worker(1)
    assert str(ProfileConfig().get_save_path(0)) == "collector_profile_0.json"
    assert str(ProfileConfig(save_path="t/w{worker_idx}.json").get_save_path(3)) == "t/w3.json"
    assert torch.profiler.ProfilerActivity.CPU in ProfileConfig(activities=["cpu"]).get_activities()
    with pytest.raises(ValueError, match="must be greater"):
        ProfileConfig(num_rollouts=2, warmup_rollouts=2)
    with pytest.raises(ValueError, match="warmup_rollouts must be >= 0"):
        ProfileConfig(num_rollouts=5, warmup_rollouts=-1)


def test_enable_profile_writes_a_trace_and_disable_restores_the_hook(tmp_path):
    seen = []
    collector = Collector(PendulumEnv, frames_per_batch=4, total_frames=20, post_collect_hook=seen.append)
    collector.enable_profile(num_rollouts=3, warmup_rollouts=1, save_path=str(tmp_path / "t_{worker_idx}.json"))
    assert isinstance(collector.post_collect_hook, ProfilerHook) and collector.profile_config is not None
    list(collector)
    assert (tmp_path / "t_0.json").exists() and len(seen) == 5  # the user's hook still ran
    collector.disable_profile()
    assert collector.profile_config is None and collector.post_collect_hook == seen.append
    with pytest.raises(RuntimeError, match="Cannot enable profiling after iteration"):
        collector.enable_profile()


def test_enable_profile_in_chosen_workers(tmp_path):
    with MultiSyncCollector([PendulumEnv, PendulumEnv], frames_per_batch=8, total_frames=40) as collector:
        collector.enable_profile(
            workers=[1], num_rollouts=3, warmup_rollouts=1, save_path=str(tmp_path / "w{worker_idx}.json")
        )
        list(collector)
    assert (tmp_path / "w1.json").exists() and not (tmp_path / "w0.json").exists()
