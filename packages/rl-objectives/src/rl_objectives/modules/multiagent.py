"""Multi-agent networks and value mixers (torchrl.modules names).

:class:`MultiAgentMLP` and :class:`MultiAgentConvNet` map per-agent inputs ``[*B, n_agents, ...]`` to
per-agent outputs ``[*B, n_agents, n_out]``. Each agent runs its own copy of a network
(``share_params=False``: the copies' parameters are stacked on a leading dim and one call maps them
over the agent dim with ``torch.vmap``) or all agents run one network (``share_params=True``). A
centralised network feeds every agent the inputs of all agents.

:class:`VDNMixer` and :class:`QMixer` mix the agents' chosen Q-values ``[*B, n_agents]`` into one
team value ``[*B]`` (no trailing singleton dim), for QMIX/VDN training with
:class:`~rl_objectives.losses.qmixer.QMixerLoss`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tdict import TensorDict
from tdict.nn import TensorDictModuleBase, dispatch
from tdict.validation import check_positive_int
from torch import nn

from .models import MLP, ConvNet

__all__ = ["Mixer", "MultiAgentConvNet", "MultiAgentMLP", "MultiAgentNetBase", "QMixer", "VDNMixer"]

_Tensor = torch.Tensor


def _resolve_centralized(owner: str, centralized: Any, kwargs: dict) -> bool:
    """``centralized``, or its British spelling ``centralised`` (TorchRL accepts both)."""
    if "centralised" in kwargs:
        alias = kwargs.pop("centralised")
        if centralized is not None and bool(centralized) != bool(alias):
            raise ValueError(
                f"{owner}: centralized={centralized!r} and centralised={alias!r} disagree; pass one of them."
            )
        centralized = alias
    return bool(centralized) if centralized is not None else False


def _read_tensors(module: nn.Module, tree: dict, batch_size: tuple) -> TensorDict:
    """The tensors ``module`` holds now at the places listed in ``tree`` (name -> None or subtree).

    Read with ``getattr`` rather than :meth:`TensorDict.from_module`: a tensor swapped in by
    ``TensorDict.to_module`` (a loss's target parameters) is a plain attribute, not a parameter.
    """
    return TensorDict(
        {
            name: getattr(module, name) if sub is None else _read_tensors(getattr(module, name), sub, batch_size)
            for name, sub in tree.items()
        },
        batch_size=batch_size,
    )


def _key_tree(params: TensorDict) -> dict:
    return {key: (None if isinstance(value, _Tensor) else _key_tree(value)) for key, value in params.items()}


class MultiAgentNetBase(nn.Module):
    """Shared machinery of the multi-agent networks (subclasses build one agent's network).

    The agents' parameters are registered in one network, ``_empty_net``, stacked on a leading agent
    dim when ``share_params=False``; :attr:`params` shows them as a TensorDict. A call maps that
    network over the agents with ``torch.vmap``, swapping each agent's slice in.

    Args:
        n_agents: number of agents.
        centralized: every agent sees the inputs of all agents (alias ``centralised``).
        share_params: one network for all agents (``True``) or one per agent (``False``).
        agent_dim: the agent dim of the input (``-2`` for vectors, ``-4`` for images).
        vmap_randomness: ``torch.vmap``'s ``randomness`` (``"different"``: each agent draws its own
            dropout masks).
        use_td_params: accepted for TorchRL's signature; both values keep the parameters in the
            registered ``_empty_net`` (state-dict names ``_empty_net.<layer>.weight``). TorchRL's
            ``True`` holds them in a ``TensorDictParams``, whose flat dotted names
            ``TensorDict.to_module`` cannot swap (a loss's target or functional parameters would be
            ignored) and ``torch.compile`` cannot trace.
        **net_kwargs: passed to :meth:`_build_single_net`.
    """

    def __init__(
        self,
        *,
        n_agents: int,
        centralized: bool | None = None,
        share_params: bool | None = None,
        agent_dim: int,
        vmap_randomness: str = "different",
        use_td_params: bool = True,
        **net_kwargs: Any,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.n_agents = check_positive_int(owner, "n_agents", n_agents)
        self.centralized = _resolve_centralized(owner, centralized, net_kwargs)
        if share_params is None:
            raise TypeError(
                f"{owner}: share_params is required (True: one network for all agents, False: one per agent)."
            )
        self.share_params = bool(share_params)
        self.agent_dim = agent_dim
        self.vmap_randomness = vmap_randomness
        self.use_td_params = bool(use_td_params)
        nets = [self._build_single_net(**net_kwargs) for _ in range(1 if self.share_params else self.n_agents)]
        if any(isinstance(p, nn.parameter.UninitializedParameter) for p in nets[0].parameters()):
            raise ValueError(
                f"{owner}: lazy layers are not supported; give the input size (the agents' parameters are stacked at construction)."
            )
        net = nets[0]
        if not self.share_params:
            # the agents' parameters, stacked on a leading agent dim (new leaf parameters), become the
            # template's own: one registered tree, so state_dict, .to() and TensorDict.to_module (a
            # loss's functional and target calls) see them under plain names
            TensorDict.from_modules(*nets, lock=False).to_module(net, return_swap=False)
        self._empty_net = net
        self._param_tree = _key_tree(TensorDict.from_module(net, lock=False))

    @property
    def params(self) -> TensorDict:
        """The agents' parameters as a TensorDict (leading agent dim unless ``share_params``).

        Its leaves are the registered parameters themselves: gradients, optimizers and in-place
        edits act on the network.
        """
        return _read_tensors(self._empty_net, self._param_tree, () if self.share_params else (self.n_agents,))

    def _build_single_net(self, **kwargs: Any) -> nn.Module:  # pragma: no cover - abstract
        raise NotImplementedError

    def _pre_forward_check(self, inputs: _Tensor) -> _Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _call_one(self, params: Any, inputs: _Tensor) -> _Tensor:
        with params.to_module(self._empty_net):
            return self._empty_net(inputs)

    def forward(self, *inputs: _Tensor) -> _Tensor:
        """Per-agent outputs ``[*B, n_agents, n_out]``; several inputs are concatenated on the last dim."""
        if not inputs:
            raise ValueError(f"{type(self).__name__}: expected at least one input tensor.")
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        x = self._pre_forward_check(x)
        if self.share_params:
            out = self._empty_net(x)
            if self.centralized:
                # one network on the joint input: every agent gets the same output
                out = out.unsqueeze(-2).expand(*out.shape[:-1], self.n_agents, out.shape[-1])
            return out
        in_dim = None if self.centralized else self.agent_dim
        params = self.params  # read per call: a loss may have swapped other tensors in
        return torch.vmap(self._call_one, (0, in_dim), -2, randomness=self.vmap_randomness)(params, x)

    def reset_parameters(self) -> None:
        """Re-initialise every agent's network independently."""
        params = self.params
        sets = [params] if self.share_params else list(params.unbind(0))
        with torch.no_grad():
            for one in sets:
                # each agent's slice (views of the stacked parameters) is swapped in, re-drawn in place
                with one.to_module(self._empty_net):
                    for module in self._empty_net.modules():
                        if module is not self._empty_net and hasattr(module, "reset_parameters"):
                            module.reset_parameters()  # pyright: ignore[reportCallIssue]  # (checked by hasattr)

    def extra_repr(self) -> str:
        return f"n_agents={self.n_agents}, centralized={self.centralized}, share_params={self.share_params}, agent_dim={self.agent_dim}"


class MultiAgentMLP(MultiAgentNetBase):
    """An :class:`~rl_objectives.modules.MLP` per agent (torchrl.modules.MultiAgentMLP).

    Input ``[*B, n_agents, n_agent_inputs]``, output ``[*B, n_agents, n_agent_outputs]``.

    ========================  ==============================  =====================================
    ``centralized``           ``share_params=False``          ``share_params=True``
    ========================  ==============================  =====================================
    ``False`` (decentralised)  agent i: MLP_i(x_i)            MLP(x_i) for every agent
    ``True``                  agent i: MLP_i(x_1 | ... | x_n)  MLP(x_1 | ... | x_n), same for all
    ========================  ==============================  =====================================

    (``|`` is concatenation along the feature dim, agents in order.)

    Args:
        n_agent_inputs: input features per agent (an int; lazy sizes are not supported).
        n_agent_outputs: output features per agent.
        n_agents: number of agents.

    Keyword Args:
        centralized: see the table (default ``False``; alias ``centralised``).
        share_params: see the table (required).
        device: where the parameters are created.
        depth, num_cells, activation_class: as in :class:`~rl_objectives.modules.MLP` (default
            activation ``nn.Tanh``).
        use_td_params: see :class:`MultiAgentNetBase`.
        **mlp_kwargs: more :class:`~rl_objectives.modules.MLP` arguments (``norm_class``, ``dropout``, ...).

    Examples:
        >>> import torch
        >>> from rl_objectives.modules.multiagent import MultiAgentMLP
        >>> policy = MultiAgentMLP(4, 2, n_agents=3, centralized=False, share_params=False, depth=1, num_cells=8)
        >>> policy(torch.randn(5, 3, 4)).shape
        torch.Size([5, 3, 2])
        >>> policy.params["0", "weight"].shape   # one weight per agent
        torch.Size([3, 8, 4])
        >>> critic = MultiAgentMLP(4, 1, n_agents=3, centralized=True, share_params=True, depth=1, num_cells=8)
        >>> v = critic(torch.randn(5, 3, 4))
        >>> v.shape, bool((v[:, 0] == v[:, 1]).all())
        (torch.Size([5, 3, 1]), True)
    """

    def __init__(
        self,
        n_agent_inputs: int,
        n_agent_outputs: int,
        n_agents: int,
        *,
        centralized: bool | None = None,
        share_params: bool | None = None,
        device: torch.device | str | None = None,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        activation_class: type[nn.Module] = nn.Tanh,
        use_td_params: bool = True,
        **mlp_kwargs: Any,
    ) -> None:
        self.n_agent_inputs = check_positive_int("MultiAgentMLP", "n_agent_inputs", n_agent_inputs)
        self.n_agent_outputs = check_positive_int("MultiAgentMLP", "n_agent_outputs", n_agent_outputs)
        for name in ("in_features", "out_features"):
            if name in mlp_kwargs:
                raise TypeError(f"MultiAgentMLP: {name} is set from n_agent_inputs / n_agent_outputs; do not pass it.")
        super().__init__(
            n_agents=n_agents,
            centralized=centralized,
            share_params=share_params,
            agent_dim=-2,
            use_td_params=use_td_params,
            device=device,
            depth=depth,
            num_cells=num_cells,
            activation_class=activation_class,
            **mlp_kwargs,
        )

    def _build_single_net(self, **kwargs: Any) -> nn.Module:
        # called before nn.Module attributes exist on the base: read the centralisation flag set there
        n_in = self.n_agent_inputs * (self.n_agents if self.centralized else 1)
        return MLP(in_features=n_in, out_features=self.n_agent_outputs, **kwargs)

    def _pre_forward_check(self, inputs: _Tensor) -> _Tensor:
        if inputs.ndim < 2 or inputs.shape[-2] != self.n_agents or inputs.shape[-1] != self.n_agent_inputs:
            raise ValueError(
                f"MultiAgentMLP: expected an input of shape [*B, n_agents={self.n_agents}, n_agent_inputs={self.n_agent_inputs}], "
                f"got {tuple(inputs.shape)}."
            )
        if self.centralized:
            inputs = inputs.flatten(-2, -1)  # agents' features side by side, agent 0 first
        return inputs


class MultiAgentConvNet(MultiAgentNetBase):
    """A :class:`~rl_objectives.modules.ConvNet` per agent (torchrl.modules.MultiAgentConvNet).

    Input ``[*B, n_agents, C, H, W]``, output ``[*B, n_agents, F]`` (``F``: the flattened features of
    the last convolution). A centralised network stacks all agents' images along the channels
    (``[*B, n_agents * C, H, W]``, agent 0's channels first).

    Args:
        n_agents: number of agents.
        centralized: every agent sees all images (default ``False``; alias ``centralised``).
        share_params: one network for all agents or one per agent (required).

    Keyword Args:
        in_features: channels per agent (an int; lazy sizes are not supported).
        device: where the parameters are created.
        num_cells, kernel_sizes, strides, paddings, activation_class: as in
            :class:`~rl_objectives.modules.ConvNet` (defaults: ``[32, 32, 32]``, 5, 2, 0, ``nn.ELU``).
        use_td_params: see :class:`MultiAgentNetBase`.
        **conv_kwargs: more :class:`~rl_objectives.modules.ConvNet` arguments.

    Examples:
        >>> import torch
        >>> from rl_objectives.modules.multiagent import MultiAgentConvNet
        >>> net = MultiAgentConvNet(2, centralized=False, share_params=False, in_features=3,
        ...                         num_cells=[4], kernel_sizes=3, strides=1)
        >>> net(torch.randn(5, 2, 3, 6, 6)).shape   # 4 channels of 4x4 pixels per agent
        torch.Size([5, 2, 64])
    """

    def __init__(
        self,
        n_agents: int,
        centralized: bool | None = None,
        share_params: bool | None = None,
        *,
        in_features: int | None = None,
        device: torch.device | str | None = None,
        num_cells: int | Sequence[int] | None = None,
        kernel_sizes: int | Sequence[int] = 5,
        strides: int | Sequence[int] = 2,
        paddings: int | Sequence[int] = 0,
        activation_class: type[nn.Module] = nn.ELU,
        use_td_params: bool = True,
        **conv_kwargs: Any,
    ) -> None:
        if in_features is None:
            raise ValueError(
                "MultiAgentConvNet: in_features (channels per agent) is required; lazy sizes are not supported."
            )
        self.in_features = check_positive_int("MultiAgentConvNet", "in_features", in_features)
        super().__init__(
            n_agents=n_agents,
            centralized=centralized,
            share_params=share_params,
            agent_dim=-4,
            use_td_params=use_td_params,
            device=device,
            num_cells=[32, 32, 32] if num_cells is None else num_cells,
            kernel_sizes=kernel_sizes,
            strides=strides,
            paddings=paddings,
            activation_class=activation_class,
            **conv_kwargs,
        )

    def _build_single_net(self, **kwargs: Any) -> nn.Module:
        channels = self.in_features * (self.n_agents if self.centralized else 1)
        return ConvNet(in_features=channels, **kwargs)

    def _pre_forward_check(self, inputs: _Tensor) -> _Tensor:
        if inputs.ndim < 4 or inputs.shape[-4] != self.n_agents or inputs.shape[-3] != self.in_features:
            raise ValueError(
                f"MultiAgentConvNet: expected an input of shape [*B, n_agents={self.n_agents}, C={self.in_features}, H, W], "
                f"got {tuple(inputs.shape)}."
            )
        if self.centralized:
            inputs = inputs.flatten(-4, -3)  # agents' channels stacked, agent 0 first
        return inputs


class Mixer(TensorDictModuleBase):
    """Base of the value mixers: agents' chosen Q-values ``[*B, n_agents]`` -> team value ``[*B]``.

    A mixer is a TensorDict module: it reads ``in_keys`` (the agents' chosen values, then the global
    state when the mixer needs one) and writes ``out_keys[0]``. Called with tensors
    (``mixer(chosen_action_value, state)``) it returns the mixed tensor, so it can also be wrapped in
    a :class:`~tdict.nn.TensorDictModule` as in TorchRL. Subclasses implement :meth:`mix`.

    Per-step values carry no trailing singleton dim: TorchRL's ``[*B, n_agents, 1]`` input is
    ``[*B, n_agents]`` here and its ``[*B, 1]`` output ``[*B]``.

    Args:
        n_agents: number of agents.
        needs_state: whether :meth:`mix` reads the global state.
        state_shape: shape of one global state (``()`` when unused).
        device: where the parameters are created.
        in_keys: default ``[("agents", "chosen_action_value"), "state"]`` (without ``"state"`` when
            the state is not needed).
        out_keys: default ``["chosen_action_value"]``.
    """

    def __init__(
        self,
        n_agents: int,
        needs_state: bool,
        state_shape: Sequence[int] | torch.Size | int,
        device: torch.device | str | None = None,
        in_keys: Any = None,
        out_keys: Any = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.n_agents = check_positive_int(owner, "n_agents", n_agents)
        self.needs_state = bool(needs_state)
        if isinstance(state_shape, int):
            state_shape = (state_shape,)
        self.state_shape = torch.Size(state_shape)
        if any(s <= 0 for s in self.state_shape):
            raise ValueError(f"{owner}: state_shape must hold positive sizes, got {tuple(self.state_shape)}.")
        self.device = device
        default_in = [("agents", "chosen_action_value")] + (["state"] if self.needs_state else [])
        self.in_keys = default_in if in_keys is None else in_keys
        self.out_keys = ["chosen_action_value"] if out_keys is None else out_keys
        if len(self.in_keys) != len(default_in):
            raise ValueError(
                f"{owner}: in_keys must hold {len(default_in)} key(s) (the agents' chosen values"
                f"{', then the global state' if self.needs_state else ''}), got {self.in_keys}."
            )
        if len(self.out_keys) != 1:
            raise ValueError(f"{owner}: out_keys must hold one key (the team value), got {self.out_keys}.")

    def mix(self, chosen_action_value: _Tensor, state: _Tensor | None) -> _Tensor:  # pragma: no cover - abstract
        """``[*B, n_agents]`` (and ``[*B, *state_shape]``) -> ``[*B]``."""
        raise NotImplementedError

    @dispatch(auto_batch_size=False)
    def forward(self, tensordict: Any) -> Any:
        owner = type(self).__name__
        q_key = self.in_keys[0]
        try:
            q = tensordict.get(q_key)
        except KeyError:
            raise KeyError(
                f"{owner}: the input misses the agents' chosen values {q_key!r}; keys present: {sorted(map(str, tensordict.keys(True, True)))}."
            ) from None
        if q.ndim < 1 or q.shape[-1] != self.n_agents:
            hint = " (drop the trailing singleton dim)" if q.ndim >= 2 and q.shape[-2:] == (self.n_agents, 1) else ""
            raise ValueError(
                f"{owner}: {q_key!r} must have shape [*B, n_agents={self.n_agents}], got {tuple(q.shape)}{hint}."
            )
        state = None
        if self.needs_state:
            s_key = self.in_keys[1]
            try:
                state = tensordict.get(s_key)
            except KeyError:
                raise KeyError(
                    f"{owner}: the input misses the global state {s_key!r}; keys present: {sorted(map(str, tensordict.keys(True, True)))}."
                ) from None
            n = len(self.state_shape)
            batch = q.shape[:-1]
            if state.shape != batch + self.state_shape:
                raise ValueError(
                    f"{owner}: the state {s_key!r} has shape {tuple(state.shape)}, expected {tuple(batch + self.state_shape)} "
                    f"(the batch {tuple(batch)} of {q_key!r}, then state_shape {tuple(self.state_shape)}; {n} state dim(s))."
                )
        tensordict.set(self.out_keys[0], self.mix(q, state))
        return tensordict


class VDNMixer(Mixer):
    """Value decomposition (VDN): the team value is the sum of the agents' chosen Q-values.

    Args:
        n_agents: number of agents.
        device: unused (VDN has no parameters); kept for TorchRL's signature.
        in_keys, out_keys: see :class:`Mixer` (default ``[("agents", "chosen_action_value")]`` ->
            ``["chosen_action_value"]``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules.multiagent import VDNMixer
        >>> td = TensorDict({"agents": TensorDict(chosen_action_value=torch.tensor([[1.0, 2.0], [0.5, 0.5]]),
        ...                                       batch_size=[2, 2])}, batch_size=[2])
        >>> VDNMixer(n_agents=2)(td)["chosen_action_value"]
        tensor([3., 1.])
    """

    def __init__(
        self, n_agents: int, device: torch.device | str | None = None, in_keys: Any = None, out_keys: Any = None
    ) -> None:
        super().__init__(
            n_agents=n_agents, needs_state=False, state_shape=(), device=device, in_keys=in_keys, out_keys=out_keys
        )

    def mix(self, chosen_action_value: _Tensor, state: _Tensor | None) -> _Tensor:
        return chosen_action_value.sum(-1)


class QMixer(Mixer):
    """QMIX's monotonic mixing network, conditioned on the global state (Rashid et al., 2018).

    With ``s`` the flattened state and ``q`` the agents' chosen values (a row of ``n_agents``)::

        W1 = |hyper_w_1(s)|  (n_agents x embed)     b1 = hyper_b_1(s)  (embed)
        W2 = |hyper_w_final(s)|  (embed)            V = V(s) (Linear -> ReLU -> Linear, a scalar)
        Q_tot = elu(q @ W1 + b1) @ W2 + V

    The absolute values make ``Q_tot`` non-decreasing in every agent's value, so the greedy joint
    action is each agent's greedy action.

    Args:
        state_shape: shape of the global state (an int or a tuple).
        mixing_embed_dim: width of the mixing layer.
        n_agents: number of agents.
        device: where the parameters are created.
        in_keys, out_keys: see :class:`Mixer` (default ``[("agents", "chosen_action_value"), "state"]``
            -> ``["chosen_action_value"]``).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules.multiagent import QMixer
        >>> mixer = QMixer(state_shape=(5,), mixing_embed_dim=8, n_agents=3)
        >>> td = TensorDict({"state": torch.randn(4, 5),
        ...                  "agents": TensorDict(chosen_action_value=torch.randn(4, 3), batch_size=[4, 3])},
        ...                 batch_size=[4])
        >>> mixer(td)["chosen_action_value"].shape
        torch.Size([4])
        >>> mixer(torch.randn(3), torch.randn(5)).shape   # tensors in, tensor out
        torch.Size([])
    """

    def __init__(
        self,
        state_shape: Sequence[int] | torch.Size | int,
        mixing_embed_dim: int,
        n_agents: int,
        device: torch.device | str | None = None,
        in_keys: Any = None,
        out_keys: Any = None,
    ) -> None:
        super().__init__(
            n_agents=n_agents,
            needs_state=True,
            state_shape=state_shape,
            device=device,
            in_keys=in_keys,
            out_keys=out_keys,
        )
        self.embed_dim = check_positive_int("QMixer", "mixing_embed_dim", mixing_embed_dim)
        self.state_dim = int(math.prod(self.state_shape))
        d, e = self.state_dim, self.embed_dim
        self.hyper_w_1 = nn.Linear(d, e * self.n_agents, device=device)
        self.hyper_w_final = nn.Linear(d, e, device=device)
        self.hyper_b_1 = nn.Linear(d, e, device=device)
        self.V = nn.Sequential(nn.Linear(d, e, device=device), nn.ReLU(), nn.Linear(e, 1, device=device))

    def mix(self, chosen_action_value: _Tensor, state: _Tensor | None) -> _Tensor:
        if state is None:
            raise ValueError("QMixer.mix: QMIX conditions on the global state; got state=None.")
        s = state.flatten(chosen_action_value.ndim - 1) if self.state_shape else state.unsqueeze(-1)
        s = s.to(chosen_action_value.dtype)
        w1 = self.hyper_w_1(s).abs().unflatten(-1, (self.n_agents, self.embed_dim))
        b1 = self.hyper_b_1(s)
        hidden = nn.functional.elu((chosen_action_value.unsqueeze(-1) * w1).sum(-2) + b1)
        w_final = self.hyper_w_final(s).abs()
        return (hidden * w_final).sum(-1) + self.V(s).squeeze(-1)

    def extra_repr(self) -> str:
        return f"n_agents={self.n_agents}, state_shape={tuple(self.state_shape)}, mixing_embed_dim={self.embed_dim}"
