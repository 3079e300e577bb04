"""MjxSimulation: :class:`MujocoSimulation`'s interface over MJX, all simulations stepped as one JAX call.

The batch of ``mjx.Data`` lives in JAX; :meth:`MjxSimulation.step` runs ``nstep`` calls of
``mujoco.mjx.step`` for every simulation in one ``jax.jit(jax.vmap(...))`` (a ``fori_loop`` inside),
compiled once per ``nstep`` on the first call. Controls go in and fields come out through DLPack
(``jax.dlpack.from_dlpack`` / ``torch.from_dlpack``, no copy on the CPU); the fields are then widened
to the ``MjData`` dtypes (float64) for the task's NumPy code.

Precision: ``dtype=torch.float32`` (the default) computes in float32, whose rounding the contacts
amplify (HalfCheetah's states: 1e-4 from MuJoCo's after 5 env steps, order 1 after 20);
``dtype=torch.float64`` computes in float64 (within about 1e-8 of MuJoCo after 20 steps), with
``jax.enable_x64`` scoped to this class's own JAX calls: the global ``jax_enable_x64`` is left as it
is and does not change the precision here. The solver's warm start carries over as in MuJoCo.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
from typing import Any, Sequence

import numpy as np
import torch
from tdict.validation import check_positive_int

from .simulation import _POST_CONSTRAINT_FIELDS, _mujoco

__all__ = ["MjxSimulation"]


def _mjx() -> tuple[Any, Any]:
    """``(jax, mujoco.mjx)``, or an ImportError saying what to install."""
    try:
        import jax

        # mujoco.mjx prints a line for each optional Warp module it cannot import: not an error here
        with contextlib.redirect_stdout(io.StringIO()):
            from mujoco import mjx
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "backend='mjx' needs mujoco-mjx (and jax), which is not installed: pip install rl-envs[mjx]"
        ) from err
    return jax, mjx


class MjxSimulation:
    """``num_envs`` MJX simulations of ``model``, with the fields ``fields`` read back after each step.

    The same interface as :class:`MujocoSimulation` (``set_state``, ``read``, ``step``, ``close``,
    ``data`` for rendering), the physics in MJX (float32, see the module docstring).

    Args:
        model: a compiled ``mujoco.MjModel`` (MJX must support its features: else a ValueError).
        num_envs: the number of simulations.
        fields: the data fields besides ``qpos`` and ``qvel`` that :meth:`read` returns; a field
            MJX does not compute raises a ValueError naming it.
        num_threads: accepted for the interface; XLA chooses its own threads.
        dtype: ``torch.float32`` or ``torch.float64``, the precision MJX computes in.

    Examples:
        >>> import mujoco, numpy as np
        >>> model = mujoco.MjModel.from_xml_string(
        ...     "<mujoco><option gravity='0 0 0'/><worldbody><body><joint name='x' type='slide'/>"
        ...     "<geom size='.1'/></body></worldbody><actuator><motor joint='x'/></actuator></mujoco>")
        >>> sim = MjxSimulation(model, num_envs=3)
        >>> _ = sim.set_state(np.arange(3), np.zeros((3, 1)), np.ones((3, 1)))
        >>> state = sim.step(np.zeros((3, 1)), nstep=10)
        >>> state["qpos"].shape, bool(np.allclose(state["qpos"], 10 * model.opt.timestep))
        ((3, 1), True)
    """

    def __init__(
        self,
        model: Any,
        num_envs: int,
        fields: Sequence[str] = (),
        num_threads: int = 1,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        mujoco = _mujoco()
        jax, mjx = _mjx()
        num_envs = check_positive_int("MjxSimulation", "num_envs", num_envs)
        check_positive_int("MjxSimulation", "num_threads", num_threads)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"MjxSimulation: dtype must be torch.float32 or torch.float64, got {dtype!r}.")
        self.dtype = dtype
        self._mujoco, self._jax, self._mjx = mujoco, jax, mjx
        probe = mujoco.MjData(model)
        unknown = [f for f in fields if not isinstance(getattr(probe, f, None), np.ndarray)]
        if unknown:
            raise ValueError(f"MjxSimulation: {unknown} are not array fields of mujoco.MjData.")
        public = {f.name for f in dataclasses.fields(mjx.Data)}
        private = {f.name for f in dataclasses.fields(mjx.DataJAX)}
        missing = [f for f in fields if f not in public | private]
        if missing:
            raise ValueError(f"backend='mjx' cannot compute the MjData fields {missing}: use backend='mujoco'.")
        with self._precision():
            try:
                self._model = mjx.put_model(model, impl="jax")
                data = mjx.make_data(model, impl="jax")
            except NotImplementedError as err:
                raise ValueError(f"backend='mjx' does not support this model: {err}") from err
            self._fresh = jax.tree.map(lambda x: jax.numpy.broadcast_to(x, (num_envs, *x.shape)), data)
        self.model = model
        self.num_envs = num_envs
        self.num_threads = 1
        self.fields = ("qpos", "qvel", *fields)
        self._private = tuple(f in private and f not in public for f in self.fields)
        self._dtypes = {f: getattr(probe, f).dtype for f in self.fields}
        self._post_constraint = bool(_POST_CONSTRAINT_FIELDS.intersection(fields))
        # a fresh forward pass is needed after a reset only where a field depends on more than qpos/qvel
        self._forward_on_reset = len(self.fields) > 2
        self._device = next(iter(data.qpos.devices()))
        self._data = self._fresh
        self._steps: dict[int, Any] = {}
        self._reset = jax.jit(self._reset_fn)
        self._render_data: list[Any] = []
        self._render_stale = True

    def _precision(self) -> Any:
        """The scope of every JAX call here: x64 on for ``torch.float64``, off for ``torch.float32``."""
        return self._jax.enable_x64(self.dtype == torch.float64)

    # ------------------------------------------------------------------ the jitted functions
    def _outputs(self, data: Any) -> tuple[Any, ...]:
        return tuple(getattr(data._impl if p else data, f) for f, p in zip(self.fields, self._private))

    def _reset_fn(self, data: Any, fresh: Any, mask: Any, qpos: Any, qvel: Any) -> Any:
        jax, mjx = self._jax, self._mjx
        fresh = fresh.replace(qpos=qpos, qvel=qvel)
        if self._forward_on_reset:
            forward = mjx.forward
            if self._post_constraint:
                forward = lambda m, d: mjx.rne_postconstraint(m, mjx.forward(m, d))  # noqa: E731
            # mjx.forward writes normalised quaternions back into qpos; MuJoCo's leaves qpos as given
            fresh = jax.vmap(forward, in_axes=(None, 0))(self._model, fresh).replace(qpos=qpos)

        def pick(new: Any, old: Any) -> Any:
            return jax.numpy.where(mask.reshape(-1, *(1,) * (new.ndim - 1)), new, old)

        return jax.tree.map(pick, fresh, data)

    def _step_fn(self, nstep: int) -> Any:
        jax, mjx, model, post = self._jax, self._mjx, self._model, self._post_constraint

        def one(data: Any, ctrl: Any) -> Any:
            data = data.replace(ctrl=ctrl)
            data = jax.lax.fori_loop(0, nstep, lambda _, d: mjx.step(model, d), data)
            return mjx.rne_postconstraint(model, data) if post else data

        return jax.jit(jax.vmap(one))

    # ------------------------------------------------------------------ transfers
    def _to_jax(self, array: np.ndarray | torch.Tensor) -> Any:
        tensor = torch.as_tensor(array).to(dtype=self.dtype, device="cpu").contiguous()
        return self._jax.device_put(self._jax.dlpack.from_dlpack(tensor), self._device)

    def _to_numpy(self, data: Any, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        out = {}
        for field, value in zip(self.fields, self._outputs(data)):
            view = torch.from_dlpack(value).cpu().numpy()  # on the CPU: the JAX buffer itself, copied below
            view = view if rows is None else view[rows]
            out[field] = view.astype(self._dtypes[field], copy=True)
        return out

    # ------------------------------------------------------------------ the interface
    def set_state(self, indices: np.ndarray, qpos: np.ndarray, qvel: np.ndarray) -> dict[str, np.ndarray]:
        """Resets the simulations ``indices`` to ``(qpos, qvel)``; returns their fields (rows as ``indices``).

        As :meth:`MujocoSimulation.set_state`: fresh data (time, controls, warm start...), the
        state set and, where fields other than ``qpos``/``qvel`` are read, ``mjx.forward`` run.
        """
        model = self.model
        if qpos.shape != (len(indices), model.nq) or qvel.shape != (len(indices), model.nv):
            raise ValueError(
                f"MjxSimulation.set_state: expected qpos of shape {(len(indices), model.nq)} and qvel of shape "
                f"{(len(indices), model.nv)}, got {qpos.shape} and {qvel.shape}."
            )
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[indices] = True
        full_qpos = np.zeros((self.num_envs, model.nq))
        full_qvel = np.zeros((self.num_envs, model.nv))
        full_qpos[indices], full_qvel[indices] = qpos, qvel
        with self._precision():
            qpos_j, qvel_j = self._to_jax(full_qpos), self._to_jax(full_qvel)
            self._data = self._reset(self._data, self._fresh, self._jax.numpy.asarray(mask), qpos_j, qvel_j)
        self._render_stale = True
        return self._to_numpy(self._data, np.asarray(indices))

    def read(self) -> dict[str, np.ndarray]:
        """The current fields of every simulation, as ``[num_envs, ...]`` arrays."""
        return self._to_numpy(self._data)

    def step(self, ctrl: np.ndarray | torch.Tensor, nstep: int) -> dict[str, np.ndarray]:
        """Sets ``ctrl`` (``[num_envs, nu]``), runs ``nstep`` physics steps, returns the new fields.

        The first call for a given ``nstep`` compiles the step (seconds on the CPU).
        """
        step = self._steps.get(nstep)
        if step is None:
            step = self._steps[nstep] = self._step_fn(check_positive_int("MjxSimulation", "nstep", nstep))
        with self._precision():
            self._data = step(self._data, self._to_jax(ctrl))
        self._render_stale = True
        return self._to_numpy(self._data)

    @property
    def data(self) -> list[Any]:
        """The simulations as ``mujoco.MjData`` (copied back from MJX, for rendering)."""
        mujoco = self._mujoco
        if not self._render_data:
            self._render_data = [mujoco.MjData(self.model) for _ in range(self.num_envs)]
        if self._render_stale:
            state = self.read()
            for i, data in enumerate(self._render_data):
                data.qpos[:], data.qvel[:] = state["qpos"][i], state["qvel"][i]
                mujoco.mj_forward(self.model, data)
            self._render_stale = False
        return self._render_data

    def close(self) -> None:
        """Drops the compiled steps (the simulations stay readable)."""
        self._steps.clear()
