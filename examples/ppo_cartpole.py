"""PPO on the cart-pole, on-policy with the whole stack.

- ``rl_envs``: 16 vectorised ``CartPoleEnv`` s with a 500-step time limit (``StepCounter``);
- ``rl_collect``: a ``Collector`` gathering 16 x 128 steps per batch with the current policy;
- ``rl_objectives``: a categorical ``ProbabilisticActor``, a ``ValueOperator`` critic, ``GAE`` for the
  advantages (computed once per batch) and ``ClipPPOLoss``;
- ``rl_replay``: a ``ReplayBuffer`` with ``SamplerWithoutReplacement`` to iterate minibatches.

Every 10 batches a line reports the mean length of the episodes that ended in the batch and the
return of the greedy policy over one episode of each env (500 is the maximum; a random policy
scores about 22). The default run (150,000 frames) takes about ten seconds on two CPU cores.
``--quick`` runs 4,096 frames, as a smoke test.

Run: ``python examples/ppo_cartpole.py [--frames 150000] [--seed 0] [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from rl_collect import Collector
from rl_envs import CartPoleEnv, StepCounter, TransformedEnv
from rl_objectives import ClipPPOLoss, ValueEstimators
from rl_objectives.modules import MLP, ProbabilisticActor, ValueOperator
from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from tdict.nn import InteractionType, TensorDictModule, set_interaction_type

N_ENVS, STEPS, EPOCHS, MINIBATCH = 16, 128, 4, 256


def make_env() -> TransformedEnv:
    return TransformedEnv(CartPoleEnv(batch_size=[N_ENVS], categorical_action_encoding=True), StepCounter(500))


def make_networks() -> tuple[ProbabilisticActor, ValueOperator]:
    logits = TensorDictModule(
        MLP(in_features=4, out_features=2, num_cells=[64, 64]), in_keys=["observation"], out_keys=["logits"]
    )
    actor = ProbabilisticActor(
        logits, in_keys=["logits"], distribution_class=torch.distributions.Categorical, return_log_prob=True
    )
    critic = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[64, 64]), in_keys=["observation"])
    return actor, critic


@torch.no_grad()
def evaluate(actor: ProbabilisticActor) -> float:
    """Mean return of the greedy policy over one episode of each of the 16 envs (500 at most)."""
    with set_interaction_type(InteractionType.DETERMINISTIC):
        rollout = make_env().rollout(500, actor, break_when_all_done=True, break_when_any_done=False)
    return float((rollout["next", "reward"] * ~_after_end(rollout)).sum(-1).mean())


def _after_end(rollout) -> torch.Tensor:
    """Steps after an env's first done (the rollout goes on until every env is done)."""
    done = rollout["next", "done"].int()
    return (done.cumsum(-1) - done).bool()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=150_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="4,096 frames: a smoke test")
    args = ap.parse_args()
    if args.quick:
        args.frames = 4_096
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    actor, critic = make_networks()
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.01, normalize_advantage=True)
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.95)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    frames_per_batch = N_ENVS * STEPS
    buffer = ReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch), sampler=SamplerWithoutReplacement(), batch_size=MINIBATCH
    )
    collector = Collector(make_env, actor, frames_per_batch=frames_per_batch, total_frames=args.frames)

    print(f"PPO on CartPoleEnv x {N_ENVS}: {args.frames} frames")
    start, frames, last = time.perf_counter(), 0, float("nan")
    for batch in collector:  # [N_ENVS, STEPS], time last
        frames += batch.numel()
        with torch.no_grad():
            loss.value_estimator(batch)  # advantage and value target over the whole rollout
        ended = batch["next", "done"]
        if ended.any():
            last = float(batch["next", "step_count"][ended].float().mean())
        buffer.empty()
        buffer.extend(batch.reshape(-1))
        for _ in range(EPOCHS):
            for _ in range(frames_per_batch // MINIBATCH):
                out = loss(buffer.sample())
                optim.zero_grad()
                (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 1.0)
                optim.step()
        collector.update_policy_weights_()
        if frames % (10 * frames_per_batch) < frames_per_batch:
            print(
                f"frames {frames:7d}  episodes ending in the batch: mean length {last:6.1f}  "
                f"greedy return {evaluate(actor):6.1f}  {time.perf_counter() - start:4.0f} s"
            )
    collector.shutdown()
    print(f"final greedy return {evaluate(actor):.1f} after {frames} frames ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
