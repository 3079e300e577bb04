"""Macro actions: MacroAction/TargetMacroAction (TorchRL's fields) and MacroPrimitiveTransform against stepping by hand."""

from __future__ import annotations

import pytest
import torch

from tdict import TensorDict
from rl_envs import PendulumEnv, StepCounter, TransformedEnv
from rl_envs.transforms import Compose, MacroAction, MacroPrimitive, MacroPrimitiveTransform, TargetMacroAction


def test_target_macro_moves_then_settles():
    macro = TargetMacroAction(
        mode=torch.tensor([1, 1, 0]),
        steps=torch.tensor([4, 0, 2]),
        settle_steps=torch.tensor([1, 2, 1]),
        target=torch.tensor([[2.0], [-1.0], [5.0]]),
        batch_size=[3],
    )
    start = torch.tensor([[0.0], [1.0], [3.0]])
    actions = torch.stack([macro.action(k, None, None, start) for k in range(5)], 1)[..., 0]
    # MOVE: linear over `steps`, then held; steps=0 jumps; WAIT holds the start
    assert actions.tolist() == [[0.5, 1.0, 1.5, 2.0, 2.0], [-1.0] * 5, [3.0] * 5]
    finished = torch.stack([macro.finished(k, None, None) for k in range(5)], 1)
    assert macro.duration.tolist() == [5, 2, 3]
    assert finished.tolist() == [[False] * 4 + [True], [False] + [True] * 4, [False, False, True, True, True]]


def test_wait_macro():
    env = PendulumEnv(batch_size=[2])
    macro = MacroAction.from_flat(torch.tensor([[-1.0], [1.0]]), TensorDict(batch_size=[2]), env, max_duration=5)
    assert macro.mode.tolist() == [int(MacroPrimitive.WAIT)] * 2 and macro.duration.tolist() == [1, 5]
    assert MacroAction.flat_size(env.action_spec) == 1


def test_from_flat_maps_onto_the_bounds():
    env = PendulumEnv(batch_size=[3])  # torque in [-2, 2]
    flat = torch.tensor([[-1.0, -1.0, -1.0], [0.0, 1.0, 1.0], [1.0, 3.0, 0.0]])
    macro = TargetMacroAction.from_flat(flat, TensorDict(batch_size=[3]), env, max_duration=9)
    assert macro.target[:, 0].tolist() == [-2.0, 0.0, 2.0]
    assert macro.duration.tolist() == [1, 9, 5]  # 1 + round((f + 1) / 2 * 8)
    assert macro.steps.tolist() == [0, 9, 5]  # the moving fraction (clamped to [-1, 1]) of the duration
    assert macro.settle_steps.tolist() == [1, 0, 0] and macro.mode.tolist() == [int(MacroPrimitive.MOVE)] * 3


def _policy(flat):
    return lambda td: td.set("action", flat.clone())


def test_transform_equals_stepping_by_hand():
    """The summed reward and the last observation equal those of the low-level steps taken by hand."""
    flat = torch.tensor([[0.5, 0.0, 2 / 3], [-1.0, -1.0, -1.0]])  # 6 steps, ramp to 1.0 in 3; one step of -2.0
    env = TransformedEnv(
        PendulumEnv(batch_size=[2], seed=3), MacroPrimitiveTransform(TargetMacroAction, max_duration=7)
    )
    assert env.action_spec.shape == (2, 3)
    out = env.step(env.reset().set("action", flat))["next"]
    by_hand = PendulumEnv(batch_size=[2], seed=3)
    td = by_hand.reset()
    start = torch.zeros(2, 1)
    macro = TargetMacroAction.from_flat(flat, td, by_hand, 7)
    assert macro.duration.tolist() == [6, 1] and macro.steps.tolist() == [3, 0]
    rewards, observations = torch.zeros(2), []
    for k in range(6):
        nxt = by_hand.step(td.set("action", macro.action(k, td, by_hand, start)))["next"]
        live = torch.tensor([True, k == 0])
        rewards += torch.where(live, nxt["reward"], 0.0)
        observations.append(nxt["observation"])
        td = nxt
    torch.testing.assert_close(out["reward"], rewards)
    torch.testing.assert_close(out["observation"][0], observations[-1][0])
    torch.testing.assert_close(out["observation"][1], observations[0][1])  # its macro ended after one step


def test_episode_end_stops_the_macro():
    env = TransformedEnv(
        PendulumEnv(seed=0),
        Compose(StepCounter(max_steps=3), MacroPrimitiveTransform(TargetMacroAction, max_duration=10)),
    )
    td = env.step(env.reset().set("action", torch.tensor([0.0, -1.0, 1.0])))
    assert int(td["next", "step_count"]) == 3 and bool(td["next", "truncated"])


def test_rollout_and_reset_restart_the_ramp():
    transform = MacroPrimitiveTransform(TargetMacroAction, max_duration=4)
    env = TransformedEnv(PendulumEnv(batch_size=[2], seed=0), transform)
    rollout = env.rollout(3, _policy(torch.tensor([[1.0, 1.0, 1.0]] * 2)))
    assert rollout.batch_size == (2, 3)
    assert transform._last is not None and torch.equal(transform._last, torch.full((2, 1), 2.0))
    env.reset(TensorDict({"_reset": torch.tensor([True, False])}, batch_size=[2]))
    assert transform._last[:, 0].tolist() == [0.0, 2.0]


class _GoTo(TargetMacroAction):
    """Pendulum test primitive (closed loop): push with full torque until the angular speed reaches the target."""

    @classmethod
    def flat_size(cls, action_spec):
        return 1

    @classmethod
    def from_flat(cls, flat, tensordict, env, max_duration):
        steps = torch.full(flat.shape[:-1], max_duration)
        return cls(
            mode=torch.ones_like(steps),
            steps=steps,
            settle_steps=torch.zeros_like(steps),
            target=flat * 4,
            batch_size=flat.shape[:-1],
        )

    def action(self, step, tensordict, env, start):
        return torch.sign(self.target - tensordict["observation"][..., 2:]) * 2.0

    def finished(self, step, tensordict, env):
        return (self.duration <= step + 1) | (tensordict["observation"][..., 2] >= self.target[..., 0])


def test_target_macro_stops_at_the_target():
    from tdict import tensorclass

    goto = tensorclass(_GoTo)
    env = TransformedEnv(PendulumEnv(seed=0), Compose(StepCounter(), MacroPrimitiveTransform(goto, max_duration=50)))
    td = env.step(env.reset().set("action", torch.tensor([0.5])))
    steps = int(td["next", "step_count"])
    assert 1 < steps < 50 and float(td["next", "observation"][2]) >= 2.0


def test_fixed_duration():
    transform = MacroPrimitiveTransform(TargetMacroAction, max_duration=4, fixed_duration=True)
    env = TransformedEnv(PendulumEnv(seed=0), Compose(StepCounter(), transform))
    assert env.action_spec.shape == (2,)  # [torque, moving fraction]: no duration
    td = env.step(env.reset().set("action", torch.tensor([1.0, -1.0])))
    assert int(td["next", "step_count"]) == 4 and td["action"].shape == (2,)


def test_discrete_low_level_actions_are_refused():
    from rl_envs import CartPoleEnv

    with pytest.raises(TypeError, match="low-level action 'action' must be continuous"):
        TransformedEnv(CartPoleEnv(), MacroPrimitiveTransform()).action_spec


def test_bad_macro_type():
    with pytest.raises(TypeError, match="macro_type must be a macro action class with flat_size"):
        MacroPrimitiveTransform(int)
    with pytest.raises(ValueError, match="max_duration must be a positive int, got 0"):
        MacroPrimitiveTransform(TargetMacroAction, max_duration=0)
    with pytest.raises(RuntimeError, match="env"):
        MacroPrimitiveTransform()(TensorDict())
