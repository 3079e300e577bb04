"""Soft actor-critic on the pendulum, with every piece of the stack: ``hatch run demo``.

- ``rl_envs``: 8 vectorised ``PendulumEnv`` s with a 200-step time limit (``StepCounter``);
- ``rl_collect``: a ``Collector`` that runs the policy (random actions for the first frames);
- ``rl_replay``: a ``ReplayBuffer`` over a ``LazyTensorStorage`` of transitions;
- ``rl_objectives``: a tanh-Gaussian ``ProbabilisticActor``, twin Q-networks, ``SACLoss`` with a
  learnt temperature and ``SoftUpdate`` of the target critics.

Every ``--eval-every`` frames the deterministic policy runs 8 fresh episodes; the line printed is
their mean return (a random policy scores about -1200; about -200 means the pendulum is swung up
and held). The default run (20,000 frames, one gradient step per frame) takes a few minutes on two
CPU cores. ``--quick`` runs 1,536 frames, as a smoke test.

Run: ``python examples/sac_pendulum.py [--frames 20000] [--seed 0] [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from rl_collect import Collector
from rl_envs import PendulumEnv, StepCounter, TransformedEnv
from rl_objectives import SACLoss, SoftUpdate
from rl_objectives.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from rl_replay import LazyTensorStorage, ReplayBuffer
from tdict.nn import InteractionType, NormalParamExtractor, TensorDictModule, set_interaction_type

N_ENVS, EPISODE = 8, 200


def make_env() -> TransformedEnv:
    return TransformedEnv(PendulumEnv(batch_size=[N_ENVS]), StepCounter(EPISODE))


def make_networks(env: TransformedEnv) -> tuple[ProbabilisticActor, ValueOperator]:
    spec = env.action_spec
    act_dim = spec.shape[-1]
    body = nn.Sequential(MLP(in_features=3, out_features=2 * act_dim, num_cells=[64, 64], activation_class=nn.ReLU), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(body, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.low[0], "high": spec.high[0]},
    )
    qnet = ValueOperator(MLP(in_features=3 + act_dim, out_features=1, num_cells=[64, 64], activation_class=nn.ReLU), in_keys=["observation", "action"])
    return actor, qnet


@torch.no_grad()
def evaluate(actor: ProbabilisticActor) -> float:
    """Mean return of the deterministic policy over one full episode of each of the 8 envs."""
    env = make_env()
    with set_interaction_type(InteractionType.DETERMINISTIC):
        rollout = env.rollout(EPISODE, actor)
    return float(rollout["next", "reward"].sum(-1).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=20_000)
    ap.add_argument("--eval-every", type=int, default=4_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="1,536 frames: a smoke test")
    args = ap.parse_args()
    if args.quick:
        args.frames, args.eval_every = 1_536, 1_024
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    env = make_env()
    env.set_seed(args.seed)
    actor, qnet = make_networks(env)
    loss = SACLoss(actor, qnet, num_qvalue_nets=2, action_spec=env.action_spec)
    updater = SoftUpdate(loss, tau=0.005)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    buffer = ReplayBuffer(storage=LazyTensorStorage(args.frames), batch_size=256)
    collector = Collector(make_env, actor, frames_per_batch=64, total_frames=args.frames, init_random_frames=1_000)

    print(f"SAC on PendulumEnv x {N_ENVS}: {args.frames} frames; random policy return {evaluate(actor):.0f}")
    start, frames, next_eval = time.perf_counter(), 0, args.eval_every
    for batch in collector:
        # the policy's distribution parameters are not needed for SAC: store transitions only
        buffer.extend(batch.reshape(-1).exclude("loc", "scale"))
        frames += batch.numel()
        if frames < 1_000:
            continue  # warm-up: random actions only
        for _ in range(batch.numel()):  # one gradient step per collected frame
            losses = loss(buffer.sample())
            optim.zero_grad()
            (losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]).backward()
            optim.step()
            updater.step()
        collector.update_policy_weights_()
        if frames >= next_eval:
            next_eval += args.eval_every
            print(
                f"frames {frames:6d}  eval return {evaluate(actor):8.1f}  alpha {losses['alpha'].item():.3f}  "
                f"q-loss {losses['loss_qvalue'].detach().item():.3f}  {time.perf_counter() - start:5.0f} s"
            )
    collector.shutdown()
    print(f"final eval return {evaluate(actor):.1f} after {frames} frames ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
