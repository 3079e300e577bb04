"""Networks, batches and reference helpers shared by the loss tests.

pytest runs with ``--import-mode=importlib``, so test files cannot import each other or this file:
every builder is a fixture. Builders that take arguments are fixtures returning a factory.

Two families of fixtures:

- on-policy (A2C, PPO, REINFORCE): networks read ``"obs"``; :func:`rollout` samples the actions
  (and behaviour log-probs / distribution parameters) from the actor on a ``[*B]`` batch.
- off-policy (DQN, DDPG, TD3, SAC): networks read ``"observation"``; :func:`transition_batch`
  holds stored actions and ``("next", ...)`` entries; :func:`q_reference` recomputes the
  Q-network of :func:`q_critic` by hand, from a loss's (possibly stacked) parameters.

Random draws happen in a fixed order (global seed, then module construction), so a test that
builds the same networks twice gets the same weights.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from tdict import TensorDict
from tdict.nn import (
    CompositeDistribution,
    InteractionType,
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
    set_interaction_type,
)
from torch import distributions as D
from torch import nn

N_OBS, N_ACT = 3, 2  # the off-policy networks' default observation / action sizes


class Squeeze(nn.Module):
    """Drops a 1-wide head: per-step values have the batch shape (no trailing 1)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(-1)


class Critic(nn.Module):
    """``Q(s, a)`` of ``[s, a]``, batch-shaped (the off-policy tests' Q-network): one linear layer,
    or with ``hidden`` an MLP that can fit the quadratic rewards of the bandit learning tests."""

    def __init__(self, n_obs: int = N_OBS, n_act: int = N_ACT, hidden: int | None = None) -> None:
        super().__init__()
        n_in = n_obs + n_act
        self.net = (
            nn.Linear(n_in, 1)
            if hidden is None
            else nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        )

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observation, action], -1)).squeeze(-1)


# ---------------------------------------------------------------------------------- on-policy
@pytest.fixture
def categorical_actor() -> Callable:
    """``(obs_dim=3, n=4, seed=0) -> (actor, linear)``: ``Categorical(logits=linear(obs))``."""

    def build(obs_dim: int = 3, n: int = 4, seed: int = 0):
        torch.manual_seed(seed)
        lin = nn.Linear(obs_dim, n)
        actor = ProbabilisticTensorDictSequential(
            TensorDictModule(lin, in_keys=["obs"], out_keys=["logits"]),
            ProbabilisticTensorDictModule(
                in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical, return_log_prob=True
            ),
        )
        return actor, lin

    return build


@pytest.fixture
def normal_actor() -> Callable:
    """``(obs_dim=3, act_dim=2, dist=Normal, seed=0, obs_key="obs") -> (actor, linear)``:
    ``dist(loc, scale)`` with ``loc, scale = NormalParamExtractor()(linear(obs))``."""

    def build(obs_dim: int = 3, act_dim: int = 2, dist: type = D.Normal, seed: int = 0, obs_key: str = "obs"):
        torch.manual_seed(seed)
        lin = nn.Linear(obs_dim, 2 * act_dim)
        actor = ProbabilisticTensorDictSequential(
            TensorDictModule(nn.Sequential(lin, NormalParamExtractor()), in_keys=[obs_key], out_keys=["loc", "scale"]),
            ProbabilisticTensorDictModule(
                in_keys=["loc", "scale"], out_keys=["action"], distribution_class=dist, return_log_prob=True
            ),
        )
        return actor, lin

    return build


@pytest.fixture
def state_value_critic() -> Callable:
    """``(obs_dim=3, seed=1) -> (critic, linear)``: ``"state_value" = linear(obs).squeeze(-1)``."""

    def build(obs_dim: int = 3, seed: int = 1):
        torch.manual_seed(seed)
        lin = nn.Linear(obs_dim, 1)
        return TensorDictModule(nn.Sequential(lin, Squeeze()), in_keys=["obs"], out_keys=["state_value"]), lin

    return build


@pytest.fixture
def shared_trunk_nets() -> Callable:
    """``(seed=0) -> (actor, critic, trunk)``: a categorical actor and a critic on one trunk
    (``actor[1]`` is the policy head, ``critic[1]`` the value head)."""

    def build(seed: int = 0):
        torch.manual_seed(seed)
        trunk = TensorDictModule(nn.Linear(3, 8), in_keys=["obs"], out_keys=["hidden"])
        actor = ProbabilisticTensorDictSequential(
            trunk,
            TensorDictModule(nn.Linear(8, 3), in_keys=["hidden"], out_keys=["logits"]),
            ProbabilisticTensorDictModule(
                in_keys=["logits"], out_keys=["action"], distribution_class=D.Categorical, return_log_prob=True
            ),
        )
        value_head = TensorDictModule(
            nn.Sequential(nn.Linear(8, 1), Squeeze()), in_keys=["hidden"], out_keys=["state_value"]
        )
        return actor, TensorDictSequential(trunk, value_head), trunk

    return build


@pytest.fixture
def rollout() -> Callable:
    """``(actor, batch=(3, 5), obs_dim=3, seed=2, with_adv=True, perturb=False) -> td``.

    Random observations, rewards and dones; the actions (with their log-probs and distribution
    parameters) sampled from ``actor``. ``perturb`` then moves the actor's parameters, so that the
    stored behaviour policy differs from the current one (PPO's importance weights); ``with_adv``
    adds random ``"advantage"`` and ``"value_target"`` entries.
    """

    def build(
        actor, batch: tuple = (3, 5), obs_dim: int = 3, seed: int = 2, with_adv: bool = True, perturb: bool = False
    ):
        g = torch.Generator().manual_seed(seed)
        td = TensorDict(
            {
                "obs": torch.randn(*batch, obs_dim, generator=g),
                "next": {
                    "obs": torch.randn(*batch, obs_dim, generator=g),
                    "reward": torch.randn(*batch, generator=g),
                    "done": torch.rand(*batch, generator=g) < 0.2,
                },
            },
            batch_size=list(batch),
        )
        td["next", "terminated"] = td["next", "done"].clone()
        with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
            actor(td)
            if perturb:
                for p in actor.parameters():
                    p.add_(0.3 * torch.randn(p.shape, generator=g))
        if with_adv:
            td["advantage"] = torch.randn(*batch, generator=g)
            td["value_target"] = torch.randn(*batch, generator=g)
        return td

    return build


@pytest.fixture
def bandit_rollout() -> Callable:
    """``(actor, reward_fn, n) -> td``: ``n`` one-step episodes from a single state (``obs = 1``),
    the actions sampled from ``actor`` and ``("next", "reward") = reward_fn(action)``."""

    def build(actor, reward_fn: Callable, n: int):
        td = TensorDict(
            {"obs": torch.ones(n, 1), "next": {"obs": torch.ones(n, 1), "done": torch.ones(n, dtype=torch.bool)}},
            batch_size=[n],
        )
        with torch.no_grad(), set_interaction_type(InteractionType.RANDOM):
            actor(td)
        td["next", "reward"] = reward_fn(td["action"])
        return td

    return build


@pytest.fixture
def normal_dist() -> Callable:
    """``(linear, obs) -> Normal``: the policy of :func:`normal_actor` recomputed by hand."""

    def build(lin: nn.Module, obs: torch.Tensor) -> D.Normal:
        loc, scale = NormalParamExtractor()(lin(obs))
        return D.Normal(loc, scale)

    return build


@pytest.fixture
def gae_reference() -> Callable:
    """``(value, next_value, reward, done, terminated, gamma, lmbda) -> (advantage, value_target)``,
    a plain loop over the last (time) dim."""

    def gae(value, next_value, reward, done, terminated, gamma, lmbda):
        adv = torch.zeros_like(reward)
        running = torch.zeros(reward.shape[:-1])
        for t in reversed(range(reward.shape[-1])):
            delta = reward[..., t] + gamma * next_value[..., t] * (~terminated[..., t]) - value[..., t]
            running = delta + gamma * lmbda * (~done[..., t]) * running
            adv[..., t] = running
        return adv, adv + value

    return gae


@pytest.fixture
def has_grads() -> Callable:
    """``(module) -> [bool]``: whether each parameter got a non-zero gradient."""

    def check(module: nn.Module) -> list:
        return [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in module.parameters()]

    return check


# --------------------------------------------------------------------------------- off-policy
@pytest.fixture
def q_critic() -> Callable:
    """``(n_obs=3, n_act=2, hidden=None) -> critic`` writing ``"state_action_value"`` from
    observation and action (see :class:`Critic`)."""

    def build(n_obs: int = N_OBS, n_act: int = N_ACT, hidden: int | None = None) -> TensorDictModule:
        return TensorDictModule(
            Critic(n_obs, n_act, hidden), in_keys=["observation", "action"], out_keys=["state_action_value"]
        )

    return build


@pytest.fixture
def deterministic_actor_critic(q_critic) -> Callable:
    """``(seed=0, n_obs=3, n_act=2, hidden=None) -> (actor, critic)``: ``action = tanh(Linear(obs))``
    and :func:`q_critic`."""

    def build(seed: int = 0, n_obs: int = N_OBS, n_act: int = N_ACT, hidden: int | None = None):
        torch.manual_seed(seed)
        actor = TensorDictModule(
            nn.Sequential(nn.Linear(n_obs, n_act), nn.Tanh()), in_keys=["observation"], out_keys=["action"]
        )
        return actor, q_critic(n_obs, n_act, hidden)

    return build


@pytest.fixture
def transition_batch() -> Callable:
    """``(n=6, seed=1, action="uniform", n_obs=3, n_act=2) -> td``: a replay batch of ``n``
    transitions, about 30% terminal (``done == terminated``).

    ``action``: ``"uniform"`` (in ``[-1, 1]``, ``[n, n_act]``), ``"normal"`` (``[n, n_act]``) or
    ``"index"`` (integers below ``n_act``, ``[n]``).
    """

    def build(n: int = 6, seed: int = 1, action: str = "uniform", n_obs: int = N_OBS, n_act: int = N_ACT) -> TensorDict:
        g = torch.Generator().manual_seed(seed)
        terminated = torch.rand(n, generator=g) < 0.3
        observation = torch.randn(n, n_obs, generator=g)
        if action == "uniform":
            taken = torch.rand(n, n_act, generator=g) * 2 - 1
        elif action == "normal":
            taken = torch.randn(n, n_act, generator=g)
        elif action == "index":
            taken = torch.randint(n_act, (n,), generator=g)
        else:
            raise ValueError(f"transition_batch: action must be 'uniform', 'normal' or 'index', got {action!r}.")
        return TensorDict(
            {
                "observation": observation,
                "action": taken,
                "next": {
                    "observation": torch.randn(n, n_obs, generator=g),
                    "reward": torch.randn(n, generator=g),
                    "done": terminated.clone(),
                    "terminated": terminated,
                },
            },
            batch_size=[n],
        )

    return build


@pytest.fixture
def perturb() -> Callable:
    """``(params)``: adds ``0.3 * N(0, 1)`` noise in place (moves online parameters off their targets)."""

    def apply(params) -> None:
        with torch.no_grad():
            for t in params.values(True, True):
                t.add_(0.3 * torch.randn_like(t))

    return apply


@pytest.fixture
def tanh_policy() -> Callable:
    """``(params, obs) -> action``: :func:`deterministic_actor_critic`'s actor from its parameters."""

    def pi(p, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(obs @ p["module", "0", "weight"].T + p["module", "0", "bias"])

    return pi


@pytest.fixture
def q_reference() -> Callable:
    """``(params, obs, action) -> Q``: :func:`q_critic` from its parameters, ``[B]`` for one set,
    ``[num_nets, B]`` for an ensemble's stacked parameters."""

    def q(p, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        w, b = p["module", "net", "weight"], p["module", "net", "bias"]  # [(N,) 1, F], [(N,) 1]
        return (torch.cat([obs, act], -1) @ w.transpose(-1, -2) + b.unsqueeze(-2)).squeeze(-1)

    return q


@pytest.fixture
def train_on_bandit() -> Callable:
    """``(loss, sample_action, reward_fn, *, steps, n, lr, n_obs=1) -> last output``.

    Adam on the sum of the ``loss*`` entries over ``steps`` batches of ``n`` one-step episodes
    (every step terminal) from a single state (``observation = 1``): the actions come from
    ``sample_action(n)``, the rewards from ``reward_fn(action)``.
    """

    def train(loss, sample_action: Callable, reward_fn: Callable, *, steps: int, n: int, lr: float, n_obs: int = 1):
        opt = torch.optim.Adam(loss.parameters(), lr=lr)
        out = None
        for _ in range(steps):
            a = sample_action(n)
            terminal = torch.ones(n, dtype=torch.bool)
            td = TensorDict(
                {
                    "observation": torch.ones(n, n_obs),
                    "action": a,
                    "next": {
                        "observation": torch.ones(n, n_obs),
                        "reward": reward_fn(a),
                        "done": terminal,
                        "terminated": terminal.clone(),
                    },
                },
                batch_size=[n],
            )
            out = loss(td)
            opt.zero_grad()
            sum(v for k, v in out.items() if k.startswith("loss")).backward()
            opt.step()
        return out

    return train


@pytest.fixture
def assert_writes_only_td_error() -> Callable:
    """``(loss, td)``: calling ``loss`` on ``td`` adds ``"td_error"`` (the priority) and changes
    no other entry."""

    def check(loss, td) -> None:
        before = td.clone()
        loss(td)
        assert set(td.keys(True, True)) - set(before.keys(True, True)) == {"td_error"}
        for key in before.keys(True, True):
            assert torch.equal(td[key], before[key]), key

    return check


# ------------------------------------------------------------------------------------ compile
@pytest.fixture
def assert_compiled_matches_eager() -> Callable:
    """``(loss, td, *, compiled_loss=None, seed=None)``: ``torch.compile(fullgraph=True,
    backend="eager")`` of ``compiled_loss`` (default: ``loss`` itself) gives the keys and values of
    the eager ``loss``, each on its own clone of ``td`` (losses may write ``"td_error"`` into it).
    ``seed`` reseeds the global RNG before each call (losses that sample)."""

    def check(loss, td, *, compiled_loss=None, seed: int | None = None) -> None:
        torch.compiler.reset()
        # torch's distribution argument checks do not trace with fullgraph; the first compile of a session
        # turns them off and an earlier test may have turned them back on: off here, whatever the order
        validate = D.Distribution._validate_args
        D.Distribution.set_default_validate_args(False)
        try:
            if seed is not None:
                torch.manual_seed(seed)
            expected = loss(td.clone())
            compiled = torch.compile(loss if compiled_loss is None else compiled_loss, fullgraph=True, backend="eager")
            if seed is not None:
                torch.manual_seed(seed)
            actual = compiled(td.clone())
            assert set(actual.keys()) == set(expected.keys())
            for key in expected.keys():
                torch.testing.assert_close(actual[key], expected[key], msg=lambda m, key=key: f"{key}: {m}")
        finally:
            D.Distribution.set_default_validate_args(validate)
            torch.compiler.reset()

    return check


@pytest.fixture
def composite_policy() -> Callable:
    """``(seed=0) -> (actor, td, params)``: a two-head composite policy (a 2-dim Normal ``"cont"``
    and a 3-way Categorical ``"disc"``) on ``"obs"``, a batch of 6 with its stored actions, per-head
    behaviour log-probs (-2 and -1) and advantages, and ``params(obs)``: the heads' parameters."""

    def build(seed: int = 0):
        torch.manual_seed(seed)
        net = nn.Linear(3, 7)

        def params(obs):
            out = net(obs)
            return TensorDict(
                cont=TensorDict(loc=out[..., :2], scale=out[..., 2:4].exp(), batch_size=obs.shape[:-1]),
                disc=TensorDict(logits=out[..., 4:], batch_size=obs.shape[:-1]),
                batch_size=obs.shape[:-1],
            )

        actor = ProbabilisticTensorDictSequential(
            TensorDictModule(params, in_keys=["obs"], out_keys=["params"]),
            ProbabilisticTensorDictModule(
                in_keys=["params"],
                distribution_class=CompositeDistribution,
                return_log_prob=True,
                distribution_kwargs={"distribution_map": {"cont": D.Normal, "disc": D.Categorical}},
            ),
        )
        td = TensorDict(
            obs=torch.randn(6, 3),
            cont=torch.randn(6, 2),
            disc=torch.tensor([0, 1, 2, 0, 1, 2]),
            cont_log_prob=torch.full((6,), -2.0),
            disc_log_prob=torch.full((6,), -1.0),
            advantage=torch.linspace(-1, 1, 6),
            batch_size=[6],
        )
        return actor, td, params

    return build
