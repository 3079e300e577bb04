"""How a collector gets its env and its policy: env factories, plain-module wrapping, lazy layers."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy
from tdict import TensorDictBase
from tdict.nn import TensorDictModule, TensorDictModuleBase


def make_env(create_env_fn: Any, kwargs: dict | None) -> Any:
    """An env object: ``create_env_fn`` itself when it already is one (duck-typed), else its product."""
    if not isinstance(create_env_fn, type) and hasattr(create_env_fn, "step") and hasattr(create_env_fn, "reset"):
        if kwargs:
            raise TypeError("Collector: create_env_kwargs given with an env instance (they need a factory).")
        return create_env_fn
    if not callable(create_env_fn):
        raise TypeError(f"Collector: expected an env or a callable returning one, got {type(create_env_fn).__name__}.")
    return create_env_fn(**(kwargs or {}))


def wrap_policy(policy: Any, env: Any) -> Any:
    """A ``td -> td`` callable: a plain module is wrapped in a :class:`~tdict.nn.TensorDictModule`.

    Its ``forward`` arguments name the observations it reads (a module with one argument named
    otherwise, like ``nn.Linear``'s ``input``, reads the env's only observation, or ``"observation"``);
    it writes the env's action keys, and when it returns a tuple, its extra outputs as ``"output1"``,
    ``"output2"``, ... (one dry run on a zero step tells). A ``forward(tensordict)`` takes the
    TensorDict itself and is not wrapped.

    Raises:
        TypeError: ``forward`` needs arguments that are no observation of the env.
    """
    if policy is None or isinstance(policy, TensorDictModuleBase) or not isinstance(policy, nn.Module):
        return policy
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    named = {n: p for n, p in inspect.signature(policy.forward).parameters.items() if p.kind not in kinds}
    if set(named) in ({"tensordict"}, {"td"}):
        return policy
    observations = list(env.observation_keys)
    required = [n for n, p in named.items() if p.default is inspect.Parameter.empty]
    if required and all(n in observations for n in required):
        in_keys: list = [n for n in named if n in observations]
    elif len(required) == 1:
        in_keys = ["observation"] if "observation" in observations else observations
        if len(in_keys) != 1:
            raise TypeError(
                f"Collector: the policy's forward({required[0]}) reads one observation; the env has {observations} "
                "and none is 'observation'. Name forward's arguments after the observations, or wrap the module "
                "in a tdict.nn.TensorDictModule with explicit in_keys."
            )
    else:
        raise TypeError(
            f"Collector: Arguments to policy.forward are incompatible with entries in the env's observation spec: "
            f"forward takes {list(named)}, the observations are {observations}. Name forward's arguments after "
            "the observations, or wrap the module in a tdict.nn.TensorDictModule."
        )
    out_keys = list(env.action_keys)
    step = env.fake_tensordict()
    device = next((p.device for p in policy.parameters()), None)
    with torch.no_grad():
        out = policy(*[step.get(k) if device is None else step.get(k).to(device) for k in in_keys])
    if isinstance(out, tuple):
        out_keys += [f"output{i}" for i in range(1, len(out))]
    return TensorDictModule(policy, in_keys=in_keys, out_keys=out_keys)


def policy_only_entries(
    policy: Any, env: Any, dry_run: bool, policy_device: torch.device | None = None
) -> TensorDictBase | None:
    """Run the policy once on a fake step (no grad) when it has lazy layers or ``dry_run`` is set.

    Lazy layers (``nn.LazyLinear``, ``MLP(in_features=None)``) get their shapes before the first
    batch, so an optimizer or a loss built after the collector sees real parameters. With
    ``dry_run``, the entries the policy writes besides the action come back as zeros: random-action
    steps (``init_random_frames``) carry them too, so every batch has the same keys (TorchRL's
    collectors give random steps the policy's layout the same way).
    """
    lazy = isinstance(policy, nn.Module) and any(is_lazy(p) for p in policy.parameters())
    if policy is None or not (lazy or dry_run):
        return None
    fake = env.fake_tensordict()
    before = set(fake.keys(include_nested=True, leaves_only=True))
    with torch.no_grad():
        out = policy(fake.to(policy_device) if policy_device is not None else fake.copy())
    out = fake if out is None else out
    actions = set(env.action_keys)
    written = [k for k in out.keys(include_nested=True, leaves_only=True) if k not in before and k not in actions]
    if not dry_run or not written:
        return None
    zeros = out.select(*written).apply(torch.zeros_like)
    if policy_device is None:
        return zeros
    env_leaf = next(iter(fake.values(include_nested=True, leaves_only=True)), None)
    return zeros.to(env_leaf.device) if env_leaf is not None else zeros  # random steps live on the env's device


def make_policy(owner: str, policy: Any, policy_factory: Any, weight_sync_schemes: Any = None) -> Any:
    """The policy to run: ``policy``, or what ``policy_factory()`` returns.

    Raises:
        TypeError: both given (allowed only with ``weight_sync_schemes``, where ``policy`` is the
            learner's copy the weights are read from), or a factory that is not callable.
    """
    if policy_factory is None:
        return policy
    if not callable(policy_factory):
        raise TypeError(f"{owner}: policy_factory must be callable, got {type(policy_factory).__name__}.")
    if policy is not None and weight_sync_schemes is None:
        raise TypeError(f"{owner}: policy and policy_factory are mutually exclusive (without weight_sync_schemes).")
    return policy_factory()


def weights_of(owner: str, policy_or_weights: Any) -> Any:
    """Weights as a TensorDict: a module's (``TensorDict.from_module``), a TensorDict as is, a dict of
    them per worker as a dict of TensorDicts; ``None`` stays ``None``.

    Raises:
        TypeError: anything else.
    """
    from tdict import TensorDict

    if policy_or_weights is None or isinstance(policy_or_weights, TensorDictBase):
        return policy_or_weights
    if isinstance(policy_or_weights, nn.Module):
        return TensorDict.from_module(policy_or_weights)
    if isinstance(policy_or_weights, dict):
        if all(isinstance(k, int) for k in policy_or_weights):
            return {k: weights_of(owner, v) for k, v in policy_or_weights.items()}
        return TensorDict(policy_or_weights)  # a nested dict of tensors
    raise TypeError(
        f"{owner}: expected a TensorDict of weights, a module or a {{worker_id: weights}} dict, got "
        f"{type(policy_or_weights).__name__}."
    )
