"""TensorDict.from_schema (pre-allocated zeros on each storage) and the arithmetic ``default=``
(other keys: the intersection, or a value standing in for the missing side)."""

from __future__ import annotations

import pytest
import torch

from tdict import MemoryMappedTensor, TensorDict, TensorDictBase

SCHEMA = {"obs": ([4, 4], torch.float32), "action": ([2], torch.int64), "reward": ([], torch.float32)}


@pytest.mark.parametrize("storage", [None, "memmap", "shared"])
def test_from_schema_allocates_zeros_of_each_shape_and_dtype(storage, tmp_path):
    kwargs = {"prefix": str(tmp_path)} if storage == "memmap" else {}
    td = TensorDictBase.from_schema(SCHEMA, batch_size=[8], storage=storage, **kwargs)
    assert td.batch_size == (8,)
    for key, (shape, dtype) in SCHEMA.items():
        assert td[key].shape == (8, *shape) and td[key].dtype == dtype and not td[key].any()
    if storage == "memmap":
        assert td.is_memmap() and isinstance(td["obs"], MemoryMappedTensor)
    if storage == "shared":
        assert td.is_shared()
    td[0] = TensorDict(obs=torch.ones(4, 4), action=torch.ones(2, dtype=torch.int64), reward=torch.tensor(1.0))
    assert td["obs"][0].eq(1).all() and not td["obs"][1:].any()
    assert TensorDict.from_schema({"x": ([3], torch.float32)})["x"].shape == (3,)


def test_from_schema_refuses_unknown_backends_and_bad_entries():
    with pytest.raises(ValueError, match="Unknown storage backend"):
        TensorDict.from_schema(SCHEMA, storage="foobar")
    with pytest.raises(NotImplementedError, match="redis"):
        TensorDict.from_schema(SCHEMA, storage="redis")
    with pytest.raises(TypeError, match="schema\\['x'\\]"):
        TensorDict.from_schema({"x": torch.float32})
    with pytest.raises(TypeError, match="filename"):
        TensorDict.from_schema(SCHEMA, storage="h5")


@pytest.mark.parametrize(
    "name, op",
    [
        ("add", lambda a, b: a + b),
        ("sub", lambda a, b: a - b),
        ("mul", lambda a, b: a * b),
        ("div", lambda a, b: a / b),
        ("pow", lambda a, b: a**b),
        ("clamp_min", torch.clamp_min),
        ("clamp_max", torch.clamp_max),
    ],
)
def test_default_fills_the_missing_side_or_keeps_the_common_keys(name, op):
    left = TensorDict(a=torch.tensor(1.0), b=torch.tensor(2.0), sub=TensorDict(c=torch.tensor(3.0)))
    right = TensorDict(b=torch.tensor(4.0), d=torch.tensor(5.0), sub=TensorDict(c=torch.tensor(6.0)))
    with pytest.raises(KeyError):
        getattr(left, name)(right)
    with pytest.raises(KeyError, match="default"):
        getattr(left.exclude("a"), name)(right)  # the other side has a key this one lacks
    fill = torch.tensor(7.0)
    out = getattr(left, name)(right, default=fill)
    assert set(out.keys(True, True)) == {"a", "b", "d", ("sub", "c")}
    torch.testing.assert_close(out["a"], op(left["a"], fill))
    torch.testing.assert_close(out["d"], op(fill, right["d"]))
    torch.testing.assert_close(out["b"], op(left["b"], right["b"]))
    torch.testing.assert_close(out["sub", "c"], op(left["sub", "c"], right["sub", "c"]))
    common = getattr(left, name)(right, default="intersection")
    assert set(common.keys(True, True)) == {"b", ("sub", "c")}
    with pytest.raises(ValueError, match="intersection"):
        getattr(left, name)(right, default="union")
