"""SACLoss against a hand-written reference: soft target, actor and temperature losses, gradients, errors.

Networks, batches and the reference Q: conftest.py fixtures.
"""

import functools
import math

import pytest
import torch
from rl_objectives import SoftUpdate
from rl_objectives.losses.sac import SACLoss
from rl_objectives.modules import ValueOperator
from tdict import TensorDict
from tdict.specs import Bounded

N_OBS, N_ACT = 3, 2  # conftest's default network sizes


@pytest.fixture
def networks(normal_actor, q_critic):
    """``(seed=0, n_obs=3, n_act=2, hidden=None) -> (actor, critic)``: a Normal policy on
    ``"observation"`` and conftest's Q-network."""

    def build(seed=0, n_obs=N_OBS, n_act=N_ACT, hidden=None):
        actor, _ = normal_actor(n_obs, n_act, seed=seed, obs_key="observation")
        return actor, q_critic(n_obs, n_act, hidden)

    return build


@pytest.fixture
def batch(transition_batch):
    """Replay batches with Gaussian stored actions."""
    return functools.partial(transition_batch, action="normal")


@pytest.mark.parametrize("alpha_init", [1.0, 0.3])
def test_losses_match_reference(alpha_init, networks, batch, perturb, q_reference):
    q_all = q_reference
    actor, critic = networks()
    loss = SACLoss(
        actor, critic, alpha_init=alpha_init, loss_function="l2", action_spec=Bounded(-1.0, 1.0, shape=(N_ACT,))
    )
    loss.make_value_estimator(gamma=0.9)
    perturb(loss.params_of("qvalue_network"))
    td = batch()
    q_p = loss.params_of("qvalue_network").detach()
    t_q = loss.params_of("qvalue_network", target=True)
    alpha = alpha_init
    with torch.no_grad():
        dist_next = actor.get_dist(td["next"].copy())
        dist = actor.get_dist(td.copy())
    torch.manual_seed(7)
    a_next = dist_next.rsample()
    a = dist.rsample()
    logp_next = dist_next.log_prob(a_next).sum(-1)
    logp = dist.log_prob(a).sum(-1)
    next_v = q_all(t_q, td["next", "observation"], a_next).min(0).values - alpha * logp_next
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * next_v
    pred = q_all(q_p, td["observation"], td["action"])
    expected_q = (pred - y).pow(2).sum(0).mean()
    expected_actor = (alpha * logp - q_all(q_p, td["observation"], a).min(0).values).mean()
    expected_alpha = (-math.log(alpha_init) * (logp + (-N_ACT))).mean()

    torch.manual_seed(7)
    out = loss(td)
    assert sorted(out.keys()) == sorted(loss.out_keys)
    assert torch.allclose(out["loss_qvalue"], expected_q, atol=1e-5)
    assert torch.allclose(out["loss_actor"], expected_actor, atol=1e-5)
    assert torch.allclose(out["loss_alpha"], expected_alpha, atol=1e-5)
    assert torch.allclose(out["alpha"], torch.tensor(alpha), atol=1e-6)
    assert torch.allclose(out["entropy"], -logp.mean(), atol=1e-5)
    assert torch.allclose(td["td_error"], (pred - y).abs().max(0).values, atol=1e-5)
    assert loss.target_entropy == -N_ACT


def test_gradient_routing(networks, batch):
    actor, critic = networks()
    loss = SACLoss(actor, critic)
    out = loss(batch())
    a_params = list(loss.params_of("actor_network").values(True, True))
    q_params = list(loss.params_of("qvalue_network").values(True, True))
    everything = a_params + q_params + [loss.log_alpha]
    n_a, n_q = len(a_params), len(q_params)

    def grads(name):
        return torch.autograd.grad(out[name], everything, allow_unused=True, retain_graph=True)

    g = grads("loss_actor")
    assert all(x is not None and x.abs().sum() > 0 for x in g[:n_a])
    assert all(x is None for x in g[n_a:])  # critics detached, alpha detached
    g = grads("loss_qvalue")
    assert all(x is None for x in g[:n_a]) and g[-1] is None
    assert all(x is not None for x in g[n_a : n_a + n_q])
    g = grads("loss_alpha")
    assert all(x is None for x in g[:-1]) and g[-1] is not None
    for name in ("alpha", "entropy"):
        assert not out[name].requires_grad
    for t in loss.params_of("qvalue_network", target=True).values(True, True):
        assert not t.requires_grad


def test_fixed_alpha_min_max_and_target_entropy(networks, batch):
    actor, critic = networks()
    loss = SACLoss(actor, critic, fixed_alpha=True, alpha_init=0.5, target_entropy=-0.7)
    assert "log_alpha" in dict(loss.named_buffers()) and "log_alpha" not in dict(loss.named_parameters())
    out = loss(batch())
    assert not out["loss_alpha"].requires_grad
    assert torch.allclose(out["alpha"], torch.tensor(0.5))
    assert loss.target_entropy == -0.7
    loss = SACLoss(*networks(), alpha_init=5.0, max_alpha=2.0)
    assert torch.allclose(loss(batch())["alpha"], torch.tensor(2.0))
    loss = SACLoss(*networks(), alpha_init=0.01, min_alpha=0.1)
    assert torch.allclose(loss(batch())["alpha"], torch.tensor(0.1))
    # no spec anywhere: "auto" reads the sampled action's shape on the first call
    loss = SACLoss(*networks())
    assert loss.target_entropy is None
    loss(batch())
    assert loss.target_entropy == -N_ACT


def test_errors(networks, batch):
    actor, critic = networks()
    with pytest.raises(ValueError, match="alpha_init must be a number > 0"):
        SACLoss(actor, critic, alpha_init=0.0)
    with pytest.raises(ValueError, match="min_alpha"):
        SACLoss(actor, critic, min_alpha=2.0, max_alpha=1.0)
    with pytest.raises(ValueError, match="target_entropy"):
        SACLoss(actor, critic, target_entropy="max")
    with pytest.raises(TypeError, match="get_dist"):
        SACLoss(critic, critic)
    loss = SACLoss(actor, critic)
    td = batch()
    td["next"].set("reward", td["next", "reward"].unsqueeze(-1))
    with pytest.raises(ValueError, match="reward"):
        loss(td)
    assert "td_error" not in td.keys()


def _value_net(seed=3):
    torch.manual_seed(seed)
    return ValueOperator(torch.nn.Linear(N_OBS, 1), in_keys=["observation"])


def test_v1_losses_match_reference(networks, batch, perturb, q_reference):
    # SAC v1: critic i trains on the i-th half of the batch towards r + gamma * V'(s'); V(s) towards
    # min_i Q'_i(s, a) - alpha * log pi(a|s) with a fresh action; actor and alpha losses as in v2
    actor, critic = networks()
    value = _value_net()
    loss = SACLoss(actor, critic, value, alpha_init=0.5, loss_function="l2", target_entropy=-1.5)
    loss.make_value_estimator(gamma=0.9)
    SoftUpdate(loss, tau=0.1)
    perturb(loss.params_of("qvalue_network"))
    perturb(loss.params_of("value_network"))
    td = batch()
    q_p, t_q = loss.params_of("qvalue_network").detach(), loss.params_of("qvalue_network", target=True)
    v_p, t_v = loss.params_of("value_network").detach(), loss.params_of("value_network", target=True)

    def v(p, obs):
        return (obs @ p["module", "weight"].T + p["module", "bias"]).squeeze(-1)

    with torch.no_grad():
        dist = actor.get_dist(td.copy())
    torch.manual_seed(7)
    a_value, a_actor = dist.rsample(), dist.rsample()  # drawn in this order: value loss, then actor loss
    logp_value, logp_actor = dist.log_prob(a_value).sum(-1), dist.log_prob(a_actor).sum(-1)
    y = td["next", "reward"] + 0.9 * (~td["next", "terminated"]).float() * v(t_v, td["next", "observation"])
    q_all = q_reference(q_p, td["observation"], td["action"])  # [2, 6]: each critic on every row
    pred = torch.cat([q_all[0, :3], q_all[1, 3:]])  # ... but each trains on its own half
    v_target = q_reference(t_q, td["observation"], a_value).min(0).values - 0.5 * logp_value
    expected_actor = (0.5 * logp_actor - q_reference(q_p, td["observation"], a_actor).min(0).values).mean()

    torch.manual_seed(7)
    out = loss(td)
    assert (
        sorted(out.keys())
        == sorted(loss.out_keys)
        == ["alpha", "entropy", "loss_actor", "loss_alpha", "loss_qvalue", "loss_value"]
    )
    torch.testing.assert_close(out["loss_qvalue"], (pred - y).pow(2).mean(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(td["td_error"], (pred - y).pow(2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        out["loss_value"], (v(v_p, td["observation"]) - v_target).pow(2).mean(), atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(out["loss_actor"], expected_actor, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["loss_alpha"], (-math.log(0.5) * (logp_actor - 1.5)).mean(), atol=1e-5, rtol=1e-5)


def test_v1_gradient_routing_and_batch_check(networks, batch):
    actor, critic = networks()
    loss = SACLoss(actor, critic, _value_net())
    out = loss(batch())
    groups = {
        name: list(loss.params_of(name).values(True, True))
        for name in ("actor_network", "qvalue_network", "value_network")
    }
    trains = {"loss_actor": "actor_network", "loss_qvalue": "qvalue_network", "loss_value": "value_network"}
    for term, owner in trains.items():
        for name, params in groups.items():
            grads = torch.autograd.grad(out[term], params, allow_unused=True, retain_graph=True)
            if name == owner:
                assert all(g is not None and g.abs().sum() > 0 for g in grads), (term, name)
            else:
                assert all(g is None for g in grads), (term, name)
    # each of the 2 critics trains on half of the batch: an odd batch cannot be split
    with pytest.raises(ValueError, match="divisible by 2"):
        loss(batch(n=5))


def test_caller_entries_untouched_except_td_error(networks, batch, assert_writes_only_td_error):
    assert_writes_only_td_error(SACLoss(*networks()), batch())


def test_learns_a_one_step_bandit_and_tunes_alpha(networks, train_on_bandit):
    # reward = -(a - 0.5)^2, all steps terminal: the policy mean goes to ~0.5 and alpha falls
    actor, critic = networks(n_obs=1, n_act=1, hidden=32)
    loss = SACLoss(actor, critic, alpha_init=0.1, loss_function="l2", target_entropy=-3.0)
    out = train_on_bandit(
        loss, lambda n: torch.rand(n, 1) * 2 - 1, lambda a: -((a.squeeze(-1) - 0.5) ** 2), steps=300, n=64, lr=0.02
    )
    with torch.no_grad():
        loc = actor.get_dist(TensorDict(observation=torch.ones(1, 1), batch_size=[1])).mean
    assert abs(float(loc) - 0.5) < 0.15, float(loc)
    assert float(out["alpha"]) < 0.1


def test_compiled_forward_matches_eager(networks, batch, assert_compiled_matches_eager):
    assert_compiled_matches_eager(SACLoss(*networks()), batch(), seed=3)


@pytest.mark.parametrize("v1", [False, True])
def test_compiled_forward_with_a_target_actor_matches_eager(
    v1, networks, batch, perturb, assert_compiled_matches_eager
):
    """The target actor (read twice per call with a value network) differs from the trained one."""
    actor, critic = networks()
    loss = SACLoss(actor, critic, _value_net() if v1 else None, delay_actor=True)
    SoftUpdate(loss, tau=0.5)
    perturb(loss.params_of("actor_network"))
    assert_compiled_matches_eager(loss, batch(), seed=3)


def test_target_entropy_is_a_tensor_as_in_torchrl(networks):
    loss = SACLoss(*networks(), target_entropy=-1.5)
    assert isinstance(loss.target_entropy, torch.Tensor) and loss.target_entropy.shape == ()
    assert loss.target_entropy.item() == -1.5
    loss.target_entropy = torch.tensor(-0.5)  # assigning a tensor (or a number) sets it
    assert loss.target_entropy.item() == -0.5


def test_a_list_of_critics_trains_their_own_parameters(networks, batch, q_reference):
    actor, critic = networks()
    other = networks(seed=1)[1]
    torch.manual_seed(5)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p))
    loss = SACLoss(actor, [critic, other], num_qvalue_nets=2, loss_function="l2")
    q_p = loss.params_of("qvalue_network")
    for i, net in enumerate((critic, other)):
        torch.testing.assert_close(q_p["module", "net", "weight"][i], net.module.net.weight.detach())
    td = batch()
    pred = q_reference(q_p.detach(), td["observation"], td["action"])
    torch.testing.assert_close(pred[1], other(td.copy())["state_action_value"].detach())
    with pytest.raises(ValueError, match="a list of 2 networks but 3 parameter sets"):
        SACLoss(actor, [critic, other], num_qvalue_nets=3)


def test_composite_policy_log_prob_sums_its_heads(batch):
    # a one-head CompositeDistribution policy: the action is a TensorDict, its log-prob the heads' sum
    from tdict.nn import (
        CompositeDistribution,
        NormalParamExtractor,
        ProbabilisticTensorDictModule,
        ProbabilisticTensorDictSequential,
        TensorDictModule,
    )

    class Critic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(N_OBS + N_ACT, 1)

        def forward(self, obs, action):
            return self.net(torch.cat([obs, action["head"]], -1)).squeeze(-1)

    torch.manual_seed(0)
    lin = torch.nn.Linear(N_OBS, 2 * N_ACT)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(
            torch.nn.Sequential(lin, NormalParamExtractor()),
            in_keys=["observation"],
            out_keys=[("params", "head", "loc"), ("params", "head", "scale")],
        ),
        ProbabilisticTensorDictModule(
            in_keys=["params"],
            out_keys=["action"],
            distribution_class=functools.partial(
                CompositeDistribution, distribution_map={"head": torch.distributions.Normal}
            ),
        ),
    )
    critic = TensorDictModule(Critic(), in_keys=["observation", "action"], out_keys=["state_action_value"])
    loss = SACLoss(actor, critic, alpha_init=0.5, target_entropy=-1.0)
    SoftUpdate(loss, tau=0.1)
    td = batch()
    td["action"] = TensorDict(head=td["action"], batch_size=td.batch_size)
    loc, scale = NormalParamExtractor()(lin(td["observation"]).detach())
    torch.manual_seed(3)
    _ = torch.randn(td.batch_size + (N_ACT,))  # the next state's draw comes first
    a = loc + scale * torch.randn(td.batch_size + (N_ACT,))
    logp = torch.distributions.Normal(loc, scale).log_prob(a).sum(-1)
    torch.manual_seed(3)
    out = loss(td)
    torch.testing.assert_close(out["entropy"], -logp.mean())
    torch.testing.assert_close(out["loss_alpha"], (-math.log(0.5) * (logp - 1.0)).mean())


def test_a_tanh_normal_policy_is_scored_from_its_own_draw(normal_actor, q_critic, batch, monkeypatch):
    # the draw and its log-prob come from one call (TorchRL's rsample_and_log_prob), never from
    # inverting tanh of a fresh, possibly saturated sample
    from rl_objectives.modules import TanhNormal

    actor, _ = normal_actor(N_OBS, N_ACT, dist=TanhNormal, obs_key="observation")
    loss = SACLoss(actor, q_critic(N_OBS, N_ACT, None))
    SoftUpdate(loss, tau=0.1)

    def fail(*args, **kwargs):
        raise AssertionError("SACLoss scored a fresh TanhNormal sample through log_prob")

    monkeypatch.setattr(TanhNormal, "log_prob", fail)
    out = loss(batch())
    assert all(bool(v.isfinite().all()) for v in out.values())


@pytest.mark.parametrize("options", [{}, {"delay_actor": True}, {"v1": True}, {"num_qvalue_nets": 3}])
def test_tensor_calls_match_the_tensordict_calls(networks, batch, perturb, options):
    """Networks with tensor functions run on the batch's tensors; the numbers, the gradients and
    the written TD error are those of their TensorDict calls."""
    options = dict(options)
    actor, critic = networks()
    value = _value_net() if options.pop("v1", False) else None
    loss = SACLoss(actor, critic, value, **options)
    SoftUpdate(loss, tau=0.5)  # (the targets are read: an updater is expected)
    perturb(loss.params_of("qvalue_network"))
    td = batch()
    assert loss._tensor_calls(td) is not None

    def run(tensor_calls):
        loss.zero_grad()
        original = SACLoss._tensor_calls
        try:
            if not tensor_calls:
                SACLoss._tensor_calls = lambda self, tensordict: None
            torch.manual_seed(3)
            work = td.clone()
            out = loss(work)
        finally:
            SACLoss._tensor_calls = original
        sum(out[k] for k in out.keys() if k.startswith("loss_")).backward()
        grads = {name: p.grad.clone() for name, p in loss.named_parameters() if p.grad is not None}
        return out, work["td_error"], grads

    out, td_error, grads = run(True)
    ref_out, ref_td_error, ref_grads = run(False)
    assert sorted(out.keys()) == sorted(ref_out.keys())
    for key in out.keys():
        torch.testing.assert_close(out[key], ref_out[key], rtol=0, atol=0)
    torch.testing.assert_close(td_error, ref_td_error, rtol=0, atol=0)
    assert grads.keys() == ref_grads.keys() and len(grads) > 0
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=0, atol=0)


def test_tensor_calls_only_where_the_tensordict_calls_do_the_same(networks, batch):
    actor, critic = networks()
    loss = SACLoss(actor, critic)
    SoftUpdate(loss, tau=0.5)
    td = batch()
    assert loss._tensor_calls(td) is not None
    assert loss._tensor_calls(td[0]) is None  # no batch dim: the estimator's one-transition path
    skipping = SACLoss(*networks(), skip_done_states=True)
    assert skipping._tensor_calls(td) is None
    handle = loss.actor_network[0].register_forward_hook(lambda *args: None)
    assert loss._tensor_calls(td) is None  # a hooked step runs through its call
    handle.remove()
    no_next_obs = td.clone()
    del no_next_obs["next", "observation"]
    assert loss._tensor_calls(no_next_obs) is None  # the TensorDict call reports what is missing
    with pytest.raises(KeyError):
        loss(no_next_obs)
