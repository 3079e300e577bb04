"""One-hot latent states marked with their classes, and the linear layer that gathers their columns:
values and every gradient against the dense product written in the test, the marks' lifetime, and
the RSSM's marks (per step and stacked over a rollout)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.modules import DreamerV3MLP, RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3
from rl_objectives.modules.one_hot_latents import latent_linear, mark_one_hot, one_hot_classes, scattered_columns
from tdict import TensorDict
from tdict.nn import TensorDictModule


def _latent(batch: tuple[int, ...], categoricals: int, classes: int, seed: int = 0):
    """A straight-through one-hot state ``[*batch, C * K]`` (marked), its probabilities and classes."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(*batch, categoricals, classes, generator=g), -1).requires_grad_(True)
    drawn = torch.randint(classes, (*batch, categoricals), generator=g)
    state = (F.one_hot(drawn, classes).float() + probs - probs.detach()).flatten(-2)
    return mark_one_hot(state, drawn), probs, drawn


def _dense(inputs: list[torch.Tensor], layer: torch.nn.Linear) -> torch.Tensor:
    """The product ``latent_linear`` replaces, written out."""
    return torch.cat(inputs, -1) @ layer.weight.t() + (0 if layer.bias is None else layer.bias)


def _values_and_grads(fn, inputs, leaves, layer, grad_out_seed=1):
    out = fn(inputs, layer)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_out_seed))
    params = [p for p in (layer.weight, layer.bias) if p is not None]
    return out, torch.autograd.grad(out, [*leaves, *params], g, retain_graph=True)


@settings(max_examples=25, deadline=None)
@given(
    batch=st.lists(st.integers(1, 4), min_size=1, max_size=2).map(tuple),
    categoricals=st.integers(1, 4),
    classes=st.integers(2, 5),
    dense_widths=st.lists(st.integers(1, 6), max_size=2),
    position=st.integers(0, 2),
    bias=st.booleans(),
)
def test_latent_linear_equals_the_dense_product(batch, categoricals, classes, dense_widths, position, bias):
    state, probs, _ = _latent(batch, categoricals, classes)
    dense = [torch.randn(*batch, w, requires_grad=True) for w in dense_widths]
    inputs = list(dense)
    inputs.insert(min(position, len(inputs)), state)
    layer = torch.nn.Linear(sum(x.shape[-1] for x in inputs), 5, bias=bias)
    got, got_grads = _values_and_grads(latent_linear, inputs, [probs, *dense], layer)
    want, want_grads = _values_and_grads(_dense, inputs, [probs, *dense], layer)
    assert got.shape == (*batch, 5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 40),
    categoricals=st.integers(1, 5),
    classes=st.integers(1, 6),
    out=st.integers(1, 7),
    zeroed=st.floats(0.0, 1.0),
)
def test_scattered_columns_is_the_dense_weight_gradient(rows, categoricals, classes, out, zeroed):
    """The weight gradient of a gathered product, ``grad.T @ state`` written out, with zeroed
    categoricals (class -1) adding nothing."""
    g = torch.Generator().manual_seed(rows * 7 + categoricals)
    drawn = torch.randint(classes, (rows, categoricals), generator=g)
    drawn = torch.where(torch.rand(drawn.shape, generator=g) < zeroed, -1, drawn)
    state = torch.zeros(rows, categoricals, classes)
    for r in range(rows):
        for c in range(categoricals):
            if drawn[r, c] >= 0:
                state[r, c, drawn[r, c]] = 1.0
    grad = torch.randn(rows, out, generator=g)
    got = scattered_columns(drawn, grad, categoricals * classes)
    assert got.shape == (out, categoricals * classes)
    torch.testing.assert_close(got, grad.t() @ state.flatten(-2), rtol=1e-5, atol=1e-5)


def test_two_marked_inputs_and_the_gradients_reach_each_probability():
    first, p1, _ = _latent((6,), 3, 4, seed=1)
    second, p2, _ = _latent((6,), 2, 5, seed=2)
    belief = torch.randn(6, 3, requires_grad=True)
    layer = torch.nn.Linear(12 + 3 + 10, 7)
    inputs = [first, belief, second]
    got, got_grads = _values_and_grads(latent_linear, inputs, [p1, p2, belief], layer)
    want, want_grads = _values_and_grads(_dense, inputs, [p1, p2, belief], layer)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b)


def test_zeroed_categoricals_gather_nothing():
    """Class -1 marks a categorical set to zeros (an episode's first step): it adds no column."""
    state, probs, drawn = _latent((6,), 3, 4)
    zero = torch.tensor([[True], [False], [False], [True], [False], [False]])  # whole rows, as at a reset
    zero = zero | (torch.arange(3) == 1) & torch.tensor([False, True, False, False, False, False])[:, None]
    zeroed = mark_one_hot(torch.where(zero.repeat_interleave(4, -1), 0.0, state), torch.where(zero, -1, drawn))
    belief = torch.randn(6, 2, requires_grad=True)
    layer = torch.nn.Linear(12 + 2, 5)
    got, got_grads = _values_and_grads(latent_linear, [zeroed, belief], [probs, belief], layer)
    want, want_grads = _values_and_grads(_dense, [zeroed, belief], [probs, belief], layer)
    torch.testing.assert_close(got, want)
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b)


def test_a_mark_lasts_until_the_tensor_changes_in_place():
    state, _, drawn = _latent((5,), 2, 3)
    assert torch.equal(one_hot_classes(state), drawn)
    assert one_hot_classes(state.detach().clone()) is None  # a new tensor carries no mark
    plain = state.detach().clone()
    mark_one_hot(plain, drawn)
    plain.mul_(2.0)  # no longer the drawn one-hot values
    assert one_hot_classes(plain) is None
    layer = torch.nn.Linear(6, 4)
    torch.testing.assert_close(latent_linear([plain], layer), layer(plain))


def test_unmarked_inputs_hooks_and_compiled_calls_take_the_layer_itself():
    state, _, _ = _latent((4,), 2, 3)
    belief = torch.randn(4, 2)
    layer = torch.nn.Linear(8, 3)
    unmarked = state.detach().clone()
    assert torch.equal(latent_linear([unmarked, belief], layer), layer(torch.cat([unmarked, belief], -1)))
    seen = []
    layer.register_forward_hook(lambda m, args, out: seen.append(args[0].shape))
    latent_linear([state, belief], layer)
    assert seen == [torch.Size([4, 8])]  # the hook saw the concatenated input
    plain = torch.nn.Linear(8, 3)
    compiled = torch.compile(lambda s, b: latent_linear([s, b], plain), fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(state, belief), _dense([state, belief], plain))


def test_dreamer_mlp_gathers_a_marked_state_and_keeps_its_gradients():
    torch.manual_seed(0)
    mlp = DreamerV3MLP(12 + 5, 3, depth=2, num_cells=8)
    state, probs, _ = _latent((2, 3), 3, 4)
    belief = torch.randn(2, 3, 5, requires_grad=True)
    leaves = [probs, belief, *mlp.parameters()]
    out = mlp(state, belief)
    grads = torch.autograd.grad(out.square().sum(), leaves)
    reference = mlp.model(torch.cat([state, belief], -1))
    want = torch.autograd.grad(reference.square().sum(), leaves)
    torch.testing.assert_close(out, reference)
    for a, b in zip(grads, want, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_the_rssm_marks_its_draws_and_the_rollout_its_stacked_states(recurrent_model):
    torch.manual_seed(0)
    C, K, H, A = 3, 4, 8, 2
    prior = RSSMPriorV3(
        action_shape=(A,), hidden_dim=8, rnn_hidden_dim=H, num_categoricals=C, num_classes=K, action_dim=A,
        recurrent_model=recurrent_model,
    )  # fmt: skip
    posterior = RSSMPosteriorV3(8, C, K, rnn_hidden_dim=H, obs_embed_dim=6)
    _, state, _ = prior(torch.zeros(5, C * K), torch.zeros(5, H), torch.zeros(5, A))
    drawn = one_hot_classes(state)
    assert drawn.shape == (5, C) and torch.equal(F.one_hot(drawn, K).float().flatten(-2), state.detach())
    rollout = RSSMRolloutV3(
        TensorDictModule(prior, ["state", "belief", "action"], [("next", "prior_logits"), ("next", "state"), ("next", "belief")]),
        TensorDictModule(posterior, [("next", "belief"), ("next", "embedding")], [("next", "posterior_logits"), ("next", "state")]),
    )  # fmt: skip
    B, T = 2, 4
    td = TensorDict(
        {
            "state": torch.zeros(B, T, C * K),
            "belief": torch.zeros(B, T, H),
            "action": torch.randn(B, T, A),
            "is_init": torch.tensor([[True, False, True, False], [True, False, False, False]]),
            "next": {"embedding": torch.randn(B, T, 6)},
        },
        [B, T],
    )
    out = rollout(td)
    states = out["next", "state"]
    drawn = one_hot_classes(states)
    assert drawn is not None and drawn.shape == (B, T, C)
    assert torch.equal(F.one_hot(drawn, K).float().flatten(-2), states.detach())
    with torch.inference_mode():  # inference tensors have no version counter: nothing is marked
        inferred = rollout(td.clone())
    assert one_hot_classes(inferred["next", "state"]) is None
    assert inferred["next", "state"].sum(-1).eq(C).all()


_CUDA = pytest.param(
    "cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
)


@pytest.mark.parametrize("device", ["cpu", _CUDA])
@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_a_world_model_update_equals_the_dense_one(recurrent_model, device, monkeypatch):
    """DreamerV3ModelLoss over an RSSM world model with DreamerV3MLP heads: the loss terms and every
    parameter's gradient equal those with every gather turned off (the dense products), resets
    inside the sequences included."""
    import rl_objectives.modules.dreamer_layers as layers
    import rl_objectives.modules.one_hot_latents as latents
    from rl_objectives.losses.dreamer_v3_model import DreamerV3ModelLoss
    from tdict.nn import TensorDictSequential

    torch.manual_seed(0)
    C, K, H, A, O, E = 4, 5, 16, 2, 6, 8
    post = [("next", "state"), ("next", "belief")]
    prior = RSSMPriorV3(
        action_shape=(A,), hidden_dim=16, rnn_hidden_dim=H, num_categoricals=C, num_classes=K, action_dim=A,
        recurrent_model=recurrent_model, num_blocks=2, unimix=0.01,
    )  # fmt: skip
    model = TensorDictSequential(
        TensorDictModule(DreamerV3MLP(O, None, 1, E), [("next", "pixels")], [("next", "encoded_latents")]),
        RSSMRolloutV3(
            TensorDictModule(prior, ["state", "belief", "action"], [("next", "prior_logits"), "_", ("next", "belief")]),
            TensorDictModule(
                RSSMPosteriorV3(16, C, K, rnn_hidden_dim=H, obs_embed_dim=E, unimix=0.01),
                [("next", "belief"), ("next", "encoded_latents")], [("next", "posterior_logits"), ("next", "state")],
            ),
        ),
        TensorDictModule(DreamerV3MLP(C * K + H, O, 2, 16), post, [("next", "reco_pixels")]),
        TensorDictModule(DreamerV3MLP(C * K + H, 15, 2, 16), post, [("next", "reward_logits")]),
    )  # fmt: skip
    N, L = 3, 7
    is_init = torch.zeros(N, L, dtype=torch.bool)
    is_init[:, 0] = is_init[1, 4] = is_init[2, 2] = True
    td = TensorDict(
        {
            "state": torch.zeros(N, L, C * K),
            "belief": torch.zeros(N, L, H),
            "action": torch.randn(N, L, A),
            "is_init": is_init,
            "next": {"pixels": torch.randn(N, L, O), "reward": torch.randn(N, L)},
        },
        [N, L],
    )
    model, td = model.to(device), td.to(device)
    loss = DreamerV3ModelLoss(model, num_reward_bins=15, kl_mode="separate", free_bits=0.0, unimix=0.01)
    params = list(model.parameters())

    def update():
        torch.manual_seed(1)  # the same draws in both runs
        losses, _ = loss(td.clone())
        total = sum(v for k, v in losses.items() if k.startswith("loss_"))
        return {k: v.detach() for k, v in losses.items()}, torch.autograd.grad(total, params)

    calls = []
    embedding_bag = F.embedding_bag
    monkeypatch.setattr(F, "embedding_bag", lambda *a, **k: calls.append(a[1].shape) or embedding_bag(*a, **k))
    gathered = update()
    # the prior's projection gathered at every step after the first (which reads the batch's zero
    # state), resets included, and both heads once
    assert len(calls) == (L - 1) + 2
    monkeypatch.setattr(latents, "one_hot_classes", lambda state: None)
    monkeypatch.setattr(layers, "one_hot_classes", lambda state: None)
    calls.clear()
    dense = update()
    assert not calls
    assert gathered[0].keys() == dense[0].keys()
    for k in dense[0]:
        torch.testing.assert_close(gathered[0][k], dense[0][k], rtol=1e-5, atol=1e-6)
    for a, b in zip(gathered[1], dense[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
