"""check_env_specs: compare a short real rollout with what the env's specs promise."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tdict import TensorDictBase
from tdict.seeding import make_generator, use_generator

if TYPE_CHECKING:
    from .env_base import EnvBase

__all__ = ["check_env_specs"]

_STEPS = 3


def _leaves(td: TensorDictBase) -> dict:
    """Leaf key (always a tuple) -> value."""
    return {(k,) if type(k) is str else tuple(k): v for k, v in td.items(True, True)}


def _fmt(key: tuple) -> str:
    return repr(key[0]) if len(key) == 1 else repr(key)


def _compare_keys(env: Any, fake_leaves: dict, real_leaves: dict, optional: set) -> None:
    missing = sorted((k for k in fake_leaves if k not in real_leaves and k not in optional), key=str)
    extra = sorted((k for k in real_leaves if k not in fake_leaves and k not in optional), key=str)
    if missing or extra:
        parts = []
        if missing:
            parts.append(
                f"keys the specs declare but the rollout lacks: {[k if len(k) > 1 else k[0] for k in missing]}"
            )
        if extra:
            parts.append(f"keys the rollout holds but no spec declares: {[k if len(k) > 1 else k[0] for k in extra]}")
        raise AssertionError(
            f"check_env_specs({type(env).__name__}): the keys of the specs and the data differ: "
            + "; ".join(parts)
            + "."
        )


def check_env_specs(
    env: "EnvBase",
    return_contiguous: bool = True,
    check_dtype: bool = True,
    seed: int | None = None,
    tensordict: TensorDictBase | None = None,
    break_when_any_done: bool = False,
) -> None:
    """Runs a short random rollout and checks it against the env's specs.

    Three checks, each raising an ``AssertionError`` that names the key:

    1. the rollout has exactly the keys of ``env.fake_tensordict()`` (root and ``"next"``; state keys
       may or may not be repeated under ``"next"``);
    2. every entry has the spec's shape (expanded over the batch and time dims) and, with
       ``check_dtype``, its dtype;
    3. every value of every step lies inside its spec (action, state, observation and done specs at
       the root; reward, done and observation specs under ``"next"``).

    Args:
        env: the env to check (it is stepped and reset; its seed is changed when ``seed`` is given).
        return_contiguous: check a dense rollout (default) or a lazy stack of steps.
        check_dtype: also compare dtypes.
        seed: seeds the env (``set_seed``) and the check's random actions, drawn from a generator seeded
            with it (:func:`tdict.seeding.use_generator`): torch's global generator is left as it was.
        tensordict: passed (a copy) to ``env.reset``, e.g. the parameters of a stateless env.
        break_when_any_done: forwarded to ``rollout`` (default: run all steps with auto-resets).

    Examples:
        >>> from rl_envs import PendulumEnv, StepCounter, TransformedEnv
        >>> check_env_specs(TransformedEnv(PendulumEnv(batch_size=[2]), StepCounter(10)), seed=0)
    """
    if seed is not None:
        with use_generator(make_generator(seed, env.device, owner="check_env_specs")):
            env.set_seed(seed)
            return check_env_specs(env, return_contiguous, check_dtype, None, tensordict, break_when_any_done)

    fake = env.fake_tensordict()
    if tensordict is not None:
        tensordict = tensordict.clone()
        if not env.batch_locked and tensordict.batch_size != fake.batch_size:
            shape = torch.broadcast_shapes(fake.batch_size, tensordict.batch_size)
            fake = fake.expand(*shape)
    # 1. keys, on one step first: a key that comes and goes would make the rollout's stack fail less clearly
    state_keys = {(k,) if type(k) is str else tuple(k) for k in env.full_state_spec.keys(True, True)}
    optional = {("next", *k) for k in state_keys}  # _step may or may not repeat state entries under "next"
    fake_leaves = _leaves(fake)
    first = env.reset(tensordict.clone() if tensordict is not None else None)
    _compare_keys(env, fake_leaves, _leaves(env.rand_step(first)), optional)
    real = env.rollout(
        _STEPS,
        return_contiguous=return_contiguous,
        tensordict=tensordict,
        auto_reset=True,
        break_when_any_done=break_when_any_done,
        break_when_all_done=False,
    )
    batch = real.batch_size  # [*batch, T]
    time_dim = real.batch_dims - 1
    real_leaves = _leaves(real)
    _compare_keys(env, fake_leaves, real_leaves, optional)

    # 2. shapes and dtypes: the fake step expanded over time
    fake_dims = fake.batch_dims
    for key, value in real_leaves.items():
        expected = fake_leaves.get(key)
        if expected is None:
            continue  # an optional state key under "next"
        if not isinstance(value, torch.Tensor) or not isinstance(expected, torch.Tensor):
            continue  # non-tensor data: no shape to compare
        shape = batch + expected.shape[fake_dims:]
        if value.shape != shape:
            raise AssertionError(
                f"check_env_specs({type(env).__name__}): key {_fmt(key)}: expected shape {list(shape)} "
                f"(the spec's {list(expected.shape)} over the rollout's batch {list(batch)}), got {list(value.shape)}."
            )
        if check_dtype and value.dtype != expected.dtype:
            raise AssertionError(
                f"check_env_specs({type(env).__name__}): key {_fmt(key)}: expected dtype {expected.dtype}, got {value.dtype}."
            )

    # 3. values: every step inside its spec (time moved to the front so the spec's shape is a suffix)
    groups = (
        ((), "action", env.full_action_spec),
        ((), "state", env.full_state_spec),
        ((), "observation", env.full_observation_spec),
        ((), "done", env.full_done_spec),
        (("next",), "reward", env.full_reward_spec),
        (("next",), "done", env.full_done_spec),
        (("next",), "observation", env.full_observation_spec),
    )
    for prefix, group, composite in groups:
        for spec_key in composite.keys(True, True):
            sub = (spec_key,) if type(spec_key) is str else tuple(spec_key)
            key = (*prefix, *sub)
            value = real_leaves.get(key)
            if not isinstance(value, torch.Tensor):
                continue
            spec = composite[spec_key]
            value = value.movedim(time_dim, 0)
            try:
                spec.assert_is_in(value)
            except AssertionError as err:  # its message holds the offending values and the violated bound
                why = str(err)
                raise AssertionError(
                    f"check_env_specs({type(env).__name__}): key {_fmt(key)} is outside its {group} spec "
                    f"{_spec_summary(spec)}: {why}."
                ) from None


def _spec_summary(spec: Any) -> str:
    """A one-line description of a leaf spec with its bounds (``repr`` spans lines for big bounds)."""
    parts = [f"shape={list(spec.shape)}", f"dtype={spec.dtype}"]
    for name in ("low", "high"):
        bound = getattr(spec, name, None)
        if isinstance(bound, torch.Tensor):
            flat = bound.flatten()
            shown = flat[0].item() if bool((flat == flat[0]).all()) else flat[:6].tolist()
            parts.append(f"{name}={shown}")
    n = getattr(spec, "n", None)
    if n is not None:
        parts.append(f"n={n}")
    return f"{type(spec).__name__}({', '.join(parts)})"
