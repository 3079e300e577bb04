"""SliceSampler on a two-dimensional storage filled with collector rollouts (one stream per env).

The correct usage, as in TorchRL 0.14: extend the buffer with the collector's ``[num_envs, time]``
batch as it is. With ``LazyTensorStorage(max_size, ndim=2)`` the buffer moves the last data dim
first (``dim_extend`` defaults to ``ndim - 1``), so the storage is ``[time, num_envs]`` and every env
column is its own sequence. Trajectories are split at ``end_key=("next", "done")`` or where
``traj_key`` (e.g. ``("collector", "traj_ids")``) changes. A batch is flat:
``[num_slices * slice_len]``, slice after slice.

The slices are checked against a reference computed here: the episodes of every env stream over
the stored time window (the last ``rows`` written steps).
"""

from __future__ import annotations

import pytest
import torch
from tdict import TensorDict

from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
from rl_replay.samplers.slice import SliceSampler

N_ENVS = 4
KEYS = {
    "end_key": {"end_key": ("next", "done")},
    "collector_traj_ids": {"traj_key": ("collector", "traj_ids")},
    "traj_ids": {"traj_key": "traj_ids"},
    "auto": {},
}


def episode_lengths() -> list[int]:
    """Per-env episode length: different for every env, so boundaries differ between streams."""
    return [20 + 5 * e for e in range(N_ENVS)]


def rollout(t0: int, T: int) -> TensorDict:
    """A collector batch ``[N_ENVS, T]`` of global time steps ``t0 .. t0 + T - 1``."""
    step = (torch.arange(T) + t0).expand(N_ENVS, T).clone()
    env = torch.arange(N_ENVS).unsqueeze(1).expand(N_ENVS, T).clone()
    eplen = torch.tensor(episode_lengths()).unsqueeze(1)
    done = step % eplen == eplen - 1
    traj = env * 1000 + step // eplen
    return TensorDict(
        step=step,
        env=env,
        traj_ids=traj,
        next=TensorDict(done=done.unsqueeze(-1), batch_size=[N_ENVS, T]),
        collector=TensorDict(traj_ids=traj, batch_size=[N_ENVS, T]),
        batch_size=[N_ENVS, T],
    )


def reference_trajectories(first: int, stop: int) -> list[tuple[int, int, int]]:
    """``(env, first_step, length)`` of every stored trajectory, stored steps being ``first .. stop - 1``.

    A loop over each env stream: an episode end closes a trajectory, and so do the window edges.
    """
    out = []
    for e, n in enumerate(episode_lengths()):
        start = first
        for t in range(first, stop):
            if t % n == n - 1 or t == stop - 1:
                out.append((e, start, t - start + 1))
                start = t + 1
    return out


def make_buffer(capacity: int, sampler: SliceSampler, batch_size: int = 64, seed: int = 0) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity, ndim=2),
        sampler=sampler,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(seed),
    )


def slices_of(batch, slice_len: int) -> list[tuple[int, list[int]]]:
    """``(env, steps)`` of every slice of a full-length batch; the slice ends are flagged ``truncated``."""
    env = batch["env"].reshape(-1, slice_len)
    step = batch["step"].reshape(-1, slice_len)
    truncated = batch["next", "truncated"].reshape(-1, slice_len)
    assert truncated[:, -1].all() and not truncated[:, :-1].any()
    out = []
    for e, s in zip(env.tolist(), step.tolist()):
        assert len(set(e)) == 1, f"a slice crosses env streams: {e}"
        out.append((e[0], s))
    return out


def check_slice(env: int, steps: list[int], trajs: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """The reference trajectory that holds the slice; the steps must be consecutive, in time order."""
    assert steps == list(range(steps[0], steps[0] + len(steps))), f"not contiguous in time: {steps}"
    holders = [tr for tr in trajs if tr[0] == env and tr[1] <= steps[0] and steps[-1] < tr[1] + tr[2]]
    assert len(holders) == 1, f"slice {env}/{steps} is not inside one trajectory"
    return holders[0]


@pytest.mark.parametrize("key", list(KEYS))
@pytest.mark.parametrize("size", [{"slice_len": 16}, {"num_slices": 4}])
def test_collector_rollout_slices(key, size):
    """The colleague's case: one ``[4, 50]`` rollout, ``slice_len=16`` (or ``num_slices=4`` of 16)."""
    rb = make_buffer(1000, SliceSampler(**size, **KEYS[key]))
    rb.extend(rollout(0, 50))
    assert list(rb._storage.shape) == [250, N_ENVS]  # [time, env]: the buffer moved time first
    assert len(rb) == 200
    trajs = reference_trajectories(0, 50)
    eligible = {tr for tr in trajs if tr[2] >= 16}
    seen = set()
    for _ in range(20):
        batch = rb.sample()
        assert batch.shape == torch.Size([64])
        for env, steps in slices_of(batch, 16):
            assert len(steps) == 16
            seen.add(check_slice(env, steps, trajs))
    assert seen == eligible  # every long enough episode of every env is drawn, nothing else


@pytest.mark.parametrize("key", ["end_key", "collector_traj_ids"])
@pytest.mark.parametrize(
    ("capacity", "chunks"),
    [
        (1000, [(0, 50), (50, 50)]),  # two rollouts continue each env stream
        (480, [(0, 60), (60, 60), (120, 60)]),  # 120 rows: the storage wraps around
        (480, [(30 * k, 30) for k in range(10)]),
    ],
)
def test_boundaries_and_slices_across_extends(key, capacity, chunks):
    sampler = SliceSampler(slice_len=16, **KEYS[key])
    rb = make_buffer(capacity, sampler, seed=3)
    for t0, T in chunks:
        rb.extend(rollout(t0, T))
    rows = capacity // N_ENVS
    stop = sum(T for _, T in chunks)
    trajs = reference_trajectories(max(0, stop - rows), stop)

    # the trajectory boundaries, in storage coordinates [time row, env]
    start, _, length = sampler._get_stop_and_length(rb._storage)
    stored_step = rb._storage._storage["step"]
    got = sorted((int(s[1]), int(stored_step[s[0], s[1]]), int(n)) for s, n in zip(start, length))
    assert got == sorted(trajs)

    eligible = {tr for tr in trajs if tr[2] >= 16}
    seen = set()
    for _ in range(40):
        for env, steps in slices_of(rb.sample(), 16):
            seen.add(check_slice(env, steps, trajs))
    assert seen == eligible


@pytest.mark.parametrize("key", ["end_key", "collector_traj_ids"])
def test_short_slices_stay_in_their_stream(key):
    """``strict_length=False``: trajectories shorter than the slice give shorter slices, still one env each."""
    rb = make_buffer(1000, SliceSampler(slice_len=16, strict_length=False, **KEYS[key]), seed=5)
    rb.extend(rollout(0, 50))
    trajs = reference_trajectories(0, 50)
    lengths = set()
    for _ in range(10):
        batch = rb.sample()
        ends = batch["next", "truncated"].reshape(-1).nonzero().squeeze(-1).tolist()
        first = 0
        for last in ends:
            env = batch["env"][first : last + 1].tolist()
            assert len(set(env)) == 1
            steps = batch["step"][first : last + 1].tolist()
            _, _, n = check_slice(env[0], steps, trajs)
            assert len(steps) == min(16, n)
            lengths.add(len(steps))
            first = last + 1
        assert first == batch.shape[0]
    assert lengths == {10, 15, 16}  # env 0 and env 3 end with a 10- and a 15-step trajectory


def test_pre_transposed_rollout_puts_envs_on_the_time_axis():
    """Misuse (as in TorchRL): transposing the rollout to ``[time, env]`` before ``extend`` makes the
    buffer transpose it back, so the 4 envs become the time axis: trajectories of 1 step (ids) or
    at most 4 (end flags)."""
    data = rollout(0, 50).transpose(0, 1).contiguous()
    for key, longest in (("collector_traj_ids", 1), ("end_key", 4)):
        sampler = SliceSampler(slice_len=16, **KEYS[key])
        rb = make_buffer(1000, sampler)
        rb.extend(data)
        assert list(rb._storage.shape) == [20, 50]
        _, _, length = sampler._get_stop_and_length(rb._storage)
        assert int(length.max()) == longest
        with pytest.raises(RuntimeError, match="no trajectory is at least 16 steps long"):
            rb.sample()


def test_num_slices_equal_to_batch_size_gives_one_step_slices():
    """``num_slices`` is the number of slices, not their length: ``num_slices=64`` with
    ``batch_size=64`` means 64 slices of 1 step (TorchRL does the same)."""
    rb = make_buffer(1000, SliceSampler(num_slices=64, end_key=("next", "done")))
    rb.extend(rollout(0, 50))
    batch = rb.sample()
    assert batch["next", "truncated"].all()
