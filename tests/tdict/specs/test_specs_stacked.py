"""torch.stack of specs: dense stacks, Stacked leaves, StackedComposite (heterogeneous agents)."""

import pytest
import torch

from tdict import LazyStackedTensorDict
from tdict.specs import Bounded, Categorical, Composite, OneHot, Stacked, StackedComposite, Unbounded, stack_specs


def test_dense_stack_of_leaves_keeps_bounds():
    s = torch.stack([Bounded(0.0, 1.0, shape=(2,)), Bounded(5.0, 6.0, shape=(2,))], 0)
    assert type(s) is Bounded and s.shape == (2, 2)
    assert s.low.tolist() == [[0.0, 0.0], [5.0, 5.0]]
    x = s.rand((100,))
    assert s.is_in(x) and (x[:, 1] >= 5).all()
    s1 = torch.stack([Bounded(0.0, 1.0, shape=(2,)), Bounded(5.0, 6.0, shape=(2,))], 1)
    assert s1.shape == (2, 2) and s1.low.tolist() == [[0.0, 5.0], [0.0, 5.0]]
    m = torch.stack(
        [
            Categorical(3, mask=torch.tensor([True, False, False])),
            Categorical(3, mask=torch.tensor([False, False, True])),
        ]
    )
    assert type(m) is Categorical and m.shape == (2,)
    assert m.rand((20,)).tolist() == [[0, 2]] * 20


def test_stacked_leaves_heterogeneous():
    s = torch.stack([Categorical(2), Categorical(5)], 0)
    assert isinstance(s, Stacked) and s.shape == (2,) and len(s) == 2 and s[1] == Categorical(5)
    x = s.rand((500,))
    assert x.shape == (500, 2) and s.is_in(x) and set(x[:, 1].unique().tolist()) == set(range(5))
    with pytest.raises(AssertionError, match="member 0"):
        s.assert_is_in(torch.tensor([3, 0]))
    assert s.project(torch.tensor([3, 9])).tolist() == [1, 4]
    h = stack_specs([Unbounded(shape=(3,)), Unbounded(shape=(4,))])
    assert isinstance(h, Stacked) and h.shape == (2, -1)
    vals = h.rand()
    assert [v.shape for v in vals] == [torch.Size([3]), torch.Size([4])] and h.is_in(vals)
    assert h.unbind(0) == h.specs and h.clone() == h
    with pytest.raises(RuntimeError, match="more than one type of specs"):  # TorchRL's error
        torch.stack([Categorical(2), OneHot(2)])
    with pytest.raises(RuntimeError, match="Dtypes differ"):
        torch.stack([Unbounded(shape=(2,)), Unbounded(shape=(2,), dtype=torch.float64)])
    with pytest.raises(RuntimeError, match="Ndims differ"):
        torch.stack([Unbounded(shape=(2,)), Unbounded(shape=(2, 1))])


def test_stacked_composite_multi_agent():
    a = Composite(obs=Unbounded(shape=(3,)), action=Categorical(2))
    b = Composite(obs=Unbounded(shape=(5,)), action=Categorical(2), extra=Bounded(0.0, 1.0, shape=()))
    spec = torch.stack([a, b], 0)
    assert isinstance(spec, StackedComposite) and spec.shape == (2,)
    td = spec.rand((4,))
    assert isinstance(td, LazyStackedTensorDict) and td.batch_size == (4, 2)
    assert td[:, 0]["obs"].shape == (4, 3) and td[:, 1]["obs"].shape == (4, 5) and "extra" in td[:, 1].keys()
    assert spec.is_in(td) and spec.zero().batch_size == (2,)
    assert spec.keys() == ["obs", "action"] and "extra" not in spec
    assert spec["action"] == Categorical(2, shape=(2,))
    assert isinstance(spec["obs"], Stacked) and spec["obs"].shape == (2, -1)
    assert spec[1] is b and spec.unbind(0) == (a, b)
    bad = spec.rand()
    bad[1]["extra"] = torch.tensor(3.0)
    with pytest.raises(AssertionError, match="member 1, key 'extra': high bound"):
        spec.assert_is_in(bad)


def test_identical_composites_stack_densely():
    c = Composite(obs=Unbounded(shape=(2, 3)), shape=(2,))
    s = torch.stack([c, c, c], 1)
    assert type(s) is Composite and s.shape == (2, 3) and s["obs"].shape == (2, 3, 3)
    assert s.rand().batch_size == (2, 3)
    with pytest.raises(RuntimeError, match="Shapes differ"):  # TorchRL's error
        torch.stack([c, Composite(shape=())])


def test_stacked_composite_inside_composite():
    a = Composite(obs=Unbounded(shape=(3,)), action=Categorical(2))
    b = Composite(obs=Unbounded(shape=(5,)), action=Categorical(2), extra=Bounded(0.0, 1.0, shape=()))
    spec = Composite(agents=torch.stack([a, b]), top=Unbounded(shape=()))
    td = spec.rand((4,))
    assert td.batch_size == (4,) and td.get("agents").batch_size == (4, 2) and spec.is_in(td)
    td["agents"][:, 1]["extra"] = torch.full((4,), 5.0)
    with pytest.raises(AssertionError, match=r"key \('agents', 'extra'\): member 1: high bound violated"):
        spec.assert_is_in(td)
    fixed = spec.project(td)
    assert spec.is_in(fixed) and fixed["agents"][:, 1]["extra"].tolist() == [1.0] * 4
    assert fixed is td  # projected in place, as TorchRL
