"""FiniteTensorDictCheck: raises on NaN / inf leaves, passes finite data through."""

import math

import pytest
import torch
from tdict import TensorDict

from rl_envs import FiniteTensorDictCheck, PendulumEnv, TransformedEnv


def test_finite_data_passes_through():
    td = TensorDict({"a": torch.tensor([1.0, 2.0]), ("b", "c"): torch.arange(2)}, batch_size=[2])
    out = FiniteTensorDictCheck()(td)
    assert out is td and out["a"].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_leaf_raises_naming_it(bad):
    td = TensorDict({"a": torch.ones(2), ("b", "c"): torch.tensor([0.0, bad])}, batch_size=[2])
    with pytest.raises(ValueError, match=r"\('b', 'c'\)"):
        FiniteTensorDictCheck()(td)


def test_in_an_env():
    r = TransformedEnv(PendulumEnv(), FiniteTensorDictCheck()).rollout(3)
    assert r.batch_size == torch.Size([3])
