"""DreamerV3DiscreteActor (modules/dreamer_actor.py): mixed probabilities against the unimix formula,
keys, shapes and dtypes, the deterministic mode, log-probabilities and straight-through samples."""

from __future__ import annotations

from typing import cast

import pytest
import torch
from rl_objectives.modules import DreamerV3DiscreteActor
from tdict import TensorDict
from tdict.nn import InteractionType, set_interaction_type

S, H, N = 6, 4, 5


def _data(batch: int = 7) -> TensorDict:
    return TensorDict({"state": torch.randn(batch, S), "belief": torch.randn(batch, H)}, [batch])


def _raw_logits(actor: DreamerV3DiscreteActor, data: TensorDict) -> torch.Tensor:
    net = actor[0].module
    return net.logits_head(net.backbone(torch.cat([data["belief"], data["state"]], -1)))


@pytest.mark.parametrize("unimix", [0.0, 0.01, 0.3])
def test_unimix_probabilities_match_formula(unimix):
    torch.manual_seed(0)
    actor = DreamerV3DiscreteActor(S + H, N, depth=2, num_cells=16, unimix=unimix)
    with torch.no_grad():
        actor[0].module.logits_head.weight.mul_(100.0)  # move away from uniform
    data = _data()
    out = actor(data.clone())
    raw = _raw_logits(actor, data)
    expected = (1 - unimix) * torch.exp(raw) / torch.exp(raw).sum(-1, keepdim=True) + unimix / N
    torch.testing.assert_close(out["logits"].exp(), expected, rtol=1e-5, atol=1e-6)
    assert out["logits"].dtype == torch.float32 and out["logits"].shape == (7, N)
    assert (out["logits"].exp() >= unimix / N - 1e-7).all()


def test_keys_shapes_and_log_prob():
    torch.manual_seed(1)
    actor = DreamerV3DiscreteActor(S + H, N, depth=1, num_cells=8)
    assert actor.in_keys == ["state", "belief"]
    out = actor(_data())
    assert out["action"].shape == (7, N) and out["action"].dtype == torch.int64
    assert (out["action"].sum(-1) == 1).all()
    assert out["action_log_prob"].shape == (7,)
    expected = (out["logits"] * out["action"]).sum(-1)  # log p of the drawn action
    torch.testing.assert_close(out["action_log_prob"], expected)


def test_deterministic_mode_is_argmax_and_custom_keys():
    torch.manual_seed(2)
    actor = DreamerV3DiscreteActor(
        S + H,
        N,
        depth=1,
        num_cells=8,
        in_keys=["z", "h"],
        action_key=("agent", "act"),
        logits_key="lg",
        log_prob_key="lp",
    )
    with torch.no_grad():
        actor[0].module.logits_head.weight.mul_(100.0)
    data = TensorDict({"z": torch.randn(5, S), "h": torch.randn(5, H)}, [5])
    with set_interaction_type(InteractionType.DETERMINISTIC):
        out = actor(data)
    assert set(out.keys(True, True)) >= {("agent", "act"), "lg", "lp"}
    expected = torch.nn.functional.one_hot(out["lg"].argmax(-1), N)
    assert torch.equal(out["agent", "act"], expected)


def test_head_init_scale_and_rsample_gradient():
    torch.manual_seed(3)
    actor = DreamerV3DiscreteActor(S + H, N, depth=2, num_cells=64)
    head = actor[0].module.logits_head
    assert head.weight.abs().max() < 0.01 * 2 * 1.1368 / 64**0.5 + 1e-6  # 0.01 x the truncated normal
    assert torch.equal(head.bias, torch.zeros(N))
    data = _data()
    dist = actor.get_dist(data)
    action = dist.rsample()
    assert action.shape == (7, N) and action.requires_grad
    (action * torch.arange(N)).sum().backward()
    assert head.weight.grad is not None and head.weight.grad.abs().sum() > 0
    logits = cast(torch.distributions.OneHotCategorical, dist).logits.log_softmax(-1)
    expected = logits.gather(-1, action.argmax(-1, keepdim=True)).squeeze(-1)
    torch.testing.assert_close(dist.log_prob(action), expected)  # TorchRL's: the argmax's log-probability
    assert dist.log_prob(action).shape == (7,)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="in_keys must hold the state and belief keys"):
        DreamerV3DiscreteActor(S + H, N, in_keys=["state"])
    with pytest.raises(ValueError, match="depth must be a positive int, got 0"):
        DreamerV3DiscreteActor(S + H, N, depth=0)
    with pytest.raises(ValueError, match="unimix must be in \\[0, 1\\), got 1.0"):
        DreamerV3DiscreteActor(S + H, N, unimix=1.0)
    with pytest.raises(ValueError, match="out_features must be a positive int"):
        DreamerV3DiscreteActor(S + H, 0)


def test_net_compile_fullgraph_equals_eager():
    torch.manual_seed(4)
    net = DreamerV3DiscreteActor(S + H, N, depth=2, num_cells=16)[0].module
    state, belief = torch.randn(3, S), torch.randn(3, H)
    compiled = torch.compile(net, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(state, belief), net(state, belief))
