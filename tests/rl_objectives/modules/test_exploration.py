"""Exploration modules: gating by interaction type, annealing schedules, OU recurrence, masks and errors."""

import math

import pytest
import torch
from rl_objectives.modules import (
    Actor,
    AdditiveGaussianModule,
    EGreedyModule,
    OrnsteinUhlenbeckProcessModule,
)
from tdict import TensorDict
from tdict.nn import TensorDictSequential, set_interaction_type
from tdict.specs import Bounded, Categorical, Composite, OneHot

BATCHES = [(), (4,), (2, 3)]


def _schedule(init, end, n, count):
    return max(end, init - count * (init - end) / n)


class TestEGreedy:
    @pytest.mark.parametrize("batch", BATCHES)
    @pytest.mark.parametrize(
        "spec", [Categorical(4), OneHot(4), Bounded(-2.0, 2.0, shape=(3,))], ids=["cat", "onehot", "box"]
    )
    def test_eps_one_gives_random_actions_in_spec(self, batch, spec):
        module = EGreedyModule(spec, eps_init=1.0, eps_end=1.0)
        greedy = spec.zero((50, *batch))
        td = TensorDict(action=greedy.clone(), batch_size=(50, *batch))
        out = module(td)["action"]
        assert out.shape == greedy.shape and out.dtype == greedy.dtype
        assert spec.is_in(out)
        assert not torch.equal(out, greedy)  # 50 * batch draws all equal to the greedy action: ~impossible

    @pytest.mark.parametrize("batch", BATCHES)
    def test_eps_zero_keeps_greedy(self, batch):
        module = EGreedyModule(Bounded(-1.0, 1.0, shape=(2,)), eps_init=0.0, eps_end=0.0)
        action = torch.rand(*batch, 2)
        out = module(TensorDict(action=action.clone(), batch_size=batch))["action"]
        assert torch.equal(out, action)

    def test_a_wrong_action_shape_is_refused_even_when_nobody_explores(self):
        module = EGreedyModule(OneHot(4), eps_init=0.0, eps_end=0.0)
        with pytest.raises(ValueError, match=r"shape \(5, 3\) does not end with the spec shape \(4,\)"):
            module(TensorDict(action=torch.zeros(5, 3, dtype=torch.long), batch_size=[5]))

    def test_fraction_replaced_is_eps_and_whole_vectors(self):
        torch.manual_seed(0)
        module = EGreedyModule(Bounded(-1.0, 1.0, shape=(2,)), eps_init=0.3, eps_end=0.3)
        action = torch.full((20000, 2), 5.0)  # outside the box: a replaced action is recognisable
        out = module(TensorDict(action=action, batch_size=[20000]))["action"]
        replaced = out != 5.0
        assert torch.equal(replaced[:, 0], replaced[:, 1])  # one draw per action vector
        assert abs(replaced[:, 0].float().mean().item() - 0.3) < 0.02

    def test_gated_by_interaction_type(self):
        module = EGreedyModule(Bounded(-1.0, 1.0, shape=(2,)), eps_init=1.0, eps_end=1.0)
        action = torch.full((10, 2), 5.0)
        for itype in ("deterministic", "mode", "mean"):
            with set_interaction_type(itype):
                assert torch.equal(module(TensorDict(action=action.clone(), batch_size=[10]))["action"], action)
        with set_interaction_type("random"):
            assert not torch.equal(module(TensorDict(action=action.clone(), batch_size=[10]))["action"], action)
        # unset counts as exploring (TorchRL semantics)
        assert not torch.equal(module(TensorDict(action=action.clone(), batch_size=[10]))["action"], action)

    def test_annealing_schedule_exact(self):
        module = EGreedyModule(Categorical(2), eps_init=0.9, eps_end=0.2, annealing_num_steps=7)
        assert module.eps.item() == pytest.approx(0.9)
        count = 0
        for frames in [1, 2, 1, 0, 5, 10]:
            module.step(frames)
            count += frames
            assert module.eps.item() == pytest.approx(_schedule(0.9, 0.2, 7, count), abs=1e-7)
        assert module.eps.item() == pytest.approx(0.2)
        state = module.state_dict()
        assert "eps" in state and "eps_init" in state and "eps_end" in state

    def test_action_mask(self):
        torch.manual_seed(0)
        mask = torch.zeros(500, 5, dtype=torch.bool)
        allowed = torch.randint(0, 5, (500,))
        mask[torch.arange(500), allowed] = True
        mask[:, 4] = True
        module = EGreedyModule(Categorical(5), eps_init=1.0, eps_end=1.0, action_mask_key="action_mask")
        td = TensorDict(action=torch.zeros(500, dtype=torch.long), action_mask=mask, batch_size=[500])
        out = module(td)["action"]
        assert mask.gather(-1, out.unsqueeze(-1)).all()
        one_hot = EGreedyModule(OneHot(5), eps_init=1.0, eps_end=1.0, action_mask_key="action_mask")
        td = TensorDict(action=torch.zeros(500, 5, dtype=torch.bool), action_mask=mask, batch_size=[500])
        out = one_hot(td)["action"]
        assert (out & ~mask).sum() == 0 and (out.sum(-1) == 1).all()

    def test_after_actor_and_nested_key(self):
        spec = Bounded(-1.0, 1.0, shape=(2,))
        policy = TensorDictSequential(
            Actor(torch.nn.Linear(3, 2), spec=spec), EGreedyModule(spec, eps_init=1.0, eps_end=1.0)
        )
        out = policy(TensorDict(observation=torch.randn(8, 3), batch_size=[8]))
        assert spec.is_in(out["action"])
        nested = EGreedyModule(
            Composite(agent={"action": Categorical(3)}), eps_init=1.0, eps_end=1.0, action_key=("agent", "action")
        )
        td = TensorDict(agent=TensorDict(action=torch.zeros(4, 2, dtype=torch.long), batch_size=[4, 2]), batch_size=[4])
        assert Categorical(3).is_in(nested(td)["agent", "action"])

    def test_errors(self):
        with pytest.raises(ValueError, match="eps_end=0.5 is larger than eps_init=0.2"):
            EGreedyModule(Categorical(2), eps_init=0.2, eps_end=0.5)
        with pytest.raises(ValueError, match="annealing_num_steps"):
            EGreedyModule(Categorical(2), annealing_num_steps=0)
        with pytest.raises(ValueError, match="spec is required"):
            EGreedyModule(None)
        with pytest.raises(ValueError, match="eps_init and eps_end must lie in"):
            EGreedyModule(Categorical(2), eps_init=1.5)
        module = EGreedyModule(Bounded(-1.0, 1.0, shape=(2,)), eps_init=1.0)
        with pytest.raises(ValueError, match="does not end with the spec shape"):
            module(TensorDict(action=torch.zeros(4, 3), batch_size=[4]))
        with pytest.raises(KeyError, match="action"):
            module(TensorDict(act=torch.zeros(4, 2), batch_size=[4]))
        with pytest.raises(ValueError, match="frames"):
            module.step(-1)


class TestAdditiveGaussian:
    @pytest.mark.parametrize("batch", BATCHES)
    def test_noise_matches_reference(self, batch):
        module = AdditiveGaussianModule(
            Bounded(-1.0, 1.0, shape=(2,)), sigma_init=0.5, sigma_end=0.5, mean=0.1, std=0.3
        )
        action = torch.rand(*batch, 2) - 0.5
        torch.manual_seed(3)
        out = module(TensorDict(action=action.clone(), batch_size=batch))["action"]
        torch.manual_seed(3)
        expected = (action + 0.5 * (torch.randn_like(action) * 0.3 + 0.1)).clamp(-1.0, 1.0)
        torch.testing.assert_close(out, expected)

    def test_safe_projection_and_unsafe(self):
        spec = Bounded(-1.0, 1.0, shape=(2,))
        module = AdditiveGaussianModule(spec, sigma_init=10.0, sigma_end=10.0)
        out = module(TensorDict(action=torch.zeros(100, 2), batch_size=[100]))["action"]
        assert spec.is_in(out)
        unsafe = AdditiveGaussianModule(None, sigma_init=10.0, sigma_end=10.0, safe=False)
        assert not spec.is_in(unsafe(TensorDict(action=torch.zeros(100, 2), batch_size=[100]))["action"])

    def test_gating_and_annealing(self):
        module = AdditiveGaussianModule(
            Bounded(-1.0, 1.0, shape=(2,)), sigma_init=1.0, sigma_end=0.25, annealing_num_steps=3
        )
        action = torch.zeros(5, 2)
        with set_interaction_type("deterministic"):
            assert torch.equal(module(TensorDict(action=action.clone(), batch_size=[5]))["action"], action)
        for count in range(1, 6):
            module.step()
            assert module.sigma.item() == pytest.approx(_schedule(1.0, 0.25, 3, count))

    def test_errors(self):
        with pytest.raises(ValueError, match="sigma_end=2.0 is larger than sigma_init=1.0"):
            AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), sigma_init=1.0, sigma_end=2.0)
        with pytest.raises(ValueError, match="spec is required"):
            AdditiveGaussianModule(None)
        with pytest.raises(ValueError, match="std"):
            AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), std=0.0)


def _ou_reference(actions, is_init, seed, theta, mu, sigma, dt, sigma_min, n_anneal, eps, x0=0.0):
    """The OU recurrence written out step by step (same RNG order as the module: one randn per call)."""
    torch.manual_seed(seed)
    prev = torch.zeros_like(actions[0])
    steps = torch.zeros(actions[0].shape[:-1], dtype=torch.int64)
    outs = []
    for t, action in enumerate(actions):
        init = is_init[t]
        prev = torch.where(init.unsqueeze(-1), torch.zeros_like(prev), prev)
        steps = torch.where(init, torch.zeros_like(steps), steps)
        x = prev + x0
        slope = 0.0 if sigma_min is None else -(sigma - sigma_min) / n_anneal
        floor = sigma if sigma_min is None else sigma_min
        sig = (slope * steps.to(action.dtype) + sigma).clamp_min(floor).unsqueeze(-1)
        noise = x + theta * (mu - x) * dt + sig * math.sqrt(dt) * torch.randn_like(x)
        outs.append(action + eps * noise)
        prev = noise - x0
        steps = steps + 1
    return outs, prev, steps


class TestOrnsteinUhlenbeck:
    @pytest.mark.parametrize("batch", [(1,), (4,), (2, 3)])
    def test_matches_recurrence_with_resets(self, batch):
        T = 6
        theta, mu, sigma, dt, sigma_min, n_anneal = 0.3, 0.2, 0.5, 0.05, 0.1, 4
        module = OrnsteinUhlenbeckProcessModule(
            Bounded(-100.0, 100.0, shape=(2,)),
            eps_init=0.8,
            eps_end=0.8,
            theta=theta,
            mu=mu,
            sigma=sigma,
            dt=dt,
            sigma_min=sigma_min,
            n_steps_annealing=n_anneal,
            x0=0.05,
        )
        gen = torch.Generator().manual_seed(1)
        actions = [torch.randn(*batch, 2, generator=gen) for _ in range(T)]
        is_init = [torch.rand(batch, generator=gen) < 0.3 for _ in range(T)]
        is_init[0] = torch.ones(batch, dtype=torch.bool)
        expected, prev, steps = _ou_reference(
            actions, is_init, 7, theta, mu, sigma, dt, sigma_min, n_anneal, 0.8, x0=0.05
        )
        torch.manual_seed(7)
        td = TensorDict(batch_size=batch)
        for t in range(T):
            td.set("action", actions[t]).set("is_init", is_init[t])
            td = module(td)
            torch.testing.assert_close(td["action"], expected[t])
        torch.testing.assert_close(td["_ou_prev_noise"], prev)
        assert torch.equal(td["_ou_steps"], steps)

    def test_unbatched_and_annealing_and_gating(self):
        module = OrnsteinUhlenbeckProcessModule(
            Bounded(-1.0, 1.0, shape=(2,)), eps_init=1.0, eps_end=0.5, annealing_num_steps=2
        )
        td = TensorDict(action=torch.zeros(2), is_init=torch.tensor(True))
        out = module(td)
        assert out["_ou_steps"].shape == () and out["_ou_prev_noise"].shape == (2,)
        assert Bounded(-1.0, 1.0, shape=(2,)).is_in(out["action"])
        module.step(1)
        assert module.eps.item() == pytest.approx(0.75)
        module.step(3)
        assert module.eps.item() == pytest.approx(0.5)
        with set_interaction_type("mode"):
            td2 = module(TensorDict(action=torch.zeros(2), is_init=torch.tensor(True)))
        assert "_ou_steps" not in td2 and torch.equal(td2["action"], torch.zeros(2))

    def test_safe_projection(self):
        spec = Bounded(-0.01, 0.01, shape=(3,))
        module = OrnsteinUhlenbeckProcessModule(spec, sigma=50.0)
        out = module(TensorDict(action=torch.zeros(10, 3), is_init=torch.ones(10, dtype=torch.bool), batch_size=[10]))
        assert spec.is_in(out["action"])

    def test_missing_is_init_warns_and_bad_shape_raises(self):
        module = OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)))
        with pytest.warns(UserWarning, match="is_init"):
            module(TensorDict(action=torch.zeros(4, 2), batch_size=[4]))
        with pytest.raises(ValueError, match="'is_init' has shape"):
            module(TensorDict(action=torch.zeros(4, 2), is_init=torch.ones(4, 3, dtype=torch.bool), batch_size=[4]))
        # a trailing singleton dim is accepted
        out = module(TensorDict(action=torch.zeros(4, 2), is_init=torch.ones(4, 1, dtype=torch.bool), batch_size=[4]))
        assert out["_ou_steps"].tolist() == [1, 1, 1, 1]

    def test_errors(self):
        with pytest.raises(ValueError, match="n_steps_annealing"):
            OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)), n_steps_annealing=0)
        with pytest.raises(ValueError, match="spec is required"):
            OrnsteinUhlenbeckProcessModule(None)
        with pytest.raises(ValueError, match="eps_end=0.9 is larger than eps_init=0.5"):
            OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)), eps_init=0.5, eps_end=0.9)


@pytest.mark.parametrize("cls", [OrnsteinUhlenbeckProcessModule, AdditiveGaussianModule])
def test_placeholder_spec_means_no_projection(cls):
    # TorchRL's placeholder (the key, no spec): the noise is added and nothing is clipped
    torch.manual_seed(0)
    module = cls(spec=Composite({"action": None}), safe=True)
    td = TensorDict({"action": torch.full((4, 2), 100.0)}, [4])
    out = module(td)["action"]
    assert out.shape == (4, 2) and not torch.equal(out, torch.full((4, 2), 100.0))
    assert (out - 100.0).abs().max() < 10  # noise around the action, no clip to any bound
    with pytest.raises(ValueError, match="placeholder"):
        EGreedyModule(Composite({"action": None}))
