"""RSSMStateEstimatorV3 (modules/rssm_state_estimator.py): one step against the prior then the posterior
run by hand, and a sequence of steps against RSSMRolloutV3 on the same inputs."""

from __future__ import annotations

import pytest
import torch
from rl_objectives.modules import RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3, RSSMStateEstimatorV3
from rl_objectives.functional.dreamer import unimix_probs
from rl_objectives.modules import rssm_v3
from tdict import TensorDict
from tdict.nn import TensorDictModule

B, T, A, E, HID, C, K = 3, 4, 2, 6, 8, 2, 4
S = C * K


def _models(recurrent_model: str) -> tuple[RSSMPriorV3, RSSMPosteriorV3]:
    prior = RSSMPriorV3(
        action_shape=(A,),
        action_dim=A,
        hidden_dim=HID,
        rnn_hidden_dim=HID,
        num_categoricals=C,
        num_classes=K,
        recurrent_model=recurrent_model,  # type: ignore[arg-type]
        num_blocks=2,
        unimix=0.01,
    )
    posterior = RSSMPosteriorV3(
        hidden_dim=HID, rnn_hidden_dim=HID, obs_embed_dim=E, num_categoricals=C, num_classes=K, unimix=0.01
    )
    return prior, posterior


@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_step_equals_prior_then_posterior_by_hand(recurrent_model):
    torch.manual_seed(0)
    prior, posterior = _models(recurrent_model)
    estimator = RSSMStateEstimatorV3(prior, posterior)
    state, belief, action, embedding = torch.randn(B, S), torch.randn(B, HID), torch.randn(B, A), torch.randn(B, E)
    reset = torch.tensor([True, False, False])
    data = TensorDict(
        {"state": state, "belief": belief, "previous_action": action, "encoded_latents": embedding, "is_init": reset},
        [B],
    )
    torch.manual_seed(7)
    with torch.no_grad():
        out = estimator(data)
    assert out is data
    # by hand: zero the reset row, the prior's belief, then the posterior's draw (same random stream)
    keep = (~reset).float().unsqueeze(-1)
    with torch.no_grad():
        _, _, expected_belief = prior(state * keep, belief * keep, action * keep)
        torch.manual_seed(7)
        _, expected_state = posterior(expected_belief, embedding)
    assert out["state"].shape == (B, S) and out["belief"].shape == (B, HID)
    assert out["state"].dtype == torch.float32 and out["belief"].dtype == torch.float32
    torch.testing.assert_close(out["belief"], expected_belief)
    torch.testing.assert_close(out["state"], expected_state)
    torch.testing.assert_close(out["state"].reshape(B, C, K).sum(-1), torch.ones(B, C))
    assert ((out["state"] == 0) | (out["state"] == 1)).all()


def _argmax_draw(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    probs = unimix_probs(logits, unimix)
    return torch.nn.functional.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype).flatten(-2)


@pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
def test_steps_equal_the_unrolled_sequence(recurrent_model, monkeypatch):
    # deterministic draws: the rollout also draws the prior's state, so random streams would differ
    monkeypatch.setattr(rssm_v3, "_draw_state", _argmax_draw)
    torch.manual_seed(1)
    prior, posterior = _models(recurrent_model)
    state0, belief0 = torch.randn(B, S), torch.randn(B, HID)
    actions, embeddings = torch.randn(B, T, A), torch.randn(B, T, E)
    is_init = torch.zeros(B, T, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[1, 2] = True
    rollout = RSSMRolloutV3(
        TensorDictModule(
            prior,
            in_keys=["state", "belief", "action"],
            out_keys=[("next", "prior_logits"), ("next", "state"), ("next", "belief")],
        ),
        TensorDictModule(
            posterior,
            in_keys=[("next", "belief"), ("next", "encoded_latents")],
            out_keys=[("next", "posterior_logits"), ("next", "state")],
        ),
    )
    seq = TensorDict(
        {
            "state": state0.unsqueeze(1).expand(B, T, S).clone(),
            "belief": belief0.unsqueeze(1).expand(B, T, HID).clone(),
            "action": actions,
            "is_init": is_init,
            "next": {"encoded_latents": embeddings},
        },
        [B, T],
    )
    with torch.no_grad():
        rolled = rollout(seq)
    estimator = RSSMStateEstimatorV3(prior, posterior)
    state, belief = state0, belief0
    for t in range(T):
        step = TensorDict(
            {
                "state": state,
                "belief": belief,
                "previous_action": actions[:, t],
                "encoded_latents": embeddings[:, t],
                "is_init": is_init[:, t, None],
            },
            [B],
        )
        with torch.no_grad():
            estimator(step)
        state, belief = step["state"], step["belief"]
        torch.testing.assert_close(belief, rolled["next", "belief"][:, t])
        torch.testing.assert_close(state, rolled["next", "state"][:, t])


def test_custom_keys_and_errors():
    torch.manual_seed(2)
    prior, posterior = _models("gru")
    estimator = RSSMStateEstimatorV3(
        prior,
        posterior,
        in_keys=[("z", "s"), "h", "a", "e", "done"],
        out_keys=[("out", "s"), ("out", "h")],
    )
    data = TensorDict(
        {
            "z": {"s": torch.randn(2, S)},
            "h": torch.randn(2, HID),
            "a": torch.randn(2, A),
            "e": torch.randn(2, E),
            "done": torch.tensor([[False], [True]]),
        },
        [2],
    )
    out = estimator(data)
    assert out["out", "s"].shape == (2, S) and out["out", "h"].shape == (2, HID)
    assert estimator.in_keys[0] == ("z", "s") and estimator.out_keys == [("out", "s"), ("out", "h")]
    with pytest.raises(ValueError, match="in_keys must hold 5 keys"):
        RSSMStateEstimatorV3(prior, posterior, in_keys=["state", "belief"])
    with pytest.raises(ValueError, match="out_keys must hold 2 keys"):
        RSSMStateEstimatorV3(prior, posterior, out_keys=["state"])
    with pytest.raises(TypeError, match="prior must be an RSSMPriorV3, got Linear"):
        RSSMStateEstimatorV3(torch.nn.Linear(2, 2), posterior)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="posterior must be an RSSMPosteriorV3"):
        RSSMStateEstimatorV3(prior, prior)  # type: ignore[arg-type]
    bad = data.clone()
    bad["done"] = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="reset flag 'done' must have shape"):
        estimator(bad)
