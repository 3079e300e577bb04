"""MultiAgentGAE (TorchRL 0.14.1's ``MultiAgentGAE`` / ``ValueEstimators.MAGAE``).

Per-agent values ``[N, T, A]`` under the ``"agents"`` group with a team reward and team done flags
``[N, T]`` (or per-agent ones): against a plain Python loop run agent by agent, against this
library's GAE on the agents flattened into the batch, with shared (agent-free) values, a trailing
feature dim (``agent_dim=-2``), a value network, per-agent advantage standardisation, and errors.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.value import GAE, MultiAgentGAE, ValueEstimators
from tdict import TensorDict
from tdict.nn import TensorDictModule
from torch import nn

N, T, A = 3, 6, 4
VALUE = ("agents", "state_value")


def loop_gae(gamma, lmbda, value, next_value, reward, done, terminated):
    """One trajectory ``[T]`` in plain Python: delta_t = r_t + gamma V'_t (not terminated) - V_t,
    A_t = delta_t + gamma lmbda A_{t+1} (not done)."""
    adv, running = [0.0] * len(reward), 0.0
    for t in reversed(range(len(reward))):
        delta = reward[t] + gamma * next_value[t] * (1.0 - terminated[t]) - value[t]
        running = delta + gamma * lmbda * (1.0 - done[t]) * running
        adv[t] = running
    return torch.tensor(adv, dtype=torch.float64)


def rollout(seed, per_agent_reward=False, n=N, t=T, a=A):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(n, t, generator=g) < 0.25
    terminated = done & (torch.rand(n, t, generator=g) < 0.5)  # some ends are truncations
    reward_shape = (n, t, a) if per_agent_reward else (n, t)
    return TensorDict(
        {
            "agents": TensorDict(
                state_value=torch.randn(n, t, a, generator=g, dtype=torch.float64), batch_size=[n, t, a]
            ),
            "next": {
                "agents": TensorDict(
                    state_value=torch.randn(n, t, a, generator=g, dtype=torch.float64), batch_size=[n, t, a]
                ),
                "reward": torch.randn(*reward_shape, generator=g, dtype=torch.float64),
                "done": done,
                "terminated": terminated,
            },
        },
        batch_size=[n, t],
    )


def estimator(gamma, lmbda, **kwargs):
    return MultiAgentGAE(gamma=gamma, lmbda=lmbda, value_network=None, **kwargs).set_keys(value=VALUE)


@settings(max_examples=30)
@given(st.integers(0, 2**16), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.booleans())
def test_matches_a_loop_per_agent(seed, gamma, lmbda, per_agent_reward):
    td = rollout(seed, per_agent_reward)
    out = estimator(gamma, lmbda)(td.clone())
    assert out["advantage"].shape == out["value_target"].shape == (N, T, A)
    v, nv = td["agents", "state_value"], td["next", "agents", "state_value"]
    r = td["next", "reward"]
    done, term = td["next", "done"].double(), td["next", "terminated"].double()
    for i in range(N):
        for a in range(A):
            reward = r[i, :, a] if per_agent_reward else r[i]  # the team reward is every agent's
            adv = loop_gae(gamma, lmbda, v[i, :, a].tolist(), nv[i, :, a].tolist(), reward.tolist(), done[i], term[i])
            torch.testing.assert_close(out["advantage"][i, :, a], adv)
            torch.testing.assert_close(out["value_target"][i, :, a], adv + v[i, :, a])


@pytest.mark.parametrize("per_agent_reward", [False, True])
def test_equals_gae_on_the_agents_flattened_into_the_batch(per_agent_reward):
    td = rollout(7, per_agent_reward)
    out = estimator(0.9, 0.8)(td.clone())

    def flat(x):  # [N, T, A] -> [N * A, T]
        return x.permute(0, 2, 1).reshape(N * A, T)

    def per_agent(x):  # a team signal [N, T] -> [N * A, T]
        return flat(x.unsqueeze(-1).expand(N, T, A))

    nxt = td["next"]
    reward = flat(nxt["reward"]) if per_agent_reward else per_agent(nxt["reward"])
    flat_td = TensorDict(
        {
            "state_value": flat(td["agents", "state_value"]),
            "next": {
                "state_value": flat(nxt["agents", "state_value"]),
                "reward": reward,
                "done": per_agent(nxt["done"]),
                "terminated": per_agent(nxt["terminated"]),
            },
        },
        batch_size=[N * A, T],
    )
    ref = GAE(gamma=0.9, lmbda=0.8, value_network=None)(flat_td)
    torch.testing.assert_close(flat(out["advantage"]), ref["advantage"], rtol=0, atol=0)
    torch.testing.assert_close(flat(out["value_target"]), ref["value_target"], rtol=0, atol=0)
    # the vectorised scan and the reverse-time loop agree too
    looped = estimator(0.9, 0.8, vectorized=False)(td.clone())
    torch.testing.assert_close(looped["advantage"], out["advantage"])


def test_shared_values_without_an_agent_dim_are_plain_gae():
    """A centralised value with no agent dim and a team reward: nothing to broadcast."""
    td = rollout(3)
    shared = TensorDict(
        {
            "state_value": td["agents", "state_value"][..., 0],
            "next": {
                "state_value": td["next", "agents", "state_value"][..., 0],
                "reward": td["next", "reward"],
                "done": td["next", "done"],
                "terminated": td["next", "terminated"],
            },
        },
        batch_size=[N, T],
    )
    out = MultiAgentGAE(gamma=0.95, lmbda=0.9, value_network=None)(shared.clone())
    ref = GAE(gamma=0.95, lmbda=0.9, value_network=None)(shared.clone())
    torch.testing.assert_close(out["advantage"], ref["advantage"], rtol=0, atol=0)
    # a centralised critic replicated over the agents gives every agent the same advantage
    replicated = td.clone()
    replicated["agents", "state_value"] = shared["state_value"].unsqueeze(-1).expand(N, T, A).clone()
    replicated["next", "agents", "state_value"] = shared["next", "state_value"].unsqueeze(-1).expand(N, T, A).clone()
    adv = estimator(0.95, 0.9)(replicated)["advantage"]
    torch.testing.assert_close(adv, ref["advantage"].unsqueeze(-1).expand(N, T, A))


def test_agent_dim_before_a_feature_dim():
    """Values ``[N, T, A, F]`` (F objectives), team reward ``[N, T, F]``: ``agent_dim=-2``."""
    F = 2
    g = torch.Generator().manual_seed(0)
    v = torch.randn(N, T, A, F, generator=g, dtype=torch.float64)
    nv = torch.randn(N, T, A, F, generator=g, dtype=torch.float64)
    r = torch.randn(N, T, F, generator=g, dtype=torch.float64)
    done = torch.zeros(N, T, dtype=torch.bool)
    done[:, 2] = True
    td = TensorDict(
        {
            "agents": TensorDict(state_value=v, batch_size=[N, T, A]),
            "next": {
                "agents": TensorDict(state_value=nv, batch_size=[N, T, A]),
                "reward": r,
                "done": done,
                "terminated": done,
            },
        },
        batch_size=[N, T],
    )
    out = estimator(0.9, 0.7, agent_dim=-2)(td)
    d = done.double()
    for i in range(N):
        for a in range(A):
            for f in range(F):
                adv = loop_gae(
                    0.9, 0.7, v[i, :, a, f].tolist(), nv[i, :, a, f].tolist(), r[i, :, f].tolist(), d[i], d[i]
                )
                torch.testing.assert_close(out["advantage"][i, :, a, f], adv)


def test_with_a_value_network_under_the_agents_group():
    torch.manual_seed(0)
    lin = nn.Linear(5, 1).double()
    critic = TensorDictModule(nn.Sequential(lin, nn.Flatten(-2)), in_keys=[("agents", "obs")], out_keys=[VALUE])
    td = rollout(1)
    g = torch.Generator().manual_seed(2)
    td["agents", "obs"] = torch.randn(N, T, A, 5, generator=g, dtype=torch.float64)
    td["next", "agents", "obs"] = torch.randn(N, T, A, 5, generator=g, dtype=torch.float64)
    del td["agents", "state_value"], td["next", "agents", "state_value"]
    est = MultiAgentGAE(gamma=0.9, lmbda=0.9, value_network=critic).set_keys(value=VALUE)
    out = est(td.clone())
    with torch.no_grad():
        td["agents", "state_value"] = lin(td["agents", "obs"]).squeeze(-1)
        td["next", "agents", "state_value"] = lin(td["next", "agents", "obs"]).squeeze(-1)
    ref = estimator(0.9, 0.9)(td)
    torch.testing.assert_close(out["advantage"], ref["advantage"])
    assert est.value_estimate(td.clone()).shape == (N, T, A)


def test_average_gae_standardises_each_agent_on_its_own():
    td = rollout(5)
    raw = estimator(0.9, 0.9)(td.clone())["advantage"]
    avg = estimator(0.9, 0.9, average_gae=True)(td.clone())
    expected = (raw - raw.mean((0, 1), keepdim=True)) / raw.std((0, 1), keepdim=True).clamp_min(1e-4)
    torch.testing.assert_close(avg["advantage"], expected)
    torch.testing.assert_close(avg["value_target"], raw + td["agents", "state_value"])  # from the raw advantage
    torch.testing.assert_close(avg["advantage"].mean((0, 1)), torch.zeros(A, dtype=torch.float64), atol=1e-12, rtol=0)


def test_the_enum_member_builds_it():
    assert ValueEstimators("magae") is ValueEstimators.MAGAE
    assert ValueEstimators.MAGAE.value == "Multi-agent generalized advantage estimate"


def test_bad_arguments_and_shapes_raise():
    for agent_dim in (1.0, True, "-1", None):
        with pytest.raises(TypeError, match="agent_dim must be an int"):
            MultiAgentGAE(gamma=0.9, lmbda=0.9, value_network=None, agent_dim=agent_dim)  # pyright: ignore[reportArgumentType]
    with pytest.raises(TypeError):  # keyword-only, as TorchRL's
        MultiAgentGAE(0.9, 0.9, None)  # pyright: ignore[reportCallIssue]
    with pytest.raises(ValueError, match=r"lmbda"):
        MultiAgentGAE(gamma=0.9, lmbda=1.5, value_network=None)
    td = rollout(0)
    bad = td.clone()
    bad["next", "reward"] = torch.zeros(N, T, A, 2, dtype=torch.float64)  # two dims more than the team reward
    with pytest.raises(ValueError, match=r"MultiAgentGAE: reward of shape \(3, 6, 4, 2\)"):
        estimator(0.9, 0.9)(bad)
    bad = td.clone()
    bad["next", "reward"] = torch.zeros(N, T, A + 1, dtype=torch.float64)  # per-agent, wrong number of agents
    with pytest.raises(ValueError, match="per-step entries must have the same shape"):
        estimator(0.9, 0.9)(bad)


def test_compiled_estimate_equals_eager():
    td = rollout(0)
    gae = estimator(0.9, 0.8)
    expected = gae(td.clone())
    actual = torch.compile(gae, fullgraph=True, backend="eager")(td.clone())
    for key in ("advantage", "value_target"):  # per agent: [N, T, A]
        assert expected[key].shape == (N, T, A)
        torch.testing.assert_close(actual[key], expected[key])
    torch.compiler.reset()
