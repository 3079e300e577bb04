"""Recurrent TensorDict modules, ``LSTMModule`` and ``GRUModule`` (torchrl.modules names), with resets.

A recurrent module runs in one of two modes:

- **step mode** (the default): the input TensorDict holds one step per env, batch ``[*B]``. The module
  reads the input ``[*B, F]`` and the hidden state ``[*B, num_layers, H]`` (TorchRL's layout: layers
  before features), zeroes the state where ``"is_init"`` (batch shape) is True, and writes the output
  ``[*B, H]`` and the next state under ``("next", <state key>)``, which ``step_mdp`` carries to the
  next step. This is how a policy runs in an env or a collector.
- **sequence mode** (``with set_recurrent_mode(True):`` or ``default_recurrent_mode=True``): the input
  holds whole sequences, batch ``[*B, T]`` with time as the last batch dim (the rollout layout). The
  state is read at the first step only and reset at every step where ``"is_init"`` is True inside the
  sequence, so the output ``[*B, T, H]`` equals T step-mode calls. This is how a loss replays
  sequences sampled from a buffer.

Resets inside a sequence: the fused kernel (``python_based=False``) splits each sequence at its
resets, runs every segment as its own row of a packed batch (so padding never touches a state), and
scatters the outputs back; ``python_based=True`` loops over time with the cell math written out in
torch ops, resetting the state in place of the split (no cuDNN: it traces under ``torch.compile`` and
``vmap``). Under ``torch.compile`` both run the python loop, because dynamo does not trace ``nn.LSTM``.

The next state in sequence mode: as in TorchRL, ``("next", <state key>)`` holds a state only at the
last step of each segment (the step before a reset, and the final step) and zeros elsewhere (the
fused kernel only returns final states). Unlike TorchRL, where a segment's final state can come out
of the padding, the values written here are exact, whichever backend runs.

``recurrent_backend="triton"`` (needs the optional ``rl-kernels`` package: ``rl-objectives[kernels]``):
sequence mode runs layer by layer through ``rl_kernels.lstm_with_resets`` / ``gru_with_resets``, which
take the resets inside one fused kernel (no split, pad or scatter) and return the states at every
step, from which the segment-end states are kept. On CUDA tensors the Triton kernels run; on CPU
tensors they run under Triton's interpreter when ``TRITON_INTERPRET=1`` is set (tests), and
rl-kernels' pure-torch loop runs otherwise. Step mode and the python loop (``python_based=True``,
``torch.compile``) are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import importlib.util

import torch
import torch.nn.functional as F
from tdict.nn import TensorDictModuleBase, dispatch
from tdict.nn import ScopedSwitch  # the mechanics of set_interaction_type
from tdict.specs import Composite, Unbounded
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

__all__ = ["GRUModule", "LSTMModule", "recurrent_mode", "set_recurrent_mode"]

NestedKey = Any
States = tuple  # a tuple of hidden-state tensors, each [N, num_layers, H_i]

_MODE_NAMES = {"recurrent": True, "sequential": False}


def recurrent_mode() -> bool | None:
    """The mode set by the innermost :class:`set_recurrent_mode` block (``None`` outside any block).

    Examples:
        >>> from rl_objectives.modules.recurrent import recurrent_mode, set_recurrent_mode
        >>> recurrent_mode() is None
        True
        >>> with set_recurrent_mode(True):
        ...     recurrent_mode()
        True
    """
    return set_recurrent_mode._current


class set_recurrent_mode(ScopedSwitch):
    """Run recurrent modules in sequence mode (``True``) or step mode (``False``) inside a block.

    Overrides every module's ``default_recurrent_mode`` while the block runs; the previous mode comes
    back on exit, also when the block raises. Usable as a decorator. Like ``set_interaction_type``,
    it is a scoped switch, not a persistent one.

    Args:
        mode: ``True`` / ``"recurrent"`` (sequence mode), ``False`` / ``"sequential"`` (step mode), or
            ``None`` (each module's own default). Defaults to ``True``.

    Raises:
        ValueError: for any other ``mode`` (raised at construction).

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules.recurrent import GRUModule, set_recurrent_mode
        >>> gru = GRUModule(3, 8, in_key="obs", out_key="features")
        >>> td = TensorDict(obs=torch.randn(2, 5, 3), is_init=torch.zeros(2, 5, dtype=torch.bool), batch_size=[2, 5])
        >>> with set_recurrent_mode(True):
        ...     gru(td)["features"].shape
        torch.Size([2, 5, 8])
    """

    def __init__(self, mode: bool | str | None = True) -> None:
        if isinstance(mode, str) and mode in _MODE_NAMES:
            mode = _MODE_NAMES[mode]
        if mode is not None and not isinstance(mode, bool):
            raise ValueError(
                f"set_recurrent_mode: mode must be True, False, None, 'recurrent' or 'sequential', got {mode!r}."
            )
        super().__init__(mode)
        self.mode = mode


# ---------------------------------------------------------------------------- cell math
def _weight(dicts: tuple, name: str) -> torch.Tensor:
    """An RNN weight by name: a parameter, or a plain tensor swapped in by ``to_module`` (instance dict)."""
    value = dicts[0].get(name)
    return dicts[1][name] if value is None else value


def _layer_weights(dicts: tuple, layer: int, bias: bool, proj: bool) -> tuple:
    """``(w_ih, w_hh, b_ih, b_hh, w_hr)`` of one layer, read at call time (functional params swap them)."""
    return (
        _weight(dicts, f"weight_ih_l{layer}"),
        _weight(dicts, f"weight_hh_l{layer}"),
        _weight(dicts, f"bias_ih_l{layer}") if bias else None,
        _weight(dicts, f"bias_hh_l{layer}") if bias else None,
        _weight(dicts, f"weight_hr_l{layer}") if proj else None,
    )


def _lstm_cell(x: torch.Tensor, state: tuple, w: tuple) -> tuple:
    """One LSTM step (gate order i, f, g, o, as ``nn.LSTM``); ``state = (h, c)``."""
    w_ih, w_hh, b_ih, b_hh, w_hr = w
    h, c = state
    i, f, g, o = (F.linear(x, w_ih, b_ih) + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    if w_hr is not None:  # proj_size > 0: the output and h are projected, c is not
        h = F.linear(h, w_hr)
    return h, c


def _gru_cell(x: torch.Tensor, state: tuple, w: tuple) -> tuple:
    """One GRU step (gate order r, z, n, as ``nn.GRU``); ``state = (h,)``."""
    w_ih, w_hh, b_ih, b_hh, _ = w
    (h,) = state
    i_r, i_z, i_n = F.linear(x, w_ih, b_ih).chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    return (n + z * (h - n),)


def _stacked_step(cell: Callable, params: tuple, cfg: tuple, x: torch.Tensor, states: States) -> tuple:
    """One step of a multi-layer RNN: ``x`` ``[N, F]``, states ``[N, L, H_i]`` -> ``(y [N, H], states)``.

    ``params``: the RNN's parameter dict and instance dict; ``cfg = (num_layers, bias, proj, dropout)``,
    ``dropout`` already 0 outside training.
    """
    layers, bias, proj, dropout = cfg
    per_layer = []
    for layer in range(layers):
        new = cell(x, tuple(s[:, layer] for s in states), _layer_weights(params, layer, bias, proj))
        per_layer.append(new)
        x = new[0]
        if dropout and layer < layers - 1:  # nn.LSTM/GRU drop between layers, not after the last
            x = F.dropout(x, dropout, training=True)
    return x, tuple(torch.stack([new[i] for new in per_layer], 1) for i in range(len(states)))


def _get(tensordict: Any, key: NestedKey, what: str, hint: str = "") -> torch.Tensor:
    try:
        return tensordict.get(key)
    except KeyError:
        raise KeyError(
            f"{what}: the input has no {key!r} entry{hint}; it holds {sorted(map(str, tensordict.keys(True)))}."
        ) from None


# ---------------------------------------------------------------------------- shared module
class _RecurrentModule(TensorDictModuleBase):
    """What LSTMModule and GRUModule share: keys, modes, shape checks, the step and sequence paths."""

    # the RNN's parameter and instance dicts (set by _bind_weights, kept out of the module tree)
    _params: tuple[dict, dict]

    _rnn_attr = ""
    _state_names: tuple = ()
    _cell: Callable = staticmethod(_lstm_cell)

    def _setup(
        self,
        rnn: nn.RNNBase,
        in_key: NestedKey | None,
        in_keys: Sequence | None,
        out_key: NestedKey | None,
        out_keys: Sequence | None,
        default_recurrent_mode: bool | None,
        python_based: bool,
    ) -> None:
        name, n = type(self).__name__, len(self._state_names)
        if (in_key is None) == (in_keys is None):
            raise ValueError(
                f"{name}: give exactly one of in_key and in_keys, got in_key={in_key!r}, in_keys={in_keys!r}."
            )
        if (out_key is None) == (out_keys is None):
            raise ValueError(
                f"{name}: give exactly one of out_key and out_keys, got out_key={out_key!r}, out_keys={out_keys!r}."
            )
        if in_key is not None:
            in_keys = [in_key, *self._state_names]
        if out_key is not None:
            out_keys = [out_key, *(("next", s) for s in self._state_names)]
        assert in_keys is not None and out_keys is not None  # one of each pair was given (checked above)
        in_keys, out_keys = list(in_keys), list(out_keys)
        if len(in_keys) == n + 1:
            in_keys.append("is_init")
        if len(in_keys) != n + 2:
            raise ValueError(
                f"{name}: in_keys must hold the input, the {n} state key(s) and optionally the reset key "
                f"(default 'is_init'); got {len(in_keys)} keys: {in_keys}."
            )
        if len(out_keys) != n + 1:
            raise ValueError(
                f"{name}: out_keys must hold the output and the {n} next-state key(s); got {len(out_keys)} keys: {out_keys}."
            )
        if default_recurrent_mode is not None and not isinstance(default_recurrent_mode, bool):
            raise ValueError(f"{name}: default_recurrent_mode must be a bool or None, got {default_recurrent_mode!r}.")
        self.in_keys = in_keys
        self.out_keys = out_keys
        self.add_module(self._rnn_attr, rnn)
        # dynamo refuses to trace anything that touches an nn.LSTM/GRU object (even an attribute), so
        # the traced path reads the sizes cached here and the weights through the RNN's own parameter
        # and instance dicts (the same dict objects: .to(), load_state_dict, functional_call and
        # tdict's to_module, which puts plain tensors in the instance dict, stay visible)
        self._bind_weights()
        proj = getattr(rnn, "proj_size", 0)
        self._input_size = rnn.input_size
        self._num_layers = rnn.num_layers
        # the feature size of each state (LSTM's h is proj_size wide when projected)
        self._sizes = tuple(proj if (i == 0 and proj > 0) else rnn.hidden_size for i in range(len(self._state_names)))
        self._cfg = (rnn.num_layers, rnn.bias, proj > 0, float(rnn.dropout))
        self._recurrent_mode = bool(default_recurrent_mode)
        self.python_based = bool(python_based)

    def _set_kernel_opts(self, opts: dict | None, backend: Any, precision: Any, recompute: Any) -> None:
        self._kernel_opts = opts
        # what set_recurrent_mode's copy is built with
        self._backend_args = {
            "recurrent_backend": backend,
            "recurrent_matmul_precision": precision,
            "recurrent_recompute": recompute,
        }

    def _bind_weights(self) -> None:
        rnn = self._rnn
        self.__dict__["_params"] = (rnn._parameters, rnn.__dict__)

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop("_params", None)  # rebound on load (the RNN's instance dict holds weakrefs)
        return state

    def __setstate__(self, state: dict) -> None:
        # copy.deepcopy and pickle build a new instance dict for the RNN: point at the new one
        super().__setstate__(state)
        self._bind_weights()

    @staticmethod
    def _check_backend(
        name: str, backend: Any, compute_dtype: Any, matmul_precision: Any, recompute: Any, proj_size: int = 0
    ) -> dict[str, Any] | None:
        """TorchRL 0.14's recurrent-kernel options. ``None`` for the default pad path (TorchRL's defaults
        only); for ``recurrent_backend="triton"``, the rl-kernels options ``{"recompute", "precision"}``."""
        backend = "pad" if backend is None else backend
        if backend == "triton":
            if importlib.util.find_spec("rl_kernels") is None:
                raise ImportError(
                    f"{name}: recurrent_backend='triton' needs the rl-kernels package "
                    "(pip install 'rl-objectives[kernels]'); use recurrent_backend='pad'."
                )
            if proj_size:
                raise NotImplementedError(
                    f"{name}: recurrent_backend='triton' does not support proj_size > 0 (got {proj_size}); use 'pad'."
                )
            accepted = (
                ("recurrent_compute_dtype", compute_dtype, (torch.float32,)),
                ("recurrent_matmul_precision", matmul_precision, ("auto", "ieee", "tf32")),
                ("recurrent_recompute", recompute, ("none", "full")),
            )
            for arg, value, allowed in accepted:
                if value is not None and value not in allowed:
                    raise NotImplementedError(
                        f"{name}: {arg}={value!r} is not supported with recurrent_backend='triton'; accepted: "
                        f"{list(allowed)}."
                    )
            return {"recompute": recompute == "full", "precision": matmul_precision or "auto"}
        defaults = (
            ("recurrent_backend", backend, "pad"),
            ("recurrent_compute_dtype", compute_dtype, torch.float32),
            ("recurrent_matmul_precision", matmul_precision, "auto"),
            ("recurrent_recompute", recompute, "none"),
        )
        for arg, value, default in defaults:
            if value is not None and value != default:
                raise NotImplementedError(
                    f"{name}: {arg}={value!r} is not supported with recurrent_backend='pad'; only TorchRL's default "
                    f"{default!r} (the padded scan this module runs) is; recurrent_backend='triton' (rl-kernels' fused "
                    "kernels) takes recurrent_matmul_precision 'ieee'/'tf32' and recurrent_recompute 'full'."
                )
        return None

    @staticmethod
    def _check_rnn(
        name: str, kind: str, rnn: Any, cls: type, sizes: tuple, batch_first: bool, bidirectional: bool
    ) -> None:
        """Argument checks shared by both constructors (before any module is built)."""
        if rnn is not None:
            if not isinstance(rnn, cls):
                raise TypeError(f"{name}: {kind.lower()} must be a torch.nn.{kind}, got {type(rnn).__name__}.")
            if any(s is not None for s in sizes):
                raise ValueError(
                    f"{name}: pass either an nn.{kind} instance or its sizes, not both (got sizes {sizes})."
                )
            batch_first, bidirectional = rnn.batch_first, rnn.bidirectional
        elif any(not isinstance(s, int) or isinstance(s, bool) or s <= 0 for s in sizes):
            raise ValueError(
                f"{name}: input_size and hidden_size must be positive ints (or pass {kind.lower()}=...), got {sizes}."
            )
        if bidirectional:
            raise NotImplementedError(f"{name}: bidirectional {kind}s are not supported (a policy only sees the past).")
        if not batch_first:
            raise ValueError(f"{name}: the {kind} must have batch_first=True, got batch_first={batch_first}.")

    @property
    def _rnn(self) -> nn.RNNBase:
        return cast(nn.RNNBase, self._modules[self._rnn_attr])  # registered in __init__

    @property
    def recurrent_mode(self) -> bool:
        """True in sequence mode: the innermost :class:`set_recurrent_mode` block, else the module default."""
        mode = set_recurrent_mode._current
        return self._recurrent_mode if mode is None else mode

    @recurrent_mode.setter
    def recurrent_mode(self, value: Any) -> None:
        raise RuntimeError(
            f"{type(self).__name__}.recurrent_mode cannot be set in place: use `with set_recurrent_mode(...)`, "
            "the default_recurrent_mode argument or module.set_recurrent_mode(mode), which returns a copy."
        )

    def set_recurrent_mode(self, mode: bool = True) -> _RecurrentModule:
        """A copy whose default mode is ``mode``, sharing this module's ``nn`` weights (TorchRL's method).

        Returns ``self`` when the default already is ``mode``.
        """
        if not isinstance(mode, bool):
            raise TypeError(f"{type(self).__name__}.set_recurrent_mode: mode must be a bool, got {mode!r}.")
        if mode is self._recurrent_mode:
            return self
        out = type(self)(
            **{self._rnn_attr: self._rnn},
            in_keys=list(self.in_keys),
            out_keys=list(self.out_keys),
            default_recurrent_mode=mode,
            python_based=self.python_based,
            **self._backend_args,
        )
        out.train(self.training)
        return out

    def recurrent_state_spec(self, batch_size: Sequence[int] | torch.Size = ()) -> Composite:
        """The hidden-state entries as a Composite of zero-initialised ``Unbounded`` specs.

        One entry per state key (``in_keys[1:-1]``) of shape ``[*batch_size, num_layers, H]``, with the
        weights' dtype and device: what ``rl_envs.TensorDictPrimer`` takes to add the states to an
        env's reset output (``TensorDictPrimer(module.recurrent_state_spec(env.batch_size))``).
        """
        batch = tuple(batch_size)
        weight = cast(torch.Tensor, self._rnn.weight_ih_l0)  # (an RNN's per-layer weights are dynamic attributes)
        entries = {
            key: Unbounded(shape=(*batch, self._num_layers, size), dtype=weight.dtype, device=weight.device)
            for key, size in zip(self.in_keys[1:-1], self._sizes)
        }
        return Composite(entries, shape=batch)

    def make_tensordict_primer(self) -> Any:
        """Not available here: env transforms live in ``rl_envs``, which this package may not import.

        Raises:
            NotImplementedError: always, with the one-line replacement.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.make_tensordict_primer: rl_objectives does not depend on rl_envs; build the primer "
            "there: `rl_envs.TensorDictPrimer(module.recurrent_state_spec(env.batch_size))` (and add rl_envs.InitTracker() "
            "to write 'is_init')."
        )

    # ------------------------------------------------------------------ call
    @dispatch  # tensor calls: the batch dims are those the inputs share (is_init's shape)
    def forward(self, tensordict: Any) -> Any:
        name = type(self).__name__
        value_key, *state_keys, init_key = self.in_keys
        batch = tensordict.batch_size
        recurrent = self.recurrent_mode
        value = _get(tensordict, value_key, name)
        is_init = _get(tensordict, init_key, name, " (the reset flag: add rl_envs' InitTracker transform to the env)")
        states = [tensordict.get(key, None) for key in state_keys]
        self._check_inputs(name, tensordict, batch, recurrent, value, is_init, states, state_keys)
        if is_init.ndim == len(batch) + 1:  # TorchRL's trailing 1
            is_init = is_init.squeeze(-1)
        is_init = is_init.bool()
        if states[0] is None:  # no state yet (first call outside an env with a primer): start from zeros
            states = [value.new_zeros(*batch, self._num_layers, size) for size in self._sizes]
        if recurrent:
            y, new = self._sequence(value, tuple(states), is_init, batch)
        else:
            y, new = self._step(value, tuple(states), is_init, batch)
        tensordict.set(self.out_keys[0], y)
        for key, state in zip(self.out_keys[1:], new):
            tensordict.set(key, state)
        return tensordict

    def _check_inputs(
        self,
        name: str,
        td: Any,
        batch: torch.Size,
        recurrent: bool,
        value: torch.Tensor,
        is_init: torch.Tensor,
        states: list,
        state_keys: list,
    ) -> None:
        """Shape checks, all before the first write."""
        nb = len(batch)
        if recurrent:
            if nb == 0:
                raise ValueError(
                    f"{name}: sequence mode needs a time dim, the last batch dim; the input has batch_size []."
                )
            names = td.names
            if "time" in names and names[-1] != "time":
                raise ValueError(
                    f"{name}: sequence mode reads time from the last batch dim, but the dims are named {names}."
                )
        in_size = self._input_size
        if value.shape[:nb] != batch or value.ndim != nb + 1 or value.shape[-1] != in_size:
            raise ValueError(
                f"{name}: {self.in_keys[0]!r} must have shape [*batch_size, input_size] = {[*batch, in_size]} "
                f"({'sequence' if recurrent else 'step'} mode), got {list(value.shape)}."
            )
        if not (
            is_init.shape == batch
            or (is_init.ndim == nb + 1 and is_init.shape[:nb] == batch and is_init.shape[-1] == 1)
        ):
            raise ValueError(
                f"{name}: {self.in_keys[-1]!r} must have the batch shape {list(batch)}, got {list(is_init.shape)}."
            )
        missing = [key for key, s in zip(state_keys, states) if s is None]
        if missing and len(missing) != len(states):
            raise KeyError(
                f"{name}: the input holds some hidden states but not {missing}; give all of {state_keys} or none."
            )
        layers = self._num_layers
        for key, s, size in zip(state_keys, states, self._sizes):
            if s is not None and s.shape != (*batch, layers, size):
                raise ValueError(
                    f"{name}: {key!r} must have shape [*batch_size, num_layers, H] = {[*batch, layers, size]}, got {list(s.shape)}."
                )

    def _use_loop(self) -> bool:
        return self.python_based or torch.compiler.is_compiling()

    def _loop_step(self, x: torch.Tensor, states: States) -> tuple:
        layers, bias, proj, dropout = self._cfg
        cfg = (layers, bias, proj, dropout if self.training else 0.0)
        return _stacked_step(self._cell, self._params, cfg, x, states)

    def _fused(self, x: torch.Tensor | PackedSequence, states: States) -> tuple:
        """The ``nn`` kernel on ``x`` ``[N, T, F]`` (or packed) from ``states`` ``[N, L, H_i]``."""
        hx = tuple(s.transpose(0, 1).contiguous() for s in states)
        y, final = self._rnn(x, hx if len(hx) > 1 else hx[0])  # pyright: ignore[reportGeneralTypeIssues]  # (len >= 1)
        final = final if isinstance(final, tuple) else (final,)
        return y, tuple(f.transpose(0, 1) for f in final)

    def _step(self, value: torch.Tensor, states: States, is_init: torch.Tensor, batch: torch.Size) -> tuple:
        x = value.reshape(-1, value.shape[-1])
        reset = is_init.reshape(-1, 1, 1)
        states = tuple(s.reshape(-1, *s.shape[-2:]).masked_fill(reset, 0.0) for s in states)
        if self._use_loop():
            y, new = self._loop_step(x, states)
        else:
            y, new = self._fused(x.unsqueeze(1), states)
            y = y.squeeze(1)
        return y.reshape(*batch, y.shape[-1]), tuple(s.reshape(*batch, *s.shape[-2:]) for s in new)

    def _sequence(self, value: torch.Tensor, states: States, is_init: torch.Tensor, batch: torch.Size) -> tuple:
        T = batch[-1]
        x = value.reshape(-1, T, value.shape[-1])
        n = x.shape[0]
        init = is_init.reshape(n, T)
        # the state enters at the first step only (later stored states belong to the collection run)
        first = tuple(s.reshape(n, T, *s.shape[-2:])[:, 0].masked_fill(init[:, :1, None], 0.0) for s in states)
        if self._use_loop():
            y, new = self._loop(x, first, init)
        elif self._kernel_opts is not None:
            y, new = self._kernels(x, first, init)
        elif T > 1 and bool(init[:, 1:].any()):
            y, new = self._segmented(x, first, init)
        else:
            y, final = self._fused(x, first)
            new = tuple(torch.cat([f.new_zeros(n, T - 1, *f.shape[1:]), f.unsqueeze(1)], 1) for f in final)
        return y.reshape(*batch, y.shape[-1]), tuple(s.reshape(*batch, *s.shape[-2:]) for s in new)

    def _loop(self, x: torch.Tensor, states: States, init: torch.Tensor) -> tuple:
        """Python loop over time: reset where ``init``, one stacked step, keep states at segment ends."""
        n, T = init.shape
        ends = torch.cat([init[:, 1:], init.new_ones(n, 1)], 1)  # the last step of each segment
        ys, kept = [], []
        for t in range(T):
            if t:
                states = tuple(s.masked_fill(init[:, t, None, None], 0.0) for s in states)
            y, states = self._loop_step(x[:, t], states)
            ys.append(y)
            kept.append(tuple(s.masked_fill(~ends[:, t, None, None], 0.0) for s in states))
        return torch.stack(ys, 1), tuple(torch.stack([k[i] for k in kept], 1) for i in range(len(states)))

    def _kernels(self, x: torch.Tensor, first: States, init: torch.Tensor) -> tuple:
        """``recurrent_backend="triton"``: layer by layer through rl-kernels, keeping states at segment ends."""
        import rl_kernels

        opts = cast(dict, self._kernel_opts)
        layers, bias, _, dropout = self._cfg
        n, T = init.shape
        # CUDA: the Triton kernels; CPU: the kernels under Triton's interpreter (TRITON_INTERPRET=1), else the
        # pure-torch loop of rl-kernels (the kernels cannot run on CPU tensors)
        on_kernels = x.device.type == "cuda" or (rl_kernels.interpreting() and rl_kernels.triton_available())
        precision = opts["precision"]
        if precision == "auto":  # as torch's float32 matmuls
            precision = "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"
        kwargs = {
            "backend": "triton" if on_kernels else "torch",
            "recompute": opts["recompute"],
            "matmul_precision": precision,
        }
        lstm = len(self._state_names) == 2
        per_layer = []
        for layer in range(layers):
            w_ih, w_hh, b_ih, b_hh, _ = _layer_weights(self._params, layer, bias, False)
            if lstm:
                state = (first[0][:, layer], first[1][:, layer])
                per_layer.append(rl_kernels.lstm_with_resets(x, init, w_ih, w_hh, b_ih, b_hh, state, **kwargs))
            else:
                y = rl_kernels.gru_with_resets(x, init, w_ih, w_hh, b_ih, b_hh, first[0][:, layer], **kwargs)
                per_layer.append((y,))
            x = per_layer[-1][0]
            if dropout and self.training and layer < layers - 1:  # between layers, not after the last
                x = F.dropout(x, dropout, training=True)
        ends = torch.cat([init[:, 1:], init.new_ones(n, 1)], 1)[:, :, None, None]  # each segment's last step
        new = tuple(
            torch.stack([p[i] for p in per_layer], 2).masked_fill(~ends, 0.0) for i in range(len(self._state_names))
        )
        return per_layer[-1][0], new

    def _segmented(self, x: torch.Tensor, first: States, init: torch.Tensor) -> tuple:
        """Split each row at its resets, run the segments as one packed batch, scatter back."""
        n, T = init.shape
        starts = init.clone()
        starts[:, 0] = True
        flat_starts = starts.reshape(-1)
        seg = flat_starts.long().cumsum(0) - 1  # segment id of every (row, step), row-major
        start_idx = flat_starts.nonzero().squeeze(-1)  # flat index of each segment's first step
        num = start_idx.numel()
        lengths = torch.bincount(seg, minlength=num)
        pos = torch.arange(n * T, device=x.device) - start_idx[seg]  # step within the segment
        longest = int(lengths.max())
        padded = x.new_zeros(num, longest, x.shape[-1]).index_put((seg, pos), x.reshape(n * T, -1))
        # segments starting at step 0 take the row's state, the others start after a reset (zeros)
        row_seg = seg.view(n, T)[:, 0]
        h0 = tuple(f.new_zeros(num, *f.shape[1:]).index_put((row_seg,), f) for f in first)
        packed = pack_padded_sequence(padded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y_packed, final = self._fused(packed, h0)  # packing gives each segment's final state at its own length
        y_pad, _ = pad_packed_sequence(y_packed, batch_first=True, total_length=longest)
        y = y_pad[seg, pos].reshape(n, T, -1)
        end_idx = start_idx + lengths - 1
        new = tuple(
            f.new_zeros(n * T, *f.shape[1:]).index_put((end_idx,), f).reshape(n, T, *f.shape[1:]) for f in final
        )
        return y, new


# ---------------------------------------------------------------------------- public modules
class LSTMModule(_RecurrentModule):
    """An ``nn.LSTM`` that reads and writes TensorDict entries, in step or sequence mode, with resets.

    Reads ``in_keys = [input, h, c, is_init]`` and writes ``out_keys = [output, ("next", h), ("next", c)]``.
    States are ``[*batch, num_layers, H]`` (h is ``proj_size`` wide when ``proj_size > 0``); where
    ``is_init`` (batch shape; a trailing 1 is accepted) is True the state is zeroed first. Missing
    states start at zero; a missing ``is_init`` raises. See the module docstring for the two modes.

    Args:
        input_size, hidden_size, num_layers, bias, batch_first, dropout, proj_size, bidirectional:
            as ``nn.LSTM`` (``batch_first`` must be True and ``bidirectional`` False, as in TorchRL).
        python_based: run the cell math in torch ops instead of the fused kernel (traceable by
            ``torch.compile`` and ``vmap``; resets inside sequences handled by a loop over time).

    Keyword Args:
        in_key: the input key; the state keys are then ``"recurrent_state_h"``, ``"recurrent_state_c"``.
        in_keys: ``[input, h, c]`` or ``[input, h, c, reset]`` (exclusive with ``in_key``; the reset
            key defaults to ``"is_init"``).
        out_key: the output key; the next-state keys are then ``("next", "recurrent_state_h")``, ``("next", "recurrent_state_c")``.
        out_keys: ``[output, next_h, next_c]`` (exclusive with ``out_key``).
        device: device of a new LSTM.
        lstm: an existing ``nn.LSTM`` to wrap (its weights are shared; exclusive with the sizes).
        default_recurrent_mode: the mode outside any :class:`set_recurrent_mode` block (default step mode).
        recurrent_backend: TorchRL 0.14's fused-kernel options. ``"pad"`` (default): ``nn``'s kernel
            on the segments split at resets; ``"triton"``: rl-kernels' fused kernels in sequence mode
            (see the module docstring; ``ImportError`` without rl-kernels); others raise
            ``NotImplementedError``.
        recurrent_compute_dtype: ``torch.float32`` only.
        recurrent_matmul_precision: ``"auto"`` (torch's float32 matmul precision); with ``"triton"``
            also ``"ieee"`` or ``"tf32"`` for the in-kernel matmuls.
        recurrent_recompute: ``"none"``; with ``"triton"`` also ``"full"`` (the backward recomputes the
            gate activations instead of keeping them).

    Raises:
        NotImplementedError: for ``bidirectional=True`` and unsupported ``recurrent_*`` options
            (``proj_size > 0`` with ``recurrent_backend="triton"``).
        ImportError: for ``recurrent_backend="triton"`` without rl-kernels.
        ValueError: for bad sizes or keys, ``batch_first=False``; at call, for inputs of the wrong shape.
        KeyError: at call, naming a missing input or ``is_init`` entry.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules.recurrent import LSTMModule, set_recurrent_mode
        >>> lstm = LSTMModule(3, 8, num_layers=2, in_key="obs", out_key="features")
        >>> step = TensorDict(obs=torch.randn(4, 3), is_init=torch.ones(4, dtype=torch.bool), batch_size=[4])
        >>> step = lstm(step)
        >>> step["features"].shape, step["next", "recurrent_state_h"].shape
        (torch.Size([4, 8]), torch.Size([4, 2, 8]))
        >>> seq = TensorDict(obs=torch.randn(4, 10, 3), is_init=torch.rand(4, 10) < 0.2, batch_size=[4, 10])
        >>> with set_recurrent_mode(True):
        ...     lstm(seq)["features"].shape
        torch.Size([4, 10, 8])
        >>> lstm.recurrent_state_spec().shape, lstm.recurrent_state_spec()["recurrent_state_c"].shape
        (torch.Size([]), torch.Size([2, 8]))
    """

    _rnn_attr = "lstm"
    _state_names = ("recurrent_state_h", "recurrent_state_c")
    _cell = staticmethod(_lstm_cell)

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        proj_size: int = 0,
        bidirectional: bool = False,
        python_based: bool = False,
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
        lstm: nn.LSTM | None = None,
        default_recurrent_mode: bool | None = None,
        recurrent_backend: str | None = "pad",
        recurrent_compute_dtype: torch.dtype | None = torch.float32,
        recurrent_matmul_precision: str | None = "auto",
        recurrent_recompute: str | None = "none",
    ) -> None:
        kernel_opts = self._check_backend(
            "LSTMModule",
            recurrent_backend,
            recurrent_compute_dtype,
            recurrent_matmul_precision,
            recurrent_recompute,
            lstm.proj_size if isinstance(lstm, nn.LSTM) else proj_size,
        )
        self._check_rnn("LSTMModule", "LSTM", lstm, nn.LSTM, (input_size, hidden_size), batch_first, bidirectional)
        super().__init__()
        if lstm is None:
            lstm = nn.LSTM(
                input_size,
                hidden_size,
                num_layers=num_layers,
                bias=bias,
                batch_first=True,
                dropout=dropout,
                proj_size=proj_size,
                device=device,
            )
        self._setup(lstm, in_key, in_keys, out_key, out_keys, default_recurrent_mode, python_based)
        self._set_kernel_opts(kernel_opts, recurrent_backend, recurrent_matmul_precision, recurrent_recompute)


class GRUModule(_RecurrentModule):
    """An ``nn.GRU`` that reads and writes TensorDict entries, in step or sequence mode, with resets.

    Reads ``in_keys = [input, state, is_init]`` and writes ``out_keys = [output, ("next", state)]``; the
    state is ``[*batch, num_layers, hidden_size]``. Otherwise as :class:`LSTMModule`.

    Args:
        input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional: as ``nn.GRU``
            (``batch_first`` must be True and ``bidirectional`` False, as in TorchRL).
        python_based: run the cell math in torch ops instead of the fused kernel.

    Keyword Args:
        in_key: the input key; the state key is then ``"recurrent_state"``.
        in_keys: ``[input, state]`` or ``[input, state, reset]`` (exclusive with ``in_key``).
        out_key: the output key; the next-state key is then ``("next", "recurrent_state")``.
        out_keys: ``[output, next_state]`` (exclusive with ``out_key``).
        device: device of a new GRU.
        gru: an existing ``nn.GRU`` to wrap (exclusive with the sizes).
        default_recurrent_mode: the mode outside any :class:`set_recurrent_mode` block (default step mode).
        recurrent_backend: TorchRL 0.14's fused-kernel options. ``"pad"`` (default): ``nn``'s kernel
            on the segments split at resets; ``"triton"``: rl-kernels' fused kernels in sequence mode
            (see the module docstring; ``ImportError`` without rl-kernels); others raise
            ``NotImplementedError``.
        recurrent_compute_dtype: ``torch.float32`` only.
        recurrent_matmul_precision: ``"auto"`` (torch's float32 matmul precision); with ``"triton"``
            also ``"ieee"`` or ``"tf32"`` for the in-kernel matmuls.
        recurrent_recompute: ``"none"``; with ``"triton"`` also ``"full"`` (the backward recomputes the
            gate activations instead of keeping them).

    Raises:
        NotImplementedError: for ``bidirectional=True`` and unsupported ``recurrent_*`` options.
        ImportError: for ``recurrent_backend="triton"`` without rl-kernels.
        ValueError: for bad sizes or keys, ``batch_first=False``; at call, for inputs of the wrong shape.
        KeyError: at call, naming a missing input or ``is_init`` entry.

    Examples:
        >>> import torch
        >>> from tdict import TensorDict
        >>> from rl_objectives.modules.recurrent import GRUModule
        >>> gru = GRUModule(3, 8, in_key="obs", out_key="features", default_recurrent_mode=True)
        >>> td = TensorDict(obs=torch.randn(6, 3), is_init=torch.tensor([True, False, False, True, False, False]), batch_size=[6])
        >>> td = gru(td)
        >>> td["features"].shape, td["next", "recurrent_state"].shape
        (torch.Size([6, 8]), torch.Size([6, 1, 8]))
    """

    _rnn_attr = "gru"
    _state_names = ("recurrent_state",)
    _cell = staticmethod(_gru_cell)

    def __init__(
        self,
        input_size: int | None = None,
        hidden_size: int | None = None,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = True,
        dropout: float = 0.0,
        bidirectional: bool = False,
        python_based: bool = False,
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
        gru: nn.GRU | None = None,
        default_recurrent_mode: bool | None = None,
        recurrent_backend: str | None = "pad",
        recurrent_compute_dtype: torch.dtype | None = torch.float32,
        recurrent_matmul_precision: str | None = "auto",
        recurrent_recompute: str | None = "none",
    ) -> None:
        kernel_opts = self._check_backend(
            "GRUModule", recurrent_backend, recurrent_compute_dtype, recurrent_matmul_precision, recurrent_recompute
        )
        self._check_rnn("GRUModule", "GRU", gru, nn.GRU, (input_size, hidden_size), batch_first, bidirectional)
        super().__init__()
        if gru is None:
            gru = nn.GRU(
                input_size,
                hidden_size,
                num_layers=num_layers,
                bias=bias,
                batch_first=True,
                dropout=dropout,
                device=device,
            )
        self._setup(gru, in_key, in_keys, out_key, out_keys, default_recurrent_mode, python_based)
        self._set_kernel_opts(kernel_opts, recurrent_backend, recurrent_matmul_precision, recurrent_recompute)
