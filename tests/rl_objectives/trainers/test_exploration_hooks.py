"""AnnealExploration: exploration factors follow SB3's linear schedule over collected frames, with no
hand call, and the annealing counters survive a trainer checkpoint."""

import pytest
import torch
from rl_objectives import LossModule
from rl_objectives.modules import AdditiveGaussianModule, EGreedyModule, OrnsteinUhlenbeckProcessModule
from rl_objectives.trainers import AnnealExploration, Trainer
from tdict import TensorDict
from tdict.nn import TensorDictModule, TensorDictSequential
from tdict.specs import Bounded, Categorical
from torch import nn


def batches(n_batches, n_envs, steps, seed=0):
    """A fake collector: ``n_batches`` rollouts of ``[n_envs, steps]``."""
    gen = torch.Generator().manual_seed(seed)
    return [
        TensorDict(
            {
                "obs": torch.randn(n_envs, steps, 3, generator=gen),
                "next": {"reward": torch.randn(n_envs, steps, generator=gen)},
            },
            batch_size=[n_envs, steps],
        )
        for _ in range(n_batches)
    ]


class TinyLoss(LossModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.convert_to_functional(TensorDictModule(nn.Linear(3, 1), in_keys=["obs"], out_keys=["v"]), "net")

    def forward(self, td):
        out = self.call_network("net", td.copy())
        return TensorDict(loss=(out["v"].squeeze(-1) - td["next", "reward"]).pow(2).mean())


def make_trainer(collector, total_frames, frame_skip=1, **kwargs):
    loss = TinyLoss()
    return Trainer(
        collector=collector,
        total_frames=total_frames,
        frame_skip=frame_skip,
        optim_steps_per_batch=1,
        loss_module=loss,
        optimizer=torch.optim.SGD(loss.parameters(), lr=0.01),
        **kwargs,
    )


def sb3_linear_schedule(num_timesteps, total_timesteps, initial, final, fraction):
    """SB3's DQN exploration rate: get_linear_fn(initial, final, fraction) at progress_remaining."""
    progress_remaining = 1.0 - num_timesteps / total_timesteps
    if (1.0 - progress_remaining) > fraction:
        return final
    return initial + (1.0 - progress_remaining) * (final - initial) / fraction


@pytest.mark.parametrize("n_envs, steps, frame_skip", [(1, 8, 1), (4, 5, 1), (3, 7, 2)])
def test_eps_follows_the_linear_schedule_over_collected_frames(n_envs, steps, frame_skip):
    n_batches = 12
    total = n_batches * n_envs * steps * frame_skip
    fraction = 0.5
    eps_init, eps_end = 1.0, 0.05
    egreedy = EGreedyModule(
        Categorical(2), eps_init=eps_init, eps_end=eps_end, annealing_num_steps=int(fraction * total)
    )
    # a warm-up of three batches: annealing runs from the first batch on, as SB3's (learning_starts)
    trainer = make_trainer(
        batches(n_batches, n_envs, steps),
        total,
        frame_skip=frame_skip,
        init_random_frames=3 * n_envs * steps * frame_skip,
    )
    AnnealExploration(egreedy).register(trainer)
    seen = []
    trainer.register_op("pre_steps_log", lambda batch: seen.append((trainer.collected_frames, float(egreedy.eps))))
    trainer.train()

    frames = [f for f, _ in seen]
    assert frames == [(i + 1) * n_envs * steps * frame_skip for i in range(n_batches)]
    for f, eps in seen:
        closed_form = max(eps_end, eps_init - f * (eps_init - eps_end) / int(fraction * total))
        assert eps == pytest.approx(closed_form, abs=1e-6), f
        assert eps == pytest.approx(sb3_linear_schedule(f, total, eps_init, eps_end, fraction), abs=1e-6), f
    assert int(egreedy._anneal_count) == int(fraction * total) and float(egreedy.eps) == pytest.approx(eps_end)
    assert seen[n_batches // 2 - 1][1] == pytest.approx(eps_end) and seen[0][1] < eps_init  # reached mid-run
    assert trainer._optim_count == n_batches - 3


def test_every_annealed_module_of_a_policy_is_stepped_once():
    egreedy = EGreedyModule(Categorical(2), eps_init=0.9, eps_end=0.1, annealing_num_steps=400)
    gaussian = AdditiveGaussianModule(
        Bounded(-1.0, 1.0, shape=(1,)), sigma_init=2.0, sigma_end=0.5, annealing_num_steps=100
    )
    ou = OrnsteinUhlenbeckProcessModule(
        Bounded(-1.0, 1.0, shape=(1,)), eps_init=1.0, eps_end=0.0, annealing_num_steps=1000
    )
    policy = TensorDictSequential(TensorDictModule(nn.Linear(3, 1), in_keys=["obs"], out_keys=["action"]), gaussian)
    hook = AnnealExploration(policy, egreedy, gaussian, ou)  # gaussian twice: stepped once
    assert hook.modules == [gaussian, egreedy, ou]
    trainer = make_trainer(batches(3, 2, 10), 120, frame_skip=2)  # 40 frames per batch
    hook.register(trainer)
    trainer.train()
    assert trainer.collected_frames == 120
    assert float(egreedy.eps) == pytest.approx(0.9 - 120 * 0.8 / 400)
    assert float(gaussian.sigma) == pytest.approx(max(0.5, 2.0 - 120 * 1.5 / 100)) == 0.5
    assert float(ou.eps) == pytest.approx(1.0 - 120 / 1000)
    assert trainer.state_dict()["anneal_exploration"] == {
        "anneal_counts": [100, 120, 120]
    }  # capped at the schedule's end


def _annealed_run(total_frames, path=None, interval=10_000):
    egreedy = EGreedyModule(Categorical(3), eps_init=1.0, eps_end=0.02, annealing_num_steps=1000)
    trainer = make_trainer(batches(20, 4, 10), total_frames, save_trainer_file=path, save_trainer_interval=interval)
    AnnealExploration(egreedy).register(trainer)
    return trainer, egreedy


def test_the_annealing_counter_round_trips_through_the_trainer_checkpoint(tmp_path):
    path = tmp_path / "trainer.pt"
    trainer, egreedy = _annealed_run(400, path)
    trainer.train()
    assert trainer.state_dict()["anneal_exploration"] == {"anneal_counts": [400]}
    expected = 1.0 - 400 * 0.98 / 1000

    fresh, fresh_egreedy = _annealed_run(800)
    assert float(fresh_egreedy.eps) == 1.0 and int(fresh_egreedy._anneal_count) == 0
    fresh.load_from_file(path)
    assert int(fresh_egreedy._anneal_count) == 400 and float(fresh_egreedy.eps) == pytest.approx(expected)
    assert float(fresh_egreedy.eps) == float(egreedy.eps)
    fresh.train()  # resumes: 400 more frames anneal from where the checkpoint left off
    assert fresh.collected_frames == 800 and int(fresh_egreedy._anneal_count) == 800
    assert float(fresh_egreedy.eps) == pytest.approx(1.0 - 800 * 0.98 / 1000)

    # in-memory state_dict round trip, and the end of the schedule
    other, other_egreedy = _annealed_run(800)
    other.load_state_dict(fresh.state_dict())
    assert int(other_egreedy._anneal_count) == 800 and float(other_egreedy.eps) == float(fresh_egreedy.eps)
    hook = AnnealExploration(EGreedyModule(Categorical(2), eps_end=0.1, annealing_num_steps=50))
    hook.load_state_dict({"anneal_counts": [10_000]})
    assert hook.state_dict() == {"anneal_counts": [50]} and float(hook.modules[0].eps) == pytest.approx(0.1)


def test_errors_name_the_argument_and_change_nothing():
    egreedy = EGreedyModule(Categorical(2), annealing_num_steps=100)
    with pytest.raises(ValueError, match="at least one exploration module"):
        AnnealExploration()
    with pytest.raises(TypeError, match=r"modules\[1\] must be an annealed exploration module .* got Linear"):
        AnnealExploration(egreedy, nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"modules\[0\] .* got str"):
        AnnealExploration("eps")
    hook = AnnealExploration(egreedy)
    with pytest.raises(TypeError, match="AnnealExploration: expected the collected TensorDict batch .* got NoneType"):
        hook(None)
    egreedy.step(30)
    for bad, exc, match in [
        ({}, KeyError, "expected a mapping with 'anneal_counts'"),
        ({"anneal_counts": [1, 2]}, ValueError, "list of 1 ints"),
        ({"anneal_counts": [-1]}, ValueError, "non-negative ints"),
        ({"anneal_counts": [2.5]}, ValueError, "non-negative ints"),
    ]:
        with pytest.raises(exc, match=match):
            hook.load_state_dict(bad)
    assert hook.state_dict() == {"anneal_counts": [30]}
    # a name already taken in the trainer: nothing is registered
    trainer = make_trainer(batches(1, 1, 4), 4)
    AnnealExploration(egreedy).register(trainer)
    with pytest.raises(ValueError, match="already registered"):
        AnnealExploration(egreedy).register(trainer)
    trainer.train()
    assert int(egreedy._anneal_count) == 34  # stepped once per batch: the second hook never registered
