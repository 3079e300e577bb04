"""PolicyAgeFilter: rows stamped by a too-old policy version are dropped on write and on sample."""

import pytest
import torch
from tdict import TensorDict

from rl_envs import PendulumEnv, PolicyAgeFilter, TransformedEnv
from rl_replay import LazyTensorStorage, ReplayBuffer


def stamped(versions, key="policy_version"):
    versions = torch.as_tensor(versions)
    n = versions.shape[0]
    return TensorDict({"observation": torch.arange(float(n)), key: versions}, batch_size=[n])


def test_filter_keeps_rows_within_the_lag():
    out = PolicyAgeFilter(5, max_policy_lag=2)(stamped([1, 3, 4, 5, 2]))
    assert out["policy_version"].tolist() == [3, 4, 5]
    assert out["observation"].tolist() == [1.0, 2.0, 3.0]


def test_row_judged_by_its_oldest_stamp():
    td = TensorDict({"policy_version": torch.tensor([[3, 5, 5], [4, 5, 2], [5, 5, 5]])}, batch_size=[3, 3])
    out = PolicyAgeFilter(5, max_policy_lag=2)(td)
    assert out.batch_size == torch.Size([2, 3])
    assert out["policy_version"][:, 0].tolist() == [3, 5]


def test_buffer_filters_on_extend_and_on_sample():
    current = {"v": 3}
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=PolicyAgeFilter(lambda: current["v"], max_policy_lag=1))
    rb.extend(stamped([0, 2, 2, 3]))
    assert len(rb) == 3  # version 0 never enters
    current["v"] = 4  # version 2 went stale after it was written
    assert set(rb.sample(20)["policy_version"].tolist()) == {3}
    current["v"] = 9
    assert rb.sample(5).batch_size == torch.Size([0])


def test_nested_key_and_single_item():
    filt = PolicyAgeFilter(3, max_policy_lag=0, policy_version_key=("meta", "v"))
    td = TensorDict({("meta", "v"): torch.tensor([1, 3, 3])}, batch_size=[3])
    assert filt(td)["meta", "v"].tolist() == [3, 3]
    assert filt(TensorDict({("meta", "v"): torch.tensor(1)})) is None
    one = TensorDict({("meta", "v"): torch.tensor(3)})
    assert filt(one) is one


def test_missing_key_warns_once_or_raises_when_strict():
    filt = PolicyAgeFilter(3, max_policy_lag=1)
    td = TensorDict({"observation": torch.zeros(4)}, batch_size=[4])
    with pytest.warns(UserWarning, match="passes unfiltered"):
        assert filt(td) is td
    with pytest.raises(KeyError, match="PolicyAgeFilter"):
        PolicyAgeFilter(3, max_policy_lag=1, strict=True)(td)


def test_bad_arguments():
    with pytest.raises(ValueError, match="non-negative"):
        PolicyAgeFilter(3, max_policy_lag=-1)
    with pytest.raises(TypeError, match="current_version"):
        PolicyAgeFilter("3", max_policy_lag=1)  # pyright: ignore[reportArgumentType]


def test_noop_inside_an_env():
    env = TransformedEnv(PendulumEnv(), PolicyAgeFilter(100, max_policy_lag=0, strict=True))
    assert not env.transform.has_inverse
    assert env.rollout(3).batch_size == torch.Size([3])


def test_inside_a_compose_on_a_buffer():
    from rl_envs import Compose

    current = {"v": 2}
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        transform=Compose(PolicyAgeFilter(lambda: current["v"], max_policy_lag=0)),
    )
    rb.extend(stamped([1, 2, 2]))
    assert len(rb) == 2
    current["v"] = 3
    assert rb.sample(4).batch_size == torch.Size([0])
