"""TorchRL 0.14's keyword arguments of the off-policy losses: a TorchRL-style call works and has its
effect (separate_losses, use_prioritized_weights, priority_key, gamma, skip_done_states,
scalar_output_mode, REDQ's reduction and gSDE, DTLoss's device)."""

import warnings

import pytest
import torch
from rl_objectives import (
    CQLLoss,
    DDPGLoss,
    DiscreteCQLLoss,
    DiscreteIQLLoss,
    DiscreteSACLoss,
    DQNLoss,
    DTLoss,
    IQLLoss,
    OnlineDTLoss,
    QMixerLoss,
    REDQLoss,
    SACLoss,
    TD3Loss,
)
from rl_objectives.modules import QValueActor
from tdict import TensorDict
from tdict.nn import (
    Delta,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from tdict.specs import OneHot
from torch import distributions as D
from torch import nn

B = 6


class QHead(nn.Module):
    def __init__(self, n_in: int = 4, n_act: int = 2) -> None:
        super().__init__()
        self.lin = nn.Linear(n_in + n_act, 1)

    def forward(self, hidden: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.cat([hidden, action], -1)).squeeze(-1)


def shared_nets(stochastic: bool = False, seed: int = 0):
    """An actor and a Q-network on one observation trunk (``trunk``: the shared ``nn.Linear``)."""
    torch.manual_seed(seed)
    trunk = nn.Linear(3, 4)
    body = TensorDictModule(trunk, in_keys=["observation"], out_keys=["hidden"])
    if stochastic:
        actor = ProbabilisticTensorDictSequential(
            body,
            TensorDictModule(nn.Linear(4, 2), in_keys=["hidden"], out_keys=["loc"]),
            ProbabilisticTensorDictModule(
                in_keys=["loc"], out_keys=["action"], distribution_class=D.Normal, distribution_kwargs={"scale": 1.0}
            ),
        )
    else:
        actor = TensorDictSequential(
            body, TensorDictModule(nn.Sequential(nn.Linear(4, 2), nn.Tanh()), in_keys=["hidden"], out_keys=["action"])
        )
    qnet = TensorDictSequential(
        body, TensorDictModule(QHead(), in_keys=["hidden", "action"], out_keys=["state_action_value"])
    )
    return actor, qnet, trunk


def transitions(n: int = B, seed: int = 1, done=None, terminated=None):
    g = torch.Generator().manual_seed(seed)
    done = torch.zeros(n, dtype=torch.bool) if done is None else done
    return TensorDict(
        {
            "observation": torch.randn(n, 3, generator=g),
            "action": torch.rand(n, 2, generator=g) * 2 - 1,
            "next": {
                "observation": torch.randn(n, 3, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": done,
                "terminated": done.clone() if terminated is None else terminated,
            },
        },
        batch_size=[n],
    )


def grads_of(loss_value: torch.Tensor, params: list) -> list:
    return [
        g is not None and bool(g.abs().sum() > 0)
        for g in torch.autograd.grad(loss_value, params, retain_graph=True, allow_unused=True)
    ]


# ------------------------------------------------------------------------------ separate_losses
@pytest.mark.parametrize("separate", [False, True])
def test_separate_losses_ddpg_keeps_the_critic_loss_off_the_shared_trunk(separate):
    actor, qnet, trunk = shared_nets()
    loss = DDPGLoss(actor, qnet, separate_losses=separate)
    # one copy of each parameter (TorchRL 0.14.1 counts 6 for this pair either way)
    assert len(list(loss.parameters())) == 6
    out = loss(transitions())
    head = list(qnet[1].parameters())
    assert all(grads_of(out["loss_value"], head))
    assert any(grads_of(out["loss_value"], list(trunk.parameters()))) is not separate
    # the actor loss still trains the trunk through the actor
    assert all(grads_of(out["loss_actor"], list(trunk.parameters())))


@pytest.mark.parametrize("separate", [False, True])
def test_separate_losses_td3_ensemble_expands_the_actor_trunk(separate):
    actor, qnet, trunk = shared_nets()
    loss = TD3Loss(actor, qnet, bounds=(-1.0, 1.0), separate_losses=separate)
    # TorchRL 0.14.1: 8 parameters without separate_losses (the ensemble re-draws the trunk), 6 with
    assert len(list(loss.parameters())) == (6 if separate else 8)
    q_trunk = loss.params_of("qvalue_network")["module", "0", "module", "weight"]
    assert q_trunk.shape == (2, 4, 3)
    if separate:
        torch.testing.assert_close(q_trunk, trunk.weight.detach().expand(2, 4, 3))
        with torch.no_grad():
            trunk.weight.add_(1.0)  # the critics follow the actor's trunk (views, as TorchRL's)
        torch.testing.assert_close(
            loss.params_of("qvalue_network")["module", "0", "module", "weight"][1], trunk.weight.detach()
        )
        # the target copy holds values, not views
        target = loss.params_of("qvalue_network", target=True)["module", "0", "module", "weight"]
        torch.testing.assert_close(target, (trunk.weight.detach() - 1.0).expand(2, 4, 3))
    out = loss(transitions())
    assert any(grads_of(out["loss_qvalue"], list(trunk.parameters()))) is False  # ensemble copies or detached views
    assert all(grads_of(out["loss_actor"], list(trunk.parameters())))


@pytest.mark.parametrize("cls", [SACLoss, REDQLoss])
def test_separate_losses_sac_family(cls):
    actor, qnet, trunk = shared_nets(stochastic=True)
    loss = cls(actor, qnet, separate_losses=True, **({"num_qvalue_nets": 3} if cls is REDQLoss else {}))
    n = 3 if cls is REDQLoss else 2
    torch.testing.assert_close(
        loss.params_of("qvalue_network")["module", "0", "module", "bias"], trunk.bias.detach().expand(n, 4)
    )
    out = loss(transitions())
    assert not any(grads_of(out["loss_qvalue"], list(trunk.parameters())))
    assert all(grads_of(out["loss_actor"], list(trunk.parameters())))
    assert all(
        grads_of(out["loss_qvalue"], [loss.params_of("qvalue_network")["module", "1", "module", "lin", "weight"]])
    )


def test_separate_losses_discrete_sac_and_iql():
    torch.manual_seed(0)
    trunk = nn.Linear(3, 4)
    body = TensorDictModule(trunk, in_keys=["observation"], out_keys=["hidden"])
    actor = ProbabilisticTensorDictSequential(
        body,
        TensorDictModule(nn.Linear(4, 2), in_keys=["hidden"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical),
    )
    qnet = TensorDictSequential(body, TensorDictModule(nn.Linear(4, 2), in_keys=["hidden"], out_keys=["action_value"]))
    vnet = TensorDictSequential(
        body,
        TensorDictModule(nn.Sequential(nn.Linear(4, 1), nn.Flatten(0)), in_keys=["hidden"], out_keys=["state_value"]),
    )
    td = transitions()
    td["action"] = torch.tensor([0, 1, 1, 0, 1, 0])
    sac = DiscreteSACLoss(actor, qnet, num_actions=2, action_space="categorical", separate_losses=True)
    out = sac(td.clone())
    assert not any(grads_of(out["loss_qvalue"], list(trunk.parameters())))
    assert all(grads_of(out["loss_actor"], list(trunk.parameters())))
    iql = DiscreteIQLLoss(actor, qnet, vnet, action_space="categorical", separate_losses=True)
    iql.set_keys(state_action_value="action_value")  # the Q-network DiscreteSACLoss reads
    out = iql(td.clone())
    for key in ("loss_qvalue", "loss_value"):
        assert not any(grads_of(out[key], list(trunk.parameters()))), key
    assert all(grads_of(out["loss_actor"], list(trunk.parameters())))
    with pytest.raises(TypeError, match="separate_losses must be a bool"):
        IQLLoss(actor, qnet, vnet, separate_losses="yes")


# ------------------------------------------------------------------------------ prioritized weights
def dqn_batch(n: int = B, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    spec = OneHot(2)
    done = torch.zeros(n, dtype=torch.bool)
    return TensorDict(
        {
            "observation": torch.randn(n, 3, generator=g),
            "action": torch.nn.functional.one_hot(torch.randint(2, (n,), generator=g), 2),
            "next": {
                "observation": torch.randn(n, 3, generator=g),
                "reward": torch.randn(n, generator=g),
                "done": done,
                "terminated": done,
            },
        },
        batch_size=[n],
    ), spec


def test_use_prioritized_weights_dqn_weighted_reductions():
    td, spec = dqn_batch()
    weights = torch.tensor([0.5, 1.0, 2.0, 0.25, 1.5, 1.0])
    torch.manual_seed(0)
    actor = QValueActor(nn.Linear(3, 2), spec=spec)
    per_sample = DQNLoss(actor, reduction="none")(td.clone())["loss"]
    td["priority_weight"] = weights
    for reduction, expected in (
        ("mean", (weights * per_sample).sum() / weights.sum()),
        ("sum", (weights * per_sample).sum()),
        ("none", weights * per_sample),
    ):
        out = DQNLoss(actor, reduction=reduction)(td.clone())  # "auto" (TorchRL's default): read when present
        torch.testing.assert_close(out["loss"], expected)
        out = DQNLoss(actor, reduction=reduction, use_prioritized_weights=True)(td.clone())
        torch.testing.assert_close(out["loss"], expected)
    unweighted = DQNLoss(actor, use_prioritized_weights=False)(td.clone())["loss"]
    torch.testing.assert_close(unweighted, per_sample.mean())
    # a renamed weight key (TorchRL's tensor_keys.priority_weight)
    td["w"] = td.pop("priority_weight")
    loss = DQNLoss(actor).set_keys(priority_weight="w")
    torch.testing.assert_close(loss(td.clone())["loss"], (weights * per_sample).sum() / weights.sum())
    with pytest.raises(ValueError, match="use_prioritized_weights must be True, False or 'auto'"):
        DQNLoss(actor, use_prioritized_weights="yes")
    td["w"] = weights.unsqueeze(-1)
    with pytest.raises(ValueError, match="'w' has shape \\(6, 1\\)"):
        loss(td.clone())


@pytest.mark.parametrize("cls", [SACLoss, TD3Loss, DDPGLoss])
def test_use_prioritized_weights_weights_every_loss(cls):
    actor, qnet, _ = shared_nets(stochastic=cls is SACLoss)
    kwargs = {"bounds": (-1.0, 1.0)} if cls is TD3Loss else {}
    td = transitions(done=torch.tensor([False, True, False, False, True, False]))
    weights = torch.tensor([1.0, 0.5, 2.0, 3.0, 0.5, 1.0])
    torch.manual_seed(5)
    ref = (
        cls(actor, qnet, reduction="none", use_prioritized_weights=False, scalar_output_mode="exclude", **kwargs)
        if cls is SACLoss
        else cls(actor, qnet, reduction="none", **kwargs)
    )
    per_sample = ref(td.clone())
    td["priority_weight"] = weights
    torch.manual_seed(5)
    out = cls(actor, qnet, **kwargs)(td.clone())
    for key in [k for k in out.keys() if k.startswith("loss_")]:
        torch.testing.assert_close(
            out[key], (weights * per_sample[key]).sum() / weights.sum(), msg=lambda m, key=key: f"{key}: {m}"
        )


def test_use_prioritized_weights_discrete_sac():
    torch.manual_seed(0)
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical),
    )
    qnet = TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["action_value"])
    td = transitions()
    td["action"] = torch.tensor([0, 1, 1, 0, 1, 0])
    torch.manual_seed(1)  # the same second critic in both losses
    per_sample = DiscreteSACLoss(actor, qnet, num_actions=2, reduction="none", scalar_output_mode="exclude")(td.clone())
    weights = torch.linspace(0.5, 2.0, B)
    td["priority_weight"] = weights
    torch.manual_seed(1)
    out = DiscreteSACLoss(actor, qnet, num_actions=2, reduction="sum")(td.clone())
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        torch.testing.assert_close(out[key], (weights * per_sample[key]).sum())


# ------------------------------------------------------------------------------ deprecated gamma / priority_key
def test_priority_key_is_deprecated_and_renames_the_priority():
    actor, qnet, _ = shared_nets(stochastic=True)
    with pytest.warns(DeprecationWarning, match="priority_key"):
        loss = SACLoss(actor, qnet, priority_key="my_priority")
    td = transitions()
    loss(td)
    assert "my_priority" in td.keys() and "td_error" not in td.keys()
    assert loss.tensor_keys.priority == "my_priority"
    td, spec = dqn_batch()
    with pytest.warns(DeprecationWarning, match="set_keys\\(priority="):
        loss = DQNLoss(QValueActor(nn.Linear(3, 2), spec=spec), priority_key=("prio", "td"))
    loss(td)
    assert td["prio", "td"].shape == (B,)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SACLoss(*shared_nets(stochastic=True)[:2], gamma=0.5),
        lambda: TD3Loss(*shared_nets()[:2], bounds=(-1.0, 1.0), gamma=0.5),
        lambda: DDPGLoss(*shared_nets()[:2], gamma=0.5),
        lambda: REDQLoss(*shared_nets(stochastic=True)[:2], gamma=0.5),
        lambda: IQLLoss(
            shared_nets(stochastic=True)[0],
            shared_nets()[1],
            TensorDictModule(
                nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)), in_keys=["observation"], out_keys=["state_value"]
            ),
            gamma=0.5,
        ),
        lambda: CQLLoss(*shared_nets(stochastic=True)[:2], gamma=0.5),
        lambda: DQNLoss(QValueActor(nn.Linear(3, 2), spec=OneHot(2)), gamma=0.5),
        lambda: DiscreteCQLLoss(QValueActor(nn.Linear(3, 2), spec=OneHot(2)), gamma=0.5),
    ],
)
def test_gamma_is_deprecated_and_becomes_the_estimators_discount(make):
    with pytest.warns(DeprecationWarning, match=r"\(gamma=\.\.\.\) is deprecated"):
        loss = make()
    assert loss.value_estimator.gamma == 0.5
    loss.make_value_estimator(gamma=0.8)  # the explicit call wins
    assert loss.value_estimator.gamma == 0.8


def test_gamma_in_the_constructor_gives_the_discounted_target():
    td, spec = dqn_batch()
    torch.manual_seed(0)
    actor = QValueActor(nn.Linear(3, 2), spec=spec)
    with pytest.warns(DeprecationWarning):
        old = DQNLoss(actor, gamma=0.3)
    new = DQNLoss(actor).make_value_estimator(gamma=0.3)
    torch.testing.assert_close(old(td.clone())["loss"], new(td.clone())["loss"])
    with pytest.raises(ValueError, match="gamma must be in \\[0, 1\\], got 1.5"):
        DQNLoss(actor, gamma=1.5)


def test_qmixer_accepts_gamma_and_priority_key():
    local = TensorDictModule(
        nn.Linear(3, 2), in_keys=[("agents", "observation")], out_keys=[("agents", "action_value")]
    )
    mixer = TensorDictModule(
        lambda q: q.sum(-1), in_keys=[("agents", "chosen_action_value")], out_keys=["chosen_action_value"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = QMixerLoss(local, mixer, action_space="categorical", gamma=0.25, priority_key="prio")
    assert sorted(str(w.message).split("(")[1].split("=")[0] for w in caught) == ["gamma", "priority_key"]
    assert loss.value_estimator.gamma == 0.25 and loss.tensor_keys.priority == "prio"


# ------------------------------------------------------------------------------ skip_done_states
class Recorder(nn.Module):
    """A linear layer that records the batch sizes it is called on."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.calls: list = []

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        self.calls.append(observation.shape[0])
        return self.lin(observation)


def test_skip_done_states_sac_runs_the_actor_on_live_next_states_only():
    torch.manual_seed(0)
    rec = Recorder()
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(rec, in_keys=["observation"], out_keys=["param"]),
        ProbabilisticTensorDictModule(in_keys=["param"], out_keys=["action"], distribution_class=Delta),
    )
    lin = nn.Linear(5, 1)
    qnet = TensorDictModule(
        lambda o, a: lin(torch.cat([o, a], -1)).squeeze(-1),
        in_keys=["observation", "action"],
        out_keys=["state_action_value"],
    )
    qnet.lin = lin  # registers the parameters
    done = torch.tensor([False, True, False, True, False, False])
    terminated = torch.tensor([False, True, False, False, False, False])  # row 3 is a truncation
    td = transitions(done=done, terminated=terminated)
    loss = SACLoss(actor, qnet, skip_done_states=True, num_qvalue_nets=1, alpha_init=1.0)
    loss.make_value_estimator(gamma=0.9)
    rec.calls.clear()
    loss(td)
    assert 4 in rec.calls and 6 in rec.calls  # the next states: 4 live rows; the current ones: all 6
    # reference: the done rows bootstrap Q'(s', a'=0) with log-prob 0 (TorchRL's rule)
    with torch.no_grad():
        nxt = td["next"]
        a_next = torch.where(done.unsqueeze(-1), torch.zeros(B, 2), rec.lin(nxt["observation"]))
        q_next = lin(torch.cat([nxt["observation"], a_next], -1)).squeeze(-1)  # Delta: log-prob 0 everywhere
        target = nxt["reward"] + 0.9 * (~terminated) * q_next
        pred = lin(torch.cat([td["observation"], td["action"]], -1)).squeeze(-1)
    torch.testing.assert_close(td["td_error"], (pred - target).abs())
    with pytest.raises(TypeError, match="skip_done_states must be a bool"):
        SACLoss(actor, qnet, skip_done_states=1)


def test_skip_done_states_discrete_sac_gives_done_states_zero_value():
    torch.manual_seed(0)
    rec = Recorder()
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(rec, in_keys=["observation"], out_keys=["logits"]),
        ProbabilisticTensorDictModule(in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical),
    )
    qlin = nn.Linear(3, 2)
    qnet = TensorDictModule(qlin, in_keys=["observation"], out_keys=["action_value"])
    done = torch.tensor([True, False, False, True, False, False])
    terminated = torch.zeros(B, dtype=torch.bool)  # truncations: without skipping they would bootstrap
    td = transitions(done=done, terminated=terminated)
    td["action"] = torch.tensor([0, 1, 1, 0, 1, 0])
    loss = DiscreteSACLoss(
        actor, qnet, num_actions=2, action_space="categorical", skip_done_states=True, num_qvalue_nets=1
    )
    loss.make_value_estimator(gamma=0.9)
    rec.calls.clear()
    loss(td)
    assert 4 in rec.calls
    with torch.no_grad():
        nxt = td["next"]
        logp = torch.log_softmax(rec.lin(nxt["observation"]), -1)
        soft = (logp.exp() * (qlin(nxt["observation"]) - logp)).sum(-1)
        target = nxt["reward"] + 0.9 * torch.where(done, torch.zeros(B), soft)
        pred = qlin(td["observation"]).gather(-1, td["action"].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(td["td_error"], (pred - target).abs())


# ------------------------------------------------------------------------------ scalar_output_mode
def test_scalar_output_mode_with_reduction_none():
    actor, qnet, _ = shared_nets(stochastic=True)
    td = transitions()
    with pytest.warns(UserWarning, match="scalar_output_mode='exclude'"):
        loss = SACLoss(actor, qnet, reduction="none")
    out = loss(td.clone())
    # as TorchRL: the output has the input's batch size and no alpha / entropy
    assert out.batch_size == (B,) and sorted(out.keys()) == ["loss_actor", "loss_alpha", "loss_qvalue"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="No target network updater")  # (no updater here)
        out = SACLoss(actor, qnet, reduction="none", scalar_output_mode="non_tensor")(td.clone())
        assert float(out["alpha"]) == 1.0 and out["entropy"].shape == ()
        assert (
            "alpha" in SACLoss(actor, qnet, scalar_output_mode="exclude")(td.clone()).keys()
        )  # no effect unless "none"
    with pytest.raises(ValueError, match="scalar_output_mode must be None or one of \\['exclude', 'non_tensor'\\]"):
        SACLoss(actor, qnet, reduction="none", scalar_output_mode="keep")


@pytest.mark.parametrize(
    "make",
    [
        lambda mode: IQLLoss(
            shared_nets(stochastic=True)[0],
            shared_nets()[1],
            TensorDictModule(
                nn.Sequential(nn.Linear(3, 1), nn.Flatten(0)), in_keys=["observation"], out_keys=["state_value"]
            ),
            reduction="none",
            scalar_output_mode=mode,
        ),
        lambda mode: CQLLoss(*shared_nets(stochastic=True)[:2], reduction="none", scalar_output_mode=mode),
        lambda mode: REDQLoss(
            *shared_nets(stochastic=True)[:2], num_qvalue_nets=3, reduction="none", scalar_output_mode=mode
        ),
    ],
)
def test_scalar_output_mode_other_losses(make):
    td = transitions()
    excluded = make("exclude")(td.clone())
    assert "entropy" not in excluded.keys() and "alpha" not in excluded.keys()
    kept = make("non_tensor")(td.clone())
    assert kept["entropy"].shape == ()


# ------------------------------------------------------------------------------ REDQ reduction / gSDE
def test_redq_reduction_follows_torchrl_shapes():
    actor, qnet, _ = shared_nets(stochastic=True)
    td = transitions()
    outs = {}
    for reduction in ("mean", "sum", "none"):
        torch.manual_seed(3)
        outs[reduction] = REDQLoss(actor, qnet, num_qvalue_nets=4, reduction=reduction, scalar_output_mode="exclude")(
            td.clone()
        )
    none = outs["none"]
    # TorchRL 0.14.1's shapes before the reduction: the ensemble and the batch, the alpha loss over (current, next)
    assert (
        none["loss_actor"].shape == (4, B)
        and none["loss_qvalue"].shape == (4, B)
        and none["loss_alpha"].shape == (2, B)
    )
    for key in ("loss_actor", "loss_qvalue", "loss_alpha"):
        torch.testing.assert_close(outs["mean"][key], none[key].mean())
        torch.testing.assert_close(outs["sum"][key], none[key].sum())
    with pytest.raises(ValueError, match="reduction must be one of"):
        REDQLoss(actor, qnet, reduction="max")


def test_redq_gsde():
    actor, qnet, _ = shared_nets(stochastic=True)
    REDQLoss(actor, qnet, gSDE=False)
    with pytest.raises(NotImplementedError, match="gSDE=True is not supported"):
        REDQLoss(actor, qnet, gSDE=True)


def test_dt_loss_accepts_device():
    actor = TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["action"])
    td = TensorDict(observation=torch.randn(4, 3), action=torch.randn(4, 2), batch_size=[4])
    torch.testing.assert_close(DTLoss(actor, device="cpu")(td)["loss"], DTLoss(actor)(td)["loss"])
    with pytest.raises(RuntimeError):
        DTLoss(actor, device="no-such-device")


def test_online_dt_scalar_output_mode_non_tensor():
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(nn.Linear(3, 2), in_keys=["observation"], out_keys=["loc"]),
        ProbabilisticTensorDictModule(
            in_keys=["loc"], out_keys=["action"], distribution_class=D.Normal, distribution_kwargs={"scale": 1.0}
        ),
    )
    td = TensorDict(observation=torch.randn(2, 5, 3), action=torch.randn(2, 5, 2), batch_size=[2, 5])
    out = OnlineDTLoss(actor, target_entropy=-2.0, reduction="none", scalar_output_mode="non_tensor")(td)
    assert out.batch_size == (2, 5) and out["loss_log_likelihood"].shape == (2, 5) and float(out["alpha"]) == 1.0
