"""TorchRL collector arguments that change nothing here, and the checks of those that do."""

from __future__ import annotations

from typing import Any

from .weight_sync import WeightSyncScheme

#: TorchRL's performance hints, accepted with no effect: our collectors preallocate nothing per
#: policy (``use_buffers``), never wrap or trace the policy (``trust_policy``), never synchronise a
#: device on their own (``no_cuda_sync``) and return a fresh batch every time (``return_same_td``).
INERT = ("use_buffers", "trust_policy", "no_cuda_sync", "return_same_td")


def check_unsupported(owner: str, **options: Any) -> None:
    """Raises a ``ValueError`` naming each TorchRL option given a value that rl_collect does not implement.

    ``compile_policy``/``cudagraph_policy`` (compile the policy yourself before passing it),
    ``weight_updater`` (use ``weight_sync_schemes``), ``interruptor`` (use ``preemptive_threshold``
    of :class:`~rl_collect.MultiSyncCollector`), ``auto_register_policy_transforms=True`` (append
    the recurrent policy's ``InitTracker``/primer transforms to the env before passing it) and
    ``reset_when_done=False`` (done sub-envs are always reset).
    """
    refused = {
        "compile_policy": "compile the policy with torch.compile before passing it",
        "cudagraph_policy": "wrap the policy in tdict.nn.CudaGraphModule before passing it",
        "weight_updater": "pass weight_sync_schemes={'policy': scheme} instead",
        "interruptor": "use MultiSyncCollector(preemptive_threshold=...)",
        "auto_register_policy_transforms": "append InitTracker and the policy's primer transforms to the env yourself",
        "weight_recv_schemes": "workers receive through the scheme given as weight_sync_schemes",
    }
    for name, value in options.items():
        if name == "reset_when_done":
            if value is not True:
                raise ValueError(
                    f"{owner}: reset_when_done must be True (done sub-envs are always reset), got {value!r}."
                )
        elif value not in (None, False, {}):
            raise ValueError(f"{owner}: {name}={value!r} is not supported by rl_collect; {refused[name]}.")


def policy_scheme(owner: str, weight_sync_schemes: Any, weight_sync_scheme: Any = None) -> WeightSyncScheme | None:
    """The scheme for the policy: ``weight_sync_schemes["policy"]`` (TorchRL's spelling) or ``weight_sync_scheme``.

    Raises:
        TypeError: both given, a non-dict ``weight_sync_schemes``, or a value that is no scheme.
        ValueError: a model id other than ``"policy"``.
    """
    if weight_sync_schemes is None:
        scheme = weight_sync_scheme
    else:
        if weight_sync_scheme is not None:
            raise TypeError(f"{owner}: give weight_sync_schemes or weight_sync_scheme, not both.")
        if not isinstance(weight_sync_schemes, dict):
            raise TypeError(
                f"{owner}: weight_sync_schemes must be a dict {{model_id: scheme}}, got {type(weight_sync_schemes).__name__}."
            )
        others = [k for k in weight_sync_schemes if k != "policy"]
        if others:
            raise ValueError(f"{owner}: weight_sync_schemes syncs the 'policy' only, got model ids {others}.")
        scheme = weight_sync_schemes.get("policy")
    if scheme is not None and not isinstance(scheme, WeightSyncScheme):
        raise TypeError(f"{owner}: the weight sync scheme must be a WeightSyncScheme, got {type(scheme).__name__}.")
    return scheme
