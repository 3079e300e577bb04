"""Behaviour of the TensorDict container: keys, indexing, shape ops, torch functions, math."""

import pickle

import pytest
import torch

from tdict import TensorDict, pad, pad_sequence, unravel_key


def make(batch=(4, 3)):
    torch.manual_seed(0)
    return TensorDict(
        {
            "a": torch.randn(*batch, 2),
            "b": {"c": torch.randn(*batch), "d": {"e": torch.arange(torch.Size(batch).numel()).reshape(batch)}},
        },
        batch_size=batch,
    )


# ---------------------------------------------------------------- construction
def test_construction_nested_dicts_and_tuple_keys():
    td = TensorDict({"a": torch.zeros(2, 5), ("x", "y"): torch.ones(2), "b": torch.zeros(2)}, batch_size=[2])
    assert isinstance(td["x"], TensorDict)
    assert td["x"].batch_size == torch.Size([2])
    assert torch.equal(td["x", "y"], torch.ones(2))
    assert sorted(td.keys()) == ["a", "b", "x"]
    assert TensorDict().batch_size == torch.Size([])
    assert sorted(TensorDict(a=torch.zeros(2), b=torch.ones(2), batch_size=[2]).keys()) == [
        "a",
        "b",
    ]  # entries as keywords
    with pytest.raises(ValueError, match=r"as source or as keywords, not both \(got source and \['b'\]\)"):
        TensorDict({"a": torch.zeros(2)}, batch_size=[2], b=torch.zeros(2))


def test_construction_rejects_wrong_batch_and_names_key():
    with pytest.raises(RuntimeError, match=r"Key 'a'.*\[4, 3\].*\[5\]"):
        TensorDict({"a": torch.zeros(4, 3)}, batch_size=[5])
    with pytest.raises(RuntimeError, match="'sub'"):
        TensorDict({"sub": TensorDict({}, [3])}, batch_size=[4])
    with pytest.raises(ValueError):
        TensorDict({}, batch_size=[-1])


@pytest.mark.parametrize(
    "make",
    [
        lambda: TensorDict({}, batch_size=[-1]),
        lambda: TensorDict({}, batch_size=torch.Size([-1])),  # a valid torch.Size, not a valid batch size
        lambda: TensorDict({}, batch_size=-1),
        lambda: TensorDict({}, batch_size=(2, -3)),
        lambda: TensorDict(batch_size=torch.Size([2, -1]), a=torch.zeros(2)),
        lambda: setattr(TensorDict({}, [2]), "batch_size", torch.Size([-2])),
        lambda: TensorDict({}, [2]).empty(batch_size=[-1]),
        lambda: TensorDict({}, [2]).to(batch_size=[-1]),
        lambda: TensorDict.from_dict({"a": torch.zeros(2)}, batch_size=[-1]),
        lambda: __import__("tdict").NonTensorData("x", batch_size=torch.Size([-1])),
        lambda: __import__("tdict").LazyStackedTensorDict(batch_size=[-1]),
    ],
)
def test_negative_batch_sizes_raise_naming_batch_size(make):
    with pytest.raises(ValueError, match=r"batch_size must be a sequence of non-negative ints, got \[.*-\d.*\]"):
        make()


def test_negative_new_sizes_raise_naming_size():
    td = TensorDict({"a": torch.zeros(2)}, [2])
    with pytest.raises(ValueError, match=r"new_zeros: size must be non-negative ints, got \[-1\]"):
        td.new_zeros(-1)
    with pytest.raises(ValueError, match=r"new_empty: size must be non-negative ints, got \[-1\]"):
        td.new_empty(torch.Size([-1]))


def test_device_and_conversions():
    td = TensorDict({"a": torch.zeros(3)}, batch_size=[3], device="cpu")
    assert td.device == torch.device("cpu")
    td["l"] = [1, 2, 3]
    assert torch.equal(td["l"], torch.tensor([1, 2, 3]))
    with pytest.raises(RuntimeError, match="'n'"):  # no silent broadcasting of scalars
        td["n"] = 2.0
    assert "n" not in td
    assert torch.equal(TensorDict({"s": 2.0})["s"], torch.tensor(2.0))


def test_from_dict_infers_batch_size():
    td = TensorDict.from_dict({"a": torch.zeros(3, 4, 2), "b": {"c": torch.zeros(3, 4)}})
    assert td.batch_size == torch.Size([3, 4])
    assert td["b"].batch_size == torch.Size([3, 4])
    assert TensorDict.from_dict({"a": torch.zeros(3, 4)}, batch_dims=1).batch_size == torch.Size([3])


# ---------------------------------------------------------------- keys
def test_get_missing_raises_keyerror_listing_keys():
    td = make()
    with pytest.raises(KeyError, match=r"'zz'.*'a'.*\('b', 'c'\)"):
        td.get("zz")
    with pytest.raises(KeyError):
        td["b", "zz"]
    assert td.get("zz", None) is None
    assert td.get(("b", "zz"), 3) == 3


def test_set_get_nested_and_set_():
    td = make()
    td.set(("b", "new"), torch.ones(4, 3))
    assert torch.equal(td["b"]["new"], torch.ones(4, 3))
    ref = td["a"]
    td.set_("a", torch.full((4, 3, 2), 7.0))
    assert ref is td["a"] and torch.all(ref == 7)
    with pytest.raises(KeyError):
        td.set_("nope", torch.zeros(4, 3))
    td.set("a", torch.zeros(4, 3, 2), inplace=True)
    assert ref is td["a"] and torch.all(ref == 0)


def test_setdefault_pop_del_contains():
    td = make()
    x = td.setdefault("new", torch.ones(4, 3))
    assert torch.equal(x, torch.ones(4, 3))
    assert td.setdefault("new", torch.zeros(4, 3)) is x
    assert "new" in td and ("b", "c") in td and ("b", "q") not in td
    popped = td.pop(("b", "c"))
    assert popped.shape == (4, 3) and ("b", "c") not in td
    assert td.pop("missing", 5) == 5
    del td["new"]
    assert "new" not in td
    with pytest.raises(KeyError):
        td.pop("missing")
    # "a" is a tensor: nothing is nested below it (a KeyError, as for any missing key)
    with pytest.raises(KeyError, match=r"\('a',\) is a Tensor, not a TensorDict"):
        td.del_(("a", "x"))
    assert "a" in td


def test_keys_items_values_variants():
    td = make()
    assert list(td.keys()) == ["a", "b"]
    assert list(td.keys(include_nested=True)) == ["a", "b", ("b", "c"), ("b", "d"), ("b", "d", "e")]
    assert list(td.keys(True, True)) == ["a", ("b", "c"), ("b", "d", "e")]
    assert ("b", "d", "e") in td.keys(True, True)
    assert ("b", "d") not in td.keys(True, True)
    assert len(td.keys(True)) == 5
    leaves = dict(td.items(True, True))
    assert torch.equal(leaves["b", "d", "e"], td["b", "d", "e"])
    assert all(isinstance(v, torch.Tensor) for v in td.values(True, True))
    # a custom is_leaf treating TensorDicts as leaves stops the recursion
    assert list(td.keys(True, True, is_leaf=lambda cls: True)) == ["a", "b"]


def test_flatten_unflatten_keys_roundtrip():
    td = make()
    flat = td.flatten_keys()
    assert sorted(flat.keys()) == ["a", "b.c", "b.d.e"]
    back = flat.unflatten_keys()
    assert set(back.keys(True, True)) == set(td.keys(True, True))
    assert torch.equal(back["b", "d", "e"], td["b", "d", "e"])


def test_rename_select_exclude_split_update():
    td = make()
    td.rename_key_(("b", "c"), "c2")
    assert "c2" in td and ("b", "c") not in td
    with pytest.raises(KeyError):
        td.rename_key_("a", "c2", safe=True)
    sel = td.select("a", ("b", "d", "e"))
    assert list(sel.keys(True, True)) == ["a", ("b", "d", "e")]
    with pytest.raises(KeyError):
        td.select("zz")
    assert list(td.select("zz", strict=False).keys()) == []
    exc = td.exclude(("b", "d"), "a")
    assert list(exc.keys(True, True)) == ["c2"] and ("b", "d", "e") in td  # original untouched
    left, right, rest = td.split_keys(["a"], ["c2"])
    assert list(left.keys()) == ["a"] and list(right.keys()) == ["c2"] and list(rest.keys()) == ["b"]
    other = TensorDict({"a": torch.ones(4, 3, 2), "b": {"z": torch.ones(4, 3)}}, [4, 3])
    td.update(other)
    assert torch.equal(td["a"], torch.ones(4, 3, 2)) and ("b", "z") in td and ("b", "d", "e") in td
    before = td["a"]
    td.update_({"a": torch.zeros(4, 3, 2)})
    assert td["a"] is before and torch.all(before == 0)
    with pytest.raises(KeyError):
        td.update_({"nope": torch.zeros(4, 3)})


def test_empty_and_is_empty():
    td = make()
    e = td.empty()
    assert e.batch_size == td.batch_size and e.is_empty()
    e2 = td.empty(recurse=True)
    assert e2.is_empty() and ("b", "d") in e2.keys(True)
    assert not td.is_empty()


# ---------------------------------------------------------------- indexing
@pytest.mark.parametrize(
    "index",
    [
        0,
        -1,
        slice(1, 3),
        slice(None, None, 2),
        (slice(None), 1),
        (0, 2),
        None,
        (None, 0),
        Ellipsis,
        (Ellipsis, 1),
        [0, 2],
        torch.tensor([3, 0, 0]),
    ],
)
def test_index_matches_per_leaf_indexing(index):
    td = make()
    out = td[index]
    for key, leaf in td.items(True, True):
        ref = leaf[index]  # feature dims of "a" trail: Ellipsis cases handled separately
        if key == "a" and (index is Ellipsis or (isinstance(index, tuple) and Ellipsis in index)):
            ref = (
                leaf[(slice(None),) * 2][index[1:] if isinstance(index, tuple) else ()]
                if index is not Ellipsis
                else leaf
            )
            if isinstance(index, tuple):
                ref = leaf[:, index[1]]
        assert torch.equal(out[key], ref), key
    expected_bs = torch.zeros(4, 3)[index].shape
    assert out.batch_size == expected_bs


def test_bool_mask_and_views():
    td = make()
    mask = torch.tensor([True, False, True, False])
    out = td[mask]
    assert out.batch_size == torch.Size([2, 3])
    assert torch.equal(out["a"], td["a"][mask])
    full_mask = torch.zeros(4, 3, dtype=torch.bool)
    full_mask[1, 2] = True
    assert td[full_mask].batch_size == torch.Size([1])
    view = td[1]
    view["a"].fill_(42.0)  # int index gives a view: writes reach the parent
    assert torch.all(td["a"][1] == 42)
    with pytest.raises(IndexError):
        td[0, 0, 0]
    with pytest.raises(IndexError):
        td[torch.ones(3, dtype=torch.bool)]


def test_setitem_by_index_in_place():
    td = make()
    a = td["a"]
    td[0] = TensorDict(
        {"a": torch.ones(3, 2), "b": {"c": torch.ones(3), "d": {"e": torch.zeros(3, dtype=torch.long)}}}, [3]
    )
    assert td["a"] is a and torch.all(a[0] == 1)
    td[torch.tensor([1, 3])] = 0.5
    assert torch.all(td["b", "c"][[1, 3]] == 0.5)
    td[:, 1] = td[:, 0].clone()
    assert torch.equal(td["a"][:, 1], td["a"][:, 0])
    with pytest.raises(RuntimeError, match="'a'"):
        td[0] = TensorDict({"a": torch.ones(5, 2)}, [5])
    td[0] = TensorDict({"zz": torch.ones(3)}, [3])  # a missing key is created zero-filled, then written
    assert td["zz"].shape == td.batch_size and torch.equal(td["zz"][0], torch.ones(3)) and (td["zz"][1:] == 0).all()
    with pytest.raises(RuntimeError, match="batch dimension mismatch"):  # a refused write adds no key
        td[0] = TensorDict({"a": torch.ones(5, 2), "new": torch.ones(5)}, [5])
    assert "new" not in td.keys()
    with pytest.raises(RuntimeError, match="'a'"):  # created, then the write of "a" is refused: rolled back
        td[0] = TensorDict({"a": torch.ones(3, 7), "new": torch.ones(3), "sub": {"x": torch.ones(3)}}, [3])
    assert "new" not in td.keys() and "sub" not in td.keys()  # new sub-collections go too


def test_masked_fill_where_gather():
    td = make()
    mask = torch.zeros(4, 3, dtype=torch.bool)
    mask[0] = True
    out = td.masked_fill(mask, -1.0)
    assert torch.all(out["a"][0] == -1) and torch.equal(out["a"][1:], td["a"][1:])
    td2 = td.clone()
    td2.masked_fill_(mask, 0.0)
    assert torch.all(td2["b", "c"][0] == 0)
    cond = torch.rand(4, 3) > 0.5
    w = torch.where(cond, td, td * 0)
    assert torch.equal(w["a"], torch.where(cond.unsqueeze(-1), td["a"], torch.zeros_like(td["a"])))
    idx = torch.tensor([[2, 0, 1]] * 4)
    g = torch.gather(td, 1, idx)
    assert torch.equal(g["b", "c"], torch.gather(td["b", "c"], 1, idx))
    assert torch.equal(g["a"], torch.gather(td["a"], 1, idx.unsqueeze(-1).expand(4, 3, 2)))


def test_torch_where_writes_into_out():
    td = TensorDict({"a": torch.zeros(3), "n": {"b": torch.zeros(3, 2)}}, [3])
    other = TensorDict({"a": torch.ones(3), "n": {"b": torch.ones(3, 2)}}, [3])
    out = TensorDict({"a": torch.full((3,), 7.0), "n": {"b": torch.full((3, 2), 7.0)}}, [3])
    leaf = out["a"]
    cond = torch.tensor([True, False, True])
    result = torch.where(cond, td, other, out=out)
    # tensordict 0.14: the result is out, holding [0., 1., 0.] (tdict ignored out)
    assert result is out and out["a"] is leaf
    assert out["a"].tolist() == [0.0, 1.0, 0.0]
    assert out["n", "b"].tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert td.where(~cond, other, out=out) is out and out["a"].tolist() == [1.0, 0.0, 1.0]


# ---------------------------------------------------------------- shape ops
def test_shape_ops_match_leaf_ops():
    td = make()
    a = td["a"]
    assert torch.equal(td.reshape(12)["a"], a.reshape(12, 2))
    assert torch.equal(td.reshape(-1, 2)["a"], a.reshape(6, 2, 2))
    assert td.view(3, 4).batch_size == torch.Size([3, 4])
    assert torch.equal(td.unsqueeze(-1)["a"], a.unsqueeze(2))
    assert td.unsqueeze(0).squeeze(0).batch_size == td.batch_size
    assert torch.equal(td.permute(1, 0)["a"], a.permute(1, 0, 2))
    assert torch.equal(td.transpose(0, 1)["b", "c"], td["b", "c"].t())
    assert torch.equal(td.flatten(0, 1)["a"], a.flatten(0, 1))
    assert td.flatten(0, 1).unflatten(0, (4, 3)).batch_size == td.batch_size
    assert torch.equal(td[:1].expand(5, 3)["a"], a[:1].expand(5, 3, 2))
    assert td.expand(2, 4, 3).batch_size == torch.Size([2, 4, 3])
    assert torch.equal(td.repeat(2, 1)["a"], a.repeat(2, 1, 1))
    assert torch.equal(td.repeat_interleave(2, dim=1)["a"], a.repeat_interleave(2, dim=1))
    assert torch.equal(td.flip(0)["a"], a.flip(0))
    assert torch.equal(td.roll(1, 0)["a"], a.roll(1, 0))
    assert td.permute(1, 0).contiguous()["a"].is_contiguous()
    with pytest.raises(ValueError):
        td.reshape(5)
    with pytest.raises(ValueError):
        td.expand(5, 3)


def test_unbind_split_chunk():
    td = make()
    parts = td.unbind(1)
    assert len(parts) == 3 and torch.equal(parts[2]["a"], td["a"][:, 2])
    s = td.split([1, 3], 0)
    assert [p.batch_size[0] for p in s] == [1, 3]
    assert torch.equal(s[1]["b", "d", "e"], td["b", "d", "e"][1:])
    assert [p.batch_size[0] for p in td.split(3)] == [3, 1]
    assert [p.batch_size[1] for p in td.chunk(2, 1)] == [2, 1]
    assert [p.batch_size for p in torch.unbind(td, 0)] == [torch.Size([3])] * 4
    assert len(list(td)) == 4 and torch.equal(list(td)[1]["a"], td["a"][1])


def test_pad_and_pad_sequence():
    td = TensorDict({"a": torch.ones(2, 3)}, [2])
    p = pad(td, [1, 2], value=-1.0)
    assert p.batch_size == torch.Size([5])
    assert torch.equal(p["a"][0], torch.full((3,), -1.0)) and torch.equal(p["a"][1:3], torch.ones(2, 3))
    seq = pad_sequence([TensorDict({"x": torch.ones(n)}, [n]) for n in (1, 3)], return_mask=True)
    assert seq.batch_size == torch.Size([2, 3])
    assert torch.equal(seq["x"], torch.tensor([[1.0, 0, 0], [1, 1, 1]]))
    assert torch.equal(seq["masks", "x"], torch.tensor([[True, False, False], [True, True, True]]))


# ---------------------------------------------------------------- torch functions
def test_stack_dense_and_errors():
    tds = [make() for _ in range(5)]
    for dim in (0, 1, 2, -1):
        st = torch.stack(tds, dim)
        assert torch.equal(st["b", "c"], torch.stack([t["b", "c"] for t in tds], dim if dim >= 0 else 2))
    assert torch.stack(tds, -1).batch_size == torch.Size([4, 3, 5])
    out = torch.stack(tds, 0).zero_()
    res = torch.stack(tds, 0, out=out)
    assert res is out and torch.equal(out["a"][2], tds[2]["a"])
    with pytest.raises(KeyError, match="lazy_stack"):
        torch.stack([make(), make().exclude("a")])
    with pytest.raises(RuntimeError, match="batch size"):
        torch.stack([make(), make((4, 2))])
    bad = make()
    bad["a"] = torch.zeros(4, 3, 7)
    with pytest.raises(RuntimeError, match="'a'"):
        torch.stack([make(), bad])


def test_cat_and_out():
    x, y = make(), make((2, 3))
    c = torch.cat([x, y], 0)
    assert c.batch_size == torch.Size([6, 3]) and torch.equal(c["a"], torch.cat([x["a"], y["a"]]))
    out = c.clone().zero_()
    torch.cat([x, y], 0, out=out)
    assert torch.equal(out["b", "d", "e"], c["b", "d", "e"])
    with pytest.raises(RuntimeError):
        torch.cat([x, make((4, 2))], 0)


def test_like_functions_and_clone():
    td = make()
    z = torch.zeros_like(td)
    assert z.batch_size == td.batch_size and all(torch.all(v == 0) for v in z.values(True, True))
    assert torch.all(torch.full_like(td, 3)["a"] == 3)
    c = torch.clone(td)
    assert c["a"] is not td["a"] and torch.equal(c["a"], td["a"])
    shallow = td.clone(recurse=False)
    assert shallow["a"] is td["a"] and shallow["b"] is not td["b"]


# ---------------------------------------------------------------- apply
def test_apply_named_apply_and_multiple():
    td = make()
    out = td.apply(lambda x: x + 1)
    assert torch.equal(out["b", "c"], td["b", "c"] + 1)
    two = td.apply(lambda x, y: x * y, td)
    assert torch.equal(two["a"], td["a"] ** 2)
    named = td.named_apply(lambda k, x: x if k == "c" else None, nested_keys=False)
    assert list(named.keys(True, True)) == [("b", "c")]
    full = td.named_apply(
        lambda k, x: torch.tensor(len(unravel_key(k) if isinstance(k, tuple) else (k,))).expand(x.shape),
        nested_keys=True,
    )
    assert torch.all(full["b", "d", "e"] == 3)
    assert td.apply(lambda x: None) is None
    kept = td.apply(lambda x: x if x.dtype == torch.long else None, filter_empty=True)
    assert list(kept.keys(True, True)) == [("b", "d", "e")]
    reduced = td.apply(lambda x: x[:, 0], batch_size=[4])
    assert reduced.batch_size == torch.Size([4]) and reduced["b"].batch_size == torch.Size([4])
    ref = td["a"]
    td.apply_(lambda x: x * 0)
    assert td["a"] is ref and torch.all(ref == 0)


def test_like_functions_with_a_device_set_the_collections_device():
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, [2])
    for fn in (torch.empty_like, torch.zeros_like, torch.ones_like):
        out = fn(td, device="meta")
        # tensordict 0.14: device meta (tdict kept the stale None)
        assert out.device == torch.device("meta") and out["n"].device == torch.device("meta") and out["a"].is_meta
    assert torch.zeros_like(TensorDict({"a": torch.zeros(2)}, [2], device="cpu"), device="meta").device == torch.device(
        "meta"
    )
    assert torch.zeros_like(td).device is None


def test_to_none_is_a_no_op():
    td = TensorDict({"a": torch.zeros(2)}, [2])
    assert td.to(None) is td and td.to(None).device is None  # tdict raised TypeError
    on_cpu = TensorDict({"a": torch.zeros(2)}, [2], device="cpu")
    assert on_cpu.to(None).device == torch.device("cpu")


def test_from_dict_batch_dims_limits_nested_dicts_too():
    source = {"a": torch.zeros(3, 4, 5), "n": {"b": torch.zeros(3, 4, 5)}}
    # tensordict 0.14: the nested batch size follows batch_dims (tdict gave [3, 4, 5])
    for batch_dims, expected in ((1, [3]), (2, [3, 4])):
        td = TensorDict.from_dict(source, batch_dims=batch_dims, auto_batch_size=True)
        assert td.batch_size == torch.Size(expected) and td["n"].batch_size == torch.Size(expected)
    nested_first = TensorDict.from_dict({"n": {"b": torch.zeros(3, 4, 5)}, "a": torch.zeros(3, 4)}, batch_dims=1)
    assert nested_first.batch_size == torch.Size([3]) and nested_first["n"].batch_size == torch.Size([3])


def test_apply_default_fills_the_leaves_of_a_missing_sub_collection():
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.ones(2), "m": {"c": torch.ones(2)}}}, [2])
    other = TensorDict({"a": torch.ones(2), "n": {"b": torch.ones(2)}}, [2])
    out = td.apply(lambda x, y: x + y, other, default=10)
    # tensordict 0.14: {'a': [1., 1.], 'n': {'b': [2., 2.], 'm': {'c': [11., 11.]}}} (tdict raised AttributeError)
    assert {k: v.tolist() for k, v in out.items(True, True)} == {
        "a": [1.0, 1.0],
        ("n", "b"): [2.0, 2.0],
        ("n", "m", "c"): [11.0, 11.0],
    }
    out = td.apply(lambda x, y: x + y, TensorDict({"a": torch.ones(2)}, [2]), default=10)
    assert out["n", "b"].tolist() == [11.0, 11.0] and out["n", "m", "c"].tolist() == [11.0, 11.0]
    named = td.named_apply(lambda k, x, y: x * 0 + y, TensorDict({}, [2]), default=3, nested_keys=True)
    assert named["n", "m", "c"].tolist() == [3.0, 3.0]


# ---------------------------------------------------------------- arithmetic and reductions
def test_arithmetic_with_scalars_tensors_and_tds():
    td = make().exclude("b")
    a = td["a"]
    assert torch.equal((td + 1)["a"], a + 1)
    assert torch.equal((2 * td)["a"], a * 2)
    assert torch.equal((td - td)["a"], torch.zeros_like(a))
    assert torch.equal((td / 2)["a"], a / 2)
    assert torch.equal((1 - td)["a"], 1 - a)
    assert torch.equal((td**2)["a"], a**2)
    assert torch.equal((-td)["a"], -a)
    assert torch.equal((td > 0)["a"], a > 0)
    assert (td == td).all() and not (td != td).any()
    y = td.clone()
    y += 1
    assert torch.equal(y["a"], a + 1)
    y.mul_(2)
    assert torch.allclose(y["a"], (a + 1) * 2)
    y.add_(td, alpha=2.0)
    assert torch.allclose(y["a"], (a + 1) * 2 + 2 * a)
    assert torch.allclose(td.abs()["a"], a.abs()) and torch.allclose(td.exp()["a"], a.exp())
    assert torch.allclose(td.clamp(-0.1, 0.1)["a"], a.clamp(-0.1, 0.1))


def test_reductions():
    td = make()
    s = td.sum()
    assert s.batch_size == torch.Size([]) and torch.allclose(s["a"], td["a"].sum())
    assert torch.allclose(td.sum(reduce=True), td["a"].sum() + td["b", "c"].sum() + td["b", "d", "e"].sum())
    m = td.mean(dim=0)
    assert m.batch_size == torch.Size([3]) and torch.allclose(m["a"], td["a"].mean(0))
    assert td.mean(dim=(0, 1), keepdim=True).batch_size == torch.Size([1, 1])
    assert torch.allclose(td.std(dim=1)["b", "c"], td["b", "c"].std(1))
    assert torch.allclose(td.var()["a"], td["a"].var())
    values, indices = td.max(dim=1)
    assert torch.equal(values["a"], td["a"].max(1).values) and torch.equal(
        indices["b", "c"], td["b", "c"].max(1).indices
    )
    assert torch.equal(td.min()["a"], td["a"].min())
    assert torch.allclose(td.prod(dim=0)["a"], td["a"].prod(0))
    assert torch.allclose(td.norm()["a"], td["a"].norm())
    assert td.any() is True and isinstance(td.all(), bool)
    assert torch.equal(td.any(dim=1)["a"], td["a"].any(1))
    with pytest.raises(IndexError):
        td.sum(dim=2)


# ---------------------------------------------------------------- copies, locks, names, pickling
def test_copy_zero_fill_detach_requires_grad():
    td = make()
    c = td.copy()
    assert c["a"] is td["a"] and c["b"] is not td["b"]
    z = td.clone().zero_()
    assert all(torch.all(v == 0) for v in z.values(True, True))
    z.fill_("a", 2.0)
    assert torch.all(z["a"] == 2)
    z.fill_("b", 1)
    assert torch.all(z["b", "d", "e"] == 1)
    g = td.exclude("b").requires_grad_()
    assert g["a"].requires_grad and not g.detach()["a"].requires_grad
    dst = td.clone().zero_()
    dst.copy_(td)
    assert torch.equal(dst["b", "c"], td["b", "c"])


def test_to_dtype_device():
    td = make()
    d = td.to(torch.float64)
    assert d["a"].dtype == torch.float64 and d["b", "d", "e"].dtype == torch.float64
    assert td.to("cpu").device == torch.device("cpu")
    cpu = TensorDict({"a": torch.zeros(2)}, [2], device="cpu")
    assert cpu.to("cpu") is cpu
    assert td.double()["a"].dtype == torch.float64 and td.float()["a"].dtype == torch.float32


def test_lock_unlock_and_context_managers():
    td = make().lock_()
    assert td.is_locked and td["b"].is_locked
    with pytest.raises(RuntimeError, match="locked"):
        td["new"] = torch.zeros(4, 3)
    with pytest.raises(RuntimeError, match="locked"):
        td.set("a", torch.zeros(4, 3, 2))
    td.set_("a", torch.zeros(4, 3, 2))  # in-place writes stay allowed
    with pytest.raises(RuntimeError):
        del td["a"]
    with td.unlock_():
        td["new"] = torch.zeros(4, 3)
        assert not td.is_locked
    assert td.is_locked and "new" in td
    td.unlock_()
    with td.lock_():
        assert td.is_locked
    assert not td.is_locked


def test_names_propagate():
    td = TensorDict({"a": torch.zeros(3, 4, 2)}, [3, 4], names=["env", "time"])
    assert td.names == ["env", "time"]
    assert td[0].names == ["time"]
    assert td.permute(1, 0).names == ["time", "env"]
    assert td.unsqueeze(0).names == [None, "env", "time"]
    assert torch.stack([td, td], 1).names == ["env", None, "time"]
    with pytest.raises(ValueError):
        td.names = ["a"]
    with pytest.raises(ValueError):
        td.names = ["a", "a"]
    assert td.rename(env="batch").names == ["batch", "time"] and td.names == ["env", "time"]
    unnamed = TensorDict({}, [2, 3])
    unnamed.refine_names(..., "time")
    assert unnamed.names == [None, "time"]


def test_pickle_roundtrip_and_state_len():
    td = make().lock_()
    back = pickle.loads(pickle.dumps(td))
    assert back.batch_size == td.batch_size and back.is_locked
    assert torch.equal(back["b", "d", "e"], td["b", "d", "e"])
    assert len(td) == 4 and td.numel() == 12 and td.ndim == 2 and td.shape == td.batch_size
    with pytest.raises(RuntimeError):
        bool(td)


def test_batch_size_setter_validates():
    td = make()
    td.batch_size = [4]
    assert td.batch_size == torch.Size([4])
    with pytest.raises(RuntimeError, match=r"batch_size \[5\]: the Tensor a has shape torch.Size\(\[4, 3, 2\]\)"):
        td.batch_size = [5]


def test_batch_size_setter_grows_nested_tensordicts_with_fewer_dims():
    """As tensordict: a nested TensorDict whose batch size is a prefix of the new one takes it too."""
    td = TensorDict({("next", "reward"): torch.randn(10), ("next", "deep", "x"): torch.zeros(10, 2)}, [])
    assert td["next"].batch_size == () and td["next", "deep"].batch_size == ()
    td.batch_size = [10]
    assert td["next"].batch_size == (10,) and td["next", "deep"].batch_size == (10,)
    assert td[3]["next", "deep", "x"].shape == (2,)
    # a nested leaf that cannot take it: refused, naming the leaf, and nothing changes
    bad = TensorDict({("next", "ok"): torch.zeros(10), ("next", "deep", "x"): torch.zeros(3)}, [])
    with pytest.raises(RuntimeError, match=r"the Tensor \('next', 'deep', 'x'\) has shape torch.Size\(\[3\]\)"):
        bad.batch_size = [10]
    assert bad.batch_size == () and bad["next"].batch_size == () and bad["next", "deep"].batch_size == ()


def test_repr_mentions_keys_and_shapes():
    text = repr(make())
    assert "a: Tensor(shape=torch.Size([4, 3, 2])" in text and "batch_size=torch.Size([4, 3])" in text


def test_select_exclude_nested_paths_leave_source_untouched():
    td = make()
    both = td.select(("b", "c"), ("b", "d", "e"))
    assert list(both.keys(True, True)) == [("b", "c"), ("b", "d", "e")]
    assert both["b"] is not td["b"] and both["b"].batch_size == td["b"].batch_size
    whole = td.select("b", ("b", "c"))
    assert whole["b"] is td["b"] and list(td["b"].keys()) == ["c", "d"]
    whole_after = td.select(("b", "c"), "b")
    assert set(whole_after["b"].keys(True, True)) == {"c", ("d", "e")}
    assert list(td["b"].keys()) == ["c", "d"]  # source structure unchanged
    ex = td.exclude(("b", "d", "e"), "zz")
    assert list(ex.keys(True, True)) == ["a", ("b", "c")] and ("b", "d", "e") in td
    assert list(ex["b"]["d"].keys()) == []


def _mixed_tree() -> TensorDict:
    """A TensorDict whose nodes are of every kind: plain, tensor class, lazy stack, non-tensor leaf."""
    from tdict import lazy_stack, tensorclass

    @tensorclass
    class Obs:
        pixels: torch.Tensor
        label: str

    members = [TensorDict({"x": torch.zeros(3), "y": {"z": torch.ones(3)}}, [3]) for _ in range(2)]
    return TensorDict(
        {
            "a": torch.zeros(2, 3),
            "obs": Obs(pixels=torch.zeros(2, 3, 4), label="cam", batch_size=[2, 3]),
            "note": "hello",
            "stack": lazy_stack(members),
            "p": torch.nn.Parameter(torch.zeros(2, 3)),
            "sub": {"b": torch.zeros(2, 3), "deep": {"c": torch.zeros(2, 3)}},
        },
        batch_size=[2, 3],
    )


def _reference_keys(td, include_nested: bool, leaves_only: bool) -> list:
    """Depth-first, insertion order; every step goes through the public API (get + keys())."""
    from tdict import NonTensorData, TensorDictBase

    out = []
    for key in td.keys():
        value = td.get(key)
        node = (
            isinstance(value, TensorDictBase) and not isinstance(value, NonTensorData) or hasattr(value, "_tensordict")
        )
        if not (node or td.is_non_tensor(key)) or not leaves_only:  # tensordict 0.14: non-tensor data is no leaf
            out.append(key)
        if node and include_nested:
            out.extend(
                (key,) + (k if isinstance(k, tuple) else (k,)) for k in _reference_keys(value, True, leaves_only)
            )
    return out


@pytest.mark.parametrize("leaves_only", [False, True])
@pytest.mark.parametrize("include_nested", [False, True])
def test_keys_walk_every_node_kind_in_order_and_len_agrees(include_nested, leaves_only):
    td = _mixed_tree()
    view = td.keys(include_nested, leaves_only)
    expected = _reference_keys(td, include_nested, leaves_only)
    assert list(view) == expected and len(view) == len(expected)
    if include_nested:
        assert ("stack", "y", "z") in view and ("obs", "pixels") in view and ("sub", "deep", "c") in view
    td.set(("sub", "deep", "new"), torch.zeros(2, 3))  # the view is live
    assert (("sub", "deep", "new") in list(view)) == include_nested
    assert len(view) == len(list(view))


def test_keys_with_custom_is_leaf_treat_sub_tensordicts_as_leaves():
    td = _mixed_tree()
    keys = list(td.keys(True, True, is_leaf=lambda cls: True))
    assert keys == list(td.keys())


def test_select_nested_keys_edge_cases():
    td = _mixed_tree()
    td.set(("wide", "w"), torch.zeros(2, 3, 5))
    td["wide"].batch_size = [2, 3, 5]
    sel = td.select("a", ("sub", "deep", "c"), ("wide", "w"), ("obs", "pixels"), ("sub", "b"))
    assert list(sel.keys(True, True)) == ["a", ("sub", "deep", "c"), ("sub", "b"), ("wide", "w"), ("obs", "pixels")]
    assert sel["wide"].batch_size == torch.Size([2, 3, 5])  # a new parent is shaped like the source's
    assert sel["sub"] is not td["sub"] and sel["sub", "deep", "c"] is td["sub", "deep", "c"]
    assert sel["obs"].batch_size == torch.Size([2, 3])
    # a key given as nested tuples, and a one-element tuple
    assert list(td.select(("sub", ("deep", "c")), ("a",)).keys(True, True)) == [("sub", "deep", "c"), "a"]
    # errors name the full key; strict=False leaves no empty parent behind
    with pytest.raises(KeyError, match=r"\('sub', 'deep', 'missing'\)"):
        td.select("a", ("sub", "deep", "missing"))
    with pytest.raises(KeyError, match="'zz'"):
        td.select(("sub", "b"), "zz")
    with pytest.raises(KeyError):
        td.select(())
    assert list(td.select(("sub", "deep", "missing"), "a", strict=False).keys()) == ["a"]
    # a path through a leaf is a missing key, not a crash
    with pytest.raises(KeyError):
        td.select(("a", "x"))


def test_equality_compares_non_tensor_payloads():
    a = TensorDict(x=torch.zeros(2), s="hi", batch_size=[2])
    b = TensorDict(x=torch.zeros(2), s="ho", batch_size=[2])
    assert (a == a).all() and not (a == b).all()
    assert torch.equal((a != b)["s"], torch.tensor([True, True]))
    assert torch.equal((a == b)["x"], torch.tensor([True, True]))


def test_degenerate_keys_raise():
    td = make()
    with pytest.raises(KeyError):
        td.get(())
    with pytest.raises(KeyError, match="leaf"):
        td.get(("a", "x"))
    with pytest.raises(TypeError):
        td.get(3)


def test_fused_arithmetic_matches_per_leaf_ops_and_falls_back():
    td = make()
    other = make().apply(lambda x: x + 3)
    for op in (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b, lambda a, b: a**b):
        out = op(td, other)
        for key, leaf in td.items(True, True):
            torch.testing.assert_close(out[key], op(leaf, other[key]), rtol=0, atol=0, equal_nan=True)
        assert out.batch_size == td.batch_size and out["b"].batch_size == td["b"].batch_size
    ints = td * 2  # an int scalar keeps integer leaves integer, as torch does
    assert ints["b", "d", "e"].dtype == torch.long and torch.equal(ints["b", "d", "e"], td["b", "d", "e"] * 2)
    assert torch.equal(td.maximum(other)["a"], torch.maximum(td["a"], other["a"]))
    # broadcasting leaves and non-tensor entries take the per-leaf path, with the same results
    wide = TensorDict({"a": torch.ones(4, 3, 1)}, [4, 3])
    assert torch.equal((td.select("a") + wide)["a"], td["a"] + 1)
    text = TensorDict({"x": torch.ones(2), "s": "hi"}, [2])
    assert torch.equal((text + text)["x"], torch.full((2,), 2.0)) and (text + text)["s"] == "hi"
    with pytest.raises(RuntimeError):
        TensorDict(m=torch.ones(2, dtype=torch.bool), batch_size=[2]) - TensorDict(
            m=torch.ones(2, dtype=torch.bool), batch_size=[2]
        )


def test_tensor_operands_line_up_with_the_batch_dims():
    td = make()  # batch [4, 3]; "a" has a feature dim of 2
    col = torch.arange(3.0)
    out = td * col
    assert torch.equal(out["a"], td["a"] * col.view(3, 1)) and torch.equal(out["b", "c"], td["b", "c"] * col)
    mask = torch.tensor([1, 0, 1, 0]).view(4, 1)  # integer, so the long leaf can be scaled in place
    td2 = td.clone()
    td2.mul_(mask)
    assert torch.equal(td2["a"], td["a"] * mask.view(4, 1, 1)) and torch.all(td2["b", "d", "e"][1] == 0)
    with pytest.raises(RuntimeError, match=r"batch size \[4, 3\].*\[2\]"):
        td + torch.ones(2)  # a feature-shaped operand is refused, not silently broadcast


def test_apply_refuses_results_that_lose_the_batch_dims():
    td = make()
    with pytest.raises(RuntimeError, match=r"'a'.*batch size \[4, 3\].*batch_size="):
        td.apply(lambda x: x[0])
    assert td.apply(lambda x: x[0], batch_size=[3]).batch_size == torch.Size([3])


def test_tolist_options():
    td = TensorDict(
        a=torch.arange(8).view(2, 2, 2), b=TensorDict(c=torch.arange(4.0).view(2, 2), batch_size=[2, 2]), batch_size=[2]
    )
    plain = td.tolist()  # tensors kept (as tensordict)
    assert len(plain) == 2 and torch.equal(plain[1]["a"], torch.tensor([[4, 5], [6, 7]]))
    assert torch.equal(plain[0]["b"]["c"], torch.tensor([0.0, 1.0]))
    assert td.tolist(convert_tensors=True) == [
        {"a": [[0, 1], [2, 3]], "b": {"c": [0.0, 1.0]}},
        {"a": [[4, 5], [6, 7]], "b": {"c": [2.0, 3.0]}},
    ]
    assert td.tolist(convert_tensors=True, tolist_first=True)[1]["b"] == [{"c": 2.0}, {"c": 3.0}]
    arrays = td.tolist(convert_tensors="numpy")
    assert arrays[0]["a"].tolist() == [[0, 1], [2, 3]] and type(arrays[0]["a"]).__module__ == "numpy"
    nodes = td.tolist(convert_nodes=False)
    assert isinstance(nodes[0], TensorDict) and nodes[0].batch_size == torch.Size([])
    with pytest.raises(TypeError, match="convert_tensors needs convert_nodes=True"):
        td.tolist(convert_nodes=False, convert_tensors=True)
    with pytest.raises(ValueError, match="convert_tensors must be True, False or 'numpy', got 'list'"):
        td.tolist(convert_tensors="list")


def test_pad_sequence_pads_leaf_dims():
    # a feature dim past the batch: the batch is kept, each key padded to its own longest length
    tds = [
        TensorDict({"a": torch.ones(6, 3, 8), ("b", "c"): torch.ones(6, 3)}, [6]),
        TensorDict({"a": torch.full((6, 5, 8), 2.0), ("b", "c"): torch.full((6, 7), 2.0)}, [6]),
    ]
    out = pad_sequence(tds, pad_dim=1, return_mask=True)
    assert out.batch_size == (2, 6) and out["a"].shape == (2, 6, 5, 8) and out["b", "c"].shape == (2, 6, 7)
    assert (out["a"][0, :, :3] == 1).all() and (out["a"][0, :, 3:] == 0).all() and (out["a"][1] == 2).all()
    assert out["masks", "a"].shape == (2, 6, 5) and out["masks", "b", "c"].shape == (2, 6, 7)
    assert torch.equal(out["masks", "a"][0, 0], torch.tensor([True] * 3 + [False] * 2))
    # batch-less items: pad_dim 0 is the leaves' first dim; non-tensor leaves are stacked
    short = TensorDict({"a": torch.tensor([2]), "b": "efg"})
    flat = pad_sequence([TensorDict({"a": torch.tensor([1, 1]), "b": "asd"}), short], padding_value=-1)
    assert flat.batch_size == (2,) and flat["a"].tolist() == [[1, 1], [2, -1]] and flat["b"] == ["asd", "efg"]
    # a nested key names the masks entry; negative pad_dim counts from a leaf's end
    ragged = [TensorDict({("b", "c"): torch.ones(6, n)}, [6]) for n in (3, 7)]
    keyed = pad_sequence(ragged, pad_dim=-1, return_mask=("m", "n"))
    assert keyed["b", "c"].shape == (2, 6, 7) and keyed["m", "n", "b", "c"].shape == (2, 6, 7)
    with pytest.raises(RuntimeError, match=r"key 'a' has shapes \[\[6, 3, 8\], \[6, 5, 8\]\], which differ outside"):
        pad_sequence(tds, pad_dim=-1)
    with pytest.raises(RuntimeError, match="cannot pad scalars"):
        pad_sequence([TensorDict({"s": torch.tensor(1.0)})])
    with pytest.raises(KeyError, match="must match"):
        pad_sequence([TensorDict({"a": torch.ones(2)}), TensorDict({"b": torch.ones(2)})])
    dest = pad_sequence(tds, pad_dim=1).zero_()
    assert pad_sequence(tds, pad_dim=1, out=dest) is dest and (dest["a"][1] == 2).all()


def test_a_nested_collection_with_fewer_batch_dims_takes_the_parents():
    td = TensorDict({"a": torch.zeros(4, 3)}, [4, 3])
    inner = TensorDict({"x": torch.randn(4, 3, 1)}, [])
    td["inner"] = inner
    assert td["inner"] is inner and inner.batch_size == (4, 3)  # the entry is the caller's object, grown
    inner["y"] = torch.ones(4, 3)
    assert torch.equal(td["inner", "y"], torch.ones(4, 3))
    td["half"] = TensorDict({"y": torch.ones(4, 3)}, [4])
    assert td["half"].batch_size == (4, 3)
    with pytest.raises(RuntimeError, match="nested collection of batch size \\[\\] does not start with"):
        td["bad"] = TensorDict({"x": torch.zeros(5)}, [])
    with pytest.raises(RuntimeError, match="does not start with"):
        td["other"] = TensorDict({"x": torch.zeros(3, 3)}, [3])  # leading dims differ
