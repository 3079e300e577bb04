"""One learning run of Stable-Baselines3, recorded as run_ours.py records ours (see compare.py).

The task's RL-zoo hyper-parameters, one torch thread, SB3's own Gymnasium env; every
``eval_every`` env steps a callback runs ``evaluate_policy`` (10 episodes, deterministic) and
records the frames, the training CPU and wall-clock seconds so far (the evaluations' own time left
out) and the mean return; the final return is final_eval.py's (the start states ours gets).

    python benchmarks/learning/run_sb3.py sac-pendulum --seed 0 --out /tmp/sb3.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from final_eval import mean_return  # noqa: E402
from settings import TASKS  # noqa: E402
from stable_baselines3 import DQN, PPO, SAC, TD3  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.noise import NormalActionNoise  # noqa: E402

CLASSES = {"sac": SAC, "td3": TD3, "ppo": PPO, "dqn": DQN}


def _linear(value: str):
    start = float(value.split("_", 1)[1])
    return lambda progress_remaining: progress_remaining * start  # RL-zoo's lin_<x>


class Recorder(BaseCallback):
    def __init__(self, eval_env, eval_every: int) -> None:
        super().__init__()
        self.eval_env, self.eval_every = eval_env, eval_every
        self.points: list = []
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        self.eval_cpu = self.eval_wall = 0.0
        self.next_eval = eval_every

    def clock(self) -> tuple[float, float]:
        return time.process_time() - self.cpu0 - self.eval_cpu, time.perf_counter() - self.wall0 - self.eval_wall

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            self.next_eval += self.eval_every
            cpu, wall = self.clock()
            c, w = time.process_time(), time.perf_counter()
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=10, deterministic=True)
            self.eval_cpu += time.process_time() - c
            self.eval_wall += time.perf_counter() - w
            self.points.append({"frames": self.num_timesteps, "cpu_s": cpu, "wall_s": wall, "return": float(mean)})
        return True


def make_model(task, seed: int, **overrides):
    """SB3's model for ``task`` with RL-zoo's settings (``lin_`` schedules, TD3's N(0, 0.1) action
    noise) and ``overrides`` of its constructor arguments."""
    kwargs = {**task.sb3, **overrides}
    for key in ("learning_rate", "clip_range"):
        if isinstance(kwargs.get(key), str):
            kwargs[key] = _linear(kwargs[key])
    env = make_vec_env(task.gym_id, n_envs=task.n_envs, seed=seed)
    if task.algo == "td3":
        n = env.action_space.shape[-1]
        kwargs["action_noise"] = NormalActionNoise(mean=torch.zeros(n).numpy(), sigma=0.1 * torch.ones(n).numpy())
    return CLASSES[task.algo]("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--frames", type=int, default=None, help="a shorter run than the task's (smoke tests)")
    args = parser.parse_args()
    task = TASKS[args.task]
    if args.frames:
        task = dataclasses.replace(task, frames=args.frames, eval_every=min(task.eval_every, args.frames))
    torch.set_num_threads(1)

    model = make_model(task, args.seed)
    eval_env = Monitor(gym.make(task.gym_id))
    eval_env.reset(seed=args.seed + 1)
    recorder = Recorder(eval_env, task.eval_every)
    recorder.cpu0, recorder.wall0 = time.process_time(), time.perf_counter()
    model.learn(total_timesteps=task.frames, callback=recorder)
    cpu, wall = recorder.clock()
    final = mean_return(lambda obs: model.predict(obs, deterministic=True)[0], task.gym_id)
    record = {
        "lib": "sb3",
        "task": args.task,
        "seed": args.seed,
        "points": recorder.points,
        "final_return": float(final),
        "train_cpu_s": cpu,
        "train_wall_s": wall,
        "frames": task.frames,
    }
    Path(args.out).write_text(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
