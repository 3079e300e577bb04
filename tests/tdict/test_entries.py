"""EntryOpsMixin: per-entry reads/writes, conversions, introspection, non-tensor helpers, new_* factories,
combining leaves and separating keys, on TensorDicts, lazy stacks and tensor classes."""

from __future__ import annotations

import collections

import pytest
import torch

from tdict import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDict, lazy_stack, tensorclass


def nested() -> TensorDict:
    return TensorDict(
        {"a": torch.arange(6.0).view(3, 2), "n": {"b": torch.arange(3), "c": torch.ones(3, 4)}, "s": "text"},
        batch_size=[3],
    )


def stack(stack_dim: int = 0) -> LazyStackedTensorDict:
    """Two members with a common ``a``, a ragged ``x`` and a nested ``("n", "b")``."""
    members = [
        TensorDict(
            a=torch.full((2,), float(i)),
            x=torch.full((2, 1 + 2 * i), float(i)),
            n={"b": torch.arange(2) + 10 * i},
            batch_size=[2],
        )
        for i in range(2)
    ]
    return lazy_stack(members, stack_dim)


@tensorclass
class Pair:
    x: torch.Tensor
    label: str | None = None


# ---------------------------------------------------------------------------- get_at / set_at_ / copy_at_
def test_get_at_matches_tensor_indexing():
    td = nested()
    assert torch.equal(td.get_at("a", 1), td["a"][1])
    assert torch.equal(td.get_at(("n", "b"), slice(0, 2)), torch.arange(2))
    sub = td.get_at("n", 2)
    assert isinstance(sub, TensorDict) and sub.batch_size == torch.Size([]) and torch.equal(sub["c"], torch.ones(4))
    assert td.get_at("s", 0).data == "text"


def test_get_at_missing_and_bad_index():
    td = nested()
    assert td.get_at("zz", 0, None) is None
    assert td.get_at("zz", 0, default=5) == 5
    with pytest.raises(KeyError, match="zz"):
        td.get_at("zz", 0)
    with pytest.raises(IndexError, match="get_at\\('a'\\)"):
        td.get_at("a", 7)


def test_set_at_writes_in_place_with_broadcast():
    td = nested()
    a = td["a"]
    assert td.set_at_("a", torch.tensor([7.0, 8.0]), 0) is td
    td.set_at_(("n", "b"), 9, slice(1, None))
    assert (
        td["a"] is a
        and torch.equal(a[0], torch.tensor([7.0, 8.0]))
        and torch.equal(a[1:], torch.arange(2.0, 6.0).view(2, 2))
    )
    assert td["n", "b"].tolist() == [0, 9, 9]
    td.set_at_("n", TensorDict(b=torch.tensor(-1), c=torch.zeros(4)), 0)
    assert td["n", "b"].tolist() == [-1, 9, 9] and td["n", "c"][0].sum() == 0
    td.set_at_("s", "other", 1)
    assert td["s"] == ["text", "other", "text"]


def test_set_at_errors_change_nothing():
    td = nested()
    before = td.clone()
    with pytest.raises(KeyError, match="zz"):
        td.set_at_("zz", 1, 0)
    with pytest.raises(KeyError, match=r"\('zz', 'q'\)"):
        td.set_at_(("zz", "q"), 1, 0)
    with pytest.raises(RuntimeError, match="set_at_\\('a'"):
        td.set_at_("a", torch.ones(3), 0)
    with pytest.raises(IndexError, match="set_at_"):
        td.set_at_("a", 1.0, 5)
    assert (td == before).all()


def test_set_at_on_lazy_stack_reaches_members():
    s = stack()
    s.set_at_("a", torch.tensor([5.0, 6.0]), (slice(None), 0))
    s.set_at_(("n", "b"), -1, (1, 1))
    assert s.tensordicts[0]["a"].tolist() == [5.0, 0.0] and s.tensordicts[1]["a"].tolist() == [6.0, 1.0]
    assert s.tensordicts[1]["n", "b"].tolist() == [10, -1]
    with pytest.raises(RuntimeError, match="'x'"):
        s.set_at_("x", 0.0, 0)  # ragged: cannot be addressed densely


def test_copy_at_checks_everything_first():
    td = nested()
    src = TensorDict({"a": torch.full((2, 2), 9.0), "n": {"b": torch.tensor([8, 8])}}, [2])
    assert td.copy_at_(src, slice(0, 2)) is td
    assert td["a"][:2].eq(9).all() and td["a"][2].tolist() == [4.0, 5.0] and td["n", "b"].tolist() == [8, 8, 2]
    before = td.clone()
    bad = TensorDict({"a": torch.zeros(2, 2), "q": torch.zeros(2)}, [2])
    with pytest.raises(KeyError, match="q"):
        td.copy_at_(bad, slice(0, 2))
    assert (td == before).all()


# ---------------------------------------------------------------------------- masked_select
def test_masked_select_matches_boolean_indexing():
    td = nested()
    mask = torch.tensor([True, False, True])
    out = td.masked_select(mask)
    assert type(out) is TensorDict and out.batch_size == torch.Size([2])
    assert torch.equal(out["a"], td["a"][mask]) and torch.equal(out["n", "c"], td["n", "c"][mask])
    assert out.get("s").batch_size == torch.Size([2]) and out["s"] == "text"


def test_masked_select_partial_full_and_trailing_singleton():
    td = TensorDict(a=torch.arange(12.0).view(3, 4), batch_size=[3, 4])
    assert td.masked_select(torch.tensor([True, False, True])).batch_size == torch.Size([2, 4])
    full = td.masked_select(td["a"] > 5)
    assert full.batch_size == torch.Size([6]) and full["a"].tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    assert td.masked_select((td["a"] > 5).unsqueeze(-1)).batch_size == torch.Size([6])


def test_masked_select_errors():
    td = nested()
    with pytest.raises(ValueError, match=r"\[2\].*\[3\]"):
        td.masked_select(torch.tensor([True, False]))
    with pytest.raises(TypeError, match="bool"):
        td.masked_select(torch.tensor([1, 0, 1]))


def test_masked_select_on_lazy_stack_is_dense():
    s = stack().exclude("x")
    out = s.masked_select(torch.tensor([False, True]))
    assert type(out) is TensorDict and out.batch_size == torch.Size([1, 2])
    assert out["n", "b"].tolist() == [[10, 11]]


# ---------------------------------------------------------------------------- conversions
def test_to_tensordict_is_a_deep_dense_copy():
    td = nested()
    out = td.to_tensordict()
    assert type(out) is TensorDict and out["a"] is not td["a"] and torch.equal(out["a"], td["a"])
    out["n", "b"] += 1
    assert td["n", "b"].tolist() == [0, 1, 2] and out["s"] == "text"
    s = stack(1).exclude("x")
    dense = s.to_tensordict()
    assert type(dense) is TensorDict and dense.batch_size == torch.Size([2, 2]) and torch.equal(dense["a"], s["a"])
    holder = TensorDict(p=Pair(x=torch.zeros(3), batch_size=[3]), batch_size=[3])
    assert type(holder.to_tensordict()["p"]) is TensorDict


def test_to_namedtuple_nested_and_dest_cls():
    nt = nested().to_namedtuple()
    assert type(nt).__name__ == "GenericDict" and nt.s == "text" and torch.equal(nt.n.b, torch.arange(3))
    Dest = collections.namedtuple("Dest", ["x", "y"])
    out = TensorDict(x=torch.zeros(2), y=1).to_namedtuple(Dest)
    assert type(out) is Dest and out.y.item() == 1
    with pytest.raises(ValueError, match="field names"):
        TensorDict({"not valid": torch.zeros(())}).to_namedtuple()


def test_to_pytree_without_pytree_type_returns_self():
    td = nested()
    assert td.to_pytree() is td


def test_to_padded_tensor_lazy_stack_with_mask():
    s = stack()
    out = s.to_padded_tensor(padding=-1.0, mask_key="mask")
    assert type(out) is TensorDict and out.batch_size == torch.Size([2, 2])
    expected = torch.full((2, 2, 3), -1.0)
    expected[0, :, :1] = 0.0
    expected[1] = 1.0
    assert torch.equal(out["x"], expected)
    assert torch.equal(out["mask"], expected != -1.0)
    assert torch.equal(out["a"], s["a"]) and torch.equal(out["n", "b"], s["n", "b"])


def test_to_padded_tensor_nested_tensor_leaf_and_nested_lazy():
    nt = torch.nested.nested_tensor([torch.zeros(2), torch.ones(3)], layout=torch.jagged)
    td = TensorDict(a=nt, b=torch.zeros(2), batch_size=[2])
    out = td.to_padded_tensor(padding=-1, mask_key="m")
    assert out["a"].tolist() == [[0.0, 0.0, -1.0], [1.0, 1.0, 1.0]]
    assert out["m"].tolist() == [[True, True, False], [True, True, True]]
    outer = TensorDict(s=stack(), batch_size=[2])
    assert outer.to_padded_tensor()["s", "x"].shape == torch.Size([2, 2, 3])
    with pytest.raises(ValueError, match="no leaf is ragged"):
        nested().to_padded_tensor(mask_key="m")


# ---------------------------------------------------------------------------- introspection
def test_sorted_keys_entry_class_item_shape():
    td = nested()
    td["0"] = torch.zeros(3)
    assert td.sorted_keys == ["0", "a", "n", "s"]
    assert td.entry_class("a") is torch.Tensor and td.entry_class("n") is TensorDict
    assert td.entry_class("s") is NonTensorData and td.entry_class(("n", "b")) is torch.Tensor
    assert td.get_item_shape("a") == torch.Size([3, 2]) and td.get_item_shape("n") == torch.Size([3])
    assert td.get_item_shape(("n", "c")) == torch.Size([3, 4])
    with pytest.raises(KeyError, match="zz"):
        td.entry_class("zz")


def test_lazy_introspection_without_stacking():
    s = stack(1)
    assert s.entry_class("x") is torch.Tensor and s.entry_class("n") is LazyStackedTensorDict
    assert s.get_item_shape("x") == torch.Size([2, 2, -1]) and s.get_item_shape("a") == torch.Size([2, 2])
    assert TensorDict(s=s, batch_size=[2, 2]).get_item_shape(("s", "x")) == torch.Size([2, 2, -1])
    assert lazy_stack([TensorDict(t="a"), TensorDict(t="b")]).entry_class("t") is NonTensorStack
    assert s.sorted_keys == ["a", "n", "x"] and s.depth == 1
    assert s.is_contiguous() is False


def test_is_contiguous_data_ptr():
    td = nested()
    assert td.is_contiguous()
    assert not TensorDict(a=torch.zeros(3, 2).t(), batch_size=[2]).is_contiguous()
    ptr = td.data_ptr()
    assert ptr.batch_size == torch.Size([]) and ptr.device == torch.device("cpu")
    assert ptr["a"].item() == td["a"].data_ptr() and ptr["n", "b"].item() == td["n", "b"].data_ptr()
    assert "s" not in ptr.keys()
    view = td["a"][1:]
    assert TensorDict(v=view).data_ptr(storage=True)["v"].item() == td["a"].untyped_storage().data_ptr()
    s = stack()
    lazy_ptr = s.data_ptr()
    assert sorted(lazy_ptr.keys()) == ["0", "1"] and lazy_ptr["1", "x"].item() == s.tensordicts[1]["x"].data_ptr()


def test_param_count_bytes_depth():
    td = nested()
    assert td.param_count() == 6 + 3 + 12
    assert td.bytes() == 6 * 4 + 3 * 8 + 12 * 4
    shared = torch.zeros(5)
    dup = TensorDict(a=shared, b=shared, n={"c": shared})
    assert dup.param_count() == 15 and dup.param_count(count_duplicates=False) == 5
    assert dup.bytes(count_duplicates=False) == 20
    w = torch.ones(3, requires_grad=True)
    w.sum().backward()
    assert TensorDict(w=w).bytes() == 24  # data and grad
    assert stack().param_count() == 4 + 2 + 6 + 4  # members' leaves, ragged ones included
    assert TensorDict(a=1).depth == 0 and td.depth == 1
    assert TensorDict({"a": {"b": {"c": 1}}}).depth == 2 and TensorDict({"a": {"b": {}}}).depth == 0


def test_device_properties():
    td = nested()
    assert not td.is_cpu and not td.is_cuda and not td.is_meta
    assert td.to("cpu").is_cpu
    assert TensorDict(a=torch.zeros(2, device="meta"), device="meta").is_meta


# ---------------------------------------------------------------------------- non-tensor entries
def test_non_tensor_helpers():
    td = TensorDict({"a": torch.zeros(()), "n": {"s": "x", "t": torch.zeros(())}, "u": "y"})
    assert (
        td.is_non_tensor("u")
        and td.is_non_tensor(("n", "s"))
        and not td.is_non_tensor("a")
        and not td.is_non_tensor("n")
    )
    with pytest.raises(KeyError, match="zz"):
        td.is_non_tensor("zz")
    assert [k for k, _ in td.non_tensor_items()] == ["u"]
    items = dict(td.non_tensor_items(include_nested=True))
    assert set(items) == {("n", "s"), "u"} and items[("n", "s")].data == "x"
    filtered = td.filter_non_tensor_data()
    assert sorted(filtered.keys(True, True), key=str) == [("n", "t"), "a"] and "u" in td.keys()


def test_set_non_tensor_keeps_python_objects():
    td = nested()
    assert td.set_non_tensor(("meta", "id"), 3) is td
    entry = td.get(("meta", "id"))
    assert isinstance(entry, NonTensorData) and entry.data == 3 and entry.batch_size == torch.Size([3])
    assert td.get("meta").batch_size == torch.Size([3]) and td.is_non_tensor(("meta", "id"))
    td.set_non_tensor(("n", "tag"), [1, 2])
    assert td.get_non_tensor(("n", "tag")) == [1, 2]
    with pytest.raises(KeyError, match="leaf"):
        td.set_non_tensor(("a", "x"), 1)
    td.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        td.set_non_tensor("new", 1)


def test_lazy_non_tensor_items_are_stacked():
    s = lazy_stack([TensorDict(a=0, t="a"), TensorDict(a=1, t="b")])
    ((key, value),) = s.non_tensor_items()
    assert key == "t" and value.tolist() == ["a", "b"] and s.is_non_tensor("t")
    filtered = s.filter_non_tensor_data()
    assert isinstance(filtered, LazyStackedTensorDict) and list(filtered.keys()) == ["a"]


# ---------------------------------------------------------------------------- replace / new_*
def test_replace_is_a_shallow_copy():
    td = nested()
    assert td.replace() is td and td.replace({}) is td
    out = td.replace({("n", "b"): torch.zeros(3)}, a=torch.ones(3, 2))
    assert out is not td and out["a"].eq(1).all() and out["n", "b"].eq(0).all()
    assert td["n", "b"].tolist() == [0, 1, 2] and td["a"][0, 1] == 1.0
    assert out["n", "c"] is td["n", "c"]
    assert td.replace(TensorDict(z=torch.zeros(3), batch_size=[3]))["z"].shape == torch.Size([3])
    with pytest.raises(TypeError, match="at most one"):
        td.replace({}, {})
    with pytest.raises(TypeError, match="int"):
        td.replace(5)
    with pytest.raises(RuntimeError, match="'a'"):
        td.replace(a=torch.zeros(4))
    assert isinstance(stack().replace(a=torch.ones(2, 2)), LazyStackedTensorDict)


def test_new_zeros_ones_empty_full():
    td = TensorDict(
        {"a": torch.ones(3, 2), "n": {"b": torch.ones(3, 5, dtype=torch.int64)}, "s": "t"}, [3], names=["x"]
    )
    z = td.new_zeros(4, 5)
    assert type(z) is TensorDict and z.batch_size == torch.Size([4, 5]) and z.names == [None, "x"]
    assert z["a"].shape == torch.Size([4, 5, 2]) and z["a"].eq(0).all() and z["n", "b"].dtype == torch.int64
    assert z.get("s").batch_size == torch.Size([4, 5]) and z["s"] == "t"
    assert td.new_ones((2,))["n", "b"].eq(1).all() and td.new_ones((2,)).names == ["x"]
    assert td.new_empty(2)["a"].shape == torch.Size([2, 2])
    full = td.new_full([2], 7, dtype=torch.float64)
    assert full["n", "b"].dtype == torch.float64 and full["n", "b"].eq(7).all()
    assert td.new_zeros(2, dtype=torch.float32, requires_grad=True)["a"].requires_grad
    with pytest.raises(TypeError, match="new_zeros"):
        td.new_zeros("a")
    lazy_new = stack().exclude("x").new_zeros(4)
    assert type(lazy_new) is TensorDict and lazy_new["n", "b"].shape == torch.Size([4])


def test_new_zeros_rejects_non_uniform_stacks():
    td = TensorDict(s=NonTensorStack.from_list(["a", "b"]), batch_size=[2])
    with pytest.raises(RuntimeError, match="new_zeros: key \\('s',\\)"):
        td.new_zeros(3)


def test_new_tensor_from_tensor_and_collection():
    td = TensorDict({"a": torch.ones(3, 2), "n": {"b": torch.ones(3, dtype=torch.int64)}}, [3])
    data = torch.arange(4.0)
    with pytest.warns(UserWarning, match="To copy construct from a tensor"):  # as torch.Tensor.new_tensor
        out = td.new_tensor(data)
    assert out.batch_size == torch.Size([4]) and out.device == data.device
    assert torch.equal(out["a"], data) and out["n", "b"].dtype == torch.int64 and out["n", "b"].tolist() == [0, 1, 2, 3]
    assert out["a"].data_ptr() != data.data_ptr()
    src = TensorDict({"a": torch.full((2, 2), 2.0), "n": {"b": torch.full((2,), 3.0)}}, [2])
    with pytest.warns(UserWarning, match="To copy construct"):
        paired = td.new_tensor(src)
    assert (
        paired.batch_size == torch.Size([2])
        and paired["n", "b"].dtype == torch.int64
        and paired["n", "b"].tolist() == [3, 3]
    )
    with pytest.raises(KeyError, match="'a'"), pytest.warns(UserWarning):
        td.new_tensor(TensorDict(n={"b": torch.zeros(2)}, batch_size=[2]))
    assert td.new_tensor([1.0, 2.0])["a"].tolist() == [1.0, 2.0]  # Python data: no warning


# ---------------------------------------------------------------------------- in-place state
def test_zero_grad():
    p = TensorDict(w=torch.ones(3, requires_grad=True), n={"v": torch.ones(2, requires_grad=True)}, f=torch.ones(1))
    (p["w"].sum() + p["n", "v"].sum()).backward()
    assert p.zero_grad(set_to_none=False) is p
    assert p["w"].grad.tolist() == [0.0, 0.0, 0.0] and p["n", "v"].grad.tolist() == [0.0, 0.0]
    p.zero_grad()
    assert p["w"].grad is None and p["n", "v"].grad is None


def test_clear_and_popitem():
    td = nested()
    assert td.popitem()[0] == "s"
    key, value = td.popitem()
    assert key == "n" and isinstance(value, TensorDict) and list(td.keys()) == ["a"]
    assert td.clear() is td and list(td.keys()) == [] and td.batch_size == torch.Size([3])
    with pytest.raises(KeyError, match="no entries"):
        td.popitem()
    locked = nested().lock_()
    with pytest.raises(RuntimeError, match="locked"):
        locked.clear()
    with pytest.raises(RuntimeError, match="locked"):
        locked.popitem()
    assert sorted(locked.keys()) == ["a", "n", "s"]


def test_lazy_clear_and_popitem():
    s = stack()
    key, value = s.popitem()
    assert key == "n" and torch.equal(value["b"], torch.tensor([[0, 1], [10, 11]]))
    assert all("n" not in m.keys() for m in s.tensordicts)
    with pytest.raises(RuntimeError, match="'x'"):
        s.popitem()  # ragged: raised before the delete
    assert all("x" in m.keys() for m in s.tensordicts)
    s.tensordicts[1]["only1"] = torch.zeros(2)
    s.clear()
    assert [list(m.keys()) for m in s.tensordicts] == [[], []]


def test_auto_device_():
    td = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, [2])
    assert td.auto_device_() is td and td.device == torch.device("cpu") and td["n"].device == torch.device("cpu")
    mixed = TensorDict({"a": torch.zeros(2), "n": {"b": torch.zeros(2, device="meta")}}, [2])
    mixed.auto_device_()
    assert mixed.device is None and mixed["n"].device is None
    s = stack()
    s.auto_device_()
    assert s.device == torch.device("cpu") and all(m.device == torch.device("cpu") for m in s.tensordicts)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinning needs an accelerator")
def test_pin_memory_():
    td = nested()
    assert td.pin_memory_() is td and td["a"].is_pinned() and td["n", "b"].is_pinned()


def test_filter_empty_():
    td = TensorDict({"a": torch.zeros(()), "e": {}, "n": {"m": {}, "x": torch.zeros(())}, "o": {"p": {}}})
    td.filter_empty_()
    assert sorted(td.keys(True), key=str) == [("n", "x"), "a", "n"]


# ---------------------------------------------------------------------------- cat_tensors / stack_tensors
def combine_source() -> TensorDict:
    return TensorDict(a=torch.zeros(2, 3), b=torch.ones(2, 3), n={"c": torch.full((2, 3), 2.0)}, batch_size=[2])


def test_cat_tensors_removes_or_keeps_entries():
    td = combine_source()
    assert td.cat_tensors("a", ("n", "c"), out_key="z", dim=1) is td
    assert torch.equal(td["z"], torch.cat([torch.zeros(2, 3), torch.full((2, 3), 2.0)], 1))
    assert sorted(td.keys(True), key=str) == ["b", "n", "z"]
    kept = combine_source()
    kept.cat_tensors("a", "b", out_key=("q", "ab"), dim=-1, keep_entries=True)
    assert (
        kept["q", "ab"].shape == torch.Size([2, 6]) and "a" in kept.keys() and kept["q"].batch_size == torch.Size([2])
    )


def test_stack_tensors():
    td = combine_source()
    td.stack_tensors("a", "b", out_key="z", dim=1)
    assert torch.equal(td["z"], torch.stack([torch.zeros(2, 3), torch.ones(2, 3)], 1)) and "a" not in td.keys()
    s = stack()
    s.stack_tensors("a", ("n", "b"), out_key="ab", dim=-1)
    assert torch.equal(
        s["ab"], torch.stack([torch.tensor([[0.0, 0.0], [1.0, 1.0]]), torch.tensor([[0, 1], [10, 11]]).float()], -1)
    )
    assert "a" not in s.tensordicts[0].keys()


def test_combine_errors_change_nothing():
    td = combine_source()
    cases = [
        (lambda: td.cat_tensors("a", "zz", out_key="z"), KeyError, "zz"),
        (lambda: td.cat_tensors("a", "b", out_key="z"), RuntimeError, r"does not start with the batch size \[2\]"),
        (lambda: td.cat_tensors("a", "n", out_key="z", dim=1), TypeError, "'n' holds a TensorDict"),
        (lambda: td.stack_tensors("a", torch.zeros(1), out_key="z"), TypeError, "Keys"),
        (lambda: td.cat_tensors(out_key="z"), ValueError, "at least one key"),
        (lambda: td.cat_tensors("a", "b", out_key=("a", "z"), dim=1), KeyError, "leaf"),
    ]
    for fn, err, match in cases:
        with pytest.raises(err, match=match):
            fn()
        assert sorted(td.keys(True), key=str) == [("n", "c"), "a", "b", "n"]
    td.lock_()
    with pytest.raises(RuntimeError, match="locked"):
        td.cat_tensors("a", "b", out_key="z", dim=1)
    assert "a" in td.keys()


# ---------------------------------------------------------------------------- separates
def separable() -> TensorDict:
    return TensorDict(
        {"a": torch.zeros(3), "b": torch.ones(3), "n": {"c": torch.ones(3), "d": torch.zeros(3)}, "e": {}}, [3]
    )


def test_separates_moves_keys_out():
    td = separable()
    out = td.separates("a", ("n", "c"))
    assert sorted(out.keys(True), key=str) == [("n", "c"), "a", "n"] and out.batch_size == torch.Size([3])
    assert sorted(td.keys(True), key=str) == [("n", "d"), "b", "n"]  # the empty "e" is filtered
    td = separable()
    td.separates(("n", "c"), ("n", "d"), filter_empty=False)
    assert sorted(td.keys(True), key=str) == ["a", "b", "e", "n"]
    td = separable()
    out = td.separates("n", ("n", "c"))
    assert sorted(out["n"].keys()) == ["c", "d"] and "n" not in td.keys()


def test_separates_missing_keys():
    td = separable()
    with pytest.raises(KeyError, match="zz"):
        td.separates("a", "zz")
    assert "a" in td.keys()
    out = td.separates("a", "zz", strict=False)
    assert list(out.keys()) == ["a"] and "a" not in td.keys()
    out = td.separates("b", "zz", default=torch.full((3,), 5.0))
    assert out["zz"].tolist() == [5.0, 5.0, 5.0] and "b" not in td.keys()
    locked = separable().lock_()
    with pytest.raises(RuntimeError, match="locked"):
        locked.separates("a")


def test_separates_on_lazy_stack():
    s = stack()
    out = s.separates("a")
    assert isinstance(out, LazyStackedTensorDict) and torch.equal(out["a"], torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
    assert all("a" not in m.keys() for m in s.tensordicts)


# ---------------------------------------------------------------------------- tensor classes
def test_tensorclass_forwarding():
    c = Pair(x=torch.arange(6.0).view(3, 2), label="hi", batch_size=[3])
    assert type(c.masked_select(torch.tensor([True, False, True]))) is Pair
    assert type(c.new_zeros(4)) is Pair and c.new_zeros(4).batch_size == torch.Size([4])
    assert type(c.data_ptr()) is TensorDict and type(c.to_tensordict()) is TensorDict
    assert type(c.filter_non_tensor_data()) is Pair and type(c.replace(x=torch.ones(3, 2))) is Pair
    assert c.is_non_tensor("label") and [k for k, _ in c.non_tensor_items()] == ["label"]
    assert c.sorted_keys == ["label", "x"] and c.depth == 0 and c.param_count() == 6
    assert torch.equal(c.get_at("x", 1), torch.tensor([2.0, 3.0]))
    c.set_at_("x", 0.0, 1)
    assert c.x[1].tolist() == [0.0, 0.0]
    assert c.zero_grad() is c
    assert c.popitem()[0] == "label" and c.label is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_devices():
    td = nested().to("cuda")
    assert td.is_cuda and not td.is_cpu
    z = td.new_zeros(2)
    assert z.is_cuda and z["a"].is_cuda
    assert td.new_zeros(2, device="cpu").is_cpu and td.new_zeros(2, device="cpu")["n", "b"].device.type == "cpu"
    moved = td.new_tensor(torch.arange(3))
    assert moved.is_cpu and moved["a"].device.type == "cpu"  # the device of data
    mixed = TensorDict({"a": torch.zeros(2, device="cuda"), "b": torch.zeros(2)}, [2])
    assert mixed.auto_device_().device is None
    on_gpu = TensorDict({"a": torch.zeros(2, device="cuda"), "n": {"b": torch.zeros(2, device="cuda")}}, [2])
    assert on_gpu.auto_device_().is_cuda and on_gpu["n"].is_cuda
    assert (
        td.to_tensordict().is_cuda and td.masked_select(torch.tensor([True, False, True], device="cuda"))["a"].is_cuda
    )
    s = stack().to("cuda")
    assert s.to_padded_tensor(mask_key="m")["m"].is_cuda


def test_create_nested_builds_empty_collections_along_the_key():
    td = TensorDict(a=torch.zeros(3, 2), batch_size=[3], names=["n"])
    assert td.create_nested("root") is td
    td.create_nested(("some", "nested", "key"))
    for key in ("root", ("some", "nested", "key"), ("some", "nested"), "some"):
        sub = td.get(key)
        assert isinstance(sub, TensorDict) and sub.batch_size == td.batch_size and sub.names == ["n"]
    assert list(td["root"].keys()) == [] and list(td["some", "nested", "key"].keys()) == []
    td.set(("root", "x"), torch.ones(3))
    td.create_nested("root")  # replaces what was there
    assert list(td["root"].keys()) == []
    with td.lock_(), pytest.raises(RuntimeError):
        td.create_nested("other")


def test_as_tensor_turns_memmapped_leaves_into_plain_views(tmp_path):
    from tdict import MemoryMappedTensor

    td = TensorDict(a=torch.arange(3.0), sub=TensorDict(b=torch.ones(3), batch_size=[3]), batch_size=[3])
    td.memmap_(tmp_path)
    assert isinstance(td["a"], MemoryMappedTensor)
    plain = td.as_tensor()
    for key in ("a", ("sub", "b")):
        assert type(plain[key]) is torch.Tensor and plain[key].data_ptr() == td[key].data_ptr()
        assert torch.equal(plain[key], td[key])
    assert td.clear_refs_for_compile_() is td


def test_convert_ellipsis_to_idx():
    from tdict import convert_ellipsis_to_idx

    full = (slice(None),) * 3
    assert convert_ellipsis_to_idx(..., [2, 3, 4]) == full
    assert convert_ellipsis_to_idx((0, ..., 1), [2, 3, 4]) == (0, slice(None), 1)
    assert convert_ellipsis_to_idx((..., None, 0), [2, 3, 4]) == (slice(None), slice(None), None, 0)
    assert convert_ellipsis_to_idx((0, 1), [2, 3, 4]) == (0, 1)
    x = torch.zeros(2, 3, 4)
    for index in [(0, ..., 1), (..., 2), (None, ..., 0)]:  # the converted index selects the same elements
        assert torch.equal(x[index], x[convert_ellipsis_to_idx(index, x.shape)])
    with pytest.raises(RuntimeError, match="one Ellipsis"):
        convert_ellipsis_to_idx((..., 0, ...), [2, 3])
    with pytest.raises(RuntimeError, match="addresses 3 dims"):
        convert_ellipsis_to_idx((0, 0, ..., 0), [2, 3])


def test_dict_values_are_read_as_tensordicts_by_setitem_at_an_index_and_set_():
    td = TensorDict(a=torch.ones(4, 3), sub=TensorDict(b=torch.ones(4, 2), batch_size=[4]), batch_size=[4])
    td[1:3] = {"a": torch.zeros(2, 3), "sub": {"b": torch.full((2, 2), 5.0)}}
    assert td["a"].sum(-1).tolist() == [3.0, 0.0, 0.0, 3.0]
    assert td["sub", "b"][:, 0].tolist() == [1.0, 5.0, 5.0, 1.0]
    b_before = td["sub", "b"]
    td.set_("sub", {"b": torch.full((4, 2), 7.0)})
    assert td["sub", "b"] is b_before and (b_before == 7).all()  # written in place


def test_setitem_at_an_index_creates_the_keys_the_destination_lacks():
    # pre-allocation: an empty TensorDict filled row by row
    td = TensorDict(batch_size=[3])
    for i in range(3):
        td[i] = TensorDict(x=torch.full((2,), float(i)), sub=TensorDict(y=torch.tensor(i)))
    assert td["x"].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]] and td["sub", "y"].tolist() == [0, 1, 2]
    assert td["sub", "y"].dtype == torch.int64
    td[1:] = {"z": torch.ones(2, dtype=torch.bool)}
    assert td["z"].tolist() == [False, True, True]  # created zero-filled, then written
    td.lock_()
    with pytest.raises(RuntimeError, match="locked.*'w'"):
        td[0] = {"w": torch.ones(()), "x": torch.full((2,), 7.0)}
    assert "w" not in td.keys() and td["x"][0].tolist() == [0.0, 0.0]  # nothing written


def test_copy_at_fast_is_tensor_only():
    td = TensorDict({"val": NonTensorData(data=0, batch_size=[10]), "x": torch.zeros(10)}, [10])
    src = TensorDict({"val": NonTensorData(data=1, batch_size=[5]), "x": torch.ones(5)}, [5])
    with pytest.raises(RuntimeError, match=r"fast=True\) copies tensors only.*\['val'\]"):
        td.copy_at_(src, slice(1, None, 2))
    assert td.get("val").tolist() == [0] * 10 and td["x"].sum() == 0  # nothing written
    with pytest.warns(FutureWarning, match="fast=None"):
        td.copy_at_(src, slice(1, None, 2), fast=None)
    assert td.get("val").tolist() == [0, 1] * 5 and td["x"].tolist() == [0.0, 1.0] * 5
    fresh = TensorDict({"x": torch.zeros(4)}, [4])
    fresh.copy_at_(TensorDict({"x": torch.ones(2)}, [2]), slice(0, 2))  # tensors only: the fast path
    assert fresh["x"].tolist() == [1.0, 1.0, 0.0, 0.0]
