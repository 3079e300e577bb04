"""The demo (``hatch run demo``): soft actor-critic learns the pendulum swing-up through the shared Trainer.

It runs the SAC recipe (``examples/recipes/sac.py``, readable top to bottom) with its pendulum
preset, without Hydra, so that it needs only torch, the RL packages, tqdm, matplotlib and
tensorboard:

- ``rl_envs``: 8 ``PendulumEnv`` s vectorised over a batch dim, a 200-step time limit;
- ``rl_collect``: a ``Collector`` running the policy (random actions during the warm-up);
- ``rl_replay``: a ``ReplayBuffer`` of transitions;
- ``rl_objectives``: a tanh-Gaussian actor, twin Q-networks, ``SACLoss`` with a learnt temperature
  and ``SoftUpdate`` target critics, trained by ``rl_objectives.trainers.Trainer`` with its hooks
  (replay buffer, target updates, weight sync, whole-episode evaluation, a progress bar).

Every 2,000 frames the deterministic policy plays one whole episode in each of 10 fresh pendulums
(a random policy scores about -1200; -200 or better means swung up and held). Everything goes to
``runs/<name>/``: ``config.json``, ``scalars/*.csv``, ``tensorboard/``, ``checkpoint.pt`` and
``learning_curve.png``; the last line printed is ``final eval return X``.

Run: ``python examples/sac_pendulum.py [--seed 0] [--frames 12000] [--name NAME] [--save-every N]
[--resume] [--quick]``; ``--quick`` is a 1,024-frame smoke test. Every recipe and task:
``python examples/train.py algo=... env=...``.
"""

from __future__ import annotations

import argparse

from recipes import sac
from recipes.config import BufferConfig, CollectorConfig, EnvConfig, LoggerConfig, TrainConfig


def parse_config() -> TrainConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--frames", type=int, default=None, help="frames to collect (preset: 12,000)")
    parser.add_argument("--name", default="", help="run folder runs/<name>/ (default: sac_pendulum_seed<seed>_<time>)")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--save-every", type=int, default=None, help="frames between checkpoints (default: at the end)")
    parser.add_argument("--resume", action="store_true", help="continue runs/<name>/ from its checkpoint")
    parser.add_argument("--quick", action="store_true", help="a 1,024-frame smoke test")
    # finer settings (the pendulum preset's values when not given)
    parser.add_argument("--frames-per-batch", type=int, default=None)
    parser.add_argument("--init-random-frames", type=int, default=None)
    parser.add_argument("--utd", type=float, default=None, help="gradient steps per collected frame")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--eval-envs", type=int, default=10)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args()
    if args.resume and not args.name:
        parser.error("--resume continues a named run: give --name")
    if args.quick:
        args.frames, args.init_random_frames, args.eval_every, args.eval_envs = 1_024, 256, 512, 2
    return TrainConfig(
        algo=sac.SACConfig(utd=args.utd),
        env=EnvConfig(name="pendulum", eval_envs=args.eval_envs),
        collector=CollectorConfig(
            frames_per_batch=args.frames_per_batch, total_frames=args.frames, init_random_frames=args.init_random_frames
        ),
        buffer=BufferConfig(batch_size=args.batch_size),
        logger=LoggerConfig(eval_every=args.eval_every, save_every=args.save_every, progress=not args.no_progress),
        seed=args.seed,
        name=args.name or "",
        runs_dir=args.runs_dir,
        resume=args.resume,
    )


if __name__ == "__main__":
    sac.train(parse_config())
