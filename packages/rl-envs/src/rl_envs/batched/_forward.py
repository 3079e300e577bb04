"""Reaching the sub-envs' own attributes and methods through a batched env.

``batched_env.name``, for a public name the batched env lacks and its (running) sub-envs have, is a
:class:`SubEnvAttribute`: iterating it gives each sub-env's value, calling it calls the method in
every sub-env (in its worker, for :class:`~rl_envs.ParallelEnv`) and returns the results in worker
order, and a further ``.attr`` follows the path inside the sub-envs (``env.nested.get_value()``).
Nothing is fetched until it is iterated, indexed or called.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SubEnvAttribute", "follow"]


def follow(obj: Any, path: tuple) -> Any:
    """``obj.path[0].path[1]...``."""
    for name in path:
        obj = getattr(obj, name)
    return obj


class SubEnvAttribute:
    """The attribute ``path`` of each sub-env of ``env`` (a batched env or an indexed view of one).

    Examples:
        >>> from rl_envs import PendulumEnv, SerialEnv
        >>> env = SerialEnv(2, PendulumEnv)
        >>> _ = env.reset()
        >>> [float(params["params", "g"]) for params in env.gen_params()]
        [10.0, 10.0]
        >>> env.close()
    """

    __slots__ = ("_env", "_path")

    def __init__(self, env: Any, path: tuple) -> None:
        self._env = env
        self._path = path

    def _values(self) -> list:
        return self._env._sub_env_values(self._path)

    def __iter__(self) -> Any:
        return iter(self._values())

    def __len__(self) -> int:
        return self._env.num_workers

    def __getitem__(self, index: Any) -> Any:
        return self._values()[index]

    def __getattr__(self, name: str) -> SubEnvAttribute:
        if name.startswith("_"):
            raise AttributeError(name)
        return SubEnvAttribute(self._env, (*self._path, name))

    def __call__(self, *args: Any, **kwargs: Any) -> list:
        """Calls the method in every sub-env; returns the results in worker order."""
        return self._env._sub_env_call(self._path, args, kwargs)

    def __repr__(self) -> str:
        return f"SubEnvAttribute({'.'.join(self._path)} of {type(self._env).__name__}, {self.__len__()} sub-envs)"
