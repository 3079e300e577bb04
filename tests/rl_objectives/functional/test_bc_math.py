"""rl_objectives.functional.bc against the behaviour-cloning losses written out here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import nn

from rl_objectives.functional.bc import bc_cross_entropy_loss, bc_nll_loss, bc_regression_loss
from rl_objectives.losses.bc import BCLoss


def test_nll_is_minus_the_log_prob():
    loc, scale, action = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]), torch.tensor([0.5, -1.0])
    log_prob = torch.distributions.Normal(loc, scale).log_prob(action)
    expected = 0.5 * ((action - loc) / scale) ** 2 + torch.log(scale) + 0.5 * torch.log(torch.tensor(2 * torch.pi))
    torch.testing.assert_close(bc_nll_loss(log_prob), expected)


@pytest.mark.parametrize("loss_function", ["l2", "mse", "l1", "smooth_l1"])
def test_regression_loss(loss_function):
    pred = torch.tensor([[0.0, 3.0], [0.5, -2.0]])
    action = torch.tensor([[1, 0], [0, 0]])  # integer data actions are cast to the prediction's dtype
    diff = pred - action.float()
    expected = {
        "l2": diff**2,
        "mse": diff**2,
        "l1": diff.abs(),
        "smooth_l1": torch.where(diff.abs() < 1, 0.5 * diff**2, diff.abs() - 0.5),
    }[loss_function]
    torch.testing.assert_close(bc_regression_loss(pred, action, loss_function), expected)


def test_cross_entropy_accepts_index_column_and_one_hot():
    logits = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]]])  # [1, 2, 3]
    index = torch.tensor([[2, 0]])
    expected = -torch.log_softmax(logits, -1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    for action in (index, index.unsqueeze(-1), F.one_hot(index, 3)):
        out = bc_cross_entropy_loss(logits, action)
        assert out.shape == (1, 2)
        torch.testing.assert_close(out, expected)
    torch.testing.assert_close(expected[0, 1], torch.log(torch.tensor(3.0)))
    with pytest.raises(ValueError, match="bc_cross_entropy_loss"):
        bc_cross_entropy_loss(logits, torch.zeros(1, 2, 2))


def _data(n: int = 6) -> TensorDict:
    g = torch.Generator().manual_seed(0)
    return TensorDict({"observation": torch.randn(n, 3, generator=g), "action": torch.randn(n, 2, generator=g)}, [n])


def test_bc_loss_nll_equals_functional_composition():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor())
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"], out_keys=["action"], distribution_class=torch.distributions.Normal
        ),
    )
    td = _data()
    loc, scale = net(td["observation"])
    log_prob = torch.distributions.Normal(loc, scale).log_prob(td["action"]).sum(-1)
    torch.testing.assert_close(BCLoss(actor)(td)["loss_bc"], bc_nll_loss(log_prob).mean())


def test_bc_loss_regression_and_cross_entropy_equal_functional_composition():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    td = _data()
    actor = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    pred = net(td["observation"])
    torch.testing.assert_close(BCLoss(actor)(td)["loss_bc"], bc_regression_loss(pred, td["action"]).mean())
    torch.testing.assert_close(
        BCLoss(actor, loss_function="l1", reduction="sum")(td)["loss_bc"],
        bc_regression_loss(pred, td["action"], "l1").sum(),
    )
    td["action"] = torch.tensor([0, 1, 1, 0, 1, 0])
    torch.testing.assert_close(BCLoss(actor)(td)["loss_bc"], bc_cross_entropy_loss(pred, td["action"]).mean())
