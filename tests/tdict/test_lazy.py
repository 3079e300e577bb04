"""LazyStackedTensorDict / lazy_stack: heterogeneous stacks, indexing, writes, stack/cat, shape ops."""

from __future__ import annotations

import itertools

import pytest
import torch

from tdict import LazyStackedTensorDict, TensorDict, lazy_stack

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st


def member(i: int, n: int = 3) -> TensorDict:
    """Members share ``x`` (same shape) and ``("sub", "z")``; ``y`` is ragged; member 1 has an extra key."""
    td = TensorDict(
        x=torch.arange(n * 2, dtype=torch.float32).view(n, 2) + 10 * i,
        y=torch.arange(n * (2 + i), dtype=torch.float32).view(n, 2 + i) - i,
        sub=TensorDict(z=torch.full((n, 4), float(i)), batch_size=[n]),
        batch_size=[n],
    )
    if i == 1:
        td["only1"] = torch.zeros(n)
    return td


def members(k: int = 3, n: int = 3) -> list:
    return [member(i, n) for i in range(k)]


def dense(tds, key, dim):
    return torch.stack([td.get(key) for td in tds], dim)


# --------------------------------------------------------------------------- construction, keys
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_batch_size_and_stack_dim(dim):
    tds = members()
    s = lazy_stack(tds, dim)
    assert isinstance(s, LazyStackedTensorDict)
    assert s.stack_dim == (dim % 2)
    assert s.batch_size == (3, 3)
    assert s.tensordicts == tds
    assert s._is_lazy and not s._is_non_tensor


def test_batch_size_mismatch_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"collection 1 has batch size \[4\].*\[3\]"):
        lazy_stack([member(0, 3), member(0, 4)])
    with pytest.raises(ValueError, match="non-empty"):
        lazy_stack([])
    with pytest.raises(TypeError, match="member 1"):
        LazyStackedTensorDict(member(0), torch.zeros(3))


def test_keys_are_the_common_keys():
    s = lazy_stack(members())
    assert list(s.keys()) == ["x", "y", "sub"]
    assert list(s.keys(True, True)) == ["x", "y", ("sub", "z")]
    assert "only1" not in s and "x" in s and ("sub", "z") in s and ("sub", "q") not in s
    assert ("sub", "z") in s.keys(True) and ("sub", "z") not in s.keys()
    assert "sub" not in s.keys(leaves_only=True)
    with pytest.raises(KeyError, match=r"'only1'.*members \[1\] only"):
        s.get("only1")
    assert s.get("only1", "dflt") == "dflt"
    assert s.get(("sub", "missing"), None) is None


# --------------------------------------------------------------------------- get
@pytest.mark.parametrize("dim", [0, 1])
def test_get_homogeneous_equals_torch_stack(dim):
    tds = members()
    s = lazy_stack(tds, dim)
    torch.testing.assert_close(s.get("x"), dense(tds, "x", dim))
    torch.testing.assert_close(s["x"], dense(tds, "x", dim))
    torch.testing.assert_close(s["sub", "z"], dense(tds, ("sub", "z"), dim))
    sub = s.get("sub")
    assert isinstance(sub, LazyStackedTensorDict) and sub.batch_size == s.batch_size
    assert all(a is td["sub"] for a, td in zip(sub.tensordicts, tds))
    assert [k for k, _ in s.exclude("y").items()] == ["x", "sub"]


def test_get_heterogeneous_raises_clear_error():
    s = lazy_stack(members())
    with pytest.raises(
        RuntimeError, match=r"Failed to stack tensors within a tensordict: key 'y'.*different shapes.*as_padded_tensor"
    ):
        s.get("y")
    with pytest.raises(RuntimeError, match="key 'y'"):
        s["y"]
    lst = s.get("y", as_list=True)
    assert [t.shape[-1] for t in lst] == [2, 3, 4]


@pytest.mark.parametrize("side", ["right", "left"])
def test_as_padded_tensor_matches_manual_padding(side):
    tds = members()
    s = lazy_stack(tds, 1)
    out = s.as_padded_tensor("y", value=-1.0, padding_side=side)
    expected = torch.full((3, 3, 4), -1.0)
    for j, td in enumerate(tds):
        y = td["y"]
        if side == "right":
            expected[:, j, : y.shape[1]] = y
        else:
            expected[:, j, 4 - y.shape[1] :] = y
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(s.get("y", as_padded_tensor=True, padding_value=-1.0, padding_side=side), expected)
    # dim: where the members go in the result
    torch.testing.assert_close(s.as_padded_tensor("y", dim=0, value=-1.0, padding_side=side), expected.transpose(0, 1))
    # homogeneous keys are a plain stack
    torch.testing.assert_close(s.as_padded_tensor("x"), dense(tds, "x", 1))


def test_as_padded_tensor_pads_every_dim_and_keeps_dtype():
    a = TensorDict(m=torch.ones(2, 3, dtype=torch.int64))
    b = TensorDict(m=torch.full((4, 1), 7, dtype=torch.int64))
    out = lazy_stack([a, b]).as_padded_tensor("m", value=5)
    assert out.dtype == torch.int64 and out.shape == (2, 4, 3)
    expected = torch.full((2, 4, 3), 5)
    expected[0, :2, :3] = 1
    expected[1, :4, :1] = 7
    assert torch.equal(out, expected)


def test_densify_and_to_tensordict():
    tds = members()
    s = lazy_stack(tds)
    with pytest.raises(RuntimeError, match=r"key 'y'.*different shapes"):
        s.to_tensordict()
    with pytest.raises(RuntimeError, match="key 'y'"):
        s.densify()
    d = s.exclude("y").to_tensordict()
    assert type(d) is TensorDict and d.batch_size == (3, 3)
    assert set(d.keys(True, True)) == {"x", ("sub", "z")}
    torch.testing.assert_close(d["x"], dense(tds, "x", 0))
    torch.testing.assert_close(s.exclude("y").densify()["sub", "z"], dense(tds, ("sub", "z"), 0))
    j = s.densify(layout=torch.jagged)
    assert j["y"].is_nested and j["y"].layout == torch.jagged
    for part, td in zip(j["y"].unbind(), tds):
        torch.testing.assert_close(part, td["y"])
    assert not j["x"].is_nested
    nt = s.get("y", as_nested_tensor=True)
    assert nt.is_nested and len(nt.unbind()) == 3


# --------------------------------------------------------------------------- indexing
INDICES = [
    0,
    -1,
    2,
    slice(None),
    slice(1, None),
    slice(0, 3, 2),
    torch.tensor([2, 0]),
    [1, 1],
    torch.tensor([True, False, True]),
    (slice(None), 1),
    (slice(None), slice(0, 2)),
    (slice(None), torch.tensor([2, 0])),
    (1, 2),
    (..., 0),
    (None, 1),
    (torch.tensor([0, 1]), torch.tensor([1, 2])),
    (slice(None), None, torch.tensor([0, 2])),
]


def _reference_check(s, index, tds):
    """Compare ``s[index]`` with indexing every member: element by element, via a map of which
    member and which position each output element comes from."""
    sd = s.stack_dim
    bs = s.batch_size
    member_bs = tds[0].batch_size
    which = torch.arange(len(tds)).view([-1 if d == sd else 1 for d in range(len(bs))]).expand(bs)
    pos = torch.arange(max(member_bs.numel(), 1)).view(member_bs).unsqueeze(sd).expand(bs)
    which, pos = which[index], pos[index]
    out = s[index]
    assert tuple(out.batch_size) == tuple(which.shape)
    keys = [k for k in s.keys(True, True)]
    for e in itertools.product(*(range(n) for n in which.shape)):
        elem = out
        for i in e:
            elem = elem[i]
        src = tds[int(which[e])]
        flat = [int(p) for p in torch.unravel_index(pos[e], member_bs)] if member_bs else []
        for key in keys:
            want = src.get(key)[tuple(flat)] if flat else src.get(key)
            torch.testing.assert_close(elem.get(key), want)
    return out


@pytest.mark.parametrize("index", INDICES, ids=[repr(i) for i in INDICES])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_matches_member_indexing(index, dim):
    tds = members()
    s = lazy_stack(tds, dim)
    _reference_check(s, index, tds)


def test_index_types_follow_tensordict():
    tds = members()
    s = lazy_stack(tds, 1)
    assert s[:, 2] is tds[2]
    assert lazy_stack(tds)[1] is tds[1]
    assert type(s[0]) is LazyStackedTensorDict and s[0].batch_size == (3,)
    assert type(s[1:, 2]) is TensorDict
    sub = s[:, 0:2]
    assert type(sub) is LazyStackedTensorDict and sub.tensordicts == tds[:2]
    r = s[:, torch.tensor([[0, 1], [2, 0]])]
    assert r.batch_size == (3, 2, 2) and r.stack_dim == 1
    with pytest.raises(IndexError, match="out of range"):
        s[:, 3]
    with pytest.raises(IndexError, match="out of range"):
        lazy_stack(tds)[5]
    with pytest.raises(IndexError, match="(?i)too many indices"):
        s[0, 0, 0]
    # ragged leaves survive indexing on other dims
    assert [t.shape for t in s[1:].get("y", as_list=True)] == [(2, 2), (2, 3), (2, 4)]


def test_index_empty_selection():
    s = lazy_stack(members())
    e = s[2:2]
    assert e.batch_size == (0, 3)
    e2 = s[torch.tensor([], dtype=torch.long)]
    assert e2.batch_size == (0, 3)


def test_iteration_yields_members():
    tds = members()
    assert all(a is b for a, b in zip(lazy_stack(tds), tds))


# --------------------------------------------------------------------------- writes
def test_set_splits_into_members():
    tds = members()
    s = lazy_stack(tds, 1)
    v = torch.randn(3, 3, 5)
    s["new"] = v
    for j, td in enumerate(tds):
        torch.testing.assert_close(td["new"], v[:, j])
    s.set(("sub", "w"), torch.ones(3, 3))
    assert all(td["sub", "w"].shape == (3,) for td in tds)
    s.set(("deep", "a"), torch.zeros(3, 3, 2))
    assert all(td["deep", "a"].shape == (3, 2) for td in tds)
    with pytest.raises(RuntimeError, match=r"Key 'bad'.*does not start with the batch size \[3, 3\]"):
        s["bad"] = torch.zeros(3, 2)
    assert all("bad" not in td for td in tds)
    with pytest.raises(RuntimeError, match="scalar"):  # like TensorDict: no scalar broadcasting on set
        s["scalar"] = 1.5
    assert all("scalar" not in td for td in tds)
    del s["new"]
    assert all("new" not in td for td in tds)
    del s["only1"]  # held by some members only: removed where present
    assert "only1" not in tds[1]
    with pytest.raises(KeyError):
        del s["nope"]


def test_set_heterogeneous_value_via_lazy_stack():
    tds = members()
    s = lazy_stack(tds)
    ragged = lazy_stack([TensorDict(r=torch.zeros(3, i + 1), batch_size=[3]) for i in range(3)])
    s["rag"] = ragged
    assert [td["rag", "r"].shape[-1] for td in tds] == [1, 2, 3]
    assert all(td["rag"] is r for td, r in zip(tds, ragged.tensordicts))


@pytest.mark.parametrize("dim", [0, 1])
def test_setitem_index_writes_into_members(dim):
    tds = members()
    s = lazy_stack(tds, dim)
    stack_idx = (slice(None),) * dim
    s[stack_idx + (1,)] = TensorDict(x=torch.full((3, 2), -1.0), y=torch.full((3, 3), -2.0), batch_size=[3])
    assert torch.equal(tds[1]["x"], torch.full((3, 2), -1.0)) and torch.equal(tds[1]["y"], torch.full((3, 3), -2.0))
    before = [td.clone() for td in tds]
    s[stack_idx + (slice(0, 2),)] = 0.0
    assert all((td["x"] == 0).all() and (td["y"] == 0).all() for td in tds[:2])
    assert torch.equal(tds[2]["x"], before[2]["x"])
    # index on the other dim only: every member, heterogeneous leaves included
    idx = (slice(None), 1) if dim == 0 else (1,)
    s[idx] = 5.0
    for td in tds:
        assert (td["y"][1] == 5).all() and (td["x"][1] == 5).all()
    # a collection value with the indexed batch size is split along the stack dim
    val = TensorDict(x=torch.arange(3 * 2, dtype=torch.float32).view(3, 2), batch_size=[3])
    s[idx] = val
    for j, td in enumerate(tds):
        torch.testing.assert_close(td["x"][1], val["x"][j])


def test_setitem_tensor_index_and_mask():
    tds = members()
    del tds[1]["only1"]  # a (3, 1) value below broadcasts to every leaf but a batch-only one
    s = lazy_stack(tds)
    s[torch.tensor([2, 0])] = TensorDict(
        x=torch.stack([torch.full((3, 2), 2.0), torch.full((3, 2), 0.5)]), batch_size=[2, 3]
    )
    assert (tds[2]["x"] == 2).all() and (tds[0]["x"] == 0.5).all()
    mask = torch.zeros(3, 3, dtype=torch.bool)
    mask[0, 1] = mask[2, 2] = True
    s[mask] = -7.0
    assert (tds[0]["y"][1] == -7).all() and (tds[2]["y"][2] == -7).all()
    assert not (tds[0]["y"][0] == -7).any() and not (tds[1]["y"] == -7).any()
    # a broadcast tensor value (per-member selection along the stack dim)
    s["x"] = torch.zeros(3, 3, 2)
    s[:, 0] = torch.tensor([1.0, 2.0, 3.0]).view(3, 1)
    assert [float(td["x"][0, 0]) for td in tds] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("dim", [0, 1])
def test_setitem_batch_mask_with_collection_value(dim):
    tds = members()
    for td in tds:
        td["x"] = td["x"].clone()
    s = lazy_stack(tds, dim)
    mask = torch.tensor([[True, False, True], [False, False, True], [True, True, False]])
    n = int(mask.sum())
    value = TensorDict(x=-torch.arange(n * 2, dtype=torch.float32).view(n, 2) - 1, batch_size=[n])
    reference = s["x"].clone()
    reference[mask] = value["x"]
    s[mask] = value
    torch.testing.assert_close(s["x"], reference)


def test_set_at_index_checks_keys_before_writing():
    tds = members()
    s = lazy_stack(tds)
    snapshot = [td["x"].clone() for td in tds]
    bad = TensorDict(x=torch.ones(2, 3, 2), only1=torch.ones(2, 3), batch_size=[2, 3])
    with pytest.raises(KeyError, match="only1"):
        s[0:2] = bad  # member 0 lacks "only1": nothing is written
    assert all(torch.equal(td["x"], x) for td, x in zip(tds, snapshot))


def test_inplace_ops_reach_members():
    tds = members()
    s = lazy_stack(tds, 1)
    s += 1
    s.zero_()
    assert all((td["y"] == 0).all() for td in tds)
    s.apply_(lambda t: t + 2)
    assert all((td["y"] == 2).all() for td in tds) and (tds[1]["only1"] == 2).all()
    # a tensor operand lines up with the batch dims [3, 3] (stack dim 1), whatever the leaves' feature dims
    s.mul_(torch.tensor([1.0, 2.0, 3.0]).view(1, 3))
    assert [float(td["sub", "z"][0, 0]) for td in tds] == [2.0, 4.0, 6.0]
    assert [float(td["y"].flatten()[0]) for td in tds] == [2.0, 4.0, 6.0] and (tds[1]["only1"] == 4).all()
    s.set_("x", torch.zeros(3, 3, 2))
    assert all((td["x"] == 0).all() for td in tds)
    s.update_(TensorDict(x=torch.ones(3, 3, 2), batch_size=[3, 3]))
    assert all((td["x"] == 1).all() for td in tds)
    s.fill_("x", 4.0)
    assert all((td["x"] == 4).all() for td in tds)
    s.masked_fill_(torch.tensor([True, False, False]), -1.0)
    assert all((td["y"][0] == -1).all() and (td["y"][1] != -1).all() for td in tds)


def test_update_with_lazy_and_dense():
    tds = members()
    s = lazy_stack(tds)
    other = lazy_stack([TensorDict(q=torch.zeros(3, i + 1), batch_size=[3]) for i in range(3)])
    s.update(other)
    assert [td["q"].shape[-1] for td in tds] == [1, 2, 3]
    s.update({"w": torch.ones(3, 3)})
    assert all(td["w"].shape == (3,) for td in tds)
    s.update(TensorDict(sub=TensorDict(z2=torch.ones(3, 3, 1), batch_size=[3, 3]), batch_size=[3, 3]))
    assert all(td["sub", "z2"].shape == (3, 1) and "z" in td["sub"] for td in tds)


def test_rename_pop_ragged_keys():
    tds = members()
    s = lazy_stack(tds)
    s.rename_key_("y", "why")
    assert all("why" in td and "y" not in td for td in tds)
    with pytest.raises(KeyError, match="only1"):
        s.rename_key_("only1", "o")
    s["tmp"] = torch.ones(3, 3)
    torch.testing.assert_close(s.pop("tmp"), torch.ones(3, 3))
    assert all("tmp" not in td for td in tds)


def test_lock():
    tds = members()
    s = lazy_stack(tds).lock_()
    assert s.is_locked and all(td.is_locked for td in tds)
    with pytest.raises(RuntimeError, match="locked"):
        s["new"] = torch.zeros(3, 3)
    assert all("new" not in td for td in tds)
    s.set_("x", torch.zeros(3, 3, 2))
    s.unlock_()
    assert not s.is_locked and not tds[0].is_locked
    s["new"] = torch.zeros(3, 3)


def test_insert_append():
    tds = members()
    s = lazy_stack(tds[:2], 1)
    s.append(tds[2])
    assert s.batch_size == (3, 3) and s[:, 2] is tds[2]
    extra = member(0)
    s.insert(0, extra)
    assert s.batch_size == (3, 4) and s[:, 0] is extra
    with pytest.raises(RuntimeError, match="batch size"):
        s.append(member(0, 5))


# --------------------------------------------------------------------------- stack / cat
def test_torch_stack_of_lazy_stacks():
    a, b = lazy_stack(members()), lazy_stack(members())
    for dim in (0, 1, 2):
        out = torch.stack([a, b], dim)
        assert isinstance(out, LazyStackedTensorDict) and out.stack_dim == dim
        torch.testing.assert_close(out["x"], torch.stack([a["x"], b["x"]], dim))
    out = torch.stack([a, b], 0)
    assert out[1] is b and out[1, 2] is b.tensordicts[2]
    # lazy_stack of lazy stacks: nested
    nested = lazy_stack([a, b], 1)
    assert nested.batch_size == (3, 2, 3)
    torch.testing.assert_close(nested["x"], torch.stack([a["x"], b["x"]], 1))
    assert nested[0, 1, 2] is not None
    torch.testing.assert_close(nested[:, 1]["x"], b["x"])
    torch.testing.assert_close(nested.as_padded_tensor("y", value=0.0)[:, 1], b.as_padded_tensor("y"))


def test_torch_cat_of_lazy_stacks():
    ta, tb = members(), members()
    a, b = lazy_stack(ta, 1), lazy_stack(tb, 1)
    out = torch.cat([a, b], 1)  # along the stack dim: member lists joined
    assert isinstance(out, LazyStackedTensorDict) and out.batch_size == (3, 6)
    assert out.tensordicts == ta + tb
    out = torch.cat([a, b], 0)  # along another dim: member-wise cat
    assert out.batch_size == (6, 3) and out.stack_dim == 1
    torch.testing.assert_close(out["x"], torch.cat([a["x"], b["x"]], 0))
    assert [t.shape for t in out.get("y", as_list=True)] == [(6, 2), (6, 3), (6, 4)]
    dense_b = lazy_stack(tb, 1).exclude("y").to_tensordict()
    out = torch.cat([a.exclude("y"), dense_b], 1)
    torch.testing.assert_close(out["x"], torch.cat([a["x"], dense_b["x"]], 1))
    with pytest.raises(RuntimeError, match="incompatible"):
        torch.cat([a, lazy_stack(members(2), 1)], 0)


def test_torch_stack_of_plain_tensordicts_stays_dense():
    tds = [TensorDict(x=torch.zeros(3), batch_size=[3]) for _ in range(2)]
    assert type(torch.stack(tds)) is TensorDict


# --------------------------------------------------------------------------- apply / clone / to
def test_apply_clone_to():
    tds = members()
    s = lazy_stack(tds, 1)
    out = s.apply(lambda t: t * 2)
    assert isinstance(out, LazyStackedTensorDict) and out.stack_dim == 1
    for o, td in zip(out.tensordicts, tds):
        torch.testing.assert_close(o["y"], td["y"] * 2)
    torch.testing.assert_close(out.tensordicts[1]["only1"], tds[1]["only1"] * 2)
    summed = s.apply(lambda t, u: t + u, s)
    torch.testing.assert_close(summed.get("y", as_list=True)[2], tds[2]["y"] * 2)
    named = s.named_apply(lambda k, t: t if k == "x" else None)
    assert list(named.keys()) == ["x"]
    c = s.clone()
    assert all(a is not b for a, b in zip(c.tensordicts, tds))
    c.tensordicts[0]["x"] += 100
    assert not torch.equal(c["x"], s["x"])
    d = s.to(torch.float64)
    assert d.get("y", as_list=True)[0].dtype == torch.float64 and s["x"].dtype == torch.float32
    assert s.to("cpu").device == torch.device("cpu")
    assert (s + 1).get("y", as_list=True)[1].shape == (3, 3)
    eq = s == s.clone()
    assert eq.all()
    assert s.detach().batch_size == s.batch_size
    assert s.select("x").keys() and list(s.select("x").keys()) == ["x"]
    assert list(s.exclude("x", "y").keys()) == ["sub"]
    assert list(s.empty().keys()) == [] and s.empty().batch_size == s.batch_size


def test_dense_fallback_ops():
    tds = [TensorDict(x=torch.randn(3, 2), batch_size=[3]) for _ in range(2)]
    s = lazy_stack(tds)
    torch.testing.assert_close(s.sum(0)["x"], torch.stack([t["x"] for t in tds]).sum(0))
    r = s.reshape(-1)
    assert type(r) is TensorDict and r.batch_size == (6,)
    assert s.reshape(2, 3) is s
    assert type(s.contiguous()) is TensorDict


# --------------------------------------------------------------------------- shape ops
def test_shape_ops_adjust_stack_dim():
    tds = members()
    s = lazy_stack(tds, 0)  # (3 members, 3)
    ref = s.exclude("y")
    x = s["x"]
    cases = [
        (s.unsqueeze(0), 1, x.unsqueeze(0)),
        (s.unsqueeze(1), 0, x.unsqueeze(1)),
        (s.unsqueeze(-1), 0, x.unsqueeze(2)),
        (s.permute(1, 0), 1, x.permute(1, 0, 2)),
        (s.transpose(0, 1), 1, x.transpose(0, 1)),
        (s.flip(0), 0, x.flip(0)),
        (s.flip(1), 0, x.flip(1)),
        (s.expand(2, 3, 3), 1, x.expand(2, 3, 3, 2)),
    ]
    for out, sd, want in cases:
        assert isinstance(out, LazyStackedTensorDict) and out.stack_dim == sd
        torch.testing.assert_close(out["x"], want)
    u = s.unsqueeze(2).squeeze(2)
    assert u.stack_dim == 0 and u.batch_size == s.batch_size
    one = lazy_stack([member(0)], 1)
    assert one.squeeze(1) is one.tensordicts[0]
    assert ref.unbind(0)[1] is ref.tensordicts[1]
    cols = s.unbind(1)
    assert len(cols) == 3 and all(isinstance(c, LazyStackedTensorDict) for c in cols)
    torch.testing.assert_close(cols[2]["x"], x[:, 2])
    parts = s.split([1, 2], 0)
    assert [p.batch_size[0] for p in parts] == [1, 2] and parts[1].tensordicts == tds[1:]
    parts = s.split(2, 1)
    torch.testing.assert_close(parts[1]["x"], x[:, 2:])
    f = lazy_stack([TensorDict(a=torch.zeros(2, 3, 5), batch_size=[2, 3]) for _ in range(4)], 0).flatten(1, 2)
    assert f.batch_size == (4, 6) and f.stack_dim == 0
    uf = f.unflatten(1, (3, 2))
    assert uf.batch_size == (4, 3, 2) and uf.stack_dim == 0


def test_names():
    s = lazy_stack(members(), 1)
    s.names = ["time", "agent"]
    assert s.names == ["time", "agent"] and s.tensordicts[0].names == ["time"]
    assert s.unsqueeze(0).names == [None, "time", "agent"]


# --------------------------------------------------------------------------- nested lazy stacks
def test_nested_lazy_members():
    inner_a = lazy_stack(
        [TensorDict(v=torch.zeros(2, 1), batch_size=[2]), TensorDict(v=torch.ones(2, 3), batch_size=[2])]
    )
    inner_b = lazy_stack(
        [TensorDict(v=torch.ones(2, 2), batch_size=[2]), TensorDict(v=torch.zeros(2, 2), batch_size=[2])]
    )
    tds = [
        TensorDict(obs=inner_a, r=torch.zeros(2, 2), batch_size=[2]),
        TensorDict(obs=inner_b, r=torch.ones(2, 2), batch_size=[2]),
    ]
    s = lazy_stack(tds)
    assert s.batch_size == (2, 2)
    assert list(s.keys(True, True)) == [("obs", "v"), "r"]
    obs = s["obs"]
    assert isinstance(obs, LazyStackedTensorDict) and obs.batch_size == (2, 2, 2)
    assert obs[0] is inner_a and obs[1, 1] is inner_b.tensordicts[1]
    assert s[1, 0]["obs"] is inner_b.tensordicts[0]
    assert s[1]["obs", "v"].shape == (2, 2, 2)
    with pytest.raises(RuntimeError, match="key 'v'"):
        s["obs", "v"]
    assert "obs" in repr(TensorDict(n=s, batch_size=[2]))


# --------------------------------------------------------------------------- property test
@st.composite
def stacks(draw):
    batch = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    n = draw(st.integers(1, 4))
    sd = draw(st.integers(0, len(batch)))
    tds = []
    for i in range(n):
        feat = draw(st.integers(1, 3))
        td = TensorDict(
            h=torch.arange(2 * (int(torch.tensor(batch).prod()) if batch else 1), dtype=torch.float32).view(*batch, 2)
            - i,
            r=torch.arange(int(torch.tensor(batch).prod()) * feat if batch else feat, dtype=torch.float32).view(
                *batch, feat
            )
            + 100 * i,
            batch_size=batch,
        )
        tds.append(td)
    full = batch[:sd] + [n] + batch[sd:]
    if draw(st.integers(0, 9)) == 0:  # one boolean mask over the whole batch
        mask = torch.tensor(
            draw(
                st.lists(
                    st.booleans(),
                    min_size=n * max(1, len(tds[0]["h"].view(-1)) // 2),
                    max_size=n * max(1, len(tds[0]["h"].view(-1)) // 2),
                )
            )
        )
        return tds, sd, mask.view(full)
    parts = []
    for size in full:
        kind = draw(st.sampled_from(["int", "slice", "tensor", "full", "none", "mask"]))
        if kind == "int":
            parts.append(draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            a = draw(st.integers(0, size))
            b = draw(st.integers(a, size))
            parts.append(slice(a, b, draw(st.integers(1, 2))))
        elif kind == "tensor":
            parts.append(torch.tensor(draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=3))))
        elif kind == "mask":
            parts.append(torch.tensor(draw(st.lists(st.booleans(), min_size=size, max_size=size))))
        elif kind == "none":
            parts.append(None)
            parts.append(slice(None))
        else:
            parts.append(slice(None))
    if sum(isinstance(p, torch.Tensor) for p in parts) > 1:  # advanced indices must broadcast together
        parts = [p.nonzero().squeeze(1) if isinstance(p, torch.Tensor) and p.dtype is torch.bool else p for p in parts]
        length = max(len(p) for p in parts if isinstance(p, torch.Tensor))
        parts = [
            (p[torch.arange(length) % len(p)] if len(p) else p[:0].repeat(0)) if isinstance(p, torch.Tensor) else p
            for p in parts
        ]
        if any(isinstance(p, torch.Tensor) and len(p) != length for p in parts):
            parts = [slice(None) if isinstance(p, torch.Tensor) and len(p) != length else p for p in parts]
    cut = draw(st.integers(0, len(parts)))
    return tds, sd, tuple(parts[:cut]) if cut != 1 else parts[0]


@settings(max_examples=60)
@given(stacks())
def test_property_index_matches_members(case):
    tds, sd, index = case
    s = lazy_stack(tds, sd)
    keys = list(s.keys(True, True))
    assert keys == ["h", "r"]
    out = _reference_check(s, index, tds)
    if out.batch_size.numel():  # the homogeneous key also equals the dense stack indexed
        torch.testing.assert_close(out["h"], torch.stack([td["h"] for td in tds], sd)[index])


@settings(max_examples=40)
@given(stacks())
def test_property_setitem_matches_dense(case):
    tds, sd, index = case
    s = lazy_stack(tds, sd)
    reference = torch.stack([td["h"] for td in tds], sd).clone()
    reference[index] = -1.0
    sd_bs = s.batch_size
    which = torch.arange(len(tds)).view([-1 if d == sd else 1 for d in range(len(sd_bs))]).expand(sd_bs)[index]
    member_bs = tds[0].batch_size
    pos = torch.arange(max(member_bs.numel(), 1)).view(member_bs).unsqueeze(sd).expand(sd_bs)[index]
    written = {(int(m), int(p)) for m, p in zip(which.reshape(-1), pos.reshape(-1))}
    s[index] = -1.0
    torch.testing.assert_close(torch.stack([td["h"] for td in tds], sd), reference)
    for m, td in enumerate(tds):  # the ragged key: exactly the selected elements were written
        rows = td["r"].reshape(max(member_bs.numel(), 1), -1)
        for p in range(rows.shape[0]):
            assert bool((rows[p] == -1).all()) == ((m, p) in written)


def test_in_place_leaf_ops_reach_the_members():
    tds = [TensorDict(a=torch.ones(2, 3), b={"c": torch.ones(2)}, batch_size=[2]) for _ in range(2)]
    s = lazy_stack(tds)
    s.requires_grad_()
    assert all(t["a"].requires_grad and t["b", "c"].requires_grad for t in tds) and s.requires_grad
    s.detach_()
    assert not any(t["a"].requires_grad for t in tds)
    s.fill_("b", 4.0)
    assert all(torch.equal(t["b", "c"], torch.full((2,), 4.0)) for t in tds)
    s.share_memory_()
    assert all(t["a"].is_shared() and t["b", "c"].is_shared() for t in tds) and s.is_locked


def test_in_place_arithmetic_pairs_nested_lazy_stacks_member_by_member():
    def stack(v):
        return lazy_stack(
            [
                TensorDict({"x": torch.zeros(2) + v, "y": torch.ones(1) + v}),
                TensorDict({"x": torch.ones(2) + v, "z": torch.zeros(3) + v}),
            ]
        )

    def members(td):
        return [{k: v.tolist() for k, v in m.items()} for m in td.get("lz").tensordicts]

    a = TensorDict({"lz": stack(0.0), "d": torch.zeros(2)}, [2])
    b = TensorDict({"lz": stack(1.0), "d": torch.ones(2)}, [2])
    a += b  # tdict raised KeyError: ('lz', 'y') (a key only member 0 holds)
    # tensordict 0.14: every member gets its own exclusive keys added
    assert members(a) == [{"x": [1.0, 1.0], "y": [3.0]}, {"x": [3.0, 3.0], "z": [1.0, 1.0, 1.0]}]
    assert a["d"].tolist() == [1.0, 1.0]
    a.lerp_(b, 0.5)
    assert members(a) == [{"x": [1.0, 1.0], "y": [2.5]}, {"x": [2.5, 2.5], "z": [1.0, 1.0, 1.0]}]
    a.addcmul_(b, b)
    assert members(a) == [{"x": [2.0, 2.0], "y": [6.5]}, {"x": [6.5, 6.5], "z": [2.0, 2.0, 2.0]}]
    assert a.allclose(a.clone())
    with pytest.raises(KeyError, match=r"\('lz', 'y'\)"):
        a.add_(
            TensorDict(
                {
                    "lz": lazy_stack(
                        [TensorDict({"x": torch.zeros(2)}), TensorDict({"x": torch.zeros(2), "z": torch.zeros(3)})]
                    ),
                    "d": torch.ones(2),
                },
                [2],
            )
        )


def test_get_nestedtensor_holds_each_members_leaf():
    a = TensorDict(x=torch.arange(2.0), sub=TensorDict(y=torch.zeros(1)))
    b = TensorDict(x=torch.arange(3.0), sub=TensorDict(y=torch.ones(4)))
    s = lazy_stack([a, b])
    nested = s.get_nestedtensor("x")
    assert [t.tolist() for t in nested.unbind()] == [[0.0, 1.0], [0.0, 1.0, 2.0]]
    assert [t.tolist() for t in s.get_nestedtensor(("sub", "y")).unbind()] == [[0.0], [1.0, 1.0, 1.0, 1.0]]
    assert s.get_nestedtensor("missing", None) is None
    with_default = lazy_stack([a, TensorDict(sub=TensorDict(y=torch.ones(1)))])
    filled = with_default.get_nestedtensor("x", default=torch.full((5,), 7.0))
    assert [t.tolist() for t in filled.unbind()] == [[0.0, 1.0], [7.0] * 5]


def test_get_nestedtensor_needs_stack_dim_zero_and_to_refuses_a_batch_size():
    s = lazy_stack(
        [TensorDict(x=torch.zeros(2, 3), batch_size=[2]), TensorDict(x=torch.zeros(2, 3), batch_size=[2])], 1
    )
    with pytest.raises(RuntimeError, match="only be called when the stack_dim is 0"):
        s.get_nestedtensor("x")
    with pytest.raises(TypeError, match="Cannot pass batch-size"):
        s.to(torch.float64, batch_size=[])
