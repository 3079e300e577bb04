"""torch.vmap over functions that take and return TensorDicts (through the pytree registration).

Every result is compared with a reference Python loop over the mapped dim.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_map

from tdict import TensorDict


def _td(*batch: int, feat: int = 3) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.randn(*batch, feat),
            "reward": torch.randn(*batch),
            "next": {"obs": torch.randn(*batch, feat), "done": torch.rand(*batch) > 0.5},
        },
        batch_size=list(batch),
    )


def assert_td_equal(actual: TensorDict, expected: TensorDict) -> None:
    assert type(actual) is TensorDict
    assert actual.batch_size == expected.batch_size
    assert sorted(map(str, actual.keys(True, True))) == sorted(map(str, expected.keys(True, True)))
    for key, value in expected.items(True, True):
        other = actual.get(key)
        assert other.shape == value.shape and other.dtype == value.dtype, key
        torch.testing.assert_close(other, value, msg=lambda m: f"{key}: {m}")
    for key, value in expected.items(True):
        if isinstance(value, TensorDict):
            assert actual.get(key).batch_size == value.batch_size, key


def step(td: TensorDict) -> TensorDict:
    """A function written for one unbatched sample (it reads td.batch_size)."""
    assert td.batch_size == torch.Size([]) and td["next"].batch_size == torch.Size([])
    out = TensorDict(
        {"value": td["obs"].sum() + td["reward"], "next": {"obs": td["next", "obs"] * 2}},
        batch_size=td.batch_size,
    )
    out.set(("next", "scaled"), torch.where(td["next", "done"], 0.0, td["reward"]))
    return out


def test_in_dims_0_matches_loop():
    td = _td(5)
    expected = torch.stack([step(td[i]) for i in range(5)], 0)
    assert_td_equal(torch.vmap(step)(td), expected)


def test_in_dims_1_matches_loop():
    td = _td(2, 5)
    seen = []

    def f(t):
        seen.append((t.batch_size, t["next"].batch_size, t["obs"].shape))
        return t.apply(lambda x: x * 2 if x.dtype.is_floating_point else x).set("mean", t["obs"].mean(-1))

    out = torch.vmap(f, in_dims=1)(td)
    assert seen == [(torch.Size([2]), torch.Size([2]), torch.Size([2, 3]))]
    expected = torch.stack([f(td[:, i]) for i in range(5)], 0)
    assert out.batch_size == torch.Size([5, 2])
    assert_td_equal(out, expected)


def test_out_dims_1_matches_loop():
    td = _td(4, 6)
    f = lambda t: t.select("obs", "reward").apply(torch.sin)  # noqa: E731
    out = torch.vmap(f, in_dims=0, out_dims=1)(td)
    expected = torch.stack([f(td[i]) for i in range(4)], 1)
    assert out.batch_size == torch.Size([6, 4])
    assert_td_equal(out, expected)


def test_exact_dim_when_shapes_are_ambiguous():
    # batch [4] with [4, 4] leaves: after removing dim 0 the leaves still "start with" the old
    # batch size, so only vmap's own bookkeeping tells the mapped dim apart.
    td = TensorDict({"m": torch.randn(4, 4)}, batch_size=[4])
    seen = []

    def f(t):
        seen.append(t.batch_size)
        return t.apply(lambda x: x @ x)

    out = torch.vmap(f)(td)
    assert seen == [torch.Size([])]
    assert out.batch_size == torch.Size([4])
    torch.testing.assert_close(out["m"], torch.stack([td["m"][i] @ td["m"][i] for i in range(4)]))


def test_mixed_args_tuple_in_dims_and_tensor_output():
    params = TensorDict({"w": torch.randn(3, 4, 2), "b": torch.randn(3, 2)}, batch_size=[3])
    x = torch.randn(5, 4)

    def linear(p, inp):
        assert p.batch_size == torch.Size([])
        return inp @ p["w"] + p["b"]

    out = torch.vmap(linear, in_dims=(0, None))(params, x)
    expected = torch.stack([linear(params[i], x) for i in range(3)])
    torch.testing.assert_close(out, expected)


def test_tuple_output_of_td_and_tensor():
    td = _td(3)

    def f(t):
        return t.exclude("next"), t["obs"].norm()

    out_td, norms = torch.vmap(f)(td)
    assert_td_equal(out_td, td.exclude("next"))
    torch.testing.assert_close(norms, td["obs"].norm(dim=-1))


def test_td_built_inside_from_batched_tensors():
    x = torch.randn(6, 2)

    def f(row):
        return TensorDict({"x": row, "sq": {"v": row**2}}, batch_size=[])

    out = torch.vmap(f)(x)
    assert out.batch_size == torch.Size([6]) and out["sq"].batch_size == torch.Size([6])
    torch.testing.assert_close(out["sq", "v"], x**2)


def test_nested_vmap():
    td = _td(3, 4)

    def inner(t):
        assert t.batch_size == torch.Size([])
        return t.select("obs").apply(lambda v: v.cumsum(-1))

    out = torch.vmap(torch.vmap(inner))(td)
    expected = torch.stack([torch.stack([inner(td[i, j]) for j in range(4)]) for i in range(3)])
    assert_td_equal(out, expected)


def test_names_follow_the_mapped_dim():
    td = _td(3, 4).refine_names("env", "time")

    def f(t):
        assert t.names == ["time"]
        return t

    out = torch.vmap(f)(td)
    assert out.batch_size == torch.Size([3, 4])
    assert out.names == [None, "time"]  # the mapped dim comes back unnamed


def test_chunked_vmap():
    td = _td(7)
    assert_td_equal(torch.vmap(step, chunk_size=3)(td), torch.vmap(step)(td))


def test_non_tensor_entries_ride_along():
    td = TensorDict({"obs": torch.randn(4, 2), "task": "reach"}, batch_size=[4])

    def f(t):
        assert t["task"] == "reach" and t.batch_size == torch.Size([])
        return t.set("obs2", t["obs"] * 2)

    out = torch.vmap(f)(td)
    assert out["task"] == "reach" and out.get("task").batch_size == torch.Size([4])
    torch.testing.assert_close(out["obs2"], td["obs"] * 2)


def test_tree_map_inside_vmap_keeps_batch_size():
    td = _td(5, 2)

    def f(t):
        # flattened and rebuilt inside the vmap level: nothing is mapped, batch size [2] stays
        u = tree_map(lambda x: x.sum(-1) if x.dim() == 2 else x, t)
        assert u.batch_size == torch.Size([2])
        return u

    out = torch.vmap(f)(td)
    assert out.batch_size == torch.Size([5, 2])
    torch.testing.assert_close(out["obs"], td["obs"].sum(-1))


def test_mismatched_mapped_sizes_raise():
    td = _td(3)
    with pytest.raises(ValueError, match="same size"):
        torch.vmap(lambda a, b: a, in_dims=(0, 0))(td, _td(4))


def test_tensorclass_entries_follow_the_mapped_dim():
    from tdict import tensorclass

    @tensorclass
    class Pose:
        pos: torch.Tensor

    # the only entry is a tensor class whose leaves are [4, 4]: the batch size is found through it
    td = TensorDict({"pose": Pose(pos=torch.randn(4, 4), batch_size=[4])}, batch_size=[4])

    def f(t):
        assert t.batch_size == torch.Size([]) and t["pose"].batch_size == torch.Size([])
        return t

    out = torch.vmap(f)(td)
    assert out.batch_size == torch.Size([4])
    assert type(out["pose"]) is Pose and out["pose"].batch_size == torch.Size([4])
    torch.testing.assert_close(out["pose"].pos, td["pose"].pos)
