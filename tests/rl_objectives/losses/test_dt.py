"""DTLoss and OnlineDTLoss: values against hand-written references (reductions, padding mask),
gradient routing, keys, errors, compile, and short learning runs on synthetic expert data."""

import math

import pytest
import torch
from rl_objectives.losses.decision_transformer import DTLoss, OnlineDTLoss
from rl_objectives.modules import ProbabilisticActor, TanhNormal
from rl_objectives.modules.decision_transformer import DTActor, OnlineDTActor
from tdict import TensorDict
from tdict.nn import TensorDictModule
from tdict.specs import Bounded
from torch import nn

OBS, ACT, T = 3, 2, 5
IN_KEYS = ["observation", "action", "return_to_go"]


def tiny(**overrides):
    config = {
        "n_embd": 16,
        "n_layer": 1,
        "n_head": 2,
        "n_inner": 32,
        "n_positions": 30,
        "resid_pdrop": 0.0,
        "attn_pdrop": 0.0,
    }
    config.update(overrides)
    return config


def batch(b=4, steps=T, seed=0, time_in_batch=True, mask=False):
    g = torch.Generator().manual_seed(seed)
    data = {
        "observation": torch.randn(b, steps, OBS, generator=g),
        "action": torch.rand(b, steps, ACT, generator=g) * 1.8 - 0.9,
        "return_to_go": torch.randn(b, steps, generator=g),
    }
    if mask:
        lengths = torch.tensor([steps, steps - 2, 1, steps - 1][:b])
        data["mask"] = torch.arange(steps).expand(b, steps) < lengths.unsqueeze(-1)
    return TensorDict(data, batch_size=[b, steps] if time_in_batch else [b])


def dt_actor(seed=0, **kw):
    torch.manual_seed(seed)
    net = DTActor(OBS, ACT, tiny(**kw))
    return net, TensorDictModule(net, in_keys=IN_KEYS, out_keys=["action"])


def online_actor(seed=0, spec=None):
    torch.manual_seed(seed)
    net = OnlineDTActor(OBS, ACT, tiny())
    module = TensorDictModule(net, in_keys=IN_KEYS, out_keys=["loc", "scale"])
    return net, ProbabilisticActor(
        module, in_keys=["loc", "scale"], out_keys=["action"], distribution_class=TanhNormal, spec=spec
    )


def reference_distance(pred, target, loss_function):
    diff = pred - target
    if loss_function == "l2":
        return diff**2
    if loss_function == "l1":
        return diff.abs()
    return torch.where(diff.abs() < 1, 0.5 * diff**2, diff.abs() - 0.5)


def reference_reduce(values, mask, reduction):
    """Loop over the steps: keep the real ones, then mean / sum / zero-filled per step."""
    out = torch.zeros_like(values)
    kept = []
    for i in range(values.shape[0]):
        for t in range(values.shape[1]):
            if mask is None or bool(mask[i, t]):
                out[i, t] = values[i, t]
                kept.append(values[i, t].reshape(-1))
    flat = torch.cat(kept)
    return {"none": out, "sum": flat.sum(), "mean": flat.mean()}[reduction]


# ---------------------------------------------------------------------------------------- DTLoss
class TestDTLoss:
    @pytest.mark.parametrize("loss_function", ["l2", "l1", "smooth_l1"])
    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    @pytest.mark.parametrize("masked", [False, True])
    def test_matches_reference(self, loss_function, reduction, masked):
        net, actor = dt_actor()
        loss = DTLoss(actor, loss_function=loss_function, reduction=reduction).set_keys(action_target="expert")
        td = batch(mask=masked)
        td.set("expert", td["action"] * 0.5)
        if masked:  # padded steps of the target hold garbage (nan); it must not reach the loss
            td["expert"][~td["mask"]] = float("nan")
        pred = net(td["observation"], td["action"], td["return_to_go"])
        expected = reference_reduce(
            reference_distance(pred, td["expert"], loss_function), td.get("mask", None), reduction
        )
        out = loss(td)
        assert list(out.keys()) == ["loss"] and out.batch_size == ()
        torch.testing.assert_close(out["loss"], expected, equal_nan=False)

    def test_tensordict_batch_without_time_dim_and_input_untouched(self):
        _, actor = dt_actor()
        loss = DTLoss(actor)
        td = batch(time_in_batch=False)
        before = td.clone()
        out = loss(td)
        assert out["loss"].shape == ()
        assert set(td.keys()) == set(before.keys())
        torch.testing.assert_close(td["action"], before["action"])  # the actor wrote its prediction into a copy
        torch.testing.assert_close(loss(batch(time_in_batch=True))["loss"], out["loss"])

    def test_gradient_routing(self):
        net, actor = dt_actor()
        loss = DTLoss(actor)
        td = batch()
        td["action"].requires_grad_(True)
        loss(td)["loss"].backward()
        for name, p in net.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert td["action"].grad is not None  # through the action tokens only: the target side is detached
        assert list(loss.parameters()) and all(p.grad is not None for p in loss.parameters())

    def test_target_action_detached(self):
        """The data action is an input token and a target: the target side gets no gradient."""
        _, actor = dt_actor()
        loss = DTLoss(actor, reduction="sum")
        td = batch()
        target = td["action"].clone().requires_grad_(True)
        td.set("expert", target)
        loss.set_keys(action_target="expert")
        loss(td)["loss"].backward()
        assert target.grad is None

    def test_set_keys(self):
        net, _ = dt_actor()
        actor = TensorDictModule(net, in_keys=IN_KEYS, out_keys=["predicted"])
        loss = DTLoss(actor).set_keys(action_pred="predicted", action_target="expert", mask="valid")
        td = batch(mask=True)
        td.rename_key_("mask", "valid")
        td.set("expert", td["action"] * 0.5)
        pred = net(td["observation"], td["action"], td["return_to_go"])
        expected = reference_reduce((pred - td["expert"]) ** 2, td["valid"], "mean")
        torch.testing.assert_close(loss(td)["loss"], expected)
        assert loss.in_keys == sorted(["action", "expert", "observation", "return_to_go"])
        with pytest.raises(ValueError, match="unknown key name"):
            loss.set_keys(reward="r")

    def test_errors(self):
        _, actor = dt_actor()
        with pytest.raises(ValueError, match="loss_function must be one of"):
            DTLoss(actor, loss_function="huber")
        with pytest.raises(ValueError, match="reduction must be one of"):
            DTLoss(actor, reduction="max")
        with pytest.raises(TypeError, match="must be an nn.Module"):
            DTLoss(lambda td: td)
        loss = DTLoss(actor)
        td = batch()
        with pytest.raises(KeyError, match="misses 'action'"):
            loss(td.exclude("action"))
        bad = td.clone()
        bad.set("mask", torch.ones(4, T))
        with pytest.raises(ValueError, match="must be a bool tensor"):
            loss(bad)
        with pytest.raises(ValueError, match=r"per-step shape \(4, 5\)"):
            loss(batch(time_in_batch=False).set("mask", torch.ones(4, T, 1, dtype=torch.bool)))
        other = TensorDictModule(nn.Linear(OBS, 3), in_keys=["observation"], out_keys=["action"])
        with pytest.raises(ValueError, match=r"has shape \(4, 5, 3\) but the data action"):
            DTLoss(other)(td)

    def test_compiled_forward_matches_eager(self, assert_compiled_matches_eager):
        _, actor = dt_actor()
        assert_compiled_matches_eager(DTLoss(actor), batch(mask=True))

    def test_learns_expert_policy(self):
        """Offline: imitate ``a = tanh(W s)`` from synthetic trajectories; the loss drops 20-fold."""
        torch.manual_seed(0)
        w = torch.randn(OBS, ACT)
        obs = torch.randn(32, 6, OBS)
        action = torch.tanh(obs @ w)
        rtg = -(action**2).sum(-1).flip(-1).cumsum(-1).flip(-1)  # any per-step return-to-go
        data = TensorDict(observation=obs, action=action, return_to_go=rtg, batch_size=[32, 6])
        net = DTActor(OBS, ACT, tiny(n_embd=32, n_inner=64), action_tanh=True)
        loss = DTLoss(TensorDictModule(net, in_keys=IN_KEYS, out_keys=["action"]))
        optim = torch.optim.Adam(loss.parameters(), lr=3e-3)
        first = loss(data)["loss"].item()
        for _ in range(100):
            value = loss(data)["loss"]
            optim.zero_grad()
            value.backward()
            optim.step()
        assert loss(data)["loss"].item() < first / 20


# ---------------------------------------------------------------------------------- OnlineDTLoss
def online_reference(net, td, n_samples, alpha, log_alpha, target_entropy, reduction, seed):
    """log-likelihood, entropy and temperature terms by hand, with the same rsample noise."""
    loc, scale = net(td["observation"], td["action"], td["return_to_go"])
    torch.manual_seed(seed)
    noise = torch.randn(n_samples, *loc.shape)

    # TanhNormal by hand: y = tanh(x), log p(y) = log N(atanh y) - log(1 - y^2), summed over the action dim
    def log_prob(y):
        eps = torch.finfo(y.dtype).eps
        y = y.clamp(-1 + eps, 1 - eps)
        x = torch.atanh(y)
        normal = -((x - loc) ** 2) / (2 * scale**2) - scale.log() - 0.5 * math.log(2 * math.pi)
        return (normal - torch.log1p(-y) - torch.log1p(y)).sum(-1)

    # the policy's own draws are scored from the Normal draw x itself, log(1 - tanh(x)^2) in a stable form
    def log_prob_of_draw(x):
        normal = -((x - loc) ** 2) / (2 * scale**2) - scale.log() - 0.5 * math.log(2 * math.pi)
        return (normal - (math.log(4.0) - 2 * x.abs() - 2 * torch.log1p(torch.exp(-2 * x.abs())))).sum(-1)

    entropy = -torch.stack([log_prob_of_draw(loc + scale * n) for n in noise]).mean(0)
    mask = td.get("mask", None)
    ll = reference_reduce(log_prob(td["action"]), mask, reduction)
    ent = reference_reduce(entropy, mask, reduction)
    gap = reference_reduce(entropy - target_entropy, mask, reduction)
    return {
        "loss_log_likelihood": -ll,
        "loss_entropy": -alpha * ent,
        "loss_alpha": math.exp(log_alpha) * gap,
        "entropy": reference_reduce(entropy, mask, "mean"),
        "alpha": torch.tensor(alpha),
    }


class TestOnlineDTLoss:
    @pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
    @pytest.mark.parametrize("masked", [False, True])
    @pytest.mark.parametrize("n_samples", [1, 3])
    def test_matches_reference(self, reduction, masked, n_samples):
        net, actor = online_actor()
        # reduction="none": TorchRL leaves the scalars out unless they are kept as non-tensor entries
        mode = "non_tensor" if reduction == "none" else None
        loss = OnlineDTLoss(
            actor,
            alpha_init=0.2,
            target_entropy=-1.5,
            samples_mc_entropy=n_samples,
            reduction=reduction,
            scalar_output_mode=mode,
        )
        td = batch(mask=masked)
        torch.manual_seed(7)
        out = loss(td)
        expected = online_reference(net, td, n_samples, 0.2, math.log(0.2), -1.5, reduction, seed=7)
        assert set(out.keys()) == set(expected)
        for key, value in expected.items():
            torch.testing.assert_close(out[key], value.to(out[key].dtype), msg=lambda m, key=key: f"{key}: {m}")

    def test_gradient_routing(self):
        net, actor = online_actor()
        loss = OnlineDTLoss(actor, alpha_init=0.5)
        out = loss(batch())
        actor_params = list(net.parameters())
        for term in ("loss_log_likelihood", "loss_entropy"):
            grads = torch.autograd.grad(
                out[term], actor_params + [loss.log_alpha], retain_graph=True, allow_unused=True
            )
            assert all(g is not None for g in grads[:-1]), term
            assert grads[-1] is None, term  # alpha is detached in the actor's terms
        grads = torch.autograd.grad(out["loss_alpha"], actor_params + [loss.log_alpha], allow_unused=True)
        assert all(g is None for g in grads[:-1]) and grads[-1] is not None
        assert not out["alpha"].requires_grad and not out["entropy"].requires_grad

    def test_temperature_direction_and_bounds(self):
        _, actor = online_actor()
        high = OnlineDTLoss(actor, alpha_init=0.5, target_entropy=-100.0)  # entropy far above target
        out = high(batch())
        (grad,) = torch.autograd.grad(out["loss_alpha"], high.log_alpha)
        assert grad > 0  # gradient descent lowers alpha
        low = OnlineDTLoss(actor, alpha_init=0.5, target_entropy=100.0)
        (grad,) = torch.autograd.grad(low(batch())["loss_alpha"], low.log_alpha)
        assert grad < 0
        clamped = OnlineDTLoss(actor, alpha_init=0.5, min_alpha=0.01, max_alpha=0.1)
        torch.testing.assert_close(clamped(batch())["alpha"], torch.tensor(0.1))
        fixed = OnlineDTLoss(actor, alpha_init=0.3, fixed_alpha=True)
        assert "log_alpha" in dict(fixed.named_buffers()) and not fixed.log_alpha.requires_grad
        assert not fixed(batch())["loss_alpha"].requires_grad

    def test_target_entropy(self):
        _, with_spec = online_actor(spec=Bounded(-1.0, 1.0, shape=(ACT,)))
        assert OnlineDTLoss(with_spec).target_entropy == -2.0
        _, actor = online_actor()
        inferred = OnlineDTLoss(actor)
        assert inferred.target_entropy is None
        inferred(batch())
        assert inferred.target_entropy == -2.0
        assert OnlineDTLoss(actor, target_entropy=-0.5).target_entropy == -0.5

    def test_keys_and_input_untouched(self):
        net, actor = online_actor()
        loss = OnlineDTLoss(actor, reduction="sum").set_keys(action_target="expert", mask="valid")
        td = batch(mask=True)
        td.rename_key_("mask", "valid")
        td.set("expert", td["action"].clone())
        before = td.clone()
        torch.manual_seed(1)
        out = loss(td)
        assert set(td.keys()) == set(before.keys())
        ref = online_reference(net, before.rename_key_("valid", "mask"), 1, 1.0, 0.0, -2.0, "sum", seed=1)
        torch.testing.assert_close(out["loss_log_likelihood"], ref["loss_log_likelihood"])

    def test_errors(self):
        _, actor = online_actor()
        with pytest.raises(TypeError, match="get_dist"):
            OnlineDTLoss(TensorDictModule(nn.Linear(OBS, ACT), in_keys=["observation"], out_keys=["action"]))
        with pytest.raises(ValueError, match="samples_mc_entropy must be a positive int"):
            OnlineDTLoss(actor, samples_mc_entropy=0)
        with pytest.raises(ValueError, match="target_entropy must be a number or 'auto'"):
            OnlineDTLoss(actor, target_entropy="high")
        with pytest.raises(ValueError, match="alpha_init must be a number > 0"):
            OnlineDTLoss(actor, alpha_init=0.0)
        with pytest.raises(ValueError, match="min_alpha .* is above max_alpha"):
            OnlineDTLoss(actor, min_alpha=1.0, max_alpha=0.1)
        loss = OnlineDTLoss(actor)
        td = batch()
        td.set("action", td["action"].clone().requires_grad_(True))
        with pytest.raises(RuntimeError, match="requires grad"):
            loss(td)

    def test_compiled_forward_matches_eager(self, assert_compiled_matches_eager):
        _, actor = online_actor()
        assert_compiled_matches_eager(
            OnlineDTLoss(actor, target_entropy=-2.0, samples_mc_entropy=2), batch(mask=True), seed=5
        )

    def test_learns_to_fit_expert_actions(self):
        """The log-likelihood of the expert's actions rises while the entropy term keeps the policy stochastic."""
        torch.manual_seed(0)
        w = torch.randn(OBS, ACT)
        obs = torch.randn(32, 6, OBS)
        data = TensorDict(
            observation=obs, action=torch.tanh(obs @ w) * 0.9, return_to_go=torch.zeros(32, 6), batch_size=[32, 6]
        )
        _, actor = online_actor()
        loss = OnlineDTLoss(actor, alpha_init=0.01, target_entropy=-2.0)
        optim = torch.optim.Adam(loss.parameters(), lr=3e-3)
        first = loss(data)["loss_log_likelihood"].item()
        for _ in range(120):
            out = loss(data)
            total = out["loss_log_likelihood"] + out["loss_entropy"] + out["loss_alpha"]
            optim.zero_grad()
            total.backward()
            optim.step()
        assert loss(data)["loss_log_likelihood"].item() < first - 2.0
