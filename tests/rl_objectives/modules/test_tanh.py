"""TanhModule: tanh squashing into spec bounds."""

import pytest
import torch
from rl_objectives.modules import TanhModule
from tdict import TensorDict
from tdict.specs import Bounded, Composite, Unbounded


def test_squashes_into_the_spec_bounds():
    spec = Bounded(torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]), shape=(2,))
    x = torch.randn(5, 2) * 3
    out = TanhModule(in_keys=["param"], out_keys=["action"], spec=spec)(TensorDict(param=x, batch_size=[5]))
    expected = spec.low + (spec.high - spec.low) * (torch.tanh(x) + 1) / 2
    torch.testing.assert_close(out["action"], expected)
    assert bool(spec.is_in(out["action"]))


def test_composite_spec_low_high_in_place_and_clamp():
    spec = Composite(a=Bounded(-1.0, 3.0, shape=(1,)), b=Unbounded(shape=(1,)))
    td = TensorDict(a=torch.tensor([[0.0]]), batch_size=[1])
    TanhModule(in_keys=["a"], spec=spec)(td)  # out_keys default: in place
    torch.testing.assert_close(td["a"], torch.tensor([[1.0]]))
    out = TanhModule(in_keys=["x"], out_keys=["y"], low=0.0, high=10.0, clamp=True)(
        TensorDict(x=torch.tensor([1e4]), batch_size=[1])
    )
    assert float(out["y"]) == 10.0
    plain = TanhModule(in_keys=["x"], out_keys=["y"])(TensorDict(x=torch.tensor([0.5]), batch_size=[1]))
    torch.testing.assert_close(plain["y"], torch.tanh(torch.tensor([0.5])))


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="same length"):
        TanhModule(in_keys=["a", "b"], out_keys=["c"])
    with pytest.raises(ValueError, match="spec or low/high"):
        TanhModule(in_keys=["a"], spec=Bounded(-1.0, 1.0, shape=(1,)), low=0.0)
    with pytest.raises(TypeError, match="must be Bounded"):
        TanhModule(in_keys=["b"], spec=Composite(b=Unbounded(shape=(1,))))
    with pytest.raises(KeyError, match="no entry 'c'"):
        TanhModule(in_keys=["c"], spec=Composite(b=Bounded(-1.0, 1.0, shape=(1,))))
    with pytest.raises(ValueError, match="high must be greater"):
        TanhModule(in_keys=["a"], low=1.0, high=1.0)
