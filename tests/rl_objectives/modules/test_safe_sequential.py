"""SafeSequential: runs its modules in order (as TensorDictSequential) and gathers their specs."""

import pytest
import torch
from rl_objectives.modules import SafeModule, SafeSequential
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictSequential
from tdict.specs import Bounded, Composite, Unbounded


def test_runs_like_tensordict_sequential_and_gathers_the_specs():
    torch.manual_seed(0)
    first = SafeModule(torch.nn.Linear(3, 4), in_keys=["x"], out_keys=["h"], spec=Unbounded(4))
    second = TensorDictModule(torch.nn.Linear(4, 2), in_keys=["h"], out_keys=["y"])
    seq = SafeSequential(first, second)
    td = TensorDict(x=torch.randn(5, 3), batch_size=[5])
    out = seq(td.clone())
    expected = TensorDictSequential(first, second)(td.clone())
    torch.testing.assert_close(out["y"], expected["y"])
    torch.testing.assert_close(out["y"], second.module(first.module(td["x"])))
    assert isinstance(seq.spec, Composite) and sorted(seq.spec.keys()) == ["h", "y"]
    assert seq.spec["h"] == Unbounded(4) and seq.spec["y"] is None
    assert seq.in_keys == ["x"] and seq.out_keys == ["h", "y"]


def test_a_safe_module_projects_inside_the_sequence():
    clip = SafeModule(lambda x: 3 * x, in_keys=["x"], out_keys=["y"], spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
    seq = SafeSequential(clip, TensorDictModule(lambda y: y + 1, in_keys=["y"], out_keys=["z"]))
    out = seq(TensorDict(x=torch.tensor([0.1, 0.5])))
    torch.testing.assert_close(out["z"], torch.tensor([1.3, 2.0]))
    assert seq.spec["y"] == Bounded(-1.0, 1.0, shape=(2,))


def test_a_module_without_keys_is_refused():
    with pytest.raises(TypeError, match="module 1 must be a TensorDict module.*got Linear"):
        SafeSequential(TensorDictModule(torch.nn.Linear(2, 2), in_keys=["x"], out_keys=["y"]), torch.nn.Linear(2, 2))
