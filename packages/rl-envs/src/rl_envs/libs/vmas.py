"""VMAS wrappers: VmasWrapper (wraps a ``vmas`` Environment), VmasEnv (builds one from a scenario).

VMAS simulates ``num_envs`` copies of a multi-agent scenario at once in torch, so the wrapped env
has batch size ``[num_envs]`` and no numpy round trip. vmas is imported only when these classes
are used (``pip install rl-envs[vmas]``). Names and semantics follow TorchRL 0.14
(``torchrl.envs.VmasEnv``/``VmasWrapper``); the differences are listed in :class:`VmasWrapper`.

Layout of one step (``N = num_envs``, ``group`` a key of the group map, ``n`` its number of agents)::

    (group, "observation")   [N, n, *obs_shape]   (a sub-TensorDict for Dict observations)
    (group, "action")        [N, n, *act_shape]
    (group, "info", key)     [N, n, *shape]       float32, the scenario's info entries
    (group, "reward")        [N, n]               float32, under "next"
    (group, "done" | "terminated" | "truncated")   [N, n]   bool, the env's flags repeated per agent
    "done" | "terminated" | "truncated"            [N]      bool
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from tdict import TensorDict, TensorDictBase
from tdict.specs import (
    Categorical,
    Composite,
    MultiOneHot,
    OneHot,
    Stacked,
    StackedComposite,
    Unbounded,
)
from tdict.validation import check_positive_int

from ..env_base import EnvBase
from ._marl import (
    MarlGroupMapType,
    follows_prefix_convention,
    group_by_prefix,
    resolve_group_map,
)

__all__ = ["VmasEnv", "VmasWrapper", "vmas_default_group_map"]

_new_td = TensorDict.unchecked
_FLAGS = ("done", "terminated", "truncated")
# make_env arguments VmasEnv sets itself
_OWN_KWARGS = ("terminated_truncated", "wrapper", "wrapper_kwargs")


def _vmas() -> Any:
    try:
        import vmas
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError("VmasEnv/VmasWrapper need vmas, which is not installed: pip install rl-envs[vmas]") from err
    return vmas


def _available_scenarios() -> list[str]:
    vmas = _vmas()
    return [*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios]


def vmas_default_group_map(agent_names: Sequence[str]) -> dict[str, list[str]]:
    """TorchRL's default VMAS grouping.

    When every agent is named ``"<prefix>_<int>"``, agents are grouped by prefix; otherwise all
    agents share one group ``"agents"`` (``MarlGroupMapType.ALL_IN_ONE_GROUP``). The group
    ``"agent"`` is renamed ``"agents"`` (TorchRL does so for backward compatibility), unless
    another group already has that name.

    Examples:
        >>> vmas_default_group_map(["agent_0", "agent_1"])
        {'agents': ['agent_0', 'agent_1']}
        >>> vmas_default_group_map(["adversary_0", "agent_0", "agent_1"])
        {'adversary': ['adversary_0'], 'agents': ['agent_0', 'agent_1']}
        >>> vmas_default_group_map(["leader", "follower_0"])
        {'agents': ['leader', 'follower_0']}
    """
    if not follows_prefix_convention(agent_names):
        return MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(agent_names)
    group_map = group_by_prefix(agent_names)
    if "agent" in group_map and "agents" not in group_map:
        group_map = {("agents" if g == "agent" else g): names for g, names in group_map.items()}
    return group_map


def _member(space: Any, index: int, name: str) -> Any:
    """One agent's space in vmas's Tuple (by index) or Dict (``dict_spaces=True``, by name) space."""
    spaces = space.spaces
    return spaces[name] if isinstance(spaces, Mapping) else spaces[index]


def _stack_group(specs: list, group: str, what: str, agents: list) -> Any:
    stacked = torch.stack(specs, 0)
    if isinstance(stacked, (Stacked, StackedComposite)):
        raise ValueError(  # noqa: TRY004 - the spaces' values are wrong for a group, not an argument's type
            f"VmasWrapper: the agents {agents} of group {group!r} have different {what} spaces; group agents "
            f"with identical spaces (group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT always works)."
        )
    return stacked


def _stack_agents(values: list, batch: torch.Size) -> Any:
    """Agents' values ``[N, ...]`` (tensors or nested dicts of tensors) stacked along dim 1."""
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(values, 1)
    return _new_td({k: _stack_agents([v[k] for v in values], batch) for k in first}, batch, None)


class VmasWrapper(EnvBase):
    """Wraps a VMAS ``Environment`` (``vmas.make_env(...)`` with ``wrapper=None``).

    The env has batch size ``[num_envs]``. Agents are split into groups (``group_map``); each
    group is a sub-TensorDict with batch ``[num_envs, n_agents_in_group]`` holding the agents'
    observation, action, reward, info entries and done flags (see the module docstring for every
    key). VMAS ends episodes per sub-env, for all agents at once: a group's flags are the sub-env's
    flags repeated over its agents, and the root flags are the sub-env's.

    - ``terminated`` is the scenario's ``done()``; ``truncated`` is set when the sub-env reached
      ``max_steps`` steps (VMAS's own step counter, reset with the sub-env); ``done`` is their OR.
    - Partial resets: a ``"_reset"`` mask (root ``[num_envs]``, or a group's ``[num_envs, n]``)
      resets the flagged sub-envs with ``env.reset_at(i)``; the others keep running. Since a VMAS
      sub-env resets as a whole, a group mask must flag all or none of a sub-env's agents.
    - Discrete actions (``continuous_actions=False``) are indices (``Categorical``) by default,
      or one-hot vectors (``OneHot``) with ``categorical_actions=False``; VMAS's multi-discrete
      actions map to ``MultiCategorical``/``MultiOneHot``.
    - Seeding: ``set_seed(seed)`` calls ``env.seed(seed)``, which seeds VMAS's own random state
      (the global torch/numpy/random states are untouched); the next reset draws from it.
      ``set_seed(None)`` leaves the state alone (vmas would seed 0).

    Default grouping (:func:`vmas_default_group_map`, as TorchRL): agents named
    ``"<prefix>_<int>"`` are grouped by prefix, with ``"agent"`` renamed ``"agents"``; if any
    name breaks the convention, all agents go to one group ``"agents"``.

    Differences from TorchRL: rewards have shape ``[num_envs, n]`` (TorchRL ``[num_envs, n, 1]``)
    and root flags ``[num_envs]`` (TorchRL ``[num_envs, 1]``); done/terminated/truncated are also
    given per agent in every group and ``truncated`` is separate from ``terminated`` (TorchRL gives
    a root ``done``/``terminated`` only, where reaching ``max_steps`` counts as terminated); info
    entries keep their own shape (a ``[num_envs]`` info becomes ``[num_envs, n]``, no trailing 1);
    agents of one group must have identical spaces (TorchRL allows heterogeneous groups through
    lazy stacks); rendering to pixels is not supported (TorchRL neither).

    Args:
        env: a ``vmas.simulator.environment.Environment``.
        categorical_actions: discrete actions as indices instead of one-hot vectors.
        group_map: a dict ``{group: [agent names]}``, a :class:`MarlGroupMapType`, or None for
            the default grouping.
        device: must be the env's device when given (VMAS computes on its own device).

    Examples:
        >>> import vmas
        >>> env = VmasWrapper(vmas.make_env("balance", num_envs=4, seed=0, max_steps=5))
        >>> rollout = env.rollout(5)
        >>> rollout["agents", "observation"].shape, rollout["next", "agents", "reward"].shape
        (torch.Size([4, 5, 3, 16]), torch.Size([4, 5, 3]))
        >>> rollout["next", "truncated"][:, -1].tolist()
        [True, True, True, True]
    """

    _env: Any  # the vmas env, set through ``self.__dict__`` (bypasses nn.Module's ``__setattr__``)

    def __init__(
        self,
        env: Any = None,
        categorical_actions: bool = True,
        group_map: Mapping[str, Sequence[str]] | MarlGroupMapType | None = None,
        device: Any = None,
    ) -> None:
        _vmas()
        from vmas.simulator.environment import Environment

        if not isinstance(env, Environment):
            raise TypeError(
                f"VmasWrapper: env must be a vmas Environment (vmas.make_env(..., wrapper=None)), got {env!r}."
            )
        if not isinstance(categorical_actions, bool):
            raise TypeError(f"VmasWrapper: categorical_actions must be a bool, got {categorical_actions!r}.")
        env_device = torch.device(env.device)
        if device is not None and torch.device(device) != env_device:
            raise ValueError(
                f"VmasWrapper: device {device!r} differs from the vmas env's device {str(env_device)!r}; "
                f"build the vmas env on that device (make_env(..., device=...)) or leave device=None."
            )
        names = [agent.name for agent in env.agents]
        group_map = resolve_group_map(group_map, names, vmas_default_group_map, "VmasWrapper")
        super().__init__(device=env_device, batch_size=[env.num_envs])
        self.__dict__["_env"] = env
        self.categorical_actions = categorical_actions
        self.group_map = group_map
        self.agent_names = names
        self.agent_names_to_indices_map = {name: i for i, name in enumerate(names)}
        self.n_agents = len(names)
        # group -> the vmas indices of its agents, in group order
        self._group_index = {g: [self.agent_names_to_indices_map[a] for a in agents] for g, agents in group_map.items()}
        self._make_specs()

    @property
    def env(self) -> Any:
        """The wrapped VMAS Environment."""
        return self._env

    @property
    def scenario(self) -> Any:
        """The VMAS scenario the env runs."""
        return self._env.scenario

    @property
    def num_envs(self) -> int:
        """The number of vectorised VMAS envs (the env's batch size)."""
        return self._env.num_envs

    @property
    def continuous_actions(self) -> bool:
        """Whether the VMAS env takes continuous actions (else discrete ones)."""
        return self._env.continuous_actions

    @property
    def max_steps(self) -> int | None:
        """The VMAS env's episode length limit, after which episodes are truncated (``None``: no limit)."""
        return self._env.max_steps

    @property
    def available_envs(self) -> list[str]:
        """The scenario names ``VmasEnv`` accepts."""
        return _available_scenarios()

    # ------------------------------------------------------------------ construction
    def _make_specs(self) -> None:
        from ._gym_spaces import space_to_spec

        env, dev, cat = self._env, self.device, self.categorical_actions
        batch = self.batch_size
        n_envs = batch[0]
        infos = env.get_from_scenario(
            get_observations=False, get_rewards=False, get_infos=True, get_dones=False, dict_agent_names=False
        )[0]
        obs_specs, act_specs, reward_specs, done_specs = {}, {}, {}, {}
        self._info_keys: dict[str, list[tuple[str, torch.Size]]] = {}
        self._to_index: dict[str, Any] = {}
        for group, agents in self.group_map.items():
            n = len(agents)
            idx = self._group_index[group]
            group_shape = (n_envs, n)
            obs = [
                space_to_spec(_member(env.observation_space, i, a), device=dev, remap_state_to_observation=False)
                for i, a in zip(idx, agents)
            ]
            act = [
                space_to_spec(_member(env.action_space, i, a), categorical_action_encoding=cat, device=dev)
                for i, a in zip(idx, agents)
            ]
            obs_leaf = _stack_group(obs, group, "observation", agents)
            act_leaf = _stack_group(act, group, "action", agents)
            obs_spec = Composite(
                observation=obs_leaf.expand(*group_shape, *obs_leaf.shape[1:]), shape=group_shape, device=dev
            )
            act_leaf = act_leaf.expand(*group_shape, *act_leaf.shape[1:])
            act_specs[group] = Composite(action=act_leaf, shape=group_shape, device=dev)
            self._to_index[group] = _index_converter(act_leaf)
            info_shapes = self._info_shapes(group, [infos[i] for i in idx])
            self._info_keys[group] = list(info_shapes.items())
            if info_shapes:
                obs_spec["info"] = Composite(
                    {k: Unbounded(shape=(*group_shape, *s), device=dev) for k, s in info_shapes.items()},
                    shape=group_shape,
                    device=dev,
                )
            obs_specs[group] = obs_spec
            reward_specs[group] = Composite(
                reward=Unbounded(shape=group_shape, device=dev), shape=group_shape, device=dev
            )
            flag = Categorical(2, shape=group_shape, dtype=torch.bool, device=dev)
            done_specs[group] = Composite({k: flag.clone() for k in _FLAGS}, shape=group_shape, device=dev)
        done_root = Composite(done_specs, shape=batch, device=dev)
        for name in _FLAGS:
            done_root[name] = Categorical(2, shape=batch, dtype=torch.bool, device=dev)
        self.full_observation_spec = Composite(obs_specs, shape=batch, device=dev)
        self.full_action_spec = Composite(act_specs, shape=batch, device=dev)
        self.full_reward_spec = Composite(reward_specs, shape=batch, device=dev)
        self.full_done_spec = done_root
        self._reset_keys = [("_reset", None)] + [((g, "_reset"), g) for g in self.group_map]

    def _info_shapes(self, group: str, infos: list) -> dict[str, torch.Size]:
        """key -> per-env shape of the group's info entries (the union over its agents)."""
        shapes: dict[str, torch.Size] = {}
        for agent, info in zip(self.group_map[group], infos):
            for key, value in (info or {}).items():
                if not isinstance(value, torch.Tensor) or not isinstance(key, str) or value.ndim == 0:
                    continue  # not a per-env tensor: nothing to stack
                shape = value.shape[1:]
                if shapes.setdefault(key, shape) != shape:
                    raise ValueError(
                        f"VmasWrapper: info entry {key!r} of group {group!r} has shape {list(shape)} for agent "
                        f"{agent!r} but {list(shapes[key])} for another agent; group agents whose infos agree."
                    )
        return dict(sorted(shapes.items()))

    # ------------------------------------------------------------------ vmas calls
    def _set_seed(self, seed: int | None) -> None:
        if seed is not None:
            self._env.seed(int(seed))

    def _reset_mask(self, tensordict: TensorDictBase | None) -> torch.Tensor | None:
        """Which sub-envs to reset (``[num_envs]`` bool), or None for all of them."""
        if tensordict is None:
            return None
        n_envs = self.batch_size[0]
        out = None
        for key, group in self._reset_keys:
            mask = tensordict.get(key, None)
            if mask is None:
                continue
            if group is None:
                if mask.numel() != n_envs:
                    raise ValueError(f"VmasWrapper.reset: '_reset' must have shape [{n_envs}], got {list(mask.shape)}.")
                env_mask = mask.reshape(n_envs).bool()
            else:
                n = len(self.group_map[group])
                if mask.shape != (n_envs, n):
                    raise ValueError(
                        f"VmasWrapper.reset: {key!r} must have shape [{n_envs}, {n}], got {list(mask.shape)}."
                    )
                mask = mask.bool()
                env_mask = mask.any(-1)
                if not torch.equal(env_mask, mask.all(-1)):
                    bad = (env_mask & ~mask.all(-1)).nonzero().flatten().tolist()
                    raise ValueError(
                        f"VmasWrapper.reset: {key!r} flags only some agents of sub-envs {bad}; a VMAS sub-env "
                        f"resets as a whole, so flag all of its agents or none."
                    )
            out = env_mask if out is None else out | env_mask
        return out

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        mask = self._reset_mask(tensordict)
        env = self._env
        if mask is None or bool(mask.all()):
            env.reset(return_observations=False)
        else:
            for i in mask.nonzero().flatten().tolist():
                env.reset_at(i, return_observations=False)
        obs, infos = env.get_from_scenario(
            get_observations=True, get_rewards=False, get_infos=True, get_dones=False, dict_agent_names=False
        )
        term, trunc = self._flags()
        return self._build(obs, None, infos, term, trunc)

    def _flags(self) -> tuple[torch.Tensor, torch.Tensor]:
        env = self._env
        if env.terminated_truncated:
            return env.done()
        # a combined flag: recompute the two parts the way vmas does
        term = env.scenario.done().clone()
        trunc = env.steps >= env.max_steps if env.max_steps is not None else torch.zeros_like(term)
        return term, trunc

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions: list = [None] * self.n_agents
        for group, idx in self._group_index.items():
            action = self._to_index[group](tensordict.get((group, "action")))
            for j, i in enumerate(idx):
                actions[i] = action[:, j]
        env = self._env
        out = env.step(actions)
        if env.terminated_truncated:
            obs, rewards, term, trunc, infos = out
        else:
            obs, rewards, _, infos = out
            term, trunc = self._flags()
        if isinstance(obs, Mapping):  # dict_spaces=True: agent name -> value
            names = self.agent_names
            obs, rewards, infos = [obs[a] for a in names], [rewards[a] for a in names], [infos[a] for a in names]
        return self._build(obs, rewards, infos, term, trunc)

    # ------------------------------------------------------------------ conversion
    def _build(
        self, obs: list, rewards: list | None, infos: list, term: torch.Tensor, trunc: torch.Tensor
    ) -> TensorDictBase:
        """One step's (or reset's) TensorDict from vmas's per-agent lists."""
        batch = self.batch_size
        term = term.bool()
        trunc = trunc.bool()
        done = term | trunc
        out: dict[str, Any] = {"done": done, "terminated": term, "truncated": trunc}
        for group, idx in self._group_index.items():
            n = len(idx)
            group_batch = torch.Size((batch[0], n))
            sub = {
                "observation": _stack_agents([obs[i] for i in idx], group_batch),
                "done": done.unsqueeze(-1).expand(group_batch).clone(),
                "terminated": term.unsqueeze(-1).expand(group_batch).clone(),
                "truncated": trunc.unsqueeze(-1).expand(group_batch).clone(),
            }
            if rewards is not None:
                sub["reward"] = torch.stack([rewards[i] for i in idx], 1).to(torch.float32)
            info_keys = self._info_keys[group]
            if info_keys:
                sub["info"] = self._read_infos([infos[i] for i in idx], info_keys, group_batch)
            out[group] = _new_td(sub, group_batch, None)
        return _new_td(out, batch, None)

    def _read_infos(self, infos: list, info_keys: list, group_batch: torch.Size) -> TensorDict:
        entries = {}
        for key, shape in info_keys:
            rows = []
            for info in infos:
                value = (info or {}).get(key)
                if isinstance(value, torch.Tensor) and value.shape[1:] == shape:
                    rows.append(value.to(torch.float32))
                else:  # an agent without this entry (the union over the group has it)
                    rows.append(torch.zeros(group_batch[0], *shape, device=self.device))
            entries[key] = torch.stack(rows, 1)
        return _new_td(entries, group_batch, None)

    def to(self, *args: Any, **kwargs: Any) -> VmasWrapper:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]  # pyright: ignore[reportAttributeAccessIssue]
        if device is not None:
            self._env.to(device)
        return cast(VmasWrapper, super().to(*args, **kwargs))  # EnvBase.to returns self

    def close(self, *, raise_if_closed: bool = False) -> None:
        viewer = getattr(self._env, "viewer", None)
        if viewer is not None:
            viewer.close()
            self._env.viewer = None

    def __repr__(self) -> str:
        groups = {g: len(a) for g, a in self.group_map.items()}
        name = type(self._env.scenario).__module__.rsplit(".", 1)[-1]
        return (
            f"{type(self).__name__}(scenario={name}, num_envs={self.num_envs}, groups={groups}, device={self.device})"
        )


def _index_converter(spec: Any) -> Any:
    """The function that turns a group's action into what vmas reads (indices for discrete spaces)."""
    if isinstance(spec, OneHot):
        return spec.to_categorical
    if isinstance(spec, MultiOneHot):
        nvec = list(spec.nvec)

        def multi_one_hot_to_index(action: torch.Tensor) -> torch.Tensor:
            return torch.stack([part.long().argmax(-1) for part in action.split(nvec, -1)], -1)

        return multi_one_hot_to_index
    return _identity


def _identity(action: torch.Tensor) -> torch.Tensor:
    return action


class VmasEnv(VmasWrapper):
    """Builds a VMAS scenario with ``vmas.make_env`` and wraps it (:class:`VmasWrapper`).

    Args:
        scenario: a scenario name (see ``available_envs``: ``"balance"``, ``"navigation"``,
            ``"simple_spread"``...) or a ``vmas.simulator.scenario.BaseScenario`` instance.
        num_envs: how many sub-envs VMAS simulates at once (the env's batch size).
        continuous_actions: continuous (``Bounded``) actions, else discrete.
        max_steps: episode length: a sub-env is truncated after that many steps. None: no limit.
        categorical_actions: discrete actions as indices instead of one-hot vectors.
        seed: VMAS's seed, set before the construction-time reset.
        group_map: see :class:`VmasWrapper`.
        device: where VMAS simulates (default ``"cpu"``).
        **kwargs: passed to ``vmas.make_env`` and on to the scenario (``n_agents=3``, ...), and
            make_env's own options (``dict_spaces``, ``multidiscrete_actions``, ``clamp_actions``,
            ``grad_enabled``). ``terminated_truncated`` is always on (the wrapper reports both)
            and ``wrapper`` is off.

    Examples:
        >>> env = VmasEnv("navigation", num_envs=2, continuous_actions=False, seed=0, n_agents=2)
        >>> env.group_map
        {'agents': ['agent_0', 'agent_1']}
        >>> env.full_action_spec["agents", "action"]
        Categorical(shape=(2, 2), device=cpu, dtype=torch.int64, n=9)
        >>> env.rand_step(env.reset())["next", "agents", "reward"].shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        scenario: Any,
        num_envs: int,
        *,
        continuous_actions: bool = True,
        max_steps: int | None = None,
        categorical_actions: bool = True,
        seed: int | None = None,
        group_map: Mapping[str, Sequence[str]] | MarlGroupMapType | None = None,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        vmas = _vmas()
        from vmas.simulator.scenario import BaseScenario

        if isinstance(scenario, str):
            available = _available_scenarios()
            if scenario.removesuffix(".py") not in available:
                raise ValueError(f"VmasEnv: unknown scenario {scenario!r}; available scenarios: {available}.")
        elif not isinstance(scenario, BaseScenario):
            raise TypeError(
                f"VmasEnv: scenario must be a scenario name or a vmas BaseScenario instance, got {scenario!r}."
            )
        check_positive_int("VmasEnv", "num_envs", num_envs)
        if not isinstance(continuous_actions, bool):
            raise TypeError(f"VmasEnv: continuous_actions must be a bool, got {continuous_actions!r}.")
        check_positive_int("VmasEnv", "max_steps", max_steps, allow_none=True)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"VmasEnv: seed must be an int or None, got {seed!r}.")
        if not isinstance(categorical_actions, bool):
            raise TypeError(f"VmasEnv: categorical_actions must be a bool, got {categorical_actions!r}.")
        own = [k for k in _OWN_KWARGS if k in kwargs]
        if own:
            raise TypeError(f"VmasEnv: {own} are set by VmasEnv itself (terminated_truncated=True, wrapper=None).")
        env = vmas.make_env(
            scenario,
            num_envs=num_envs,
            device="cpu" if device is None else device,
            continuous_actions=continuous_actions,
            max_steps=max_steps,
            seed=seed,
            terminated_truncated=True,
            wrapper=None,
            **kwargs,
        )
        super().__init__(env, categorical_actions=categorical_actions, group_map=group_map)
        self.scenario_name = scenario if isinstance(scenario, str) else type(scenario).__module__.rsplit(".", 1)[-1]
        self.scenario_kwargs = dict(kwargs)

    def __repr__(self) -> str:
        groups = {g: len(a) for g, a in self.group_map.items()}
        return (
            f"VmasEnv(scenario={self.scenario_name}, num_envs={self.num_envs}, groups={groups}, device={self.device})"
        )
