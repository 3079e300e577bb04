"""TensorDict as a pytree node: flatten/unflatten, tree_map, key paths, specs, torch.func."""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

from tdict import TensorDict


def _td() -> TensorDict:
    return TensorDict(
        {"a": torch.randn(4, 3), "b": {"c": torch.randn(4, 2), "d": torch.arange(4)}, "e": torch.zeros(4, 1, 5)},
        batch_size=[4],
        names=["env"],
    )


def test_roundtrip_keeps_structure_and_leaves():
    td = _td()
    leaves, spec = pytree.tree_flatten(td)
    assert [id(x) for x in leaves] == [id(td["a"]), id(td["b", "c"]), id(td["b", "d"]), id(td["e"])]
    assert spec.num_leaves == 4
    back = pytree.tree_unflatten(leaves, spec)
    assert type(back) is TensorDict and back is not td
    assert list(back.keys(True)) == list(td.keys(True))
    assert back.batch_size == td.batch_size and back["b"].batch_size == torch.Size([4])
    assert back.names == ["env"] and back.device is None
    assert back["a"] is td["a"] and back["b", "d"] is td["b", "d"]


def test_tree_map_and_multi_tree_map():
    td = _td()
    plus = pytree.tree_map(lambda x: x + 1, td)
    assert plus.batch_size == td.batch_size and plus.names == ["env"]
    torch.testing.assert_close(plus["b", "c"], td["b", "c"] + 1)
    summed = pytree.tree_map(torch.add, td, plus)
    torch.testing.assert_close(summed["a"], 2 * td["a"] + 1)
    with pytest.raises(ValueError):
        pytree.tree_map(torch.add, td, td.exclude("a"))


def test_spec_equality_is_structural():
    td = _td()
    wider = td.apply(lambda x: torch.cat([x, x], -1) if x.dim() > 1 else x)  # other feature shapes
    assert pytree.tree_structure(td) == pytree.tree_structure(wider)
    assert pytree.tree_structure(td) != pytree.tree_structure(td[:2])  # batch size differs
    assert pytree.tree_structure(td) != pytree.tree_structure(td.rename(None))  # names differ
    assert hash(pytree.tree_structure(td)) == hash(pytree.tree_structure(wider))


def test_key_paths():
    paths = [pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(_td())[0]]
    assert paths == ["['a']", "['b']['c']", "['b']['d']", "['e']"]


def test_non_tensor_entries_are_not_leaves():
    td = TensorDict({"x": torch.ones(2), "label": "cat", "y": torch.zeros(2)}, batch_size=[2])
    leaves, spec = pytree.tree_flatten(td)
    assert len(leaves) == 2
    back = pytree.tree_unflatten([leaf * 3 for leaf in leaves], spec)
    assert list(back.keys()) == ["x", "label", "y"]
    assert back["label"] == "cat" and back.get("label").batch_size == torch.Size([2])
    torch.testing.assert_close(back["x"], torch.full((2,), 3.0))


def test_device_follows_the_leaves():
    td = TensorDict({"a": torch.zeros(3)}, batch_size=[3], device="cpu")
    assert pytree.tree_map(lambda x: x + 1, td).device == torch.device("cpu")
    moved = pytree.tree_map(lambda x: x.to("meta"), td)
    assert moved.device is None and moved["a"].is_meta


def test_batch_size_follows_the_leaves():
    td = TensorDict({"m": torch.randn(4, 4), "v": torch.randn(4, 4)}, batch_size=[4])
    assert pytree.tree_map(lambda x: x[:2], td).batch_size == torch.Size([2])
    # one dim fewer but the batch dims still fit: a feature dim was reduced
    assert pytree.tree_map(lambda x: x.sum(-1), td).batch_size == torch.Size([4])
    assert pytree.tree_map(lambda x: x.sum(), td).batch_size == torch.Size([])
    assert pytree.tree_map(lambda x: x.unsqueeze(0), td).batch_size == torch.Size([1, 4])
    assert pytree.tree_map(lambda x: x.unsqueeze(-1), td).batch_size == torch.Size([4])


def test_structure_only_unflatten():
    # torch builds trees of arbitrary leaves from a spec (vmap does tree_unflatten([0] * n, spec))
    td = _td()
    spec = pytree.tree_structure(td)
    ints = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    assert pytree.tree_structure(ints) == spec
    assert ints.get(("b", "d")) == 2  # a bare container: no validation of what it holds
    shapes = pytree.tree_map(lambda x: x.shape, td)
    assert shapes["a"] == torch.Size([4, 3])


def test_empty_tensordict():
    td = TensorDict(batch_size=[3])
    leaves, spec = pytree.tree_flatten(td)
    assert leaves == []
    back = pytree.tree_unflatten([], spec)
    assert back.batch_size == torch.Size([3]) and back.is_empty()


def test_spec_serialization():
    spec = pytree.tree_structure(_td())
    assert pytree.treespec_loads(pytree.treespec_dumps(spec)) == spec
    with pytest.raises(TypeError, match="non-tensor"):
        pytree.treespec_dumps(pytree.tree_structure(TensorDict({"s": "text"})))


def test_func_grad_returns_a_tensordict():
    td = TensorDict({"a": torch.randn(4, 3), "b": {"c": torch.randn(4)}}, batch_size=[4])
    grads = torch.func.grad(lambda t: (t["a"] ** 2).sum() + t["b", "c"].sum())(td)
    assert grads.batch_size == torch.Size([4]) and grads["b"].batch_size == torch.Size([4])
    torch.testing.assert_close(grads["a"], 2 * td["a"])
    torch.testing.assert_close(grads["b", "c"], torch.ones(4))


def test_jacrev_adds_the_output_dims_to_the_batch():
    td = TensorDict({"a": torch.randn(4, 3)}, batch_size=[4])
    jac = torch.func.jacrev(lambda t: t["a"].sum(-1))(td)
    assert jac.batch_size == torch.Size([4, 4]) and jac["a"].shape == torch.Size([4, 4, 3])
    torch.testing.assert_close(jac["a"], torch.eye(4)[:, :, None].expand(4, 4, 3))


def test_tensorclass_is_a_pytree_node():
    from tdict import tensorclass
    from tdict._core.pytree import register_tensorclass_type

    @tensorclass
    class Obs:
        pos: torch.Tensor
        vel: torch.Tensor

    assert Obs in pytree.SUPPORTED_NODES  # registered when the class is made
    register_tensorclass_type(Obs)  # idempotent
    obs = Obs(pos=torch.randn(5, 2), vel=torch.randn(5, 2), batch_size=[5])
    assert len(pytree.tree_leaves(obs)) == 2
    doubled = pytree.tree_map(lambda x: 2 * x, obs)
    assert type(doubled) is Obs and doubled.batch_size == torch.Size([5])
    torch.testing.assert_close(doubled.vel, 2 * obs.vel)
    speeds = torch.vmap(lambda o: o.vel.norm())(obs)
    torch.testing.assert_close(speeds, obs.vel.norm(dim=-1))


def test_lazy_stack_flattens_into_its_members():
    from tdict import lazy_stack

    a = TensorDict({"x": torch.randn(3, 2)}, [3])
    b = TensorDict({"x": torch.randn(3, 2), "y": torch.zeros(3)}, [3])
    stacked = lazy_stack([a, b], 1)
    leaves, spec = pytree.tree_flatten(stacked)
    assert len(leaves) == 3
    doubled = pytree.tree_unflatten([2 * x for x in leaves], spec)
    assert type(doubled) is type(stacked) and doubled.stack_dim == 1 and doubled.batch_size == torch.Size([3, 2])
    torch.testing.assert_close(doubled.tensordicts[1]["x"], 2 * b["x"])
    assert list(doubled.tensordicts[1].keys()) == ["x", "y"]
    # unmapped (in_dims=None) lazy stacks pass through vmap; a mapped one maps its batch dim (here
    # dim 0, a member dim), not the members' leaves (see test_vmap_dims.py)
    out = torch.vmap(lambda w, s: w * s.tensordicts[0]["x"].sum(), in_dims=(0, None))(torch.ones(4), stacked)
    torch.testing.assert_close(out, torch.full((4,), a["x"].sum().item()))
    torch.testing.assert_close(torch.vmap(lambda s: s.tensordicts[0]["x"].sum())(stacked), a["x"].sum(-1))
