"""LossModule.loss_mask_key and _reduce_loss: masked positions are selected out of the reduction."""

from __future__ import annotations

import pytest
import torch
from rl_objectives import AUTO_LOSS_MASK_KEYS, LossModule
from tdict import TensorDict


class Elementwise(LossModule):
    """A loss that reduces the input's ``"x"`` as it is."""

    def __init__(self, reduction="mean", mask_key="auto"):
        super().__init__()
        self.reduction = reduction
        self.loss_mask_key = mask_key

    def forward(self, td):
        return TensorDict({"loss_x": self._reduce_loss(td["x"], td)}, [])


def _td(x, **entries):
    td = TensorDict({"x": x}, x.shape[:1])
    for key, value in entries.items():
        td.set(tuple(key.split("__")) if "__" in key else key, value)
    return td


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_no_mask_entry_changes_nothing(reduction):
    x = torch.randn(5)
    assert Elementwise().loss_mask_key == "auto" and AUTO_LOSS_MASK_KEYS == (("collector", "mask"), "shifted_valid")
    expected = {"mean": x.mean(), "sum": x.sum(), "none": x}[reduction]
    torch.testing.assert_close(Elementwise(reduction)(_td(x))["loss_x"], expected)


def test_auto_masks_are_read_and_anded():
    x = torch.arange(1.0, 7.0)
    collector = torch.tensor([1, 1, 1, 1, 0, 0], dtype=torch.bool)
    shifted = torch.tensor([0, 1, 1, 1, 1, 0], dtype=torch.bool)
    td = _td(x, collector__mask=collector, shifted_valid=shifted)
    torch.testing.assert_close(Elementwise("sum")(td)["loss_x"], x[collector & shifted].sum())
    torch.testing.assert_close(Elementwise("mean")(td)["loss_x"], torch.tensor(3.0))  # mean of 2, 3, 4
    out = Elementwise("none")(td)["loss_x"]
    assert out.shape == x.shape and out.tolist() == [0.0, 2.0, 3.0, 4.0, 0.0, 0.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_masked_non_finite_values_reach_neither_loss_nor_gradient(bad):
    base = torch.ones(4, requires_grad=True)
    x = base + torch.tensor([0.0, 0.0, bad, bad])
    out = Elementwise("mean")(_td(x, collector__mask=torch.tensor([True, True, False, False])))["loss_x"]
    out.backward()
    assert torch.isfinite(out) and base.grad.tolist() == [0.5, 0.5, 0.0, 0.0]


def test_explicit_key_none_and_missing_key():
    x = torch.arange(4.0)
    auto = torch.tensor([True, False, True, False])
    mine = torch.tensor([True, True, False, False])
    td = _td(x, collector__mask=auto, mine__valid=mine)
    assert Elementwise("sum", mask_key=("mine", "valid"))(td)["loss_x"] == x[mine].sum()  # the auto keys ignored
    assert Elementwise("sum", mask_key=None)(td)["loss_x"] == x.sum()
    assert Elementwise("sum", mask_key="absent")(td)["loss_x"] == x.sum()  # nothing to mask with


def test_mask_shapes_broadcast_both_ways():
    # a [B, T, 1] mask over a [B, T] loss, and a [B] mask over a [B, F] loss
    x = torch.ones(2, 3)
    valid = torch.tensor([[True, True, False], [True, False, False]])
    assert Elementwise("sum")(_td(x, shifted_valid=valid.unsqueeze(-1)))["loss_x"] == 3.0
    assert Elementwise("sum")(_td(torch.ones(3, 2), collector__mask=torch.tensor([True, True, False])))["loss_x"] == 4.0
    with pytest.raises(ValueError, match="more non-singleton dimensions"):
        Elementwise("sum")(_td(x, collector__mask=torch.ones(2, 3, 4, dtype=torch.bool)))


def test_a_caller_mask_compacts_with_reduction_none_and_combines():
    x = torch.arange(4.0)
    caller = torch.tensor([True, False, True, False])
    assert Elementwise("none")._reduce_loss(x, None, mask=caller).tolist() == [0.0, 2.0]
    read = torch.tensor([True, True, False, False])
    assert Elementwise("sum")._reduce_loss(x, _td(x, collector__mask=read), mask=caller) == 0.0  # only position 0


@pytest.mark.parametrize("bad", [0, 1.5, (), ("mask", 0), ("mask", None), object()])
def test_bad_loss_mask_key_is_refused_and_the_old_one_kept(bad):
    loss = Elementwise()
    with pytest.raises(ValueError, match="loss_mask_key"):
        loss.loss_mask_key = bad
    assert loss.loss_mask_key == "auto"
