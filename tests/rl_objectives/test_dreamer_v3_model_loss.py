"""DreamerV3ModelLoss against its terms written out here (KL, symlog reconstruction, two-hot
reward, continue), its options and errors, and a small RSSM world model that it trains."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from rl_objectives.functional.dreamer import symexp_bins, two_hot_encode
from rl_objectives.losses.dreamer_v3_model import DreamerV3ModelLoss
from rl_objectives.modules import MLP, RSSMPosteriorV3, RSSMPriorV3, RSSMRolloutV3
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictSequential

B, T, C, K, BINS = 2, 3, 4, 5, 9


class _Echo(torch.nn.Module):
    """A 'world model' writing tensors the test chose (through a parameter, so that gradients flow)."""

    def __init__(self, outputs: dict) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.outputs = outputs

    def forward(self, td):
        for key, value in self.outputs.items():
            td.set(("next", key), value * self.scale if value.is_floating_point() else value)
        return td


def _batch(pixels=None):
    torch.manual_seed(0)
    return TensorDict(
        {
            "next": {
                "pixels": torch.randn(B, T, 6) * 5 if pixels is None else pixels,
                "reward": torch.randn(B, T, 1) * 3,
                "terminated": torch.tensor([[False, False, True], [False, False, False]]).unsqueeze(-1),
            }
        },
        [B, T],
    )


def _outputs():
    torch.manual_seed(1)
    return {
        "prior_logits": torch.randn(B, T, C, K),
        "posterior_logits": torch.randn(B, T, C, K),
        "reco_pixels": torch.randn(B, T, 6) * 5,
        "reward_logits": torch.randn(B, T, BINS),
        "continue_pred": torch.randn(B, T, 1),
    }


def _symlog(x):
    return torch.sign(x) * torch.log(1 + x.abs())


def _kl(q_logits, p_logits):
    q, p = torch.softmax(q_logits, -1).clamp_min(1e-8), torch.softmax(p_logits, -1).clamp_min(1e-8)
    return (q * (q.log() - p.log())).sum(-1)


def test_terms_equal_the_formulas():
    out, td = _outputs(), _batch()
    loss = DreamerV3ModelLoss(_Echo(out), num_reward_bins=BINS, free_bits=0.3, lambda_continue=0.5, lambda_kl=2.0)
    losses, model_out = loss(td)
    assert sorted(losses.keys()) == ["loss_model_continue", "loss_model_kl", "loss_model_reco", "loss_model_reward"]
    assert all(v.shape == (1,) for v in losses.values())
    kl = _kl(out["posterior_logits"], out["prior_logits"]).clamp_min(0.3).mean()
    torch.testing.assert_close(losses["loss_model_kl"], 2.0 * torch.stack([0.8 * kl + 0.2 * kl]))
    reco = (_symlog(td["next", "pixels"]) - _symlog(out["reco_pixels"])).square().sum(-1).mean()
    torch.testing.assert_close(losses["loss_model_reco"], reco.reshape(1))
    bins = symexp_bins(BINS)
    target = two_hot_encode(td["next", "reward"].squeeze(-1), bins)
    reward = -(target * torch.log_softmax(out["reward_logits"], -1)).sum(-1).mean()
    torch.testing.assert_close(losses["loss_model_reward"], reward.reshape(1))
    y = (~td["next", "terminated"]).float().squeeze(-1)
    x = out["continue_pred"].squeeze(-1)
    bce = -(y * F.logsigmoid(x) + (1 - y) * F.logsigmoid(-x)).mean()
    torch.testing.assert_close(losses["loss_model_continue"], 0.5 * bce.reshape(1))
    # the batch is left alone; the output holds the true reward apart, detached
    assert "true_reward" not in td["next"].keys() and "reward" in td["next"].keys()
    torch.testing.assert_close(model_out["next", "true_reward"], td["next", "reward"])
    assert not model_out["next", "reco_pixels"].requires_grad


def test_separate_kl_l1_global_average_and_symlog_off():
    out = _outputs()
    pixels = torch.randint(0, 256, (B, T, 6), dtype=torch.uint8)
    out["reco_pixels"] = torch.rand(B, T, 6)
    loss = DreamerV3ModelLoss(
        _Echo(out),
        num_reward_bins=BINS,
        kl_mode="separate",
        free_bits=0.0,
        unimix=0.01,
        lambda_dynamic=0.5,
        lambda_representation=0.1,
        reco_loss="l1",
        reco_symlog=False,
        global_average=True,
        detach_output=False,
    )
    losses, model_out = loss(_batch(pixels))
    q = 0.99 * torch.softmax(out["posterior_logits"], -1) + 0.01 / K
    p = 0.99 * torch.softmax(out["prior_logits"], -1) + 0.01 / K
    kl = (q * (q.log() - p.log())).sum((-1, -2)).mean()
    torch.testing.assert_close(losses["loss_model_dynamic"], 0.5 * kl.reshape(1))
    torch.testing.assert_close(losses["loss_model_representation"], 0.1 * kl.reshape(1))
    reco = (pixels.float() / 255.0 - out["reco_pixels"]).abs().mean()
    torch.testing.assert_close(losses["loss_model_reco"], reco.reshape(1))
    assert "loss_model_continue" not in losses.keys()  # lambda_continue 0: off
    assert model_out["next", "reco_pixels"].requires_grad  # detach_output=False


def test_several_heads_and_a_value_reward():
    out = _outputs()
    out["depth"] = torch.randn(B, T, 2)
    td = _batch()
    td.set(("next", "depth_obs"), torch.randn(B, T, 2))
    loss = DreamerV3ModelLoss(_Echo(out), reward_two_hot=False, reco_symlog=[True, False])
    loss.set_keys(pixels=["pixels", "depth_obs"], reco_pixels=["reco_pixels", "depth"], reward="reward")
    out["reward"] = torch.randn(B, T, 1)
    losses, _ = loss(td)
    reco = (_symlog(td["next", "pixels"]) - _symlog(out["reco_pixels"])).square().sum(-1).mean()
    reco = reco + (td["next", "depth_obs"] - out["depth"]).square().sum(-1).mean()
    torch.testing.assert_close(losses["loss_model_reco"], reco.reshape(1))
    reward = (_symlog(td["next", "reward"]) - _symlog(out["reward"])).square().mean()
    torch.testing.assert_close(losses["loss_model_reward"], reward.reshape(1))


def test_errors_and_the_deprecated_logits_key():
    with pytest.raises(ValueError, match="kl_mode"):
        DreamerV3ModelLoss(torch.nn.Identity(), kl_mode="sum")
    with pytest.raises(ValueError, match="reco_loss"):
        DreamerV3ModelLoss(torch.nn.Identity(), reco_loss="huber")
    with pytest.raises(ValueError, match="continue_target_scale"):
        DreamerV3ModelLoss(torch.nn.Identity(), continue_target_scale=0.0)
    out = _outputs()
    loss = DreamerV3ModelLoss(_Echo(out), num_reward_bins=BINS + 1)
    with pytest.raises(ValueError, match="over 10 bins"):
        loss(_batch())
    loss = DreamerV3ModelLoss(_Echo(out), reco_symlog=[True, False], num_reward_bins=BINS)
    with pytest.raises(ValueError, match="same non-zero number"):
        loss(_batch())
    legacy = dict(out)
    legacy["reward"] = legacy.pop("reward_logits")
    with pytest.warns(DeprecationWarning, match="reward_logits key"):
        DreamerV3ModelLoss(_Echo(legacy), num_reward_bins=BINS)(_batch())


def _world_model(obs_dim: int = 6, action_dim: int = 2):
    torch.manual_seed(3)
    encoder = TensorDictModule(
        MLP(obs_dim, 8, depth=1, num_cells=16), in_keys=[("next", "pixels")], out_keys=[("next", "encoded_latents")]
    )
    prior = TensorDictModule(
        RSSMPriorV3(
            action_shape=(action_dim,),
            hidden_dim=16,
            rnn_hidden_dim=16,
            num_categoricals=C,
            num_classes=K,
            action_dim=action_dim,
            recurrent_model="block_gru",
            num_blocks=2,
            unimix=0.01,
        ),
        in_keys=["state", "belief", "action"],
        out_keys=[("next", "prior_logits"), "_", ("next", "belief")],
    )
    posterior = TensorDictModule(
        RSSMPosteriorV3(
            hidden_dim=16, num_categoricals=C, num_classes=K, rnn_hidden_dim=16, obs_embed_dim=8, unimix=0.01
        ),
        in_keys=[("next", "belief"), ("next", "encoded_latents")],
        out_keys=[("next", "posterior_logits"), ("next", "state")],
    )
    decoder = TensorDictModule(
        MLP(C * K + 16, obs_dim, depth=1, num_cells=16),
        in_keys=[("next", "state"), ("next", "belief")],
        out_keys=[("next", "reco_pixels")],
    )
    reward = TensorDictModule(
        MLP(C * K + 16, BINS, depth=1, num_cells=16),
        in_keys=[("next", "state"), ("next", "belief")],
        out_keys=[("next", "reward_logits")],
    )
    return TensorDictSequential(encoder, RSSMRolloutV3(prior, posterior), decoder, reward)


def test_trains_a_small_rssm_world_model():
    model = _world_model()
    torch.manual_seed(4)
    N, L = 4, 8
    pixels = torch.randn(N, L, 6).cumsum(1) * 0.3
    td = TensorDict(
        {
            "state": torch.zeros(N, L, C * K),
            "belief": torch.zeros(N, L, 16),
            "action": torch.randn(N, L, 2),
            "is_init": torch.zeros(N, L, 1, dtype=torch.bool).index_fill_(1, torch.tensor([0]), True),
            "next": {"pixels": pixels, "reward": pixels[..., :1].tanh()},
        },
        [N, L],
    )
    loss = DreamerV3ModelLoss(model, num_reward_bins=BINS, kl_mode="separate", free_bits=1.0)
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        losses, _ = loss(td)
        total = sum(losses.values())
        if first is None:
            first = float(total.detach())
            total.backward()
            assert all(p.grad is not None for p in model.parameters())  # every part of the model learns
        else:
            total.backward()
        optim.step()
        optim.zero_grad()
    assert float(total.detach()) < 0.7 * first
