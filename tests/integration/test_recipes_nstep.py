"""n-step transitions of the off-policy recipes (examples/recipes/nstep.py, ``buffer.n_steps``):
against a hand loop over the raw steps, across batches, through a checkpoint, and in a DQN run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from tdict import TensorDict

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))

from recipes import dqn  # noqa: E402
from recipes.config import BufferConfig, CollectorConfig, EnvConfig, LoggerConfig, TrainConfig  # noqa: E402
from recipes.nstep import NStepTransitions  # noqa: E402

GAMMA, N, ENVS, T = 0.5, 3, 2, 12


def _steps(seed: int = 0, t: int = T) -> TensorDict:
    """``[ENVS, t]`` steps with a termination in env 0 and a truncation in env 1 (when ``t > 6``)."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(ENVS, t + 1, 2, generator=g)
    terminated = torch.zeros(ENVS, t, dtype=torch.bool)
    truncated = torch.zeros(ENVS, t, dtype=torch.bool)
    if t > 6:
        terminated[0, 4] = True
        truncated[1, 6] = True
    return TensorDict(
        observation=obs[:, :-1],
        action=torch.randn(ENVS, t, 1, generator=g),
        next=TensorDict(
            observation=obs[:, 1:],
            reward=torch.randn(ENVS, t, generator=g),
            done=terminated | truncated,
            terminated=terminated,
            batch_size=[ENVS, t],
        ),
        batch_size=[ENVS, t],
    )


def _hand(steps: TensorDict, count: int) -> dict:
    """The first ``count`` n-step transitions of each env, written out step by step."""
    out = {"reward": [], "next_obs": [], "terminated": [], "done": [], "k": []}
    for e in range(ENVS):
        rows = {key: [] for key in out}
        for t in range(count):
            ret, k = 0.0, 0
            while k < N:
                ret += GAMMA**k * float(steps["next", "reward"][e, t + k])
                k += 1
                if steps["next", "done"][e, t + k - 1]:
                    break
            end = t + k - 1
            rows["reward"].append(ret)
            rows["next_obs"].append(steps["next", "observation"][e, end])
            rows["terminated"].append(bool(steps["next", "terminated"][e, end]))
            rows["done"].append(bool(steps["next", "done"][e, end]))
            rows["k"].append(k)
        for key in out:
            out[key].append(rows[key])
    return out


def test_transitions_match_a_hand_loop_and_stop_at_terminations():
    steps = _steps()
    out = NStepTransitions(N, GAMMA)(steps.clone())
    assert out.batch_size == (ENVS, T - N)
    hand = _hand(steps, T - N)
    torch.testing.assert_close(out["next", "reward"], torch.tensor(hand["reward"]))
    torch.testing.assert_close(out["next", "observation"], torch.stack([torch.stack(r) for r in hand["next_obs"]]))
    assert out["next", "terminated"].tolist() == hand["terminated"]
    assert out["next", "done"].tolist() == hand["done"]
    assert out["steps_to_next_obs"].tolist() == hand["k"]
    # a window reaching the termination at t=4 of env 0 ends there, terminated: no bootstrap past it
    assert out["next", "terminated"][0, 2:5].tolist() == [True, True, True]
    assert out["steps_to_next_obs"][0, 2:5].tolist() == [3, 2, 1]
    # the truncation at t=6 of env 1 ends windows without terminating them: they bootstrap
    assert not out["next", "terminated"][1].any() and out["next", "done"][1, 4:7].all()
    torch.testing.assert_close(out["observation"], steps["observation"][:, : T - N])


def test_steps_carry_over_to_the_next_batch_and_through_a_checkpoint():
    steps = _steps(t=2 * T)
    whole = NStepTransitions(N, GAMMA)(steps.clone())
    first, second = steps[:, :T].clone(), steps[:, T:].clone()
    op = NStepTransitions(N, GAMMA)
    part1 = op(first)
    state = op.state_dict()
    assert set(state) == {"held", "batch_size"} and state["batch_size"] == [ENVS, N]

    def leaves(tree):
        return [x for v in tree.values() for x in (leaves(v) if isinstance(v, dict) else [v])]

    assert leaves(state["held"]) and all(isinstance(v, torch.Tensor) for v in leaves(state["held"]))
    restored = NStepTransitions(N, GAMMA)
    restored.load_state_dict(state)
    part2 = restored(second)
    assert part1.batch_size == (ENVS, T - N) and part2.batch_size == (ENVS, T)
    joined = torch.cat([part1["next", "reward"], part2["next", "reward"]], -1)
    torch.testing.assert_close(joined, whole["next", "reward"])
    torch.testing.assert_close(
        torch.cat([part1["steps_to_next_obs"], part2["steps_to_next_obs"]], -1), whole["steps_to_next_obs"]
    )
    empty = NStepTransitions(N, GAMMA)
    empty.load_state_dict({})
    assert empty.state_dict() == {}


def test_a_batch_shorter_than_the_window_stores_nothing_yet_and_missing_flags_are_named():
    op = NStepTransitions(N, GAMMA)
    assert op(_steps(t=2)).batch_size == (ENVS, 0)
    assert op(_steps(t=2)).batch_size == (ENVS, 1)  # 4 steps held: the first is complete
    with pytest.raises(KeyError, match="terminated"):
        NStepTransitions(N, GAMMA)(_steps().exclude(("next", "terminated")))


def test_dqn_run_with_n_step_transitions(tmp_path: Path):
    cfg = TrainConfig(
        algo=dqn.DQNConfig(gradient_steps=4, target_update_interval=100),
        env=EnvConfig(name="cartpole", num_envs=4, max_steps=50, eval_envs=2),
        collector=CollectorConfig(frames_per_batch=128, total_frames=512, init_random_frames=256),
        buffer=BufferConfig(n_steps=3),
        logger=LoggerConfig(backends=["csv"], eval_every=256, progress=False),
        runs_dir=str(tmp_path),
        name="nstep",
    )
    final = dqn.train(cfg)
    assert 0 < final <= 50
    state = torch.load(tmp_path / "nstep" / "checkpoint.pt", weights_only=True)
    held = state["n_step_transitions"]["held"]  # the last 3 steps of each of the 4 envs
    assert held["observation"].shape == (4, 3, 4) and held["next"]["reward"].shape == (4, 3)
