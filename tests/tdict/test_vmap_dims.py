"""torch.vmap maps a collection's batch dims (in_dims/out_dims name batch dims), lazy stacks included.

Every result is compared with a reference loop over the mapped dim (unbind, call, stack).
"""

from __future__ import annotations

import pytest
import torch

from tdict import LazyStackedTensorDict, TensorDict, lazy_stack, tensorclass


def _td(*batch: int) -> TensorDict:
    return TensorDict(
        {"a": torch.randn(*batch, 4), "n": {"b": torch.randn(*batch)}},
        batch_size=list(batch),
        names=[f"d{i}" for i in range(len(batch))],
    )


def _loop(fn, inputs, in_dim, out_dim):
    """Reference: unbind every input along ``in_dim``, call, stack the results along ``out_dim``."""
    parts = zip(*(x.unbind(in_dim) for x in inputs))
    return torch.stack([fn(*p) for p in parts], out_dim)


def _assert_same(actual, expected) -> None:
    assert actual.batch_size == expected.batch_size
    for key, value in expected.items(True, True):
        got = actual.get(key)
        assert got.shape == value.shape, key
        torch.testing.assert_close(got, value)


def _step(t):
    return t.set("c", t["a"] * 2 + t["n", "b"].unsqueeze(-1)).set(("n", "s"), t["a"].sum(-1))


@pytest.mark.parametrize("in_dim,out_dim", [(0, 0), (1, 0), (0, 1), (1, 1), (-1, -1), (-2, 1)])
def test_tensordict_batch_dims_match_loop(in_dim, out_dim):
    td = _td(2, 3)
    seen = []

    def fn(t):
        seen.append(t.batch_size)
        return _step(t)

    out = torch.vmap(fn, in_dim, out_dim)(td)
    expected = _loop(_step, [td.select("a", "n")], in_dim, out_dim)
    _assert_same(out, expected)
    assert seen == [torch.Size([3 if in_dim % 2 == 0 else 2])]
    # the mapped dim loses its name, the other keeps it
    kept = "d1" if in_dim % 2 == 0 else "d0"
    assert out.names == ([None, kept] if out_dim % 2 == 0 else [kept, None])


def test_negative_in_dim_is_a_batch_dim_not_a_leaf_dim():
    td = _td(2, 3)  # leaves are [2, 3, 4] and [2, 3]: -1 is batch dim 1 for both
    out = torch.vmap(lambda t: t["a"].sum(-1) + t["n", "b"], -1)(td)
    torch.testing.assert_close(out, (td["a"].sum(-1) + td["n", "b"]).T)


def test_out_dim_past_the_batch_dims_keeps_the_batch_size():
    td = TensorDict(a=torch.randn(5, 2, 3), batch_size=[5])
    out = torch.vmap(lambda t: t.set("b", t["a"] + 1), 0, 2)(td)  # inside: batch [], leaves [2, 3]
    assert out.batch_size == torch.Size([])
    torch.testing.assert_close(out["b"], td["a"].permute(1, 2, 0) + 1)


def test_tensorclass_maps_its_batch_dim():
    @tensorclass
    class Pair:
        a: torch.Tensor

    p = Pair(a=torch.randn(2, 3, 4), batch_size=[2, 3])
    out = torch.vmap(lambda q: Pair(a=q.a * 2, batch_size=q.batch_size), 1, 0)(p)
    assert type(out) is Pair and out.batch_size == torch.Size([3, 2])
    torch.testing.assert_close(out.a, p.a.transpose(0, 1) * 2)


def test_unmapped_collection_is_not_written_by_the_function():
    td = TensorDict(k=torch.ones(3), batch_size=[3])
    out = torch.vmap(lambda w, t: t.set("w", w + t["k"])["w"], (0, None))(torch.arange(4.0), td)
    torch.testing.assert_close(out, torch.arange(4.0)[:, None] + td["k"])
    assert list(td.keys()) == ["k"]


def test_bad_dims_raise_clear_errors():
    td = _td(2, 3)
    with pytest.raises(ValueError, match=r"batch size \[2, 3\].*-2 <= in_dim < 2"):
        torch.vmap(lambda t: t, 2)(td)
    with pytest.raises(ValueError, match="same size in the mapped dimension"):
        torch.vmap(lambda t, u: t, (0, 0))(td, torch.zeros(3))
    with pytest.raises(ValueError, match="BatchedTensor when out_dim is None"):
        torch.vmap(lambda t: t, 0, None)(td)
    with pytest.raises(ValueError, match="too few to put the mapped dim"):
        torch.vmap(lambda t: t, 0, 2)(td)  # ("n", "b") is [3] inside: no dim 2
    with pytest.raises(ValueError, match="not compatible with the structure"):
        torch.vmap(lambda t: t, ({"a": 0},))(td)


# ---------------------------------------------------------------------------- lazy stacks
def _lazy(stack_dim: int) -> LazyStackedTensorDict:
    members = [
        TensorDict({"a": torch.randn(3, 4), "n": {"b": torch.randn(3)}, f"only{i}": torch.zeros(3, i + 1)}, [3])
        for i in range(2)
    ]
    return lazy_stack(members, stack_dim)


def _add(x, y):
    return x.set("c", x["a"] * 2 + y["n", "b"].unsqueeze(-1)).set(("n", "d"), x["n", "b"] + y["a"].sum(-1))


@pytest.mark.parametrize("stack_dim", [0, 1])
@pytest.mark.parametrize("in_dim", [0, 1, -1])
@pytest.mark.parametrize("out_dim", [0, 1, -2])
def test_lazy_stack_dims_match_loop(stack_dim, in_dim, out_dim):
    x, y = _lazy(stack_dim), _lazy(stack_dim)
    out = torch.vmap(_add, (in_dim, in_dim), out_dim)(x, y)
    assert isinstance(out, LazyStackedTensorDict)
    # the stack dim moves with the mapped dim (the output is a lazy stack along out_dim when it was mapped)
    assert out.batch_size[out_dim] == x.batch_size[in_dim]
    if in_dim % 2 == stack_dim:
        assert out.stack_dim == out_dim % 2
    expected = _loop(lambda a, b: _add(a.select("a", "n"), b.select("a", "n")), [x, y], in_dim, out_dim)
    _assert_same(out.select("c", ("n", "d")), expected.select("c", ("n", "d")))
    # every member keeps its own (exclusive) keys; the caller's stack is untouched
    assert all(f"only{i}" in m.keys() for i, m in enumerate(out.unbind(out.stack_dim)))
    assert "c" not in x.tensordicts[0].keys()


def test_lazy_stack_mapped_along_its_stack_dim_reads_and_writes():
    x = _lazy(0)
    scale = torch.tensor([2.0, 3.0])
    seen = []

    def fn(t, s):
        seen.append((t.batch_size, t["a"].shape, sorted(t.keys())))
        u = (t.select("a") * s).apply(lambda v: v + s)  # mapped operands, closures over mapped tensors
        t.update({"u": u["a"]})
        return t

    out = torch.vmap(fn, (0, 0))(x, scale)
    assert seen == [(torch.Size([3]), torch.Size([3, 4]), ["a", "n"])]
    assert type(out) is LazyStackedTensorDict and out.stack_dim == 0
    torch.testing.assert_close(out["u"], x["a"] * scale[:, None, None] + scale[:, None, None])
    torch.testing.assert_close(out.tensordicts[1]["u"], x.tensordicts[1]["a"] * 3 + 3)


def test_locked_lazy_stack_refuses_writes():
    x = _lazy(1).lock_()
    with pytest.raises(RuntimeError, match="Cannot modify"):
        torch.vmap(lambda t: t.set("q", t["a"]), 1)(x)
    assert "q" not in x.tensordicts[0].keys()


def test_lazy_stack_inside_a_tensordict():
    inner = lazy_stack([TensorDict(a=torch.randn(3), batch_size=[3]) for _ in range(2)], 0)
    td = TensorDict({"l": inner}, [2])
    out = torch.vmap(lambda t: t.set("s", t["l", "a"].sum()), 0)(td)
    assert isinstance(out["l"], LazyStackedTensorDict) and out["l"].batch_size == torch.Size([2, 3])
    torch.testing.assert_close(out["s"], inner["a"].sum(-1))


def test_lazy_stack_chunked_and_nested_vmap():
    x = _lazy(0).select("a", "n")
    out = torch.vmap(lambda t: t.set("z", t["a"].sum(-1)), 0, chunk_size=1)(x)
    assert isinstance(out, LazyStackedTensorDict) and len(out.tensordicts) == 2
    torch.testing.assert_close(out["z"], x["a"].sum(-1))
    nested = torch.vmap(torch.vmap(lambda t: t.set("z", t["a"].sum()), 0), 0)(x)
    assert nested.batch_size == torch.Size([2, 3])
    torch.testing.assert_close(nested["z"], x["a"].sum(-1))


def test_lazy_stack_out_dims_none_raises():
    with pytest.raises(ValueError, match="needs an int out_dims"):
        torch.vmap(lambda t: t, 0, None)(_lazy(0))
