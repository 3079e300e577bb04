"""MultiAgentMLP / MultiAgentConvNet against per-agent loops over plain networks; VDN and QMIX mixers
against hand-written mixing."""

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.modules.models import MLP, ConvNet
from rl_objectives.modules.multiagent import (
    MultiAgentConvNet,
    MultiAgentMLP,
    QMixer,
    VDNMixer,
)
from tdict import TensorDict
from tdict.nn import TensorDictModule

N_AGENTS, N_IN, N_OUT = 3, 4, 2
BATCHES = [(), (4,), (2, 3)]


def agent_params(net, i):
    """Agent ``i``'s parameters as a state dict for a plain network."""
    params = net.params if net.share_params else net.params[i]
    return {".".join(k): v.detach() for k, v in params.items(True, True)}


def plain_mlp(net, i):
    n_in = N_IN * (N_AGENTS if net.centralized else 1)
    ref = MLP(n_in, N_OUT, depth=2, num_cells=8)
    ref.load_state_dict(agent_params(net, i))
    return ref


def make_mlp(centralized, share_params, **kw):
    torch.manual_seed(0)
    return MultiAgentMLP(
        N_IN, N_OUT, N_AGENTS, centralized=centralized, share_params=share_params, depth=2, num_cells=8, **kw
    )


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("centralized", [False, True])
@pytest.mark.parametrize("share_params", [False, True])
def test_mlp_matches_a_loop_over_agents(batch, centralized, share_params):
    net = make_mlp(centralized, share_params)
    x = torch.randn(*batch, N_AGENTS, N_IN)
    out = net(x)
    assert out.shape == (*batch, N_AGENTS, N_OUT)
    for i in range(N_AGENTS):
        inp = x.flatten(-2, -1) if centralized else x[..., i, :]
        torch.testing.assert_close(out[..., i, :], plain_mlp(net, i)(inp))
    if centralized and share_params:  # one network on the joint input: the same output for all agents
        assert torch.equal(out[..., 0, :], out[..., 1, :])


def test_agents_have_their_own_parameters_unless_shared():
    net = make_mlp(False, False)
    assert net.params["0", "weight"].shape == (N_AGENTS, 8, N_IN)
    assert not torch.equal(net.params["0", "weight"][0], net.params["0", "weight"][1])
    shared = make_mlp(False, True)
    assert shared.params["0", "weight"].shape == (8, N_IN)
    assert sum(p.numel() for p in net.parameters()) == N_AGENTS * sum(p.numel() for p in shared.parameters())
    # centralised: each agent's first layer reads all agents' inputs
    assert make_mlp(True, False).params["0", "weight"].shape == (N_AGENTS, 8, N_AGENTS * N_IN)


def test_gradients_of_an_agent_reach_only_its_own_parameters():
    net = make_mlp(False, False)
    net(torch.randn(5, N_AGENTS, N_IN))[..., 1, :].sum().backward()
    grads = [p.grad for p in net.parameters()]
    assert all(g is not None for g in grads)
    for g in grads:
        assert g[0].abs().sum() == 0 and g[2].abs().sum() == 0 and g[1].abs().sum() > 0


def test_several_inputs_are_concatenated():
    net = make_mlp(False, False)
    a, b = torch.randn(5, N_AGENTS, 1), torch.randn(5, N_AGENTS, N_IN - 1)
    torch.testing.assert_close(net(a, b), net(torch.cat([a, b], -1)))


@pytest.mark.parametrize("share_params", [False, True])
def test_parameters_swap_functionally_as_a_loss_does(share_params):
    """TensorDict.from_module / to_module see the agents' parameters (target networks rely on it)."""
    net = make_mlp(False, share_params)
    x = torch.randn(6, N_AGENTS, N_IN)
    params = TensorDict.from_module(net)
    zeros = params.apply(torch.zeros_like)
    with zeros.to_module(net):
        assert torch.equal(net(x), torch.zeros(6, N_AGENTS, N_OUT))
    torch.testing.assert_close(net(x), make_mlp(False, share_params)(x))  # restored
    names = sorted(net.state_dict())
    assert names[0].startswith("_empty_net.") and "." not in "".join(k[-1] for k in params.keys(True, True))


def test_use_td_params_is_accepted_and_changes_nothing():
    x = torch.randn(6, N_AGENTS, N_IN)
    plain = make_mlp(False, False, use_td_params=False)
    torch.testing.assert_close(plain(x), make_mlp(False, False)(x))
    assert sorted(plain.state_dict()) == sorted(make_mlp(False, False).state_dict())


def test_reset_parameters_redraws_each_agent():
    net = make_mlp(False, False)
    before = net.params.clone()
    net.reset_parameters()
    after = net.params
    assert not torch.equal(before["0", "weight"], after["0", "weight"])
    assert not torch.equal(after["0", "weight"][0], after["0", "weight"][1])


def test_centralised_alias_and_copies():
    net = MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralised=True, share_params=False, depth=1, num_cells=4)
    assert net.centralized
    x = torch.randn(2, N_AGENTS, N_IN)
    torch.testing.assert_close(copy.deepcopy(net)(x), net(x))


def test_mlp_errors():
    with pytest.raises(TypeError, match="share_params is required"):
        MultiAgentMLP(N_IN, N_OUT, N_AGENTS)
    with pytest.raises(ValueError, match="n_agents must be a positive int"):
        MultiAgentMLP(N_IN, N_OUT, 0, share_params=True)
    with pytest.raises(ValueError, match="n_agent_inputs"):
        MultiAgentMLP(None, N_OUT, N_AGENTS, share_params=True)
    with pytest.raises(ValueError, match="disagree"):
        MultiAgentMLP(N_IN, N_OUT, N_AGENTS, centralized=False, centralised=True, share_params=True)
    net = make_mlp(False, False)
    with pytest.raises(ValueError, match=r"\[\*B, n_agents=3, n_agent_inputs=4\], got \(5, 2, 4\)"):
        net(torch.randn(5, 2, N_IN))
    with pytest.raises(ValueError, match="got \\(5, 3, 5\\)"):
        net(torch.randn(5, N_AGENTS, N_IN + 1))


def test_inside_a_tensordict_module():
    net = TensorDictModule(make_mlp(False, False), in_keys=[("agents", "obs")], out_keys=[("agents", "out")])
    td = TensorDict(
        {"agents": TensorDict(obs=torch.randn(4, 5, N_AGENTS, N_IN), batch_size=[4, 5, N_AGENTS])}, batch_size=[4, 5]
    )
    assert net(td)["agents", "out"].shape == (4, 5, N_AGENTS, N_OUT)


@pytest.mark.parametrize("share_params", [False, True])
def test_compiled_mlp_matches_eager(share_params):
    torch.compiler.reset()
    net = make_mlp(False, share_params)
    x = torch.randn(5, N_AGENTS, N_IN)
    compiled = torch.compile(net, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), net(x))
    torch.compiler.reset()


# ---------------------------------------------------------------------------- conv
C, H = 2, 6


def make_conv(centralized, share_params):
    torch.manual_seed(0)
    return MultiAgentConvNet(
        N_AGENTS, centralized, share_params, in_features=C, num_cells=[4, 3], kernel_sizes=3, strides=1
    )


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("centralized", [False, True])
@pytest.mark.parametrize("share_params", [False, True])
def test_convnet_matches_a_loop_over_agents(batch, centralized, share_params):
    net = make_conv(centralized, share_params)
    x = torch.randn(*batch, N_AGENTS, C, H, H)
    out = net(x)
    assert out.shape == (*batch, N_AGENTS, 3 * 2 * 2)
    for i in range(N_AGENTS):
        ref = ConvNet(in_features=C * (N_AGENTS if centralized else 1), num_cells=[4, 3], kernel_sizes=3, strides=1)
        ref.load_state_dict(agent_params(net, i))
        inp = torch.cat([x[..., j, :, :, :] for j in range(N_AGENTS)], -3) if centralized else x[..., i, :, :, :]
        torch.testing.assert_close(out[..., i, :], ref(inp))


def test_convnet_errors():
    with pytest.raises(ValueError, match="in_features"):
        MultiAgentConvNet(N_AGENTS, False, False)
    net = make_conv(False, False)
    with pytest.raises(ValueError, match="n_agents=3, C=2"):
        net(torch.randn(5, 2, C, H, H))
    with pytest.raises(ValueError, match="n_agents=3, C=2"):
        net(torch.randn(N_AGENTS, H, H))


# ---------------------------------------------------------------------------- mixers
def agents_td(q, state=None):
    batch = q.shape[:-1]
    td = TensorDict({"agents": TensorDict(chosen_action_value=q, batch_size=q.shape)}, batch_size=batch)
    if state is not None:
        td.set("state", state)
    return td


@pytest.mark.parametrize("batch", BATCHES, ids=str)
def test_vdn_sums_the_agents_values(batch):
    q = torch.randn(*batch, N_AGENTS)
    out = VDNMixer(N_AGENTS)(agents_td(q))["chosen_action_value"]
    assert out.shape == batch
    ref = sum(q[..., i] for i in range(N_AGENTS))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(VDNMixer(N_AGENTS)(q), ref)  # tensors in, tensor out


def qmix_reference(mixer, q, state):
    """QMIX by hand, one sample at a time: hypernetwork weights from the flat state, abs, elu."""
    flat_q, flat_s = q.reshape(-1, N_AGENTS), state.reshape(q[..., 0].numel(), -1)
    lin = lambda layer, x: x @ layer.weight.T + layer.bias
    out = []
    for qi, si in zip(flat_q, flat_s):
        w1 = lin(mixer.hyper_w_1, si).abs().reshape(N_AGENTS, mixer.embed_dim)
        b1 = lin(mixer.hyper_b_1, si)
        hidden = torch.nn.functional.elu(qi @ w1 + b1)
        w2 = lin(mixer.hyper_w_final, si).abs()
        v = lin(mixer.V[2], torch.relu(lin(mixer.V[0], si)))
        out.append(hidden @ w2 + v[0])
    return torch.stack(out).reshape(q.shape[:-1])


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("state_shape", [(5,), (2, 3)], ids=str)
def test_qmixer_matches_hand_written_mixing(batch, state_shape):
    torch.manual_seed(0)
    mixer = QMixer(state_shape=state_shape, mixing_embed_dim=6, n_agents=N_AGENTS)
    q, state = torch.randn(*batch, N_AGENTS), torch.randn(*batch, *state_shape)
    out = mixer(agents_td(q, state))["chosen_action_value"]
    assert out.shape == batch
    torch.testing.assert_close(out, qmix_reference(mixer, q, state))
    torch.testing.assert_close(mixer(q, state), out)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_qmixer_is_monotonic_in_every_agent(seed):
    torch.manual_seed(seed)
    mixer = QMixer(state_shape=(4,), mixing_embed_dim=5, n_agents=N_AGENTS)
    q = torch.randn(7, N_AGENTS, requires_grad=True)
    mixer(q, torch.randn(7, 4)).sum().backward()
    assert (q.grad >= 0).all()


def test_mixers_wrapped_as_in_torchrl_and_with_custom_keys():
    torch.manual_seed(0)
    mixer = QMixer(state_shape=(5,), mixing_embed_dim=4, n_agents=N_AGENTS)
    wrapped = TensorDictModule(mixer, in_keys=[("agents", "chosen_action_value"), "state"], out_keys=["global"])
    q, s = torch.randn(4, N_AGENTS), torch.randn(4, 5)
    torch.testing.assert_close(wrapped(agents_td(q, s))["global"], qmix_reference(mixer, q, s))
    renamed = QMixer(state_shape=(5,), mixing_embed_dim=4, n_agents=N_AGENTS, in_keys=["qs", "s"], out_keys=["q_tot"])
    renamed.load_state_dict(mixer.state_dict())
    td = TensorDict(qs=q, s=s, batch_size=[4])
    torch.testing.assert_close(renamed(td)["q_tot"], qmix_reference(mixer, q, s))


def test_mixer_errors():
    mixer = QMixer(state_shape=(5,), mixing_embed_dim=4, n_agents=N_AGENTS)
    with pytest.raises(ValueError, match="drop the trailing singleton dim"):
        mixer(
            agents_td(torch.randn(4, N_AGENTS, 1).squeeze(-1), torch.randn(4, 5)).set(
                ("agents", "chosen_action_value"), torch.randn(4, N_AGENTS, 1)
            )
        )
    with pytest.raises(ValueError, match=r"expected \(4, 5\)"):
        mixer(agents_td(torch.randn(4, N_AGENTS), torch.randn(4, 6)))
    with pytest.raises(KeyError, match="misses the global state"):
        mixer(agents_td(torch.randn(4, N_AGENTS)))
    with pytest.raises(ValueError, match="n_agents=3"):
        VDNMixer(N_AGENTS)(torch.randn(4, 2))
    with pytest.raises(ValueError, match="in_keys must hold 2"):
        QMixer(state_shape=(5,), mixing_embed_dim=4, n_agents=N_AGENTS, in_keys=["q"])
    with pytest.raises(ValueError, match="mixing_embed_dim"):
        QMixer(state_shape=(5,), mixing_embed_dim=0, n_agents=N_AGENTS)
