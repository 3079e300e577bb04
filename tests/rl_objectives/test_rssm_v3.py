"""DreamerV3's layers and RSSM (modules/dreamer_layers.py, modules/rssm_v3.py) against computations
written out here: RMS norm, block-diagonal linear maps and the block GRU by loops, and the rollout
against the prior and posterior stepped by hand (resets included)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from rl_objectives.modules.dreamer_layers import BlockGRU, BlockLinear, DreamerV3MLP, RMSNorm
from rl_objectives.modules.rssm_v3 import RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3
from tdict import TensorDict
from tdict.nn import TensorDictModule
from tdict.specs import Bounded


def test_rms_norm_formula():
    norm = RMSNorm(5, eps=1e-3)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 6.0))
    x = torch.randn(3, 5, dtype=torch.float64)
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-3) * torch.arange(1.0, 6.0, dtype=torch.float64)
    out = norm(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)  # computed in float32


@pytest.mark.parametrize("rows", [3, 300])  # under and over the size where the fused function takes over
def test_rms_norm_gradients_against_the_formula_vmap_and_functional_grad(rows):
    torch.manual_seed(0)
    norm = RMSNorm(512, eps=1e-3)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, rows, 512, requires_grad=True)
    g = torch.randn(2, rows, 512)

    def formula(value, weight):
        return value / torch.sqrt((value**2).mean(-1, keepdim=True) + 1e-3) * weight

    got = torch.autograd.grad(norm(x), [x, norm.weight], g)
    want = torch.autograd.grad(formula(x, norm.weight), [x, norm.weight], g)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # a batch of inputs under vmap, and the weight's gradient through torch.func
    xs = x.detach()
    torch.testing.assert_close(torch.vmap(norm)(xs), formula(xs, norm.weight), rtol=1e-5, atol=1e-5)
    params = dict(norm.named_parameters())
    grads = torch.func.grad(lambda p: torch.func.functional_call(norm, p, (xs,)).square().sum())(params)
    (expected,) = torch.autograd.grad(formula(xs, norm.weight).square().sum(), norm.weight)
    torch.testing.assert_close(grads["weight"], expected, rtol=1e-4, atol=1e-4)
    # other activation dtypes: computed in float32, returned in theirs
    assert norm(x.detach().bfloat16()).dtype == torch.bfloat16
    compiled = torch.compile(norm, fullgraph=True, backend="eager")  # the composite, for the compiler
    torch.testing.assert_close(compiled(xs), norm(xs), rtol=1e-5, atol=1e-5)


def test_block_linear_is_block_diagonal():
    layer = BlockLinear(6, 9, num_blocks=3)
    x = torch.randn(4, 6)
    expected = torch.cat([x[:, 2 * b : 2 * b + 2] @ layer.weight[b] for b in range(3)], -1) + layer.bias
    torch.testing.assert_close(layer(x), expected)
    dense = torch.block_diag(*layer.weight.detach())  # the same map as one dense block-diagonal matrix
    torch.testing.assert_close(layer(x), x @ dense + layer.bias)
    with pytest.raises(ValueError, match="divisible by num_blocks"):
        BlockLinear(5, 9, num_blocks=3)


def test_block_gru_against_its_formula():
    torch.manual_seed(0)
    gru = BlockGRU(state_dim=6, action_dim=2, belief_dim=8, hidden_dim=3, num_blocks=2, num_layers=1)
    state, belief, action = torch.randn(5, 6), torch.randn(5, 8), torch.randn(5, 2) * 3
    # the computation written out: inputs, per-block features, one hidden layer, the three gates
    a = action / action.abs().clamp_min(1.0)
    proj = torch.cat([gru.belief_in(belief), gru.state_in(state), gru.action_in(a)], -1)  # [5, 9]
    per_block = torch.cat([torch.cat([belief[:, 4 * b : 4 * b + 4], proj], -1) for b in range(2)], -1)  # [5, 26]
    hidden = gru.hidden(per_block)
    gates = gru.gates(hidden)  # [5, 24]: block b holds (reset, candidate, update) of its 4 units
    reset = torch.cat([gates[:, 12 * b : 12 * b + 4] for b in range(2)], -1)
    cand = torch.cat([gates[:, 12 * b + 4 : 12 * b + 8] for b in range(2)], -1)
    update = torch.cat([gates[:, 12 * b + 8 : 12 * b + 12] for b in range(2)], -1)
    r, u = torch.sigmoid(reset), torch.sigmoid(update - 1)
    expected = u * torch.tanh(r * cand) + (1 - u) * belief
    torch.testing.assert_close(gru(state, belief, action), expected)
    with pytest.raises(ValueError, match="divisible by num_blocks"):
        BlockGRU(state_dim=6, action_dim=2, belief_dim=9, hidden_dim=3, num_blocks=2)


@pytest.mark.parametrize("num_layers", [0, 1, 2])
def test_block_gru_split_input_equals_the_expanded_one(num_layers):
    """Without hooks the first block layer runs on the belief slices and the shared projections
    apart (``BlockLinear.forward_shared``, with weights derived per call or once, as a recurrence
    passes them); values and every gradient equal the expanded input's, which a hook forces."""
    torch.manual_seed(0)
    gru = BlockGRU(state_dim=6, action_dim=2, belief_dim=8, hidden_dim=3, num_blocks=2, num_layers=num_layers)
    inputs = [torch.randn(5, 6, requires_grad=True), torch.randn(5, 8, requires_grad=True), torch.randn(5, 2) * 3]
    tensors = [*inputs[:2], *gru.parameters()]

    def run(**kwargs):
        out = gru(*inputs, **kwargs)
        return out, torch.autograd.grad((out * torch.linspace(-1, 1, 8)).sum(), tensors)

    split, derived = run(), run(weights=gru.input_weights())
    first = gru.hidden[0] if num_layers else gru.gates
    assert len(gru.input_weights()) == 2 and gru.input_weights()[1].shape == (first.out_features, 3 * 3)
    handle = first.register_forward_hook(lambda *args: None)
    assert gru.input_weights() == ()
    expanded = run()
    handle.remove()
    for got in (split, derived):
        torch.testing.assert_close(got[0], expanded[0], rtol=1e-6, atol=1e-6)
        for g, e in zip(got[1], expanded[1], strict=True):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [5, 15000])  # stacked; over the size where each norm runs on its own
def test_block_gru_projections_stacked_equal_each_layer_called(rows):
    """For few rows the three projections' products are normalised and activated stacked: values
    and every gradient (inputs, the projections' weights and norms) equal each (linear, RMS norm,
    SiLU) layer called on its own; a hook on one of them makes the layers run on their own."""
    torch.manual_seed(0)
    gru = BlockGRU(state_dim=6, action_dim=2, belief_dim=8, hidden_dim=3, num_blocks=2)
    with torch.no_grad():
        for seq in (gru.belief_in, gru.state_in, gru.action_in):
            seq[1].weight.uniform_(0.5, 1.5)  # three different norm weights
    state, belief = torch.randn(rows, 6, requires_grad=True), torch.randn(rows, 8, requires_grad=True)
    action = torch.randn(rows, 2)
    tensors = [state, belief, *gru.belief_in.parameters(), *gru.state_in.parameters(), *gru.action_in.parameters()]
    norms = gru._stacked_norms((gru.belief_in, gru.state_in, gru.action_in), rows)
    assert (norms == [gru.belief_in[1], gru.state_in[1], gru.action_in[1]]) == (rows == 5)
    out = gru._projections(state, belief, action)
    expected = torch.cat([gru.belief_in(belief), gru.state_in(state), gru.action_in(action)], -1)
    assert out.shape == (rows, 9)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    weights = torch.randn(rows, 9)
    got = torch.autograd.grad((out * weights).sum(), tensors)
    for g, e in zip(got, torch.autograd.grad((expected * weights).sum(), tensors), strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    handle = gru.action_in[2].register_forward_hook(lambda *args: None)
    assert gru._stacked_norms((gru.belief_in, gru.state_in, gru.action_in), 5) is None
    handle.remove()


def test_recurrent_products_read_a_packed_weight_where_onednn_applies():
    """Inside a recurrence a dense float32 CPU weight is reordered into oneDNN's layout at its
    second call and kept; the products equal ``F.linear``'s up to rounding; the first call and
    other dtypes take the plain product."""
    from rl_objectives.modules.dreamer_layers import _packed_product, _Stash

    torch.manual_seed(0)
    weight, bias, value = torch.randn(12, 7), torch.randn(12), torch.randn(4, 7)
    stash = _Stash()
    assert _packed_product(stash, value, weight, bias) is None  # first call
    out = _packed_product(stash, value, weight, bias)
    if not torch.backends.mkldnn.is_available():
        assert out is None and stash.packed is False
        return
    assert out is not None and isinstance(stash.packed, torch.Tensor)
    packed = stash.packed
    torch.testing.assert_close(out, F.linear(value, weight, bias), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_packed_product(stash, value[:1], weight, None), F.linear(value[:1], weight))
    assert stash.packed is packed  # reordered once
    assert _packed_product(stash, value.double(), weight, bias) is None
    double = _Stash()
    for _ in range(2):
        assert _packed_product(double, value.double(), weight.double(), None) is None


def test_dreamer_mlp_depth_outscale_and_inputs():
    mlp = DreamerV3MLP(5, 3, depth=2, num_cells=7, outscale=0.0)
    assert sum(isinstance(m, torch.nn.Linear) for m in mlp.modules()) == 3
    x = torch.randn(4, 5)
    torch.testing.assert_close(mlp(x), torch.zeros(4, 3))  # outscale 0: the head starts at its (zero) bias
    mlp = DreamerV3MLP(5, 3, depth=1, num_cells=7)
    torch.testing.assert_close(mlp(x[:, :2], x[:, 2:]), mlp(x))
    trunk = DreamerV3MLP(5, None, depth=2, num_cells=7)  # no output layer: the features of the last hidden layer
    assert isinstance(trunk.model[-1], torch.nn.SiLU) and trunk(x).shape == (4, 7)


@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_prior_and_posterior_draw_one_hot_states_with_gradients(recurrent_model):
    torch.manual_seed(1)
    prior = RSSMPriorV3(
        action_spec=Bounded(-1.0, 1.0, shape=(2,)),
        hidden_dim=8,
        rnn_hidden_dim=8,
        num_categoricals=3,
        num_classes=4,
        action_dim=2,
        recurrent_model=recurrent_model,
        num_blocks=2,
        unimix=0.01,
    )
    assert prior.action_shape == (2,)
    logits, state, belief = prior(torch.zeros(2, 5, 12), torch.zeros(2, 5, 8), torch.randn(2, 5, 2))
    assert logits.shape == (2, 5, 3, 4) and state.shape == (2, 5, 12) and belief.shape == (2, 5, 8)
    one_hot = state.detach().reshape(2, 5, 3, 4)
    assert torch.equal(one_hot.sum(-1), torch.ones(2, 5, 3)) and set(one_hot.unique().tolist()) <= {0.0, 1.0}
    posterior = RSSMPosteriorV3(hidden_dim=8, num_categoricals=3, num_classes=4, rnn_hidden_dim=8, obs_embed_dim=6)
    post_logits, post_state = posterior(belief, torch.randn(2, 5, 6))
    assert post_logits.shape == (2, 5, 3, 4) and post_state.shape == (2, 5, 12)
    (post_state * torch.randn(12)).sum().backward()  # straight-through: gradients reach both networks
    assert all(p.grad is not None for p in posterior.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in prior.parameters())


def test_constructor_errors():
    with pytest.raises(ValueError, match="not both"):
        RSSMPriorV3(action_spec=Bounded(-1.0, 1.0, shape=(2,)), action_shape=(2,))
    with pytest.raises(ValueError, match="needs action_dim"):
        RSSMPriorV3(recurrent_model="block_gru")
    with pytest.raises(ValueError, match="'gru' or 'block_gru'"):
        RSSMPriorV3(recurrent_model="lstm")
    with pytest.raises(ValueError, match="unimix must be in"):
        RSSMPosteriorV3(unimix=1.0)
    with pytest.raises(ValueError, match="needs rnn_hidden_dim and obs_embed_dim"):
        RSSMPosteriorV3(use_rms_norm=True)


def _modules(recurrent_model: str = "block_gru"):
    torch.manual_seed(2)
    prior = RSSMPriorV3(
        action_shape=(2,),
        hidden_dim=8,
        rnn_hidden_dim=8,
        num_categoricals=3,
        num_classes=4,
        action_dim=2,
        recurrent_model=recurrent_model,
        num_blocks=2,
        unimix=0.01,
    )
    posterior = RSSMPosteriorV3(
        hidden_dim=8, num_categoricals=3, num_classes=4, rnn_hidden_dim=8, obs_embed_dim=6, use_rms_norm=True
    )
    prior_td = TensorDictModule(
        prior,
        in_keys=["state", "belief", "action"],
        out_keys=[("next", "prior_logits"), ("next", "state"), ("next", "belief")],
    )
    posterior_td = TensorDictModule(
        posterior,
        in_keys=[("next", "belief"), ("next", "encoded_latents")],
        out_keys=[("next", "posterior_logits"), ("next", "state")],
    )
    return prior, posterior, RSSMRolloutV3(prior_td, posterior_td)


def _rollout_input(B: int, T: int) -> TensorDict:
    """Zero initial state and belief, random actions and embeddings, for the modules of :func:`_modules`."""
    return TensorDict(
        {
            "state": torch.zeros(B, T, 12),
            "belief": torch.zeros(B, T, 8),
            "action": torch.randn(B, T, 2),
            "next": {"encoded_latents": torch.randn(B, T, 6)},
        },
        [B, T],
    )


@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_rollout_equals_the_steps_unrolled_by_hand(recurrent_model):
    prior, posterior, rollout = _modules(recurrent_model)
    B, T = 2, 5
    action, embed = torch.randn(B, T, 2), torch.randn(B, T, 6)
    is_init = torch.zeros(B, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[1, 3] = True  # row 1 starts a new episode at step 3
    td = TensorDict(
        {
            "state": torch.randn(B, T, 12),
            "belief": torch.randn(B, T, 8),
            "action": action,
            "is_init": is_init,
            "next": {"encoded_latents": embed},
        },
        [B, T],
    )
    assert rollout._split_posterior(td) is posterior  # its embedding columns: once, for every step
    assert rollout._reset_steps(td, T) == [True, False, False, True, False]  # the steps zeroed
    torch.manual_seed(7)
    out = rollout(td)
    assert out.batch_size == (B, T)
    torch.manual_seed(7)  # the same draws, in the same order
    state, belief = td["state"][:, 0], td["belief"][:, 0]
    for t in range(T):
        keep = ~is_init[:, t]
        state, belief, a = state * keep, belief * keep, action[:, t] * keep
        with torch.random.fork_rng():  # the prior's forward: its belief step, its head, a draw
            logits_of_forward, _, belief_of_forward = prior(state, belief, a)
        # the rollout runs the belief step per step and the prior's head once over all steps; the
        # prior's own draw is not made (the posterior's state replaces it)
        belief = prior.belief_step(state, belief, a)
        prior_logits = prior.prior_logits(belief)
        torch.testing.assert_close(prior_logits, logits_of_forward)
        torch.testing.assert_close(belief, belief_of_forward)
        post_logits, state = posterior(belief, embed[:, t])
        torch.testing.assert_close(out["next", "prior_logits"][:, t], prior_logits)
        torch.testing.assert_close(out["next", "posterior_logits"][:, t], post_logits)
        torch.testing.assert_close(out["next", "belief"][:, t], belief)
        torch.testing.assert_close(out["next", "state"][:, t], state)
    assert torch.equal(out["action"][1, 3], torch.zeros(2)) and torch.equal(out["action"][1, 2], action[1, 2])
    # gradients flow back through the recursion: the last posterior depends on the first prior step
    out["next", "posterior_logits"][:, -1].sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in prior.parameters())


@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_the_posterior_split_gives_the_per_step_gradients_and_yields_to_hooks(recurrent_model, monkeypatch):
    """The rollout multiplies every step's embedding by the posterior's first layer at once and only
    the belief per step: outputs and every parameter's gradient equal the posterior module called
    whole at each step; a hook on the posterior sees that per-step call."""
    prior, posterior, rollout = _modules(recurrent_model)
    td = _rollout_input(3, 6)
    assert rollout._split_posterior(td) is posterior
    params = [*prior.parameters(), *posterior.parameters()]

    def run():
        torch.manual_seed(3)
        out = rollout(td.clone())
        total = out["next", "posterior_logits"].square().sum() + out["next", "prior_logits"].square().sum()
        total = total + out["next", "state"].sum() * 0.5
        return out, torch.autograd.grad(total + out["next", "belief"].sum(), params)

    split, split_grads = run()
    calls = []
    handle = posterior.register_forward_hook(lambda *args: calls.append(1))
    assert rollout._split_posterior(td) is None
    whole, whole_grads = run()
    handle.remove()
    assert len(calls) == 6  # once per step
    for key in [("next", "posterior_logits"), ("next", "state"), ("next", "belief"), ("next", "prior_logits")]:
        torch.testing.assert_close(split[key], whole[key])
    for a, b in zip(split_grads, whole_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_rollout_runs_the_prior_per_step_when_its_state_is_used():
    """When the posterior does not replace the prior's drawn state, the prior module runs whole at
    every step (its draw feeds the recurrence); the same logits as the deferred head otherwise."""
    prior, posterior, deferred = _modules("gru")
    assert deferred._deferred_prior() is prior
    posterior_td = TensorDictModule(
        posterior,
        in_keys=[("next", "belief"), ("next", "encoded_latents")],
        out_keys=[("next", "posterior_logits"), ("next", "posterior_state")],
    )
    per_step = RSSMRolloutV3(deferred.rssm_prior, posterior_td)
    assert per_step._deferred_prior() is None
    handle = deferred.rssm_prior.register_forward_hook(lambda *args: None)
    assert deferred._deferred_prior() is None  # a hook must see every call of the prior
    handle.remove()
    B, T = 2, 4
    td = _rollout_input(B, T)
    out = per_step(td.clone())
    # the state carried from step to step is the prior's draw: one-hot rows of its categoricals
    assert out["next", "state"].shape == (B, T, 12)
    torch.testing.assert_close(out["next", "state"].reshape(B, T, 3, 4).sum(-1), torch.ones(B, T, 3))
    torch.testing.assert_close(out["next", "prior_logits"], prior.prior_logits(out["next", "belief"]))


def test_rollout_infers_or_needs_the_action_key():
    _, _, rollout = _modules()
    assert rollout.action_key == "action" and rollout.reset_key == "is_init"
    prior = TensorDictModule(
        RSSMPriorV3(action_shape=(2,), hidden_dim=8, rnn_hidden_dim=8, num_categoricals=3, num_classes=4, action_dim=2),
        in_keys=["state", "belief", "a"],
        out_keys=[("next", "prior_logits"), ("next", "state"), ("next", "belief")],
    )
    assert RSSMRolloutV3(prior, rollout.rssm_posterior).action_key == "a"
    two = TensorDictModule(
        lambda s, b, x, y: (s, s, b), in_keys=["state", "belief", "x", "y"], out_keys=["o", "p", "q"]
    )
    with pytest.raises(ValueError, match="pass action_key"):
        RSSMRolloutV3(two, rollout.rssm_posterior)


@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_rollout_gradients_equal_the_plain_autograd_ones(recurrent_model, monkeypatch):
    """The rollout defers its layers' weight gradients into one product over the steps
    (``deferred_weight_grads``) and there sums the weight columns of the one-hot states' ones: the
    gradients of every parameter equal plain autograd's (up to the order of the additions)."""
    import contextlib

    import rl_objectives.modules.rssm_v3 as rssm_v3

    prior, posterior, rollout = _modules(recurrent_model)
    B, T = 3, 6
    td = _rollout_input(B, T)
    params = [*prior.parameters(), *posterior.parameters()]

    def grads() -> list:
        for p in params:
            p.grad = None
        torch.manual_seed(3)
        out = rollout(td.clone())
        logits = out["next", "posterior_logits"].square().sum() + out["next", "prior_logits"].square().sum()
        (logits + out["next", "belief"].sum()).backward()
        return [p.grad for p in params]

    deferred = grads()
    monkeypatch.setattr(rssm_v3, "deferred_weight_grads", lambda *modules, weights=(): contextlib.nullcontext())
    plain = grads()
    assert len(deferred) == len(params) and all(g is not None for g in plain)
    for got, expected in zip(deferred, plain):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def graph_nodes(out: torch.Tensor) -> set:
    """The class names of the autograd nodes ``out`` was computed through."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(next_node for next_node, _ in node.next_functions)
    return {type(node).__name__ for node in seen}


@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell_inside_a_recurrence_equals_torchs_cell(bias):
    """``gru_cell`` inside ``deferred_weight_grads`` runs a step as one autograd node (closed-form
    gate gradients, deferred weight gradients): over a small recurrence, values and the gradients
    of the inputs, the first hidden state and every parameter equal ``nn.GRUCell``'s."""
    from rl_objectives.modules.dreamer_layers import deferred_weight_grads, gru_cell

    torch.manual_seed(0)
    cell = torch.nn.GRUCell(5, 4, bias=bias)
    inputs = [torch.randn(3, 5, requires_grad=True) for _ in range(4)]
    first = torch.randn(3, 4, requires_grad=True)
    leaves = [*inputs, first, *cell.parameters()]

    def roll(step):
        hidden, outs = first, []
        for x in inputs:
            hidden = step(x, hidden)
            outs.append(hidden)
        out = torch.stack(outs)
        return out, torch.autograd.grad((out * torch.linspace(-1, 1, 4)).sum(), leaves)

    with deferred_weight_grads(cell):
        fused, fused_grads = roll(lambda x, h: gru_cell(cell, x, h))
        assert "_DeferredGRUCellBackward" in graph_nodes(fused)
    plain, plain_grads = roll(cell)
    torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)
    for got, want in zip(fused_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_layers_tying_a_weight_with_other_biases_keep_plain_autograds_values_and_gradients():
    """Inside ``deferred_weight_grads`` a weight is registered with its layer's bias: another layer
    (or cell) tying that weight with a bias of its own, and a bias-free product of the weight, run
    undeferred. Values and the gradients of the weight and of every bias equal plain autograd's."""
    from rl_objectives.modules.dreamer_layers import deferred_weight_grads, gru_cell, linear, weight_product

    torch.manual_seed(0)
    first, second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    second.weight = first.weight
    cell, tied = torch.nn.GRUCell(4, 4), torch.nn.GRUCell(4, 4)
    tied.weight_ih, tied.weight_hh = cell.weight_ih, cell.weight_hh
    with torch.no_grad():
        second.bias.add_(5.0)
        tied.bias_ih.add_(1.0)
    start = torch.randn(2, 4, requires_grad=True)
    tensors = [start, first.weight, first.bias, second.bias, *cell.parameters(), tied.bias_ih, tied.bias_hh]

    def roll(dense, product, step):
        h = start
        for _ in range(3):
            h = torch.tanh(dense(second, dense(first, h)) + product(h, first.weight))
            h = step(tied, h, step(cell, h, h))
        return h, torch.autograd.grad((h * torch.linspace(-1, 1, 4)).sum(), tensors)

    plain = roll(lambda layer, x: layer(x), lambda x, w: x @ w.T, lambda c, x, h: c(x, h))
    with deferred_weight_grads(first, second, cell, tied):
        deferred = roll(linear, weight_product, gru_cell)
    torch.testing.assert_close(deferred[0], plain[0], rtol=1e-5, atol=1e-6)
    for got, want in zip(deferred[1], plain[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_block_linear_defers_its_weight_gradient_inside_a_recurrence():
    """Inside ``deferred_weight_grads`` a BlockLinear stepped through a small recurrence runs the
    deferred product (its weight gradient summed over the steps in one batched product) and gives
    the outputs and the input, weight and bias gradients of plain autograd."""
    from rl_objectives.modules.dreamer_layers import deferred_weight_grads

    torch.manual_seed(0)
    layer = BlockLinear(6, 6, num_blocks=3)
    start = torch.randn(4, 2, 6, requires_grad=True)
    tensors = (start, layer.weight, layer.bias)

    def roll() -> torch.Tensor:
        h = start
        for _ in range(3):
            h = torch.tanh(layer(h))
        return h

    with deferred_weight_grads(layer):
        deferred_out = roll()
    assert "_DeferredLinearBackward" in graph_nodes(deferred_out)
    deferred_out.square().sum().backward()
    deferred = [t.grad for t in tensors]
    for t in tensors:
        t.grad = None
    plain_out = roll()
    assert "_DeferredLinearBackward" not in graph_nodes(plain_out)
    plain_out.square().sum().backward()
    torch.testing.assert_close(deferred_out, plain_out, rtol=0, atol=0)
    for got, want in zip(deferred, (t.grad for t in tensors)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
