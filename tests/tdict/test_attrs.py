"""td.attrs() and td.to(attrs): per-leaf device/dtype records, checked leaf by leaf."""

from __future__ import annotations

import pytest
import torch

from tdict import TensorAttrs, TensorDict


def _td() -> TensorDict:
    return TensorDict(
        a=torch.zeros(3, 4),
        b=torch.ones(3, dtype=torch.int64),
        sub=TensorDict(c=torch.zeros(3, dtype=torch.float64), batch_size=[3]),
        batch_size=[3],
    )


def test_attrs_record_each_leaf_at_its_key():
    td = _td()
    attrs = td.attrs()
    assert attrs.batch_size == () and attrs.device is None
    for key, value in td.items(include_nested=True, leaves_only=True):
        record = attrs[key]
        assert isinstance(record, TensorAttrs)
        assert (record.tgt_device, record.tgt_dtype, record.tgt_shape) == (value.device, value.dtype, value.shape)
    only = td.attrs(fields=("dtype",))
    assert only["a"].tgt_dtype == torch.float32 and only["a"].tgt_device is None and only["a"].tgt_shape is None
    with pytest.raises(ValueError, match="fields"):
        td.attrs(fields=("layout",))


def test_to_attrs_casts_each_leaf_and_passes_the_others_through():
    td = _td()
    spec = TensorDict(a=TensorAttrs(tgt_dtype=torch.float16, batch_size=()))
    spec.set(("sub", "c"), TensorAttrs(tgt_dtype=torch.int32, batch_size=()))
    out = td.to(spec)
    assert out is not td and out.batch_size == td.batch_size and out.device == td.device
    assert out["a"].dtype == torch.float16 and out["sub", "c"].dtype == torch.int32
    assert out["b"] is td["b"]  # no record: the very tensor
    assert td["a"].dtype == torch.float32  # the source is unchanged
    torch.testing.assert_close(out["a"].float(), td["a"])
    # round trip: a TensorDict cast to another's attrs takes its dtypes
    back = out.to(td.attrs())
    assert {k: v.dtype for k, v in back.items(True, True)} == {k: v.dtype for k, v in td.items(True, True)}
    same = td.to(spec, inplace=True)
    assert same is td and td["a"].dtype == torch.float16


def test_to_attrs_refuses_extra_arguments_before_changing_anything():
    td = _td()
    spec = td.attrs()
    with pytest.raises(TypeError, match="additional positional"):
        td.to(spec, "cpu")
    with pytest.raises(NotImplementedError, match="non_blocking_pin"):
        td.to(spec, non_blocking_pin=True)
    with pytest.raises(TypeError, match="unexpected keyword"):
        td.to(spec, colour="red")
    assert td["a"].dtype == torch.float32
