"""What runs next to each sub-env: the buffer-reading runner, and the worker process loop around it.

SerialEnv drives one :class:`EnvRunner` per sub-env in the parent; ParallelEnv runs one per worker
process, inside :func:`worker_main`. Both read their inputs from, and write their outputs into, the
same kind of preallocated buffer, so the two produce identical results by construction.

Pipe protocol (parent -> worker; every command gets exactly one reply):

- ``("step", keys | None)`` -> ``("stepped", written | None)``: step with the root entries ``keys``
  of the buffer (``None``: the same keys as last time); ``written``: the ``"next"`` keys the env
  wrote (``None``: the same as last time). Tensors never travel through the pipe.
- ``("reset", keys, with_mask, kwargs)`` -> ``("reset", written)``.
- ``("seed", seed)`` -> ``("seeded", next_seed)``: what the env's ``set_seed(seed)`` returned.
- ``("attr", path, fetch)`` -> ``("attr", status, payload)``: the env's attribute at ``path`` (a tuple
  of names); ``status`` is ``"missing"``, ``"callable"`` (no payload), ``"ok"`` (payload: the value if
  ``fetch``) or ``"failed"`` (payload: the traceback).
- ``("call", path, args, kwargs)`` -> ``("called", status, payload)``: the method at ``path`` called;
  ``status`` ``"ok"`` (payload: its result) or ``"failed"`` (the traceback). A failing attribute or
  call is reported, not fatal: the worker keeps serving.
- ``("close",)`` -> the worker closes its env and exits (no reply).

The worker first sends ``("ready", None)``. A worker that raises sends ``("error", traceback)`` and
exits. Every worker beats and dies with its parent, even in the middle of a step (``tdict.liveness``).
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any, NamedTuple

import torch
from tdict import TensorDictBase

from tdict.liveness import die_with_parent, start_heartbeat

from ._forward import follow

__all__ = ["BufferLayout", "EnvRunner", "worker_main"]


class BufferLayout(NamedTuple):
    """The keys of the buffer a runner writes: ``"next"`` outputs, reset outputs, ``"_reset"`` masks."""

    next_keys: tuple
    reset_out_keys: tuple
    mask_keys: tuple


def _dests(td: TensorDictBase, keys: tuple) -> tuple:
    out = []
    for key in keys:
        value = td.get(key)
        if isinstance(value, torch.Tensor):  # non-tensor entries have no storage to write into
            out.append((key, value))
    return tuple(out)


class EnvRunner:
    """One sub-env and its slice of the batched env's buffer.

    Args:
        env: the sub-env.
        root: this sub-env's slice of the buffer (``buffer[i]``): root entries plus ``"next"``.
        layout: which keys are outputs.
    """

    def __init__(self, env: Any, root: TensorDictBase, layout: BufferLayout) -> None:
        self.env = env
        self.root = root
        self.mask_keys = layout.mask_keys
        self.next_dests = _dests(root.get("next"), layout.next_keys)
        self.reset_dests = _dests(root, layout.reset_out_keys)
        self._inputs: dict = {}  # key tuple -> root.select(*keys): views, refreshed by in-place writes
        self._checked: set = set()
        self._validate = bool(getattr(env, "validate_actions", False))  # its step() is bypassed

    def _input(self, keys: tuple) -> TensorDictBase:
        view = self._inputs.get(keys)
        if view is None:
            view = self._inputs[keys] = self.root.select(*keys)
        return view

    def step(self, keys: tuple) -> tuple:
        """Steps the env on the buffer's root entries ``keys``; returns the ``"next"`` keys written."""
        td = self._input(keys)
        if self._validate:
            self.env._validate_actions(td, self.env._keys())
        out = self.env._step(td)
        return self._write(self.next_dests, out, "_step")

    def reset(self, keys: tuple, with_mask: bool, kwargs: dict) -> tuple:
        """Resets the env (with the buffer's ``keys`` and, if ``with_mask``, its ``"_reset"`` masks)."""
        keys = keys + self.mask_keys if with_mask else keys
        # a private copy: the env's reset may update its input in place
        td = self.root.select(*keys).clone() if keys else None
        out = self.env.reset(td, **kwargs)
        return self._write(self.reset_dests, out, "reset")

    def seed(self, seed: int | None) -> int | None:
        """Seeds the env; returns the next seed (what its ``set_seed`` returned)."""
        return self.env.set_seed(seed)

    def _write(self, dests: tuple, out: TensorDictBase, what: str) -> tuple:
        check = what not in self._checked  # shapes and dtypes are checked once, not on the hot path
        written = []
        for key, dest in dests:
            value = out.get(key, None)
            if value is None:
                continue
            if check and (
                not isinstance(value, torch.Tensor) or value.shape != dest.shape or value.dtype != dest.dtype
            ):
                got = (
                    f"shape {list(value.shape)} and dtype {value.dtype}"
                    if isinstance(value, torch.Tensor)
                    else type(value).__name__
                )
                raise ValueError(
                    f"{type(self.env).__name__}.{what} output {key!r}: expected shape {list(dest.shape)} and dtype "
                    f"{dest.dtype} (from the specs), got {got}."
                )
            dest.copy_(value)
            written.append(key)
        self._checked.add(what)
        return tuple(written)


def _attribute(env: Any, path: tuple, fetch: bool) -> tuple[str, Any]:
    try:
        value = follow(env, path)
    except AttributeError:
        return "missing", None
    except Exception:
        return "failed", traceback.format_exc()
    if callable(value):
        return "callable", None
    return "ok", value if fetch else None


def _call(env: Any, path: tuple, args: tuple, kwargs: dict) -> tuple[str, Any]:
    try:
        return "ok", follow(env, path)(*args, **kwargs)
    except Exception:
        return "failed", traceback.format_exc()


def worker_main(
    index: int,
    create_env_fn: Any,
    buffer: TensorDictBase,
    layout: BufferLayout,
    conn: Any,
    parent_pid: int,
    num_threads: int | None,
    beats: torch.Tensor,
    heartbeat_interval: float,
    kernel_signal: bool,
) -> None:
    """The body of ParallelEnv's worker ``index``: builds its env and serves the parent's commands."""
    die_with_parent(parent_pid, kernel_signal)
    start_heartbeat(beats, index, heartbeat_interval, parent_pid)  # before the env: its construction may be slow
    env = None
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        env = create_env_fn()
        runner = EnvRunner(env, buffer[index], layout)
        del buffer  # only this worker's slice is kept
        conn.send(("ready", None))
        last_keys: tuple = ()
        last_written: tuple | None = None
        while True:
            message = conn.recv()  # the heartbeat thread ends this process if the parent dies meanwhile
            command = message[0]
            if command == "step":
                if message[1] is not None:
                    last_keys = message[1]
                written = runner.step(last_keys)
                conn.send(("stepped", None if written == last_written else written))
                last_written = written
            elif command == "reset":
                conn.send(("reset", runner.reset(message[1], message[2], message[3])))
            elif command == "seed":
                conn.send(("seeded", runner.seed(message[1])))
            elif command in ("attr", "call"):
                reply = (
                    ("attr", *_attribute(env, message[1], message[2]))
                    if command == "attr"
                    else ("called", *_call(env, message[1], message[2], message[3]))
                )
                try:  # pickled whole before anything is written: a value that does not pickle is reported
                    conn.send(reply)
                except (pickle.PicklingError, TypeError, AttributeError, RuntimeError):
                    conn.send((reply[0], "failed", traceback.format_exc()))
            elif command == "close":
                return
            else:
                raise ValueError(f"ParallelEnv worker {index}: unknown command {command!r}.")
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return
    except BaseException:
        try:
            conn.send(("error", traceback.format_exc()))
        except Exception:
            pass
    finally:
        if env is not None:
            try:
                env.close()
            except Exception:
                pass
        conn.close()
