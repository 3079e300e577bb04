"""UnbatchedTensor: a leaf that the batch ops of its collection keep whole, tagged with the batch size
(behaviour checked against tensordict 0.14.3; the documented differences are marked)."""

from __future__ import annotations

import copy
import math
import operator
import pickle
import warnings

import numpy as np
import pytest
import torch

from tdict import LazyStackedTensorDict, TensorDict, UnbatchedTensor, lazy_stack, pad, tensorclass


def _td() -> TensorDict:
    return TensorDict(
        a=torch.arange(24.0).reshape(4, 3, 2),
        u=UnbatchedTensor(torch.arange(77.0).reshape(7, 11)),
        nested=TensorDict(x=torch.zeros(4, 3), v=UnbatchedTensor(torch.ones(2)), batch_size=[4, 3]),
        batch_size=[4, 3],
    )


def _check(result: TensorDict, source: TensorDict) -> None:
    """Every UnbatchedTensor of ``result`` holds ``source``'s data, tagged with ``result``'s batch size."""
    for key in ("u", ("nested", "v")):
        out, src = result.get(key), source.get(key)
        assert type(out) is UnbatchedTensor
        assert out.shape == src.shape
        assert out.data_ptr() == src.data_ptr()
    assert result.get("u").batch_size == result.batch_size
    assert result.get(("nested", "v")).batch_size == result.get("nested").batch_size


# ---------------------------------------------------------------------------- the tensor itself
def test_is_a_tensor_sharing_the_data():
    data = torch.randn(5, 3)
    ut = UnbatchedTensor(data)
    assert isinstance(ut, torch.Tensor) and isinstance(ut, UnbatchedTensor)
    assert ut.shape == (5, 3) and ut.data_ptr() == data.data_ptr()
    assert ut.batch_size == torch.Size([])
    assert UnbatchedTensor(ut) is ut
    assert UnbatchedTensor(data, batch_size=[4]).batch_size == torch.Size([4])
    assert UnbatchedTensor([1, 2]).tolist() == [1, 2]
    assert UnbatchedTensor._pass_through


def test_torch_ops_give_unbatched_tensors_with_the_batch_size():
    ut = UnbatchedTensor(torch.ones(3), batch_size=[4])
    for result in (ut + 1, ut.sum(), ut[0], ut.clone(), ut.detach(), torch.stack([ut, ut]), ut.unbind(0)[0]):
        assert type(result) is UnbatchedTensor and result.batch_size == torch.Size([4])
    assert torch.equal((ut * 2).as_subclass(torch.Tensor), torch.full((3,), 2.0))
    assert ut.add_(1) is ut  # in place: the same object
    plain = torch.zeros(3)
    assert type(plain.add_(ut)) is torch.Tensor  # an in-place op on a plain tensor keeps it plain
    values = torch.max(UnbatchedTensor(torch.tensor([[1.0, 5.0]])), 1)
    assert type(values.values) is UnbatchedTensor and values.indices.tolist() == [1]
    # one result per input: only the UnbatchedTensor's result is one
    out = torch._foreach_add([ut, plain], 1)
    assert type(out[0]) is UnbatchedTensor and type(out[1]) is torch.Tensor


@pytest.mark.parametrize(
    "data",
    [
        torch.tensor(3),
        torch.tensor([3]),
        torch.tensor(1.25),
        torch.tensor(1 + 2j),
        torch.tensor([1, 2]),
        torch.empty(0),
    ],
)
def test_python_conversions_are_the_plain_tensors(data):
    funs = [
        str,
        format,
        lambda x: format(x, ".2f"),
        bool,
        int,
        float,
        complex,
        operator.index,
        round,
        math.trunc,
        math.floor,
        math.ceil,
        lambda x: x.item(),
    ]
    for fun in funs:
        try:
            expected = (False, fun(data))
        except Exception as err:  # the same exception, same message
            expected = (True, (type(err), str(err)))
        try:
            actual = (False, fun(UnbatchedTensor(data)))
        except Exception as err:
            actual = (True, (type(err), str(err)))
        assert actual == expected
    assert repr(UnbatchedTensor(torch.tensor([1.0, 2.0]))) == "UnbatchedTensor(tensor([1., 2.]))"
    np.testing.assert_array_equal(np.asarray(UnbatchedTensor(torch.tensor([1, 2]))), np.array([1, 2]))
    assert hex(UnbatchedTensor(torch.tensor(1))) == "0x1"


def test_pickle_deepcopy_and_autograd():
    ut = UnbatchedTensor(torch.randn(3), batch_size=[2])
    back = pickle.loads(pickle.dumps(ut))
    assert type(back) is UnbatchedTensor and back.batch_size == torch.Size([2]) and torch.equal(back, ut)
    deep = copy.deepcopy(ut)
    assert type(deep) is UnbatchedTensor and deep.batch_size == torch.Size([2]) and deep.data_ptr() != ut.data_ptr()
    leaf = UnbatchedTensor(torch.ones(3, requires_grad=True))
    (leaf * 2).sum().backward()
    assert leaf.grad is not None and leaf.grad.tolist() == [2.0, 2.0, 2.0]


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="data must be a tensor"):
        UnbatchedTensor(object())
    with pytest.raises(TypeError, match="batch_size"):
        UnbatchedTensor(torch.zeros(2), batch_size="ab")
    with pytest.raises(ValueError, match="batch_size"):
        UnbatchedTensor(torch.zeros(2), batch_size=[-1])


# ---------------------------------------------------------------------------- in a TensorDict
def test_stored_with_any_shape_and_tagged():
    data = torch.randn(7, 11)
    td = TensorDict(a=torch.zeros(4, 3), u=UnbatchedTensor(data), batch_size=[4, 3])
    assert td.get("u").batch_size == torch.Size([4, 3]) and td.get("u").data_ptr() == data.data_ptr()
    assert type(td["u"]) is UnbatchedTensor
    # a shape that happens to start with the batch size is tagged too (set's fast path is for plain tensors)
    td.set("w", UnbatchedTensor(torch.zeros(4, 3)))
    td["x"] = UnbatchedTensor(torch.zeros(1))
    assert td.get("w").batch_size == td.get("x").batch_size == torch.Size([4, 3])
    # a plain tensor of that shape still needs the batch dims
    with pytest.raises(RuntimeError, match="'y'"):
        td.set("y", torch.zeros(7, 11))
    assert "y" not in td.keys()


def test_indexing_keeps_the_data_whole():
    td = _td()
    for result in (
        td[0],
        td[1:3],
        td[:, 1],
        td[torch.tensor([0, 2])],
        td[torch.tensor([[0, 1], [2, 3]])],
        td[..., None],
        td[td["a"][..., 0] > 3],
    ):
        _check(result, td)
    assert td[0].get("u").batch_size == torch.Size([3])
    assert td[torch.tensor([0, 2, 3])].batch_size == torch.Size([3, 3])


@pytest.mark.parametrize(
    "op",
    [
        lambda t: t.reshape(12),
        lambda t: t.view(3, 4),
        lambda t: t.unsqueeze(0),
        lambda t: t.unsqueeze(-1).squeeze(-1),
        lambda t: t.permute(1, 0),
        lambda t: t.transpose(0, 1),
        lambda t: t.flatten(0, 1),
        lambda t: t.unflatten(0, (2, 2)),
        lambda t: t.expand(5, 4, 3),
        lambda t: t.repeat(2, 1),
        lambda t: t.flip(0),
        lambda t: t.roll(1, 0),
        lambda t: t.narrow(0, 1, 2),
        lambda t: t.contiguous(),
        lambda t: t.gather(0, torch.zeros(1, 3, dtype=torch.long)),
        lambda t: t.masked_select(torch.tensor([True, False, True, False])),
        lambda t: t.masked_fill(torch.ones(4, 3, dtype=torch.bool), 0.0),  # tensordict raises here
        lambda t: t.where(torch.ones(4, 3, dtype=torch.bool), t.clone().zero_()),  # tensordict raises here
        lambda t: t.sum(dim=0),
        lambda t: t.cumsum(1),
        lambda t: t.apply(lambda x: x[0], batch_size=[3]),
        lambda t: t.new_zeros(2, 5),
        lambda t: torch.unsqueeze(t, 0),
    ],
)
def test_batch_ops_keep_the_data_whole(op):
    td = _td()
    _check(op(td), td)


def test_several_outputs():
    td = _td()
    for parts in (
        td.unbind(0),
        td.unbind(1),
        td.split(3, 0),
        td.split([1, 2], 1),
        td.chunk(2, 0),
        td.tensor_split(2, 1),
    ):
        for part in parts:
            _check(part, td)
    assert td.unbind(1)[0].get("u").batch_size == torch.Size([4])


def test_stack_and_cat_keep_the_first_one():
    td = _td()
    stacked = torch.stack([td, td], 1)
    assert stacked.batch_size == torch.Size([4, 2, 3])
    _check(stacked, td)
    catted = torch.cat([td, td.clone()], 0)  # different data: no warning for cat (as in tensordict)
    assert catted.batch_size == torch.Size([8, 3])
    _check(catted, td)
    with pytest.warns(UserWarning, match="different data storage"):
        torch.stack([td, td.clone()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.stack([td, td.clone(False)])  # same storage: silent
    out = torch.stack([td, td]).zero_()
    assert torch.stack([td, td], 0, out=out) is out
    assert out.get("u").batch_size == torch.Size([2, 4, 3])
    other = td.clone().set("u", torch.zeros(4, 3))
    with pytest.raises(TypeError, match="'u'"):
        torch.stack([td, other])


def test_lazy_stack_gives_one_tensor():
    td = _td()
    data_ptr = td.get("u").data_ptr()
    lazy = lazy_stack([td, td], 1)
    assert isinstance(lazy, LazyStackedTensorDict)
    assert lazy.get("u").batch_size == torch.Size([4, 2, 3]) and lazy.get("u").data_ptr() == data_ptr
    assert lazy.get(("nested", "v")).batch_size == torch.Size([4, 2, 3])
    lazy.set("w", UnbatchedTensor(torch.zeros(5)))
    assert lazy.tensordicts[0].get("w").batch_size == torch.Size([4, 3])
    assert lazy.get("w").batch_size == torch.Size([4, 2, 3]) and lazy.get("w").shape == (5,)
    assert "UnbatchedTensor(shape=torch.Size([7, 11])" in repr(lazy)


def test_data_ops_run_on_the_data():
    td = _td()
    doubled = td * 2
    assert type(doubled.get("u")) is UnbatchedTensor and doubled.get("u").batch_size == td.batch_size
    assert torch.equal(doubled["u"], td["u"] * 2)
    assert torch.equal((td + td)["u"], td["u"] * 2)
    cloned = td.clone()
    assert cloned.get("u").data_ptr() != td.get("u").data_ptr() and torch.equal(cloned["u"], td["u"])
    assert td.to(torch.float64)["u"].dtype == torch.float64
    assert td.apply(lambda x: x + 1)["u"][0, 0].item() == 1.0
    assert (torch.ones_like(td)["u"] == 1).all()
    zeroed = td.clone().zero_()
    assert (zeroed["u"] == 0).all()
    assert (td == td.clone()).all()
    assert td.copy()["u"] is td["u"] and td.select("u")["u"] is td["u"] and td.exclude("a")["u"] is td["u"]
    assert pad(td, [0, 1])["u"] is td["u"]  # pad keeps the very tensor (as in tensordict)


def test_index_writes_skip_it():
    td = _td()
    before = td["u"].clone()
    td[0] = td[1]
    td[torch.ones(4, 3, dtype=torch.bool)] = 0.0
    td[1:3] = TensorDict(a=torch.ones(2, 3, 2), u=UnbatchedTensor(torch.zeros(1)), batch_size=[2, 3])
    assert torch.equal(td["u"], before)
    assert (td["a"][1:3] == 1).all()
    td.masked_fill_(torch.ones(4, 3, dtype=torch.bool), 5.0)
    assert torch.equal(td["u"], before) and (td["a"] == 5).all()


def test_batch_size_changes_retag_it():
    td = _td()
    td.batch_size = [4]
    assert td.get("u").batch_size == torch.Size([4])  # tensordict keeps the old tag
    auto = TensorDict(a=UnbatchedTensor(torch.tensor(0)), b=torch.randn(2, 3)).auto_batch_size_(batch_dims=2)
    assert auto.batch_size == torch.Size([2, 3]) and auto.get("a").batch_size == torch.Size([2, 3])


def test_pickle_state_dict_and_what_is_refused(tmp_path):
    td = _td()
    back = pickle.loads(pickle.dumps(td))
    _check(back, back)
    assert torch.equal(back["u"], td["u"])
    target = td.clone().zero_()
    target.load_state_dict(td.state_dict())
    assert torch.equal(target["u"], td["u"])
    for action in (lambda: td.memmap(tmp_path / "m"), lambda: td.save(tmp_path / "s"), td.consolidate):
        with pytest.raises(NotImplementedError, match="'u'"):
            action()
    assert [p.name for p in (tmp_path / "m").iterdir()] == [".tdict.lock"]  # nothing written


def test_vmap_and_pytree_leave_it_out():
    td = _td()
    result = torch.vmap(lambda x: x)(td)
    assert result.batch_size == td.batch_size
    _check(result, td)
    leaves = torch.utils._pytree.tree_leaves(td)
    assert all(type(leaf) is not UnbatchedTensor for leaf in leaves)
    mapped = torch.utils._pytree.tree_map(lambda x: x + 1, td)
    assert torch.equal(mapped["u"], td["u"])  # not a leaf: left as it is


def test_tensorclass_field():
    @tensorclass
    class Holder:
        table: torch.Tensor
        value: torch.Tensor

    data = torch.tensor([1.0, 2.0])
    obj = Holder(table=UnbatchedTensor(data), value=torch.randn(3), batch_size=[3])
    assert type(obj.table) is UnbatchedTensor and obj.table.data_ptr() == data.data_ptr()
    assert obj[1:].table.batch_size == torch.Size([2])
    assert obj.reshape(1, 3).table.data_ptr() == data.data_ptr()
