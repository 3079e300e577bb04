"""TensorDictPrimer."""

import pytest
import torch
from tdict import TensorDict
from tdict.specs import Bounded, Composite, Unbounded

from rl_envs import Compose, PendulumEnv, StepCounter, TensorDictPrimer, TransformedEnv

ACTIONS = torch.tensor([1, 2, 3])  # with max_count=6: episodes of 6, 3 and 2 steps


def recurrent_policy(actions=None):
    """Writes the action and a new 'hidden' state (old + 1), as a recurrent policy would."""

    def policy(td):
        td.set("hidden", td.get("hidden") + 1)
        if actions is not None:
            td.set("action", actions.clone())
        else:
            td.set("action", torch.zeros(*td.batch_size, 1))
        return td

    return policy


def test_primer_single_env_carries_state(added_keys_match):
    env = TransformedEnv(PendulumEnv(seed=0), Compose(StepCounter(3), TensorDictPrimer(hidden=Unbounded(shape=(4,)))))
    assert env.reset()["hidden"].tolist() == [0.0] * 4
    r = env.rollout(7, recurrent_policy(), break_when_any_done=False)
    # hidden counts the policy calls of the episode (reset to 0 every 3 steps)
    assert r["next", "hidden"][:, 0].tolist() == [1, 2, 3, 1, 2, 3, 1]
    assert torch.equal(r["hidden"], r["next", "hidden"])  # the policy wrote the root before the step
    assert "hidden" in env.observation_spec.keys() and "hidden" in env.state_spec.keys()
    added_keys_match(env)


def test_primer_batched_partial_resets(counting_env, added_keys_match, all_in):
    primers = Composite(hidden=Unbounded(shape=(3, 2)), shape=(3,))
    env = TransformedEnv(counting_env(batch_size=[3], max_count=6, n_actions=4), TensorDictPrimer(primers))
    r = env.rollout(12, recurrent_policy(ACTIONS), break_when_any_done=False)
    done = r["next", "done"]
    ref = torch.zeros(3, 12)
    for i in range(3):  # loop reference: step index within the episode, from 1
        k = 0
        for t in range(12):
            k += 1
            ref[i, t] = k
            k = 0 if bool(done[i, t]) else k
    torch.testing.assert_close(r["next", "hidden"], ref.unsqueeze(-1).expand(3, 12, 2))
    spec = env.observation_spec["hidden"]
    assert spec.shape == (3, 2) and all_in(spec, r["next", "hidden"])
    added_keys_match(env)


def test_primer_expand_specs_random_and_defaults(counting_env):
    base = counting_env(batch_size=[3])
    with pytest.raises(RuntimeError, match="expand_specs"):
        TransformedEnv(base, TensorDictPrimer(h=Unbounded(shape=(2,)))).reset()
    env = TransformedEnv(
        counting_env(batch_size=[3]), TensorDictPrimer(h=Bounded(-1.0, 1.0, shape=(2,)), random=True, expand_specs=True)
    )
    h = env.reset()["h"]
    assert h.shape == (3, 2) and env.observation_spec["h"].is_in(h) and h.abs().sum() > 0
    env = TransformedEnv(
        counting_env(batch_size=[3]),
        TensorDictPrimer(
            a=Unbounded(shape=(3, 1)),
            b=Unbounded(shape=(3, 2), dtype=torch.float64),
            batch_size=[3],
            default_value={"a": 2.0, "b": lambda: torch.ones(3, 2, dtype=torch.float64)},
        ),
    )
    td = env.reset()
    assert td["a"].tolist() == [[2.0]] * 3 and td["b"].dtype == torch.float64 and td["b"].sum() == 6
    with pytest.raises(ValueError, match="must match the primers"):
        TensorDictPrimer(a=Unbounded(shape=(1,)), default_value={"b": 1.0})
    with pytest.raises(ValueError, match="TensorSpec"):
        TensorDictPrimer(a=3)


def test_primer_single_default_value_partial_reset(counting_env):
    calls = []

    def make(reset=None):
        n = 3 if reset is None else int(reset.sum())
        calls.append(n)
        return TensorDict(h=torch.full((n, 2), 7.0), batch_size=[n])

    t = TensorDictPrimer(
        Composite(h=Unbounded(shape=(3, 2)), shape=(3,)), default_value=make, single_default_value=True
    )
    env = TransformedEnv(counting_env(batch_size=[3]), t)
    td = env.reset()
    td["h"] = torch.zeros(3, 2)
    td["_reset"] = torch.tensor([False, True, False])
    out = env.reset(td)
    assert out["h"][:, 0].tolist() == [0.0, 7.0, 0.0] and calls == [3, 1]


def test_primer_forward_on_plain_tensordict():
    t = TensorDictPrimer(Composite(h=Unbounded(shape=(3, 2)), shape=(3,)), default_value=0.5)
    out = t(TensorDict(obs=torch.zeros(3, 5), batch_size=[3, 5]))  # a stacked rollout [N, T]
    assert out["h"].shape == (3, 5, 2) and out["h"].eq(0.5).all()
    out = TensorDictPrimer(h=Bounded(0.0, 1.0, shape=(2,)), random=True)(TensorDict(batch_size=[4]))
    assert out["h"].shape == (4, 2) and ((out["h"] >= 0) & (out["h"] <= 1)).all()
