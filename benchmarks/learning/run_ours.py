"""One learning run of our recipe, recorded for the learning benchmark (see compare.py).

Runs ``examples/recipes/<algo>.py`` through the Hydra config of ``examples/train.py`` with the
task's overrides, on one torch thread, and writes a JSON record: at every evaluation (10 whole
episodes, deterministic policy) the frames so far, the training CPU and wall-clock seconds so far
(the evaluations' own time left out) and the mean return; then the final return, over
``FINAL_EPISODES`` episodes of the task's Gymnasium env from the start states SB3's run gets
(final_eval.py; the recipe's own final evaluation is kept as ``recipe_final_return``).

    python benchmarks/learning/run_ours.py sac-pendulum --seed 0 --out /tmp/ours.json [--best]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from final_eval import mean_return  # noqa: E402
from rl_envs import ExplorationType, set_exploration_type  # noqa: E402
from settings import FINAL_EPISODES, TASKS  # noqa: E402
from tdict import TensorDict  # noqa: E402

import recipes.common as common  # noqa: E402
import train as train_app  # noqa: E402  (registers the config groups)


class Clock:
    """Training time: process CPU and wall-clock seconds since start, evaluations excluded."""

    def __init__(self) -> None:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        self.eval_cpu = self.eval_wall = 0.0

    def now(self) -> tuple[float, float]:
        return time.process_time() - self.cpu0 - self.eval_cpu, time.perf_counter() - self.wall0 - self.eval_wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--frames", type=int, default=None, help="a shorter run than the task's (smoke tests)")
    parser.add_argument("--best", action="store_true", help="our recipe's own preset instead of RL-zoo's settings")
    parser.add_argument("--runs-dir", default="/tmp/rl-learning-bench")
    parser.add_argument("--set", nargs="*", default=[], help="further Hydra overrides (trying a preset)")
    args = parser.parse_args()
    task = TASKS[args.task]
    if args.frames:
        task = dataclasses.replace(task, frames=args.frames, eval_every=min(task.eval_every, args.frames))
    torch.set_num_threads(1)

    clock, points = Clock(), []

    class TimedEval(common.LogValidationReward):
        def __call__(self, batch=None):
            c, w = time.process_time(), time.perf_counter()
            try:
                return super().__call__(batch)
            finally:
                clock.eval_cpu += time.process_time() - c
                clock.eval_wall += time.perf_counter() - w

    log_scalar = common.Loggers.log_scalar

    def recording_log_scalar(self, name, value, step=None):
        if name == common.EVAL_KEY:
            cpu, wall = clock.now()
            points.append({"frames": step, "cpu_s": cpu, "wall_s": wall, "return": float(value)})
        log_scalar(self, name, value, step=step)

    resume_if_asked = common.resume_if_asked

    def start_clock(run, trainer):  # the recipe calls this right before training: setup is not counted
        resume_if_asked(run, trainer)
        clock.__init__()

    finish, stopped = None, {}

    def stop_clock(run, trainer, policy, *args, **kwargs):  # training is over: the final evaluations are not counted
        stopped["cpu"], stopped["wall"] = clock.now()
        run.cfg.env.eval_envs = FINAL_EPISODES
        if getattr(run.cfg.algo, "normalize", False):
            raise ValueError("run_ours: the shared final evaluation feeds raw observations; algo.normalize must be off")
        stopped["final"] = mean_return(gym_actions(policy, task.gym_id), task.gym_id)
        return finish(run, trainer, policy, *args, **kwargs)

    common.LogValidationReward = TimedEval
    common.Loggers.log_scalar = recording_log_scalar
    recipe = train_app.RECIPES[task.algo]
    recipe.resume_if_asked, finish, recipe.finish = start_clock, recipe.finish, stop_clock

    name = f"{args.task}-{'best' if args.best else 'zoo'}-s{args.seed}-{int(time.time())}"
    recipe_final = recipe.train(compose_config(task, args.seed, args.best, args.runs_dir, name, extra=tuple(args.set)))
    cpu, wall = stopped["cpu"], stopped["wall"]
    record = {
        "lib": "ours-best" if args.best else "ours",
        "task": args.task,
        "seed": args.seed,
        "points": points,
        "final_return": stopped["final"],
        "recipe_final_return": recipe_final,
        "train_cpu_s": cpu,
        "train_wall_s": wall,
        "frames": task.frames,
    }
    Path(args.out).write_text(json.dumps(record) + "\n")


def gym_actions(policy, gym_id: str):
    """``policy`` (a TensorDict module reading ``"observation"``) as a function from a Gymnasium
    observation to a Gymnasium action: deterministic, an index for a discrete action space."""
    discrete = isinstance(gym.make(gym_id).action_space, gym.spaces.Discrete)

    def act(obs):
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            action = policy(TensorDict(observation=torch.as_tensor(obs, dtype=torch.float32)))["action"]
        return int(action.argmax()) if discrete else action.numpy()

    return act


def compose_config(task, seed: int, best: bool, runs_dir: str, name: str, extra: tuple = ()) -> object:
    """The recipe's resolved Hydra config for ``task`` (RL-zoo's settings, or our preset with ``best``)."""
    overrides = [
        f"algo={task.algo}",
        f"env={task.env}",
        f"seed={seed}",
        f"runs_dir={runs_dir}",
        f"name={name}",
        *common_overrides(task, best),
        *extra,
    ]
    with initialize_config_dir(config_dir=str(REPO / "examples" / "conf"), version_base="1.3"):
        return OmegaConf.to_object(compose(config_name="train", overrides=overrides))


def common_overrides(task, best: bool) -> list[str]:
    frames = [f"collector.total_frames={task.frames}", f"logger.eval_every={task.eval_every}"]
    evals = ["env.eval_envs=10", "logger.backends=[csv]", "logger.progress=false"]
    return [*frames, *evals, *task.ours_best] if best else [*frames, *evals, *task.ours]


if __name__ == "__main__":
    main()
