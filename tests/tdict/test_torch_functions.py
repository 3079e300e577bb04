"""torch functions dispatched on tensor collections (``__torch_function__``), checked leaf by leaf.

tensordict 0.14.3 dispatches ``torch.sum/mean/std/var`` (to the methods: dims are batch dims),
``torch.masked_select``, ``torch.maximum``, ``F.l1_loss/mse_loss/smooth_l1_loss`` and
``torch.autograd.grad``. ``torch.minimum`` (not dispatched by tensordict) is handled too, as the
mirror of ``maximum``.
"""

# torch's stubs type these functions for tensors only; collections reach them through __torch_function__.
# pyright: reportArgumentType=false, reportCallIssue=false, reportAttributeAccessIssue=false
# pyright: reportOptionalMemberAccess=false, reportOptionalSubscript=false, reportOperatorIssue=false

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tdict import NonTensorData, TensorDict, lazy_stack, tensorclass

BATCH = torch.Size([3, 4])


def make(requires_grad: bool = False) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    td = TensorDict(
        a=torch.randn(3, 4, 2, generator=g),
        sub=TensorDict(c=torch.randn(3, 4, 5, generator=g), batch_size=[3, 4, 5]),
        s=NonTensorData("payload", batch_size=BATCH),
        batch_size=BATCH,
    )
    if requires_grad:
        for leaf in td._tensor_leaves()[1]:
            leaf.requires_grad_()
    return td


def leaves(td) -> dict:
    return {k: v for k, v in td.items(True, True) if isinstance(v, torch.Tensor)}


def assert_leafwise(result, src, fn, batch_size, cls=TensorDict):
    """``result`` holds ``fn(key, leaf)`` for every tensor leaf of ``src`` and has ``batch_size``."""
    assert isinstance(result, cls), type(result)
    assert result.batch_size == torch.Size(batch_size)
    expected = leaves(src)
    assert set(leaves(result)) == set(expected)
    for key, leaf in expected.items():
        want, got = fn(key, leaf), result.get(key)
        assert got.dtype == want.dtype and got.shape == want.shape, key
        torch.testing.assert_close(got, want)


# --------------------------------------------------------------------------- reductions


@pytest.mark.parametrize(
    "kwargs, leaf_dims, batch_size",
    [
        ({}, None, ()),
        ({"dim": None}, None, ()),
        ({"dim": 0}, 0, (4,)),
        ({"dim": 1}, 1, (3,)),
        ({"dim": -1, "keepdim": True}, 1, (3, 1)),
        ({"dim": (0, 1)}, (0, 1), ()),
        ({"dim": (0, -1), "keepdim": True}, (0, 1), (1, 1)),
    ],
    ids=str,
)
@pytest.mark.parametrize("name", ["sum", "mean", "std", "var"])
def test_reductions_reduce_batch_dims_leaf_by_leaf(name, kwargs, leaf_dims, batch_size):
    td = make()
    out = getattr(torch, name)(td, **kwargs)
    keepdim = kwargs.get("keepdim", False)

    def ref(_, leaf):
        fn = getattr(torch, name)
        return fn(leaf) if leaf_dims is None else fn(leaf, dim=leaf_dims, keepdim=keepdim)

    assert_leafwise(out, td, ref, batch_size)
    assert out.get_non_tensor("s") == "payload"


def test_reduction_extra_arguments():
    td = make()
    # positional (dim, keepdim), as the methods take them (and tensordict passes them on)
    assert_leafwise(torch.mean(td, 1, True), td, lambda _, v: v.mean(1, keepdim=True), (3, 1))
    assert_leafwise(torch.std(td, 0, False), td, lambda _, v: v.std(0), (4,))
    for name in ("std", "var"):
        fn = getattr(torch, name)
        for correction in (0, 2):
            out = fn(td, dim=0, correction=correction)
            assert_leafwise(out, td, lambda _, v: getattr(torch, name)(v, dim=0, correction=correction), (4,))
        # torch's unbiased=False is correction=0
        assert_leafwise(fn(td, 1, unbiased=False), td, lambda _, v: getattr(torch, name)(v, 1, correction=0), (3,))
    for name in ("sum", "mean"):
        out = getattr(torch, name)(td, dim=0, dtype=torch.float64)
        assert_leafwise(out, td, lambda _, v: getattr(torch, name)(v, dim=0, dtype=torch.float64), (4,))
    ints = TensorDict(i=torch.arange(12).view(3, 4), batch_size=[3])
    assert torch.equal(torch.sum(ints, 0)["i"], torch.arange(12).view(3, 4).sum(0))
    assert torch.equal(torch.mean(ints, 0)["i"], torch.arange(12.0).view(3, 4).mean(0))  # ints average as floats


def test_reductions_match_the_methods_on_other_collections():
    lazy = lazy_stack([make()[i] for i in range(3)])
    out = torch.mean(lazy, dim=0)
    assert_leafwise(out, lazy.to_tensordict(), lambda _, v: v.mean(0), (4,))

    @tensorclass
    class Pair:
        x: torch.Tensor
        y: torch.Tensor

    pair = Pair(x=torch.arange(6.0).view(3, 2), y=torch.ones(3), batch_size=[3])
    got = torch.var(pair, dim=0, correction=0)
    assert type(got) is Pair and got.batch_size == ()
    assert torch.equal(got.x, torch.arange(6.0).view(3, 2).var(0, correction=0)) and got.y.item() == 0.0


def test_reduction_errors():
    td = make()
    with pytest.raises(IndexError, match="dim=2"):
        torch.mean(td, dim=2)  # a feature dim of the leaves, not a batch dim
    with pytest.raises(TypeError, match="std"):  # torch's own parser refuses the mix
        torch.std(td, unbiased=True, correction=1)


# --------------------------------------------------------------------------- masked_select


@pytest.mark.parametrize("mask_shape", [(3,), (3, 4)], ids=str)
def test_masked_select(mask_shape):
    td = make()
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(1)) > 0.4
    n = int(mask.sum())
    out = torch.masked_select(td, mask)
    batch = (n,) + tuple(BATCH[len(mask_shape) :])
    assert_leafwise(out, td, lambda _, v: v[mask], batch)
    assert (out == td[mask]).all()
    assert torch.masked_select(td, mask=mask).batch_size == batch


def test_masked_select_errors():
    td = make()
    with pytest.raises(ValueError, match=r"mask of shape \[5\]"):
        torch.masked_select(td, torch.ones(5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        torch.masked_select(td, torch.ones(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="out= is not supported"):
        torch.masked_select(td, torch.ones(3, dtype=torch.bool), out=td.clone())


# --------------------------------------------------------------------------- maximum / minimum


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum(name):
    td = make()
    fn = getattr(torch, name)
    other = td.apply(lambda v: torch.randn(v.shape, generator=torch.Generator().manual_seed(v.numel())))
    assert_leafwise(fn(td, other), td, lambda k, v: fn(v, other.get(k)), BATCH)
    zero = torch.zeros(())
    assert_leafwise(fn(td, zero), td, lambda _, v: fn(v, zero), BATCH)
    assert_leafwise(fn(zero, td), td, lambda _, v: fn(zero, v), BATCH)  # symmetric
    assert_leafwise(fn(td, other=other), td, lambda k, v: fn(v, other.get(k)), BATCH)
    assert fn(td, other).get_non_tensor("s") == "payload"
    with pytest.raises(TypeError, match="out= is not supported"):
        fn(td, other, out=td.clone())


# --------------------------------------------------------------------------- losses

LOSSES = [F.l1_loss, F.mse_loss, F.smooth_l1_loss]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("loss", LOSSES, ids=lambda f: f.__name__)
def test_losses_leaf_by_leaf(loss, reduction):
    td = make()
    target = td.apply(lambda v: -2 * v + 0.3)
    out = loss(td, target, reduction=reduction)
    batch = BATCH if reduction == "none" else ()
    assert_leafwise(out, td, lambda k, v: loss(v, target.get(k), reduction=reduction), batch)


def test_loss_keyword_arguments():
    td = make()
    target = td.apply(lambda v: v * 3)
    out = F.smooth_l1_loss(td, target, beta=0.25)
    assert_leafwise(out, td, lambda k, v: F.smooth_l1_loss(v, target.get(k), beta=0.25), ())
    # the deprecated flags map to a reduction, as in torch
    out = F.mse_loss(td, target, size_average=False)
    assert_leafwise(out, td, lambda k, v: F.mse_loss(v, target.get(k), reduction="sum"), ())
    out = F.l1_loss(td, target, reduce=False)
    assert_leafwise(out, td, lambda k, v: F.l1_loss(v, target.get(k), reduction="none"), BATCH)


@pytest.mark.skipif("weight" not in F.mse_loss.__code__.co_varnames, reason="this torch's mse_loss has no weight")
def test_mse_loss_weight():
    td = make().exclude("s")
    target = td.apply(lambda v: v + 1)
    weight = td.apply(lambda v: torch.full_like(v, 2.0))
    out = F.mse_loss(td, target, weight=weight, reduction="sum")
    assert_leafwise(out, td, lambda k, v: 2.0 * F.mse_loss(v, target.get(k), reduction="sum"), ())


def test_losses_on_lazy_stacks_reduce_the_whole_stack():
    lazy = lazy_stack([make()[i] for i in range(3)])
    target = lazy.apply(lambda v: v + 0.5)
    for reduction, batch in (("mean", ()), ("none", BATCH)):
        out = F.mse_loss(lazy, target, reduction=reduction)
        dense_target = target.to_tensordict()
        assert_leafwise(
            out.to_tensordict() if reduction == "none" else out,
            lazy.to_tensordict(),
            lambda k, v: F.mse_loss(v, dense_target.get(k), reduction=reduction),
            batch,
        )


def test_loss_errors():
    td = make()
    with pytest.raises(ValueError, match=r"l1_loss: reduction must be one of \['none', 'mean', 'sum'\], got 'foo'"):
        F.l1_loss(td, td, reduction="foo")
    with pytest.raises(TypeError, match="mse_loss: input and target must both be tensor collections.*got target"):
        F.mse_loss(td, torch.zeros(()))
    with pytest.raises(TypeError, match="got input of type Tensor"):
        F.mse_loss(torch.zeros(()), td)
    with pytest.raises(KeyError, match="missing from one of the other collections"):
        F.l1_loss(td, td.exclude("a"))


# --------------------------------------------------------------------------- autograd.grad


def _reference_grads(fn, td):
    """Gradient of sum(fn(leaf)) for each leaf, computed on fresh copies of the leaves."""
    out = {}
    for key, leaf in leaves(td).items():
        x = leaf.detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(fn(x).sum(), x)
        out[key] = g
    return out


def test_grad_matches_per_leaf_autograd():
    x = make(requires_grad=True)
    y = x.apply(lambda v: v.sin() * v)
    ref = _reference_grads(lambda v: v.sin() * v, x)
    for call in (
        lambda: torch.autograd.grad(y, x, torch.ones_like(y), retain_graph=True),
        lambda: torch.autograd.grad((y,), (x,), (torch.ones_like(y),), retain_graph=True),
        lambda: torch.autograd.grad(outputs=y, inputs=x, grad_outputs=torch.ones_like(y), retain_graph=True),
    ):
        grads = call()
        assert_leafwise(grads, x, lambda k, _: ref[k], BATCH)
        assert not any(g.requires_grad for g in leaves(grads).values())
        assert grads.get_non_tensor("s") == "payload"


def test_grad_with_scalar_outputs_weights_and_graph():
    x = make(requires_grad=True)
    y = x.apply(lambda v: (v**3).sum(), batch_size=[])
    grads = torch.autograd.grad(y, x, create_graph=True)
    assert_leafwise(grads, x, lambda _, v: 3 * v.detach() ** 2, BATCH)
    assert all(g.requires_grad for g in leaves(grads).values())  # create_graph keeps the graph
    # grad_outputs weights each output leaf, matched by key whatever its order
    y = x.apply(lambda v: v * 2)
    w = TensorDict(sub=TensorDict(c=torch.full((3, 4, 5), 3.0), batch_size=[3, 4, 5]), a=torch.full((3, 4, 2), 0.5))
    w.batch_size = BATCH
    grads = torch.autograd.grad(y, x, w)
    assert torch.equal(grads["a"], torch.ones(3, 4, 2)) and torch.equal(grads["sub", "c"], torch.full((3, 4, 5), 6.0))


def test_grad_unused_leaves():
    x = TensorDict(a=torch.ones(3, requires_grad=True), z=torch.ones(3, requires_grad=True), batch_size=[3])
    y = TensorDict(a=(x["a"] * 4).sum())
    grads = torch.autograd.grad(y, x, allow_unused=True, retain_graph=True)
    assert set(grads.keys()) == {"a"} and torch.equal(grads["a"], torch.full((3,), 4.0))  # as in tensordict
    grads = torch.autograd.grad(y, x, materialize_grads=True, retain_graph=True)
    assert torch.equal(grads["z"], torch.zeros(3))
    with pytest.raises(RuntimeError, match="allow_unused"):
        torch.autograd.grad(y, x)


def test_grad_on_lazy_stacks_tensorclasses_and_locked_collections():
    members = [TensorDict(a=torch.randn(2, requires_grad=True)) for _ in range(2)]
    lazy = lazy_stack(members)
    out = lazy * lazy
    grads = torch.autograd.grad(out, lazy, torch.ones_like(out))
    assert grads.batch_size == (2,)
    assert torch.allclose(grads["a"], 2 * torch.stack([m["a"] for m in members]).detach())

    @tensorclass
    class Point:
        x: torch.Tensor
        label: str

    p = Point(x=torch.tensor([1.0, -2.0], requires_grad=True), label="p", batch_size=[2])
    q = p * 5
    grads = torch.autograd.grad(q, p, torch.ones_like(q))
    assert type(grads) is Point and torch.equal(grads.x, torch.full((2,), 5.0))

    locked = TensorDict(a=torch.ones(2, requires_grad=True), batch_size=[2]).lock_()
    grads = torch.autograd.grad(locked * 2, locked, torch.ones_like(locked))
    assert grads.is_locked and torch.equal(grads["a"], torch.full((2,), 2.0))


def test_grad_errors():
    x = make(requires_grad=True)
    y = x.apply(lambda v: v.sum(), batch_size=[])
    with pytest.raises(ValueError, match="single outputs collection, got a sequence of 2"):
        torch.autograd.grad((y, y), x)
    with pytest.raises(ValueError, match="tensor collection as outputs, got Tensor"):
        torch.autograd.grad(y["a"], x)
    with pytest.raises(ValueError, match="tensor collection as inputs, got Tensor"):
        torch.autograd.grad(y, x["a"])
    with pytest.raises(KeyError, match="grad_outputs has no tensor at key 'a'"):
        torch.autograd.grad(y, x, y.exclude("a"))
