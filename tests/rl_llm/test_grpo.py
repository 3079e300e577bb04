"""Group advantages and GRPOLoss against hand-written references, gradients, and a tiny learning run."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rl_llm import GRPOLoss, MCAdvantage, TransformersWrapper, group_advantages
from rl_llm.data import left_pad, repeat_prompts, right_pad
from tdict import TensorDict


def _loop_advantages(rewards, groups, eps, unbiased):
    out = []
    for r, g in zip(rewards, groups):
        members = [x for x, h in zip(rewards, groups) if h == g]
        mean = sum(members) / len(members)
        var = sum((x - mean) ** 2 for x in members) / (len(members) - 1 if unbiased else len(members))
        out.append((r - mean) / (math.sqrt(var) + eps))
    return out


@given(
    st.lists(st.floats(-5, 5), min_size=2, max_size=5),
    st.integers(2, 4),
    st.booleans(),
)
def test_group_advantages_match_a_loop(rewards_per_group, n_groups, unbiased):
    g = len(rewards_per_group)
    rewards = [r + k for k in range(n_groups) for r in rewards_per_group]
    groups = [k for k in range(n_groups) for _ in range(g)]
    got = group_advantages(
        torch.tensor(rewards, dtype=torch.float64), torch.tensor(groups), eps=1e-4, unbiased=unbiased
    )
    expected = _loop_advantages(rewards, groups, 1e-4, unbiased)
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), atol=1e-6, rtol=1e-6)


def test_mc_advantage_order_prompt_and_2d_batch():
    rewards = torch.tensor([1.0, 0.0, 0.0, 3.0, 3.0, 0.0])
    td = TensorDict(reward=rewards, batch_size=[6])
    adv = MCAdvantage(grpo_size=3)(td)["advantage"]
    torch.testing.assert_close(adv, torch.tensor(_loop_advantages(rewards.tolist(), [0, 0, 0, 1, 1, 1], 1e-4, True)))
    # the same groups, interleaved, found by prompt
    p, pm = left_pad([[4, 5], [7], [4, 5], [7], [4, 5], [7]], 0)
    r2 = torch.tensor([1.0, 3.0, 0.0, 3.0, 0.0, 0.0])
    td2 = TensorDict({"reward": r2, ("tokens", "prompt"): p, ("masks", "prompt_attention_mask"): pm}, batch_size=[6])
    adv2 = MCAdvantage(grpo_size=3, group_by="prompt")(td2)["advantage"]
    torch.testing.assert_close(adv2, adv[[0, 3, 1, 4, 2, 5]])
    td3 = TensorDict(reward=rewards.reshape(2, 3), batch_size=[2, 3])
    assert MCAdvantage(grpo_size=3)(td3)["advantage"].shape == (2, 3)
    torch.testing.assert_close(td3["advantage"].reshape(-1), adv)


def test_mc_advantage_errors():
    with pytest.raises(ValueError, match="whole number of groups"):
        MCAdvantage(grpo_size=4)(TensorDict(reward=torch.zeros(6), batch_size=[6]))
    with pytest.raises(ValueError, match="no trailing 1"):
        MCAdvantage(grpo_size=2)(TensorDict(reward=torch.zeros(6, 1), batch_size=[6]))
    with pytest.raises(KeyError, match="reward"):
        MCAdvantage(grpo_size=2)(TensorDict(r=torch.zeros(6), batch_size=[6]))
    with pytest.raises(ValueError, match="grpo_size >= 2"):
        MCAdvantage(grpo_size=1)
    p, pm = left_pad([[4], [4], [5]], 0)
    td = TensorDict(
        {"reward": torch.zeros(3), ("tokens", "prompt"): p, ("masks", "prompt_attention_mask"): pm}, batch_size=[3]
    )
    with pytest.raises(ValueError, match="sizes"):
        MCAdvantage(grpo_size=3, group_by="prompt")(td)


PROMPTS = [[3, 7], [5, 6, 8], [3, 7], [5, 6, 8]]
RESPONSES = [[12, 13, 14], [15], [16, 17, 1], [9, 9]]


def _rollout(model, seed=0):
    p, pm = left_pad(PROMPTS, 0)
    r, rm = right_pad(RESPONSES, 0)
    td = TensorDict(
        {
            ("tokens", "prompt"): p,
            ("masks", "prompt_attention_mask"): pm,
            ("tokens", "response"): r,
            ("masks", "response_mask"): rm,
        },
        batch_size=[4],
    )
    with torch.no_grad():
        current = TransformersWrapper(model, generate=False)(td.copy())["log_probs", "response"]
    g = torch.Generator().manual_seed(seed)
    # behaviour log-probs off the current ones by up to +-0.5: some ratios leave [0.8, 1.2]
    td["log_probs", "response"] = torch.where(rm, current + (torch.rand(current.shape, generator=g) - 0.5), 0.0)
    td["advantage"] = torch.tensor([1.0, -0.5, -1.0, 2.0])
    td["ref_log_probs", "response"] = torch.where(rm, current - 0.3 * torch.rand(current.shape, generator=g), 0.0)
    return td, current


def _reference(current, td, eps_low, eps_high, aggregation, kl_coeff):
    """Plain loops over sequences and tokens."""
    mask = td["masks", "response_mask"]
    old, adv, ref = td["log_probs", "response"], td["advantage"], td["ref_log_probs", "response"]
    per_seq, per_seq_kl, all_tok, all_kl, clipped, n = [], [], [], [], 0, 0
    for i in range(mask.shape[0]):
        losses, kls = [], []
        for t in range(mask.shape[1]):
            if not mask[i, t]:
                continue
            rho = math.exp(current[i, t] - old[i, t])
            a = float(adv[i])
            losses.append(-min(rho * a, min(max(rho, 1 - eps_low), 1 + eps_high) * a))
            d = float(ref[i, t] - current[i, t])
            kls.append(math.exp(d) - d - 1)
            clipped += rho < 1 - eps_low or rho > 1 + eps_high
            n += 1
        per_seq.append(sum(losses) / len(losses))
        per_seq_kl.append(sum(kls) / len(kls))
        all_tok += losses
        all_kl += kls
    if aggregation == "token_mean":
        obj, kl = sum(all_tok) / n, sum(all_kl) / n
    else:
        obj, kl = sum(per_seq) / len(per_seq), sum(per_seq_kl) / len(per_seq_kl)
    return obj, kl_coeff * kl, clipped / n


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
@pytest.mark.parametrize("clip", [0.2, (0.1, 0.3)])
def test_grpo_loss_matches_reference(model, aggregation, clip):
    td, current = _rollout(model)
    loss = GRPOLoss(
        TransformersWrapper(model, generate=False), clip_epsilon=clip, kl_to_ref_coeff=0.05, aggregation=aggregation
    )
    out = loss(td)
    low, high = (clip, clip) if isinstance(clip, float) else clip
    obj, kl, frac = _reference(current, td, low, high, aggregation, 0.05)
    assert out["loss_objective"].shape == ()
    assert out["loss_objective"].item() == pytest.approx(obj, abs=1e-5)
    assert out["loss_kl_to_ref"].item() == pytest.approx(kl, abs=1e-6)
    assert out["clip_fraction"].item() == pytest.approx(frac)
    assert 0 < frac < 1  # the test exercises both branches
    mask = td["masks", "response_mask"]
    rho = (current - td["log_probs", "response"]).exp()[mask]
    assert out["ESS"].item() == pytest.approx((rho.sum() ** 2 / (rho.numel() * (rho**2).sum())).item(), rel=1e-5)
    assert out["kl_approx"].item() == pytest.approx((rho - 1 - rho.log()).mean().item(), abs=1e-5)
    # the stored behaviour log-probs are left alone
    assert not torch.equal(td["log_probs", "response"], current)


def test_grpo_gradients_flow_only_to_the_policy_and_ignore_padding(model, ref_model):
    td, _ = _rollout(model)
    td["log_probs", "response"].requires_grad_(True)
    td["advantage"].requires_grad_(True)
    loss = GRPOLoss(TransformersWrapper(model, generate=False), kl_to_ref_coeff=0.1)
    out = loss(td)
    (out["loss_objective"] + out["loss_kl_to_ref"]).backward()
    assert td["log_probs", "response"].grad is None and td["advantage"].grad is None
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert all(p.grad is None for p in ref_model.parameters())
    assert not out["clip_fraction"].requires_grad and not out["ESS"].requires_grad
    # tokens under a false mask change neither the loss nor its gradient
    grad = model.transformer.h[0].attn.c_attn.weight.grad.clone()
    model.zero_grad()
    td2 = td.copy()
    r = td["tokens", "response"].clone()
    r[~td["masks", "response_mask"]] = 20
    td2["tokens", "response"] = r
    out2 = loss(td2)
    (out2["loss_objective"] + out2["loss_kl_to_ref"]).backward()
    torch.testing.assert_close(out2["loss_objective"], out["loss_objective"])
    torch.testing.assert_close(model.transformer.h[0].attn.c_attn.weight.grad, grad, atol=1e-6, rtol=1e-5)


def test_grpo_entropy_term(model):
    td, _ = _rollout(model)
    actor = TransformersWrapper(model, generate=False, return_entropy=True)
    out = GRPOLoss(actor, entropy_coeff=0.01)(td)
    ent = actor(td.copy())["entropy", "response"]
    mask = td["masks", "response_mask"]
    assert out["loss_entropy"].item() == pytest.approx(-0.01 * ent[mask].mean().item(), rel=1e-5)
    with pytest.raises(ValueError, match="return_entropy"):
        GRPOLoss(TransformersWrapper(model, generate=False), entropy_coeff=0.01)


def test_grpo_errors(model):
    with pytest.raises(ValueError, match="generate=False"):
        GRPOLoss(TransformersWrapper(model))
    with pytest.raises(ValueError, match="aggregation"):
        GRPOLoss(TransformersWrapper(model, generate=False), aggregation="mean")
    td, _ = _rollout(model)
    td["advantage"] = td["advantage"].unsqueeze(-1)
    with pytest.raises(ValueError, match="no trailing 1"):
        GRPOLoss(TransformersWrapper(model, generate=False))(td)
    td, _ = _rollout(model)
    del td["ref_log_probs"]
    with pytest.raises(KeyError, match="ref_log_probs"):
        GRPOLoss(TransformersWrapper(model, generate=False), kl_to_ref_coeff=0.1)(td)


def test_grpo_keys_carry_torchrl_names(model):
    # TorchRL's GRPOLoss names the behaviour log-probs sample_log_prob and the reference ones ref_log_probs
    loss = GRPOLoss(TransformersWrapper(model, generate=False), kl_to_ref_coeff=0.1)
    assert loss.tensor_keys.sample_log_prob == ("log_probs", "response")
    assert loss.tensor_keys.ref_log_probs == ("ref_log_probs", "response")
    td, _ = _rollout(model)
    ref = loss(td.copy())
    td["my_ref"] = td.pop("ref_log_probs")
    loss.set_keys(ref_log_probs=("my_ref", "response"))
    torch.testing.assert_close(loss(td.copy())["loss_kl_to_ref"], ref["loss_kl_to_ref"])
    # this package's former name still works, with a DeprecationWarning
    old = GRPOLoss(TransformersWrapper(model, generate=False), kl_to_ref_coeff=0.1)
    with pytest.warns(DeprecationWarning, match="'ref_log_prob' is deprecated, use 'ref_log_probs'"):
        old.set_keys(ref_log_prob=("my_ref", "response"))
    assert old.tensor_keys.ref_log_probs == ("my_ref", "response")


def test_grpo_learns_a_rule_reward(model, tokenizer):
    """reward = fraction of the target word in the response: the mean reward rises within 30 steps."""
    torch.manual_seed(0)
    target = tokenizer.convert_tokens_to_ids("yes")
    sampler = TransformersWrapper(model, generate_kwargs={"max_new_tokens": 4})
    loss = GRPOLoss(TransformersWrapper(model, generate=False), clip_epsilon=0.2)
    adv = MCAdvantage(grpo_size=8)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    p, pm = left_pad([[3, 7], [5, 6, 8]], 0)
    prompts = TensorDict({("tokens", "prompt"): p, ("masks", "prompt_attention_mask"): pm}, batch_size=[2])
    means = []
    for _ in range(30):
        td = sampler(repeat_prompts(prompts, 8))
        hits = (td["tokens", "response"] == target) & td["masks", "response_mask"]
        td["reward"] = hits.float().sum(-1) / td["masks", "response_mask"].sum(-1).clamp(min=1)
        means.append(td["reward"].mean().item())
        adv(td)
        for _ in range(2):  # two epochs: the second uses ratios != 1
            opt.zero_grad()
            loss(td)["loss_objective"].backward()
            opt.step()
    assert sum(means[:5]) / 5 < 0.2
    assert sum(means[-5:]) / 5 > 0.5
