"""NextStateReconstructor: ("next", obs) rebuilt from the following row of a flat batch."""

import math

import pytest
import torch
from tdict import TensorDict

from rl_envs import NextStateReconstructor, PendulumEnv, TransformedEnv
from rl_replay import LazyTensorStorage, ReplayBuffer, SliceSampler

TRAJ = ("collector", "traj_ids")
NAN = math.nan


def batch(obs, traj=None, done=None, **extra):
    data: dict = {"observation": torch.as_tensor(obs, dtype=torch.float32).view(-1, 1)}
    if traj is not None:
        data[TRAJ] = torch.tensor(traj)
    if done is not None:
        data["next", "done"] = torch.tensor(done).view(-1, 1)
    data.update(extra)
    return TensorDict(data, batch_size=[len(obs)])


def column(td, key=("next", "observation")):
    return td.get(key).view(-1).tolist()


def same(a, b):
    return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b, strict=True))


def test_trajectory_ids_and_done_cut_the_batch():
    td = batch([10, 11, 12, 13, 14, 15], traj=[0, 0, 0, 1, 1, 1], done=[False, True, False, False, False, True])
    out = NextStateReconstructor()(td)
    # row 1 is done, row 2 -> 3 changes trajectory, row 5 is last
    assert same(column(out), [11, NAN, NAN, 14, 15, NAN])
    assert out is td


def test_fill_value_and_existing_next_entry_overwritten():
    td = batch([1, 2, 3, 4], traj=[0, 0, 1, 1], done=[False] * 4)
    td.set(("next", "observation"), torch.full((4, 1), -999.0))
    assert column(NextStateReconstructor(fill_value=-1.0)(td)) == [2.0, -1.0, 4.0, -1.0]


def test_step_count_check():
    td = batch([0, 1, 2, 3], traj=[0] * 4, done=[False] * 4, step=torch.tensor([0, 5, 6, 7]))
    out = NextStateReconstructor(step_count_key="step")(td)
    assert same(column(out), [NAN, 2.0, 3.0, NAN])


def test_nested_keys_and_no_checks():
    td = TensorDict({("agents", "pos"): torch.arange(6.0).view(3, 2), TRAJ: torch.tensor([0, 1, 2])}, [3])
    out = NextStateReconstructor([("agents", "pos")], traj_key=None, done_key=None)(td)
    expected = torch.tensor([[2.0, 3.0], [4.0, 5.0], [NAN, NAN]])
    torch.testing.assert_close(out.get(("next", "agents", "pos")), expected, equal_nan=True)


def test_strict_and_lenient_markers():
    td = batch([0, 1, 2])
    with pytest.raises(KeyError, match="trajectory key"):
        NextStateReconstructor()(td.clone())
    with pytest.raises(KeyError, match="done key"):
        NextStateReconstructor()(batch([0, 1, 2], traj=[0, 0, 0]))
    assert same(column(NextStateReconstructor(strict=False)(td)), [1.0, 2.0, NAN])  # one trajectory


def test_integer_entries_need_an_integer_fill_value():
    td = TensorDict({"observation": torch.arange(3).view(3, 1), TRAJ: torch.zeros(3, dtype=torch.long)}, [3])
    td.set(("next", "done"), torch.zeros(3, 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="non-floating dtype"):
        NextStateReconstructor()(td)
    assert column(NextStateReconstructor(fill_value=-1)(td)) == [1, 2, -1]


def test_bad_input():
    with pytest.raises(ValueError, match="flat"):
        NextStateReconstructor()(TensorDict({"observation": torch.zeros(2, 3, 1)}, [2, 3]))
    with pytest.raises(KeyError, match="'observation' not found"):
        NextStateReconstructor(strict=False)(TensorDict({"x": torch.zeros(2)}, [2]))
    with pytest.raises(ValueError, match="keys"):
        NextStateReconstructor([])


def test_slice_sampler_buffer():
    n = 8
    data = batch(list(range(n)), traj=[0] * 4 + [1] * 4, done=[False, False, False, True] * 2)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(n),
        sampler=SliceSampler(slice_len=4, traj_key=TRAJ),
        transform=NextStateReconstructor(),
        batch_size=8,
    )
    rb.extend(data)
    sample = rb.sample()
    obs, nxt = column(sample, "observation"), column(sample)
    for start in (0, 4):  # each slice is one whole trajectory: 3 successors, then NaN
        assert nxt[start : start + 3] == obs[start + 1 : start + 4]
        assert math.isnan(nxt[start + 3])


def test_noop_inside_an_env():
    env = TransformedEnv(PendulumEnv(), NextStateReconstructor(["th"]))
    r = env.rollout(3)
    base = PendulumEnv()
    assert set(r.keys(True, True)) == set(base.rollout(3).keys(True, True))


def test_inside_a_compose():
    from rl_envs import Compose

    td = batch([5, 6, 7], traj=[0, 0, 0], done=[False, False, True])
    assert same(column(Compose(NextStateReconstructor())(td)), [6.0, 7.0, NAN])
