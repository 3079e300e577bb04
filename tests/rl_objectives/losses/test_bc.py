"""BCLoss: values against hand-written formulas (negative log-likelihood, regression, cross-entropy),
gradients that reach exactly the actor's parameters, reductions, the padding mask, keys, errors,
compile, and a short learning run that recovers an expert's linear policy."""

import math

import pytest
import torch
import torch.nn.functional as F
from rl_objectives import BCLoss
from rl_objectives.modules import Actor, ProbabilisticActor, TanhDelta, TanhNormal
from tdict import TensorDict
from tdict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import distributions as D
from torch import nn

OBS, ACT, N, B = 3, 2, 4, 8  # observation size, action size, number of discrete actions, batch


def data(b=B, seed=0, discrete=None):
    """Observations and dataset actions: continuous in (-0.9, 0.9), or indices / one-hots."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, OBS, generator=g)
    if discrete is None:
        action = torch.rand(b, ACT, generator=g) * 1.8 - 0.9
    else:
        index = torch.randint(N, (b,), generator=g)
        action = {"index": index, "column": index.unsqueeze(-1), "one_hot": F.one_hot(index, N)}[discrete]
    return TensorDict(observation=obs, action=action, batch_size=[b])


def gaussian_actor(dist=D.Normal, seed=0):
    """``dist(loc, scale)`` with ``loc, scale = NormalParamExtractor()(linear(obs))``."""
    torch.manual_seed(seed)
    lin = nn.Linear(OBS, 2 * ACT)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(
            nn.Sequential(lin, NormalParamExtractor()), in_keys=["observation"], out_keys=["loc", "scale"]
        ),
        ProbabilisticTensorDictModule(in_keys=["loc", "scale"], out_keys=["action"], distribution_class=dist),
    )
    return actor, lin


def linear_actor(out=ACT, seed=0, out_key="action"):
    torch.manual_seed(seed)
    lin = nn.Linear(OBS, out)
    return Actor(lin, in_keys=["observation"], out_keys=[out_key]), lin


def loc_scale(lin, obs):
    return NormalParamExtractor()(lin(obs))  # the actor's own split of its head (tdict's, not under test here)


def normal_nll(lin, td):
    """``-log N(a; loc, scale)`` summed over the action dims, per row."""
    loc, scale = loc_scale(lin, td["observation"])
    z = (td["action"] - loc) / scale
    return (0.5 * z**2 + scale.log() + 0.5 * math.log(2 * math.pi)).sum(-1)


def cross_entropy(lin, td, index):
    logits = lin(td["observation"])
    return torch.logsumexp(logits, -1) - logits.gather(-1, index.unsqueeze(-1)).squeeze(-1)


def grads(params, value):
    return torch.autograd.grad(value, list(params))


def check_loss_and_grads(loss, td, actor_params, reference):
    """``loss_bc`` equals ``reference`` and its gradients equal the reference's, on exactly the actor's
    parameters (the loss holds no other parameter)."""
    assert {id(p) for p in loss.parameters()} == {id(p) for p in actor_params}
    out = loss(td)["loss_bc"]
    torch.testing.assert_close(out, reference)
    for got, want in zip(grads(actor_params, out), grads(actor_params, reference)):
        torch.testing.assert_close(got, want)
        assert got.abs().sum() > 0


# ------------------------------------------------------------------------------- values and gradients
class TestValues:
    @pytest.mark.parametrize("reduction", ["mean", "sum"])
    def test_nll_of_a_gaussian_actor(self, reduction):
        actor, lin = gaussian_actor()
        td = data()
        reference = normal_nll(lin, td)
        reference = reference.mean() if reduction == "mean" else reference.sum()
        check_loss_and_grads(BCLoss(actor, reduction=reduction), td, list(actor.parameters()), reference)

    def test_nll_of_a_tanh_normal_actor(self):
        torch.manual_seed(0)
        lin = nn.Linear(OBS, 2 * ACT)
        actor = ProbabilisticActor(
            TensorDictModule(
                nn.Sequential(lin, NormalParamExtractor()), in_keys=["observation"], out_keys=["loc", "scale"]
            ),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": -2.0, "high": 2.0},
        )
        td = data()
        td["action"] = td["action"] * 2  # in (-1.8, 1.8)
        loc, scale = loc_scale(lin, td["observation"])
        u = torch.atanh(td["action"] / 2)  # a = 2 tanh(u): log p(a) = log N(u) - log(2 (1 - tanh(u)^2))
        log_prob = D.Normal(loc, scale).log_prob(u) - torch.log(2 * (1 - torch.tanh(u) ** 2))
        check_loss_and_grads(BCLoss(actor), td, list(actor.parameters()), -log_prob.sum(-1).mean())

    @pytest.mark.parametrize("loss_function", [None, "l2", "mse", "l1", "smooth_l1"])
    def test_regression_of_a_deterministic_actor(self, loss_function):
        actor, lin = linear_actor()
        td = data()
        diff = lin(td["observation"]) - td["action"]
        elementwise = {
            None: diff**2,
            "l2": diff**2,
            "mse": diff**2,
            "l1": diff.abs(),
            "smooth_l1": torch.where(diff.abs() < 1, 0.5 * diff**2, diff.abs() - 0.5),
        }[loss_function]
        check_loss_and_grads(
            BCLoss(actor, loss_function=loss_function), td, list(actor.parameters()), elementwise.mean()
        )

    def test_callable_loss_function(self):
        actor, lin = linear_actor()
        td = data()
        loss = BCLoss(actor, loss_function=lambda pred, target: (pred - target).abs() ** 3)
        check_loss_and_grads(
            loss, td, list(actor.parameters()), ((lin(td["observation"]) - td["action"]).abs() ** 3).mean()
        )

    @pytest.mark.parametrize("form", ["index", "column", "one_hot"])
    def test_cross_entropy_of_logits(self, form):
        actor, lin = linear_actor(out=N)
        td = data(discrete=form)
        index = data(discrete="index")["action"]
        reference = cross_entropy(lin, td, index).mean()
        check_loss_and_grads(BCLoss(actor, loss_function="cross_entropy"), td, list(actor.parameters()), reference)
        if form != "one_hot":  # integer indices pick the cross-entropy by themselves
            torch.testing.assert_close(BCLoss(actor)(td)["loss_bc"], reference)

    @pytest.mark.parametrize("one_hot", [False, True])
    def test_nll_of_a_categorical_actor_is_the_cross_entropy(self, one_hot):
        torch.manual_seed(0)
        lin = nn.Linear(OBS, N)
        actor = ProbabilisticTensorDictSequential(
            TensorDictModule(lin, in_keys=["observation"], out_keys=["logits"]),
            ProbabilisticTensorDictModule(
                in_keys=["logits"],
                out_keys=["action"],
                distribution_class=D.OneHotCategorical if one_hot else D.Categorical,
            ),
        )
        td = data(discrete="one_hot" if one_hot else "index")
        if one_hot:
            td["action"] = td["action"].float()  # torch's OneHotCategorical scores float one-hots
        reference = cross_entropy(lin, td, data(discrete="index")["action"]).mean()
        check_loss_and_grads(BCLoss(actor), td, list(actor.parameters()), reference)

    def test_point_mass_actor_regresses_its_location(self):
        torch.manual_seed(0)
        lin = nn.Linear(OBS, ACT)
        actor = ProbabilisticActor(
            TensorDictModule(lin, in_keys=["observation"], out_keys=["param"]),
            in_keys=["param"],
            distribution_class=TanhDelta,
            distribution_kwargs={"low": -1.0, "high": 1.0},
        )
        td = data()
        reference = (
            (torch.tanh(lin(td["observation"])) - td["action"]) ** 2
        ).mean()  # not the -inf/0 log-prob of a Delta
        check_loss_and_grads(BCLoss(actor), td, list(actor.parameters()), reference)

    def test_the_dataset_action_is_a_detached_target(self):
        actor, lin = linear_actor()
        td = data()
        action = td["action"].clone().requires_grad_(True)
        td["action"] = action
        BCLoss(actor)(td)["loss_bc"].backward()
        assert action.grad is None
        assert all(p.grad is not None for p in actor.parameters())

    def test_reduction_none_keeps_the_shape(self):
        actor, lin = gaussian_actor()
        td = data()
        out = BCLoss(actor, reduction="none")(td)
        assert out.batch_size == td.batch_size
        torch.testing.assert_close(out["loss_bc"], normal_nll(lin, td))
        det, det_lin = linear_actor()
        out = BCLoss(det, reduction="none")(td)["loss_bc"]
        torch.testing.assert_close(
            out, (det_lin(td["observation"]) - td["action"]) ** 2
        )  # per action element, as TorchRL

    def test_two_batch_dims_match_the_flat_batch(self):
        actor, _ = gaussian_actor()
        td = data(b=6)
        loss = BCLoss(actor)
        torch.testing.assert_close(loss(td.reshape(2, 3))["loss_bc"], loss(td)["loss_bc"])
        assert BCLoss(actor, reduction="none")(td.reshape(2, 3))["loss_bc"].shape == (2, 3)

    def test_the_callers_tensordict_is_not_modified(self):
        actor, _ = linear_actor()
        td = data()
        before = td.clone()
        BCLoss(actor)(td)
        assert set(td.keys(True)) == set(before.keys(True))
        assert (td == before).all()


# ---------------------------------------------------------------------------------------- padding
class TestPadMask:
    def test_padded_rows_count_neither_in_the_loss_nor_in_its_mean(self):
        actor, lin = gaussian_actor()
        td = data()
        pad = torch.tensor([False, True, False, False, True, False, False, False])
        td["action"][pad] = 1e6  # garbage on the padding must not leak, not even into the gradient
        td["is_pad"] = pad
        reference = normal_nll(lin, td[~pad]).mean()
        check_loss_and_grads(BCLoss(actor).set_keys(pad_mask="is_pad"), td, list(actor.parameters()), reference)
        out = BCLoss(actor, reduction="none").set_keys(pad_mask="is_pad")(td)["loss_bc"]
        assert bool((out[pad] == 0).all()) and torch.allclose(out[~pad], normal_nll(lin, td[~pad]))

    def test_a_step_mask_broadcasts_over_the_action_elements(self):
        actor, lin = linear_actor()
        td = data()
        pad = torch.zeros(B, ACT, dtype=torch.bool)
        pad[2, 1] = pad[5] = True
        td["action"][pad] = 1e6
        td["is_pad"] = pad
        diff = (lin(td["observation"]) - td["action"]).abs()
        check_loss_and_grads(
            BCLoss(actor, loss_function="l1").set_keys(pad_mask="is_pad"),
            td,
            list(actor.parameters()),
            diff[~pad].mean(),
        )
        td["is_pad"] = pad.any(-1)  # [B]: whole rows
        torch.testing.assert_close(
            BCLoss(actor, loss_function="l1").set_keys(pad_mask="is_pad")(td)["loss_bc"], diff[~pad.any(-1)].mean()
        )

    def test_missing_entry_no_key_and_all_padded(self):
        actor, _ = linear_actor()
        td = data()
        plain = BCLoss(actor)(td)["loss_bc"]
        loss = BCLoss(actor).set_keys(pad_mask="is_pad")
        assert "is_pad" in loss.in_keys
        torch.testing.assert_close(loss(td)["loss_bc"], plain)  # a batch without the entry is not padded
        td["is_pad"] = torch.ones(B, dtype=torch.bool)
        assert loss(td)["loss_bc"].item() == 0.0  # nothing real: 0 (TorchRL: nan)
        loss.set_keys(pad_mask=None)
        assert "is_pad" not in loss.in_keys
        torch.testing.assert_close(loss(td)["loss_bc"], plain)

    def test_bad_masks_raise(self):
        actor, _ = gaussian_actor()
        td = data()
        loss = BCLoss(actor).set_keys(pad_mask="is_pad")
        td["is_pad"] = torch.zeros(B)
        with pytest.raises(ValueError, match="must be a bool tensor"):
            loss(td)
        td["is_pad"] = torch.zeros(B, ACT, dtype=torch.bool)  # the NLL has one value per row
        with pytest.raises(ValueError, match="per-element mask needs an element-wise loss"):
            loss(td)


# ------------------------------------------------------------------------------------------- keys
class TestKeys:
    def test_custom_action_key_reads_the_data_and_the_prediction(self):
        actor, lin = linear_actor(out_key="demo_action")
        td = data().rename_key_("action", "demo_action")
        loss = BCLoss(actor).set_keys(action="demo_action")
        assert loss.in_keys == ["demo_action", "observation"]
        torch.testing.assert_close(loss(td)["loss_bc"], ((lin(td["observation"]) - td["demo_action"]) ** 2).mean())

    def test_an_actor_writing_action_under_another_key_warns(self):
        actor, lin = linear_actor()  # writes "action"
        td = data().rename_key_("action", "demo_action")
        loss = BCLoss(actor).set_keys(action="demo_action")
        with pytest.warns(FutureWarning, match="deprecated"):
            out = loss(td)["loss_bc"]
        torch.testing.assert_close(out, ((lin(td["observation"]) - td["demo_action"]) ** 2).mean())

    def test_an_actor_writing_no_prediction_raises(self):
        actor, _ = linear_actor(out_key="something_else")
        with pytest.raises(RuntimeError, match="did not write a prediction at 'action'"):
            BCLoss(actor)(data())

    def test_errors(self):
        actor, _ = linear_actor()
        with pytest.raises(ValueError, match="loss_function must be"):
            BCLoss(actor, loss_function="huber")
        with pytest.raises(ValueError, match="reduction must be"):
            BCLoss(actor, reduction="max")
        with pytest.raises(ValueError, match="unknown key name"):
            BCLoss(actor).set_keys(reward="r")
        with pytest.raises(KeyError, match="misses 'action'"):
            BCLoss(actor)(data().exclude("action"))
        td = data()
        td["action"] = torch.zeros(B, ACT + 1)
        with pytest.raises(ValueError, match="has shape"):
            BCLoss(actor)(td)
        logits_actor, _ = linear_actor(out=N)
        td = data(discrete="index")
        td["action"] = torch.zeros(B, N - 1, dtype=torch.long)
        with pytest.raises(ValueError, match="cross-entropy needs logits"):
            BCLoss(logits_actor, loss_function="cross_entropy")(td)


# ----------------------------------------------------------------------------- compile and learning
def test_compiled_forward_matches_eager(assert_compiled_matches_eager):
    actor, _ = gaussian_actor()
    assert_compiled_matches_eager(BCLoss(actor), data())
    det, _ = linear_actor()
    assert_compiled_matches_eager(BCLoss(det), data())


@pytest.mark.parametrize("probabilistic", [False, True])
def test_learns_an_experts_linear_policy(probabilistic):
    """BC on the actions of a linear expert recovers its weights (the mean, for a Gaussian actor)."""
    g = torch.Generator().manual_seed(1)
    expert = torch.randn(ACT, OBS, generator=g) * 0.3
    obs = torch.randn(512, OBS, generator=g)
    td = TensorDict(observation=obs, action=obs @ expert.T, batch_size=[512])
    actor, lin = gaussian_actor() if probabilistic else linear_actor()
    loss = BCLoss(actor)
    optim = torch.optim.Adam(loss.parameters(), lr=0.05)
    for _ in range(300):
        optim.zero_grad()
        loss(td)["loss_bc"].backward()
        optim.step()
    weight = lin.weight[:ACT]  # the Gaussian's location rows
    torch.testing.assert_close(weight.detach(), expert, atol=0.02, rtol=0)


def test_the_collectors_mask_leaves_its_positions_out():
    actor, lin = gaussian_actor()
    td = data()
    valid = torch.tensor([True, False, True, True, False, True, True, True])
    td["action"][~valid] = 1e6  # garbage where the collector padded
    td["collector", "mask"] = valid
    reference = normal_nll(lin, td[valid]).mean()
    check_loss_and_grads(BCLoss(actor), td, list(actor.parameters()), reference)
    pad = torch.zeros(B, dtype=torch.bool)
    pad[0] = True  # a pad mask and the collector's mask combine
    td["is_pad"] = pad
    both = valid & ~pad
    torch.testing.assert_close(
        BCLoss(actor).set_keys(pad_mask="is_pad")(td)["loss_bc"], normal_nll(lin, td[both]).mean()
    )
    unmasked = BCLoss(actor)
    unmasked.loss_mask_key = None
    assert unmasked(td)["loss_bc"] > 1e3  # without the mask the garbage counts
