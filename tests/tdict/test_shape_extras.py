"""Shape ops added for tensordict 0.14 parity: movedim/moveaxis, swapdims/swapaxes, narrow, tile,
broadcast_to, atleast_*d, tensor_split, fliplr/flipud, rot90, roll without dims, pad (method),
densify, to_lazystack, the stacking classmethods, stack/cat_from_tensordict and their torch
functions.

The reference applies the same torch op to every tensor leaf, reading the dims as *batch* dims
(never feature dims): a leaf of shape ``batch + features`` keeps its features untouched.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tdict import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDict, lazy_stack, tensorclass

FAST = settings(max_examples=60, deadline=None)


# --------------------------------------------------------------------------- fixtures and references
def make_td(batch=(2, 3)) -> TensorDict:
    """A nested TensorDict: a batch-shaped leaf, a leaf with feature dims, a sub-collection with an
    extra batch dim (and its own feature dims), a non-tensor entry."""
    bs = tuple(batch)
    n = torch.Size(bs).numel()
    sub = TensorDict({"x": torch.arange(n * 4 * 2).reshape(*bs, 4, 2)}, batch_size=[*bs, 4])
    return TensorDict(
        {
            "a": torch.arange(n).reshape(bs),
            "feat": torch.arange(n * 5).reshape(*bs, 5).float(),
            "sub": sub,
            "text": "hello",
        },
        batch_size=bs,
    )


def check_per_leaf(result, source, leaf_op, batch_size, extra=None, text_values=frozenset({"hello"})) -> None:
    """Every tensor leaf of ``result`` equals ``leaf_op(leaf of source, n_batch_dims_of_source)``."""
    assert result.batch_size == torch.Size(batch_size)
    for key, leaf in source.items(True, True):
        if not isinstance(leaf, torch.Tensor):
            continue
        expected = leaf_op(leaf)
        got = result.get(key)
        assert got.shape == expected.shape, (key, got.shape, expected.shape)
        assert torch.equal(got, expected), key
    assert result.get("sub").batch_size == torch.Size(batch_size) + torch.Size(extra if extra is not None else (4,))
    text = result.get("text")
    assert text.batch_size == torch.Size(batch_size)
    assert set(_flat(text.tolist())) <= text_values
    if text.batch_size.numel():
        assert set(_flat(text.tolist())) == text_values


def _flat(x):
    if isinstance(x, list):
        for y in x:
            yield from _flat(y)
    else:
        yield x


N = 2  # batch dims of make_td()


# --------------------------------------------------------------------------- single-output ops
@pytest.mark.parametrize("source,destination", [(0, 1), (1, 0), (-1, 0), ((0, 1), (1, 0)), (0, 0)])
def test_movedim_per_leaf(source, destination):
    td = make_td()
    src = tuple(s % N for s in ((source,) if isinstance(source, int) else source))
    dst = tuple(d % N for d in ((destination,) if isinstance(destination, int) else destination))
    out = td.movedim(source, destination)
    bs = torch.empty(2, 3).movedim(src, dst).shape
    check_per_leaf(out, td, lambda t: t.movedim(src, dst), bs)
    assert torch.equal(td.moveaxis(source, destination)["feat"], out["feat"])
    assert torch.equal(torch.movedim(td, source, destination)["feat"], out["feat"])
    assert torch.equal(torch.moveaxis(td, source, destination)["feat"], out["feat"])


def test_movedim_identity_is_self_and_names_follow():
    td = make_td()
    assert td.movedim(0, 0) is td
    td.names = ["b", "t"]
    assert td.movedim(0, 1).names == ["t", "b"]


def test_swapdims_alias_of_transpose():
    td = TensorDict(a=torch.arange(24).reshape(2, 3, 4), f=torch.zeros(2, 3, 4, 5), batch_size=[2, 3, 4])
    for fn in (td.swapdims, td.swapaxes, lambda a, b: torch.swapdims(td, a, b), lambda a, b: torch.swapaxes(td, a, b)):
        out = fn(0, 2)
        assert out.batch_size == torch.Size([4, 3, 2])
        assert torch.equal(out["a"], td["a"].swapdims(0, 2))
        assert out["f"].shape == (4, 3, 2, 5)


@pytest.mark.parametrize("dim,start,length", [(0, 1, 1), (1, 0, 3), (1, 1, 2), (-1, -2, 2), (1, 3, 0)])
def test_narrow_per_leaf(dim, start, length):
    td = make_td()
    d = dim % N
    out = td.narrow(dim, start, length)
    bs = torch.empty(2, 3).narrow(d, start, length).shape
    check_per_leaf(out, td, lambda t: t.narrow(d, start, length), bs)
    assert torch.equal(torch.narrow(td, dim, start, length)["feat"], out["feat"])


def test_narrow_is_a_view_and_keeps_names():
    td = make_td()
    td.names = ["b", "t"]
    out = td.narrow(1, 1, 2)
    assert out.names == ["b", "t"]
    out["feat"].fill_(-1)
    assert (td["feat"][:, 1:] == -1).all() and (td["feat"][:, 0] != -1).all()


@pytest.mark.parametrize("reps", [(2, 1), (1, 2), (2,), (2, 1, 1), (3, 2, 2), (), (0, 1)])
def test_tile_per_leaf(reps):
    td = make_td()
    full = (1,) * (N - len(reps)) + tuple(reps)
    bs = torch.empty(2, 3).tile(reps).shape
    out = td.tile(reps)
    # batch dims tiled like torch.tile on the batch, feature dims untouched
    check_per_leaf(out, td, lambda t: t.tile(full + (1,) * (t.dim() - N)), bs)
    assert torch.equal(torch.tile(td, reps)["feat"], out["feat"])
    if reps:
        assert torch.equal(td.tile(*reps)["feat"], out["feat"])


def test_tile_int_reps():
    td = make_td()
    assert td.tile(2).batch_size == torch.Size([2, 6])
    assert torch.equal(td.tile(2)["feat"], td["feat"].tile(1, 2, 1))


@pytest.mark.parametrize("shape", [(2, 3), (4, 2, 3), (5, 4, 2, 3), (4, -1, 3), (-1, -1)])
def test_broadcast_to_per_leaf(shape):
    td = make_td()
    bs = torch.empty(2, 3).broadcast_to(shape).shape
    out = td.broadcast_to(shape)
    check_per_leaf(out, td, lambda t: t.broadcast_to(bs + t.shape[N:]), bs)
    assert torch.equal(torch.broadcast_to(td, shape)["feat"], out["feat"])
    assert torch.equal(td.broadcast_to(*shape)["feat"], out["feat"])


def test_broadcast_from_singleton_dim():
    td = TensorDict(a=torch.arange(3).reshape(1, 3), f=torch.zeros(1, 3, 2), batch_size=[1, 3])
    out = td.broadcast_to((4, 3))
    assert out["f"].shape == (4, 3, 2)
    assert torch.equal(out["a"], td["a"].expand(4, 3))


@pytest.mark.parametrize("batch", [(), (3,), (2, 3), (2, 3, 1)])
def test_atleast_nd(batch):
    td = make_td(batch)
    for k, method in ((1, "atleast_1d"), (2, "atleast_2d"), (3, "atleast_3d")):
        out = getattr(td, method)()
        if len(batch) >= k:
            assert out is td
            continue
        bs = (1,) * (k - len(batch)) + tuple(batch)
        check_per_leaf(out, td, lambda t: t.reshape((1,) * (k - len(batch)) + tuple(t.shape)), bs)
        assert getattr(torch, method)(td).batch_size == torch.Size(bs)


def test_torch_atleast_several_inputs():
    a, b = make_td(()), make_td((3,))
    out = torch.atleast_2d(a, b)
    assert isinstance(out, tuple) and [o.batch_size for o in out] == [torch.Size([1, 1]), torch.Size([1, 3])]


def test_fliplr_flipud_per_leaf():
    td = make_td()
    check_per_leaf(td.fliplr(), td, lambda t: t.flip(1), (2, 3))
    check_per_leaf(td.flipud(), td, lambda t: t.flip(0), (2, 3))
    assert torch.equal(torch.fliplr(td)["feat"], td["feat"].flip(1))
    assert torch.equal(torch.flipud(td)["feat"], td["feat"].flip(0))
    assert torch.equal(torch.flip(td, (0, 1))["feat"], td["feat"].flip(0, 1))


@pytest.mark.parametrize("k", [0, 1, 2, 3, -1, 5])
@pytest.mark.parametrize("dims", [(0, 1), (1, 0), (-1, 0)])
def test_rot90_per_leaf(k, dims):
    td = make_td()
    d = tuple(x % N for x in dims)
    bs = torch.empty(2, 3).rot90(k, d).shape
    out = td.rot90(k, dims)
    check_per_leaf(out, td, lambda t: t.rot90(k, d), bs)
    assert torch.equal(torch.rot90(td, k, dims)["feat"], out["feat"])


def test_rot90_swaps_names():
    td = make_td()
    td.names = ["b", "t"]
    assert td.rot90().names == ["t", "b"]
    assert td.rot90(2).names == ["b", "t"]


def test_roll_without_dims_rolls_the_flattened_batch():
    td = make_td()
    out = td.roll(2)
    check_per_leaf(out, td, lambda t: t.reshape((6,) + t.shape[N:]).roll(2, 0).reshape(t.shape), (2, 3))
    assert torch.equal(torch.roll(td, 2)["feat"], out["feat"])
    assert torch.equal(torch.roll(td, (1, 2), (0, 1))["feat"], td["feat"].roll((1, 2), (0, 1)))


def test_pad_method_per_leaf_and_non_tensor_slots():
    td = make_td()
    out = td.pad([1, 0, 0, 2], value=-1)
    check_per_leaf(
        out,
        td,
        lambda t: F.pad(t, [0, 0] * (t.dim() - N) + [0, 2, 1, 0], value=-1),
        (3, 5),
        text_values={"hello", None},
    )
    text = out.get("text")
    assert isinstance(text, NonTensorStack)
    assert text.tolist()[0] == [None] * 5
    assert text.tolist()[1] == ["hello"] * 3 + [None, None]


def test_pad_inplace_keeps_identity():
    td = make_td()
    expected = td.pad([0, 1])
    out = td.pad([0, 1], inplace=True)
    assert out is td
    assert td.batch_size == torch.Size([3, 3])
    assert torch.equal(td["feat"], expected["feat"])
    from tdict import pad

    other = make_td()
    assert pad(other, [0, 1], inplace=True) is other and other.batch_size == torch.Size([3, 3])
    locked = make_td().lock_()
    with pytest.raises(RuntimeError, match="locked"):
        locked.pad([0, 1], inplace=True)
    assert locked.batch_size == torch.Size([2, 3])


def test_pad_errors_name_the_argument():
    td = make_td()
    with pytest.raises(ValueError, match="pad_size"):
        td.pad([1])
    with pytest.raises(ValueError, match="pad_size"):
        td.pad([0, 0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="below zero"):
        td.pad([-2, -1])


# --------------------------------------------------------------------------- tensor_split
@pytest.mark.parametrize(
    "arg", [1, 2, 3, 5, [1], [1, 2], [2, 7], [2, 1], [-1], (0, 3), torch.tensor([1, 2]), torch.tensor(2)]
)
@pytest.mark.parametrize("dim", [1, -1])
def test_tensor_split_per_leaf(arg, dim):
    td = make_td()
    d = dim % N
    ref_arg = (
        arg.tolist()
        if isinstance(arg, torch.Tensor) and arg.dim()
        else int(arg)
        if isinstance(arg, torch.Tensor)
        else arg
    )
    parts = td.tensor_split(arg, dim)
    batches = torch.empty(2, 3).tensor_split(ref_arg, d)
    assert isinstance(parts, tuple) and len(parts) == len(batches)
    for i, (part, b) in enumerate(zip(parts, batches)):
        check_per_leaf(part, td, lambda t: t.tensor_split(ref_arg, d)[i], b.shape)
    torch_parts = torch.tensor_split(td, arg, dim=dim)
    assert [p.batch_size for p in torch_parts] == [p.batch_size for p in parts]


def test_tensor_split_errors():
    td = make_td()
    with pytest.raises(ValueError, match="indices_or_sections=0"):
        td.tensor_split(0)
    with pytest.raises(TypeError, match="indices_or_sections"):
        td.tensor_split(1.5)
    with pytest.raises(TypeError, match="integer tensor"):
        td.tensor_split(torch.tensor([1.0]))
    with pytest.raises(IndexError, match="dim=2"):
        td.tensor_split(2, 2)
    with pytest.raises(IndexError):
        make_td(()).tensor_split(2)


# --------------------------------------------------------------------------- errors
def test_errors_name_argument_expected_and_received():
    td = make_td()
    with pytest.raises(ValueError, match=r"source has 2 dims.*destination has 1"):
        td.movedim((0, 1), 0)
    with pytest.raises(ValueError, match=r"repeated dim in source \[0, 0\]"):
        td.movedim((0, 0), (0, 1))
    with pytest.raises(IndexError, match="destination=2"):
        td.movedim(0, 2)
    with pytest.raises(IndexError, match="axis1=5"):
        td.swapdims(0, 5)
    with pytest.raises(IndexError, match=r"start=4 is out of range for batch dim 1 of size 3"):
        td.narrow(1, 4, 0)
    with pytest.raises(RuntimeError, match=r"start \(2\) \+ length \(2\) exceeds batch dim 1 of size 3"):
        td.narrow(1, 2, 2)
    with pytest.raises(ValueError, match="length must be non-negative"):
        td.narrow(1, 0, -1)
    with pytest.raises(TypeError, match="start must be an int"):
        td.narrow(1, 0.5, 1)
    with pytest.raises(ValueError, match=r"tile: repetitions must be non-negative, got dims=\[-1, 1\]"):
        td.tile((-1, 1))
    with pytest.raises(ValueError, match=r"broadcast_to: batch dim 1 of size 3 cannot expand to 4"):
        td.broadcast_to((2, 4))
    with pytest.raises(ValueError, match="fewer dims"):
        td.broadcast_to((3,))
    with pytest.raises(ValueError, match="-1 only keeps an existing batch dim"):
        td.broadcast_to((-1, 2, 3))
    with pytest.raises(ValueError, match="rot90: dims must hold exactly two"):
        td.rot90(1, (0,))
    with pytest.raises(ValueError, match="two different batch dims"):
        td.rot90(1, (1, 1))
    with pytest.raises(RuntimeError, match="rot90 requires at least 2 batch dims"):
        make_td((3,)).rot90()
    with pytest.raises(RuntimeError, match="fliplr requires at least 2 batch dims"):
        make_td((3,)).fliplr()
    with pytest.raises(RuntimeError, match="flipud requires at least 1 batch dim"):
        make_td(()).flipud()
    with pytest.raises(TypeError, match="shifts"):
        td.roll((1, 2))


# --------------------------------------------------------------------------- layout, stacking
def test_densify_tensordict():
    td = make_td()
    assert td.densify() is td
    ragged = lazy_stack(
        [TensorDict(x=torch.zeros(3, 2), batch_size=[3]), TensorDict(x=torch.ones(3, 2), batch_size=[3])], 1
    )
    outer = TensorDict(a=torch.zeros(3), inner=ragged, batch_size=[3])
    dense = outer.densify()
    assert dense is not outer and type(dense["inner"]) is TensorDict
    assert torch.equal(dense["inner", "x"], ragged.get("x"))
    assert isinstance(outer["inner"], LazyStackedTensorDict)  # the source is untouched


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_to_lazystack(dim):
    td = make_td()
    td.names = ["b", "t"]
    out = td.to_lazystack(dim)
    assert isinstance(out, LazyStackedTensorDict) and out.stack_dim == dim % N
    assert out.batch_size == td.batch_size and out.names == ["b", "t"]
    assert torch.equal(out.get("feat"), td["feat"])
    assert out.to_lazystack(dim) is out
    other = out.to_lazystack(1 - dim % N)
    assert other.stack_dim == 1 - dim % N and torch.equal(other.get("feat"), td["feat"])
    with pytest.raises(IndexError):
        td.to_lazystack(2)


def test_stack_classmethods():
    td = make_td()
    assert torch.equal(TensorDict.stack([td, td], 1)["feat"], torch.stack([td["feat"]] * 2, 1))
    assert torch.equal(TensorDict.cat([td, td], 1)["feat"], torch.cat([td["feat"]] * 2, 1))
    assert torch.equal(TensorDict.stack([torch.zeros(2), torch.ones(2)]), torch.stack([torch.zeros(2), torch.ones(2)]))
    lazy = TensorDict.lazy_stack([td, td], 1, stack_dim_name="pair")
    assert isinstance(lazy, LazyStackedTensorDict) and lazy.names[1] == "pair"
    assert type(TensorDict.maybe_dense_stack([td, td])) is TensorDict
    a, b = TensorDict(x=torch.zeros(3, 2), batch_size=[3]), TensorDict(x=torch.zeros(3, 4), batch_size=[3])
    assert isinstance(TensorDict.maybe_dense_stack([a, b]), LazyStackedTensorDict)
    c = TensorDict(y=torch.zeros(3), batch_size=[3])
    assert isinstance(LazyStackedTensorDict.maybe_dense_stack([a, c], 1), LazyStackedTensorDict)
    assert torch.equal(
        TensorDict.maybe_dense_stack([torch.zeros(2), torch.ones(2)]), torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    )
    nested = TensorDict.maybe_dense_stack(
        [
            TensorDict(n={"y": torch.zeros(3, 2)}, batch_size=[3]),
            TensorDict(n={"y": torch.zeros(3, 4)}, batch_size=[3]),
        ],
        1,
    )
    assert type(nested) is TensorDict and isinstance(nested.get("n"), LazyStackedTensorDict)
    out = TensorDict.stack([td, td], 1).zero_()
    assert TensorDict.maybe_dense_stack([td, td], 1, out=out) is out and torch.equal(
        out["feat"], torch.stack([td["feat"]] * 2, 1)
    )


def test_stack_and_cat_from_tensordict():
    td = TensorDict(b=torch.zeros(3), a={"c": torch.ones(3)}, batch_size=[3])
    assert torch.equal(td.stack_from_tensordict(), torch.stack([td["b"], td["a", "c"]]))
    assert torch.equal(td.stack_from_tensordict(1), torch.stack([td["b"], td["a", "c"]], 1))
    assert torch.equal(td.stack_from_tensordict(sorted=True), torch.stack([td["a", "c"], td["b"]]))
    assert torch.equal(td.cat_from_tensordict(sorted=[("a", "c"), "b"]), torch.cat([td["a", "c"], td["b"]]))
    out = torch.empty(6)
    assert td.cat_from_tensordict(out=out) is out
    with pytest.raises(KeyError, match=r"missing \[\('a', 'c'\)\]"):
        td.stack_from_tensordict(sorted=["b"])
    with pytest.raises(TypeError, match="key 'text' holds a NonTensorData"):
        make_td().stack_from_tensordict()


def test_tensorclass_forwards_new_methods():
    @tensorclass
    class Obs:
        x: torch.Tensor
        label: str

    obs = Obs(x=torch.arange(24.0).reshape(2, 3, 4), label="hi", batch_size=[2, 3])
    assert type(obs.narrow(1, 0, 2)) is Obs and obs.narrow(1, 0, 2).x.shape == (2, 2, 4)
    assert obs.tile(2, 1).x.shape == (4, 3, 4)
    assert obs.movedim(0, 1).batch_size == torch.Size([3, 2])
    assert [type(p) for p in obs.tensor_split(2, 1)] == [Obs, Obs]
    assert torch.tensor_split(obs, 2, 1)[1].batch_size == torch.Size([2, 1])
    assert torch.narrow(obs, 1, 1, 1).label == "hi"


# --------------------------------------------------------------------------- lazy stacks
def lazy_case():
    """A lazy stack (stack dim 1 of [3, 2, 4]) whose members have ragged feature dims on 'r'."""
    members = [
        TensorDict(
            {
                "a": torch.arange(12).reshape(3, 4) + 100 * i,
                "f": torch.arange(60.0).reshape(3, 4, 5) * (i + 1),
                "r": torch.full((3, 4, i + 1), float(i)),
                "s": f"m{i}",
                "sub": TensorDict(x=torch.arange(24).reshape(3, 4, 2) - i, batch_size=[3, 4, 2]),
            },
            batch_size=[3, 4],
        )
        for i in range(2)
    ]
    return lazy_stack(members, 1)


LAZY_OPS = [  # (op, whether the result is a lazy stack)
    (lambda s: s.movedim(0, 2), True),
    (lambda s: s.movedim(1, 0), True),
    (lambda s: s.swapdims(1, 2), True),
    (lambda s: s.narrow(2, 1, 2), True),
    (lambda s: s.narrow(1, 1, 1), True),
    (lambda s: s.tile((1, 1, 2)), True),
    (lambda s: s.tile((2, 1, 1, 1)), True),
    (lambda s: s.broadcast_to((2, 3, 2, 4)), True),
    (lambda s: s.atleast_3d(), True),
    (lambda s: s.fliplr(), True),
    (lambda s: s.flipud(), True),
    (lambda s: s.rot90(1, (0, 2)), True),
    (lambda s: s.rot90(1, (0, 1)), True),
    (lambda s: s.rot90(3, (1, 2)), True),
    (lambda s: s.rot90(2, (1, 2)), True),
    (lambda s: s.roll(1, 1), True),
    (lambda s: s.roll((1, -1, 3), (0, 1, 2)), True),
    (lambda s: s.pad([0, 0, 0, 0, 1, 2]), True),
    (lambda s: s.to_lazystack(0), True),
]


@pytest.mark.parametrize("op,lazy", LAZY_OPS)
def test_lazy_ops_match_dense_and_stay_lazy(op, lazy):
    s = lazy_case()
    dense = s.exclude("r").to_tensordict()
    out = op(s)
    expected = op(dense)
    assert isinstance(out, LazyStackedTensorDict) == lazy
    assert out.batch_size == expected.batch_size
    for key in ("a", "f", ("sub", "x")):
        assert torch.equal(out.get(key), expected.get(key)), key
    assert out.get("sub").batch_size == expected.get("sub").batch_size
    assert out.get("s").batch_size == out.batch_size
    out.get("r", as_list=True)  # ragged leaves travel along


def test_lazy_ops_on_stack_dim_that_merge_members_go_dense():
    s = lazy_case().exclude("r")
    dense = s.to_tensordict()
    for op in (lambda x: x.tile((1, 2, 1)), lambda x: x.pad([0, 0, 1, 0]), lambda x: x.roll(1)):
        out, expected = op(s), op(dense)
        assert type(out) is TensorDict
        assert torch.equal(out["f"], expected["f"])


def test_lazy_narrow_and_tensor_split_on_stack_dim_select_members():
    s = lazy_case()
    assert s.narrow(1, 1, 1).tensordicts[0] is s.tensordicts[1]
    parts = s.tensor_split([1], 1)
    assert [p.tensordicts[0] for p in parts] == [s.tensordicts[0], s.tensordicts[1]]
    parts = s.tensor_split(3, 2)
    assert [p.batch_size for p in parts] == [torch.Size([3, 2, 2]), torch.Size([3, 2, 1]), torch.Size([3, 2, 1])]
    dense_parts = s.exclude("r").to_tensordict().tensor_split(3, 2)
    for p, d in zip(parts, dense_parts):
        assert isinstance(p, LazyStackedTensorDict) and torch.equal(p.get("f"), d["f"])
        assert p.get("r", as_list=True)[1].shape[-1] == 2
    assert s.narrow(1, 0, 0).batch_size == torch.Size([3, 0, 4])  # empty selections are empty stacks


def test_lazy_pad_inplace():
    s = lazy_case().exclude("s")
    before = s.exclude("r").to_tensordict()
    members = list(s.tensordicts)
    assert s.pad([0, 0, 0, 0, 1, 0], inplace=True) is s
    assert s.batch_size == torch.Size([3, 2, 5]) and all(a is b for a, b in zip(s.tensordicts, members))
    assert torch.equal(s.get("f"), before.pad([0, 0, 0, 0, 1, 0])["f"])


def test_lazy_pad_inplace_along_the_stack_dim():
    a, b = TensorDict(x=torch.ones(2), batch_size=[2]), TensorDict(x=torch.full((2,), 2.0), batch_size=[2])
    s = lazy_stack([a, b])
    assert s.pad([1, 1, 0, 1], value=9.0, inplace=True) is s
    assert s.batch_size == torch.Size([4, 3]) and s.tensordicts[1] is a and s.tensordicts[2] is b
    assert s["x"].tolist() == [[9.0] * 3, [1.0, 1.0, 9.0], [2.0, 2.0, 9.0], [9.0] * 3]
    assert s.pad([-1, -2], inplace=True) is s  # a negative pad drops members
    assert s.tensordicts == [a] and s.batch_size == torch.Size([1, 3])
    with pytest.raises(ValueError, match="crops 3 members from a stack of 1"):
        s.pad([-2, -1], inplace=True)
    assert s.batch_size == torch.Size([1, 3])


def test_non_tensor_stack_entries_follow():
    td = TensorDict({"a": torch.arange(6).reshape(2, 3)}, batch_size=[2, 3])
    td.set("s", NonTensorStack.from_list([["a", "b", "c"], ["d", "e", "f"]]))
    assert td.narrow(1, 1, 2)["s"] == [["b", "c"], ["e", "f"]]
    assert td.rot90()["s"] == [["c", "f"], ["b", "e"], ["a", "d"]]
    assert td.tile((1, 2))["s"] == [["a", "b", "c"] * 2, ["d", "e", "f"] * 2]
    assert td.movedim(0, 1)["s"] == [["a", "d"], ["b", "e"], ["c", "f"]]
    assert [p["s"] for p in td.tensor_split([1], 1)] == [[["a"], ["d"]], [["b", "c"], ["e", "f"]]]
    assert td.roll(1)["s"] == [["f", "a", "b"], ["c", "d", "e"]]
    assert td.pad([0, 1])["s"] == [["a", "b", "c"], ["d", "e", "f"], [None, None, None]]
    assert isinstance(td.get("s"), NonTensorStack)
    assert isinstance(make_td().narrow(0, 0, 1).get("text"), NonTensorData)


# --------------------------------------------------------------------------- properties
@st.composite
def nested_td(draw):
    """A TensorDict with 1-3 batch dims (sizes 0-3), leaves with 0-2 feature dims, and one
    sub-collection with an extra batch dim; values are distinct per element."""
    bs = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))
    counter = [0]

    def leaf(shape):
        n = torch.Size(shape).numel()
        counter[0] += n
        return torch.arange(counter[0] - n, counter[0]).reshape(shape)

    entries = {}
    for key in draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True)):
        entries[key] = leaf(bs + tuple(draw(st.lists(st.integers(1, 3), max_size=2))))
    extra = draw(st.integers(1, 2))
    entries["sub"] = TensorDict(
        {"x": leaf(bs + (extra,) + tuple(draw(st.lists(st.integers(1, 2), max_size=1))))}, batch_size=bs + (extra,)
    )
    return TensorDict(entries, batch_size=bs), draw(st.data())


def assert_leaves(result, source, leaf_op, batch_size):
    assert result.batch_size == torch.Size(batch_size)
    for key, leaf in source.items(True, True):
        expected = leaf_op(leaf)
        assert torch.equal(result.get(key), expected), key
        assert result.get(key).shape == expected.shape


@FAST
@given(nested_td())
def test_property_movedim(case):
    td, data = case
    n = td.batch_dims
    k = data.draw(st.integers(1, n))
    src = data.draw(st.lists(st.integers(-n, n - 1), min_size=k, max_size=k, unique_by=lambda d: d % n))
    dst = data.draw(st.lists(st.integers(-n, n - 1), min_size=k, max_size=k, unique_by=lambda d: d % n))
    nsrc, ndst = [s % n for s in src], [d % n for d in dst]
    bs = torch.empty(td.batch_size).movedim(nsrc, ndst).shape
    assert_leaves(td.movedim(src, dst), td, lambda t: t.movedim(nsrc, ndst), bs)


@FAST
@given(nested_td())
def test_property_narrow(case):
    td, data = case
    n = td.batch_dims
    dim = data.draw(st.integers(-n, n - 1))
    size = td.batch_size[dim]
    start = data.draw(st.integers(-size, size))
    length = data.draw(st.integers(0, size - (start + size if start < 0 else start)))
    d = dim % n
    bs = torch.empty(td.batch_size).narrow(d, start, length).shape
    assert_leaves(td.narrow(dim, start, length), td, lambda t: t.narrow(d, start, length), bs)


@FAST
@given(nested_td())
def test_property_tile(case):
    td, data = case
    n = td.batch_dims
    reps = tuple(data.draw(st.lists(st.integers(0, 2), max_size=n + 1)))
    full = (1,) * (n - len(reps)) + reps
    bs = torch.empty(td.batch_size).tile(reps).shape
    assert_leaves(td.tile(reps), td, lambda t: t.tile(full + (1,) * (t.dim() - n)), bs)


@FAST
@given(nested_td())
def test_property_tensor_split(case):
    td, data = case
    n = td.batch_dims
    dim = data.draw(st.integers(-n, n - 1))
    d = dim % n
    size = td.batch_size[d]
    arg = data.draw(st.one_of(st.integers(1, 4), st.lists(st.integers(-size - 1, size + 1), max_size=3)))
    parts = td.tensor_split(arg, dim)
    batches = torch.empty(td.batch_size).tensor_split(arg, d)
    assert len(parts) == len(batches)
    for i, (part, b) in enumerate(zip(parts, batches)):
        assert_leaves(part, td, lambda t: t.tensor_split(arg, d)[i], b.shape)


def test_repeat_interleave_without_dim_flattens_first():
    td = TensorDict({"a": torch.arange(4).view(2, 2), "f": torch.arange(8).view(2, 2, 2)}, [2, 2])
    out = td.repeat_interleave(2)
    # torch / tensordict 0.14: batch [8], the flattened elements repeated (tdict repeated dim 0: [4, 2])
    assert out.batch_size == torch.Size([8])
    assert out["a"].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert out["f"].shape == torch.Size([8, 2]) and out["f"][:2].tolist() == [[0, 1], [0, 1]]
    out = td.repeat_interleave(torch.tensor([1, 2, 0, 1]))
    assert out.batch_size == torch.Size([4]) and out["a"].tolist() == [0, 1, 1, 3]
    assert td.repeat_interleave(2, dim=1)["a"].tolist() == [[0, 0, 1, 1], [2, 2, 3, 3]]


def test_flatten_of_a_batch_less_tensordict_gives_one_dim():
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.zeros(())}}, [])
    for out in (td.flatten(), td.flatten(0, -1), torch.flatten(td)):
        # torch.zeros(()).flatten().shape == [1], as tensordict 0.14 does (tdict kept [])
        assert (
            out.batch_size == torch.Size([1])
            and out["a"].shape == torch.Size([1, 3])
            and out["n", "b"].shape == torch.Size([1])
        )
    with pytest.raises(IndexError, match="start_dim"):
        td.flatten(1)
    assert TensorDict({"a": torch.zeros(3)}, [3]).flatten().batch_size == torch.Size([3])


def test_where_pads_the_leaves_one_side_lacks():
    cond = torch.tensor([True, False, True])
    td = TensorDict(a=torch.arange(3.0), sub=TensorDict(b=torch.ones(3, 2), batch_size=[3]), batch_size=[3])
    other = TensorDict(a=torch.full((3,), 9.0), c=torch.full((3,), 5.0), batch_size=[3])
    out = td.where(cond, other, pad=-1)
    assert out["a"].tolist() == [0.0, 9.0, 2.0]  # both hold it: torch.where
    assert out["sub", "b"].tolist() == [[1.0, 1.0], [-1.0, -1.0], [1.0, 1.0]]  # other lacks it: pad
    assert out["c"].tolist() == [-1.0, 5.0, -1.0]  # self lacks it: pad where self is picked
    with pytest.raises(KeyError, match=r"\('sub', 'b'\).*no pad value provided.*missing from other"):
        td.where(cond, other)
    with pytest.raises(KeyError, match="'c'.*no pad value provided.*missing from self"):
        td.where(cond, other.update({"sub": td["sub"]}))
    dest = TensorDict(a=torch.zeros(3), batch_size=[3])
    a_before = dest["a"]
    assert td.where(cond, other, pad=0, out=dest) is dest
    assert dest["a"] is a_before and dest["a"].tolist() == [0.0, 9.0, 2.0]  # written in place
    assert dest["c"].tolist() == [0.0, 5.0, 0.0]  # added


# --------------------------------------------------------------------------- inplace=True shape ops
def _inplace_case() -> TensorDict:
    return TensorDict(
        a=torch.arange(24.0).view(3, 4, 2),
        sub=TensorDict(c=torch.arange(24.0).view(3, 4, 2) * 10, batch_size=[3, 4, 2]),
        s=NonTensorData("x", batch_size=[3, 4]),
        batch_size=[3, 4],
    )


INPLACE_OPS = [
    ("repeat", lambda td, **kw: td.repeat(2, 1, **kw), [6, 4]),
    ("repeat_interleave", lambda td, **kw: td.repeat_interleave(2, dim=1, **kw), [3, 8]),
    ("repeat_interleave_flat", lambda td, **kw: td.repeat_interleave(2, **kw), [24]),
    ("roll", lambda td, **kw: td.roll(1, 0, **kw), [3, 4]),
    ("gather", lambda td, **kw: td.gather(1, torch.tensor([[3, 0]] * 3), **kw), [3, 2]),
    ("reshape", lambda td, **kw: td.reshape(12, **kw), [12]),
    ("flatten", lambda td, **kw: td.flatten(0, 1, **kw), [12]),
    ("unflatten", lambda td, **kw: td.unflatten(1, (2, 2), **kw), [3, 2, 2]),
    ("contiguous", lambda td, **kw: td.contiguous(**kw), [3, 4]),
]


@pytest.mark.parametrize(("name", "op", "batch"), INPLACE_OPS, ids=[o[0] for o in INPLACE_OPS])
def test_inplace_shape_ops_keep_identity_and_match_out_of_place(name, op, batch):
    td = _inplace_case()
    sub = td.get("sub")
    ref = op(_inplace_case())
    out = op(td, inplace=True)
    assert out is td and td.get("sub") is sub
    assert td.batch_size == torch.Size(batch) and sub.batch_size == torch.Size(batch + [2])
    for key in ("a", ("sub", "c")):
        assert torch.equal(td[key], ref[key]), key
    assert td.get("s").batch_size == torch.Size(batch)


def test_inplace_shape_op_frees_the_old_leaf_and_keeps_names():
    import gc
    import weakref

    td = TensorDict(a=torch.zeros(4, 5, 3), batch_size=[4, 5], names=["t", "e"])
    old = weakref.ref(td["a"])
    assert td.roll(1, 0, inplace=True) is td
    gc.collect()
    assert old() is None and td.names == ["t", "e"]
    td.flatten(inplace=True)
    assert td.names == [None] and td["a"].shape == (20, 3)
    assert td.flatten(None, None).batch_size == torch.Size([20])  # None: the first / last dim


def test_inplace_shape_ops_refuse_before_any_change():
    s = lazy_stack([TensorDict(x=torch.zeros(4), batch_size=[4])] * 3)
    for call in (
        lambda: s.repeat(2, 1, inplace=True),
        lambda: s.reshape(12, inplace=True),
        lambda: s.flatten(0, 1, inplace=True),
        lambda: s.contiguous(inplace=True),
    ):
        with pytest.raises(NotImplementedError, match=r"inplace=True\) is not supported on LazyStackedTensorDict"):
            call()
    assert s.batch_size == torch.Size([3, 4])
    locked = _inplace_case().lock_()
    with pytest.raises(RuntimeError, match=r"locked.*repeat\(inplace=True\)"):
        locked.repeat(2, 1, inplace=True)
    assert locked.batch_size == torch.Size([3, 4])
    td = _inplace_case()
    with pytest.raises(NotImplementedError, match="index has 1 dims, expected 2"):
        td.gather(0, torch.tensor([0, 1]), inplace=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        td.gather(0, torch.zeros(3, 4, dtype=torch.long), out=td.clone(), inplace=True)
    assert td.batch_size == torch.Size([3, 4])


def test_gather_out_receives_the_result():
    td = TensorDict(a=torch.arange(6.0).view(2, 3), batch_size=[2, 3])
    index = torch.tensor([[2, 0], [1, 1]])
    out = TensorDict(a=torch.zeros(2, 2), batch_size=[2, 2])
    assert td.gather(1, index, out=out) is out
    assert out["a"].tolist() == [[2.0, 0.0], [4.0, 4.0]]
    assert torch.gather(td, 1, index, out=out) is out
    with pytest.raises(ValueError, match=r"out must be a collection of batch size \[2, 2\], got batch size \[2, 3\]"):
        td.gather(1, index, out=td)


# ---- right-expansion (tensordict.utils.expand_right / expand_as_right) ----------------------------
@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=3),
    tail=st.lists(st.integers(1, 3), min_size=0, max_size=2),
)
def test_expand_right_matches_a_loop(lead, tail):
    from tdict import expand_right

    tensor = torch.arange(int(torch.Size(lead).numel()), dtype=torch.float32).reshape(lead)
    out = expand_right(tensor, (*lead, *tail))
    assert out.shape == (*lead, *tail) and out.data_ptr() == tensor.data_ptr()  # a view
    for index in torch.cartesian_prod(*[torch.arange(s) for s in (*lead, *tail, 1)]).reshape(
        -1, len(lead) + len(tail) + 1
    ):
        index = tuple(index[:-1].tolist())
        assert out[index] == tensor[index[: len(lead)]]


def test_expand_right_errors_and_tensordict_destination():
    from tdict import expand_as_right, expand_right

    with pytest.raises(RuntimeError, match=r"has 2 dims \(shape \(2, 3\)\), more than the target shape \(2,\)"):
        expand_right(torch.zeros(2, 3), (2,))
    with pytest.raises(RuntimeError, match=r"shape \(3,\) does not match the leading dims of \(2, 4\)"):
        expand_right(torch.zeros(3), (2, 4))
    assert expand_right(torch.zeros(1), (5, 2)).shape == (5, 2)  # a size-one dim broadcasts
    mask = torch.tensor([True, False])
    dest = TensorDict(obs=torch.zeros(2, 4), nested=TensorDict(x=torch.zeros(2, 3, 5), batch_size=[2]), batch_size=[2])
    out = expand_as_right(mask, dest)
    assert out["obs"].shape == (2, 4) and out["nested", "x"].shape == (2, 3, 5)
    assert out["nested", "x"][0].all() and not out["nested", "x"][1].any()


def test_contiguous_canonical_copies_only_non_row_major_leaves():
    odd = torch.empty_strided((1, 4, 5), (5, 5, 1))  # contiguous for torch, not row-major strides
    odd.copy_(torch.arange(20.0).view(1, 4, 5))
    plain = torch.randn(2, 3, 4)
    td = TensorDict({"odd": odd, "plain": plain, "nested": TensorDict({"leaf": odd}, [])}, [])
    same = td.contiguous()
    assert same["odd"].data_ptr() == odd.data_ptr() and same["odd"].stride() == (5, 5, 1)
    canon = td.contiguous(canonical=True)
    assert canon["odd"].stride() == (20, 5, 1) and canon["odd"].data_ptr() != odd.data_ptr()
    assert canon["nested", "leaf"].stride() == (20, 5, 1)
    assert canon["plain"].data_ptr() == plain.data_ptr()
    assert torch.equal(canon["odd"], odd) and canon.batch_size == td.batch_size
