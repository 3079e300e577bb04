"""Parameter schedulers against hand-computed sequences."""

from __future__ import annotations

import pytest
import torch

from rl_replay import LazyTensorStorage, PrioritizedReplayBuffer, PrioritizedSampler
from rl_replay.schedulers import LambdaScheduler, LinearScheduler, SchedulerList, StepScheduler


def test_linear_scheduler_on_buffer_beta():
    rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.4, storage=LazyTensorStorage(10))
    s = LinearScheduler(rb, "beta", final_value=1.0, num_steps=3)
    got = []
    for _ in range(5):
        s.step()
        got.append(rb.sampler.beta)
    assert got == pytest.approx([0.6, 0.8, 1.0, 1.0, 1.0])


def test_step_scheduler_modes_and_bounds():
    sampler = PrioritizedSampler(10, alpha=0.8, beta=0.5)
    s = StepScheduler(sampler, "alpha", gamma=0.5, n_steps=2, min_value=0.15)
    got = []
    for _ in range(6):
        s.step()
        got.append(sampler.alpha)
    assert got == pytest.approx([0.8, 0.4, 0.4, 0.2, 0.2, 0.15])
    s2 = StepScheduler(sampler, "beta", gamma=0.2, mode="additive", max_value=1.0)
    for _ in range(4):
        s2.step()
    assert sampler.beta == pytest.approx(1.0)
    with pytest.raises(ValueError, match="mode"):
        StepScheduler(sampler, "beta", mode="exp")
    with pytest.raises(ValueError, match="no attribute 'gamma_x'"):
        LinearScheduler(sampler, "gamma_x", 1.0, 3)


def test_lambda_and_list_and_state_dict():
    sampler = PrioritizedSampler(10, alpha=0.6, beta=0.5)
    lin = LinearScheduler(sampler, "beta", 1.0, 5)
    lst = SchedulerList([lin, LambdaScheduler(sampler, "alpha", lambda n: 0.5**n)])
    lst.step()
    lst.step()
    assert sampler.beta == pytest.approx(0.7) and sampler.alpha == pytest.approx(0.15)
    state = lst.state_dict()
    sampler2 = PrioritizedSampler(10, alpha=0.15, beta=0.7)
    lst2 = SchedulerList(
        [LinearScheduler(sampler2, "beta", 1.0, 5), LambdaScheduler(sampler2, "alpha", lambda n: 0.5**n)]
    )
    lst2.load_state_dict(state)
    lst.step()
    lst2.step()
    assert sampler2.beta == pytest.approx(sampler.beta) and sampler2.alpha == pytest.approx(sampler.alpha)


def test_scheduling_alpha_reweights_stored_items_exactly():
    rb = PrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(4))
    rb.extend(torch.zeros(4))
    p = torch.tensor([1.0, 2.0, 3.0, 4.0])
    rb.update_priority(torch.arange(4), p)
    StepScheduler(rb, "alpha", gamma=0.5).step()
    expected = (p.double() + 1e-8) ** 0.5
    assert torch.allclose(rb.sampler._sum_tree[:4], expected, rtol=1e-12)
    assert rb.sampler._sum_tree.sum().item() == pytest.approx(expected.sum().item(), rel=1e-12)
    assert rb.sampler._min_tree.min().item() == pytest.approx(expected.min().item(), rel=1e-12)
