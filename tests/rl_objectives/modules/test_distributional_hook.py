"""DistributionalQValueHook (modules/distributional.py): a network's output replaced by what
DistributionalQValueModule returns, the greedy action of the expected returns written out here."""

from __future__ import annotations

import pytest
import torch
from rl_objectives.modules import DistributionalQValueHook, DistributionalQValueModule
from torch import nn

ATOMS, N, OBS = 5, 4, 3


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(OBS, ATOMS * N), nn.Unflatten(-1, (ATOMS, N)), nn.LogSoftmax(-2))


@pytest.mark.parametrize("action_space", ["one_hot", "one-hot", "categorical"])
def test_hook_matches_module_and_expected_returns(action_space):
    torch.manual_seed(0)
    net, support = _net(), torch.linspace(-2.0, 2.0, ATOMS)
    obs = torch.randn(6, OBS)
    log_probs = net(obs)
    hook = DistributionalQValueHook(action_space, support=support)
    handle = net.register_forward_hook(hook)
    action, values = net(obs)
    handle.remove()
    module = DistributionalQValueModule(action_space.replace("-", "_"), support=support)
    ref_action, ref_values = module(action_value=log_probs)
    assert torch.equal(action, ref_action)
    torch.testing.assert_close(values, log_probs)
    torch.testing.assert_close(ref_values, values)
    greedy = (log_probs.exp() * support[:, None]).sum(-2).argmax(-1)  # argmax_a sum_j p_j(a) z_j
    if action_space == "categorical":
        assert action.shape == (6,)
        assert torch.equal(action, greedy)
    else:
        assert action.shape == (6, N)
        assert torch.equal(action, nn.functional.one_hot(greedy, N).to(action.dtype))


def test_mult_one_hot_and_keys():
    torch.manual_seed(1)
    support = torch.arange(ATOMS, dtype=torch.float32)
    hook = DistributionalQValueHook("mult_one_hot", support=support, var_nums=[2, 2], action_value_key="av")
    assert hook.action_value_key == "av"
    log_probs = torch.randn(3, ATOMS, N).log_softmax(-2)
    action, _ = hook(nn.Identity(), (None,), log_probs)
    q = (log_probs.exp() * support[:, None]).sum(-2)
    expected = torch.cat(
        [nn.functional.one_hot(q[:, :2].argmax(-1), 2), nn.functional.one_hot(q[:, 2:].argmax(-1), 2)], -1
    )
    assert torch.equal(action.long(), expected)
    nested = DistributionalQValueHook("categorical", support=support, action_value_key=("agent", "av"))
    assert nested.action_value_key == "agent_av"


def test_errors():
    with pytest.raises(TypeError, match="action_space must be a string"):
        DistributionalQValueHook(object(), support=torch.arange(3.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="support must be a 1-d tensor"):
        DistributionalQValueHook("categorical", support=torch.zeros(2, 2))
    with pytest.raises(ValueError, match="action_space must be one of"):
        DistributionalQValueHook("discrete", support=torch.arange(3.0))
    hook = DistributionalQValueHook("categorical", support=torch.arange(3.0))
    with pytest.raises(ValueError, match="atoms=3"):
        hook(nn.Identity(), (None,), torch.randn(2, 4, N).log_softmax(-2))
