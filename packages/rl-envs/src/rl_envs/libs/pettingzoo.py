"""PettingZoo wrappers: PettingZooWrapper (wraps an AEC or parallel env), PettingZooEnv (builds one by task).

pettingzoo is imported only when these classes are used (``pip install rl-envs[pettingzoo]``).
Names and semantics follow TorchRL 0.14 (``torchrl.envs.PettingZooEnv``/``PettingZooWrapper``);
the differences are listed in :class:`PettingZooWrapper`'s docstring.

Layout of one step (``group`` is a key of the group map, ``n`` its number of agents)::

    (group, "observation")   [n, *obs_shape]  (a sub-TensorDict for Dict observation spaces)
    (group, "action")        [n, *act_shape]
    (group, "action_mask")   [n, n_actions]   bool, only for envs that report an action mask
    (group, "mask")          [n]              bool, only with ``use_mask=True``
    (group, "info", key)     [n, *shape]      float32, the numeric entries of the info dicts
    (group, "reward")        [n]              float32, under "next"
    (group, "done" | "terminated" | "truncated")   [n]   bool
    "done" | "terminated" | "truncated"            []    bool, aggregated over all agents
    "state"                  [*state_shape]   only with ``return_state=True``
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tdict import TensorDict, TensorDictBase
from tdict.specs import (
    Categorical,
    Composite,
    OneHot,
    Stacked,
    StackedComposite,
    Unbounded,
)

from ..env_base import EnvBase
from ._marl import MarlGroupMapType, check_marl_grouping
from ._marl import group_by_prefix as _default_group_map

__all__ = ["MarlGroupMapType", "PettingZooEnv", "PettingZooWrapper", "check_marl_grouping"]

_new_td = TensorDict.unchecked
# task families searched by PettingZooEnv, in order (the MPE tasks moved from pettingzoo.mpe to mpe2)
_FAMILIES = ("mpe2", "pettingzoo.classic", "pettingzoo.butterfly", "pettingzoo.sisl", "pettingzoo.atari")


def _pettingzoo() -> Any:
    try:
        import pettingzoo
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "PettingZooEnv/PettingZooWrapper need pettingzoo, which is not installed: pip install rl-envs[pettingzoo]"
        ) from err
    return pettingzoo


# ---------------------------------------------------------------------------------------------- wrapper
def _stack_group(specs: list, group: str, what: str, agents: list) -> Any:
    stacked = torch.stack(specs, 0)
    if isinstance(stacked, (Stacked, StackedComposite)):
        # the spaces' values are wrong for a group (a configuration error), not the argument's type
        raise ValueError(  # noqa: TRY004
            f"PettingZooWrapper: the agents {agents} of group {group!r} have different {what} spaces; "
            f"group agents with identical spaces (group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT always works)."
        )
    return stacked


def _numeric(value: Any) -> torch.Tensor | None:
    """An info entry as a float32 tensor, or None when it is not numeric (strings, objects)."""
    import numpy as np

    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        return None
    return torch.as_tensor(arr.astype(np.float32))


class PettingZooWrapper(EnvBase):
    """Wraps a PettingZoo env (AEC or parallel API) as a multi-agent env of this library.

    Agents are split into groups (``group_map``); each group is a sub-TensorDict with batch
    ``[n_agents_in_group]`` holding the agents' observation, action, reward and
    done/terminated/truncated flags (see the module docstring for every key). The root holds
    ``done``/``terminated``/``truncated`` aggregated over all agents: ``any`` of the agents' flags
    when ``done_on_any`` is true, else ``all`` (each flag aggregated on its own, as TorchRL does).

    - **Parallel API**: every live agent acts at once with its group's ``action`` row. Agents
      that are gone (no longer in ``env.agents``) are not sent an action.
    - **AEC API**: only the agent whose turn it is (``env.agent_selection``) acts; the other
      rows of the action are ignored. An agent that is already terminated or truncated is
      stepped with ``None`` (PettingZoo's "dead step"). Observations of every live agent are
      refreshed after each step (``env.observe``) and rewards are ``env.rewards`` (this step's
      rewards, so their sum over an episode is the return).
    - ``"mask"`` (``use_mask=True``) marks the agents that act at the next step: the live
      agents for the parallel API, the agent whose turn it is for the AEC API.
    - ``"action_mask"``: when an observation is a Dict with an ``"action_mask"`` entry (the
      classic games) or the info dicts hold one, it is read into ``(group, "action_mask")``
      (bool) for the agents that act next (all True for the others), and the action spec's
      mask is updated in place, so random actions drawn from the spec are legal.
    - Agents that leave the game keep their last observation, their done flags stay True,
      their reward is 0 and (with ``use_mask``) their mask is False.
    - Info dicts: their numeric entries at construction time go to ``(group, "info", key)``
      as float32 (a zero when an agent's info lacks the key).

    Differences from TorchRL: reward and done flags have shape ``[n_agents]`` (TorchRL:
    ``[n_agents, 1]``) and the root flags shape ``[]`` (TorchRL: ``[1]``); ``set_seed(seed)``
    seeds the *next* reset (as :class:`~rl_envs.libs.gymnasium.GymWrapper` does) instead of
    resetting at once; dead agents are handled with or without ``use_mask`` (TorchRL raises
    without it); agents of one group must have identical spaces (TorchRL allows heterogeneous
    groups through lazy stacks).

    Because the action mask changes each step, ``check_env_specs`` (which checks the actions of
    past steps against the current spec) only applies to envs without action masks.

    Args:
        env: a ``pettingzoo.AECEnv`` or ``pettingzoo.ParallelEnv``.
        return_state: add the global state (``env.state()``) as the root key ``"state"``.
        group_map: a dict ``{group: [agent names]}`` or a :class:`MarlGroupMapType`. Default:
            agents named ``"<prefix>_<int>"`` are grouped by prefix (``"agent_0"``,
            ``"agent_1"`` -> ``"agent"``); other names form groups of their own.
        use_mask: add the ``(group, "mask")`` entry.
        categorical_actions: discrete actions as indices (``Categorical``) instead of one-hot
            (``OneHot``).
        seed: the seed of the first reset.
        done_on_any: how the root done flags aggregate the agents': ``True`` any, ``False`` all.
            Default: ``any`` for parallel envs, ``all`` for AEC envs.
        device: where the returned tensors live.

    Examples:
        >>> from mpe2 import simple_spread_v3
        >>> env = PettingZooWrapper(simple_spread_v3.parallel_env(N=3, max_cycles=5), seed=0)
        >>> rollout = env.rollout(10)
        >>> rollout["agent", "observation"].shape, rollout["next", "agent", "reward"].shape
        (torch.Size([5, 3, 18]), torch.Size([5, 3]))
        >>> rollout["next", "done"].tolist()
        [False, False, False, False, True]
    """

    _env: Any  # the pettingzoo env, set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(
        self,
        env: Any = None,
        return_state: bool = False,
        group_map: Mapping[str, Sequence[str]] | MarlGroupMapType | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        device: Any = None,
    ) -> None:
        pz = _pettingzoo()
        if isinstance(env, pz.ParallelEnv):
            parallel = True
        elif isinstance(env, pz.AECEnv):
            parallel = False
        else:
            raise TypeError(f"PettingZooWrapper: env must be a pettingzoo AECEnv or ParallelEnv, got {env!r}.")
        for name, value in (
            ("return_state", return_state),
            ("use_mask", use_mask),
            ("categorical_actions", categorical_actions),
        ):
            if not isinstance(value, bool):
                raise TypeError(f"PettingZooWrapper: {name} must be a bool, got {value!r}.")
        if done_on_any is not None and not isinstance(done_on_any, bool):
            raise TypeError(f"PettingZooWrapper: done_on_any must be a bool or None, got {done_on_any!r}.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"PettingZooWrapper: seed must be an int or None, got {seed!r}.")
        agents = list(env.possible_agents)
        if group_map is None:
            group_map = _default_group_map(agents)
        elif isinstance(group_map, MarlGroupMapType):
            group_map = group_map.get_group_map(agents)
        elif isinstance(group_map, Mapping):
            group_map = {
                group: list(names) if not isinstance(names, str) else names for group, names in group_map.items()
            }
        else:
            raise TypeError(
                f"PettingZooWrapper: group_map must be a dict, a MarlGroupMapType or None, got {group_map!r}."
            )
        check_marl_grouping(group_map, agents)

        super().__init__(device=device, batch_size=[])
        self.__dict__["_env"] = env
        self.parallel = parallel
        self.return_state = return_state
        self.group_map = {group: list(names) for group, names in group_map.items()}
        self.use_mask = use_mask
        self.categorical_actions = categorical_actions
        self.done_on_any = parallel if done_on_any is None else done_on_any
        self.possible_agents = agents
        # agent -> (group, row)
        self.agent_index = {a: (g, i) for g, names in self.group_map.items() for i, a in enumerate(names)}
        self._pending_seed = seed
        self._make_specs(seed)

    @property
    def env(self) -> Any:
        """The wrapped PettingZoo env."""
        return self._env

    @property
    def agents(self) -> list[str]:
        """The live agents (``env.agents``)."""
        return list(self._env.agents)

    # ------------------------------------------------------------------ construction
    def _make_specs(self, seed: int | None) -> None:
        from ._gym_spaces import make_codec

        env, dev, cat = self._env, self.device, self.categorical_actions
        obs_codecs, act_codecs, mask_sources = {}, {}, {}
        obs_specs, act_specs, reward_specs, done_specs = {}, {}, {}, {}
        self._has_action_mask: dict[str, bool] = {}
        for group, names in self.group_map.items():
            n = len(names)
            group_obs, group_act = [], []
            for agent in names:
                space = env.observation_space(agent)
                space, mask_sources[agent] = _without_action_mask(space)
                obs_codecs[agent] = make_codec(
                    space, categorical_action_encoding=cat, device=dev, remap_state_to_observation=False
                )
                act_codecs[agent] = make_codec(env.action_space(agent), categorical_action_encoding=cat, device=dev)
                group_obs.append(obs_codecs[agent].spec)
                group_act.append(act_codecs[agent].spec)
            obs_spec = Composite(
                observation=_stack_group(group_obs, group, "observation", names), shape=(n,), device=dev
            )
            act_spec = Composite(action=_stack_group(group_act, group, "action", names), shape=(n,), device=dev)
            if self.use_mask:
                obs_spec["mask"] = Categorical(2, shape=(n,), dtype=torch.bool, device=dev)
            obs_specs[group], act_specs[group] = obs_spec, act_spec
            reward_specs[group] = Composite(reward=Unbounded(shape=(n,), device=dev), shape=(n,), device=dev)
            flag = Categorical(2, shape=(n,), dtype=torch.bool, device=dev)
            done_specs[group] = Composite(
                done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(n,), device=dev
            )
        self._obs_codecs, self._act_codecs, self._mask_sources = obs_codecs, act_codecs, mask_sources

        # a first reset tells what the info dicts hold (and whether they carry action masks)
        self._info_keys: dict[str, list] = {}
        infos = self._raw_reset(seed)[1]
        for group, names in self.group_map.items():
            n = len(names)
            info_shapes: dict[str, torch.Size] = {}
            for agent in names:
                info = infos.get(agent, {}) or {}
                for key, value in info.items():
                    if key == "action_mask":
                        if mask_sources[agent] is None:
                            mask_sources[agent] = "info"
                        continue
                    t = _numeric(value)
                    if t is not None and isinstance(key, str):
                        info_shapes.setdefault(key, t.shape)
            keys = sorted(info_shapes)
            self._info_keys[group] = [(k, info_shapes[k]) for k in keys]
            if keys:
                obs_specs[group]["info"] = Composite(
                    {k: Unbounded(shape=(n, *info_shapes[k]), device=self.device) for k in keys},
                    shape=(n,),
                    device=self.device,
                )
            sources = [mask_sources[a] for a in names]
            has_mask = any(s is not None for s in sources)
            if has_mask and not all(s is not None for s in sources):
                raise ValueError(
                    f"PettingZooWrapper: only some agents of group {group!r} report an action mask; regroup them."
                )
            self._has_action_mask[group] = has_mask
            if has_mask:
                action = act_specs[group]["action"]
                if not isinstance(action, (Categorical, OneHot)):
                    raise ValueError(
                        f"PettingZooWrapper: group {group!r} reports an action mask but its action spec is "
                        f"{type(action).__name__}; action masks are supported for Discrete action spaces."
                    )
                n_actions = action.n
                obs_specs[group]["action_mask"] = Categorical(
                    2, shape=(n, n_actions), dtype=torch.bool, device=self.device
                )
                action.update_mask(torch.ones(n, n_actions, dtype=torch.bool))
        obs_root = Composite(obs_specs, shape=(), device=self.device)
        if self.return_state:
            obs_root["state"] = self._state_spec()
        flag = Categorical(2, shape=(), dtype=torch.bool, device=self.device)
        done_root = Composite(done_specs, shape=(), device=self.device)
        for name in ("done", "terminated", "truncated"):
            done_root[name] = flag.clone()
        self.full_observation_spec = obs_root
        self.full_action_spec = Composite(act_specs, shape=(), device=self.device)
        self.full_reward_spec = Composite(reward_specs, shape=(), device=self.device)
        self.full_done_spec = done_root
        # the action leaves whose masks follow the game (the same objects the env's keys hold)
        self._masked_actions = {g: self.full_action_spec[g, "action"] for g, m in self._has_action_mask.items() if m}
        self._last_obs: dict[str, Any] = {}
        self._last_flags: dict[str, tuple[bool, bool]] = {}

    def _state_spec(self) -> Any:
        from ._gym_spaces import space_to_spec

        space = getattr(self._env, "state_space", None)
        if space is not None:
            return space_to_spec(space, device=self.device)
        try:
            example = torch.as_tensor(self._env.state())
        except NotImplementedError as err:
            raise ValueError("PettingZooWrapper(return_state=True): the env does not implement state().") from err
        return Unbounded(shape=example.shape, dtype=example.dtype, device=self.device)

    # ------------------------------------------------------------------ pettingzoo calls
    def _raw_reset(self, seed: int | None) -> tuple[dict, dict]:
        env = self._env
        if self.parallel:
            obs, infos = env.reset(seed=seed)
            return dict(obs), dict(infos)
        env.reset(seed=seed)
        return {a: env.observe(a) for a in env.agents}, {a: env.infos.get(a, {}) for a in env.agents}

    def _set_seed(self, seed: int | None) -> None:
        self._pending_seed = seed

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        seed, self._pending_seed = self._pending_seed, None
        obs, infos = self._raw_reset(seed)
        self._last_obs = {}
        self._last_flags = {}
        return self._build(obs, infos, None, None, None)

    def _actions(self, tensordict: TensorDictBase) -> dict[str, Any]:
        out = {}
        codecs = self._act_codecs
        for group, names in self.group_map.items():
            action = tensordict.get((group, "action"))
            for i, agent in enumerate(names):
                out[agent] = codecs[agent].write(action[i])
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        env = self._env
        if self.parallel:
            live = set(env.agents)
            actions = {a: v for a, v in self._actions(tensordict).items() if a in live}
            obs, rewards, terms, truncs, infos = env.step(actions)
            return self._build(dict(obs), dict(infos), rewards, terms, truncs)
        agent = env.agent_selection
        if env.terminations.get(agent, False) or env.truncations.get(agent, False):
            action = None  # a dead step: pettingzoo removes the agent
        else:
            group, row = self.agent_index[agent]
            action = self._act_codecs[agent].write(tensordict.get((group, "action"))[row])
        env.step(action)
        live = list(env.agents)
        obs = {a: env.observe(a) for a in live}
        infos = {a: env.infos.get(a, {}) for a in live}
        return self._build(obs, infos, dict(env.rewards), dict(env.terminations), dict(env.truncations))

    # ------------------------------------------------------------------ conversion
    def _build(
        self, obs: dict, infos: dict, rewards: dict | None, terms: dict | None, truncs: dict | None
    ) -> TensorDictBase:
        """One step's (or reset's) TensorDict from pettingzoo's per-agent dicts."""
        dev = self.device
        acting = set(self._env.agents) if self.parallel else {self._env.agent_selection}
        live = set(self._env.agents)
        out = {}
        any_flags = {"done": False, "terminated": False, "truncated": False}
        all_flags = {"done": True, "terminated": True, "truncated": True}
        last_obs, last_flags, codecs = self._last_obs, self._last_flags, self._obs_codecs
        for group, names in self.group_map.items():
            n = len(names)
            values, reward, term, trunc = [], [], [], []
            for agent in names:
                if agent in obs:
                    # a Dict codec reads only its own entries: an "action_mask" entry is simply not read
                    value = codecs[agent].read_safe(obs[agent])
                    last_obs[agent] = value
                else:
                    value = last_obs.get(agent)
                    if value is None:  # an agent that was never observed (not alive at reset)
                        value = codecs[agent].spec.zero()
                values.append(value)
                reward.append(float(rewards.get(agent, 0.0)) if rewards is not None else 0.0)
                if terms is None or truncs is None:  # reset (both None): everyone starts alive
                    flags = (False, False)
                elif agent in terms or agent in truncs:
                    flags = (bool(terms.get(agent, False)), bool(truncs.get(agent, False)))
                else:  # gone: its last flags stay (terminated when none was ever reported)
                    flags = last_flags.get(agent, (True, False))
                    if not (flags[0] or flags[1]):
                        flags = (True, False)
                if agent not in live and not (flags[0] or flags[1]):
                    flags = (True, False)
                last_flags[agent] = flags
                term.append(flags[0])
                trunc.append(flags[1])
            term_t = torch.tensor(term, dtype=torch.bool)
            trunc_t = torch.tensor(trunc, dtype=torch.bool)
            done_t = term_t | trunc_t
            sub: dict[str, torch.Tensor | TensorDictBase] = {
                "observation": torch.stack(values, 0),
                "done": done_t,
                "terminated": term_t,
                "truncated": trunc_t,
            }
            if rewards is not None:
                sub["reward"] = torch.tensor(reward, dtype=torch.float32)
            if self.use_mask:
                sub["mask"] = torch.tensor([a in acting for a in names], dtype=torch.bool)
            info_keys = self._info_keys[group]
            if info_keys:
                sub["info"] = self._read_infos(infos, names, info_keys)
            if self._has_action_mask[group]:
                mask = self._read_action_masks(obs, infos, names, acting)
                sub["action_mask"] = mask
                self._masked_actions[group].update_mask(mask)
            for name, flag in (("done", done_t), ("terminated", term_t), ("truncated", trunc_t)):
                any_flags[name] = any_flags[name] or bool(flag.any())
                all_flags[name] = all_flags[name] and bool(flag.all())
            out[group] = _new_td(sub, torch.Size([n]), None)
        flags = any_flags if self.done_on_any else all_flags
        for name, value in flags.items():
            out[name] = torch.tensor(value)
        if self.return_state:
            out["state"] = torch.as_tensor(self._env.state()).clone()
        td = _new_td(out, torch.Size([]), None)
        return td.to(dev) if dev is not None and dev.type != "cpu" else td

    def _read_infos(self, infos: dict, names: list, info_keys: list) -> TensorDict:
        n = len(names)
        entries = {}
        for key, shape in info_keys:
            rows = []
            for agent in names:
                value = (infos.get(agent) or {}).get(key)
                t = _numeric(value) if value is not None else None
                if t is None or t.numel() != shape.numel():
                    t = torch.zeros(shape)
                rows.append(t.reshape(shape))
            entries[key] = torch.stack(rows, 0)
        return _new_td(entries, torch.Size([n]), None)

    def _read_action_masks(self, obs: dict, infos: dict, names: list, acting: set) -> torch.Tensor:
        rows = []
        for agent in names:
            n_actions = self._act_codecs[agent].spec.n
            row = torch.ones(n_actions, dtype=torch.bool)
            if agent in acting:
                source = self._mask_sources[agent]
                holder = obs.get(agent) if source == "observation" else infos.get(agent)
                if holder is not None and "action_mask" in holder:
                    row = torch.as_tensor(holder["action_mask"]).reshape(n_actions).bool()
            rows.append(row)
        return torch.stack(rows, 0)

    def close(self, *, raise_if_closed: bool = False) -> None:
        self._env.close()

    def __repr__(self) -> str:
        groups = {g: len(a) for g, a in self.group_map.items()}
        api = "parallel" if self.parallel else "AEC"
        return f"{type(self).__name__}(env={type(self._env.unwrapped).__name__}, {api}, groups={groups}, device={self.device})"


def _without_action_mask(space: Any) -> tuple[Any, str | None]:
    """A Dict observation space with its ``"action_mask"`` entry removed, and where the mask comes from."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, Mapping) and "action_mask" in spaces:
        import gymnasium

        rest = {k: v for k, v in spaces.items() if k != "action_mask"}
        return gymnasium.spaces.Dict(rest), "observation"
    return space, None


# ---------------------------------------------------------------------------------------------- by task
def _import_task(task: str) -> Any:
    if "." in task:
        return importlib.import_module(task)
    tried = []
    for family in _FAMILIES:
        name = f"{family}.{task}"
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as err:
            # the task is not in this family (or the family is not installed): try the next one;
            # a missing dependency of an existing task is a different module name and is raised
            if err.name is None or not (name.startswith(err.name + ".") or name == err.name):
                raise ImportError(f"PettingZooEnv: task {name!r} needs {err.name!r}, which is not installed.") from err
            tried.append(name)
    raise ValueError(f"PettingZooEnv: unknown task {task!r}; looked for modules {tried}.")


class PettingZooEnv(PettingZooWrapper):
    """Builds a PettingZoo task by name and wraps it (:class:`PettingZooWrapper`).

    The task is a module name such as ``"simple_spread_v3"`` (searched in ``mpe2`` and the
    ``pettingzoo`` families classic, butterfly, sisl, atari) or a full module path
    (``"pettingzoo.classic.tictactoe_v3"``); ``task.parallel_env(**kwargs)`` or ``task.env(**kwargs)``
    builds it.

    Args:
        task: the task's module name.
        parallel: use the parallel API (``True``) or the AEC API (``False``).
        return_state, group_map, use_mask, categorical_actions, seed, done_on_any, device: see
            :class:`PettingZooWrapper`.
        **kwargs: passed to the task's constructor (e.g. ``N=3, max_cycles=25``).

    Examples:
        >>> env = PettingZooEnv("simple_spread_v3", parallel=False, N=2, max_cycles=3, seed=0, use_mask=True)
        >>> rollout = env.rollout(4)
        >>> rollout["agent", "mask"].tolist()   # whose turn it is
        [[True, False], [False, True], [True, False], [False, True]]
    """

    def __init__(
        self,
        task: str,
        parallel: bool,
        return_state: bool = False,
        group_map: Mapping[str, Sequence[str]] | MarlGroupMapType | None = None,
        use_mask: bool = False,
        categorical_actions: bool = True,
        seed: int | None = None,
        done_on_any: bool | None = None,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        _pettingzoo()
        if not isinstance(task, str) or not task:
            raise TypeError(f"PettingZooEnv: task must be a task module name such as 'simple_spread_v3', got {task!r}.")
        if not isinstance(parallel, bool):
            raise TypeError(f"PettingZooEnv: parallel must be a bool, got {parallel!r}.")
        module = _import_task(task)
        maker = getattr(module, "parallel_env" if parallel else "env", None)
        if maker is None:
            api = "parallel_env" if parallel else "env"
            raise ValueError(f"PettingZooEnv: task {task!r} ({module.__name__}) has no {api}() constructor.")
        super().__init__(
            maker(**kwargs),
            return_state=return_state,
            group_map=group_map,
            use_mask=use_mask,
            categorical_actions=categorical_actions,
            seed=seed,
            done_on_any=done_on_any,
            device=device,
        )
        self.task = task

    def __repr__(self) -> str:
        groups = {g: len(a) for g, a in self.group_map.items()}
        return f"PettingZooEnv(task={self.task}, parallel={self.parallel}, groups={groups}, device={self.device})"
