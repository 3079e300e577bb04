"""Agent groups shared by the multi-agent wrappers (PettingZoo, VMAS).

A multi-agent env splits its agents into groups; each group is a sub-TensorDict of the step whose
last batch dim indexes the group's agents. This module holds what every wrapper needs to build
and check that split: :class:`MarlGroupMapType`, :func:`check_marl_grouping` and the
``"<prefix>_<int>"`` naming convention (:func:`group_by_prefix`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import Enum

__all__ = [
    "MarlGroupMapType",
    "check_marl_grouping",
    "follows_prefix_convention",
    "group_by_prefix",
    "resolve_group_map",
]

# keys the wrappers write at the root: a group may not take these names
_RESERVED = ("done", "terminated", "truncated", "state", "_reset", "next")


class MarlGroupMapType(Enum):
    """Ready-made ways of grouping agents (``torchrl.envs.MarlGroupMapType``).

    ``ALL_IN_ONE_GROUP`` puts every agent in a group called ``"agents"``; ``ONE_GROUP_PER_AGENT``
    gives each agent its own group, named after the agent.

    Examples:
        >>> MarlGroupMapType.ALL_IN_ONE_GROUP.get_group_map(["a_0", "b_0"])
        {'agents': ['a_0', 'b_0']}
        >>> MarlGroupMapType.ONE_GROUP_PER_AGENT.get_group_map(["a_0", "b_0"])
        {'a_0': ['a_0'], 'b_0': ['b_0']}
    """

    ALL_IN_ONE_GROUP = 1
    ONE_GROUP_PER_AGENT = 2

    def get_group_map(self, agent_names: Sequence[str]) -> dict[str, list[str]]:
        """The group map of this type for ``agent_names``."""
        if self is MarlGroupMapType.ALL_IN_ONE_GROUP:
            return {"agents": list(agent_names)}
        return {name: [name] for name in agent_names}


def check_marl_grouping(group_map: Mapping[str, Sequence[str]], agent_names: Sequence[str]) -> None:
    """Raises a ``ValueError`` unless every agent is in exactly one non-empty group.

    Examples:
        >>> check_marl_grouping({"agents": ["a", "b"]}, ["a", "b"])
        >>> check_marl_grouping({"agents": ["a"]}, ["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: group_map: agents ['b'] are in no group; every agent of the env must be in exactly one group.
    """
    seen: dict[str, str] = {}
    for group, agents in group_map.items():
        if not isinstance(group, str) or not group:
            raise ValueError(f"group_map: group names must be non-empty strings, got {group!r}.")
        if group in _RESERVED:
            raise ValueError(f"group_map: group name {group!r} is reserved (the root holds {list(_RESERVED)}).")
        if isinstance(agents, str) or not isinstance(agents, Sequence) or len(agents) == 0:
            raise ValueError(f"group_map[{group!r}]: expected a non-empty list of agent names, got {agents!r}.")
        for agent in agents:
            if agent not in agent_names:
                raise ValueError(
                    f"group_map[{group!r}]: agent {agent!r} is not an agent of the env {list(agent_names)}."
                )
            if agent in seen:
                raise ValueError(f"group_map: agent {agent!r} is in two groups ({seen[agent]!r} and {group!r}).")
            seen[agent] = group
    missing = [a for a in agent_names if a not in seen]
    if missing:
        raise ValueError(
            f"group_map: agents {missing} are in no group; every agent of the env must be in exactly one group."
        )


def _prefix(name: str) -> str | None:
    """``"<prefix>"`` of a name ``"<prefix>_<int>"``, else None."""
    head, sep, tail = name.rpartition("_")
    return head if sep and head and tail.isdigit() else None


def group_by_prefix(agent_names: Sequence[str]) -> dict[str, list[str]]:
    """The naming convention ``"<group>_<int>"``: agents sharing ``<group>`` share a group.

    A name that does not end in ``_<int>`` is a group of its own (PettingZoo's default grouping).

    Examples:
        >>> group_by_prefix(["adversary_0", "agent_0", "agent_1", "solo"])
        {'adversary': ['adversary_0'], 'agent': ['agent_0', 'agent_1'], 'solo': ['solo']}
    """
    group_map: dict[str, list[str]] = {}
    for name in agent_names:
        prefix = _prefix(name)
        group_map.setdefault(name if prefix is None else prefix, []).append(name)
    return group_map


def follows_prefix_convention(agent_names: Sequence[str]) -> bool:
    """Whether every name has the form ``"<prefix>_<int>"``."""
    return all(_prefix(name) is not None for name in agent_names)


def resolve_group_map(
    group_map: Mapping[str, Sequence[str]] | MarlGroupMapType | None,
    agent_names: Sequence[str],
    default: Callable[[Sequence[str]], dict[str, list[str]]],
    owner: str,
) -> dict[str, list[str]]:
    """The checked ``{group: [agent names]}`` a wrapper's ``group_map`` argument stands for.

    Args:
        group_map: a dict, a :class:`MarlGroupMapType`, or None for ``default(agent_names)``.
        agent_names: every agent of the env, in the env's order.
        default: the wrapper's default grouping.
        owner: the wrapper's name, for error messages.

    Examples:
        >>> resolve_group_map(None, ["a_0", "a_1"], group_by_prefix, "MyEnv")
        {'a': ['a_0', 'a_1']}
    """
    if group_map is None:
        resolved = default(agent_names)
    elif isinstance(group_map, MarlGroupMapType):
        resolved = group_map.get_group_map(agent_names)
    elif isinstance(group_map, Mapping):
        resolved = {group: names if isinstance(names, str) else list(names) for group, names in group_map.items()}
    else:
        raise TypeError(f"{owner}: group_map must be a dict, a MarlGroupMapType or None, got {group_map!r}.")
    check_marl_grouping(resolved, agent_names)
    return {group: list(names) for group, names in resolved.items()}
