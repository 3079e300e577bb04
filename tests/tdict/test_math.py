"""Element-wise math, dtype casts, reductions and scans of TensorDict, checked leaf by leaf against torch."""

import pytest
import torch

from tdict import NonTensorData, TensorDict, lazy_stack, tensorclass

BATCH = torch.Size([3, 4])


def make() -> TensorDict:
    """A float, an int and a bool leaf, a nested TensorDict with an extra batch dim, a non-tensor entry."""
    g = torch.Generator().manual_seed(0)
    return TensorDict(
        a=torch.rand(3, 4, 2, generator=g) * 1.8 - 0.9,
        i=torch.randint(-4, 5, (3, 4), generator=g),
        b=torch.rand(3, 4, generator=g) > 0.5,
        sub=TensorDict(c=torch.rand(3, 4, 5, generator=g) * 0.9 + 0.05, batch_size=[3, 4, 5]),
        s=NonTensorData("payload", batch_size=BATCH),
        batch_size=BATCH,
    )


LEAVES = ("a", "i", "b", ("sub", "c"))


def tensor_leaves(td) -> dict:
    return {k: v for k, v in td.items(True, True) if isinstance(v, torch.Tensor)}


def assert_leafwise(result, src, fn, batch_size, *, exact=False):
    """``result`` holds ``fn(leaf)`` for every tensor leaf of ``src`` (same dtype), with ``batch_size``."""
    assert isinstance(result, TensorDict)
    assert result.batch_size == torch.Size(batch_size)
    expected = tensor_leaves(src)
    assert set(tensor_leaves(result)) == set(expected)
    for key, leaf in expected.items():
        want, got = fn(leaf), result.get(key)
        assert got.dtype == want.dtype, key
        assert got.shape == want.shape, key
        if exact or not (want.is_floating_point() or want.is_complex()):
            assert torch.equal(got, want), key
        else:
            torch.testing.assert_close(got, want, equal_nan=True)
    if "s" in src.keys():  # non-tensor entries are carried through
        assert result.get_non_tensor("s") == "payload"


def restrict_to_supported(src, fn):
    """The leaves of ``src`` for which torch accepts ``fn``, and the error type of the others (or None)."""
    ok, error = [], None
    for key, leaf in tensor_leaves(src).items():
        try:
            fn(leaf)
        except (RuntimeError, NotImplementedError, TypeError) as err:
            error = type(err)
        else:
            ok.append(key)
    return src.select(*ok, "s"), error


# ---------------------------------------------------------------- unary math
UNARY = ["acos", "asin", "atan", "cosh", "sinh", "tan", "erf", "erfc", "frac", "lgamma", "log10", "log2", "trunc"]


@pytest.mark.parametrize("name", UNARY + ["isneginf", "isposinf", "isreal"])
def test_unary_matches_torch_per_leaf(name):
    td = make()
    fn = getattr(torch, name)
    supported, error = restrict_to_supported(td, fn)
    if error is not None:  # e.g. frac of an int, trunc of a bool: torch's error comes through
        with pytest.raises(error):
            getattr(td, name)()
    assert_leafwise(getattr(supported, name)(), supported, fn, BATCH)
    assert supported.get("sub").batch_size == torch.Size([3, 4, 5])


@pytest.mark.parametrize("name", UNARY)
def test_unary_inplace_writes_into_the_leaves(name):
    td = make().exclude("i", "b")  # in-place results must keep the leaf dtype: floats only
    before = td.clone()
    ptrs = {k: v.data_ptr() for k, v in tensor_leaves(td).items()}
    assert getattr(td, name + "_")() is td
    assert_leafwise(td, before, getattr(torch, name), BATCH)
    assert {k: v.data_ptr() for k, v in tensor_leaves(td).items()} == ptrs


def test_unary_inplace_on_lazy_stack_and_empty():
    tds = [TensorDict(x=torch.rand(3, 2), batch_size=[3]) for _ in range(2)]
    s = lazy_stack(tds, 0)
    expected = torch.erf(s["x"])
    assert s.erf_() is s
    torch.testing.assert_close(s["x"], expected)
    torch.testing.assert_close(tds[1]["x"], expected[1])
    empty = TensorDict(batch_size=[2])
    assert empty.log2_() is empty and empty.exp_() is empty
    assert empty.erf().batch_size == torch.Size([2])


def test_predicates_have_no_inplace_form_and_see_infinities():
    td = TensorDict(x=torch.tensor([-float("inf"), 0.0, float("inf")]), batch_size=[3])
    assert td.isneginf()["x"].tolist() == [True, False, False]
    assert td.isposinf()["x"].tolist() == [False, False, True]
    assert td.isreal()["x"].all()
    assert not TensorDict(z=torch.tensor([1j]), batch_size=[1]).isreal()["z"].any()
    for name in ("isneginf_", "isposinf_", "isreal_"):
        assert not hasattr(td, name)


# ---------------------------------------------------------------- dtypes
def test_dtype_property():
    td = make()
    assert td.dtype is None  # float, int and bool leaves
    assert td.select("a", "sub", "s").dtype == torch.float32  # nested leaves count, non-tensors do not
    assert td.select("i").dtype == torch.int64
    assert TensorDict().dtype is None
    assert lazy_stack([TensorDict(x=torch.zeros(2, dtype=torch.float64), batch_size=[2])] * 2).dtype == torch.float64


def test_is_floating_point():
    td = make()
    assert td.is_floating_point() is False
    assert td.select("a", "sub", "s").is_floating_point() is True
    assert td.float().is_floating_point() is True
    assert TensorDict().is_floating_point() is True  # nothing that is not floating point
    assert TensorDict(z=torch.zeros(2, dtype=torch.complex64)).is_floating_point() is False


CASTS = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "complex64",
    "complex128",
]


@pytest.mark.parametrize("name", CASTS)
def test_dtype_shortcut_casts_every_leaf(name):
    td = make().apply(lambda v: v.abs() * 10 if v.dtype != torch.bool else v)  # non-negative for the unsigned casts
    dtype = getattr(torch, name)
    out = getattr(td, name)()
    assert_leafwise(out, td, lambda v: v.to(dtype), BATCH, exact=True)
    assert out.dtype == dtype
    assert td.dtype is None  # the source is untouched


def test_type_takes_a_dtype_or_a_type_name():
    td = make()
    assert_leafwise(td.type(torch.float64), td, lambda v: v.double(), BATCH, exact=True)
    assert_leafwise(td.type("torch.IntTensor"), td, lambda v: v.int(), BATCH, exact=True)
    with pytest.raises(TypeError, match="dst_type"):
        td.type(3)


# ---------------------------------------------------------------- binary
def test_addcmul_addcdiv_with_collections_tensors_and_numbers():
    td = make().float()
    t1, t2 = td * 2 - 1, td.abs() + 1
    assert_leafwise(
        td.addcmul(t1, t2, value=0.5), td, lambda v: torch.addcmul(v, v * 2 - 1, v.abs() + 1, value=0.5), BATCH
    )
    assert_leafwise(td.addcdiv(t1, t2, 0.5), td, lambda v: torch.addcdiv(v, v * 2 - 1, v.abs() + 1, value=0.5), BATCH)
    assert_leafwise(td.addcmul(t1, 3.0), td, lambda v: v + (v * 2 - 1) * 3.0, BATCH)
    row = torch.tensor([1.0, 2.0])  # a tensor operand broadcasts against each leaf, as in torch
    sub = td.select("a")
    assert_leafwise(
        sub.addcdiv(row, t2.select("a"), value=2), sub, lambda v: torch.addcdiv(v, row, v.abs() + 1, value=2), BATCH
    )
    with pytest.raises(TypeError, match="other1"):
        td.addcmul("x", t2)


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addc_inplace(name):
    td = make().float()
    t1, t2 = td * 2 - 1, td.abs() + 1
    expected = getattr(td, name)(t1, t2, value=0.25)
    ptrs = {k: v.data_ptr() for k, v in tensor_leaves(td).items()}
    assert getattr(td, name + "_")(t1, t2, value=0.25) is td
    assert (td == expected).all()
    assert {k: v.data_ptr() for k, v in tensor_leaves(td).items()} == ptrs
    td2 = make().float()
    getattr(td2, name + "_")(t1, 2.0, value=0.25)  # a number operand: the leaf-by-leaf path
    assert (td2 == getattr(make().float(), name)(t1, 2.0, value=0.25)).all()
    # a lazy stack: each member gets its slice of the collection operands
    tds = [TensorDict(x=torch.rand(3, 2), batch_size=[3]) for _ in range(2)]
    s = lazy_stack(tds, 0)
    dense = s.to_tensordict() if hasattr(s, "to_tensordict") else torch.stack([t.clone() for t in tds])
    want = getattr(torch, name)(dense["x"], dense["x"] + 1, dense["x"] + 2, value=0.5)
    getattr(s, name + "_")(dense + 1, dense + 2, value=0.5)
    torch.testing.assert_close(tds[0]["x"], want[0])
    torch.testing.assert_close(tds[1]["x"], want[1])


@pytest.mark.parametrize("name", ["clamp_min", "clamp_max"])
def test_clamp_min_max(name):
    td = make()
    fn = getattr(torch, name)
    assert_leafwise(getattr(td, name)(0.5), td, lambda v: fn(v, 0.5), BATCH)  # an int leaf becomes float, as in torch
    assert_leafwise(getattr(td, name)(0), td, lambda v: fn(v, 0), BATCH)
    bound = td.apply(lambda v: torch.full_like(v, 2))
    assert_leafwise(getattr(td, name)(bound), td, lambda v: fn(v, torch.full_like(v, 2)), BATCH)
    f = td.exclude("i", "b")
    expected = getattr(f, name)(0.1)
    assert getattr(f, name + "_")(0.1) is f
    assert (f == expected).all()


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_inplace(name):
    f = make().exclude("i", "b")
    fn = getattr(torch, name)
    other = f.apply(lambda v: torch.zeros_like(v))
    for operand, leaf_operand in (
        (other, lambda v: torch.zeros_like(v)),
        (0.25, lambda v: torch.tensor(0.25)),
        (torch.tensor(0.1), lambda v: torch.tensor(0.1)),
    ):
        src = f.clone()
        assert getattr(src, name + "_")(operand) is src
        assert_leafwise(src, f, lambda v: fn(v, leaf_operand(v)), BATCH)
    a = f.select("a")
    row = torch.tensor([0.0, 0.5, 1.0, 1.5])  # lines up with the batch dims [3, 4], not the leaf's feature dims
    getattr(a, name + "_")(row)
    torch.testing.assert_close(a["a"], fn(f["a"], row.view(4, *(1,) * (f["a"].dim() - 2))))
    assert TensorDict().maximum_(1.0).batch_size == torch.Size([])


def test_logical_and_bitwise_and_mod_rsub():
    td = make()
    mask = td.apply(lambda v: v > 0)
    assert_leafwise(td.logical_and(mask), td, lambda v: torch.logical_and(v, v > 0), BATCH)
    assert_leafwise(td.logical_and(True), td, lambda v: torch.logical_and(v, torch.tensor(True)), BATCH)
    with pytest.raises(TypeError, match="other"):
        td.logical_and("yes")
    ints = td.select("i", "b", "s")
    assert_leafwise(ints.bitwise_and(3), ints, lambda v: torch.bitwise_and(v, 3), BATCH)
    assert_leafwise(ints.bitwise_and(ints), ints, lambda v: torch.bitwise_and(v, v), BATCH)
    assert_leafwise(td.mod(3), td, lambda v: v % 3, BATCH)
    assert_leafwise(td.mod(td.apply(lambda v: torch.full_like(v, 2, dtype=torch.int64))), td, lambda v: v % 2, BATCH)
    nb = td.exclude("b")  # torch refuses to subtract bools
    assert_leafwise(nb.rsub(3), nb, lambda v: 3 - v, BATCH)
    assert_leafwise(nb.rsub(3, alpha=2), nb, lambda v: torch.rsub(v, 3, alpha=2), BATCH)  # other - alpha * self
    assert_leafwise(nb.rsub(nb * 3), nb, lambda v: v * 3 - v, BATCH)


# ---------------------------------------------------------------- reductions and scans
def test_logsumexp():
    td = make()
    assert_leafwise(td.logsumexp(), td, lambda v: torch.logsumexp(v, (0, 1)), [])  # every batch dim by default
    assert_leafwise(td.logsumexp(0), td, lambda v: torch.logsumexp(v, (0,)), [4])
    assert_leafwise(td.logsumexp(-1, keepdim=True), td, lambda v: torch.logsumexp(v, (1,), keepdim=True), [3, 1])
    assert_leafwise(td.logsumexp((1, 0)), td, lambda v: torch.logsumexp(v, (0, 1)), [])
    assert td.logsumexp(0)["i"].dtype == torch.float32  # ints and bools come back as floats
    with pytest.raises(IndexError, match="dim=2"):
        td.logsumexp(2)
    no_batch = TensorDict(x=torch.tensor([1.0, 2.0]))
    assert torch.equal(no_batch.logsumexp()["x"], no_batch["x"])  # nothing to reduce over


def test_logsumexp_out():
    td = make()
    out = td.logsumexp(0).apply(torch.zeros_like)
    kept = out["a"]
    result = td.logsumexp(0, out=out)
    assert result is out and out["a"] is kept  # written in place
    torch.testing.assert_close(out["a"], torch.logsumexp(td["a"], 0))
    torch.testing.assert_close(out["sub", "c"], torch.logsumexp(td["sub", "c"], 0))
    with pytest.raises(TypeError, match="out"):
        td.logsumexp(0, out=torch.zeros(4))


def test_softmax():
    td = make()
    assert_leafwise(td.softmax(0), td, lambda v: torch.softmax(v.float(), 0), BATCH)  # ints and bools as floats
    assert_leafwise(td.softmax(-1, dtype=torch.float64), td, lambda v: torch.softmax(v, 1, dtype=torch.float64), BATCH)
    assert td.softmax(1).get("sub").batch_size == torch.Size([3, 4, 5])
    with pytest.raises(IndexError, match="dim=2"):
        td.softmax(2)
    with pytest.raises(TypeError, match="dim"):
        td.softmax((0,))


def test_quantile_over_batch_dims():
    td = make()
    q = 0.3
    assert_leafwise(td.quantile(q), td, lambda v: torch.quantile(v.float(), q), [])  # all elements of each leaf
    assert_leafwise(td.quantile(q, 0), td, lambda v: torch.quantile(v.float(), q, dim=0), [4])
    assert_leafwise(
        td.quantile(q, -1, keepdim=True, interpolation="nearest"),
        td,
        lambda v: torch.quantile(v.float(), q, dim=1, keepdim=True, interpolation="nearest"),
        [3, 1],
    )
    # several dims: the quantile of the flattened dims
    assert_leafwise(td.quantile(q, (0, 1)), td, lambda v: torch.quantile(v.float().flatten(0, 1), q, dim=0), [])
    assert_leafwise(
        td.quantile(q, (1, 0), keepdim=True),
        td,
        lambda v: torch.quantile(v.float().flatten(0, 1), q, dim=0).reshape((1, 1) + v.shape[2:]),
        [1, 1],
    )
    qs = torch.tensor([0.25, 0.5, 0.75])  # a vector of quantiles adds a leading batch dim
    assert_leafwise(td.quantile(qs, 0), td, lambda v: torch.quantile(v.float(), qs, dim=0), [3, 4])
    assert_leafwise(
        td.quantile(qs, (0, 1), keepdim=True),
        td,
        lambda v: torch.quantile(v.float().flatten(0, 1), qs, dim=0).reshape((3, 1, 1) + v.shape[2:]),
        [3, 1, 1],
    )


def test_quantile_feature_and_reduce():
    td = make().exclude("i", "b")
    q = 0.5
    out = td.quantile(q, dim="feature")
    assert out.batch_size == BATCH and out.get("sub").batch_size == torch.Size([3, 4, 5])
    torch.testing.assert_close(out["a"], torch.quantile(td["a"], q, dim=-1))
    torch.testing.assert_close(out["sub", "c"], td["sub", "c"])  # no feature dims below its own batch
    assert out.get_non_tensor("s") == "payload"
    flat = torch.cat([td["a"].reshape(-1), td["sub", "c"].reshape(-1)])
    torch.testing.assert_close(td.quantile(q, reduce=True), torch.quantile(flat, q))
    feats = torch.cat([td["a"], td["sub", "c"]], -1)
    torch.testing.assert_close(td.quantile(q, dim="feature", reduce=True), torch.quantile(feats, q, dim=-1))
    qs = torch.tensor([0.1, 0.9])
    outs = td.quantile(qs, dim="feature")
    assert outs.batch_size == torch.Size([2, 3, 4]) and outs.get("sub").batch_size == torch.Size([2, 3, 4, 5])
    torch.testing.assert_close(outs["a"], torch.quantile(td["a"], qs, dim=-1))


def test_quantile_errors_name_the_argument():
    td = make()
    with pytest.raises(ValueError, match="q must be in"):
        td.quantile(1.5)
    with pytest.raises(TypeError, match="q must"):
        td.quantile("half")
    with pytest.raises(ValueError, match="q must"):
        td.quantile(torch.rand(2, 2))
    with pytest.raises(ValueError, match="interpolation"):
        td.quantile(0.5, 0, interpolation="cubic")
    with pytest.raises(IndexError, match="dim=2"):
        td.quantile(0.5, 2)
    with pytest.raises(ValueError, match="twice"):
        td.quantile(0.5, (0, -2))
    with pytest.raises(TypeError, match="keepdim"):
        td.quantile(0.5, "feature", keepdim=True)
    with pytest.raises(ValueError, match="dim must be"):
        td.quantile(0.5, "features")


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin(name):
    td = make()
    fn = getattr(torch, name)
    for dim, d in ((0, 0), (-1, 1)):
        values, indices = getattr(td, name)(dim)
        assert_leafwise(values, td, lambda v: fn(v, d).values, BATCH)
        assert_leafwise(indices, td, lambda v: fn(v, d).indices, BATCH)
        assert values.get("sub").batch_size == torch.Size([3, 4, 5])
    result = getattr(td, name)(1)
    assert result.values is result[0] and result.indices is result[1]
    only_values = getattr(td, name)(1, return_indices=False)
    assert_leafwise(only_values, td, lambda v: fn(v, 1).values, BATCH)
    with pytest.raises(IndexError, match="dim=2"):
        getattr(td, name)(2)
    same = TensorDict(x=torch.randn(3, 4), y=torch.randn(3, 4), batch_size=BATCH)  # reduce: leaves joined along dim
    red = getattr(same, name)(0, reduce=True)
    want = fn(torch.cat([same["x"], same["y"]], 0), 0)
    assert torch.equal(red.values, want.values) and torch.equal(red.indices, want.indices)


def test_feature_dim_for_the_other_reductions():
    td = make()
    out = td.sum(dim="feature")  # over the dims past each leaf's own batch dims
    assert out.batch_size == BATCH and out.get("sub").batch_size == torch.Size([3, 4, 5])
    assert torch.equal(out["a"], td["a"].sum(-1))
    assert torch.equal(out["i"], td["i"]) and torch.equal(
        out["b"], td["b"].long()
    )  # no feature dims: summed over one element
    assert torch.equal(out["sub", "c"], td["sub", "c"])
    assert out.get_non_tensor("s") == "payload"
    torch.testing.assert_close(
        td.exclude("i", "b").mean(dim="feature", reduce=True), torch.cat([td["a"], td["sub", "c"]], -1).mean(-1)
    )
    with pytest.raises(ValueError, match="dim must be"):
        td.mean(dim="batch")
    with pytest.raises(TypeError, match="keepdim"):
        td.sum(dim="feature", keepdim=True)


def test_reductions_on_a_lazy_stack():
    tds = [TensorDict(x=torch.rand(3, 2), n=torch.arange(3), batch_size=[3]) for _ in range(2)]
    s = lazy_stack(tds, 0)
    dense = TensorDict(x=torch.stack([t["x"] for t in tds]), n=torch.stack([t["n"] for t in tds]), batch_size=[2, 3])
    assert (s.logsumexp(1) == dense.logsumexp(1)).all()
    assert (s.quantile(0.5, 1) == dense.quantile(0.5, 1)).all()
    assert (s.quantile(0.5, dim="feature") == dense.quantile(0.5, dim="feature")).all()
    assert (s.softmax(0) == dense.softmax(0)).all()
    assert (s.cummax(1).indices == dense.cummax(1).indices).all()
    assert s.float64().dtype == torch.float64 and s.dtype is None


@pytest.mark.parametrize("stack_dim", [0, 1, 2])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_scans_on_a_lazy_stack_use_the_right_dim(stack_dim, dim):
    g = torch.Generator().manual_seed(stack_dim * 3 + dim)
    tds = [
        TensorDict(x=torch.rand(3, 4, 2, generator=g), n=torch.randint(0, 9, (3, 4), generator=g), batch_size=[3, 4])
        for _ in range(2)
    ]
    s = lazy_stack(tds, stack_dim)
    dense = TensorDict(
        x=torch.stack([t["x"] for t in tds], stack_dim),
        n=torch.stack([t["n"] for t in tds], stack_dim),
        batch_size=s.batch_size,
    )
    holder = TensorDict(lazy=s, batch_size=s.batch_size[:1])  # a lazy stack nested in a TensorDict
    for name in ("cumsum", "cumprod", "softmax", "cummax", "cummin"):
        got, want = getattr(s, name)(dim), getattr(dense, name)(dim)
        if name in ("cummax", "cummin"):
            assert (got.indices == want.indices).all(), name
            got, want = got.values, want.values
        assert got.batch_size == s.batch_size
        torch.testing.assert_close(got["x"], want["x"])
        torch.testing.assert_close(got["n"], want["n"])
    # the nested lazy stack is scanned along the holder's dim 0, the same as the stack's own dim 0
    torch.testing.assert_close(holder.cumsum(0)["lazy", "x"], dense.cumsum(0)["x"])
    torch.testing.assert_close(holder.softmax(0)["lazy", "n"], dense.softmax(0)["n"])


# ---------------------------------------------------------------- tensorclass
@tensorclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


def test_tensorclass_forwards_the_new_methods():
    p = Pair(x=torch.rand(3, 2) * 0.5, y=torch.arange(3), batch_size=[3])
    assert isinstance(p.acos(), Pair) and torch.equal(p.acos().x, torch.acos(p.x))
    assert isinstance(p.softmax(0), Pair) and isinstance(p.clamp_min(0.2), Pair) and isinstance(p.float64(), Pair)
    assert isinstance(p.addcmul(p, p), Pair) and isinstance(p.rsub(1), Pair) and isinstance(p.mod(2), Pair)
    values, indices = p.cummax(0)
    assert isinstance(values, Pair) and isinstance(indices, Pair)
    assert p.logsumexp(0).batch_size == torch.Size([])
    assert p.dtype is None and p.float().dtype == torch.float32 and p.is_floating_point() is False
    q = p.float()
    assert q.erf_() is q and q.clamp_max_(0.5) is q and q.addcdiv_(q, q + 1) is q


def test_clamp_with_batch_shaped_tensor_bounds():
    td = TensorDict({"a": torch.arange(6.0).view(2, 3), "b": torch.arange(2.0)}, [2])
    low, high = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    out = td.clamp(low, high)  # tdict raised: the bounds broadcast against the last dim
    # tensordict 0.14: one bound per batch element
    assert out["a"].tolist() == [[1.0, 1.0, 2.0], [3.0, 4.0, 4.0]] and out["b"].tolist() == [1.0, 2.0]
    assert td.clamp(min=low)["a"].tolist() == [[1.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert td.clamp(max=high)["a"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 4.0]]
    assert td.clamp(1.0, 3.0)["a"].tolist() == [[1.0, 1.0, 2.0], [3.0, 3.0, 3.0]]
    td.clamp_(low, high)
    assert td["a"].tolist() == [[1.0, 1.0, 2.0], [3.0, 4.0, 4.0]]
    stack = lazy_stack([TensorDict({"a": torch.arange(3.0)}), TensorDict({"a": torch.arange(3.0, 6.0)})])
    assert stack.clamp(low, high)["a"].tolist() == [[1.0, 1.0, 2.0], [3.0, 4.0, 4.0]]
    with pytest.raises(RuntimeError, match=r"broadcast to the batch size \[2\]"):
        td.clamp(torch.zeros(3))


@pytest.mark.parametrize("name", ["sum", "mean", "std", "nansum"])
@pytest.mark.parametrize(("dim", "torch_dim"), [(1, 1), (-1, 1), ((1, 0), (1, 0))])  # dims count batch dims only
def test_reduce_with_batch_dim_joins_the_leaves_along_it(name, dim, torch_dim):
    g = torch.Generator().manual_seed(1)
    td = TensorDict(
        a=torch.rand(3, 4, 5, generator=g),
        sub=TensorDict(c=torch.rand(3, 4, 5, generator=g), batch_size=[3, 4, 5]),
        batch_size=[3, 4],
    )
    joined = torch.cat([td["a"], td["sub", "c"]], torch_dim[0] if isinstance(torch_dim, tuple) else torch_dim)
    torch.testing.assert_close(getattr(td, name)(dim, reduce=True), getattr(torch, name)(joined, dim=torch_dim))
    out = td.sum(1, keepdim=True, reduce=True)
    assert out.shape == (3, 1, 5)
    along_1 = torch.cat([td["a"], td["sub", "c"]], 1)
    torch.testing.assert_close(td.quantile(0.5, 1, reduce=True), torch.quantile(along_1, 0.5, dim=1))


def test_reduce_with_batch_dim_needs_matching_leaf_shapes():
    td = TensorDict(a=torch.zeros(3, 4, 2), b=torch.zeros(3, 4), batch_size=[3, 4])
    with pytest.raises(ValueError, match=r"concatenates the leaves along dim 1.*\[3, 4, 2\] and \[3, 4\]"):
        td.mean(1, reduce=True)


def test_reflected_logical_ops_with_a_scalar_or_tensor_on_the_left():
    td = TensorDict(a=torch.tensor([True, False]), sub=TensorDict(b=torch.tensor([False, False])))
    for left in (False, True, torch.tensor(True)):
        for op in (lambda x, y: x | y, lambda x, y: x & y, lambda x, y: x ^ y):
            out = op(left, td)
            assert isinstance(out, TensorDict)
            for key, value in td.items(True, True):
                assert torch.equal(out[key], op(left, value))


def test_is_tensor_collection_takes_classes_too():
    from tdict import TensorClass, is_tensor_collection

    class Sub(TensorDict):
        pass

    class Point(TensorClass):
        x: torch.Tensor

    assert is_tensor_collection(TensorDict) and is_tensor_collection(Sub) and is_tensor_collection(Point)
    assert is_tensor_collection(TensorDict()) and not is_tensor_collection(torch.Tensor) and not is_tensor_collection(3)
