"""What an env precomputes from its specs, so that step/reset/rollout never walk a spec."""

from __future__ import annotations

from typing import Any

import torch
from tdict.specs import Composite

from .mdp import MDPShift


def _leaf_keys(spec: Composite) -> list:
    return list(spec.keys(True, True))


def _root_of(key: Any) -> tuple:
    return () if type(key) is str else tuple(key[:-1])


def _leaf_name(key: Any) -> str:
    return key if type(key) is str else key[-1]


class EnvKeys:
    """The keys of an env and the per-step checks derived from its specs.

    Built lazily on first use and dropped whenever a spec is assigned.
    """

    def __init__(self, specs: dict[str, Composite], batch_dims: int) -> None:
        self.action_keys = _leaf_keys(specs["full_action_spec"])
        self.reward_keys = _leaf_keys(specs["full_reward_spec"])
        self.done_keys = _leaf_keys(specs["full_done_spec"])
        self.observation_keys = _leaf_keys(specs["full_observation_spec"])
        self.state_keys = _leaf_keys(specs["full_state_spec"])
        # one "_reset" entry per sub-tree that holds done flags (the root for single-agent envs)
        roots = []
        for key in self.done_keys:
            root = _root_of(key)
            if root not in roots:
                roots.append(root)
        self.done_roots = roots
        self.reset_keys = ["_reset" if not root else (*root, "_reset") for root in roots]
        # the flag that stops a rollout: "done" when declared, else every done key
        done_only = [k for k in self.done_keys if _leaf_name(k) == "done"]
        self.stop_keys = done_only or list(self.done_keys)
        self.flat = all(type(k) is str for k in (*self.action_keys, *self.reward_keys, *self.done_keys))
        self.shift = MDPShift(self.action_keys, self.reward_keys, self.done_keys)
        action_spec = specs["full_action_spec"]
        # (key, feature shape, dtype, full shape) of every action: a cheap compare on each step, no spec walk.
        # Feature shapes (after the env's batch dims) let batch-unlocked envs take any leading batch.
        self.batch_dims = batch_dims
        self.action_checks = tuple(
            (k, action_spec[k].shape[batch_dims:], action_spec[k].dtype, action_spec[k].shape) for k in self.action_keys
        )
        self.action_specs = tuple((k, action_spec[k]) for k in self.action_keys)
        done_spec, reward_spec = specs["full_done_spec"], specs["full_reward_spec"]
        self.output_checks = tuple(
            (k, spec.shape[batch_dims:], spec.dtype, spec.shape)
            for k, spec in [(k, reward_spec[k]) for k in self.reward_keys] + [(k, done_spec[k]) for k in self.done_keys]
        )
        self.first_step_checked = False
        # how to fill the done flags a ``_step`` leaves out (TorchRL's rule), found on the first step
        self.done_fill: tuple = ()


def plan_done_fill(next_td: Any, done_keys: list) -> tuple:
    """``(missing key, rule, source keys)`` for each declared done flag ``next_td`` lacks.

    TorchRL's rule: a missing ``terminated`` is the ``done`` flag (only without ``truncated``: the
    split of ``done`` into the two is unknowable), a missing ``done`` is ``terminated | truncated``,
    any other missing flag (``truncated``) is ``False``. A step that writes neither ``done`` nor
    ``terminated`` is left as it is, for the output check to refuse (TorchRL would fill ``False``
    and never end the episode).
    """
    present = set(next_td.keys(True, True))
    plan = []
    for key in done_keys:
        if key in present:
            continue
        root, name = _root_of(key), _leaf_name(key)

        def sibling(leaf: str) -> Any:
            return (*root, leaf) if root else leaf

        done, terminated, truncated = sibling("done"), sibling("terminated"), sibling("truncated")
        if name == "terminated" and done in present:
            if truncated in present:
                raise RuntimeError(
                    f"step output: {terminated!r} is missing and cannot be inferred from {done!r} when "
                    f"{truncated!r} is present; write {terminated!r} too."
                )
            plan.append((key, "copy", (done,)))
        elif name == "done" and terminated in present:
            plan.append((key, "or", (terminated, truncated) if truncated in present else (terminated,)))
        elif name not in ("done", "terminated"):
            plan.append((key, "zero", ()))
    return tuple(plan)


def fill_done(next_td: Any, plan: tuple, done_spec: Composite, batch_dims: int) -> None:
    """Writes the missing done flags of ``next_td`` following ``plan`` (see :func:`plan_done_fill`)."""
    for key, rule, sources in plan:
        if rule == "copy":
            next_td.set(key, next_td.get(sources[0]).clone())
        elif rule == "or":
            flag = next_td.get(sources[0])
            for other in sources[1:]:
                flag = flag | next_td.get(other)
            next_td.set(key, flag if len(sources) > 1 else flag.clone())
        else:
            next_td.set(key, done_spec[key].zero(next_td.batch_size[: next_td.batch_dims - batch_dims]))


def any_done(next_td: Any, stop_keys: list) -> bool:
    """Whether any sub-env finished (reads the declared done flags)."""
    for key in stop_keys:
        flag = next_td.get(key)
        if flag.ndim == 0:
            if flag:
                return True
        elif flag.any():
            return True
    return False


def spec_shape_error(
    what: str, key: Any, expected_shape: torch.Size, expected_dtype: torch.dtype, value: Any
) -> ValueError:
    got = (
        f"shape {list(value.shape)} and dtype {value.dtype}"
        if isinstance(value, torch.Tensor)
        else f"a {type(value).__name__}"
    )
    return ValueError(
        f"{what} {key!r}: expected shape {list(expected_shape)} and dtype {expected_dtype} (from the spec), got {got}."
    )
