"""Train any recipe on any task with one command: a Hydra app over structured dataclass configs.

    python examples/train.py algo=sac env=pendulum
    python examples/train.py algo=ppo env=cartpole collector.frames_per_batch=2048 seed=3
    python examples/train.py -m algo=sac env=pendulum seed=0,1,2       # multirun over seeds
    hatch run train algo=dqn env=cartpole logger=wandb

Config groups (``--help`` lists every option): ``algo`` (one per recipe in ``examples/recipes/``),
``env`` (the tasks of ``recipes/envs.py``), ``collector`` (``sync``, ``multisync``, ``multiasync``),
``buffer`` (``uniform``, ``prioritized``, ``memmap``), ``logger`` (``default``: CSV and TensorBoard;
``csv``, ``wandb``, ``mlflow``). Fields left unset take the recipe's tuned value for the task. Each
run writes ``runs/<name>/`` (Hydra's own record of the command goes to ``runs/<name>/.hydra``); a
multirun writes one folder per job. ``conf/train.yaml`` sets the defaults and the folders.
"""

from __future__ import annotations

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from recipes import RECIPES
from recipes.config import BufferConfig, CollectorConfig, EnvConfig, LoggerConfig, TrainConfig
from recipes.envs import TASKS


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="base", node=TrainConfig)
    for name, recipe in RECIPES.items():
        cs.store(group="algo", name=name, node=recipe.Config)
    for name in TASKS:
        cs.store(group="env", name=name, node=EnvConfig(name=name))
    for kind in ("sync", "multisync", "multiasync"):
        cs.store(group="collector", name=kind, node=CollectorConfig(kind=kind))
    cs.store(group="buffer", name="uniform", node=BufferConfig())
    cs.store(group="buffer", name="prioritized", node=BufferConfig(prioritized=True))
    cs.store(group="buffer", name="memmap", node=BufferConfig(memmap=True))
    cs.store(group="logger", name="default", node=LoggerConfig())
    for backend in ("csv", "wandb", "mlflow"):
        cs.store(
            group="logger", name=backend, node=LoggerConfig(backends=["csv"] if backend == "csv" else ["csv", backend])
        )


register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg) -> float:
    app: TrainConfig = OmegaConf.to_object(cfg)  # typed dataclasses, interpolations resolved
    return RECIPES[app.algo.name].train(app)


if __name__ == "__main__":
    main()
