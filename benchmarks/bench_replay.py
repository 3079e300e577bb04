"""Replay buffers: ``rl_replay`` vs TorchRL 0.14's ``torchrl.data`` replay buffers, same process.

Usage::

    python benchmarks/bench_replay.py [--quick] [--out PATH] [--threads N] [--samples N] [--filter SUBSTR,...] [--list]

Same method as ``bench_tdict.py`` (one process, interleaved rounds, paired medians, 1 thread by
default). Items (issue 5): a TensorDict of ``observation[17]`` float32, ``action[6]`` float32,
``next/{observation[17], reward, done}`` with reward and done batch-shaped (no trailing dim);
capacity 1M. Buffers are filled to 1M items before timing unless a workload says otherwise (writes
then overwrite the oldest items, as in a full buffer). The columns:

- **ours**: ``rl_replay``; **torchrl**: ``torchrl.data`` 0.14 with the same storage, sampler and
  batch size; **ref**: a per-workload reference (see each workload's note): a plain-torch floor
  (preallocated tensors, no container) for the in-memory storage workloads, ``rl_replay``'s
  in-memory ``LazyTensorStorage`` for the memmap workloads.

Workloads (issue 5's targets in brackets):

- ``LazyTensorStorage`` ``extend(1000)`` and ``sample(256)``, for ``ReplayBuffer`` and
  ``TensorDictReplayBuffer``, ``RandomSampler`` on both sides [ours >= 2x torchrl]. ``sample`` runs
  at 1M items (a gather of random rows from ~170 MB: memory-bound) and at 10k items in the same
  1M-capacity storage (cache-resident: per-call overhead); the issue does not say which.
- ``PrioritizedReplayBuffer(alpha=0.7, beta=0.5)`` ``sample(256)`` + ``update_priority(256)`` at 1M
  items with random priorities [ours >= 1.5x torchrl *with its C++ extension*]. TorchRL's wheel
  ships an extension built for an older torch that does not load on torch 2.13; build it with
  ``benchmarks/torchrl_ext/build.sh`` (see there). When ``torchrl._torchrl`` does not load, the torchrl
  column is skipped with a note (TorchRL 0.14 has no pure-python segment tree to fall back to).
- ``SliceSampler(slice_len=32)`` ``sample(256)`` at 1M items in episodes of 50-500 steps ended by
  ``("next", "done")``, no caching (torchrl: ``cache_values=False``) [ours >= 8x torchrl].
- ``LazyMemmapStorage`` ``sample(256)`` (and ``extend(1000)`` for reference) [ours memmap at least
  0.5x the speed of ours in memory, i.e. ours/ref <= 2x]; torchrl's memmap storage for reference.

Each op's result is cross-checked between implementations on properties, not values (the RNGs
differ): batch shape, rows gathered consistently across keys (every leaf carries the item's id),
slices contiguous within one episode, priority weights present. An implementation that is not
importable yet (``rl_replay`` parts being written) is skipped with a note, never an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace as NS

import torch

from _harness import (
    import_ours,
    Comparison,
    Impl,
    Workload,
    fmt_ratio,
    fmt_us,
    machine_info,
    run_config,
    run_workload,
    summarize,
    write_report,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CAPACITY = 1_000_000
EXTEND = 1000
BATCH = 256
SLICE_LEN = 32
ALPHA, BETA = 0.7, 0.5
OBS, ACT = 17, 6


# ----------------------------------------------------------------------------- implementations
def _import_ours():
    return import_ours("rl_replay")[0]


def _ours_lib() -> NS:
    import tdict

    rl_replay = _import_ours()
    return NS(mod=rl_replay, TensorDict=tdict.TensorDict, get=lambda name: getattr(rl_replay, name))


def _torchrl_lib() -> NS:
    import logging

    import tensordict
    import torchrl.data as trd

    logging.getLogger("torchrl").setLevel(logging.WARNING)  # "Initialized LazyTensorStorage ..." on every buffer

    return NS(mod=trd, TensorDict=tensordict.TensorDict, get=lambda name: getattr(trd, name))


def torchrl_extension() -> str | None:
    """None when torchrl's C++ extension loads, else why it does not."""
    try:
        from torchrl._torchrl import MinSegmentTreeFp32, SumSegmentTreeFp32  # noqa: F401
    except Exception as e:  # noqa: BLE001 (any failure means: no extension)
        return f"{type(e).__name__}: {e}".splitlines()[0][:160]
    return None


def torchrl_extension_file() -> str | None:
    """The extension's file name (no directory: results must not carry this machine's paths)."""
    module = sys.modules.get("torchrl._torchrl")
    path = getattr(module, "__file__", None)
    return os.path.basename(path) if path else None


def load() -> tuple[list[Impl], list[str]]:
    notes: list[str] = []
    impls = []
    try:
        ours = _import_ours()
        impls.append(
            Impl(
                "ours", "rl_replay", "td", wrap=None, TensorDict=_ours_lib(), version=getattr(ours, "__version__", None)
            )
        )
    except ImportError as e:
        notes.append(f"skipping rl_replay ({e})")
    try:
        import torchrl

        impls.append(
            Impl("torchrl", "torchrl", "td", wrap=None, TensorDict=_torchrl_lib(), version=torchrl.__version__)
        )
    except ImportError as e:
        notes.append(f"skipping torchrl ({e})")
    impls.append(Impl("ref", "ref", "plain", wrap=None))
    return impls, notes


# ----------------------------------------------------------------------------- data
_SOURCE: dict = {}


def _episode_done(n: int, seed: int = 0) -> torch.Tensor:
    """done flags of episodes of 50-500 steps written back to back, the last one ending at item n-1."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(50, 501, (n // 50 + 1,), generator=gen)
    ends = lengths.cumsum(0)
    ends = ends[ends < n - 50]  # the last episode (at least 50 steps) ends at the storage's end
    done = torch.zeros(n, dtype=torch.bool)
    done[ends - 1] = True
    done[n - 1] = True
    return done


def source(n: int) -> dict:
    """The first n items (shared read-only by every implementation: storages copy on write).

    Every leaf carries the item's id (column 0 / the reward), so a gather that mixes rows shows up."""
    if n not in _SOURCE:
        gen = torch.Generator().manual_seed(n)
        ids = torch.arange(n, dtype=torch.float32)
        obs = torch.randn(n, OBS, generator=gen)
        obs[:, 0] = ids
        nobs = torch.randn(n, OBS, generator=gen)
        nobs[:, 0] = ids
        act = torch.rand(n, ACT, generator=gen) * 2 - 1
        act[:, 0] = ids
        done = _episode_done(n) if n == CAPACITY else torch.zeros(n, dtype=torch.bool)
        _SOURCE[n] = {
            "observation": obs,
            "action": act,
            "next": {"observation": nobs, "reward": ids.clone(), "done": done},
        }
    return _SOURCE[n]


def _td(lib: NS, data: dict, n: int):
    return lib.TensorDict(
        {
            "observation": data["observation"],
            "action": data["action"],
            "next": lib.TensorDict(data["next"], batch_size=[n]),
        },
        batch_size=[n],
    )


def _leaf(x, *key):
    for k in key:
        x = x[k]
    return x


def rows_consistent(batch) -> bool:
    """Every leaf of every sampled item comes from the same stored item."""
    ids = _leaf(batch, "next", "reward")
    return bool(
        (_leaf(batch, "observation")[..., 0] == ids).all()
        and (_leaf(batch, "action")[..., 0] == ids).all()
        and (_leaf(batch, "next", "observation")[..., 0] == ids).all()
    )


def _scratch(tag: str) -> str:
    return tempfile.mkdtemp(prefix=f"replaybench_{tag}_")


# ----------------------------------------------------------------------------- plain-torch floor
class PlainRing:
    """The floor: a nested dict of preallocated tensors, round-robin writes, uniform gathers."""

    def __init__(self, data: dict, capacity: int) -> None:
        self.store = self._map(data, lambda t: torch.empty((capacity, *t.shape[1:]), dtype=t.dtype))
        self.capacity, self.cursor, self.len = capacity, 0, 0
        self.extend(data)

    @staticmethod
    def _map(d: dict, fn):
        return {k: PlainRing._map(v, fn) if isinstance(v, dict) else fn(v) for k, v in d.items()}

    def _write(self, store: dict, data: dict, where: slice | torch.Tensor) -> None:
        for k, v in data.items():
            if isinstance(v, dict):
                self._write(store[k], v, where)
            elif isinstance(where, slice):
                store[k][where] = v
            else:
                store[k].index_copy_(0, where, v)

    def _gather(self, store: dict, index: torch.Tensor) -> dict:
        # index_select copies whole rows; ``v[index]`` (advanced indexing) is up to 3x slower on a cold 1M-row tensor
        return {
            k: self._gather(v, index) if isinstance(v, dict) else v.index_select(0, index) for k, v in store.items()
        }

    def extend(self, data: dict) -> torch.Tensor:
        n = len(data["observation"])
        index = (torch.arange(n) + self.cursor) % self.capacity
        wraps = self.cursor + n > self.capacity
        self._write(self.store, data, index if wraps else slice(self.cursor, self.cursor + n))
        self.cursor = (self.cursor + n) % self.capacity
        self.len = min(self.capacity, self.len + n)
        return index

    def sample(self, batch_size: int) -> dict:
        return self._gather(self.store, torch.randint(self.len, (batch_size,)))


# ----------------------------------------------------------------------------- setups
def _need(lib: NS, *names: str) -> list:
    return [lib.get(name) for name in names]  # AttributeError/ImportError: that part is not written yet


def _filled(rb, n: int = CAPACITY, lib: NS | None = None):
    rb.extend(_td(lib, source(n), n))
    return rb


def s_storage(buffer: str, op: str, fill: int = CAPACITY):
    """LazyTensorStorage(1M) holding ``fill`` items in a ReplayBuffer / TensorDictReplayBuffer, RandomSampler;
    extend(1000) or sample(256)."""

    def setup(impl: Impl) -> NS:
        chunk = source(EXTEND)
        if impl.name == "ref":
            ring = PlainRing(source(fill), CAPACITY)
            return NS(op=(lambda: ring.extend(chunk)) if op == "extend" else (lambda: ring.sample(BATCH)), rb=ring)
        lib = impl.TensorDict
        RB, Storage = _need(lib, buffer, "LazyTensorStorage")
        rb = _filled(RB(storage=Storage(CAPACITY)), fill, lib=lib)
        if op == "extend":
            data = _td(lib, chunk, EXTEND)
            return NS(op=lambda: rb.extend(data), rb=rb)
        return NS(op=lambda: rb.sample(BATCH), rb=rb)

    return setup


def s_memmap(op: str):
    """LazyMemmapStorage(1M) in a ReplayBuffer; ref: ours with the in-memory LazyTensorStorage."""

    def setup(impl: Impl) -> NS:
        if impl.name == "ref":
            lib, (RB, Storage) = _ours_lib(), _need(_ours_lib(), "ReplayBuffer", "LazyTensorStorage")
            storage, scratch = Storage(CAPACITY), None
        else:
            lib = impl.TensorDict
            RB, Storage = _need(lib, "ReplayBuffer", "LazyMemmapStorage")
            scratch = _scratch(impl.name)
            storage = Storage(CAPACITY, scratch_dir=scratch, existsok=True)
        rb = _filled(RB(storage=storage), lib=lib)
        if op == "extend":
            data = _td(lib, source(EXTEND), EXTEND)
            return NS(op=lambda: rb.extend(data), rb=rb, scratch=scratch)
        return NS(op=lambda: rb.sample(BATCH), rb=rb, scratch=scratch)

    return setup


def s_prioritized(mode: str):
    """PrioritizedReplayBuffer at 1M items with random priorities: ``mode`` "both" (the target: sample(256) then
    update_priority of the sampled indices), "sample" or "update" (256 fresh random indices). Compare with the
    uniform ``ReplayBuffer ... sample(256), 1M items`` row for what prioritization costs."""

    def setup(impl: Impl) -> NS:
        lib = impl.TensorDict
        PRB_, Storage = _need(lib, "PrioritizedReplayBuffer", "LazyTensorStorage")
        rb = _filled(PRB_(alpha=ALPHA, beta=BETA, storage=Storage(CAPACITY)), lib=lib)
        gen = torch.Generator().manual_seed(1)
        rb.update_priority(torch.arange(CAPACITY), torch.rand(CAPACITY, generator=gen) + 0.01)
        new_priority = torch.rand(BATCH, generator=gen) + 0.01
        if mode == "sample":
            return NS(op=lambda: rb.sample(BATCH, return_info=True), rb=rb)
        if mode == "update":
            # fresh random indices every call (a cycled pool would keep those tree paths in cache); randint is
            # part of both sides' time
            return NS(
                op=lambda: rb.update_priority(torch.randint(CAPACITY, (BATCH,), generator=gen), new_priority), rb=rb
            )

        def op():
            data, info = rb.sample(BATCH, return_info=True)
            rb.update_priority(info["index"], new_priority)
            return data, info

        return NS(op=op, rb=rb)

    return setup


def s_slice(impl: Impl) -> NS:
    """ref: torchrl's SliceSampler with cache_values=True (trajectory boundaries computed once), for reference."""
    lib = _torchrl_lib() if impl.name == "ref" else impl.TensorDict
    RB, Storage, Slice = _need(lib, "ReplayBuffer", "LazyTensorStorage", "SliceSampler")
    kwargs = {"slice_len": SLICE_LEN, "end_key": ("next", "done")}
    try:  # torchrl: no cache of trajectory boundaries; ours too, if it has such a cache
        sampler = Slice(**kwargs, cache_values=impl.name == "ref")
    except TypeError:
        if impl.name != "ours":
            raise
        sampler = Slice(**kwargs)
    rb = _filled(RB(storage=Storage(CAPACITY), sampler=sampler), lib=lib)
    return NS(op=lambda: rb.sample(BATCH), rb=rb)


def _teardown(ctx: NS) -> None:
    ctx.__dict__.pop("rb", None)
    ctx.__dict__.pop("op", None)
    scratch = getattr(ctx, "scratch", None)
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)


# ----------------------------------------------------------------------------- checks
def o_sample(ctx: NS, out) -> dict:
    return {"batch": list(_leaf(out, "observation").shape[:1]), "rows_consistent": rows_consistent(out)}


def o_extend(ctx: NS, out) -> dict:
    return {
        "indices": int(torch.as_tensor(out).numel()),
        "len": ctx.rb.len if isinstance(ctx.rb, PlainRing) else len(ctx.rb),
    }


def o_prioritized(ctx: NS, out) -> dict | None:
    if out is None:  # update_priority alone
        return None
    data, info = out
    weight = torch.as_tensor(info["priority_weight"])
    return {
        **o_sample(ctx, data),
        "index": list(torch.as_tensor(info["index"]).shape),
        "priority_weight": list(weight.shape),
        "weights_in_(0,1]": bool(((weight > 0) & (weight <= 1 + 1e-5)).all()),
    }


def o_slice(ctx: NS, out) -> dict:
    ids = _leaf(out, "next", "reward").reshape(-1, SLICE_LEN)
    done = _leaf(out, "next", "done").reshape(-1, SLICE_LEN)
    return {
        **o_sample(ctx, out),
        "slices": ids.shape[0],
        "contiguous": bool((ids.diff(dim=1) == 1).all()),
        "within_one_episode": bool(not done[:, :-1].any()),
    }


# ----------------------------------------------------------------------------- workloads
def _w(name, group, setup, observe, note, ref: str | None) -> tuple[Workload, str | None]:
    w = Workload(
        name, group, setup, td=lambda c: c.op, plain=lambda c: c.op, note=note, observe=observe, teardown=_teardown
    )
    return w, ref


EXT_RB = f"ReplayBuffer+LazyTensorStorage extend({EXTEND})"
EXT_TDRB = f"TensorDictReplayBuffer+LazyTensorStorage extend({EXTEND})"
SMALL = 10_000
SMP_RB = f"ReplayBuffer+LazyTensorStorage sample({BATCH}), 1M items"
SMP_TDRB = f"TensorDictReplayBuffer+LazyTensorStorage sample({BATCH}), 1M items"
SMP_RB_S = f"ReplayBuffer+LazyTensorStorage sample({BATCH}), 10k items"
SMP_TDRB_S = f"TensorDictReplayBuffer+LazyTensorStorage sample({BATCH}), 10k items"
PRB = f"PrioritizedReplayBuffer sample({BATCH})+update_priority({BATCH})"
PRB_S = f"PrioritizedReplayBuffer sample({BATCH})"
PRB_U = f"PrioritizedReplayBuffer update_priority({BATCH})"
SLICE = f"SliceSampler(slice_len={SLICE_LEN}) sample({BATCH}), no cache"
MM_SMP = f"LazyMemmapStorage sample({BATCH})"
MM_EXT = f"LazyMemmapStorage extend({EXTEND})"

FLOOR = "plain torch (preallocated tensors)"
IN_MEMORY = "rl_replay LazyTensorStorage (in memory)"
TRL_CACHED = "torchrl SliceSampler with cache_values=True"

# fmt: off
WORKLOADS = [
    _w(EXT_RB, "storage", s_storage("ReplayBuffer", "extend"), o_extend, "full 1M buffer; ref: plain-torch ring buffer", FLOOR),
    _w(EXT_TDRB, "storage", s_storage("TensorDictReplayBuffer", "extend"), o_extend, "writes 'index'; ref: plain-torch ring buffer", FLOOR),
    _w(SMP_RB, "storage", s_storage("ReplayBuffer", "sample"), o_sample, "RandomSampler, 1M items; ref: randint + gathers", FLOOR),
    _w(SMP_TDRB, "storage", s_storage("TensorDictReplayBuffer", "sample"), o_sample, "RandomSampler, 1M items, adds 'index'; ref: randint + gathers", FLOOR),
    _w(SMP_RB_S, "storage", s_storage("ReplayBuffer", "sample", SMALL), o_sample, "RandomSampler, capacity 1M holding 10k items (cache-resident): per-call overhead; ref: randint + gathers", FLOOR),
    _w(SMP_TDRB_S, "storage", s_storage("TensorDictReplayBuffer", "sample", SMALL), o_sample, "as above, adds 'index'", FLOOR),
    _w(PRB, "prioritized", s_prioritized("both"), o_prioritized, f"alpha={ALPHA}, beta={BETA}, 1M items, random priorities; torchrl with its C++ extension", None),
    _w(PRB_S, "prioritized", s_prioritized("sample"), o_prioritized, "the sample half alone (no target)", None),
    _w(PRB_U, "prioritized", s_prioritized("update"), o_prioritized, "the update half alone, 256 random indices (no target)", None),
    _w(SLICE, "slice", s_slice, o_slice, "1M items, episodes of 50-500 steps, end_key=('next','done'); torchrl cache_values=False", TRL_CACHED),
    _w(MM_SMP, "memmap", s_memmap("sample"), o_sample, "1M items on disk (page cache); ref: ours in memory", IN_MEMORY),
    _w(MM_EXT, "memmap", s_memmap("extend"), o_extend, "full 1M buffer; ref: ours in memory (no target)", IN_MEMORY),
]
# fmt: on

# (workload, ratio kind, threshold): "speedup" = torchrl/ours >= x; "ref" = ours/ref <= x
TARGETS = [
    (EXT_RB, "speedup", 2.0),
    (EXT_TDRB, "speedup", 2.0),
    (SMP_RB, "speedup", 2.0),
    (SMP_TDRB, "speedup", 2.0),
    (SMP_RB_S, "speedup", 2.0),
    (SMP_TDRB_S, "speedup", 2.0),
    (PRB, "speedup", 1.5),
    (SLICE, "speedup", 8.0),
    (MM_SMP, "ref", 2.0),
]


def paired_quartiles(res, num: str, den: str) -> list[float]:
    """First and third quartiles of the per-round ratios num/den: how much the paired speed-up moved."""
    q = statistics.quantiles([a / b for a, b in zip(res.samples_s[num], res.samples_s[den], strict=True)], n=4)
    return [round(q[0], 3), round(q[2], 3)]


def targets(rows: list[dict]) -> dict:
    by = {r["name"]: r for r in rows}
    checks = {}
    for name, kind, need in TARGETS:
        if name not in by:
            continue
        if kind == "speedup":
            value = by[name]["speedup_vs_peer"]
            label = f"{name}: ours >= {need:g}x torchrl"
            checks[label] = {"value": value, "met": None if value is None else value >= need}
        else:
            value = by[name]["ours_over_floor"]
            label = f"{name}: ours memmap >= 0.5x the speed of ours in memory (time ratio ours/ref <= {need:g})"
            checks[label] = {"value": value, "met": None if value is None else value <= need}
    return checks


def render(rows: list[dict], refs: dict[str, str | None], checks: dict) -> str:
    head = [
        "workload",
        "rl_replay (µs)",
        "torchrl (µs)",
        "ref (µs)",
        "speed-up vs torchrl [IQR]",
        "ours/ref",
        "torchrl/ref",
    ]
    body = [
        [
            x["name"],
            fmt_us(x["median_us"]["ours"]),
            fmt_us(x["median_us"]["torchrl"]),
            fmt_us(x["median_us"]["ref"]),
            fmt_ratio(x["speedup_vs_peer"])
            + (
                f" [{x['speedup_vs_peer_quartiles'][0]:.2f}-{x['speedup_vs_peer_quartiles'][1]:.2f}]"
                if x.get("speedup_vs_peer_quartiles")
                else ""
            ),
            fmt_ratio(x["ours_over_floor"]),
            fmt_ratio(x["peer_over_floor"]),
        ]
        for x in rows
    ]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join([cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    out = [line(head), "  ".join("-" * w for w in widths), *map(line, body), "", "ref column:"]
    out += [f"  {x['name']}: {refs.get(x['name']) or '—'}" for x in rows]
    out.append("")
    verdict = {True: "met", False: "NOT MET", None: "not measured"}
    out += [f"  {verdict[c['met']]}: {k} (measured {fmt_ratio(c['value'])})" for k, c in checks.items()]
    flagged = [x for x in rows if x["flags"]]
    out.append("flags:" if flagged else "flags: none")
    out += [f"  {x['name']}: " + "; ".join(x["flags"]) for x in flagged]
    return "\n".join(out)


def environment(impls: list[Impl], ext: str | None) -> dict:
    return machine_info(
        impls,
        "tensordict",
        "tdict",
        torchrl_extension="loads" if ext is None else f"does not load: {ext}",
        torchrl_extension_file=torchrl_extension_file(),
    )


def participants(w: Workload, impls: list[Impl], ref: str | None, ext: str | None) -> tuple[list[Impl], list[str]]:
    """The implementations that take part in a workload, and notes on the ones that do not."""
    notes, chosen = [], []
    for impl in impls:
        if impl.name == "ref" and ref is None:
            continue
        if impl.name == "ref" and ref == TRL_CACHED and not any(i.name == "torchrl" for i in impls):
            continue
        if impl.name == "torchrl" and w.group == "prioritized" and ext is not None:
            notes.append(
                f"torchrl skipped: its C++ extension does not load ({ext}); build it with benchmarks/torchrl_ext/build.sh"
            )
            continue
        if impl.name in ("ours", "torchrl"):
            names = {
                "prioritized": ["PrioritizedReplayBuffer"],
                "slice": ["SliceSampler"],
                "memmap": ["LazyMemmapStorage"],
            }
            try:
                _need(impl.TensorDict, *names.get(w.group, []))
            except Exception as e:  # noqa: BLE001 (not written yet, or an import error inside it)
                notes.append(
                    f"{impl.name} skipped: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                )
                continue
        chosen.append(impl)
    return chosen, notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="fewer samples (a few minutes, most of it filling 1M-item buffers)"
    )
    ap.add_argument("--out", default=str(HERE / "results" / "replay.json"))
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1; 0 = torch's default)")
    ap.add_argument("--samples", type=int, help="samples per workload and implementation (overrides the mode)")
    ap.add_argument("--filter", default="", help="comma-separated substrings of workload names (case-insensitive)")
    ap.add_argument("--list", action="store_true", help="print the workload names and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(w.name for w, _ in WORKLOADS))
        return 0
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
    warnings.filterwarnings("ignore")  # torchrl's extension/deprecation chatter would drown the table
    # ops here take 20 µs to 5 ms: a sample of >= 20 ms (10 ms under --quick) averages out scheduler preemption
    cfg = run_config(args.quick, args.samples)
    cfg = dataclasses.replace(cfg, target_sample_s=max(cfg.target_sample_s, 0.01 if args.quick else 0.02))
    wanted = [s.strip().lower() for s in args.filter.split(",") if s.strip()]
    chosen = [(w, r) for w, r in WORKLOADS if not wanted or any(s in w.name.lower() for s in wanted)]
    impls, notes = load()
    ext = torchrl_extension() if any(i.name == "torchrl" for i in impls) else "torchrl not installed"
    env = environment(impls, ext)
    for n in notes:
        print(f"note: {n}")
    print(
        f"torch {env['torch']}; {torch.get_num_threads()} thread(s); "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    )
    print(f"torchrl C++ extension: {env['torchrl_extension']}\n", flush=True)
    results, skipped, refs = [], {}, {}
    for i, (w, ref) in enumerate(chosen, 1):
        members, why = participants(w, impls, ref, ext)
        refs[w.name] = ref if any(m.name == "ref" for m in members) else None
        if why:
            skipped[w.name] = why
            for n in why:
                print(f"  note ({w.name}): {n}", file=sys.stderr)
        if not any(m.name == "ours" for m in members):
            print(
                f"  [{i:2d}/{len(chosen)}] {w.name:<58} skipped (rl_replay part not importable)",
                file=sys.stderr,
                flush=True,
            )
            continue
        t0 = __import__("time").perf_counter()
        reference = "torchrl" if any(m.name == "torchrl" for m in members) else "ours"
        results.append(run_workload(w, members, cfg, reference))
        print(
            f"  [{i:2d}/{len(chosen)}] {w.name:<58} {__import__('time').perf_counter() - t0:5.1f}s",
            file=sys.stderr,
            flush=True,
        )
    cmp = Comparison(
        "ours", "torchrl", "ref", {"ours": "rl_replay", "torchrl": "torchrl", "ref": "ref"}, max_over_floor=float("inf")
    )
    rows, summary = summarize(results, cmp)
    for r, res in zip(rows, results, strict=True):
        r["ref"] = refs.get(r["name"])
        r["skipped"] = skipped.get(r["name"], [])
        r["speedup_vs_peer_quartiles"] = paired_quartiles(res, "torchrl", "ours") if r["speedup_vs_peer"] else None
    checks = targets(rows)
    text = render(rows, refs, checks)
    skipped_all = [f"{name}: {n}" for name, ns in skipped.items() for n in ns]
    skipped_all += [
        f"{w.name}: not run (rl_replay part missing)" for w, _ in chosen if w.name not in {r["name"] for r in rows}
    ]
    if skipped_all:
        text += "\nskipped:\n" + "\n".join(f"  {s}" for s in skipped_all)
    print("\n" + text)
    report = {
        "benchmark": "replay",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "items": {
            "observation": [OBS],
            "action": [ACT],
            "next": {"observation": [OBS], "reward": [], "done": []},
            "capacity": CAPACITY,
        },
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "targets": checks,
        "skipped": skipped_all,
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
