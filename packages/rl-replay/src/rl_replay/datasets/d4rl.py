"""D4RLExperienceReplay: a D4RL-format HDF5 file (from a local path) as a read-only replay buffer.

A D4RL file holds flat arrays with one row per step: ``observations``, ``actions``, ``rewards``,
``terminals``, optionally ``timeouts`` (time-limit ends), ``next_observations``, ``infos/*`` and
``metadata/*``. Episodes end where ``terminals | timeouts``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tdict import TensorDict, TensorDictBase

from ..samplers.base import Sampler
from ..writers import Writer
from .offline import OfflineDataset, read_h5, require_h5py, transitions

__all__ = ["D4RLExperienceReplay"]

_REQUIRED = ("observations", "actions", "rewards", "terminals")
_KNOWN = set(_REQUIRED) | {"timeouts", "next_observations", "infos", "metadata"}


def _as_td(tree: Any, n: int) -> Any:
    if isinstance(tree, dict):
        return TensorDict({k: _as_td(v, n) for k, v in tree.items()}, batch_size=[n])
    return tree


def _rows(tree: Any) -> set:
    if isinstance(tree, dict):
        return set().union(*(_rows(v) for v in tree.values())) if tree else set()
    return {tree.shape[0]}


class D4RLExperienceReplay(OfflineDataset):
    """A D4RL-format HDF5 file as a read-only :class:`TensorDictReplayBuffer` (TorchRL's name and layout).

    Each step is one item: ``observation``, ``action``, ``("next", "observation")``,
    ``("next", "reward")``, ``("next", "terminated"|"truncated"|"done")``, ``"episode"`` (counted
    from 0 along the file: a new episode starts after each ``terminals | timeouts`` row) and
    ``("info", key)`` for each ``infos/<key>`` array.

    Next observations come from ``next_observations`` when the file has them (every row kept, the
    flags as stored). Otherwise they are the following row of the same episode, as D4RL's
    ``qlearning_dataset`` builds them: a ``timeouts`` row has no next observation in the file, so it
    is dropped, and the step before it (the episode's last kept step) gets ``truncated=True``;
    ``terminals`` rows are kept with a zero next observation (it is never bootstrapped from); a
    last row that ends no episode is dropped too.

    The first construction converts the file once into ``<root>/<dataset_id>/``; later ones map
    those files without needing ``path`` (see :class:`OfflineDataset`).

    Args:
        dataset_id: the name of the converted copy (default: the file name without suffix).
        batch_size: the default ``sample()`` size.
        root: where the converted copy goes (default ``~/.cache/rl_replay/d4rl``).
        path: the D4RL ``.hdf5`` file (needed only to convert).
        download, sampler, writer, collate_fn, pin_memory, prefetch, transform, split_trajs, generator:
            as :class:`OfflineDataset` (nothing is ever downloaded).

    Examples:
        >>> import shutil, tempfile, h5py, numpy as np
        >>> tmp = tempfile.mkdtemp(prefix="d4rl_doctest_")
        >>> src = f"{tmp}/toy-v2.hdf5"
        >>> with h5py.File(src, "w") as f:
        ...     _ = f.create_dataset("observations", data=np.arange(5.0)[:, None])
        ...     _ = f.create_dataset("actions", data=np.zeros((5, 1)))
        ...     _ = f.create_dataset("rewards", data=np.ones(5))
        ...     _ = f.create_dataset("terminals", data=np.array([0, 1, 0, 0, 0], bool))
        ...     _ = f.create_dataset("timeouts", data=np.array([0, 0, 0, 0, 1], bool))
        >>> ds = D4RLExperienceReplay(batch_size=2, root=f"{tmp}/converted", path=src)
        >>> ds.dataset_id, ds[:]["observation"].squeeze(-1).tolist(), ds[:]["episode"].tolist()
        ('toy-v2', [0.0, 1.0, 2.0, 3.0], [0, 0, 1, 1])
        >>> ds[:]["next", "observation"].squeeze(-1).tolist(), ds[:]["next", "truncated"].tolist()
        ([1.0, 0.0, 3.0, 4.0], [False, False, False, True])
        >>> shutil.rmtree(tmp)
    """

    default_kind = "d4rl"
    source_format = "d4rl-hdf5"

    def __init__(
        self,
        dataset_id: str | None = None,
        batch_size: int | None = None,
        *,
        root: str | os.PathLike | None = None,
        path: str | os.PathLike | None = None,
        download: bool | str = False,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Callable | None = None,
        split_trajs: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        if dataset_id is None:
            if self.path is None:
                raise ValueError(
                    "D4RLExperienceReplay: give dataset_id (a converted copy under root) or path (a D4RL .hdf5 file)."
                )
            dataset_id = self.path.stem
        self._source_meta: dict = {}
        super().__init__(
            dataset_id,
            batch_size,
            root=root,
            download=download,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            split_trajs=split_trajs,
            generator=generator,
        )

    def _source_metadata(self) -> dict:
        return self._source_meta

    def _make_tensordict(self) -> TensorDictBase:
        if self.path is None:
            raise FileNotFoundError(
                f"D4RLExperienceReplay: no converted dataset {self.dataset_id!r} under {str(self.root)!r} and no path= "
                "to convert from (rl_replay never downloads: pass the local D4RL .hdf5 file as path=)."
            )
        if not self.path.is_file():
            raise FileNotFoundError(f"D4RLExperienceReplay: path={str(self.path)!r} is not a file.")
        h5py = require_h5py()
        try:
            f = h5py.File(self.path, "r")
        except OSError as err:
            raise ValueError(
                f"D4RLExperienceReplay: path={str(self.path)!r} is not a readable HDF5 file ({err})."
            ) from err
        skipped: list[str] = []
        with f:
            missing = [k for k in _REQUIRED if k not in f]
            if missing:
                raise ValueError(
                    f"D4RLExperienceReplay: {str(self.path)!r} lacks {missing} (it holds {sorted(f.keys())})."
                )
            src = {k: read_h5(f[k], k) for k in _REQUIRED}
            for k in ("timeouts", "next_observations"):
                if k in f:
                    src[k] = read_h5(f[k], k)
            infos = read_h5(f["infos"], "infos", skipped) if "infos" in f else {}
            meta = {}
            if "metadata" in f:
                for key, value in f["metadata"].items():
                    if not hasattr(value, "keys") and value.ndim == 0:
                        v = value[()]
                        v = (
                            v.decode("utf-8", "replace")
                            if isinstance(v, bytes)
                            else v.item()
                            if hasattr(v, "item")
                            else v
                        )
                        if isinstance(v, (str, int, float, bool)):
                            meta[key] = v
            ignored = sorted(k for k in f if k not in _KNOWN)
        rew = src["rewards"]
        if rew.ndim == 2 and rew.shape[1] == 1:
            rew = rew.squeeze(1)
        if rew.ndim != 1:
            raise ValueError(
                f"D4RLExperienceReplay: 'rewards' must have one value per step (shape [N]), got {list(rew.shape)}."
            )
        n = rew.shape[0]
        if n == 0:
            raise ValueError(f"D4RLExperienceReplay: {str(self.path)!r} holds no step.")
        for key, value in src.items():
            if key == "rewards":
                continue
            bad = _rows(value) - {n}
            if bad:
                raise ValueError(f"D4RLExperienceReplay: {key!r} has {sorted(bad)} rows, 'rewards' has {n}.")
        flags = {}
        for key in ("terminals", "timeouts"):
            value = src.get(key)
            if value is None:
                flags[key] = torch.zeros(n, dtype=torch.bool)
                continue
            if value.ndim == 2 and value.shape[1] == 1:
                value = value.squeeze(1)
            if value.shape != (n,):
                raise ValueError(f"D4RLExperienceReplay: {key!r} must have shape [{n}], got {list(value.shape)}.")
            flags[key] = value.bool()
        info = {}
        for key, value in infos.items():
            if isinstance(value, dict) or value.shape[0] != n:
                skipped.append(f"infos/{key}")
            else:
                info[key] = value
        term, tout = flags["terminals"], flags["timeouts"]
        ends = term | tout
        episode = torch.cumsum(ends.long(), 0) - ends.long()
        obs = _as_td(src["observations"], n)
        act = _as_td(src["actions"], n)
        info_td = TensorDict(info, batch_size=[n]) if info else None
        if "next_observations" in src:
            data = transitions(obs, act, _as_td(src["next_observations"], n), rew, term, tout, episode, info_td)
        else:
            index = torch.arange(n)
            has_next = (index + 1 < n) & ~ends
            keep = has_next | term
            if not bool(keep.any()):
                raise ValueError(f"D4RLExperienceReplay: {str(self.path)!r} holds no step with a next observation.")
            nxt = obs[(index + 1).clamp(max=n - 1)]
            nxt = (
                nxt.masked_fill(term.reshape(-1, *[1] * (nxt.ndim - 1)), 0)
                if isinstance(nxt, torch.Tensor)
                else nxt.apply(lambda x: x.masked_fill(term.reshape(-1, *[1] * (x.ndim - 1)), 0))
            )
            ep_k, term_k = episode[keep], term[keep]
            last = torch.ones_like(term_k)
            last[:-1] = ep_k[1:] != ep_k[:-1]
            trunc_k = last & ~term_k  # the episode's data stops here without a terminal: a cut
            data = transitions(
                obs[keep],
                act[keep],
                nxt[keep],
                rew[keep],
                term_k,
                trunc_k,
                ep_k,
                info_td[keep] if info_td is not None else None,
            )
        self._source_meta = {
            "path": str(self.path),
            "has_next_observations": "next_observations" in src,
            "has_timeouts": "timeouts" in src,
            "metadata": meta,
            "skipped_keys": sorted(skipped),
            "ignored_keys": ignored,
            "source_steps": n,
        }
        return data
