"""What runs next to each sub-env: the buffer-reading runner, and the worker process loop around it.

SerialEnv drives one :class:`EnvRunner` per sub-env in the parent; ParallelEnv runs one per worker
process, inside :func:`worker_main`. Both read their inputs from, and write their outputs into, the
same kind of preallocated buffer, so the two produce identical results by construction.

Pipe protocol (parent -> worker; every command gets exactly one reply):

- ``("step", keys | None, extras)`` -> ``("stepped", written | None, extra)``: step with the root
  entries ``keys`` of the buffer (``None``: the same keys as last time); ``written``: the ``"next"``
  keys the env wrote (``None``: the same as last time). Tensors never travel through the pipe; the
  non-tensor entries (which have no buffer) do: ``extras`` in, ``extra`` out (None when there are none).
- ``("reset", keys, with_mask, kwargs, extras)`` -> ``("reset", written, extra)``.
- ``("seed", seed)`` -> ``("seeded", next_seed)``: what the env's ``set_seed(seed)`` returned.
- ``("attr", path, fetch)`` -> ``("attr", status, payload)``: the env's attribute at ``path`` (a tuple
  of names); ``status`` is ``"missing"``, ``"callable"`` (no payload), ``"ok"`` (payload: the value if
  ``fetch``) or ``"failed"`` (payload: the traceback).
- ``("call", path, args, kwargs)`` -> ``("called", status, payload)``: the method at ``path`` called;
  ``status`` ``"ok"`` (payload: its result) or ``"failed"`` (the traceback). A failing attribute or
  call is reported, not fatal: the worker keeps serving.
- ``("step_td", td)`` -> ``("stepped_td", out)`` and ``("reset_td", td | None, kwargs)`` -> ``("reset_td",
  out)``: ``use_buffers=False``, the TensorDicts themselves travel through the pipe (non-tensor entries
  included).
- ``("close",)`` -> the worker closes its env and exits (no reply).

The worker first sends ``("ready", None)``. A worker that raises sends ``("error", traceback)`` and
exits. Every worker beats and dies with its parent, even in the middle of a step (``tdict.liveness``).
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any, NamedTuple

import torch
from tdict import TensorDict, TensorDictBase

from tdict.liveness import die_with_parent, start_heartbeat

from ._forward import follow

__all__ = ["BufferLayout", "CommandServer", "EnvRunner", "worker_main"]


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


def _pick(out: TensorDictBase, keys: tuple) -> dict | None:
    if not keys:
        return None
    return {key: value for key in keys if (value := out.get(key, None)) is not None}


class EnvRunner:
    """One sub-env and its slice of the batched env's buffer.

    Args:
        env: the sub-env.
        root: this sub-env's slice of the buffer (``buffer[i]``): root entries plus ``"next"``.
        layout: which keys are outputs.
    """

    def __init__(self, env: Any, root: TensorDictBase | None, layout: BufferLayout | None) -> None:
        self.env = env
        if root is None or layout is None:  # use_buffers=False: step_td / reset_td only
            root, layout = TensorDict.unchecked({"next": {}}, torch.Size()), BufferLayout((), (), ())
        self.root: TensorDictBase = root
        self.mask_keys = layout.mask_keys
        self.next_dests = _dests(root.get("next"), layout.next_keys)
        self.reset_dests = _dests(root, layout.reset_out_keys)
        # outputs with no place in the buffer (non-tensor entries): sent back with the reply
        self.next_extra = tuple(k for k in layout.next_keys if k not in dict(self.next_dests))
        self.reset_extra = tuple(k for k in layout.reset_out_keys if k not in dict(self.reset_dests))
        self._inputs: dict = {}  # key tuple -> root.select(*keys): views, refreshed by in-place writes
        self._checked: set = set()
        self._validate = bool(getattr(env, "validate_actions", False))  # its step() is bypassed

    def _input(self, keys: tuple) -> TensorDictBase:
        view = self._inputs.get(keys)
        if view is None:
            view = self._inputs[keys] = self.root.select(*keys)
        return view

    def step(self, keys: tuple, extras: dict | None = None) -> tuple[tuple, dict | None]:
        """Steps the env on the buffer's root entries ``keys`` (plus the non-tensor ``extras``); returns
        the ``"next"`` keys written and the non-tensor outputs (None when the env has none)."""
        td = self._input(keys)
        if extras:
            td = td.copy().update(extras)
        if self._validate:
            self.env._validate_actions(td, self.env._keys())
        out = self.env._step(td)
        return self._write(self.next_dests, out, "_step"), _pick(out, self.next_extra)

    def reset(self, keys: tuple, with_mask: bool, kwargs: dict, extras: dict | None = None) -> tuple:
        """Resets the env (with the buffer's ``keys``, the non-tensor ``extras`` and, if ``with_mask``,
        its ``"_reset"`` masks); returns the keys written and the non-tensor outputs."""
        keys = keys + self.mask_keys if with_mask else keys
        # a private copy: the env's reset may update its input in place
        td = self.root.select(*keys).clone() if keys or extras else None
        if extras:
            assert td is not None
            td.update(extras)
        out = self.env.reset(td, **kwargs)
        return self._write(self.reset_dests, out, "reset"), _pick(out, self.reset_extra)

    def step_td(self, td: TensorDictBase) -> TensorDictBase:
        """``use_buffers=False``: steps the env on ``td`` (its row of the root); returns its output."""
        if self._validate:
            self.env._validate_actions(td, self.env._keys())
        return self.env._step(td)

    def reset_td(self, td: TensorDictBase | None, kwargs: dict) -> TensorDictBase:
        """``use_buffers=False``: resets the env with ``td`` (its row, or None); returns the root entries."""
        return self.env.reset(td, **kwargs).exclude("next")

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


class CommandServer:
    """Serves the pipe protocol's commands (module docstring) for one runner: the loop of a worker
    process, or ParallelEnv's in-process worker (``serial_for_single``)."""

    def __init__(self, runner: EnvRunner) -> None:
        self.runner = runner
        self.last_keys: tuple = ()
        self.last_written: tuple | None = None

    def handle(self, message: tuple) -> tuple:
        """The reply to ``message`` (any command but ``"close"``)."""
        command, runner = message[0], self.runner
        if command == "step":
            if message[1] is not None:
                self.last_keys = message[1]
            written, extra = runner.step(self.last_keys, message[2])
            reply = ("stepped", None if written == self.last_written else written, extra)
            self.last_written = written
            return reply
        if command == "reset":
            return ("reset", *runner.reset(message[1], message[2], message[3], message[4]))
        if command == "step_td":
            return ("stepped_td", runner.step_td(message[1]))
        if command == "reset_td":
            return ("reset_td", runner.reset_td(message[1], message[2]))
        if command == "seed":
            return ("seeded", runner.seed(message[1]))
        if command == "attr":
            return ("attr", *_attribute(runner.env, message[1], message[2]))
        if command == "call":
            return ("called", *_call(runner.env, message[1], message[2], message[3]))
        raise ValueError(f"ParallelEnv worker: unknown command {command!r}.")


def worker_main(
    index: int,
    create_env_fn: Any,
    buffer: TensorDictBase | None,
    layout: BufferLayout | None,
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
        runner = EnvRunner(env, None if buffer is None else buffer[index], layout)
        del buffer  # only this worker's slice is kept
        conn.send(("ready", None))
        server = CommandServer(runner)
        while True:
            message = conn.recv()  # the heartbeat thread ends this process if the parent dies meanwhile
            if message[0] == "close":
                return
            reply = server.handle(message)
            try:  # pickled whole before anything is written: an attribute that does not pickle is reported
                conn.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError, RuntimeError):
                if reply[0] not in ("attr", "called"):
                    raise
                conn.send((reply[0], "failed", traceback.format_exc()))
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
